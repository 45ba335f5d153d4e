//===- Files.cpp - Reading inputs, probing and writing outputs ------------===//
//
// Part of ztrain's runtime (declared in base/Support.h): the input-file rule
// (regular files only: a FIFO or a device would block or never end), the
// early probes of outputs and the lock on a checkpoint directory, directory
// listing and removal, CRC32C, and AtomicFile (write a temporary, fsync,
// rename). The error contract and the signal handling stay in Support.cpp.
//
//===----------------------------------------------------------------------===//

#include "base/Support.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <mutex>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace ztrt {

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
  std::string probe = (dir.empty() || dir.back() == '/' ? dir : dir + "/") +
                      ".ztrain-probe-XXXXXX";
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
    if (rest &&
        std::sscanf(rest + 1, "%31s %31s %31s %ld %x:%x:%lu", kind, mode,
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
    long pid =
        ::fstat(fd, &info) == 0 ? flockHolder(info.st_dev, info.st_ino) : 0;
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
  removeOnFatal(tempPath);
}

AtomicFile::~AtomicFile() {
  if (fd >= 0) {
    ::close(fd);
    ::unlink(tempPath.c_str());
    keepOnFatal(tempPath);
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
  keepOnFatal(tempPath);
  // Make the rename itself durable; failure here leaves a complete file, so
  // it is not an error worth dying for.
  syncParentDirectory(path);
}

} // namespace ztrt
