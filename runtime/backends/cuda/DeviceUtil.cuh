//===- DeviceUtil.cuh - Helpers shared by the .cu files --------*- CUDA -*-===//
//
// Part of ztrain's runtime. Launch geometry and deterministic reductions:
// every reduction here has a fixed shape (a butterfly within a warp, then
// the warps' partial results summed in warp order), so a given launch
// configuration always adds the same numbers in the same order. No float
// atomics anywhere in the backend.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CUDA_DEVICEUTIL_CUH
#define ZTRT_BACKENDS_CUDA_DEVICEUTIL_CUH

#include "backends/cuda/Kernels.h"

#include <algorithm>
#include <cstdint>

// Kernel launches: `ZTRT_LAUNCH(grid, block, sharedBytes, stream, kernel)(
// args...)` is `kernel<<<grid, block, sharedBytes, stream>>>(args...)` for
// nvcc; the CUDA emulator (ZTRT_CUDA_EMULATOR, defined by its
// cuda_runtime_api.h) compiles the same files as C++ and runs the grid on
// the host (backends/cuda/emu/Device.h).
#ifdef ZTRT_CUDA_EMULATOR
#include "backends/cuda/emu/Device.h"
#define ZTRT_UNROLL
#else
#define ZTRT_LAUNCH(grid, block, sharedBytes, stream, ...)                     \
  __VA_ARGS__<<<grid, block, sharedBytes, stream>>>
/// `#pragma unroll` for nvcc (a fixed-count loop over a Pack's elements);
/// nothing for the emulator's host compiler.
#define ZTRT_UNROLL _Pragma("unroll")
#endif

namespace ztrt::cuda {

constexpr int kBlock = 256;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

/// Blocks for a grid-stride loop over n elements. Past 2^20 blocks (2^28
/// threads) the loop strides instead of launching more.
inline unsigned blocksFor(int64_t n, int threads = kBlock) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::min<int64_t>(blocks, int64_t(1) << 20));
}

/// 16 bytes of T: what one thread of a vectorized elementwise loop loads
/// and stores at once (8 bf16 / f16, 4 float). One instruction per 16
/// bytes instead of one per element: a loop of 2-byte accesses reached a
/// third of an H100's bandwidth (docs/cuda.md, "Where the time goes").
template <typename T> struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

/// Whether every pointer is 16-byte aligned (a vectorized loop's condition;
/// the same for every thread, so no divergence).
template <typename... P> __host__ __device__ inline bool aligned16(P... p) {
  return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

/// Blocks for a forEachPacked loop over n elements with these pointers:
/// Pack<T>::kSize elements per thread where they are all 16-byte aligned,
/// else one (the loop goes element by element).
template <typename T, typename... P>
inline unsigned packBlocksFor(int64_t n, P... pointers) {
  return aligned16(pointers...)
             ? blocksFor((n + Pack<T>::kSize - 1) / Pack<T>::kSize)
             : blocksFor(n);
}

/// Calls f(i) for every element index i < n of a kernel whose pointers are
/// all 16-byte aligned (`packed`): each thread takes whole packs of
/// Pack<T>::kSize consecutive elements, which the compiler turns into
/// 16-byte loads and stores when f reads and writes through Pack<T>; the
/// tail (n not a multiple) and unaligned pointers go element by element.
/// Each element is still computed by the same expression, once: the results
/// are those of the element-by-element loop, bit for bit.
template <typename T, typename Packed, typename Single>
__device__ __forceinline__ void forEachPacked(int64_t n, bool packed,
                                              Packed &&onPack,
                                              Single &&onElement) {
  constexpr int V = Pack<T>::kSize;
  int64_t begin = 0;
  if (packed) {
    const int64_t packs = n / V;
    for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x +
                     threadIdx.x;
         p < packs; p += static_cast<int64_t>(gridDim.x) * blockDim.x)
      onPack(p);
    begin = packs * V;
  }
  for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x +
                   threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    onElement(i);
}

/// Thread index and stride of a 1-D grid-stride loop, in 64 bits.
__device__ __forceinline__ int64_t globalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t gridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

/// Sum over the warp; every lane gets the same value (the xor butterfly is
/// symmetric: lane i and lane i^o add the same two numbers).
template <typename V> __device__ __forceinline__ V warpSum(V v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

/// Max over the warp, ignoring NaNs as std::max(max, x) does on the cpu
/// when max starts at -inf (fmaxf returns the non-NaN operand).
__device__ __forceinline__ float warpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
/// thread gets the same value. `shared` holds 32 values; the function
/// synchronizes before returning, so it may be called again at once.
template <typename V> __device__ V blockSum(V v, V *shared) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  v = warpSum(v);
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  V total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x) / kWarp; ++w)
    total += shared[w];
  __syncthreads();
  return total;
}

/// Records (index, value) in `slot` if it precedes what is there: the
/// error reported is the first in index order, as on the cpu.
__device__ __forceinline__ void recordError(ErrorSlot *slot, int64_t index,
                                            int32_t value) {
  atomicMin(slot, (static_cast<unsigned long long>(index) << 32) |
                      static_cast<uint32_t>(value));
}

} // namespace ztrt::cuda

#endif // ZTRT_BACKENDS_CUDA_DEVICEUTIL_CUH
