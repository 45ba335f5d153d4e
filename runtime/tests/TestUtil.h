//===- TestUtil.h - Helpers shared by the runtime tests ---------*- C++ -*-===//

#ifndef ZTRT_TESTS_TESTUTIL_H
#define ZTRT_TESTS_TESTUTIL_H

#include "backends/cpu/CpuBackend.h"
#include "step/Context.h"
#include "base/Json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace ztrt {

/// How gtest names a CommMode parameter (found by argument-dependent lookup).
inline void PrintTo(CommMode mode, std::ostream *os) {
  *os << (mode == CommMode::Thread ? "CommMode::Thread"
                                   : "CommMode::Automatic");
}

} // namespace ztrt

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
inline Json readJson(const std::string &path) {
  Json value;
  std::string error;
  EXPECT_TRUE(parseJson(readBytes(path), value, error))
      << path << ": " << error;
  return value;
}

/// The integer `key` of a JSON object (-1 and a test failure if absent).
inline int64_t member(const Json &object, const char *key) {
  const Json *v = jsonFind(object, key);
  int64_t out = -1;
  EXPECT_TRUE(v && jsonInt64(*v, out)) << key;
  return out;
}

/// What checkTrace() found in a trace file.
struct TraceSummary {
  /// Complete events per name ("matmul", "step 3", "wait", ...).
  std::map<std::string, int> names;
  int steps = 0;
  /// Events on the communication track.
  int collectives = 0;
};

/// Checks the structure of rank `rank`'s --trace file (Chrome trace-event
/// JSON) and returns what it holds: the metadata names the process "rank
/// <rank>" and threads 1 "compute" and 2 "communication"; every complete
/// event has pid `rank`, a named tid, ts >= 0 and dur >= 0, and the events
/// of each track nest or are disjoint; every
/// compute and communication event lies inside a step when there are
/// steps; a wait or synchronous collective ends after the collective it
/// names (same handle and kind), which a synchronous one contains.
///
/// Containment is exact in the recorded nanoseconds (the clock is
/// monotonic and each check is a happens-before: a kernel runs between its
/// step's two clock readings; a collective is queued after its start and
/// published before its wait returns). The file has microseconds with 3
/// decimals, exact decimal renderings of those nanoseconds; parsing rounds
/// monotonically, but an end (ts + dur) is a double sum, hence the
/// tolerance of one nanosecond (0.001 us), far above that rounding error
/// and below any real violation.
inline TraceSummary checkTrace(const Json &trace, int rank) {
  constexpr double kEps = 1e-3;
  TraceSummary summary;
  const Json *events = jsonFind(trace, "traceEvents");
  EXPECT_TRUE(events && events->is_array());
  if (!events)
    return summary;
  const Json *unit = jsonFind(trace, "displayTimeUnit");
  EXPECT_TRUE(unit && jsonText((*unit)) == "ms");
  struct Span {
    double begin, end;
  };
  std::vector<Span> steps;
  std::map<int64_t, std::pair<std::string, Span>> comm;
  struct Blocked {
    std::string name, kind;
    int64_t handle;
    Span span;
  };
  std::vector<Blocked> blocked;
  std::vector<std::pair<std::string, Span>> compute;
  std::map<int64_t, std::vector<Span>> others;
  std::map<std::string, std::string> metadata;
  for (const Json &e : (*events)) {
    const Json *ph = jsonFind(e, "ph");
    const Json *name = jsonFind(e, "name");
    EXPECT_TRUE(ph && name && name->is_string());
    if (!ph || !name)
      continue;
    EXPECT_EQ(member(e, "pid"), rank);
    const int64_t tid = member(e, "tid");
    const Json *args = jsonFind(e, "args");
    if (jsonText((*ph)) == "M") {
      const Json *value = args ? jsonFind(*args, "name") : nullptr;
      if (value)
        metadata[jsonText((*name)) + "/" + std::to_string(tid)] =
            jsonText((*value));
      continue;
    }
    EXPECT_EQ(jsonText((*ph)), "X") << jsonText((*name));
    const Json *ts = jsonFind(e, "ts"), *dur = jsonFind(e, "dur");
    EXPECT_TRUE(ts && dur) << jsonText((*name));
    if (!ts || !dur)
      continue;
    EXPECT_GE(jsonNumber(*ts), 0.0) << jsonText((*name));
    EXPECT_GE(jsonNumber(*dur), 0.0) << jsonText((*name));
    Span span{jsonNumber(*ts), jsonNumber(*ts) + jsonNumber(*dur)};
    ++summary.names[jsonText((*name))];
    if (tid == 2) {
      ++summary.collectives;
      EXPECT_TRUE(args && jsonFind(*args, "elements") &&
                  jsonFind(*args, "bytes"))
          << jsonText((*name));
      int64_t handle = args ? member(*args, "handle") : -1;
      EXPECT_TRUE(
          comm.emplace(handle, std::pair{jsonText((*name)), span}).second)
          << "handle " << handle << " twice";
      continue;
    }
    if (tid != 1) { // the I/O lanes and the host step track
      others[tid].push_back(span);
      continue;
    }
    if (jsonText((*name)).rfind("step ", 0) == 0) {
      ++summary.steps;
      steps.push_back(span);
      continue;
    }
    compute.push_back({jsonText((*name)), span});
    if (args && jsonFind(*args, "handle")) {
      const Json *kind = jsonFind(*args, "kind");
      EXPECT_NE(kind, nullptr) << jsonText((*name));
      blocked.push_back({jsonText((*name)), kind ? jsonText((*kind)) : "",
                         member(*args, "handle"), span});
    }
  }
  EXPECT_EQ(metadata["process_name/0"], "rank " + std::to_string(rank));
  EXPECT_EQ(metadata["thread_name/1"], "compute");
  EXPECT_EQ(metadata["thread_name/2"], "communication");

  auto inside = [&](const Span &s, const Span &outer) {
    return s.begin >= outer.begin - kEps && s.end <= outer.end + kEps;
  };
  auto inSomeStep = [&](const Span &s) {
    return std::any_of(steps.begin(), steps.end(),
                       [&](const Span &step) { return inside(s, step); });
  };
  if (!steps.empty()) {
    for (const auto &[name, span] : compute)
      EXPECT_TRUE(inSomeStep(span)) << name << " at " << span.begin;
    for (const auto &[handle, named] : comm)
      EXPECT_TRUE(inSomeStep(named.second))
          << named.first << " " << handle << " at " << named.second.begin;
  }
  // Perfetto shows only slices that nest perfectly or are disjoint on
  // their track: the compute track is steps around sequential calls, the
  // communication thread does one collective at a time.
  auto checkNesting = [&](std::vector<Span> spans, const char *track) {
    std::sort(spans.begin(), spans.end(), [](const Span &a, const Span &b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
    });
    std::vector<double> open;
    for (const Span &s : spans) {
      while (!open.empty() && open.back() <= s.begin + kEps)
        open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(s.end, open.back() + kEps)
            << track << ": the slice at " << s.begin
            << " overlaps another partially";
      }
      open.push_back(s.end);
    }
  };
  std::vector<Span> computeSpans = steps, commSpans;
  for (const auto &[name, span] : compute)
    computeSpans.push_back(span);
  for (const auto &[handle, named] : comm)
    commSpans.push_back(named.second);
  checkNesting(computeSpans, "compute");
  checkNesting(commSpans, "communication");
  // Every other track is named and nests too (I/O transfers overlap, and
  // are laid out on as many lanes as are in flight at once).
  for (const auto &[tid, spans] : others) {
    const std::string track = metadata["thread_name/" + std::to_string(tid)];
    EXPECT_FALSE(track.empty()) << "events on unnamed track " << tid;
    checkNesting(spans, track.c_str());
  }

  for (const Blocked &b : blocked) {
    auto it = comm.find(b.handle);
    EXPECT_NE(it, comm.end()) << b.name << " of handle " << b.handle;
    if (it == comm.end())
      continue;
    EXPECT_EQ(it->second.first, b.kind) << "handle " << b.handle;
    EXPECT_LE(it->second.second.end, b.span.end + kEps)
        << b.name << " returned before collective " << b.handle << " ended";
    if (b.name != "wait") {
      EXPECT_TRUE(inside(it->second.second, b.span))
          << b.name << " does not contain collective " << b.handle;
    }
  }
  return summary;
}

} // namespace ztrt::test

#endif // ZTRT_TESTS_TESTUTIL_H
