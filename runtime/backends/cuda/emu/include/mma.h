//===- mma.h - CUDA's warp matrix functions (nvcuda::wmma), emulated -*- C++ -*-===//
//
// Part of ztrain's CUDA emulator (runtime/backends/cuda/emu, docs/cuda.md). The
// subset of <mma.h> the cuda backend uses: 16 x 16 x 16 fragments of 16-bit
// operands (ztrt::bf16 / ztrt::f16 here, __nv_bfloat16 / __half on a GPU)
// with float accumulators; load_matrix_sync, store_matrix_sync,
// fill_fragment and mma_sync with the toolkit's names and semantics.
//
// A GPU spreads a fragment over the warp's lanes in an unspecified layout;
// here every lane holds the whole tile. Code that touches fragments only
// through these functions (and fill_fragment) sees the same values either
// way, which is the only use the CUDA programming guide defines. What a GPU
// requires is checked, as a fault: every function is warp-collective (a
// warp barrier over all 32 lanes, so a divergent call deadlocks as it
// would hang a GPU), pointers are 256-bit aligned and leading dimensions a
// multiple of 16 bytes. mma_sync multiplies the widened operands exactly
// and adds them to the accumulator in k order, in float; a tensor core's
// order and rounding of the 16 products are its own (within float
// accumulation error of these). What this cannot show: a missing
// __syncwarp next to a wmma call (every call here is itself a warp barrier
// and every lane writes the whole tile), and lanes passing different
// pointers; code review has to.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_CUDAEMU_MMA_H
#define ZTRT_CUDAEMU_MMA_H

#include "backends/cuda/emu/Device.h"
#include "backends/cuda/emu/Emu.h"

#include <cstdint>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

/// Rows x cols of a fragment: matrix_a M x K, matrix_b K x N,
/// accumulator M x N.
template <typename Use, int M, int N, int K> struct FragmentShape;
template <int M, int N, int K> struct FragmentShape<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K> struct FragmentShape<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K> struct FragmentShape<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};

template <typename Use, int M, int N, int K, typename T,
          typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16,
                "the emulator has the 16 x 16 x 16 shape only");
  using Shape = FragmentShape<Use, M, N, K>;
  static constexpr int rows = Shape::rows, cols = Shape::cols;
  static constexpr int num_elements = rows * cols;
  /// Row-major, widened to float (exact for 16-bit types).
  float x[num_elements];
};

namespace detail {

/// A warp-collective call: all 32 lanes meet here (a deadlock fault if one
/// never comes), and the pointer and leading dimension are what the
/// hardware accepts.
inline void collective(const char *what, const void *ptr, unsigned ldm,
                       unsigned elementBytes) {
  __syncwarp();
  if (reinterpret_cast<uintptr_t>(ptr) % 32 != 0)
    ::ztrt::cudaemu::fault("%s: pointer %p is not 256-bit aligned", what,
                           ptr);
  if ((ldm * elementBytes) % 16 != 0)
    ::ztrt::cudaemu::fault(
        "%s: leading dimension %u is not a multiple of 16 bytes", what, ldm);
}

template <typename Layout> constexpr bool rowMajor() {
  return std::is_same_v<Layout, row_major>;
}

} // namespace detail

/// matrix_a / matrix_b: element (r, c) of the tile at ptr[r * ldm + c]
/// (row_major) or ptr[c * ldm + r] (col_major).
template <typename Use, int M, int N, int K, typename T, typename Layout,
          typename E>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout> &f, const E *ptr,
                      unsigned ldm) {
  static_assert(!std::is_void_v<Layout>, "give matrix_a / matrix_b a layout");
  detail::collective("load_matrix_sync", ptr, ldm, sizeof(E));
  using F = fragment<Use, M, N, K, T, Layout>;
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c)
      f.x[r * F::cols + c] = static_cast<float>(
          detail::rowMajor<Layout>() ? ptr[r * ldm + c] : ptr[c * ldm + r]);
}

/// An accumulator: the layout is the call's.
template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float> &f,
                      const float *ptr, unsigned ldm, layout_t layout) {
  detail::collective("load_matrix_sync", ptr, ldm, sizeof(float));
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      f.x[r * N + c] =
          layout == mem_row_major ? ptr[r * ldm + c] : ptr[c * ldm + r];
}

template <int M, int N, int K>
void store_matrix_sync(float *ptr, const fragment<accumulator, M, N, K, float> &f,
                       unsigned ldm, layout_t layout) {
  detail::collective("store_matrix_sync", ptr, ldm, sizeof(float));
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      (layout == mem_row_major ? ptr[r * ldm + c] : ptr[c * ldm + r]) =
          f.x[r * N + c];
  __syncwarp();
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout> &f, float value) {
  __syncwarp();
  for (float &v : f.x)
    v = value;
}

/// d = a b + c, in float, k in order.
template <int M, int N, int K, typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float> &d,
              const fragment<matrix_a, M, N, K, T, LA> &a,
              const fragment<matrix_b, M, N, K, T, LB> &b,
              const fragment<accumulator, M, N, K, float> &c) {
  __syncwarp();
  float out[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = c.x[i * N + j];
      for (int k = 0; k < K; ++k)
        acc += a.x[i * K + k] * b.x[k * N + j];
      out[i * N + j] = acc;
    }
  for (int e = 0; e < M * N; ++e)
    d.x[e] = out[e];
}

} // namespace nvcuda::wmma

#endif // ZTRT_CUDAEMU_MMA_H
