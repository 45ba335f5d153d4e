//===- Device.h - CUDA's kernel language on the host ------------*- C++ -*-===//
//
// Part of ztrain's CUDA emulator (docs/cuda.md#the-cuda-emulator). Lets the
// backend's .cu files compile as C++ unchanged but for their launches,
// which go through ZTRT_LAUNCH (backends/cuda/DeviceUtil.cuh): `__global__`
// functions are plain functions; threadIdx / blockIdx / blockDim / gridDim
// are the running fiber's (Grid.cpp sets them before resuming it);
// __shared__ variables are per worker thread, which runs one block at a
// time; barriers and warp intrinsics suspend the fiber until every thread
// they name has arrived, and a barrier that can never complete is a fault
// (on a GPU: a hang or undefined behaviour).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_CUDAEMU_DEVICE_H
#define ZTRT_CUDAEMU_DEVICE_H

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#define __global__
#define __device__
#define __launch_bounds__(...) // occupancy hints: nothing to the emulator
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

namespace ztrt::cudaemu {

enum class WarpOp { ShuffleXor, Ballot, Gather };

/// Suspends the calling fiber at __syncthreads; returns the OR of the
/// block's `vote`s.
int blockBarrier(int vote);
/// Suspends the calling fiber at a warp intrinsic over `mask`; returns its
/// result for this lane (the partner's bits, or the ballot).
uint64_t warpExchange(WarpOp op, unsigned mask, uint64_t bits, int param);

/// The most bytes a lane contributes to warpGather.
constexpr int kGatherBytes = 64;
/// A warp-collective exchange of registers (all 32 lanes): each lane's
/// `bytes` from `mine` are copied while every lane is suspended at it, so
/// the result is what the lanes held at the call, as the operands of a
/// tensor-core instruction are. Returns the 32 lanes' bytes, lane l's at
/// l * kGatherBytes; they stay there until the warp's next warpGather,
/// which no lane can pass before every lane has left this one.
const unsigned char *warpGather(const void *mine, int bytes);

/// An asynchronous copy of `bytes` (4, 8 or 16) global -> shared, its last
/// `zfill` bytes zeros instead (cp.async, <cuda_pipeline.h>).
struct AsyncCopy {
  void *dst;
  const void *src;
  size_t bytes, zfill;
};
/// The calling thread's asynchronous copies: issue one, close the group
/// issued since the last commit, and complete all groups but the newest
/// `prior` (the copies land then, not when issued).
void pipelineCopy(void *dst, const void *src, size_t bytes, size_t zfill);
void pipelineCommit();
void pipelineWaitPrior(size_t prior);

struct LaunchConfig {
  dim3 grid, block;
  size_t sharedBytes;
  cudaStream_t stream;
  const char *kernel;
};

/// Checks the configuration (as cudaLaunchKernel does: an invalid one sets
/// cudaErrorInvalidConfiguration and launches nothing) and enqueues the
/// grid on the stream: `thread` runs once per CUDA thread.
void launchGrid(const LaunchConfig &config, std::function<void()> thread);

/// A kernel argument that is a pointer must be device memory or null: a
/// host pointer faults on a GPU when dereferenced.
bool checkArgument(const LaunchConfig &config, int index, const void *ptr);

template <typename F> struct Launch {
  LaunchConfig config;
  F kernel;
  /// The arguments are copied now, as a launch copies them.
  template <typename... A> void operator()(A... args) {
    int index = 0;
    bool ok = true;
    auto check = [&](const auto &arg) {
      using T = std::decay_t<decltype(arg)>;
      if constexpr (std::is_pointer_v<T>)
        ok = checkArgument(config, index, arg) && ok;
      ++index;
    };
    (check(args), ...);
    if (!ok)
      return;
    launchGrid(config, [kernel = kernel, args...]() { kernel(args...); });
  }
};

template <typename F> Launch<F> makeLaunch(const LaunchConfig &config, F f) {
  return Launch<F>{config, f};
}

} // namespace ztrt::cudaemu

#define ZTRT_LAUNCH(grid, block, shared, stream, ...)                          \
  ::ztrt::cudaemu::makeLaunch(                                                 \
      ::ztrt::cudaemu::LaunchConfig{dim3(grid), dim3(block), (shared),         \
                                    (stream), #__VA_ARGS__},                   \
      [](auto... args_) { __VA_ARGS__(args_...); })

inline void __syncthreads() { ::ztrt::cudaemu::blockBarrier(0); }
inline int __syncthreads_or(int predicate) {
  return ::ztrt::cudaemu::blockBarrier(predicate != 0);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(::ztrt::cudaemu::warpExchange(
      ::ztrt::cudaemu::WarpOp::Ballot, mask, predicate != 0, 0));
}
template <typename T> T __shfl_xor_sync(unsigned mask, T value, int laneMask) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = ::ztrt::cudaemu::warpExchange(::ztrt::cudaemu::WarpOp::ShuffleXor,
                                       mask, bits, laneMask);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
/// A warp barrier over `mask` (a ballot whose result is dropped).
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::ztrt::cudaemu::warpExchange(::ztrt::cudaemu::WarpOp::Ballot, mask, 0, 0);
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }

inline unsigned long long atomicMin(unsigned long long *address,
                                    unsigned long long value) {
  unsigned long long old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (value < old &&
         !__atomic_compare_exchange_n(address, &old, value, true,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

// CUDA's integer min / max overloads.
template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
inline T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
inline T max(T a, T b) {
  return a < b ? b : a;
}

#endif // ZTRT_CUDAEMU_DEVICE_H
