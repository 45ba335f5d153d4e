//===- Support.h - Errors, temp files, formatting ---------------*- C++ -*-===//
//
// The runtime's error contract: every fatal error prints exactly one line,
// `ztrain: error: <what>`, removes the temporary files of any write in
// progress (so no partial output is ever left behind) and exits.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BASE_SUPPORT_H
#define ZTRT_BASE_SUPPORT_H

#include "base/NearestName.h"
#include <atomic>
#include <cstdint>

#include <string>
#include <vector>

namespace ztrt {

/// Prints `ztrain: error: <message>` to stderr and exits with status 1.
[[noreturn]] void fatal(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/// Like fatal(), for an error that every rank of a job reaches on its own
/// from the same inputs (the descriptor, a value the ranks agreed on): rank
/// 0 prints it and every rank exits with status 1, without aborting the job
/// (no MPI abort, no line per rank). Every rank must call it.
[[noreturn]] void refuse(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/// Like refuse(), for command-line mistakes (every rank parses the same
/// flags): exits with status 2.
[[noreturn]] void usageError(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/// For fuzz targets (fuzz/runtime): from now on fatal(), refuse() and
/// usageError() remove the temporary files of writes in progress and call
/// `handler` with the exit status and the message (the error line without
/// its `ztrain: error: ` prefix) instead of printing it and exiting; the
/// handler must not return (it throws). Null, the default, restores the
/// contract above. Never set in ztrain's own programs.
void setFatalHandler(void (*handler)(int status, const char *message));

/// Makes fatal errors of one rank of a multi-process job say which rank they
/// come from (`ztrain: error: [rank 1] ...`) and end through `abortJob`
/// (MPI_Abort) instead of exit(), so that no other rank waits forever in a
/// collective. abortJob receives the exit status; if it returns, the process
/// exits anyway. refuse() and usageError() meet the other ranks through
/// `syncJob` (a barrier) before exiting.
void setJobRank(int rank, void (*abortJob)(int status), void (*syncJob)());

/// From now on SIGTERM prints one line naming this rank and `step` (the
/// step in progress, 0 before the first), removes the temporary files of
/// writes in progress and ends the process by the signal.
void reportTermination(const std::atomic<int64_t> *step);

/// Another rank has printed the fatal error that ends the job: the
/// launcher's SIGTERM then ends this one without a line.
void notePeerReported();

/// Prints `ztrain: error: [rank r] <message>` and ends the process as
/// SIGTERM does (its temporary files removed, the status naming the
/// signal), without MPI: for a rank whose launcher is gone, which nothing
/// else would stop.
[[noreturn]] void endWithoutLauncher(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/// printf into a std::string.
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/// "[4, 1]" — how shapes appear in every message.
std::string formatShape(const std::vector<int64_t> &shape);

/// Product of `shape`, or -1 if it overflows int64 (or a dim is negative).
int64_t checkedNumel(const std::vector<int64_t> &shape);

/// fsyncs the directory that holds `path`, making a rename or unlink of
/// `path` durable; best effort (a failure leaves the file system consistent,
/// only perhaps without that last change after a crash).
void syncParentDirectory(const std::string &path);

/// fsyncs the directory `dir` itself (after entries in it were created,
/// renamed or removed); best effort, like syncParentDirectory.
void syncDirectory(const std::string &dir);

/// The names in directory `dir` (without "." and ".."); empty when it cannot
/// be read.
std::vector<std::string> listDirectory(const std::string &dir);

/// Prints `ztrain: warning: <message>` (with the rank in a job) to stderr,
/// in one write.
void warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/// Registers `path` (a file, or a directory and everything under it) to be
/// removed when this process dies through fatal() and friends: the
/// temporary output of a write in progress, so that a failed write (a full
/// disk, a quota) leaves nothing behind. keepOnFatal() takes it back once
/// the output is committed.
void removeOnFatal(const std::string &path);
void keepOnFatal(const std::string &path);

/// Removes `path` and, for a directory, everything under it (no symlinks
/// followed). Returns false, with errno set, on the first failure; a
/// missing path is success.
bool removeTree(const std::string &path);

/// Opens `path` for reading; fatal, naming `what` (the flag) and the path,
/// unless it is a regular file (a device such as /dev/zero, a pipe or a
/// directory would be read without bound). Returns the descriptor and sets
/// `size` to the file's size.
int openInputFile(const std::string &path, const char *what, uint64_t &size);
/// Reads exactly `bytes` bytes from `fd` into `dst`; fatal, naming `what`
/// and `path`, on an error or a file that ended early.
void readExactly(int fd, void *dst, uint64_t bytes, const std::string &path,
                 const char *what);
/// The whole regular file `path` (openInputFile's checks), read in one
/// allocation of its size.
std::vector<char> readInputFile(const std::string &path, const char *what);

/// Fatal, naming `what` and `path`, unless a file can be created at `path`:
/// its directory exists and is writable, and `path` is not a directory.
/// Checked before the first step, so that a bad output path does not
/// surface after the run.
void checkOutputPath(const std::string &path, const char *what);
/// Likewise for a directory `path` that will be created (if missing) and
/// written into.
void checkOutputDirectory(const std::string &path, const char *what);

/// Takes an exclusive lock (flock) on the directory `dir` for the rest of
/// the process's life, so that two runs never write checkpoints into one
/// directory; fatal, naming the holder's pid, when another process has it.
/// The kernel releases it when the process ends, however it ends. Calling
/// it again for the same directory does nothing.
void lockOutputDirectory(const std::string &dir, const char *what);

/// The host memory this process may still use: the smaller of the
/// kernel's MemAvailable and what the cgroup's limit leaves (cgroup v2
/// memory.max - memory.current, or v1's limit_in_bytes - usage_in_bytes).
/// `source` says which bound it is. False when neither can be read.
bool hostMemoryAvailable(uint64_t &bytes, std::string &source);

/// "1.50 GiB" (or MiB / KiB / bytes): how byte counts appear in messages.
std::string formatBytes(uint64_t bytes);

/// A byte count as users and Hugging Face write one: "5000000000", "5e9",
/// "5GB" (10^9), "5GiB" (2^30), also KB / MB / TB, KiB / MiB / TiB and B;
/// false unless it is a whole positive number of bytes below 2^63.
bool parseByteCount(const std::string &text, int64_t &bytes);

/// CRC-32C (Castagnoli, as iSCSI and ext4 use it) of `bytes` bytes,
/// continuing from `crc` (0 to start): the SSE 4.2 instruction where the
/// CPU has it, a table otherwise (the same value).
uint32_t crc32c(const void *data, size_t bytes, uint32_t crc = 0);

/// A file written via a temporary path and renamed into place on commit().
/// Until then the temporary is registered with the error handler, so that a
/// fatal error anywhere (not only in this writer) removes it.
class AtomicFile {
public:
  /// Creates `<path>.tmp.<pid>`; fatal if that fails.
  explicit AtomicFile(std::string path);
  /// Removes the temporary if commit() was not reached.
  ~AtomicFile();
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;

  void write(const void *data, size_t bytes);
  /// fsync, close, rename over the destination, fsync the directory.
  void commit();

private:
  std::string path;
  std::string tempPath;
  int fd = -1;
};

} // namespace ztrt

#endif // ZTRT_BASE_SUPPORT_H
