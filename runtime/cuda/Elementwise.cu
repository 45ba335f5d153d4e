//===- Elementwise.cu - One output per element --------------------------===//
//
// Part of ztrain's runtime (cuda backend). Each kernel evaluates, per
// element, the same float expression in the same order as the cpu backend
// (cpu/CpuBackend.cpp); with --fmad=false, IEEE division and square root
// (nvcc's defaults) and gelu shared through cpu/VecMath.h, the results are
// bitwise those of the cpu backend. Elements are loaded as float and every
// output element is stored once, rounded to T (float, bf16, f16).
//
//===----------------------------------------------------------------------===//

#include "cpu/VecMath.h"
#include "cuda/DeviceUtil.cuh"

namespace ztrt::cuda {

namespace {

template <typename T> __device__ __forceinline__ float ld(const T &v) {
  return static_cast<float>(v);
}

template <typename T> __global__ void fillKernel(T *out, int64_t n, float v) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = static_cast<T>(v);
}

template <typename T, Binary Op>
__global__ void binaryKernel(const T *a, const T *b, T *out, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    float x = ld(a[i]), y = ld(b[i]);
    float r = Op == Binary::Add ? x + y : Op == Binary::Sub ? x - y : x * y;
    out[i] = static_cast<T>(r);
  }
}

template <typename T>
__global__ void scaleKernel(const T *x, T *out, int64_t n, float f) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = static_cast<T>(ld(x[i]) * f);
}

template <typename T>
__global__ void divideKernel(T *buf, int64_t n, float divisor) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    buf[i] = static_cast<T>(ld(buf[i]) / divisor);
}

template <typename T>
__global__ void biasAddKernel(const T *x, const T *bias, T *out, int64_t n,
                              int64_t cols) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = static_cast<T>(ld(x[i]) + ld(bias[i % cols]));
}

template <typename T>
__global__ void reluKernel(const T *x, T *out, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    float v = ld(x[i]);
    out[i] = static_cast<T>(v > 0.0f ? v : 0.0f);
  }
}

template <typename T>
__global__ void reluGradKernel(const T *dy, const T *x, T *dx, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    dx[i] = static_cast<T>(ld(x[i]) > 0.0f ? ld(dy[i]) : 0.0f);
}

template <typename T>
__global__ void geluKernel(const T *x, T *out, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = static_cast<T>(vecmath::gelu(ld(x[i])));
}

template <typename T>
__global__ void geluGradKernel(const T *dy, const T *x, T *dx, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    dx[i] = static_cast<T>(vecmath::geluGrad(ld(dy[i]), ld(x[i])));
}

// cpu/CpuBackend.cpp sgdUpdate, line for line.
template <typename T>
__global__ void sgdKernel(T *param, const T *grad, T *momentumBuf, int64_t n,
                          SgdScalars s) {
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    float d = ld(grad[i]);
    if (s.decay != 0.0f)
      d = d + s.decay * ld(param[i]);
    if (s.useMomentum) {
      float buf = s.first ? d : ld(momentumBuf[i]) * s.momentum + s.keep * d;
      momentumBuf[i] = static_cast<T>(buf);
      d = s.nesterov ? d + s.momentum * buf : buf;
    }
    param[i] = static_cast<T>(ld(param[i]) + s.negLr * d);
  }
}

// cpu/CpuBackend.cpp adamUpdate, line for line.
template <typename T>
__global__ void adamKernel(T *param, const T *grad, T *expAvg, T *expAvgSq,
                           int64_t n, AdamScalars s) {
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    float g = ld(grad[i]);
    float p = ld(param[i]);
    if (s.decoupled)
      p = p * s.shrink;
    else if (s.decay != 0.0f)
      g = g + s.decay * p;
    float m = ld(expAvg[i]) * s.beta1 + s.oneMinusBeta1 * g;
    float v = ld(expAvgSq[i]) * s.beta2 + s.oneMinusBeta2 * g * g;
    expAvg[i] = static_cast<T>(m);
    expAvgSq[i] = static_cast<T>(v);
    float denom = sqrtf(v) / s.bias2Sqrt + s.eps;
    param[i] = static_cast<T>(p + s.negStepSize * m / denom);
  }
}

} // namespace

template <typename T>
void fill(T *out, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, fillKernel)(out, n, value);
  check(cudaGetLastError(), "fill kernel launch");
}

template <typename T>
void binary(Binary op, const T *a, const T *b, T *out, int64_t n,
            cudaStream_t stream) {
  if (n <= 0)
    return;
  switch (op) {
  case Binary::Add:
    ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, binaryKernel<T, Binary::Add>)
    (a, b, out, n);
    break;
  case Binary::Sub:
    ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, binaryKernel<T, Binary::Sub>)
    (a, b, out, n);
    break;
  case Binary::Mul:
    ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, binaryKernel<T, Binary::Mul>)
    (a, b, out, n);
    break;
  }
  check(cudaGetLastError(), "elementwise kernel launch");
}

template <typename T>
void scale(const T *x, T *out, int64_t n, float factor, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, scaleKernel)(x, out, n, factor);
  check(cudaGetLastError(), "scale kernel launch");
}

template <typename T>
void divide(T *buf, int64_t n, float divisor, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, divideKernel)(buf, n, divisor);
  check(cudaGetLastError(), "collective mean kernel launch");
}

template <typename T>
void biasAdd(const T *x, const T *bias, T *out, int64_t rows, int64_t cols,
             cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, biasAddKernel)
  (x, bias, out, n, cols);
  check(cudaGetLastError(), "bias_add kernel launch");
}

template <typename T>
void relu(const T *x, T *out, int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, reluKernel)(x, out, n);
  check(cudaGetLastError(), "relu kernel launch");
}

template <typename T>
void reluGrad(const T *dy, const T *x, T *dx, int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, reluGradKernel)(dy, x, dx, n);
  check(cudaGetLastError(), "relu_grad kernel launch");
}

template <typename T>
void gelu(const T *x, T *out, int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, geluKernel)(x, out, n);
  check(cudaGetLastError(), "gelu kernel launch");
}

template <typename T>
void geluGrad(const T *dy, const T *x, T *dx, int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, geluGradKernel)(dy, x, dx, n);
  check(cudaGetLastError(), "gelu_grad kernel launch");
}

template <typename T>
void sgdUpdate(T *param, const T *grad, T *momentumBuf, int64_t n,
               const SgdScalars &s, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, sgdKernel)
  (param, grad, momentumBuf, n, s);
  check(cudaGetLastError(), "sgd_update kernel launch");
}

template <typename T>
void adamUpdate(T *param, const T *grad, T *expAvg, T *expAvgSq, int64_t n,
                const AdamScalars &s, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, adamKernel)
  (param, grad, expAvg, expAvgSq, n, s);
  check(cudaGetLastError(), "adam_update kernel launch");
}

#define ZTRT_INSTANTIATE(T)                                                    \
  template void fill<T>(T *, int64_t, float, cudaStream_t);                    \
  template void binary<T>(Binary, const T *, const T *, T *, int64_t,          \
                          cudaStream_t);                                       \
  template void scale<T>(const T *, T *, int64_t, float, cudaStream_t);        \
  template void divide<T>(T *, int64_t, float, cudaStream_t);                  \
  template void biasAdd<T>(const T *, const T *, T *, int64_t, int64_t,        \
                           cudaStream_t);                                      \
  template void relu<T>(const T *, T *, int64_t, cudaStream_t);                \
  template void reluGrad<T>(const T *, const T *, T *, int64_t, cudaStream_t); \
  template void gelu<T>(const T *, T *, int64_t, cudaStream_t);                \
  template void geluGrad<T>(const T *, const T *, T *, int64_t, cudaStream_t); \
  template void sgdUpdate<T>(T *, const T *, T *, int64_t, const SgdScalars &, \
                             cudaStream_t);                                    \
  template void adamUpdate<T>(T *, const T *, T *, T *, int64_t,               \
                              const AdamScalars &, cudaStream_t);

ZTRT_INSTANTIATE(float)
ZTRT_INSTANTIATE(ztrt::bf16)
ZTRT_INSTANTIATE(ztrt::f16)

} // namespace ztrt::cuda
