//===- Support.cpp - Errors, temp files, formatting -----------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "base/Support.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <mutex>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace ztrt {

namespace {

// Temporary files of writes in progress. A plain vector behind a mutex: there
// are at most a handful, and fatal() may be reached from any thread.
std::mutex tempFilesMutex;
std::vector<std::string> &tempFiles() {
  static std::vector<std::string> files;
  return files;
}

void registerTempFile(const std::string &path) {
  std::lock_guard<std::mutex> lock(tempFilesMutex);
  tempFiles().push_back(path);
}

void unregisterTempFile(const std::string &path) {
  std::lock_guard<std::mutex> lock(tempFilesMutex);
  auto &files = tempFiles();
  for (auto it = files.begin(); it != files.end(); ++it) {
    if (*it == path) {
      files.erase(it);
      return;
    }
  }
}

// Set by setJobRank() for a rank of a multi-process job; -1 otherwise.
int jobRank = -1;
void (*jobAbort)(int status) = nullptr;
void (*jobSync)() = nullptr;

/// `everyRank`: the error is one that every rank of the job reaches on its
/// own, from the same inputs (a flag, the descriptor, a value all ranks
/// agreed on): rank 0 prints it and every rank exits normally, so that the
/// job ends without an abort and without one line per rank.
/// Set once this process has reported its error and is on its way out:
/// the launcher's SIGTERM then adds nothing.
std::atomic<bool> exiting{false};
/// Set when another rank has printed the fatal error that ends the job.
std::atomic<bool> peerReported{false};

/// `message` with its control characters (a newline in a JSON key or a
/// tensor name, a byte of a binary file quoted back) written as \n, \r or
/// \xHH, so that an error quoting its input stays one line.
std::string oneLine(const char *message) {
  std::string out;
  for (const char *p = message; *p; ++p) {
    unsigned char c = static_cast<unsigned char>(*p);
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if ((c < 0x20 && c != '\t') || c == 0x7f)
      out += format("\\x%02x", c);
    else
      out += static_cast<char>(c);
  }
  return out;
}

/// Prints `ztrain: <kind>: [rank r] <message>` to stderr in one write(), so
/// that lines from several ranks do not interleave.
void printLine(const char *kind, const char *fmt, va_list args) {
  char buffer[2048];
  vsnprintf(buffer, sizeof(buffer), fmt, args);
  const std::string message = oneLine(buffer);
  std::string line = std::string("ztrain: ") + kind + ": ";
  if (jobRank >= 0)
    line += "[rank " + std::to_string(jobRank) + "] ";
  line += message;
  line += "\n";
  fflush(stdout);
  if (::write(STDERR_FILENO, line.data(), line.size()) < 0) {
    // Nothing better to do: the caller goes on (or exits) anyway.
  }
}

/// Removes what removeOnFatal registered (a swap directory, files and
/// directories of writes in progress), newest first: a temporary file
/// inside a temporary directory goes before the directory does.
void removeTempFiles() {
  std::lock_guard<std::mutex> lock(tempFilesMutex);
  auto &paths = tempFiles();
  for (auto it = paths.rbegin(); it != paths.rend(); ++it)
    removeTree(*it);
  paths.clear();
}

/// setFatalHandler's handler (fuzz targets); null: print and exit.
void (*fatalHandler)(int status, const char *message) = nullptr;

[[noreturn]] void die(int status, bool everyRank, const char *fmt,
                      va_list args) {
  if (fatalHandler) {
    char message[2048];
    vsnprintf(message, sizeof(message), fmt, args);
    removeTempFiles();
    fatalHandler(status, oneLine(message).c_str());
    std::abort(); // a handler that returns breaks the contract
  }
  exiting.store(true);
  // A refusal every rank reaches: each removes its own temporary files
  // (its swap directory among them), then all meet before any exits, so
  // that the launcher, which ends the job at the first non-zero exit, finds
  // no rank still on its way to the same refusal or still cleaning up.
  if (everyRank) {
    removeTempFiles();
    if (jobSync)
      jobSync();
    if (jobRank > 0)
      std::exit(status);
  }
  printLine("error", fmt, args);
  removeTempFiles();
  if (jobAbort && !everyRank)
    jobAbort(status);
  std::exit(status);
}

} // namespace

void warning(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  printLine("warning", fmt, args);
  va_end(args);
}

void setFatalHandler(void (*handler)(int status, const char *message)) {
  fatalHandler = handler;
}

void removeOnFatal(const std::string &path) { registerTempFile(path); }

void keepOnFatal(const std::string &path) { unregisterTempFile(path); }

void fatal(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  die(1, false, fmt, args);
}

void refuse(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  die(1, true, fmt, args);
}

void usageError(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  die(2, true, fmt, args);
}

void setJobRank(int rank, void (*abortJob)(int status), void (*syncJob)()) {
  jobRank = rank;
  jobAbort = abortJob;
  jobSync = syncJob;
}

namespace {

const std::atomic<int64_t> *terminationStep = nullptr;

/// ztrain-run's pid (ZTRAIN_RUN_PID, which it sets for mpirun and so for
/// every rank), read before any signal can arrive; 0 without ztrain-run.
pid_t launcherPid = 0;

/// SIGINT's disposition when the process started (static initialization
/// runs before main, and so before MPI's start-up resets it).
const bool sigintIgnoredAtStart = [] {
  struct sigaction before {};
  return sigaction(SIGINT, nullptr, &before) == 0 &&
         before.sa_handler == SIG_IGN;
}();

/// Appends `v` in decimal; async-signal-safe.
void appendDecimal(char *&out, int64_t v) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0 && n < 23);
  while (n > 0)
    *out++ = digits[--n];
}

void appendText(char *&out, const char *text) {
  while (*text)
    *out++ = *text++;
}

/// Removes `path`, a file or a directory of files (a swap directory, a
/// checkpoint directory being written), with async-signal-safe calls only:
/// the directory's entries are read with getdents64, not readdir.
void removeFromSignal(const char *path) {
  if (::unlink(path) == 0 || errno != EISDIR)
    return;
  int dir = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    alignas(8) char entries[4096];
    for (;;) {
      long n = ::syscall(SYS_getdents64, dir, entries, sizeof(entries));
      if (n <= 0)
        break;
      bool removed = false;
      for (long at = 0; at < n;) {
        // struct linux_dirent64: ino (8), off (8), reclen (2), type (1),
        // name (NUL-terminated).
        unsigned short length;
        std::memcpy(&length, entries + at + 16, sizeof(length));
        const char *name = entries + at + 19;
        if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0)
          removed |= ::unlinkat(dir, name, 0) == 0 ||
                     ::unlinkat(dir, name, AT_REMOVEDIR) == 0;
        at += length;
      }
      // Entries removed while reading: start over until a pass removes
      // nothing (what is left cannot be removed).
      if (removed)
        ::lseek(dir, 0, SEEK_SET);
    }
    ::close(dir);
  }
  ::rmdir(path);
}

/// Whether ztrain-run is gone: no such process, or a zombie (killed, not
/// yet reaped by its parent). Async-signal-safe (kill, open, read).
bool launcherGone() {
  if (launcherPid <= 0)
    return false;
  if (::kill(launcherPid, 0) != 0)
    return errno == ESRCH;
  char path[64];
  char *out = path;
  appendText(out, "/proc/");
  appendDecimal(out, launcherPid);
  appendText(out, "/stat");
  *out = '\0';
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  char buf[256];
  ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0)
    return false;
  // "pid (comm) S ...": the state follows the last ')'.
  ssize_t close = -1;
  for (ssize_t i = 0; i < n; ++i)
    if (buf[i] == ')')
      close = i;
  return close >= 0 && close + 2 < n && buf[close + 2] == 'Z';
}

/// SIGTERM and SIGINT (what a launcher sends every rank when one fails,
/// what scancel, kill and Ctrl-C send): one line naming the rank and the
/// step, unless this process or a peer already said why the job ends; the
/// temporary files and directories (a swap directory, writes in progress)
/// removed when no thread is registering one; then the default action, so
/// the exit status still names the signal. Only async-signal-safe calls.
extern "C" void onTerminate(int sig) {
  const int savedErrno = errno;
  if (!exiting.load() && !peerReported.load()) {
    char line[512];
    char *out = line;
    appendText(out, "ztrain: error: ");
    if (jobRank >= 0) {
      appendText(out, "[rank ");
      appendDecimal(out, jobRank);
      appendText(out, "] ");
    }
    appendText(out, sig == SIGINT ? "ended by SIGINT " : "ended by SIGTERM ");
    const int64_t step = terminationStep ? terminationStep->load() : 0;
    if (step > 0) {
      appendText(out, "in step ");
      appendDecimal(out, step);
    } else {
      appendText(out, "before step 1");
    }
    if (jobRank >= 0 && launcherGone()) {
      // ztrain-run was killed (kill -9, the OOM killer): mpirun, told by
      // its parent's death, ended the ranks. No rank failed, nothing was
      // printed above.
      appendText(out, ": ztrain-run, which launched this job (pid ");
      appendDecimal(out, launcherPid);
      appendText(out, "), was killed, and mpirun ended every rank\n");
    } else {
      appendText(out, jobRank >= 0
                          ? ": the launcher ends every rank when one fails "
                            "(see its message above) or the job was "
                            "cancelled\n"
                          : ": the run was cancelled\n");
    }
    if (::write(STDERR_FILENO, line, out - line) < 0) {
      // Nothing to do: the process ends below either way.
    }
  }
  // (A rank already in die() holds the lock while it removes them.)
  if (tempFilesMutex.try_lock()) {
    const auto &paths = tempFiles();
    for (auto it = paths.rbegin(); it != paths.rend(); ++it)
      removeFromSignal(it->c_str());
    tempFilesMutex.unlock();
  }
  errno = savedErrno;
  // Both to their default: a second signal, held back while this ran (the
  // handler's mask), then ends the process too instead of running this
  // again.
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  std::raise(sig);
}

} // namespace

void notePeerReported() { peerReported.store(true); }

void endWithoutLauncher(const char *fmt, ...) {
  // stderr is likely a pipe to the launcher that is gone: the line is then
  // lost, and must not end the process by SIGPIPE before the cleanup.
  std::signal(SIGPIPE, SIG_IGN);
  va_list args;
  va_start(args, fmt);
  printLine("error", fmt, args);
  va_end(args);
  peerReported.store(true); // said why: the handler adds no line
  std::raise(SIGTERM);
  // A SIGTERM this process ignores or blocks (not ztrain's own setup).
  std::_Exit(128 + SIGTERM);
}

void reportTermination(const std::atomic<int64_t> *step) {
  terminationStep = step;
  if (const char *pid = std::getenv("ZTRAIN_RUN_PID"))
    launcherPid = static_cast<pid_t>(std::atol(pid));
  struct sigaction action {};
  action.sa_handler = onTerminate;
  // Ctrl-C followed by a SIGTERM (a wrapper's, srun's) must not cut the
  // first one's cleanup short: each blocks the other while it runs.
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGTERM);
  sigaddset(&action.sa_mask, SIGINT);
  sigaction(SIGTERM, &action, nullptr);
  // SIGINT too, unless the process started with it ignored (a shell
  // starts background jobs so, that Ctrl-C stops only the foreground one);
  // MPI's start-up resets it, so it is ignored again here.
  if (sigintIgnoredAtStart)
    std::signal(SIGINT, SIG_IGN);
  else
    sigaction(SIGINT, &action, nullptr);
}

std::string format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int size = vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(size > 0 ? size : 0, '\0');
  vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

std::string formatShape(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

int64_t checkedNumel(const std::vector<int64_t> &shape) {
  int64_t numel = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(numel, dim, &numel))
      return -1;
  }
  return numel;
}

namespace {
/// The first number in file `path`, or false (also for "max").
bool readNumberFile(const char *path, uint64_t &value) {
  FILE *f = std::fopen(path, "r");
  if (!f)
    return false;
  unsigned long long v = 0;
  bool ok = std::fscanf(f, "%llu", &v) == 1;
  std::fclose(f);
  value = v;
  return ok;
}
} // namespace

bool hostMemoryAvailable(uint64_t &bytes, std::string &source) {
  bool found = false;
  if (FILE *f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    while (std::fgets(line, sizeof(line), f)) {
      unsigned long long kib = 0;
      if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
        bytes = kib * 1024ull;
        source = "MemAvailable in /proc/meminfo";
        found = true;
        break;
      }
    }
    std::fclose(f);
  }
  uint64_t limit = 0, usage = 0;
  const char *cgroup = nullptr;
  if (readNumberFile("/sys/fs/cgroup/memory.max", limit) &&
      readNumberFile("/sys/fs/cgroup/memory.current", usage))
    cgroup = "the cgroup's memory.max";
  else if (readNumberFile("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                          limit) &&
           readNumberFile("/sys/fs/cgroup/memory/memory.usage_in_bytes", usage))
    cgroup = "the cgroup's memory.limit_in_bytes";
  // v1 reports "no limit" as a huge number.
  if (cgroup && limit < (uint64_t(1) << 62)) {
    uint64_t left = limit > usage ? limit - usage : 0;
    if (!found || left < bytes) {
      bytes = left;
      source = cgroup;
    }
    found = true;
  }
  return found;
}

std::string formatBytes(uint64_t bytes) {
  const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0
             ? format("%llu bytes", static_cast<unsigned long long>(bytes))
             : format("%.2f %s", value, units[unit]);
}

bool parseByteCount(const std::string &text, int64_t &bytes) {
  static const std::pair<const char *, double> units[] = {
      {"KiB", 1024.0},
      {"MiB", 1048576.0},
      {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0},
      {"KB", 1e3},
      {"MB", 1e6},
      {"GB", 1e9},
      {"TB", 1e12},
      {"B", 1.0}};
  std::string number = text;
  double scale = 1.0;
  for (const auto &[suffix, factor] : units) {
    const size_t n = std::strlen(suffix);
    if (number.size() > n &&
        strcasecmp(number.c_str() + number.size() - n, suffix) == 0) {
      number.resize(number.size() - n);
      scale = factor;
      break;
    }
  }
  char *end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0' || !std::isfinite(value) || value <= 0)
    return false;
  const double total = value * scale;
  if (total < 1 || total >= 9.2e18 || total != std::floor(total))
    return false;
  bytes = static_cast<int64_t>(total);
  return true;
}

} // namespace ztrt
