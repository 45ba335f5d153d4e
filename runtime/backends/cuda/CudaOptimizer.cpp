//===- CudaOptimizer.cpp - The cuda backend: optimizer updates ------------===//
//
// Part of ztrain's runtime. The cuda backend's SGD and Adam(W) updates,
// plain and with an f32 master, and what loss scaling and gradient
// clipping read before them: the overflow check and the gradients' sum of
// squares.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/CudaBackendImpl.h"

#include <cmath>
#include <cstdint>

namespace ztrt {


// Scalars exactly as backends/cpu/CpuOptimizer.cpp rounds them.
cuda::SgdScalars CudaBackend::sgdScalars(const SgdHyper &hyper, int64_t step) {
  cuda::SgdScalars s;
  s.negLr = static_cast<float>(-hyper.lr);
  s.momentum = static_cast<float>(hyper.momentum);
  s.keep = static_cast<float>(1.0 - hyper.dampening);
  s.decay = static_cast<float>(hyper.weightDecay);
  s.useMomentum = hyper.momentum != 0.0;
  s.first = step == 1;
  s.nesterov = hyper.nesterov;
  s.unscale = static_cast<float>(hyper.gradScale);
  return s;
}

cuda::AdamScalars CudaBackend::adamScalars(const AdamHyper &hyper,
                                           int64_t step) {
  const double t = static_cast<double>(step);
  const double bias1 = 1.0 - std::pow(hyper.beta1, t);
  const double bias2 = 1.0 - std::pow(hyper.beta2, t);
  cuda::AdamScalars s;
  s.unscale = static_cast<float>(hyper.gradScale);
  s.negStepSize = static_cast<float>(-(hyper.lr / bias1));
  s.bias2Sqrt = static_cast<float>(std::sqrt(bias2));
  s.beta1 = static_cast<float>(hyper.beta1);
  s.beta2 = static_cast<float>(hyper.beta2);
  s.oneMinusBeta1 = static_cast<float>(1.0 - hyper.beta1);
  s.oneMinusBeta2 = static_cast<float>(1.0 - hyper.beta2);
  s.eps = static_cast<float>(hyper.eps);
  s.decay = static_cast<float>(hyper.weightDecay);
  s.shrink = static_cast<float>(1.0 - hyper.lr * hyper.weightDecay);
  s.decoupled = hyper.decoupled;
  return s;
}

void CudaBackend::sgdUpdate(DType dtype, void *param, const void *grad,
                            void *momentumBuf, int64_t n, const SgdHyper &hyper,
                            int64_t step) {
  const cuda::SgdScalars s = sgdScalars(hyper, step);
  ZTRT_CUDA_DISPATCH(dtype,
                     cuda::sgdUpdate(as<T>(param), as<T>(grad),
                                     as<T>(momentumBuf), n, s, compute));
}

void CudaBackend::adamUpdate(DType dtype, void *param, const void *grad,
                             void *expAvg, void *expAvgSq, int64_t n,
                             const AdamHyper &hyper, int64_t step) {
  const cuda::AdamScalars s = adamScalars(hyper, step);
  ZTRT_CUDA_DISPATCH(dtype, cuda::adamUpdate(as<T>(param), as<T>(grad),
                                             as<T>(expAvg), as<T>(expAvgSq),
                                             n, s, compute));
}

// The float kernels on the master and the float states, one launch that
// widens the gradient and stores the rounded parameter.
void CudaBackend::sgdUpdateMaster(DType gradType, DType paramType, void *param,
                                  const void *grad, float *master,
                                  float *momentumBuf, int64_t n,
                                  const SgdHyper &hyper, int64_t step) {
  const cuda::SgdScalars s = sgdScalars(hyper, step);
  ZTRT_CUDA_DISPATCH(gradType, dispatch(paramType, [&](auto paramTag) {
                       using P = decltype(paramTag);
                       cuda::sgdUpdateMaster(as<P>(param), as<T>(grad),
                                             master, momentumBuf, n, s,
                                             compute);
                     }));
}

void CudaBackend::adamUpdateMaster(DType gradType, DType paramType, void *param,
                                   const void *grad, float *master,
                                   float *expAvg, float *expAvgSq, int64_t n,
                                   const AdamHyper &hyper, int64_t step) {
  const cuda::AdamScalars s = adamScalars(hyper, step);
  ZTRT_CUDA_DISPATCH(gradType, dispatch(paramType, [&](auto paramTag) {
                       using P = decltype(paramTag);
                       cuda::adamUpdateMaster(as<P>(param), as<T>(grad),
                                              master, expAvg, expAvgSq, n, s,
                                              compute);
                     }));
}

void CudaBackend::gradSqNorm(DType dtype, const void *x, int64_t n,
                             const void *sumIn, void *sumOut) {
  ZTRT_CUDA_DISPATCH(dtype, cuda::gradSqNorm(as<T>(x), n, as<float>(sumIn),
                                             as<float>(sumOut), compute));
}

void CudaBackend::foundNonfinite(DType dtype, const void *x, int64_t n,
                                 const void *foundIn, void *foundOut) {
  ZTRT_CUDA_DISPATCH(dtype, cuda::foundNonfinite(
                                as<T>(x), n, as<float>(foundIn),
                                as<float>(foundOut), compute));
}

} // namespace ztrt
