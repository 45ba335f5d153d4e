//===- TestUtil.h - Helpers shared by the runtime tests ---------*- C++ -*-===//

#ifndef ZTRT_TESTS_TESTUTIL_H
#define ZTRT_TESTS_TESTUTIL_H

#include "cpu/CpuBackend.h"
#include "src/Context.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <memory>
#include <string>
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

} // namespace ztrt::test

#endif // ZTRT_TESTS_TESTUTIL_H
