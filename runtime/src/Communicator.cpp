//===- Communicator.cpp - The ranks of a job and data movement ------------===//
//
// Part of ztrain's runtime.
//
// Open MPI can make a process started without a launcher an MPI world of one
// ("singleton init"), but it does so by starting a daemon: measured 0.35 s per
// run with Debian's Open MPI 4.1, against 0 for a process that leaves MPI
// alone. Every end-to-end test runs executables, so a process without a
// launcher skips MPI entirely; the environment variables that launchers set
// tell the two cases apart.
//
//===----------------------------------------------------------------------===//

#include "src/Communicator.h"

#include "src/CommQueue.h"
#include "src/Support.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mpi.h>
#include <thread>

namespace ztrt {

struct Communicator::Mpi {
  MPI_Comm comm = MPI_COMM_NULL;
};

namespace {

/// The fatal-error hook of a rank of a multi-process job: ends every rank, so
/// that none waits forever for the failed one in a collective.
void abortJob(int status) { MPI_Abort(MPI_COMM_WORLD, status); }

/// Registered with atexit() once MPI is initialized, so that every normal way
/// out (return from main, --help's exit(0), a fatal error in a world of one)
/// leaves MPI cleanly. Fatal errors with several ranks abort before this.
/// A communication thread still running (exit() while a context lives) is
/// joined first: no thread may call MPI during or after MPI_Finalize.
void finalizeAtExit() {
  stopCommQueues();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

const char *threadLevelName(int level) {
  if (level == MPI_THREAD_SINGLE)
    return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED)
    return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED)
    return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE)
    return "MPI_THREAD_MULTIPLE";
  return "unknown";
}

/// Turns an MPI error code (the runtime's communicator returns them instead
/// of aborting) into the runtime's one-line error.
void check(int code, const char *call) {
  if (code == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fatal("%s failed: %.*s", call, length, text);
}

/// MPI-3 counts are ints; larger transfers are an error rather than a
/// silently truncated count.
int mpiCount(const char *call, int64_t count) {
  if (count > INT_MAX)
    fatal("%s: %lld elements per rank exceed MPI's limit of %d", call,
          static_cast<long long>(count), INT_MAX);
  return static_cast<int>(count);
}

/// The MPI type that moves elements of `bytes` bytes as bits.
MPI_Datatype elementType(const char *call, int64_t bytes) {
  switch (bytes) {
  case 1:
    return MPI_BYTE;
  case 2:
    return MPI_UINT16_T;
  case 4:
    return MPI_UINT32_T;
  case 8:
    return MPI_UINT64_T;
  }
  fatal("%s: no MPI type for %lld-byte elements", call,
        static_cast<long long>(bytes));
}

// --- The collective watchdog ------------------------------------------------
// Every blocking MPI call of the communicator records when it started and
// what it is; a watchdog thread (startCollectiveWatchdog) ends the job when
// one has waited longer than the timeout, so that a stuck or dead rank
// never leaves the others spinning forever.
std::atomic<int64_t> blockedSinceNs{0};
std::atomic<const char *> blockedIn{nullptr};
std::atomic<const std::atomic<int64_t> *> watchedStep{nullptr};

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <typename Call> int watched(const char *what, Call call) {
  blockedIn.store(what);
  blockedSinceNs.store(nowNs());
  int code = call();
  blockedSinceNs.store(0);
  return code;
}

} // namespace

void startCollectiveWatchdog(double timeoutSeconds,
                             const std::atomic<int64_t> *step) {
  if (!(timeoutSeconds > 0.0))
    return;
  watchedStep.store(step);
  std::thread([timeoutSeconds] {
    const int64_t limit = static_cast<int64_t>(timeoutSeconds * 1e9);
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      int64_t since = blockedSinceNs.load();
      if (since == 0 || nowNs() - since < limit)
        continue;
      const std::atomic<int64_t> *counter = watchedStep.load();
      const int64_t step = counter ? counter->load() : 0;
      const char *what = blockedIn.load();
      // Every rank that arrived reports; the rank(s) without this line are
      // the ones that did not. fatal() ends the job (MPI_Abort), which also
      // stops a rank that is stuck.
      fatal("%s has waited %.0f s for the other ranks (%s%lld; "
            "--collective-timeout %g): a rank is stuck or dead, ending the "
            "job",
            what ? what : "a collective", timeoutSeconds,
            step > 0 ? "step " : "before step ",
            static_cast<long long>(step > 0 ? step : 1),
            timeoutSeconds);
    }
  }).detach();
}

bool launchedByMpi() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name))
      return true;
  return false;
}

Communicator::Communicator() = default;

Communicator::~Communicator() {
  if (mpi)
    MPI_Comm_free(&mpi->comm);
}

std::unique_ptr<Communicator> Communicator::initWorld(int *argc, char ***argv) {
  auto world = std::make_unique<Communicator>();
  if (!launchedByMpi())
    return world;
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (!initialized) {
    // Two threads call MPI, never at the same time: the communication
    // thread performs the step's collectives (src/CommQueue.h), the main
    // thread the driver's own exchanges between steps, when every
    // collective of the step has been waited. OpenMP and OpenBLAS threads
    // never call MPI.
    check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided),
          "MPI_Init_thread");
    std::atexit(finalizeAtExit);
  } else {
    check(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  if (provided < MPI_THREAD_SERIALIZED)
    fatal("MPI provides thread level %s (%d), the runtime's communication "
          "thread needs MPI_THREAD_SERIALIZED (%d) or higher (use an MPI "
          "library built with thread support)",
          threadLevelName(provided), provided, MPI_THREAD_SERIALIZED);
  world->mpi = std::make_unique<Mpi>();
  // A private duplicate: the runtime's messages never match anyone else's,
  // and its errors come back as codes that check() reports in the runtime's
  // format instead of MPI's default abort.
  check(MPI_Comm_dup(MPI_COMM_WORLD, &world->mpi->comm), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(world->mpi->comm, MPI_ERRORS_RETURN),
        "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(world->mpi->comm, &world->p.rank), "MPI_Comm_rank");
  check(MPI_Comm_size(world->mpi->comm, &world->p.count), "MPI_Comm_size");
  // The ranks on this node, whatever the launcher: a device backend gives
  // each its own GPU by this index. Every rank does this at start-up.
  MPI_Comm local = MPI_COMM_NULL;
  check(MPI_Comm_split_type(world->mpi->comm, MPI_COMM_TYPE_SHARED,
                            world->p.rank, MPI_INFO_NULL, &local),
        "MPI_Comm_split_type");
  check(MPI_Comm_rank(local, &world->p.localRank), "MPI_Comm_rank");
  check(MPI_Comm_size(local, &world->p.localCount), "MPI_Comm_size");
  MPI_Comm_free(&local);
  if (world->p.count > 1)
    setJobRank(world->p.rank, abortJob);
  return world;
}

void Communicator::allToAll(const void *send, void *recv, int64_t elems,
                            int64_t elemBytes) {
  if (!mpi) {
    std::memmove(recv, send, static_cast<size_t>(elems * elemBytes));
    return;
  }
  int n = mpiCount("MPI_Alltoall", elems);
  MPI_Datatype type = elementType("MPI_Alltoall", elemBytes);
  check(watched("MPI_Alltoall", [&] { return MPI_Alltoall(send, n, type, recv, n, type, mpi->comm); }), "MPI_Alltoall");
  sent += (p.count - 1) * elems * elemBytes;
}

void Communicator::allGather(const void *send, void *recv, int64_t elems,
                             int64_t elemBytes) {
  if (!mpi) {
    std::memmove(recv, send, static_cast<size_t>(elems * elemBytes));
    return;
  }
  int n = mpiCount("MPI_Allgather", elems);
  MPI_Datatype type = elementType("MPI_Allgather", elemBytes);
  check(watched("MPI_Allgather", [&] { return MPI_Allgather(send, n, type, recv, n, type, mpi->comm); }), "MPI_Allgather");
  sent += (p.count - 1) * elems * elemBytes;
}

void Communicator::gather(const void *send, void *recv, int64_t elems,
                          int64_t elemBytes, int root) {
  if (!mpi) {
    std::memmove(recv, send, static_cast<size_t>(elems * elemBytes));
    return;
  }
  int n = mpiCount("MPI_Gather", elems);
  MPI_Datatype type = elementType("MPI_Gather", elemBytes);
  check(watched("MPI_Gather", [&] { return MPI_Gather(send, n, type, recv, n, type, root, mpi->comm); }), "MPI_Gather");
  if (p.rank != root)
    sent += elems * elemBytes;
}

void Communicator::broadcast(void *buf, int64_t elems, int64_t elemBytes,
                             int root) {
  if (!mpi)
    return;
  int n = mpiCount("MPI_Bcast", elems);
  MPI_Datatype type = elementType("MPI_Bcast", elemBytes);
  check(watched("MPI_Bcast", [&] { return MPI_Bcast(buf, n, type, root, mpi->comm); }), "MPI_Bcast");
  if (p.rank == root)
    sent += (p.count - 1) * elems * elemBytes;
}

void Communicator::broadcastBytes(void *buf, int64_t bytes, int root) {
  if (!mpi)
    return;
  int n = mpiCount("MPI_Bcast", bytes);
  check(watched("MPI_Bcast", [&] { return MPI_Bcast(buf, n, MPI_BYTE, root, mpi->comm); }), "MPI_Bcast");
}

void Communicator::barrier() {
  if (mpi)
    check(watched("MPI_Barrier", [&] { return MPI_Barrier(mpi->comm); }), "MPI_Barrier");
}

std::vector<std::string> Communicator::gatherToRoot(const std::string &text) {
  if (!mpi)
    return {text};
  int length = mpiCount("MPI_Gather", static_cast<int64_t>(text.size()));
  bool root = p.rank == 0;
  std::vector<int> lengths(root ? p.count : 0);
  check(watched("MPI_Gather", [&] { return MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, mpi->comm); }), "MPI_Gather");
  std::vector<int> offsets(lengths.size());
  int64_t total = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    offsets[r] = mpiCount("MPI_Gatherv", total);
    total += lengths[r];
  }
  std::string all(static_cast<size_t>(mpiCount("MPI_Gatherv", total)), '\0');
  check(watched("MPI_Gatherv", [&] { return MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(),
                    offsets.data(), MPI_CHAR, 0, mpi->comm); }), "MPI_Gatherv");
  std::vector<std::string> texts;
  for (size_t r = 0; r < lengths.size(); ++r)
    texts.push_back(all.substr(offsets[r], lengths[r]));
  return texts;
}

} // namespace ztrt
