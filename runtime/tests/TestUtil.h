//===- TestUtil.h - Helpers shared by the runtime tests ---------*- C++ -*-===//

#ifndef ZTRT_TESTS_TESTUTIL_H
#define ZTRT_TESTS_TESTUTIL_H

#include "cpu/CpuBackend.h"
#include "src/Context.h"
#include "src/Json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <memory>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace ztrt::test {

inline std::unique_ptr<ztrt_ctx> cpuContext() {
  return std::make_unique<ztrt_ctx>(createCpuBackend());
}

/// A fresh directory, removed with its contents at the end of the test.
class TempDir {
public:
  TempDir() {
    char pattern[] = "/tmp/ztrt-test-XXXXXX";
    char *made = mkdtemp(pattern);
    EXPECT_NE(made, nullptr);
    dir = made ? made : "/tmp";
  }
  ~TempDir() { std::system(("rm -rf '" + dir + "'").c_str()); }
  std::string path(const std::string &name) const { return dir + "/" + name; }
  /// Names of the directory's entries, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    if (DIR *d = opendir(dir.c_str())) {
      while (dirent *e = readdir(d))
        if (std::string(e->d_name) != "." && std::string(e->d_name) != "..")
          names.push_back(e->d_name);
      closedir(d);
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  const std::string &root() const { return dir; }

private:
  std::string dir;
};

inline void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Deterministic test data in [-1, 1) (a tiny LCG; not the runtime's RNG).
inline std::vector<float> testValues(size_t n, uint32_t seed) {
  std::vector<float> out(n);
  uint32_t state = seed * 2654435761u + 1;
  for (float &v : out) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / 8388608.0f - 1.0f;
  }
  return out;
}

/// Open MPI's mpirun refuses to run as root (CI does) and to start more
/// ranks than cores (CI has 2) unless told; other launchers ignore these.
inline void allowMpiJobsHere() {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
}

struct ProcessResult {
  /// Exit status; -1 if killed by a signal (or by the timeout).
  int status;
  std::string out, err;
  bool timedOut;
};

/// Runs `args` (args[0] is the program's path) with stdout and stderr
/// captured in files next to `dir`, in a process group of its own that is
/// killed as a whole after `timeoutSeconds` (so that a hung MPI job cannot
/// hang the test).
inline ProcessResult runProcess(const TempDir &dir,
                                std::vector<std::string> args,
                                int timeoutSeconds = 120) {
  std::string outPath = dir.root() + ".stdout",
              errPath = dir.root() + ".stderr";
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    int out = open(outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char *> argv;
    for (std::string &arg : args)
      argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid, pid); // Also here: the child may not have run yet.
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSeconds);
  int status = 0;
  bool timedOut = false;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      timedOut = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ProcessResult r{WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                  readBytes(outPath), readBytes(errPath), timedOut};
  unlink(outPath.c_str());
  unlink(errPath.c_str());
  return r;
}

inline size_t countLines(const std::string &s) {
  return std::count(s.begin(), s.end(), '\n');
}

/// The JSON document in `path` (a test failure, naming the file, if it
/// does not parse).
inline JsonValue readJson(const std::string &path) {
  JsonValue value;
  std::string error;
  EXPECT_TRUE(parseJson(readBytes(path), value, error))
      << path << ": " << error;
  return value;
}

/// The integer `key` of a JSON object (-1 and a test failure if absent).
inline int64_t member(const JsonValue &object, const char *key) {
  const JsonValue *v = object.find(key);
  int64_t out = -1;
  EXPECT_TRUE(v && v->getInt64(out)) << key;
  return out;
}

} // namespace ztrt::test

#endif // ZTRT_TESTS_TESTUTIL_H
