//===- RowKernels.h - Softmax rows, shared by the CPU kernel builds -*- C++
//-*-===//
//
// Part of ztrain's runtime. The per-row softmax and its gradient, compiled
// into the baseline backend (backends/cpu/CpuRows.cpp, every element type) and
// into the wider-ISA kernels (backends/cpu/IsaKernelsAvx512.cpp, float). One
// source, so both builds evaluate the same operations in the same order: the
// results are bitwise equal (IsaKernelTest.IsaKernelsAreBitwiseTheBaseline).
//
// Everything is in an anonymous namespace on purpose: each translation unit
// gets its own copy, compiled for its own ISA, and no symbol is shared
// between the builds (a shared inline function could be resolved to the
// AVX-512 copy on a machine without AVX-512).
//
// Rows reduce in kLanes interleaved partial results (lane l takes entries
// l, l + kLanes, ...; the lanes then combine in a fixed pairwise order):
// independent chains instead of one serial sum's latency, and loops the
// compiler vectorizes. The order depends only on the row length, so the
// results do not depend on the thread count. Sums are in double, rounded
// once (the precision contract in CpuBackend.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CPU_ROWKERNELS_H
#define ZTRT_BACKENDS_CPU_ROWKERNELS_H

#include "backends/cpu/VecMath.h"

#include <cmath>
#include <cstdint>

namespace ztrt {
namespace {
namespace rowkernels {

constexpr int kLanes = 8;

/// max of x[0, n) as floats.
template <typename T> float rowMax(const T *x, int64_t n) {
  float m[kLanes];
  for (int l = 0; l < kLanes; ++l)
    m[l] = -HUGE_VALF;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float v = static_cast<float>(x[j + l]);
      m[l] = m[l] < v ? v : m[l];
    }
  for (int l = 0; j < n; ++j, ++l) {
    const float v = static_cast<float>(x[j]);
    m[l] = m[l] < v ? v : m[l];
  }
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l)
      m[l] = m[l] < m[l + w] ? m[l + w] : m[l];
  return m[0];
}

/// sum of y[0, n), in double.
inline double laneSum(const float *y, int64_t n) {
  double p[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      p[l] += y[j + l];
  for (int l = 0; j < n; ++j, ++l)
    p[l] += y[j];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l)
      p[l] += p[l + w];
  return p[0];
}

/// One softmax row: y[j] = exp(x[j] - max) / sum over the first `visible`
/// entries, 0 after them. `e` holds `visible` floats (it may be y itself
/// when T is float): the exponentials wait there for their scale, so each
/// y is rounded to T once. exp is vecmath::expShifted. With `lse`, also
/// *lse = max + log(sum), rounded once (attention's saved statistic); y is
/// the same either way.
template <typename T>
void softmaxRow(const T *x, T *y, float *e, int64_t cols, int64_t visible,
                float *lse = nullptr) {
  const float max = rowMax(x, visible);
  for (int64_t j = 0; j < visible; ++j)
    e[j] = vecmath::expShifted(static_cast<float>(x[j]) - max);
  const double sum = laneSum(e, visible);
  if (lse)
    *lse = static_cast<float>(static_cast<double>(max) + std::log(sum));
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < visible; ++j)
    y[j] = static_cast<T>(e[j] * inv);
  for (int64_t j = visible; j < cols; ++j)
    y[j] = static_cast<T>(0.0f);
}

/// One row of softmax's gradient: dx = y * (dy - sum(dy * y)).
template <typename T>
void softmaxGradRow(const T *dy, const T *y, T *dx, int64_t cols) {
  double p[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      p[l] += static_cast<double>(static_cast<float>(dy[j + l])) *
              static_cast<float>(y[j + l]);
  for (int l = 0; j < cols; ++j, ++l)
    p[l] += static_cast<double>(static_cast<float>(dy[j])) *
            static_cast<float>(y[j]);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l)
      p[l] += p[l + w];
  const float d = static_cast<float>(p[0]);
  for (j = 0; j < cols; ++j)
    dx[j] = static_cast<T>(static_cast<float>(y[j]) *
                           (static_cast<float>(dy[j]) - d));
}

} // namespace rowkernels
} // namespace
} // namespace ztrt

#endif // ZTRT_BACKENDS_CPU_ROWKERNELS_H
