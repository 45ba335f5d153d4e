//===- CudaCollectives.cpp - The cuda backend: NCCL collectives -----------===//
//
// Part of ztrain's runtime. The cuda backend's collectives: enqueued on the
// communication stream and ordered against the compute stream with events
// (CudaBackend.cpp's file comment), NCCL's errors polled while waiting, and
// the events' timing mapped onto the host clock.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/CudaBackendImpl.h"

#include "comm/Communicator.h"
#include "base/Support.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace ztrt {

// --- Collectives -----------------------------------------------------------
// The synchronous forms (not used by the context, which enqueues): the
// enqueued collective, waited and finished.

int64_t CudaBackend::allReduce(Communicator &world, DType dtype, const void *in,
                               void *out, int64_t n, bool mean) {
  return blocking(world, Collective::AllReduce, dtype, in, out, n, mean, 0);
}
int64_t CudaBackend::reduceScatter(Communicator &world, DType dtype,
                                   const void *in, void *out, int64_t count,
                                   bool mean) {
  return blocking(world, Collective::ReduceScatter, dtype, in, out, count,
                  mean, 0);
}
int64_t CudaBackend::allGather(Communicator &world, DType dtype, const void *in,
                               void *out, int64_t count) {
  return blocking(world, Collective::AllGather, dtype, in, out, count, false,
                  0);
}
int64_t CudaBackend::bcast(Communicator &world, DType dtype, void *buf,
                           int64_t n, int root) {
  return blocking(world, Collective::Broadcast, dtype, buf, buf, n, false,
                  root);
}

bool CudaBackend::enqueuesCollectives() const { return true; }

int64_t CudaBackend::enqueueCollective(Communicator &world,
                                       const CollectiveRequest &request,
                                       int64_t *wireBytes) {
  // The NCCL communicator is the world's: a group of other ranks (a mesh
  // axis of a hybrid-sharded step) has none yet.
  if (world.count() != ranks)
    fatal("%s on mesh axis %d (a group of %d of the %d ranks): hybrid "
          "sharding runs on the cpu backend only for now",
          collectiveName(request.kind), request.axis, world.count(), ranks);
  Ticket ticket;
  ticket.ready = event(false);
  ticket.begin = event(true);
  ticket.end = event(true);
  check(cudaEventRecord(ticket.ready, compute), "cudaEventRecord");
  check(cudaStreamWaitEvent(comm, ticket.ready, 0), "cudaStreamWaitEvent");
  check(cudaEventRecord(ticket.begin, comm), "cudaEventRecord");
  execute(request);
  check(cudaEventRecord(ticket.end, comm), "cudaEventRecord");
  *wireBytes = ncclWireBytes(request);
  const int64_t id = nextTicket++;
  tickets.emplace(id, ticket);
  return id;
}

void CudaBackend::awaitCollective(int64_t id) {
  Ticket &ticket = find(id);
  ticket.reached = event(true);
  check(cudaEventRecord(ticket.reached, compute), "cudaEventRecord");
  check(cudaStreamWaitEvent(compute, ticket.end, 0), "cudaStreamWaitEvent");
  ticket.awaited = true;
}

bool CudaBackend::collectiveDone(int64_t id) {
  cudaError_t status = cudaEventQuery(find(id).end);
  if (status == cudaErrorNotReady)
    return false;
  check(status, "cudaEventQuery");
  return true;
}

bool CudaBackend::takeCollectiveTiming(int64_t id,
                                       DeviceCollectiveTiming *timing) {
  auto it = tickets.find(id);
  if (it == tickets.end() || !it->second.timed)
    return false;
  *timing = it->second.timing;
  Ticket &t = it->second;
  recycle(t.ready, false);
  recycle(t.begin, true);
  recycle(t.end, true);
  recycle(t.reached, true);
  tickets.erase(it);
  return true;
}
/// The bytes this rank hands NCCL for other ranks: NCCL does not say what
/// it sent, so the ring algorithm's per-rank volume for the element count
/// and element size NCCL was given (reduce-scatter and all-gather send
/// N-1 chunks of `count`; all-reduce 2 (N-1) / N of its payload, integer
/// bytes; a broadcast forwards its payload once). 0 without a
/// communicator of more than one rank (a world of one copies).
int64_t CudaBackend::ncclWireBytes(const CollectiveRequest &r) const {
  if (!ncclComm || ranks <= 1)
    return 0;
  const int64_t payload = r.elems * elementBytes(r.dtype);
  switch (r.kind) {
  case Collective::AllReduce:
    return 2 * (ranks - 1) * payload / ranks;
  case Collective::ReduceScatter:
  case Collective::AllGather:
    return (ranks - 1) * payload;
  case Collective::Broadcast:
    return payload;
  }
  return 0;
}

ncclDataType_t CudaBackend::ncclType(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return ncclBfloat16;
  case DType::F16:
    return ncclFloat16;
  case DType::F32:
    break;
  }
  return ncclFloat32;
}

/// Enqueues the collective's data movement on the communication stream.
/// Sums are NCCL's (in its order, in the dtype: see docs/cuda.md); a mean
/// divides the sum by N in float and rounds once to the dtype.
void CudaBackend::execute(const CollectiveRequest &r) {
  const int64_t n = r.elems;
  const int64_t elem = elementBytes(r.dtype);
  const int64_t bytes = n * elem;
  if (!ncclComm) {
    // A world of one: each collective is a copy (bcast: nothing).
    if (r.kind != Collective::Broadcast)
      copyOnComm(r.in, r.out, bytes);
    return;
  }
  const cuda::NcclApi &api = cuda::nccl();
  const size_t count = static_cast<size_t>(n);
  const ncclDataType_t type = ncclType(r.dtype);
  const char *in = static_cast<const char *>(r.in);
  char *out = static_cast<char *>(r.out);
  void *staged = nullptr;
  // NCCL allows exactly one kind of overlap per collective (its "in
  // place" layout); any other overlap goes through a copy of `in`, so
  // that `in` is read completely before `out` is written, as on the cpu.
  auto stage = [&](int64_t inBytes) {
    staged = cuda::scratch(inBytes, comm, collectiveName(r.kind));
    check(cudaMemcpyAsync(staged, in, static_cast<size_t>(inBytes),
                          cudaMemcpyDeviceToDevice, comm),
          "cudaMemcpyAsync");
    in = static_cast<const char *>(staged);
  };
  // An NCCL call may block the host (connection set-up on first use; the
  // emulator's NCCL runs the collective in the call): timed by the
  // collective watchdog like an MPI call.
  static constexpr const char *kCallNames[] = {
      "ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast"};
  WatchedWait watched(kCallNames[static_cast<int>(r.kind)]);
  switch (r.kind) {
  case Collective::AllReduce:
    if (in != out && overlaps(in, bytes, out, bytes))
      stage(bytes);
    checkNccl(api.allReduce(in, out, count, type, ncclSum, ncclComm, comm),
              "ncclAllReduce");
    break;
  case Collective::ReduceScatter:
    if (out != in + rank * bytes && overlaps(in, bytes * ranks, out, bytes))
      stage(bytes * ranks);
    checkNccl(
        api.reduceScatter(in, out, count, type, ncclSum, ncclComm, comm),
        "ncclReduceScatter");
    break;
  case Collective::AllGather:
    if (in != out + rank * bytes && overlaps(in, bytes, out, bytes * ranks))
      stage(bytes);
    checkNccl(api.allGather(in, out, count, type, ncclComm, comm),
              "ncclAllGather");
    break;
  case Collective::Broadcast:
    checkNccl(api.broadcast(out, out, count, type, r.root, ncclComm, comm),
              "ncclBroadcast");
    break;
  }
  // The mean is the sum divided by N in float, as on the cpu (not NCCL's
  // ncclAvg, which scales each rank's term before summing).
  if (r.mean && ranks > 1 && r.kind != Collective::Broadcast)
    dispatch(r.dtype, [&](auto tag) {
      using T = decltype(tag);
      cuda::divide(as<T>(r.out), n, static_cast<float>(ranks), comm);
    });
  if (staged)
    cuda::release(staged, comm);
}

void CudaBackend::copyOnComm(const void *in, void *out, int64_t bytes) {
  if (bytes <= 0 || in == out)
    return;
  if (overlaps(in, bytes, out, bytes)) {
    void *tmp = cuda::scratch(bytes, comm, "collective");
    check(cudaMemcpyAsync(tmp, in, bytes, cudaMemcpyDeviceToDevice, comm),
          "cudaMemcpyAsync");
    check(cudaMemcpyAsync(out, tmp, bytes, cudaMemcpyDeviceToDevice, comm),
          "cudaMemcpyAsync");
    cuda::release(tmp, comm);
    return;
  }
  check(cudaMemcpyAsync(out, in, static_cast<size_t>(bytes),
                        cudaMemcpyDeviceToDevice, comm),
        "cudaMemcpyAsync");
}

int64_t CudaBackend::blocking(Communicator &world, Collective kind, DType dtype,
                              const void *in, void *out, int64_t elems,
                              bool mean, int root) {
  CollectiveRequest request;
  request.kind = kind;
  request.dtype = dtype;
  request.in = in;
  request.out = out;
  request.elems = elems;
  request.mean = mean;
  request.root = root;
  int64_t wireBytes = 0;
  const int64_t id = enqueueCollective(world, request, &wireBytes);
  awaitCollective(id);
  synchronize();
  DeviceCollectiveTiming unused;
  takeCollectiveTiming(id, &unused);
  return wireBytes;
}

/// Blocks until `stream` has finished. With a communicator, polls NCCL's
/// asynchronous error meanwhile (NCCL's error model): a collective whose
/// peer died or whose network failed never finishes, so waiting for the
/// stream alone would hang the job; the communicator is aborted and the
/// error reported instead.
void CudaBackend::awaitStream(cudaStream_t stream) {
  if (!ncclComm) {
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return;
  }
  // The stream may wait in a collective for a rank that stopped or died:
  // the collective watchdog times this wait like an MPI call's.
  if (cudaStreamQuery(stream) == cudaSuccess)
    return;
  cudaGetLastError();
  WatchedWait watched("a wait for the device's NCCL collectives");
  for (;;) {
    const cudaError_t status = cudaStreamQuery(stream);
    if (status == cudaSuccess)
      return;
    if (status != cudaErrorNotReady)
      check(status, "cudaStreamQuery");
    cudaGetLastError(); // cudaErrorNotReady is not an error.
    ncclResult_t state = ncclSuccess;
    checkNccl(cuda::nccl().commGetAsyncError(ncclComm, &state),
              "ncclCommGetAsyncError");
    if (state != ncclSuccess && !inProgress(state)) {
      cuda::nccl().commAbort(ncclComm);
      ncclComm = nullptr;
      fatal("NCCL collective failed: %s (communicator aborted)",
            cuda::nccl().getErrorString(state));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

bool CudaBackend::inProgress(ncclResult_t state) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  return state == ncclInProgress;
#else
  return false;
#endif
}

Ticket &CudaBackend::find(int64_t id) {
  auto it = tickets.find(id);
  if (it == tickets.end())
    fatal("cuda: unknown collective ticket %lld", static_cast<long long>(id));
  return it->second;
}

cudaEvent_t CudaBackend::event(bool timed) {
  std::vector<cudaEvent_t> &pool = timed ? timedEvents : untimedEvents;
  if (!pool.empty()) {
    cudaEvent_t e = pool.back();
    pool.pop_back();
    return e;
  }
  cudaEvent_t e;
  check(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault
                                           : cudaEventDisableTiming),
        "cudaEventCreate");
  return e;
}

void CudaBackend::recycle(cudaEvent_t e, bool timed) {
  if (e)
    (timed ? timedEvents : untimedEvents).push_back(e);
}

/// Milliseconds from `from` to `to` (both completed); 0 if CUDA cannot
/// say (an event recorded after the other).
float CudaBackend::elapsed(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0.0f;
  if (cudaEventElapsedTime(&ms, from, to) != cudaSuccess) {
    cudaGetLastError();
    return 0.0f;
  }
  return ms;
}

Clock::time_point CudaBackend::hostTime(cudaEvent_t e) const {
  const double ns = static_cast<double>(elapsed(base, e)) * 1e6;
  return hostBase +
         std::chrono::nanoseconds(static_cast<int64_t>(std::llround(ns)));
}

/// After both streams finished: maps every collective's events onto the
/// host clock through the base event, and the exposed time of those
/// awaited (how long the compute stream, having reached the wait, still
/// waited for the collective's end).
void CudaBackend::placeTickets() {
  for (auto &[id, t] : tickets) {
    if (!t.placed) {
      t.timing.begin = hostTime(t.begin);
      t.timing.end = std::max(t.timing.begin, hostTime(t.end));
      t.placed = true;
    }
    if (t.awaited && !t.timed) {
      const float ms = elapsed(t.reached, t.end);
      t.timing.exposedNanos =
          ms > 0.0f ? static_cast<int64_t>(std::llround(ms * 1e6)) : 0;
      t.timed = true;
    }
  }
}

/// A fresh pair (device event, host time) for placing events: taken at
/// every synchronization, so elapsed times stay short and precise in
/// float milliseconds.
void CudaBackend::rebase() {
  check(cudaEventRecord(base, compute), "cudaEventRecord");
  check(cudaEventSynchronize(base), "cudaEventSynchronize");
  hostBase = Clock::now();
}

} // namespace ztrt
