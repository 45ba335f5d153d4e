//===- CpuCollectives.cpp - The cpu backend: collectives ------------------===//
//
// Part of ztrain's runtime. The cpu backend's collectives: MPI moves the
// data (comm/Communicator.h), the sums are the backend's, in rank order.
// Determinism and precision: CpuBackend.cpp's file comment.
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/CpuBackendImpl.h"

#include "comm/Communicator.h"

#include <cstdint>
#include <vector>

namespace ztrt {

// Collectives: MPI moves the data (Communicator), the sums are ours, so the
// result is the same on every rank and for any MPI algorithm. Each returns
// the bytes the communicator handed MPI for other ranks during the call.

int64_t CpuBackend::allReduce(Communicator &comm, DType dtype, const void *in,
                              void *out, int64_t n, bool mean) {
  const int64_t before = comm.sentBytes();
  ZTRT_CPU_DISPATCH(dtype,
                    allReduceT<T>(comm, as<T>(in), as<T>(out), n, mean));
  return comm.sentBytes() - before;
}

int64_t CpuBackend::reduceScatter(Communicator &comm, DType dtype,
                                  const void *in, void *out, int64_t count,
                                  bool mean) {
  const int64_t before = comm.sentBytes();
  ZTRT_CPU_DISPATCH(dtype, reduceScatterT<T>(comm, as<T>(in), as<T>(out),
                                             count, mean));
  return comm.sentBytes() - before;
}

int64_t CpuBackend::allGather(Communicator &comm, DType dtype, const void *in,
                              void *out, int64_t count) {
  const int64_t before = comm.sentBytes();
  ZTRT_CPU_DISPATCH(dtype,
                    allGatherT<T>(comm, as<T>(in), as<T>(out), count));
  return comm.sentBytes() - before;
}

int64_t CpuBackend::bcast(Communicator &comm, DType dtype, void *buf, int64_t n,
                          int root) {
  const int64_t before = comm.sentBytes();
  comm.broadcast(buf, n, elementBytes(dtype), root);
  return comm.sentBytes() - before;
}

template <typename T>
void CpuBackend::allReduceT(Communicator &comm, const T *in, T *out, int64_t n,
                            bool mean) {
  const int64_t ranks = comm.count();
  const int64_t bytes = static_cast<int64_t>(sizeof(T));
  if (ranks == 1) {
    copy(in, out, n * bytes);
    return;
  }
  // Reduce-scatter chunks of ceil(n / N), then all-gather them. When n is
  // not a multiple of N the input is padded with zeros, which add nothing
  // to any sum; the padded buffer then also receives the gathered result.
  const int64_t chunk = (n + ranks - 1) / ranks;
  const int64_t padded = chunk * ranks;
  std::vector<T> pad;
  const T *send = in;
  if (padded != n) {
    pad.assign(static_cast<size_t>(padded), st<T>(0.0f));
    copy(in, pad.data(), n * bytes);
    send = pad.data();
  }
  std::vector<T> mine(static_cast<size_t>(chunk));
  reduceScatterT(comm, send, mine.data(), chunk, mean);
  // `in` has been read completely, so gathering into `out` is safe even
  // when it is `in`.
  if (padded == n) {
    comm.allGather(mine.data(), out, chunk, bytes);
  } else {
    comm.allGather(mine.data(), pad.data(), chunk, bytes);
    copy(pad.data(), out, n * bytes);
  }
}

template <typename T>
void CpuBackend::reduceScatterT(Communicator &comm, const T *in, T *out,
                                int64_t count, bool mean) {
  const int64_t ranks = comm.count();
  const int64_t bytes = static_cast<int64_t>(sizeof(T));
  if (ranks == 1) {
    copy(in, out, count * bytes);
    return;
  }
  // Block s of `received` is rank s's chunk for this rank. `in` is read
  // completely before `out` is written, so the two may overlap.
  std::vector<T> received(static_cast<size_t>(ranks * count));
  comm.allToAll(in, received.data(), count, bytes);
  const T *blocks = received.data();
  const float divisor = static_cast<float>(ranks);
#pragma omp parallel for schedule(static) if (count >= kParallelElements)
  for (int64_t i = 0; i < count; ++i) {
    float sum = ld(blocks[i]);
    for (int64_t s = 1; s < ranks; ++s)
      sum += ld(blocks[s * count + i]);
    out[i] = st<T>(mean ? sum / divisor : sum);
  }
}

template <typename T>
void CpuBackend::allGatherT(Communicator &comm, const T *in, T *out,
                            int64_t count) {
  const int64_t ranks = comm.count();
  const int64_t bytes = static_cast<int64_t>(sizeof(T));
  if (ranks == 1) {
    copy(in, out, count * bytes);
    return;
  }
  // MPI forbids overlapping send and receive buffers, so a gather in place
  // (`in` inside `out`, as ZeRO does with its own shard) goes through a
  // copy of `in`.
  std::vector<T> staged;
  auto address = [](const T *p) { return reinterpret_cast<uintptr_t>(p); };
  if (address(in) < address(out + ranks * count) &&
      address(out) < address(in + count)) {
    staged.assign(in, in + count);
    in = staged.data();
  }
  comm.allGather(in, out, count, bytes);
}

} // namespace ztrt
