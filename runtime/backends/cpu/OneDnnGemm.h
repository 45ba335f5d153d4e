//===- OneDnnGemm.h - bf16 GEMM through oneDNN ------------------*- C++ -*-===//
//
// Part of ztrain's runtime.
//
// Debian's OpenBLAS has no bf16 GEMM (no sbgemm): without this, the cpu
// backend widens bf16 operands to f32 and calls sgemm. oneDNN's matmul
// primitive multiplies bf16 operands with AVX-512 BF16 instructions where
// the processor has them (AMD Zen 4, Intel Cooper Lake and later),
// accumulating in f32; the f32 result is rounded once to bf16, as every
// bf16 kernel does. Measured several times faster than the widening path
// (docs/benchmarks.md, bench/mixed_precision.py).
//
// Built when oneDNN (libdnnl-dev) is found; $ZTRAIN_CPU_BF16_GEMM=widen
// switches back to the widening path at run time (for comparisons), which
// is also the default on a processor oneDNN has no bf16 matmul for (one
// without AVX-512).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CPU_ONEDNNGEMM_H
#define ZTRT_BACKENDS_CPU_ONEDNNGEMM_H

#include "base/DType.h"

#include <cstdint>

namespace ztrt::onednn {

/// True when the runtime was built with oneDNN, $ZTRAIN_CPU_BF16_GEMM is
/// not `widen` and, unless it is `onednn`, oneDNN has a bf16 matmul for
/// this processor (read once). Fatal on any other value of the variable.
bool bf16GemmEnabled();

/// What computes bf16 GEMMs: "onednn (<oneDNN's kernel>)" or "widen to f32
/// + OpenBLAS sgemm", for reports.
const char *bf16GemmName();

/// c[i] (m x n, at i * strideC) = op(a[i]) op(b[i]) for i < batch, op the
/// transpose where asked; a[i] at i * strideA (m x k, or k x m transposed),
/// b[i] at i * strideB (k x n, or n x k; strideB 0: one matrix for every
/// batch element). Products and sums in f32, each result rounded once.
/// Requires bf16GemmEnabled().
void bf16Matmul(const bf16 *a, const bf16 *b, bf16 *c, int64_t batch,
                int64_t m, int64_t n, int64_t k, bool transA, bool transB,
                int64_t strideA, int64_t strideB, int64_t strideC);

/// c (m x n floats) += op(a) op(b), op the transpose where asked (a is
/// m x k or k x m, b k x n or n x k): products and sums in f32, the sum
/// added to c by oneDNN (its sum post-op). Requires bf16GemmEnabled().
void bf16MatmulAcc(const bf16 *a, const bf16 *b, float *c, int64_t m, int64_t n,
                   int64_t k, bool transA, bool transB);
} // namespace ztrt::onednn

#endif // ZTRT_BACKENDS_CPU_ONEDNNGEMM_H
