//===- IsaKernelsAvx512.cpp - The CPU kernels compiled for AVX-512 --------===//
//
// Part of ztrain's runtime (see backends/cpu/IsaKernels.h). Compiled with
// -mavx512{f,vl,bw,dq} -ffp-contract=off (runtime/CMakeLists.txt) and called
// only after avx512::enabled(). This file includes no header that defines
// inline functions or templates with external linkage (no <vector>, no
// <algorithm>): every function compiled here for AVX-512 is either one of
// the avx512:: entry points or internal to this file, so none can stand in
// for a baseline copy. (base/DType.h is included under ZTRT_DTYPE_INTERNAL,
// which gives this file its own bf16 in an anonymous namespace.)
//
//===----------------------------------------------------------------------===//

#define ZTRT_VECMATH_INTERNAL 1
#define ZTRT_DTYPE_INTERNAL 1
#include "base/DType.h"

#include "backends/cpu/IsaKernels.h"
#include "backends/cpu/OptimizerKernels.h"
#include "backends/cpu/RowKernels.h"
#include "backends/cpu/VecMath.h"

#include <cmath>
#include <cstdint>

namespace ztrt::avx512 {

#define ZTRT_UNARY(method, Name, expr)                                         \
  void method##F32(const float *in, float *out, int64_t n) {                  \
    _Pragma("omp parallel for schedule(static) if (n >= kParallelElements)")   \
    for (int64_t i = 0; i < n; ++i) {                                          \
      const float x = in[i];                                                   \
      out[i] = expr;                                                           \
    }                                                                          \
  }
#define ZTRT_BINARY(method, Name, expr)                                        \
  void method##F32(const float *a, const float *b, float *out, int64_t n) {    \
    _Pragma("omp parallel for schedule(static) if (n >= kParallelElements)")   \
    for (int64_t i = 0; i < n; ++i) {                                          \
      const float x = a[i], y = b[i];                                          \
      out[i] = expr;                                                           \
    }                                                                          \
  }
#include "backends/Elementwise.def"

void scaleF32(const float *x, float *out, int64_t n, float factor) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i)
    out[i] = x[i] * factor;
}

void softmaxF32(const float *x, float *y, int64_t rows, int64_t cols,
                bool causal, float *lse) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r)
    rowkernels::softmaxRow(x + r * cols, y + r * cols, y + r * cols, cols,
                           causal ? r % cols + 1 : cols,
                           lse ? lse + r : nullptr);
}

void softmaxGradF32(const float *dy, const float *y, float *dx, int64_t rows,
                    int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r)
    rowkernels::softmaxGradRow(dy + r * cols, y + r * cols, dx + r * cols,
                               cols);
}

void sgdF32(float *param, const float *grad, float *momentumBuf, int64_t n,
            const SgdConstants &c) {
  optkernels::sgd(param, grad, momentumBuf, n, c);
}

void adamF32(float *param, const float *grad, float *expAvg, float *expAvgSq,
             int64_t n, const AdamConstants &c) {
  optkernels::adam(param, grad, expAvg, expAvgSq, n, c);
}

// bf16 here is this file's own copy (ZTRT_DTYPE_INTERNAL): the same
// layout as the baseline's, its conversions compiled for AVX-512.
void sgdMasterBf16(float *master, const void *grad, bool gradBf16,
                   float *momentumBuf, uint16_t *param, int64_t n,
                   const SgdConstants &c) {
  bf16 *rounded = reinterpret_cast<bf16 *>(param);
  if (gradBf16)
    optkernels::sgd(master, static_cast<const bf16 *>(grad), momentumBuf, n,
                    c, rounded);
  else
    optkernels::sgd(master, static_cast<const float *>(grad), momentumBuf, n,
                    c, rounded);
}

void adamMasterBf16(float *master, const void *grad, bool gradBf16,
                    float *expAvg, float *expAvgSq, uint16_t *param, int64_t n,
                    const AdamConstants &c) {
  bf16 *rounded = reinterpret_cast<bf16 *>(param);
  if (gradBf16)
    optkernels::adam(master, static_cast<const bf16 *>(grad), expAvg,
                     expAvgSq, n, c, rounded);
  else
    optkernels::adam(master, static_cast<const float *>(grad), expAvg,
                     expAvgSq, n, c, rounded);
}

} // namespace ztrt::avx512
