//===- SwapIO.h - Asynchronous tensor I/O to a swap directory ---*- C++ -*-===//
//
// Part of the ztrain project.
//
// The I/O engine of NVMe offload (ZeRO-Infinity's): tensors written to and
// read back from files in one swap directory per rank, asynchronously, so
// that transfers overlap compute the way collectives do.
//
//   - io_uring through liburing where the kernel allows it (a container's
//     seccomp profile may not: then synchronous pread/pwrite, with one
//     warning); builds without liburing-dev use pread/pwrite too;
//   - O_DIRECT with 4096-byte aligned buffers, offsets and lengths, which
//     keeps swapped tensors out of the page cache (the point of swapping);
//     where the file system refuses it (tmpfs) buffered I/O, with one
//     warning;
//   - the directory `<path>/ztrain-swap-<pid>-rank<r>` is created fresh,
//     its files are named by tensor, and it is removed when the engine is
//     destroyed or the process dies through fatal();
//   - a missing or read-only path, too little free space for the bytes the
//     plan needs, ENOSPC, EIO: one line naming the path (and the bytes
//     needed), exit status 1.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_IO_SWAPIO_H
#define ZTRT_IO_SWAPIO_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ztrt {

class SwapSpace {
public:
  /// Buffers, offsets and lengths of O_DIRECT transfers are multiples of
  /// this (the logical block size of every NVMe device in use).
  static constexpr int64_t kAlignment = 4096;
  static int64_t roundUp(int64_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  /// A zeroed buffer of roundUp(bytes), aligned for O_DIRECT; freed with
  /// std::free. Fatal when memory is short.
  static void *allocate(int64_t bytes);

  /// Makes room for `files` more open files (one per tensor on nvme: each
  /// stays open for the run) before a SwapSpace under `path` creates them:
  /// raises the soft open-file limit up to the hard one when it is too
  /// low; fatal, naming the count and `ulimit -n`, when even the hard
  /// limit is.
  static void reserveFiles(int64_t files, const std::string &path);

  /// A swap directory removed by reclaimStale(), and the bytes its files
  /// held.
  struct Stale {
    std::string dir;
    int64_t bytes = 0;
  };
  /// Removes the swap directories under `path` that no process holds: the
  /// leftovers of runs that ended without removing theirs (SIGKILL, the
  /// OOM killer, a node that lost power). Every run holds a lock (flock)
  /// on its directory from before the directory has its name until the
  /// process ends, and the kernel drops the lock however the process ends;
  /// a directory whose lock this call takes is one nobody holds. The
  /// directories of live runs (on any host, where the file system passes
  /// locks between hosts), of other users, and on file systems without
  /// flock are left alone. Returns what it removed, for the caller to say.
  static std::vector<Stale> reclaimStale(const std::string &path);

  /// Creates the swap directory of `rank` under `path` (the user's
  /// --nvme-path), `ztrain-swap-<host>-<pid>-rank<rank>`, and holds its
  /// lock (reclaimStale) until destroyed. `bytesNeeded` is what the plan will write: refused up
  /// front when the file system has less free. `queueDepth`: transfers in
  /// flight at once.
  /// `direct` false: page-cache I/O even where O_DIRECT would be accepted.
  SwapSpace(const std::string &path, int rank, int64_t bytesNeeded,
            unsigned queueDepth = 64, bool direct = true);
  /// Waits for every transfer, removes the files and the directory.
  ~SwapSpace();
  SwapSpace(const SwapSpace &) = delete;
  SwapSpace &operator=(const SwapSpace &) = delete;

  /// A file of roundUp(bytes) for tensor `name` (its name made safe for a
  /// file name), space reserved now (so a full disk is found here, not in
  /// the middle of a step). Returns its handle.
  int createFile(const std::string &name, int64_t bytes);

  /// Starts writing `bytes` of `buffer` at `offset` of file `file`, or
  /// reading them into it; returns a ticket for wait(). With O_DIRECT,
  /// `buffer`, `offset` and `bytes` are multiples of kAlignment (allocate()
  /// and roundUp() give such). The buffer must stay untouched until wait().
  int64_t write(int file, const void *buffer, int64_t bytes, int64_t offset);
  int64_t read(int file, void *buffer, int64_t bytes, int64_t offset);
  /// Blocks until the transfer `ticket` is complete (fatal on an I/O error,
  /// naming the file).
  void wait(int64_t ticket);
  /// Waits for every transfer in flight.
  void waitAll();
  /// Blocks until some transfer in flight has completed, retires it as
  /// wait() would, and returns its ticket (the earliest-issued of those
  /// found complete); -1 when nothing is in flight. For a queue kept full
  /// (fio's way of reaping), not for a step, which needs particular ones.
  int64_t waitAny();
  /// Whether transfer `ticket` has completed (does not block; collects the
  /// completions that have arrived). wait() is still called for it.
  bool finished(int64_t ticket);

  const std::string &directory() const { return dir; }
  /// True when transfers bypass the page cache (O_DIRECT accepted).
  bool direct() const { return directIO; }
  /// True when transfers go through io_uring (false: pread/pwrite).
  bool asynchronous() const { return ring != nullptr; }
  int64_t bytesWritten() const { return written; }
  int64_t bytesRead() const { return readBytes; }

private:
  struct Request;
  struct Ring;
  struct File {
    std::string name, path;
    int fd = -1;
    int64_t bytes = 0;
  };

  int64_t submit(bool isWrite, int file, void *buffer, int64_t bytes,
                 int64_t offset);
  void complete(Request &r, int64_t result);
  void reap(bool block);
  void checkTransfer(int file, int64_t bytes, int64_t offset,
                     const void *buffer, const char *what);

  std::string dir;
  /// The directory's own descriptor, whose flock marks it as in use; -1
  /// where the file system has no flock.
  int lockFd = -1;
  std::vector<File> files;
  std::unique_ptr<Ring> ring;
  std::vector<std::unique_ptr<Request>> inFlight;
  int64_t nextTicket = 1;
  unsigned depth;
  bool directIO = true;
  /// What the plan writes per rank (the constructor's bytesNeeded).
  int64_t planBytes = 0;
  int64_t written = 0, readBytes = 0;
};

} // namespace ztrt

#endif // ZTRT_IO_SWAPIO_H
