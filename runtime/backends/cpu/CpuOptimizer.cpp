//===- CpuOptimizer.cpp - The cpu backend: optimizer updates --------------===//
//
// Part of ztrain's runtime. The cpu backend's SGD and Adam(W) updates,
// plain and with an f32 master (the loops in
// backends/cpu/OptimizerKernels.h, f32 also from the AVX-512 build), and
// what loss scaling and gradient clipping read before them: the overflow
// check and the gradients' sum of squares. Determinism and precision:
// CpuBackend.cpp's file comment.
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/CpuBackendImpl.h"

#include "backends/cpu/OptimizerKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ztrt {

namespace {

// The scalars of an update, rounded to float once as PyTorch's CPU kernels
// round each Python scalar (backends/cpu/OptimizerKernels.h has the loops).
inline SgdConstants sgdConstants(const SgdHyper &hyper, int64_t step) {
  return {static_cast<float>(-hyper.lr),
          static_cast<float>(hyper.momentum),
          static_cast<float>(1.0 - hyper.dampening),
          static_cast<float>(hyper.weightDecay),
          static_cast<float>(hyper.gradScale),
          hyper.momentum != 0.0,
          step == 1,
          hyper.nesterov};
}

// Bias corrections in double as Python computes them, then rounded.
inline AdamConstants adamConstants(const AdamHyper &hyper, int64_t step) {
  const double t = static_cast<double>(step);
  const double bias1 = 1.0 - std::pow(hyper.beta1, t);
  const double bias2 = 1.0 - std::pow(hyper.beta2, t);
  return {static_cast<float>(-(hyper.lr / bias1)),
          static_cast<float>(std::sqrt(bias2)),
          static_cast<float>(hyper.beta1),
          static_cast<float>(hyper.beta2),
          static_cast<float>(1.0 - hyper.beta1),
          static_cast<float>(1.0 - hyper.beta2),
          static_cast<float>(hyper.eps),
          static_cast<float>(hyper.weightDecay),
          static_cast<float>(1.0 - hyper.lr * hyper.weightDecay),
          static_cast<float>(hyper.gradScale),
          hyper.decoupled};
}

template <typename T> inline double sumOfSquares(const T *x, int64_t n) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t c = 0; c < chunks; ++c) {
    double s = 0.0;
    for (int64_t i = c * kChunk, end = std::min(n, i + kChunk); i < end; ++i) {
      const double v = static_cast<double>(ld(x[i]));
      s += v * v;
    }
    partial[static_cast<size_t>(c)] = s;
  }
  double total = 0.0;
  for (double s : partial)
    total += s;
  return total;
}

template <typename T> inline bool anyNonfinite(const T *x, int64_t n) {
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i)
    bad |= !std::isfinite(ld(x[i]));
  return bad != 0;
}

} // namespace

void CpuBackend::sgdUpdate(DType dtype, void *param, const void *grad,
                           void *momentumBuf, int64_t n, const SgdHyper &hyper,
                           int64_t step) {
  const SgdConstants c = sgdConstants(hyper, step);
  if (dtype == DType::F32 && avx512Kernels)
    return avx512::sgdF32(as<float>(param), as<float>(grad),
                          as<float>(momentumBuf), n, c);
  ZTRT_CPU_DISPATCH(dtype, optkernels::sgd<T>(as<T>(param), as<T>(grad),
                                              as<T>(momentumBuf), n, c));
}

void CpuBackend::adamUpdate(DType dtype, void *param, const void *grad,
                            void *expAvg, void *expAvgSq, int64_t n,
                            const AdamHyper &hyper, int64_t step) {
  const AdamConstants c = adamConstants(hyper, step);
  if (dtype == DType::F32 && avx512Kernels)
    return avx512::adamF32(as<float>(param), as<float>(grad),
                           as<float>(expAvg), as<float>(expAvgSq), n, c);
  ZTRT_CPU_DISPATCH(dtype, optkernels::adam<T>(as<T>(param), as<T>(grad),
                                               as<T>(expAvg),
                                               as<T>(expAvgSq), n, c));
}

// The master-weight form: the f32 update on the master (T = float in
// optkernels), the gradient of type G widened as it is read, the 16-bit
// (or f32) parameter P receiving the new master rounded once.
void CpuBackend::sgdUpdateMaster(DType gradType, DType paramType, void *param,
                                 const void *grad, float *master,
                                 float *momentumBuf, int64_t n,
                                 const SgdHyper &hyper, int64_t step) {
  const SgdConstants c = sgdConstants(hyper, step);
  if (avx512Kernels && paramType == DType::BF16 &&
      (gradType == DType::BF16 || gradType == DType::F32))
    return avx512::sgdMasterBf16(master, grad, gradType == DType::BF16,
                                 momentumBuf, as<uint16_t>(param), n, c);
  ZTRT_CPU_DISPATCH(gradType, dispatch(paramType, [&](auto paramTag) {
                      using P = decltype(paramTag);
                      optkernels::sgd<float>(master, as<T>(grad),
                                             momentumBuf, n, c,
                                             as<P>(param));
                    }));
}

void CpuBackend::adamUpdateMaster(DType gradType, DType paramType, void *param,
                                  const void *grad, float *master,
                                  float *expAvg, float *expAvgSq, int64_t n,
                                  const AdamHyper &hyper, int64_t step) {
  const AdamConstants c = adamConstants(hyper, step);
  if (avx512Kernels && paramType == DType::BF16 &&
      (gradType == DType::BF16 || gradType == DType::F32))
    return avx512::adamMasterBf16(master, grad, gradType == DType::BF16,
                                  expAvg, expAvgSq, as<uint16_t>(param), n,
                                  c);
  ZTRT_CPU_DISPATCH(gradType, dispatch(paramType, [&](auto paramTag) {
                      using P = decltype(paramTag);
                      optkernels::adam<float>(master, as<T>(grad), expAvg,
                                              expAvgSq, n, c, as<P>(param));
                    }));
}

// The overflow check of loss scaling: once an earlier tensor overflowed,
// this one is not read.
void CpuBackend::foundNonfinite(DType dtype, const void *x, int64_t n,
                                const void *foundIn, void *foundOut) {
  bool found = *as<float>(foundIn) != 0.0f;
  if (!found)
    ZTRT_CPU_DISPATCH(dtype, found = anyNonfinite<T>(as<T>(x), n));
  *as<float>(foundOut) = found ? 1.0f : 0.0f;
}

// Chunks of a fixed size summed in parallel, then the chunk sums in
// order: the same bits for any thread count.
void CpuBackend::gradSqNorm(DType dtype, const void *x, int64_t n,
                            const void *sumIn, void *sumOut) {
  double total = 0.0;
  ZTRT_CPU_DISPATCH(dtype, total = sumOfSquares<T>(as<T>(x), n));
  *as<float>(sumOut) =
      static_cast<float>(static_cast<double>(*as<float>(sumIn)) + total);
}

} // namespace ztrt
