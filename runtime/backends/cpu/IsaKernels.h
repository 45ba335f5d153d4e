//===- IsaKernels.h - The CPU kernels built for a wider vector ISA -*- C++
//-*-===//
//
// Part of ztrain's runtime. The runtime is compiled for baseline x86-64
// (SSE2), so that an executable runs on any x86-64 node. Its elementwise,
// softmax and f32 optimizer kernels are also compiled a second time for AVX-512
// (backends/cpu/IsaKernelsAvx512.cpp, float only), and the cpu backend calls
// those where the processor has AVX-512: the same source (Elementwise.def,
// VecMath.h, RowKernels.h, OptimizerKernels.h) without FMA contraction, so the
// two builds give bitwise the same results
// (IsaKernelTest.IsaKernelsAreBitwiseTheBaseline) and ranks on different
// processors stay in step. ZTRT_CPU_ISA=baseline in the environment keeps the
// baseline kernels.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CPU_ISAKERNELS_H
#define ZTRT_BACKENDS_CPU_ISAKERNELS_H

#include <cstdint>

namespace ztrt {

/// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelElements = 1 << 15;

/// The scalars of an SGD update, rounded to float once per call
/// (backends/cpu/OptimizerKernels.h).
struct SgdConstants {
  float negLr, momentum, keep, decay, unscale;
  bool useMomentum, first, nesterov;
};

/// The scalars of an Adam / AdamW update: the bias corrections in double as
/// Python computes them, then rounded to float (backends/cpu/OptimizerKernels.h).
struct AdamConstants {
  float negStepSize, bias2Sqrt, beta1, beta2, oneMinusBeta1, oneMinusBeta2,
      eps, decay, shrink, unscale;
  bool decoupled; // AdamW
};

namespace avx512 {

/// Whether this build has the AVX-512 kernels and this processor runs them
/// (AVX-512 F, VL, BW and DQ), unless ZTRT_CPU_ISA=baseline.
bool enabled();

#define ZTRT_UNARY(method, Name, expr)                                         \
  void method##F32(const float *in, float *out, int64_t n);
#define ZTRT_BINARY(method, Name, expr)                                        \
  void method##F32(const float *a, const float *b, float *out, int64_t n);
#include "backends/Elementwise.def"

void scaleF32(const float *x, float *out, int64_t n, float factor);
/// With `lse`, also each row's log-sum-exp (rowkernels::softmaxRow).
void softmaxF32(const float *x, float *y, int64_t rows, int64_t cols,
                bool causal, float *lse = nullptr);
void softmaxGradF32(const float *dy, const float *y, float *dx, int64_t rows,
                    int64_t cols);

/// The f32 optimizer updates in place (parameter, gradient and states f32).
void sgdF32(float *param, const float *grad, float *momentumBuf, int64_t n,
            const SgdConstants &c);
void adamF32(float *param, const float *grad, float *expAvg, float *expAvgSq,
             int64_t n, const AdamConstants &c);

/// The master-weight updates of bf16 parameters: the f32 master and states
/// updated in place, the gradient read as bf16 (`gradBf16`) or f32, the
/// new master rounded once into the bf16 parameter (its raw bits).
void sgdMasterBf16(float *master, const void *grad, bool gradBf16,
                   float *momentumBuf, uint16_t *param, int64_t n,
                   const SgdConstants &c);
void adamMasterBf16(float *master, const void *grad, bool gradBf16,
                    float *expAvg, float *expAvgSq, uint16_t *param, int64_t n,
                    const AdamConstants &c);

} // namespace avx512
} // namespace ztrt

#endif // ZTRT_BACKENDS_CPU_ISAKERNELS_H
