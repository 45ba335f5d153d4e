//===- CudaRows.cpp - The cuda backend: normalization, softmax, RoPE ------===//
//
// Part of ztrain's runtime. The cuda backend's row kernels: layer_norm,
// rms_norm, rotary_embedding and softmax with their gradients (the
// launchers in Kernels.h, the kernels in Rows.cu).
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/CudaBackendImpl.h"

#include "backends/cpu/VecMath.h"

#include <cstdint>

namespace ztrt {

void CudaBackend::layerNorm(DType dtype, const void *x, const void *gamma,
                            const void *beta, void *y, int64_t rows,
                            int64_t cols, double eps) {
  ZTRT_CUDA_DISPATCH(dtype,
                     cuda::layerNorm(as<T>(x), as<T>(gamma), as<T>(beta),
                                     as<T>(y), rows, cols, eps, compute));
}
void CudaBackend::layerNormGrad(DType dtype, const void *dy, const void *x,
                                const void *gamma, void *dx, void *dgamma,
                                void *dbeta, int64_t rows, int64_t cols,
                                double eps) {
  ZTRT_CUDA_DISPATCH(dtype, cuda::layerNormGrad(as<T>(dy), as<T>(x),
                                                as<T>(gamma), as<T>(dx),
                                                as<T>(dgamma), as<T>(dbeta),
                                                rows, cols, eps, compute));
}
void CudaBackend::rmsNorm(DType dtype, const void *x, const void *gamma,
                          void *y, int64_t rows, int64_t cols, double eps) {
  ZTRT_CUDA_DISPATCH(dtype, cuda::rmsNorm(as<T>(x), as<T>(gamma), as<T>(y),
                                          rows, cols, eps, compute));
}
void CudaBackend::rmsNormGrad(DType dtype, const void *dy, const void *x,
                              const void *gamma, void *dx, void *dgamma,
                              int64_t rows, int64_t cols, double eps) {
  ZTRT_CUDA_DISPATCH(
      dtype, cuda::rmsNormGrad(as<T>(dy), as<T>(x), as<T>(gamma), as<T>(dx),
                               as<T>(dgamma), rows, cols, eps, compute));
}
void CudaBackend::rotaryEmbedding(DType dtype, const void *x, void *out,
                                  int64_t outer, int64_t seq, int64_t inner,
                                  int64_t dim, double theta, double factor,
                                  double low, double high, double original,
                                  int32_t inverse) {
  const vecmath::RopeScaling scaling{factor, low, high, original};
  ZTRT_CUDA_DISPATCH(dtype, cuda::rotaryEmbedding(as<T>(x), as<T>(out), outer,
                                                  seq, inner, dim, theta,
                                                  scaling, inverse != 0,
                                                  compute));
}
void CudaBackend::softmax(DType dtype, const void *x, void *y, int64_t rows,
                          int64_t cols, int32_t causal) {
  ZTRT_CUDA_DISPATCH(dtype, cuda::softmax(as<T>(x), as<T>(y), rows, cols,
                                          causal != 0, compute));
}
void CudaBackend::softmaxGrad(DType dtype, const void *dy, const void *y,
                              void *dx, int64_t rows, int64_t cols) {
  ZTRT_CUDA_DISPATCH(dtype, cuda::softmaxGrad(as<T>(dy), as<T>(y), as<T>(dx),
                                              rows, cols, compute));
}

} // namespace ztrt
