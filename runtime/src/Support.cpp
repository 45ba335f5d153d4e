//===- Support.cpp - Errors, temp files, formatting -----------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "src/Support.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
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

[[noreturn]] void die(int status, const char *fmt, va_list args) {
  char message[2048];
  vsnprintf(message, sizeof(message), fmt, args);
  // One write() so that lines from several ranks do not interleave.
  std::string line = "ztrain: error: ";
  if (jobRank >= 0)
    line += "[rank " + std::to_string(jobRank) + "] ";
  line += message;
  line += "\n";
  fflush(stdout);
  if (::write(STDERR_FILENO, line.data(), line.size()) < 0) {
    // Nothing better to do than exit with the status anyway.
  }
  {
    std::lock_guard<std::mutex> lock(tempFilesMutex);
    for (const std::string &path : tempFiles())
      ::unlink(path.c_str());
    tempFiles().clear();
  }
  if (jobAbort)
    jobAbort(status);
  std::exit(status);
}

} // namespace

void fatal(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  die(1, fmt, args);
}

void usageError(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  die(2, fmt, args);
}

void setJobRank(int rank, void (*abortJob)(int status)) {
  jobRank = rank;
  jobAbort = abortJob;
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

} // namespace ztrt
