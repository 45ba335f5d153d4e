//===- CudaElementwise.cpp - The cuda backend: elementwise kernels --------===//
//
// Part of ztrain's runtime. The cuda backend's elementwise kernels: fill,
// scale, bias_add, the kernels of backends/Elementwise.def, masked_fill,
// where, dropout and cast (the launchers in Kernels.h, the kernels in
// Elementwise.cu).
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/CudaBackendImpl.h"

#include <cstdint>

namespace ztrt {

void CudaBackend::fill(DType dtype, void *out, int64_t n, double value) {
  ZTRT_CUDA_DISPATCH(
      dtype, cuda::fill(as<T>(out), n, static_cast<float>(value), compute));
}
void CudaBackend::scale(DType dtype, const void *x, void *out, int64_t n,
                        double factor) {
  ZTRT_CUDA_DISPATCH(dtype, cuda::scale(as<T>(x), as<T>(out), n,
                                        static_cast<float>(factor), compute));
}

void CudaBackend::biasAdd(DType dtype, const void *x, const void *bias,
                          void *out, int64_t rows, int64_t cols) {
  ZTRT_CUDA_DISPATCH(dtype, cuda::biasAdd(as<T>(x), as<T>(bias), as<T>(out),
                                          rows, cols, compute));
}

// The elementwise kernels of backends/Elementwise.def, one launch each.
#define ZTRT_UNARY(method, Name, expr)                                         \
  void CudaBackend::method(DType dtype, const void *x, void *out, int64_t n) { \
    ZTRT_CUDA_DISPATCH(dtype, cuda::unary(cuda::Unary::Name, as<T>(x),         \
                                          as<T>(out), n, compute));            \
  }
#define ZTRT_BINARY(method, Name, expr)                                        \
  void CudaBackend::method(DType dtype, const void *a, const void *b,          \
                           void *out, int64_t n) {                             \
    ZTRT_CUDA_DISPATCH(dtype, cuda::binary(cuda::Binary::Name, as<T>(a),       \
                                           as<T>(b), as<T>(out), n, compute)); \
  }
#include "backends/Elementwise.def"

void CudaBackend::maskedFill(DType dtype, const void *x, const void *mask,
                             void *out, int64_t outer, int64_t inner,
                             double value) {
  ZTRT_CUDA_DISPATCH(
      dtype, cuda::maskedFill(as<T>(x), as<int32_t>(mask), as<T>(out), outer,
                              inner, static_cast<float>(value), compute));
}

void CudaBackend::where(DType dtype, const void *mask, const void *x,
                        const void *y, void *out, int64_t outer,
                        int64_t inner) {
  ZTRT_CUDA_DISPATCH(dtype,
                     cuda::where(as<int32_t>(mask), as<T>(x), as<T>(y),
                                 as<T>(out), outer, inner, compute));
}

void CudaBackend::dropout(DType dtype, const void *x, void *out, int64_t n,
                          uint64_t key, uint64_t counterBase,
                          uint32_t threshold, float scale) {
  ZTRT_CUDA_DISPATCH(dtype, cuda::dropout(as<T>(x), as<T>(out), n, key,
                                          counterBase, threshold, scale,
                                          compute));
}

// One rounding per element; the same type is a device copy (memmove
// semantics, NaN payloads kept), as on the cpu.
void CudaBackend::cast(DType dtype, const void *x, void *out, int64_t n,
                       int32_t to) {
  const DType target = static_cast<DType>(to);
  if (target == dtype) {
    copy(x, out, n * elementBytes(dtype));
    return;
  }
  ZTRT_CUDA_DISPATCH(dtype, dispatch(target, [&](auto toTag) {
                       using U = decltype(toTag);
                       cuda::cast(as<T>(x), as<U>(out), n, compute);
                     }));
}

} // namespace ztrt
