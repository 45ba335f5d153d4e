//===- SwapIO.cpp - Asynchronous tensor I/O to a swap directory -----------===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#include "io/SwapIO.h"
#include "base/Support.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifdef ZTRT_HAVE_LIBURING
#include <liburing.h>
#endif

namespace ztrt {

struct SwapSpace::Request {
  int64_t ticket = 0;
  bool isWrite = false;
  int file = -1;
  char *buffer = nullptr;
  int64_t bytes = 0, offset = 0;
  int64_t done = 0; // bytes transferred so far
  bool finished = false;
};

#ifdef ZTRT_HAVE_LIBURING
struct SwapSpace::Ring {
  io_uring ring;
  unsigned queued = 0; // submitted, not yet completed
};
#else
struct SwapSpace::Ring {};
#endif

void *SwapSpace::allocate(int64_t bytes) {
  size_t size = static_cast<size_t>(roundUp(bytes > 0 ? bytes : 1));
  void *p = std::aligned_alloc(kAlignment, size);
  if (!p)
    fatal("cannot allocate %lld bytes of swap buffer",
          static_cast<long long>(size));
  std::memset(p, 0, size);
  return p;
}

void SwapSpace::reserveFiles(int64_t files, const std::string &path) {
  struct rlimit limit;
  if (files <= 0 || ::getrlimit(RLIMIT_NOFILE, &limit) != 0)
    return;
  // What the process has open already (MPI's sockets, the data and init
  // files, io_uring), and room for what it opens later (a checkpoint's
  // shards are written one at a time).
  const int64_t open =
      static_cast<int64_t>(listDirectory("/proc/self/fd").size());
  const int64_t needed = open + files + 64;
  if (limit.rlim_cur == RLIM_INFINITY ||
      static_cast<int64_t>(limit.rlim_cur) >= needed)
    return;
  // What it needs and some room (sockets a launcher's transport opens
  // later), within the hard limit.
  struct rlimit raised = limit;
  const rlim_t wanted = static_cast<rlim_t>(needed + 1024);
  raised.rlim_cur = limit.rlim_max == RLIM_INFINITY
                        ? wanted
                        : std::min(limit.rlim_max, wanted);
  if (static_cast<int64_t>(raised.rlim_cur) >= needed &&
      ::setrlimit(RLIMIT_NOFILE, &raised) == 0)
    return;
  fatal("--nvme-path '%s': the plan keeps %lld files open per rank (one "
        "per tensor on nvme; %lld are open already), and the open-file limit "
        "is %llu (hard limit %llu): raise it (ulimit -n %lld)",
        path.c_str(), static_cast<long long>(files),
        static_cast<long long>(open),
        static_cast<unsigned long long>(limit.rlim_cur),
        static_cast<unsigned long long>(limit.rlim_max),
        static_cast<long long>(needed));
}

namespace {

/// This host's name, short (up to its first dot) and safe in a file name.
std::string hostName() {
  char buf[256] = {};
  std::string out;
  if (::gethostname(buf, sizeof buf - 1) == 0)
    for (const char *c = buf; *c && *c != '.'; ++c)
      out += std::isalnum(static_cast<unsigned char>(*c)) || *c == '-' ||
                     *c == '_'
                 ? *c
                 : '_';
  return out.empty() ? "host" : out;
}

enum class LockResult {
  Taken,    // the lock is this process's now (fd holds it)
  Held,     // another open description holds it: a live run's
  NoLocks,  // the file system has no flock (fd is -1)
  Unopened, // the directory cannot be opened (errno says why)
};

/// Opens directory `path` (no symlink followed) and takes its flock
/// without waiting.
LockResult lockDirectory(const std::string &path, int &fd) {
  fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return LockResult::Unopened;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0)
    return LockResult::Taken;
  const int err = errno;
  ::close(fd);
  fd = -1;
  errno = err;
  return err == EWOULDBLOCK ? LockResult::Held : LockResult::NoLocks;
}

/// Whether `name` is a swap directory this host's runs make:
/// `ztrain-swap-<this host>-<pid>-rank<r>`. Only this host's: a lock taken
/// here says nothing of a process on another node where the file system
/// keeps locks per node (NFS with local_lock, BeeGFS, Lustre's localflock).
bool isThisHostsSwapDirectory(const std::string &name) {
  const std::string prefix = "ztrain-swap-" + hostName() + "-";
  if (name.compare(0, prefix.size(), prefix) != 0)
    return false;
  const size_t rank = name.find("-rank", prefix.size());
  auto digits = [&](size_t from, size_t to) {
    return to > from && std::all_of(name.begin() + static_cast<long>(from),
                                    name.begin() + static_cast<long>(to),
                                    [](char c) { return c >= '0' && c <= '9'; });
  };
  return rank != std::string::npos && digits(prefix.size(), rank) &&
         digits(rank + 5, name.size());
}

} // namespace

std::vector<SwapSpace::Stale> SwapSpace::reclaimStale(const std::string &path) {
  std::vector<Stale> removed;
  if (path.empty())
    return removed;
  const std::string base = path + (path.back() == '/' ? "" : "/");
  for (const std::string &name : listDirectory(path)) {
    if (!isThisHostsSwapDirectory(name))
      continue;
    const std::string full = base + name;
    struct stat info;
    if (::lstat(full.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) ||
        info.st_uid != ::geteuid())
      continue;
    int fd = -1;
    if (lockDirectory(full, fd) != LockResult::Taken)
      continue;
    // The lock of a directory its run removed (it ended normally while this
    // scan opened it) or another rank of this job reclaimed is free too:
    // only the directory still under this name counts.
    struct stat locked;
    if (::fstat(fd, &locked) != 0 || locked.st_nlink == 0 ||
        ::lstat(full.c_str(), &info) != 0 || info.st_dev != locked.st_dev ||
        info.st_ino != locked.st_ino) {
      ::close(fd);
      continue;
    }
    Stale stale{full, 0};
    for (const std::string &file : listDirectory(full)) {
      struct stat f;
      if (::lstat((full + "/" + file).c_str(), &f) == 0 && S_ISREG(f.st_mode))
        stale.bytes += static_cast<int64_t>(f.st_size);
    }
    const bool ok = removeTree(full);
    const int err = errno;
    ::close(fd);
    if (ok)
      removed.push_back(std::move(stale));
    else
      warning("--nvme-path: cannot remove '%s', the swap directory of a run "
              "that ended: %s",
              full.c_str(), strerror(err));
  }
  return removed;
}

SwapSpace::SwapSpace(const std::string &path, int rank, int64_t bytesNeeded,
                     unsigned queueDepth, bool direct)
    : depth(queueDepth ? queueDepth : 1), directIO(direct),
      planBytes(bytesNeeded) {
  const char *what = "--nvme-path";
  if (path.empty())
    fatal("%s: no directory given", what);
  struct stat info;
  if (::stat(path.c_str(), &info) != 0)
    fatal("%s '%s': %s", what, path.c_str(), strerror(errno));
  if (!S_ISDIR(info.st_mode))
    fatal("%s '%s': not a directory", what, path.c_str());
  struct statvfs fs;
  if (::statvfs(path.c_str(), &fs) == 0) {
    if (fs.f_flag & ST_RDONLY)
      fatal("%s '%s': the file system is read-only; the plan swaps %lld "
            "bytes per rank",
            what, path.c_str(), static_cast<long long>(bytesNeeded));
    const long double avail =
        static_cast<long double>(fs.f_bavail) * fs.f_frsize;
    if (avail < static_cast<long double>(bytesNeeded))
      fatal("%s '%s': %.0Lf bytes free, the plan swaps %lld bytes per rank",
            what, path.c_str(), avail, static_cast<long long>(bytesNeeded));
  }
  const std::string base = path + (path.back() == '/' ? "" : "/");
  const std::string name = "ztrain-swap-" + hostName() + "-" +
                           std::to_string(::getpid()) + "-rank" +
                           std::to_string(rank);
  dir = base + name;
  // Made under a name reclaimStale() passes over and locked before it takes
  // its own: no other run can find it unlocked and remove it. Fresh: one of
  // the same name is a leftover of a process whose pid this one reuses.
  const std::string making = base + "." + name + ".new";
  if (!removeTree(making))
    fatal("%s: cannot remove the stale '%s': %s", what, making.c_str(),
          strerror(errno));
  if (::mkdir(making.c_str(), 0700) != 0)
    fatal("%s '%s': cannot create '%s': %s; the plan swaps %lld bytes per "
          "rank",
          what, path.c_str(), making.c_str(), strerror(errno),
          static_cast<long long>(bytesNeeded));
  removeOnFatal(making);
  int fd = -1;
  const LockResult locked = lockDirectory(making, fd);
  if (locked == LockResult::Held || locked == LockResult::Unopened)
    fatal("%s: cannot lock '%s': %s", what, making.c_str(),
          locked == LockResult::Held ? "another process holds it"
                                     : strerror(errno));
  lockFd = fd;
  // Where the file system has no flock nothing marks the directory as in
  // use: it takes a name reclaimStale() never matches.
  if (locked == LockResult::NoLocks)
    dir += ".unlocked";
  // A leftover of the final name that no process holds (a process of this
  // pid that ended, on this host); one that a process holds is not ours.
  struct stat old;
  if (::lstat(dir.c_str(), &old) == 0) {
    int oldFd = -1;
    if (lockDirectory(dir, oldFd) == LockResult::Held)
      fatal("%s: '%s' is in use by another process", what, dir.c_str());
    const bool removed = removeTree(dir);
    const int err = errno;
    if (oldFd >= 0)
      ::close(oldFd);
    if (!removed)
      fatal("%s: cannot remove the stale '%s': %s", what, dir.c_str(),
            strerror(err));
  }
  if (::rename(making.c_str(), dir.c_str()) != 0)
    fatal("%s '%s': cannot rename '%s' to '%s': %s", what, path.c_str(),
          making.c_str(), dir.c_str(), strerror(errno));
  keepOnFatal(making);
  removeOnFatal(dir);

#ifdef ZTRT_HAVE_LIBURING
  auto r = std::make_unique<Ring>();
  int rc = io_uring_queue_init(depth, &r->ring, 0);
  if (rc == 0)
    ring = std::move(r);
  else
    warning("%s '%s': io_uring is not available here (%s): synchronous "
            "reads and writes",
            what, path.c_str(), strerror(-rc));
#endif
}

SwapSpace::~SwapSpace() {
  waitAll();
#ifdef ZTRT_HAVE_LIBURING
  if (ring)
    io_uring_queue_exit(&ring->ring);
#endif
  for (File &f : files)
    if (f.fd >= 0)
      ::close(f.fd);
  removeTree(dir);
  keepOnFatal(dir);
  if (lockFd >= 0)
    ::close(lockFd); // held until the directory is gone
}

int SwapSpace::createFile(const std::string &name, int64_t bytes) {
  std::string safe;
  for (char c : name)
    safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' ||
             c == '_' || c == '-')
                ? c
                : '_';
  if (safe.empty() || safe[0] == '.')
    safe = "t" + safe;
  // Names that differ only in their unsafe characters stay apart.
  std::string base = safe;
  for (int i = 1;; ++i) {
    bool taken = false;
    for (const File &f : files)
      taken |= f.name == safe;
    if (!taken)
      break;
    safe = base + "." + std::to_string(i);
  }
  File f;
  f.name = safe;
  f.path = dir + "/" + safe;
  f.bytes = roundUp(bytes);
  int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
  if (directIO) {
    f.fd = ::open(f.path.c_str(), flags | O_DIRECT, 0600);
    if (f.fd < 0 && errno == EINVAL) {
      // tmpfs and a few others refuse O_DIRECT: page-cache I/O instead.
      directIO = false;
      warning("--nvme-path '%s': the file system refuses O_DIRECT (tmpfs?): "
              "swapping through the page cache",
              dir.c_str());
    }
  }
  if (f.fd < 0)
    f.fd = ::open(f.path.c_str(), flags, 0600);
  if (f.fd < 0)
    fatal("--nvme-path: cannot create '%s': %s", f.path.c_str(),
          strerror(errno));
  // Reserve the space now: a full disk shows here, before any step.
  int rc = ::posix_fallocate(f.fd, 0, f.bytes);
  if (rc == EOPNOTSUPP || rc == EINVAL)
    rc = ::ftruncate(f.fd, f.bytes) == 0 ? 0 : errno;
  if (rc == ENOSPC)
    fatal("--nvme-path: cannot reserve %lld bytes for '%s': %s (the plan "
          "swaps %lld bytes per rank, and the ranks that share this file "
          "system need that much each)",
          static_cast<long long>(f.bytes), f.path.c_str(), strerror(rc),
          static_cast<long long>(planBytes));
  if (rc != 0)
    fatal("--nvme-path: cannot reserve %lld bytes for '%s': %s",
          static_cast<long long>(f.bytes), f.path.c_str(), strerror(rc));
  files.push_back(std::move(f));
  return static_cast<int>(files.size()) - 1;
}

void SwapSpace::checkTransfer(int file, int64_t bytes, int64_t offset,
                              const void *buffer, const char *what) {
  if (file < 0 || file >= static_cast<int>(files.size()))
    fatal("swap %s: no file %d", what, file);
  const File &f = files[file];
  if (bytes < 0 || offset < 0 || offset + bytes > f.bytes)
    fatal("swap %s of '%s': bytes [%lld, %lld) outside the file's %lld", what,
          f.path.c_str(), static_cast<long long>(offset),
          static_cast<long long>(offset + bytes),
          static_cast<long long>(f.bytes));
  if (directIO && (bytes % kAlignment || offset % kAlignment ||
                   reinterpret_cast<uintptr_t>(buffer) % kAlignment))
    fatal("swap %s of '%s': O_DIRECT needs %lld-byte aligned buffers, "
          "offsets and lengths",
          what, f.path.c_str(), static_cast<long long>(kAlignment));
}

int64_t SwapSpace::write(int file, const void *buffer, int64_t bytes,
                         int64_t offset) {
  checkTransfer(file, bytes, offset, buffer, "write");
  return submit(true, file, const_cast<void *>(buffer), bytes, offset);
}

int64_t SwapSpace::read(int file, void *buffer, int64_t bytes,
                        int64_t offset) {
  checkTransfer(file, bytes, offset, buffer, "read");
  return submit(false, file, buffer, bytes, offset);
}

#ifdef ZTRT_HAVE_LIBURING
namespace {
/// Queues a read or write of [buffer, buffer + bytes) at `offset` of `fd`
/// on `ring` (at most 1 GiB: the rest follows as a short transfer); false
/// when the submission queue is full.
bool prepare(io_uring &ring, int fd, char *buffer,
             int64_t bytes, int64_t offset, bool isWrite, void *tag) {
  io_uring_sqe *sqe = io_uring_get_sqe(&ring);
  if (!sqe)
    return false;
  unsigned n = static_cast<unsigned>(std::min<int64_t>(bytes, 1 << 30));
  if (isWrite)
    io_uring_prep_write(sqe, fd, buffer, n, static_cast<uint64_t>(offset));
  else
    io_uring_prep_read(sqe, fd, buffer, n, static_cast<uint64_t>(offset));
  io_uring_sqe_set_data(sqe, tag);
  return true;
}
} // namespace
#endif

int64_t SwapSpace::submit(bool isWrite, int file, void *buffer, int64_t bytes,
                          int64_t offset) {
  auto req = std::make_unique<Request>();
  req->ticket = nextTicket++;
  req->isWrite = isWrite;
  req->file = file;
  req->buffer = static_cast<char *>(buffer);
  req->bytes = bytes;
  req->offset = offset;
  Request &r = *req;
  inFlight.push_back(std::move(req));
  if (bytes == 0) {
    r.finished = true;
    return r.ticket;
  }
#ifdef ZTRT_HAVE_LIBURING
  if (ring) {
    // A full queue makes room by completing what is in flight.
    while (ring->queued >= depth)
      reap(true);
    while (!prepare(ring->ring, files[file].fd, r.buffer, r.bytes,
                    r.offset, isWrite, &r))
      reap(true);
    int rc = io_uring_submit(&ring->ring);
    if (rc < 0)
      fatal("--nvme-path: cannot submit a %s of '%s': %s",
            isWrite ? "write" : "read", files[file].path.c_str(),
            strerror(-rc));
    ++ring->queued;
    return r.ticket;
  }
#endif
  // Synchronous: the transfer is done when submit returns.
  while (!r.finished) {
    char *p = r.buffer + r.done;
    int64_t left = r.bytes - r.done;
    ssize_t n = isWrite ? ::pwrite(files[file].fd, p, left, r.offset + r.done)
                        : ::pread(files[file].fd, p, left, r.offset + r.done);
    if (n < 0 && errno == EINTR)
      continue;
    complete(r, n < 0 ? -errno : n);
  }
  return r.ticket;
}

void SwapSpace::complete(Request &r, int64_t result) {
  const File &f = files[r.file];
  const char *op = r.isWrite ? "write" : "read";
  if (result < 0)
    fatal("--nvme-path: cannot %s %lld bytes of '%s': %s%s", op,
          static_cast<long long>(r.bytes - r.done), f.path.c_str(),
          strerror(static_cast<int>(-result)),
          -result == ENOSPC ? " (the swap directory's disk is full)" : "");
  if (result == 0)
    fatal("--nvme-path: cannot %s '%s': %s after %lld of %lld bytes", op,
          f.path.c_str(), r.isWrite ? "no progress" : "end of file",
          static_cast<long long>(r.done), static_cast<long long>(r.bytes));
  r.done += result;
  if (r.done < r.bytes) {
#ifdef ZTRT_HAVE_LIBURING
    if (ring) {
      // A short transfer: the rest goes in again.
      while (!prepare(ring->ring, f.fd, r.buffer + r.done,
                      r.bytes - r.done, r.offset + r.done, r.isWrite, &r))
        reap(true);
      int rc = io_uring_submit(&ring->ring);
      if (rc < 0)
        fatal("--nvme-path: cannot submit a %s of '%s': %s", op,
              f.path.c_str(), strerror(-rc));
      ++ring->queued;
    }
#endif
    return;
  }
  r.finished = true;
  (r.isWrite ? written : readBytes) += r.bytes;
}

void SwapSpace::reap(bool block) {
#ifdef ZTRT_HAVE_LIBURING
  if (!ring || ring->queued == 0)
    return;
  io_uring_cqe *cqe = nullptr;
  int rc;
  do
    rc = block ? io_uring_wait_cqe(&ring->ring, &cqe)
               : io_uring_peek_cqe(&ring->ring, &cqe);
  while (rc == -EINTR);
  if (rc == -EAGAIN || !cqe)
    return;
  if (rc < 0)
    fatal("--nvme-path '%s': waiting for a transfer: %s", dir.c_str(),
          strerror(-rc));
  auto *r = static_cast<Request *>(io_uring_cqe_get_data(cqe));
  int64_t result = cqe->res;
  io_uring_cqe_seen(&ring->ring, cqe);
  --ring->queued;
  complete(*r, result);
#else
  (void)block;
#endif
}

void SwapSpace::wait(int64_t ticket) {
  for (size_t i = 0; i < inFlight.size(); ++i) {
    if (inFlight[i]->ticket != ticket)
      continue;
    while (!inFlight[i]->finished)
      reap(true);
    inFlight.erase(inFlight.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
  fatal("swap: no transfer %lld in flight", static_cast<long long>(ticket));
}

bool SwapSpace::finished(int64_t ticket) {
  for (const auto &r : inFlight) {
    if (r->ticket != ticket)
      continue;
#ifdef ZTRT_HAVE_LIBURING
    // Collect what has arrived (a short read resubmits its rest).
    for (unsigned n = ring ? ring->queued : 0; n > 0 && !r->finished; --n)
      reap(false);
#endif
    return r->finished;
  }
  fatal("swap: no transfer %lld in flight", static_cast<long long>(ticket));
}

int64_t SwapSpace::waitAny() {
  if (inFlight.empty())
    return -1;
  for (;;) {
    for (size_t i = 0; i < inFlight.size(); ++i)
      if (inFlight[i]->finished) {
        int64_t ticket = inFlight[i]->ticket;
        inFlight.erase(inFlight.begin() + static_cast<std::ptrdiff_t>(i));
        return ticket;
      }
    reap(true);
  }
}

void SwapSpace::waitAll() {
  for (const auto &r : inFlight)
    while (!r->finished)
      reap(true);
  inFlight.clear();
}

} // namespace ztrt
