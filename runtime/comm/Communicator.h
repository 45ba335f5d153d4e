//===- Communicator.h - The ranks of a job and data movement ---*- C++ -*-===//
//
// Modeled on IREE's HAL channel: a communicator is described by a params
// struct (this process's rank and the number of ranks) and is what the
// collectives of ztrt_abi.def run on. The context owns one; nothing about the
// job is global except MPI's own state.
//
// A process is one rank of an MPI job only when a launcher (mpirun, mpiexec,
// srun) started it; a process started by hand is a world of one that never
// initializes MPI (see launchedByMpi() for why and how).
//
// Only one thread calls a communicator's functions at a time: while a step
// runs, the context's communication thread (comm/CommQueue.h); between steps,
// the driver's thread, once every collective of the step has been waited.
//
// The functions below move host memory between ranks and do no arithmetic,
// so their results never depend on MPI's choice of algorithm; backends build
// the reducing collectives on top of them with a fixed summation order. They
// are collective: every rank must call them in the same order with the same
// sizes. In a world of one they are local copies.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_COMM_COMMUNICATOR_H
#define ZTRT_COMM_COMMUNICATOR_H

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ztrt {

struct CommunicatorParams {
  /// This process's rank, in [0, count).
  int rank = 0;
  /// The number of ranks.
  int count = 1;
  /// This process's rank among the ranks on its node (the processes that
  /// share its memory), and their number: what picks a rank's GPU.
  int localRank = 0;
  int localCount = 1;
  /// This rank's node, in [0, nodeCount): nodes numbered by their lowest
  /// rank (MPI's shared-memory split, whatever the launcher; or
  /// --ranks-per-node).
  int node = 0;
  int nodeCount = 1;
};

/// True when the environment shows that an MPI launcher started this
/// process: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE), any PMIx launcher
/// (PMIX_RANK: Open MPI 4/5, srun --mpi=pmix) or a PMI-1/2 launcher
/// (PMI_RANK: MPICH and Intel MPI's hydra, srun --mpi=pmi2).
bool launchedByMpi();

/// Starts a thread that ends the job with one line per waiting rank when a
/// blocking collective of any communicator has waited `timeoutSeconds`
/// (<= 0: no watchdog). `step` points at the driver's step counter, named
/// in the message.
void startCollectiveWatchdog(double timeoutSeconds,
                             const std::atomic<int64_t> *step);
/// The step's collective the calling thread performs next (`kind`, e.g.
/// "reduce_scatter", a string that lives forever, and its elements), named
/// by the watchdog if it times out; null `kind`: none.
void noteCollective(const char *kind, int64_t elems);

/// Times a blocking wait that is not an MPI call of a communicator — a
/// device backend waiting for its enqueued NCCL collectives — as the
/// watchdog times those: one more in the rank's sequence of collectives,
/// and the job ends when it has waited --collective-timeout seconds, the
/// message naming `what` (a string that lives forever).
class WatchedWait {
public:
  explicit WatchedWait(const char *what);
  ~WatchedWait();
  WatchedWait(const WatchedWait &) = delete;
  WatchedWait &operator=(const WatchedWait &) = delete;
};

class Communicator {
public:
  /// A world of one process, without MPI.
  Communicator();
  ~Communicator();
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;

  /// The job this process belongs to. Under a launcher: initializes MPI
  /// (MPI_THREAD_SERIALIZED: the context's communication thread and the
  /// main thread call MPI, never at once; less is a fatal error), takes a
  /// duplicate of MPI_COMM_WORLD, finalizes MPI at process exit (after
  /// joining any communication thread still running), and, when
  /// there is more than one rank, makes fatal errors name the rank and abort
  /// the whole job. Otherwise a world of one. Call at most once per process.
  static std::unique_ptr<Communicator> initWorld(int *argc, char ***argv);

  const CommunicatorParams &params() const { return p; }
  int rank() const { return p.rank; }
  int count() const { return p.count; }
  int localRank() const { return p.localRank; }
  int localCount() const { return p.localCount; }
  int node() const { return p.node; }
  int nodeCount() const { return p.nodeCount; }
  /// Treats every `n` consecutive ranks as one node (--ranks-per-node: a
  /// multi-node layout on one machine, for tests); `n` divides count().
  /// Communicators split from this one afterwards inherit the layout.
  void setRanksPerNode(int n);
  /// The node of member `member` (in [0, count())), numbered as node() is.
  int nodeOf(int member) const { return memberNodes[member]; }

  /// A communicator of the members that pass the same `color`, ordered by
  /// `key` (ties by rank): MPI_Comm_split of this one's private
  /// communicator. Collective over this communicator. Its params are this
  /// rank's place in the group; its nodes are the members' nodes as this
  /// communicator knows them (MPI's or --ranks-per-node's), numbered by
  /// their lowest member of the group. A world of one gives a world of one.
  std::unique_ptr<Communicator> split(int color, int key);

  // Elements are `elemBytes` bytes each (1, 2, 4 or 8: the size of a
  // tensor's dtype) and are moved as bits, never converted.

  /// `send` holds count() blocks of `elems` elements; block r goes to rank r.
  /// Block s of `recv` (count() * elems elements) is what rank s sent here.
  void allToAll(const void *send, void *recv, int64_t elems,
                int64_t elemBytes);
  /// `recv` (count() * elems elements) = every rank's `send` (elems
  /// elements), in rank order. `send` must not overlap `recv`.
  void allGather(const void *send, void *recv, int64_t elems,
                 int64_t elemBytes);
  /// On `root`, `recv` (count() * elems elements) = every rank's `send`
  /// (elems elements), in rank order; elsewhere `recv` is unused and may be
  /// null. `send` must not overlap `recv`.
  void gather(const void *send, void *recv, int64_t elems, int64_t elemBytes,
              int root);
  /// `buf` (elems elements) = root's `buf`, on every rank.
  void broadcast(void *buf, int64_t elems, int64_t elemBytes, int root);
  /// `buf` (`bytes` bytes, moved as such) = root's `buf`, on every rank
  /// (NCCL's unique id).
  void broadcastBytes(void *buf, int64_t bytes, int root);
  /// Returns once every rank has called it: what a rank did before its
  /// call (a committed file) happened before what any rank does after.
  void barrier();
  /// Every rank's `text`, in rank order, on rank 0; empty on the others.
  std::vector<std::string> gatherToRoot(const std::string &text);

  /// Bytes of data this rank has handed MPI for other ranks so far in
  /// allToAll, allGather, gather and broadcast: the counts it passed, times
  /// the element size, for every destination but itself (allToAll and
  /// allGather: to each other member; gather: to the root; broadcast: from
  /// the root to each other member). Backends report a collective's wire
  /// bytes as the difference across it. By the destination's link: those
  /// for members on this rank's node, and those for other nodes.
  int64_t sentBytes() const { return sentIntra + sentInter; }
  int64_t sentIntraNodeBytes() const { return sentIntra; }
  int64_t sentInterNodeBytes() const { return sentInter; }

private:
  struct Mpi;
  /// Counts `bytes` sent to member `member` by its link.
  void noteSent(int member, int64_t bytes);
  /// Counts `bytes` sent to every member but this rank.
  void noteSentToAll(int64_t bytes);
  /// Sets node, nodeCount, localRank and localCount from memberNodes.
  void deriveNodeParams();
  CommunicatorParams p;
  int64_t sentIntra = 0, sentInter = 0;
  /// Each member's node, as node() numbers them.
  std::vector<int> memberNodes{0};
  /// Null in a world of one.
  std::unique_ptr<Mpi> mpi;
};

} // namespace ztrt

#endif // ZTRT_COMM_COMMUNICATOR_H
