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
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <dirent.h>
#include <fcntl.h>
#include <csignal>
#include <mutex>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
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

void syncParentDirectory(const std::string &path) {
  std::string dir = ".";
  size_t slash = path.rfind('/');
  if (slash != std::string::npos)
    dir = slash == 0 ? "/" : path.substr(0, slash);
  int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
}

int openInputFile(const std::string &path, const char *what, uint64_t &size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer before the check below could refuse it. (No effect on the
  // regular files that pass.)
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    fatal("%s: cannot open '%s': %s", what, path.c_str(), strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    int error = errno;
    ::close(fd);
    fatal("%s: cannot stat '%s': %s", what, path.c_str(), strerror(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    fatal("%s: '%s' is not a regular file (a device, pipe or directory "
          "would be read without bound)",
          what, path.c_str());
  }
  size = static_cast<uint64_t>(info.st_size);
  return fd;
}

void readExactly(int fd, void *dst, uint64_t bytes, const std::string &path,
                 const char *what) {
  char *p = static_cast<char *>(dst);
  while (bytes > 0) {
    ssize_t got = ::read(fd, p, bytes > (1u << 30) ? (1u << 30) : bytes);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      fatal("%s: cannot read '%s': %s", what, path.c_str(), strerror(errno));
    if (got == 0)
      fatal("%s: '%s' ended early (it changed while being read)", what,
            path.c_str());
    p += got;
    bytes -= static_cast<uint64_t>(got);
  }
}

std::vector<char> readInputFile(const std::string &path, const char *what) {
  uint64_t size = 0;
  int fd = openInputFile(path, what, size);
  std::vector<char> contents(static_cast<size_t>(size));
  readExactly(fd, contents.data(), size, path, what);
  ::close(fd);
  return contents;
}

namespace {
std::string parentOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

/// Fatal unless `dir` is a directory in which this process can create a
/// file (`asDirectory`: a subdirectory) and remove it again. Asking
/// access() is not enough: root passes it for /proc and read-only mounts,
/// where the create fails, so the probe creates (and removes) one.
void checkWritableDirectory(const std::string &dir, const std::string &path,
                            const char *what, bool asDirectory = false) {
  struct stat info;
  if (::stat(dir.c_str(), &info) != 0)
    fatal("%s '%s': directory '%s' does not exist", what, path.c_str(),
          dir.c_str());
  if (!S_ISDIR(info.st_mode))
    fatal("%s '%s': '%s' is not a directory", what, path.c_str(), dir.c_str());
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fatal("%s '%s': directory '%s' is not writable", what, path.c_str(),
          dir.c_str());
  std::string probe =
      (dir.empty() || dir.back() == '/' ? dir : dir + "/") + ".ztrain-probe-XXXXXX";
  std::vector<char> name(probe.begin(), probe.end());
  name.push_back('\0');
  bool made;
  if (asDirectory) {
    made = ::mkdtemp(name.data()) != nullptr;
  } else {
    int fd = ::mkstemp(name.data());
    made = fd >= 0;
    if (made)
      ::close(fd);
  }
  if (!made)
    fatal("%s '%s': cannot create %s in '%s': %s", what, path.c_str(),
          asDirectory ? "a directory" : "a file", dir.c_str(), strerror(errno));
  if ((asDirectory ? ::rmdir(name.data()) : ::unlink(name.data())) != 0)
    fatal("%s '%s': cannot remove the probe '%s': %s", what, path.c_str(),
          name.data(), strerror(errno));
}
} // namespace

void checkOutputPath(const std::string &path, const char *what) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode))
    fatal("%s '%s': is a directory, not a file", what, path.c_str());
  // Outputs are written to a temporary file renamed over the path: over a
  // device (/dev/null), a pipe or a socket that would replace it (as root,
  // /dev/null itself) rather than write to it.
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode))
    fatal("%s '%s': exists and is not a regular file (outputs are written "
          "to a temporary file renamed into place, which would replace it)",
          what, path.c_str());
  checkWritableDirectory(parentOf(path), path, what);
}

void checkOutputDirectory(const std::string &path, const char *what) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0) {
    if (!S_ISDIR(info.st_mode))
      fatal("%s '%s': exists and is not a directory", what, path.c_str());
    checkWritableDirectory(path, path, what, /*asDirectory=*/true);
    return;
  }
  checkWritableDirectory(parentOf(path), path, what, /*asDirectory=*/true);
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

namespace {
/// The pid holding a flock on the file (dev, ino), from /proc/locks; 0 when
/// it cannot be told.
long flockHolder(dev_t dev, ino_t ino) {
  FILE *f = std::fopen("/proc/locks", "r");
  if (!f)
    return 0;
  char line[512];
  long pid = 0;
  while (!pid && std::fgets(line, sizeof line, f)) {
    char kind[32], mode[32], access[32];
    long holder;
    unsigned major, minor;
    unsigned long inode;
    // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
    const char *rest = std::strchr(line, ':');
    if (rest && std::sscanf(rest + 1, "%31s %31s %31s %ld %x:%x:%lu", kind, mode,
                            access, &holder, &major, &minor, &inode) == 7 &&
        std::strcmp(kind, "FLOCK") == 0 && inode == ino &&
        major == ::major(dev) && minor == ::minor(dev))
      pid = holder;
  }
  std::fclose(f);
  return pid;
}
} // namespace

void lockOutputDirectory(const std::string &dir, const char *what) {
  // One lock per process and directory, held until the process ends (the
  // kernel drops it then, however the process ends: a dead run's lock
  // never blocks the next).
  static std::mutex mutex;
  static std::vector<std::string> locked;
  std::lock_guard<std::mutex> guard(mutex);
  for (const std::string &d : locked)
    if (d == dir)
      return;
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    fatal("%s '%s': cannot open the directory to lock it: %s", what,
          dir.c_str(), strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int error = errno;
    struct stat info;
    long pid = ::fstat(fd, &info) == 0 ? flockHolder(info.st_dev, info.st_ino)
                                       : 0;
    ::close(fd);
    if (error == EWOULDBLOCK)
      fatal("%s '%s': another run (%s) is writing checkpoints there; give "
            "this run another directory, or stop that one",
            what, dir.c_str(),
            pid ? ("pid " + std::to_string(pid) + " on this host").c_str()
                : "on this host or another");
    fatal("%s '%s': cannot lock the directory: %s", what, dir.c_str(),
          strerror(error));
  }
  locked.push_back(dir); // fd stays open: the lock lives as long as we do
}

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
  return unit == 0 ? format("%llu bytes", static_cast<unsigned long long>(bytes))
                   : format("%.2f %s", value, units[unit]);
}

void syncDirectory(const std::string &dir) {
  int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
}

std::vector<std::string> listDirectory(const std::string &dir) {
  std::vector<std::string> names;
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return names;
  while (struct dirent *entry = ::readdir(d)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..")
      names.push_back(std::move(name));
  }
  ::closedir(d);
  return names;
}

bool removeTree(const std::string &path) {
  struct stat info;
  if (::lstat(path.c_str(), &info) != 0)
    return errno == ENOENT;
  if (S_ISDIR(info.st_mode)) {
    for (const std::string &name : listDirectory(path))
      if (!removeTree(path + "/" + name))
        return false;
    return ::rmdir(path.c_str()) == 0 || errno == ENOENT;
  }
  return ::unlink(path.c_str()) == 0 || errno == ENOENT;
}

namespace {

/// The reflected CRC-32C table (polynomial 0x82F63B78).
const std::array<uint32_t, 256> &crc32cTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

uint32_t crc32cTableUpdate(uint32_t crc, const unsigned char *p, size_t n) {
  const auto &table = crc32cTable();
  for (size_t i = 0; i < n; ++i)
    crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t
crc32cHardwareUpdate(uint32_t crc, const unsigned char *p, size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p)
    c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
#endif

} // namespace

uint32_t crc32c(const void *data, size_t bytes, uint32_t crc) {
  const auto *p = static_cast<const unsigned char *>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  if (hardware)
    return ~crc32cHardwareUpdate(crc, p, bytes);
#endif
  return ~crc32cTableUpdate(crc, p, bytes);
}

AtomicFile::AtomicFile(std::string destination) : path(std::move(destination)) {
  tempPath = path + ".tmp." + std::to_string(::getpid());
  fd = ::open(tempPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fatal("cannot write '%s': %s", path.c_str(), strerror(errno));
  registerTempFile(tempPath);
}

AtomicFile::~AtomicFile() {
  if (fd >= 0) {
    ::close(fd);
    ::unlink(tempPath.c_str());
    unregisterTempFile(tempPath);
  }
}

void AtomicFile::write(const void *data, size_t bytes) {
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    ssize_t written = ::write(fd, p, bytes);
    if (written < 0 && errno == EINTR)
      continue;
    if (written <= 0)
      fatal("cannot write '%s': %s", path.c_str(),
            written < 0 ? strerror(errno) : "short write");
    p += written;
    bytes -= static_cast<size_t>(written);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd) != 0)
    fatal("cannot write '%s': fsync: %s", path.c_str(), strerror(errno));
  // On failure the temporary is still registered, so fatal() removes it.
  int closed = ::close(fd);
  fd = -1;
  if (closed != 0)
    fatal("cannot write '%s': close: %s", path.c_str(), strerror(errno));
  if (::rename(tempPath.c_str(), path.c_str()) != 0)
    fatal("cannot write '%s': rename: %s", path.c_str(), strerror(errno));
  unregisterTempFile(tempPath);
  // Make the rename itself durable; failure here leaves a complete file, so
  // it is not an error worth dying for.
  syncParentDirectory(path);
}

bool parseByteCount(const std::string &text, int64_t &bytes) {
  static const std::pair<const char *, double> units[] = {
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
      {"TB", 1e12}, {"B", 1.0}};
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
