//===- CommQueue.cpp - The communication thread and its queue -------------===//
//
// Part of ztrain's runtime.
//
// Locking: one mutex guards the queue, the outstanding entries and the stop
// flag. The thread holds it only to take the next handle and to publish a
// result, never while it performs a collective, so start() and wait() on
// the step thread never wait for MPI except in wait()'s own condition.
// fatal() is never called with the mutex held: it may end in exit(), whose
// handlers stop the queues and would need the mutex.
//
//===----------------------------------------------------------------------===//

#include "comm/CommQueue.h"

#include "backends/Backend.h"
#include "comm/Communicator.h"
#include "step/Context.h"
#include "base/Support.h"

#include <algorithm>
#include <pthread.h>
#include <vector>

namespace ztrt {

namespace {

// The live threaded queues, for stopCommQueues() at exit. Never destroyed:
// a function-local static made after MPI's atexit handler was registered
// would be destroyed before that handler runs (exit() unwinds both in
// reverse order), and the handler would walk a dead vector.
std::mutex registryMutex;
std::vector<CommQueue *> &registry() {
  static auto *queues = new std::vector<CommQueue *>;
  return *queues;
}

} // namespace

CommQueue::CommQueue(Backend &backend, Communicator &comm, bool threaded)
    : backend(backend), axes{&comm, &comm, &comm},
      deviceMode(backend.enqueuesCollectives()),
      threadedMode(threaded && !deviceMode) {
  if (!threadedMode)
    return;
  worker = std::thread([this] { run(); });
  // Visible in debuggers and top -H; at most 15 characters.
  pthread_setname_np(worker.native_handle(), "ztrt-comm");
  std::lock_guard<std::mutex> lock(registryMutex);
  registry().push_back(this);
}

CommQueue::~CommQueue() {
  // Unregistered first, so that stopCommQueues() never touches a queue
  // being destroyed.
  {
    std::lock_guard<std::mutex> lock(registryMutex);
    auto &queues = registry();
    queues.erase(std::remove(queues.begin(), queues.end(), this), queues.end());
  }
  stop();
}

void CommQueue::stop() {
  if (!threadedMode)
    return;
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  queued.notify_all();
  if (!worker.joinable())
    return;
  if (worker.get_id() == std::this_thread::get_id()) {
    // exit() on the thread itself: it cannot join itself, and it ends
    // with the process.
    worker.detach();
    return;
  }
  worker.join();
}

namespace {

/// A device backend's wire bytes by link, as NCCL's ring sends them: all
/// to the next rank of the group.
void splitRingBytes(const Communicator &comm, CollectiveResult &result) {
  const int next = (comm.rank() + 1) % comm.count();
  if (comm.nodeOf(next) == comm.node())
    result.intraNodeWireBytes = result.wireBytes;
  else
    result.interNodeWireBytes = result.wireBytes;
}

} // namespace

CollectiveResult CommQueue::execute(const CollectiveRequest &r) {
  Communicator &comm = *axes[r.axis];
  const int64_t intraBefore = comm.sentIntraNodeBytes(),
                interBefore = comm.sentInterNodeBytes();
  CollectiveResult result;
  result.kind = r.kind;
  result.elems = r.elems;
  result.ranks = comm.count();
  result.payloadBytes = r.elems * elementBytes(r.dtype);
  result.begin = Clock::now();
  noteCollective(collectiveName(r.kind), r.elems);
  switch (r.kind) {
  case Collective::AllReduce:
    result.wireBytes =
        backend.allReduce(comm, r.dtype, r.in, r.out, r.elems, r.mean);
    break;
  case Collective::ReduceScatter:
    result.wireBytes =
        backend.reduceScatter(comm, r.dtype, r.in, r.out, r.elems, r.mean);
    break;
  case Collective::AllGather:
    result.wireBytes = backend.allGather(comm, r.dtype, r.in, r.out, r.elems);
    break;
  case Collective::Broadcast:
    result.wireBytes = backend.bcast(comm, r.dtype, r.out, r.elems, r.root);
    break;
  }
  result.end = Clock::now();
  noteCollective(nullptr, 0);
  result.intraNodeWireBytes = comm.sentIntraNodeBytes() - intraBefore;
  result.interNodeWireBytes = comm.sentInterNodeBytes() - interBefore;
  // A backend that sent other than through the communicator's counted
  // calls: its bytes by the ring's model.
  if (result.intraNodeWireBytes + result.interNodeWireBytes !=
      result.wireBytes) {
    result.intraNodeWireBytes = result.interNodeWireBytes = 0;
    splitRingBytes(comm, result);
  }
  return result;
}

int64_t CommQueue::start(const CollectiveRequest &request) {
  if (deviceMode) {
    // The step thread enqueues: every rank issues its collectives in the
    // same order, which is all NCCL needs, and only this thread uses the
    // communicator during a step.
    int64_t wireBytes = 0;
    Communicator &comm = *axes[request.axis];
    const int64_t ticket = backend.enqueueCollective(comm, request, &wireBytes);
    std::lock_guard<std::mutex> lock(mutex);
    const int64_t handle = nextHandle++;
    Entry &entry = outstanding[handle];
    entry.request = request;
    entry.ticket = ticket;
    entry.result.kind = request.kind;
    entry.result.elems = request.elems;
    entry.result.ranks = comm.count();
    entry.result.payloadBytes = request.elems * elementBytes(request.dtype);
    entry.result.wireBytes = wireBytes;
    splitRingBytes(comm, entry.result);
    entry.result.deferred = true;
    entry.result.ticket = ticket;
    return handle;
  }
  if (!threadedMode) {
    CollectiveResult result = execute(request);
    std::lock_guard<std::mutex> lock(mutex);
    const int64_t handle = nextHandle++;
    Entry &entry = outstanding[handle];
    entry.request = request;
    entry.done = true;
    entry.result = result;
    return handle;
  }
  // Read on the step thread, where --threads was applied.
  const int threads = backend.threads();
  int64_t handle;
  {
    std::unique_lock<std::mutex> lock(mutex);
    if (stopping) {
      lock.unlock();
      fatal("%s: the communication thread has stopped",
            collectiveName(request.kind));
    }
    handle = nextHandle++;
    Entry &entry = outstanding[handle];
    entry.request = request;
    entry.threads = threads;
    pending.push_back(handle);
  }
  queued.notify_one();
  return handle;
}

void CommQueue::run() {
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    queued.wait(lock, [this] { return !pending.empty() || stopping; });
    // Stopping still performs what was queued: a rank that left a
    // collective undone would leave the others waiting for it.
    if (pending.empty())
      return;
    const int64_t handle = pending.front();
    pending.pop_front();
    // The entry stays put until its wait, which needs `done` first.
    Entry &entry = outstanding.find(handle)->second;
    const CollectiveRequest request = entry.request;
    const int threads = entry.threads;
    lock.unlock();
    if (threads > 0 && threads != appliedThreads) {
      backend.adoptThreads(threads);
      appliedThreads = threads;
    }
    CollectiveResult result = execute(request);
    lock.lock();
    entry.result = result;
    entry.done = true;
    completedCv.notify_all();
  }
}

CollectiveResult CommQueue::wait(int64_t handle, const char *op) {
  std::unique_lock<std::mutex> lock(mutex);
  auto it = outstanding.find(handle);
  if (it == outstanding.end()) {
    const bool issued = handle >= 1 && handle < nextHandle;
    lock.unlock();
    if (issued)
      fatal("%s: collective handle %lld was already waited", op,
            static_cast<long long>(handle));
    fatal("%s: unknown collective handle %lld (no collective was started "
          "with it)",
          op, static_cast<long long>(handle));
  }
  if (deviceMode) {
    CollectiveResult result = it->second.result;
    outstanding.erase(it);
    lock.unlock();
    backend.awaitCollective(result.ticket);
    return result;
  }
  completedCv.wait(lock, [&] { return it->second.done; });
  CollectiveResult result = it->second.result;
  outstanding.erase(it);
  return result;
}

bool CommQueue::completed(int64_t handle) {
  std::unique_lock<std::mutex> lock(mutex);
  auto it = outstanding.find(handle);
  if (it == outstanding.end())
    return true;
  if (deviceMode) {
    const int64_t ticket = it->second.ticket;
    lock.unlock();
    return backend.collectiveDone(ticket);
  }
  return it->second.done;
}

int64_t CommQueue::oldestOutstanding(Collective *kind, size_t *count) {
  std::lock_guard<std::mutex> lock(mutex);
  *count = outstanding.size();
  if (outstanding.empty())
    return 0;
  *kind = outstanding.begin()->second.request.kind;
  return outstanding.begin()->first;
}

void stopCommQueues() {
  // Held throughout: a destructor on another thread waits until its queue
  // is stopped here, and then finds nothing left to join.
  std::lock_guard<std::mutex> lock(registryMutex);
  for (CommQueue *queue : registry())
    queue->stop();
}

} // namespace ztrt
