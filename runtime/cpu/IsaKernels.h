//===- IsaKernels.h - The CPU kernels built for a wider vector ISA -*- C++ -*-===//
//
// Part of ztrain's runtime. The runtime is compiled for baseline x86-64
// (SSE2), so that an executable runs on any x86-64 node. Its elementwise
// and softmax kernels are also compiled a second time for AVX-512
// (cpu/IsaKernelsAvx512.cpp, float only), and the cpu backend calls those
// where the processor has AVX-512: the same source (Elementwise.def,
// VecMath.h, RowKernels.h) without FMA contraction, so the two builds give
// bitwise the same results (KernelTest's IsaKernelsAreBitwiseTheBaseline)
// and ranks on different processors stay in step. ZTRT_CPU_ISA=baseline
// in the environment keeps the baseline kernels.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_CPU_ISAKERNELS_H
#define ZTRT_CPU_ISAKERNELS_H

#include <cstdint>

namespace ztrt {

/// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelElements = 1 << 15;

namespace avx512 {

/// Whether this build has the AVX-512 kernels and this processor runs them
/// (AVX-512 F, VL, BW and DQ), unless ZTRT_CPU_ISA=baseline.
bool enabled();

#define ZTRT_UNARY(method, Name, expr)                                         \
  void method##F32(const float *in, float *out, int64_t n);
#define ZTRT_BINARY(method, Name, expr)                                        \
  void method##F32(const float *a, const float *b, float *out, int64_t n);
#include "src/Elementwise.def"

void scaleF32(const float *x, float *out, int64_t n, float factor);
void softmaxF32(const float *x, float *y, int64_t rows, int64_t cols,
                bool causal);
void softmaxGradF32(const float *dy, const float *y, float *dx, int64_t rows,
                    int64_t cols);

} // namespace avx512
} // namespace ztrt

#endif // ZTRT_CPU_ISAKERNELS_H
