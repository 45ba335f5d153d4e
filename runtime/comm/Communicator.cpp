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

#include "comm/Communicator.h"

#include "comm/CommQueue.h"
#include "base/Support.h"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mpi.h>
#include <mutex>
#include <thread>
#include <unistd.h>

namespace ztrt {

struct Communicator::Mpi {
  MPI_Comm comm = MPI_COMM_NULL;
};

namespace {

void tellPeersReported();

/// The fatal-error hook of a rank of a multi-process job: ends every rank, so
/// that none waits forever for the failed one in a collective. The other
/// ranks are told first that this one has printed why (see
/// tellPeersReported).
void abortJob(int status) {
  tellPeersReported();
  MPI_Abort(MPI_COMM_WORLD, status);
}

/// The meeting of every rank before a refusal they all reached ends them.
void syncJob() { MPI_Barrier(MPI_COMM_WORLD); }

/// Registered with atexit() once MPI is initialized, so that every normal way
/// out (return from main, --help's exit(0), a fatal error in a world of one)
/// leaves MPI cleanly. Fatal errors with several ranks abort before this.
/// A communication thread still running (exit() while a context lives) is
/// joined first: no thread may call MPI during or after MPI_Finalize.
void stopWatchdog();

void finalizeAtExit() {
  stopCommQueues();
  stopWatchdog();
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
// Every blocking MPI call of the communicator records when it started, what
// it is and its number in this rank's sequence of collectives (every rank
// makes the same calls in the same order, so equal numbers are the same
// collective). A watchdog thread (startCollectiveWatchdog) ends the job
// when one has waited longer than the timeout, so that a stuck or dead rank
// never leaves the others spinning forever. Before it does, it asks every
// other rank's watchdog where that rank is, over a communicator of their
// own (needs MPI_THREAD_MULTIPLE), and names the ranks that did not arrive.
std::atomic<int64_t> blockedSinceNs{0};
std::atomic<const char *> blockedIn{nullptr};
std::atomic<int64_t> collectivesBegun{0};
std::atomic<const std::atomic<int64_t> *> watchedStep{nullptr};
/// The step's collective the communication thread is performing (its kind
/// and elements, set by noteCollective), or none.
std::atomic<const char *> collectiveKind{nullptr};
std::atomic<int64_t> collectiveElems{0};
/// The watchdogs' own communicator; MPI_COMM_NULL when MPI lacks
/// MPI_THREAD_MULTIPLE (the watchdog then reports only its own rank).
MPI_Comm watchComm = MPI_COMM_NULL;
int watchRank = 0, watchSize = 1;
/// Held by the watchdog while it calls MPI; finalizeAtExit takes it and
/// sets watchStopped, so that no watchdog call races MPI_Finalize.
/// Recursive: the watchdog's own fatal error (a timeout) aborts through
/// abortJob, which takes it again.
std::recursive_mutex watchMutex;
bool watchStopped = false;
/// Tags on watchComm: a query for a rank's state, its answer, and the
/// notice that a rank has printed its fatal error and is ending the job.
constexpr int kQueryTag = 1, kAnswerTag = 2, kReportedTag = 3;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <typename Call> int watched(const char *what, Call call) {
  blockedIn.store(what);
  collectivesBegun.fetch_add(1);
  blockedSinceNs.store(nowNs());
  int code = call();
  blockedSinceNs.store(0);
  return code;
}

/// Where a rank is, as its watchdog answers a query.
struct RankState {
  int64_t collective; ///< the number of its current or last collective
  int64_t step;       ///< the step it is in (0: before the first)
  int64_t waiting;    ///< 1 while it waits in a collective
  char what[48];      ///< that collective's MPI call
};

RankState currentState() {
  RankState s{};
  s.collective = collectivesBegun.load();
  const std::atomic<int64_t> *counter = watchedStep.load();
  s.step = counter ? counter->load() : 0;
  s.waiting = blockedSinceNs.load() != 0 ? 1 : 0;
  const char *what = blockedIn.load();
  std::snprintf(s.what, sizeof(s.what), "%s", what ? what : "");
  return s;
}

/// Notes the other ranks' notices that they printed their fatal error.
void readNotices() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kReportedTag, watchComm, &flag, &status) !=
            MPI_SUCCESS ||
        !flag)
      return;
    int notice = 0;
    MPI_Recv(&notice, 1, MPI_INT, status.MPI_SOURCE, kReportedTag, watchComm,
             MPI_STATUS_IGNORE);
    notePeerReported();
  }
}

/// Answers the other watchdogs' queries that have arrived.
void answerQueries() {
  readNotices();
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, watchComm, &flag, &status) !=
            MPI_SUCCESS ||
        !flag)
      return;
    int64_t query = 0;
    MPI_Recv(&query, 1, MPI_INT64_T, status.MPI_SOURCE, kQueryTag, watchComm,
             MPI_STATUS_IGNORE);
    RankState s = currentState();
    MPI_Send(&s, sizeof(s), MPI_BYTE, status.MPI_SOURCE, kAnswerTag,
             watchComm);
  }
}

std::string stepText(int64_t step) {
  return step > 0 ? "step " + std::to_string(step) : "before step 1";
}

/// Asks every other rank where it is (answering their questions while it
/// waits, for all the ranks that time out ask at once) and returns the list
/// of those not waiting in collective `mine`, or "" if all are.
std::string ranksNotArrived(int64_t mine) {
  const double window = 2.0;
  std::vector<RankState> states(watchSize);
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  int64_t query = mine;
  for (int r = 0; r < watchSize; ++r) {
    if (r == watchRank)
      continue;
    MPI_Request send, recv;
    MPI_Isend(&query, 1, MPI_INT64_T, r, kQueryTag, watchComm, &send);
    MPI_Request_free(&send);
    MPI_Irecv(&states[r], sizeof(RankState), MPI_BYTE, r, kAnswerTag,
              watchComm, &recv);
    requests.push_back(recv);
    peers.push_back(r);
  }
  std::vector<bool> answered(watchSize, false);
  const int64_t deadline = nowNs() + static_cast<int64_t>(window * 1e9);
  size_t pending = requests.size();
  while (pending > 0 && nowNs() < deadline) {
    answerQueries();
    for (size_t i = 0; i < requests.size(); ++i) {
      if (answered[peers[i]])
        continue;
      int done = 0;
      MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE);
      if (done) {
        answered[peers[i]] = true;
        --pending;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string list;
  for (int r : peers) {
    std::string why;
    const RankState &s = states[r];
    if (!answered[r])
      why = format("no answer in %.0f s: stopped, hung or dead", window);
    else if (s.waiting && s.collective == mine)
      continue;
    else if (s.waiting)
      why = format("%s, waiting in %s, collective #%lld", stepText(s.step).c_str(),
                   s.what, static_cast<long long>(s.collective));
    else
      why = format("%s, computing, after collective #%lld",
                   stepText(s.step).c_str(),
                   static_cast<long long>(s.collective));
    list += format("%srank %d (%s)", list.empty() ? "" : ", ", r, why.c_str());
  }
  return list;
}

/// Before this rank's fatal error ends the job: tells every other rank's
/// watchdog that the reason has been printed, so that the launcher's
/// SIGTERM, which follows the abort, ends them without a line of their
/// own, and gives the watchdogs (which look every 100 ms) time to read it.
void tellPeersReported() {
  std::lock_guard<std::recursive_mutex> lock(watchMutex);
  if (watchComm == MPI_COMM_NULL || watchStopped)
    return;
  static const int notice = 1;
  for (int r = 0; r < watchSize; ++r) {
    if (r == watchRank)
      continue;
    MPI_Request request;
    if (MPI_Isend(&notice, 1, MPI_INT, r, kReportedTag, watchComm,
                  &request) == MPI_SUCCESS)
      MPI_Request_free(&request);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
}

void stopWatchdog() {
  std::lock_guard<std::recursive_mutex> lock(watchMutex);
  watchStopped = true;
  if (watchComm != MPI_COMM_NULL)
    MPI_Comm_free(&watchComm);
}

} // namespace

WatchedWait::WatchedWait(const char *what) {
  blockedIn.store(what);
  collectivesBegun.fetch_add(1);
  blockedSinceNs.store(nowNs());
}

WatchedWait::~WatchedWait() { blockedSinceNs.store(0); }

void noteCollective(const char *kind, int64_t elems) {
  collectiveElems.store(elems);
  collectiveKind.store(kind);
}

void startCollectiveWatchdog(double timeoutSeconds,
                             const std::atomic<int64_t> *step) {
  watchedStep.store(step);
  if (!(timeoutSeconds > 0.0) && watchComm == MPI_COMM_NULL &&
      !launchedByMpi())
    return;
  // The launcher that started this rank (mpirun's daemon, slurmstepd):
  // when it is gone (killed with SIGKILL, by the OOM killer) the job is
  // over, but nothing tells the ranks, which would go on training and
  // writing checkpoints after the launcher's caller has seen it end.
  const pid_t launcher = launchedByMpi() ? ::getppid() : 0;
  // Output goes to the launcher through pipes: once it is gone, a write
  // fails (EPIPE) instead of ending the rank by SIGPIPE before the check
  // below ends it the SIGTERM way (its temporary files removed).
  if (launcher > 1)
    std::signal(SIGPIPE, SIG_IGN);
  std::thread([timeoutSeconds, launcher] {
    // Without a timeout the thread still answers queries and notices.
    const int64_t limit = timeoutSeconds > 0.0
                              ? static_cast<int64_t>(timeoutSeconds * 1e9)
                              : INT64_MAX;
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::unique_lock<std::recursive_mutex> lock(watchMutex);
      if (watchStopped)
        return;
      if (launcher > 1 && ::getppid() != launcher)
        endWithoutLauncher("the launcher that started this rank (process "
                           "%d) is gone: ending the rank in %s, as the job "
                           "is over",
                           static_cast<int>(launcher),
                           stepText(currentState().step).c_str());
      if (watchComm != MPI_COMM_NULL)
        answerQueries();
      int64_t since = blockedSinceNs.load();
      if (since == 0 || nowNs() - since < limit)
        continue;
      const RankState me = currentState();
      const char *kind = collectiveKind.load();
      std::string what =
          kind ? format("the %s of %lld elements (%s)", kind,
                        static_cast<long long>(collectiveElems.load()), me.what)
               : std::string(me.what);
      std::string missing =
          watchComm != MPI_COMM_NULL
              ? ranksNotArrived(me.collective)
              : std::string("unknown (MPI without MPI_THREAD_MULTIPLE cannot "
                            "ask the other ranks)");
      if (missing.empty())
        missing = "none (every rank waits in this collective: their "
                  "collectives do not match)";
      fatal("%s, collective #%lld of %s, has waited %.0f s for the other "
            "ranks (--collective-timeout %g); did not arrive: %s; ending the "
            "job",
            what.c_str(), static_cast<long long>(me.collective),
            stepText(me.step).c_str(), timeoutSeconds, timeoutSeconds,
            missing.c_str());
    }
  }).detach();
}

namespace {

/// Renumbers per-member labels 0, 1, ... in the order of their first
/// member: nodes named by their lowest rank.
std::vector<int> numberByFirstMember(const std::vector<int> &labels) {
  std::vector<int> seen, out;
  for (int label : labels) {
    auto it = std::find(seen.begin(), seen.end(), label);
    out.push_back(static_cast<int>(it - seen.begin()));
    if (it == seen.end())
      seen.push_back(label);
  }
  return out;
}

} // namespace

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
    // The communication thread performs the step's collectives
    // (comm/CommQueue.h), the main thread the driver's own exchanges between
    // steps, when every collective of the step has been waited: never at
    // the same time (MPI_THREAD_SERIALIZED). The collective watchdog asks
    // the other ranks' watchdogs where they are while a collective waits,
    // on its own communicator: that needs MPI_THREAD_MULTIPLE, and without
    // it the watchdog names only its own rank. OpenMP and OpenBLAS threads
    // never call MPI.
    check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided),
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
  // The node: its lowest rank (local rank 0, the split being keyed by
  // rank) names it; nodes are numbered in the order of those ranks.
  int leader = world->p.rank;
  check(MPI_Bcast(&leader, 1, MPI_INT, 0, local), "MPI_Bcast");
  MPI_Comm_free(&local);
  std::vector<int> leaders(static_cast<size_t>(world->p.count));
  check(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT,
                      world->mpi->comm),
        "MPI_Allgather");
  // Every member's node: the leaders in the order of their ranks.
  world->memberNodes = numberByFirstMember(leaders);
  world->deriveNodeParams();
  if (world->p.count > 1) {
    setJobRank(world->p.rank, abortJob, syncJob);
    if (provided >= MPI_THREAD_MULTIPLE) {
      check(MPI_Comm_dup(MPI_COMM_WORLD, &watchComm), "MPI_Comm_dup");
      check(MPI_Comm_set_errhandler(watchComm, MPI_ERRORS_RETURN),
            "MPI_Comm_set_errhandler");
      watchRank = world->p.rank;
      watchSize = world->p.count;
    }
  }
  return world;
}

void Communicator::setRanksPerNode(int n) {
  for (int r = 0; r < p.count; ++r)
    memberNodes[static_cast<size_t>(r)] = r / n;
  deriveNodeParams();
}

void Communicator::deriveNodeParams() {
  p.node = memberNodes[static_cast<size_t>(p.rank)];
  p.nodeCount = 0;
  p.localRank = 0;
  p.localCount = 0;
  for (int r = 0; r < p.count; ++r) {
    const int node = memberNodes[static_cast<size_t>(r)];
    p.nodeCount = std::max(p.nodeCount, node + 1);
    if (node != p.node)
      continue;
    ++p.localCount;
    if (r < p.rank)
      ++p.localRank;
  }
}

void Communicator::noteSent(int member, int64_t bytes) {
  if (member == p.rank)
    return;
  if (memberNodes[static_cast<size_t>(member)] == p.node)
    sentIntra += bytes;
  else
    sentInter += bytes;
}

void Communicator::noteSentToAll(int64_t bytes) {
  for (int r = 0; r < p.count; ++r)
    noteSent(r, bytes);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  auto group = std::make_unique<Communicator>();
  if (!mpi)
    return group;
  group->mpi = std::make_unique<Mpi>();
  check(MPI_Comm_split(mpi->comm, color, key, &group->mpi->comm),
        "MPI_Comm_split");
  check(MPI_Comm_set_errhandler(group->mpi->comm, MPI_ERRORS_RETURN),
        "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(group->mpi->comm, &group->p.rank), "MPI_Comm_rank");
  check(MPI_Comm_size(group->mpi->comm, &group->p.count), "MPI_Comm_size");
  // The members' nodes as this communicator knows them (after any
  // setRanksPerNode), renumbered by their lowest member of the group.
  std::vector<int> nodes(static_cast<size_t>(group->p.count));
  check(MPI_Allgather(&p.node, 1, MPI_INT, nodes.data(), 1, MPI_INT,
                      group->mpi->comm),
        "MPI_Allgather");
  group->memberNodes = numberByFirstMember(nodes);
  group->deriveNodeParams();
  return group;
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
  noteSentToAll(elems * elemBytes);
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
  noteSentToAll(elems * elemBytes);
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
    noteSent(root, elems * elemBytes);
}

void Communicator::broadcast(void *buf, int64_t elems, int64_t elemBytes,
                             int root) {
  if (!mpi)
    return;
  int n = mpiCount("MPI_Bcast", elems);
  MPI_Datatype type = elementType("MPI_Bcast", elemBytes);
  check(watched("MPI_Bcast", [&] { return MPI_Bcast(buf, n, type, root, mpi->comm); }), "MPI_Bcast");
  if (p.rank == root)
    noteSentToAll(elems * elemBytes);
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
