//===- FuzzSupport.h - What the runtime's fuzz targets share ----*- C++ -*-===//
//
// Part of ztrain's fuzz targets (docs/fuzzing.md). The runtime's readers end
// a bad input with fatal() / usageError(), which print one line and exit; a
// libFuzzer target must return instead. setFatalHandler (base/Support.h)
// makes them throw FuzzRefusal here, and every target checks the error
// contract on it: a non-zero status and one line of text (no newline or
// other control character, not empty), with nothing left behind in the
// target's scratch directory.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_FUZZ_FUZZSUPPORT_H
#define ZTRAIN_FUZZ_FUZZSUPPORT_H

#include "base/Support.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace ztrt_fuzz {

/// What fatal() and friends throw under the fuzzer.
struct FuzzRefusal {
  int status;
  std::string message;
};

[[noreturn]] inline void crash(const char *what, const std::string &detail) {
  std::fprintf(stderr, "ztrain-fuzz: contract broken: %s: %s\n", what,
               detail.c_str());
  std::abort();
}

/// The error contract: one line, non-empty, a non-zero status.
inline void checkRefusal(const FuzzRefusal &refusal) {
  if (refusal.status == 0)
    crash("refusal with exit status 0", refusal.message);
  if (refusal.message.empty())
    crash("refusal with an empty message", "");
  for (unsigned char c : refusal.message)
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      crash("refusal that is not one line of text (a control character)",
            refusal.message);
}

[[noreturn]] inline void throwRefusal(int status, const char *message) {
  throw FuzzRefusal{status, message};
}

/// Once per process: fatal() throws; a scratch directory (under /dev/shm
/// when there is one: inputs are written to files on every run) removed at
/// exit.
inline const std::string &scratchDir() {
  static const std::string dir = [] {
    ztrt::setFatalHandler(throwRefusal);
    const char *base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                       : std::getenv("TMPDIR")         ? std::getenv("TMPDIR")
                                                       : "/tmp";
    std::string pattern = std::string(base) + "/ztrain-fuzz-XXXXXX";
    if (!::mkdtemp(pattern.data()))
      crash("cannot create a scratch directory", pattern);
    static std::string removeAtExit;
    removeAtExit = pattern;
    std::atexit([] { ztrt::removeTree(removeAtExit); });
    return pattern;
  }();
  return dir;
}

/// Writes `size` bytes to `path` (replacing it).
inline void writeFile(const std::string &path, const uint8_t *data,
                      size_t size) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    crash("cannot write a scratch file", path);
  if (size && std::fwrite(data, 1, size, f) != size)
    crash("cannot write a scratch file", path);
  std::fclose(f);
}

/// Fails unless directory `dir` holds exactly the names in `expected`
/// (what the target put there): a refusal leaves nothing behind.
inline void checkNothingLeft(const std::string &dir,
                             std::initializer_list<const char *> expected) {
  for (const std::string &name : ztrt::listDirectory(dir)) {
    bool known = false;
    for (const char *e : expected)
      known = known || name == e;
    if (!known)
      crash("a file left behind", dir + "/" + name);
  }
}

} // namespace ztrt_fuzz

#endif // ZTRAIN_FUZZ_FUZZSUPPORT_H
