//===- CommQueue.h - The communication thread and its queue -----*- C++ -*-===//
//
// Every collective a step issues, synchronous or not, goes through the
// context's CommQueue. With more than one rank the queue owns one
// communication thread that takes collectives in the order they were
// started (FIFO) and performs them one at a time with the backend's
// deterministic algorithms, while the step thread goes on computing; only
// that thread calls MPI while a step runs. Since every rank issues the same
// collectives in the same order (the compiler checks it), every rank's
// thread performs them in the same order, which is all MPI needs to match
// them. A synchronous collective is a start followed at once by a wait.
//
// In a world of one a collective is a copy: it is done inline in start(),
// no thread needed, and the handle bookkeeping is the same.
//
// A device backend (Backend::enqueuesCollectives(), the cuda backend) needs
// no thread either: start() enqueues the collective on the backend's
// communication stream behind an event of its compute stream, wait() makes
// the compute stream wait for the collective's completion event, and
// neither blocks the host. The collective's timing is known only once the
// device has run it, so its result is marked `deferred` and the context
// accounts it at its next synchronize().
//
// Handles are 1, 2, 3, ... in start order. A handle is "outstanding" from
// its start until its one wait; waiting on anything else is a fatal error.
//
// Ownership of the buffers passes to the queue from start() to wait(): the
// step must neither read `out` nor write `in` in between (ztrt_abi.def).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_COMM_COMMQUEUE_H
#define ZTRT_COMM_COMMQUEUE_H

#include "base/DType.h"
#include "report/Trace.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

namespace ztrt {

class Backend;
class Communicator;
enum class Collective;

/// One collective's arguments, as the ztrt_* entry point received them.
struct CollectiveRequest {
  Collective kind;
  DType dtype = DType::F32;
  const void *in = nullptr;
  /// The output; the buffer of a broadcast.
  void *out = nullptr;
  /// n for all_reduce and broadcast, count for reduce_scatter and
  /// all_gather (as in collectiveBytes).
  int64_t elems = 0;
  bool mean = false;
  int root = 0;
  /// The mesh axis whose group performs it (ztrt_abi.def): 0 all ranks,
  /// 1 this rank's shard group, 2 its replicate group. A broadcast's is 0.
  int axis = 0;
};

/// The number of mesh axes a collective may name (0, 1, 2).
constexpr int kMeshAxes = 3;

/// What a completed collective reports to its wait.
struct CollectiveResult {
  Collective kind;
  int64_t elems = 0;
  /// The rank count of the request's axis group.
  int64_t ranks = 1;
  /// elems * the element size of the request's dtype: the per-rank payload
  /// the entry point handed the backend.
  int64_t payloadBytes = 0;
  /// The backend's return value: bytes this rank handed to the transport.
  int64_t wireBytes = 0;
  /// wireBytes by the destination's link: to ranks on this rank's node,
  /// and to other nodes (their sum is wireBytes). Host backends: what the
  /// communicator counted per destination. Device backends (NCCL does not
  /// say): the ring's model, every byte to the next rank of the group.
  int64_t intraNodeWireBytes = 0, interNodeWireBytes = 0;
  /// When the backend began and ended it (on the communication thread, or
  /// inline). Not set when `deferred`.
  Clock::time_point begin, end;
  /// Enqueued on a device: begin, end and the exposed time come from the
  /// backend's takeCollectiveTiming(ticket) after the next synchronize.
  bool deferred = false;
  int64_t ticket = 0;
};

class CommQueue {
public:
  /// `threaded`: run collectives on a communication thread of their own;
  /// otherwise inline in start() (a world of one). A backend that enqueues
  /// collectives overrides both: no thread, and start() enqueues.
  CommQueue(Backend &backend, Communicator &comm, bool threaded);
  /// stop().
  ~CommQueue();
  CommQueue(const CommQueue &) = delete;
  CommQueue &operator=(const CommQueue &) = delete;

  /// The communicator of mesh axis `axis` (the constructor's `comm` for
  /// each until set). Set before any collective of that axis starts.
  void setAxis(int axis, Communicator &comm) { axes[axis] = &comm; }
  Communicator &axis(int axis) const { return *axes[axis]; }

  bool threaded() const { return threadedMode; }
  /// Whether collectives are enqueued on the backend's device streams.
  bool enqueued() const { return deviceMode; }

  /// Queues (or, inline, performs) a collective; returns its handle.
  int64_t start(const CollectiveRequest &request);
  /// Blocks until the collective behind `handle` has completed and retires
  /// the handle. Fatal, naming `op` and the handle, if the handle is not
  /// outstanding (never returned by start(), or already waited).
  CollectiveResult wait(int64_t handle, const char *op);
  /// Whether the collective behind `handle` has completed; never blocks. A
  /// handle that is no longer outstanding has completed. For tests.
  bool completed(int64_t handle);
  /// The oldest outstanding handle (0 if none), its kind and the number of
  /// outstanding handles.
  int64_t oldestOutstanding(Collective *kind, size_t *count);

  /// Performs what is still queued, then ends and joins the thread;
  /// idempotent. Runs from the destructor and, through stopCommQueues(),
  /// at exit before MPI_Finalize. Called on the communication thread itself
  /// (a fatal error there that ends up in exit()), it only tells the
  /// thread to end.
  void stop();

private:
  struct Entry {
    CollectiveRequest request;
    /// The step thread's kernel thread count at start (see adoptThreads).
    int threads = 0;
    bool done = false;
    /// The backend's ticket (device mode only).
    int64_t ticket = 0;
    CollectiveResult result;
  };

  /// The communication thread's loop.
  void run();
  CollectiveResult execute(const CollectiveRequest &request);

  Backend &backend;
  /// By mesh axis.
  Communicator *axes[kMeshAxes];
  const bool deviceMode;
  const bool threadedMode;

  std::mutex mutex;
  /// Signalled when a collective is queued or the thread must stop.
  std::condition_variable queued;
  /// Signalled when a collective completes.
  std::condition_variable completedCv;
  /// Handles waiting for the thread, in start order.
  std::deque<int64_t> pending;
  /// Started and not yet waited, by handle. A std::map keeps references to
  /// its entries valid while others are inserted, so the thread may fill an
  /// entry's result while the step thread starts more.
  std::map<int64_t, Entry> outstanding;
  int64_t nextHandle = 1;
  bool stopping = false;
  std::thread worker;
  /// The thread count last given to Backend::adoptThreads (thread only).
  int appliedThreads = 0;
};

/// Stops every communication thread still running (see CommQueue::stop):
/// MPI_Finalize must not run while one could still call MPI.
void stopCommQueues();

} // namespace ztrt

#endif // ZTRT_COMM_COMMQUEUE_H
