//===- Elementwise.cu - One output per element --------------------------===//
//
// Part of ztrain's runtime (cuda backend). Each kernel evaluates, per
// element, the same float expression in the same order as the cpu backend
// (the elementwise ones from the one line of backends/Elementwise.def both
// backends expand; the others as backends/cpu/CpuElementwise.cpp and CpuOptimizer.cpp do); with --fmad=false, IEEE division and square root
// (nvcc's defaults) and the activations shared through backends/cpu/VecMath.h, the
// results are bitwise those of the cpu backend, except where a formula
// calls exp (exp, sigmoid, silu and silu_grad): CUDA's expf is within 2 ulp,
// glibc's within 1. Rotary embedding takes its cos / sin table from
// vecmath::ropeCosSin (pow, cos and sin in double, rounded once to float):
// the cpu's floats unless a double lands within a few ulp of a float
// rounding tie. Elements are loaded as float and every output element is
// stored once, rounded to T (float, bf16, f16).
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/VecMath.h"
#include "backends/cuda/DeviceUtil.cuh"
#include "base/Rng.h"

#include <cmath>
#include <type_traits>

namespace ztrt::cuda {

namespace {

template <typename T> __device__ __forceinline__ float ld(const T &v) {
  return static_cast<float>(v);
}

template <typename T> __global__ void fillKernel(T *out, int64_t n, float v) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = static_cast<T>(v);
}

// backends/Elementwise.def's expressions, as the cpu backend evaluates them.
template <Binary Op> __device__ __forceinline__ float apply(float x, float y) {
#define ZTRT_BINARY(method, Name, expr)                                        \
  if constexpr (Op == Binary::Name)                                            \
    return expr;                                                               \
  else
#include "backends/Elementwise.def"
    return 0.0f; // not reached: every Binary has its line
}

template <Unary Op> __device__ __forceinline__ float apply(float x) {
#define ZTRT_UNARY(method, Name, expr)                                         \
  if constexpr (Op == Unary::Name)                                             \
    return expr;                                                               \
  else
#include "backends/Elementwise.def"
    return 0.0f; // not reached: every Unary has its line
}

// The memory-bound elementwise kernels go through forEachPacked: 16 bytes
// per load and store where the pointers allow. Every element reads its
// inputs before its output is written, in the same thread, so in place
// (out == x) stays allowed.
template <typename T, Binary Op>
__global__ void binaryKernel(const T *a, const T *b, T *out, int64_t n) {
  using P = Pack<T>;
  forEachPacked<T>(
      n, aligned16(a, b, out),
      [&](int64_t p) {
        const P x = reinterpret_cast<const P *>(a)[p];
        const P y = reinterpret_cast<const P *>(b)[p];
        P o;
        ZTRT_UNROLL
        for (int j = 0; j < P::kSize; ++j)
          o.v[j] = static_cast<T>(apply<Op>(ld(x.v[j]), ld(y.v[j])));
        reinterpret_cast<P *>(out)[p] = o;
      },
      [&](int64_t i) {
        out[i] = static_cast<T>(apply<Op>(ld(a[i]), ld(b[i])));
      });
}

/// out[i] = T(f(float(x[i]))) through forEachPacked: the one-input kernels.
template <typename T, typename F>
__device__ __forceinline__ void mapElements(const T *x, T *out, int64_t n,
                                            F f) {
  using P = Pack<T>;
  forEachPacked<T>(
      n, aligned16(x, out),
      [&](int64_t p) {
        const P in = reinterpret_cast<const P *>(x)[p];
        P o;
        ZTRT_UNROLL
        for (int j = 0; j < P::kSize; ++j)
          o.v[j] = static_cast<T>(f(ld(in.v[j])));
        reinterpret_cast<P *>(out)[p] = o;
      },
      [&](int64_t i) { out[i] = static_cast<T>(f(ld(x[i]))); });
}

template <typename T, Unary Op>
__global__ void unaryKernel(const T *x, T *out, int64_t n) {
  mapElements(x, out, n, [](float v) { return apply<Op>(v); });
}

// x's elements are copied as T (their bits), as on the cpu.
template <typename T>
__global__ void maskedFillKernel(const T *x, const int32_t *mask, T *out,
                                 int64_t n, int64_t inner, float value) {
  const T fill = static_cast<T>(value);
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = mask[i % inner] ? fill : x[i];
}

// out = mask ? x : y, copied as T (their bits), as on the cpu.
template <typename T>
__global__ void whereKernel(const int32_t *mask, const T *x, const T *y,
                            T *out, int64_t n, int64_t inner) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = mask[i % inner] ? x[i] : y[i];
}

// The cpu's dropout: the same 24 bits of the same counter (base/Rng.h), the
// same float multiply.
template <typename T>
__global__ void dropoutKernel(const T *x, T *out, int64_t n, uint64_t key,
                              uint64_t counterBase, uint32_t threshold,
                              float scale) {
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    bool drop = rng::bits24(key, counterBase + static_cast<uint64_t>(i)) <
                threshold;
    out[i] = static_cast<T>(ld(x[i]) * (drop ? 0.0f : scale));
  }
}

// The cpu's table of one [seq, half] block, entry k = t * half + i.
__global__ void ropeTableKernel(float *cosT, float *sinT, int64_t entries,
                                int64_t half, int64_t dim, double theta,
                                vecmath::RopeScaling scaling) {
  for (int64_t k = globalThread(); k < entries; k += gridThreads())
    vecmath::ropeCosSin(k / half, k % half, dim, theta, scaling, cosT[k],
                        sinT[k]);
}

// Thread k rotates pair i = k % half of row k / half (a row is one head
// vector; its position is (row / inner) % seq). It reads both elements
// before writing them, so out may alias x.
template <typename T>
__global__ void rotaryKernel(const T *x, T *out, const float *cosT,
                             const float *sinT, int64_t pairs, int64_t seq,
                             int64_t inner, int64_t half, bool inverse) {
  for (int64_t k = globalThread(); k < pairs; k += gridThreads()) {
    const int64_t row = k / half, i = k % half;
    const int64_t t = (row / inner) % seq;
    const int64_t lo = row * 2 * half + i, hi = lo + half;
    const float xl = ld(x[lo]), xh = ld(x[hi]);
    const float c = cosT[t * half + i], s = sinT[t * half + i];
    const float si = inverse ? -s : s;
    out[lo] = static_cast<T>(xl * c - xh * si);
    out[hi] = static_cast<T>(xh * c + xl * si);
  }
}

template <typename T>
__global__ void scaleKernel(const T *x, T *out, int64_t n, float f) {
  mapElements(x, out, n, [f](float v) { return v * f; });
}

template <typename T>
__global__ void divideKernel(T *buf, int64_t n, float divisor) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    buf[i] = static_cast<T>(ld(buf[i]) / divisor);
}

template <typename T>
__global__ void biasAddKernel(const T *x, const T *bias, T *out, int64_t n,
                              int64_t cols) {
  using P = Pack<T>;
  forEachPacked<T>(
      n, aligned16(x, out),
      [&](int64_t p) {
        const P in = reinterpret_cast<const P *>(x)[p];
        int64_t c = (p * P::kSize) % cols;
        P o;
        ZTRT_UNROLL
        for (int j = 0; j < P::kSize; ++j) {
          o.v[j] = static_cast<T>(ld(in.v[j]) + ld(bias[c]));
          c = c + 1 == cols ? 0 : c + 1;
        }
        reinterpret_cast<P *>(out)[p] = o;
      },
      [&](int64_t i) {
        out[i] = static_cast<T>(ld(x[i]) + ld(bias[i % cols]));
      });
}

// backends/cpu/CpuOptimizer.cpp sgdUpdate, line for line. As there, the master-weight
// form is T = float (`param` is the master) with a gradient of type G and
// the parameter P that receives the new master rounded (P = void: none).
template <typename T, typename G, typename P>
__global__ void sgdKernel(T *param, const G *grad, T *momentumBuf, int64_t n,
                          SgdScalars s, P *rounded) {
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    float d = ld(grad[i]) * s.unscale;
    if (s.decay != 0.0f)
      d = d + s.decay * ld(param[i]);
    if (s.useMomentum) {
      float buf = s.first ? d : ld(momentumBuf[i]) * s.momentum + s.keep * d;
      momentumBuf[i] = static_cast<T>(buf);
      d = s.nesterov ? d + s.momentum * buf : buf;
    }
    const float updated = ld(param[i]) + s.negLr * d;
    param[i] = static_cast<T>(updated);
    if constexpr (!std::is_void_v<P>)
      rounded[i] = static_cast<P>(updated);
  }
}

// backends/cpu/CpuOptimizer.cpp adamUpdate, line for line; G and P as in sgdKernel.
template <typename T, typename G, typename P>
__global__ void adamKernel(T *param, const G *grad, T *expAvg, T *expAvgSq,
                           int64_t n, AdamScalars s, P *rounded) {
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    float g = ld(grad[i]) * s.unscale;
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
    const float updated = p + s.negStepSize * m / denom;
    param[i] = static_cast<T>(updated);
    if constexpr (!std::is_void_v<P>)
      rounded[i] = static_cast<P>(updated);
  }
}

// The flag's first word takes the earlier flag; every thread that finds a
// non-finite element then stores 1 (the same value: a benign race), after
// the first kernel in stream order.
__global__ void copyFlagKernel(const float *in, float *out) {
  if (globalThread() == 0)
    out[0] = in[0] != 0.0f ? 1.0f : 0.0f;
}

template <typename T>
__global__ void nonfiniteKernel(const T *x, int64_t n, float *out) {
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    // v - v is 0 for every finite v and NaN for an infinity or a NaN (no
    // isfinite that both nvcc and the host emulator see).
    const float v = ld(x[i]);
    if (!(v - v == 0.0f))
      out[0] = 1.0f;
  }
}

// One block of kBlock threads: thread t sums elements t, t + kBlock, ... in
// double, then the block's fixed-order sum: the same bits for a given n on
// every run (a single block trades speed for that; docs/cuda.md).
template <typename T>
__global__ void sqNormKernel(const T *x, int64_t n, const float *in,
                             float *out) {
  __shared__ double shared[kWarp];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double v = static_cast<double>(ld(x[i]));
    sum += v * v;
  }
  const double total = blockSum(sum, shared);
  if (threadIdx.x == 0)
    out[0] = static_cast<float>(static_cast<double>(in[0]) + total);
}

// One rounding from the widened element (bits kept through float: the
// widening is exact).
template <typename From, typename To>
__global__ void castKernel(const From *x, To *out, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = static_cast<To>(ld(x[i]));
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
  const unsigned blocks = packBlocksFor<T>(n, a, b, out);
#define ZTRT_CASE(E, OP, KERNEL, ...)                                          \
  case E::OP:                                                                  \
    ZTRT_LAUNCH(blocks, kBlock, 0, stream, KERNEL<T, E::OP>)                   \
    (__VA_ARGS__);                                                             \
    break;
  switch (op) {
#define ZTRT_BINARY(method, Name, expr)                                        \
  ZTRT_CASE(Binary, Name, binaryKernel, a, b, out, n)
#include "backends/Elementwise.def"
  }
  check(cudaGetLastError(), "elementwise kernel launch");
}

template <typename T>
void unary(Unary op, const T *x, T *out, int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return;
  const unsigned blocks = packBlocksFor<T>(n, x, out);
  switch (op) {
#define ZTRT_UNARY(method, Name, expr)                                         \
  ZTRT_CASE(Unary, Name, unaryKernel, x, out, n)
#include "backends/Elementwise.def"
  }
#undef ZTRT_CASE
  check(cudaGetLastError(), "elementwise kernel launch");
}

template <typename T>
void scale(const T *x, T *out, int64_t n, float factor, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(packBlocksFor<T>(n, x, out), kBlock, 0, stream, scaleKernel)
  (x, out, n, factor);
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
  ZTRT_LAUNCH(packBlocksFor<T>(n, x, out), kBlock, 0, stream, biasAddKernel)
  (x, bias, out, n, cols);
  check(cudaGetLastError(), "bias_add kernel launch");
}

template <typename T>
void maskedFill(const T *x, const int32_t *mask, T *out, int64_t outer,
                int64_t inner, float value, cudaStream_t stream) {
  const int64_t n = outer * inner;
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, maskedFillKernel)
  (x, mask, out, n, inner, value);
  check(cudaGetLastError(), "masked_fill kernel launch");
}

template <typename T>
void where(const int32_t *mask, const T *x, const T *y, T *out, int64_t outer,
           int64_t inner, cudaStream_t stream) {
  const int64_t n = outer * inner;
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, whereKernel)
  (mask, x, y, out, n, inner);
  check(cudaGetLastError(), "where kernel launch");
}

template <typename T>
void dropout(const T *x, T *out, int64_t n, uint64_t key, uint64_t counterBase,
             uint32_t threshold, float scale, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, dropoutKernel)
  (x, out, n, key, counterBase, threshold, scale);
  check(cudaGetLastError(), "dropout kernel launch");
}

template <typename T>
void rotaryEmbedding(const T *x, T *out, int64_t outer, int64_t seq,
                     int64_t inner, int64_t dim, double theta,
                     const vecmath::RopeScaling &scaling, bool inverse,
                     cudaStream_t stream) {
  const int64_t half = dim / 2, entries = seq * half;
  const int64_t pairs = outer * seq * inner * half;
  if (pairs <= 0)
    return;
  auto *table = static_cast<float *>(
      scratch(2 * entries * static_cast<int64_t>(sizeof(float)), stream,
              "rotary_embedding"));
  ZTRT_LAUNCH(blocksFor(entries), kBlock, 0, stream, ropeTableKernel)
  (table, table + entries, entries, half, dim, theta, scaling);
  ZTRT_LAUNCH(blocksFor(pairs), kBlock, 0, stream, rotaryKernel)
  (x, out, table, table + entries, pairs, seq, inner, half, inverse);
  check(cudaGetLastError(), "rotary_embedding kernel launch");
  release(table, stream);
}

template <typename T>
void sgdUpdate(T *param, const T *grad, T *momentumBuf, int64_t n,
               const SgdScalars &s, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, sgdKernel<T, T, void>)
  (param, grad, momentumBuf, n, s, static_cast<void *>(nullptr));
  check(cudaGetLastError(), "sgd_update kernel launch");
}

template <typename T>
void adamUpdate(T *param, const T *grad, T *expAvg, T *expAvgSq, int64_t n,
                const AdamScalars &s, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, adamKernel<T, T, void>)
  (param, grad, expAvg, expAvgSq, n, s, static_cast<void *>(nullptr));
  check(cudaGetLastError(), "adam_update kernel launch");
}

template <typename G, typename P>
void sgdUpdateMaster(P *param, const G *grad, float *master, float *momentumBuf,
                     int64_t n, const SgdScalars &s, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, sgdKernel<float, G, P>)
  (master, grad, momentumBuf, n, s, param);
  check(cudaGetLastError(), "sgd_update_master kernel launch");
}

template <typename G, typename P>
void adamUpdateMaster(P *param, const G *grad, float *master, float *expAvg,
                      float *expAvgSq, int64_t n, const AdamScalars &s,
                      cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, adamKernel<float, G, P>)
  (master, grad, expAvg, expAvgSq, n, s, param);
  check(cudaGetLastError(), "adam_update_master kernel launch");
}

template <typename From, typename To>
void cast(const From *x, To *out, int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return;
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, castKernel<From, To>)
  (x, out, n);
  check(cudaGetLastError(), "cast kernel launch");
}

template <typename T>
void foundNonfinite(const T *x, int64_t n, const float *foundIn,
                    float *foundOut, cudaStream_t stream) {
  ZTRT_LAUNCH(1, 1, 0, stream, copyFlagKernel)(foundIn, foundOut);
  if (n > 0)
    ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, nonfiniteKernel<T>)
    (x, n, foundOut);
  check(cudaGetLastError(), "found_nonfinite kernel launch");
}

template <typename T>
void gradSqNorm(const T *x, int64_t n, const float *sumIn, float *sumOut,
                cudaStream_t stream) {
  ZTRT_LAUNCH(1, kBlock, 0, stream, sqNormKernel<T>)(x, n, sumIn, sumOut);
  check(cudaGetLastError(), "grad_sq_norm kernel launch");
}

#define ZTRT_INSTANTIATE(T)                                                    \
  template void gradSqNorm<T>(const T *, int64_t, const float *, float *,     \
                              cudaStream_t);                                   \
  template void foundNonfinite<T>(const T *, int64_t, const float *, float *, \
                                  cudaStream_t);                               \
  template void fill<T>(T *, int64_t, float, cudaStream_t);                    \
  template void binary<T>(Binary, const T *, const T *, T *, int64_t,          \
                          cudaStream_t);                                       \
  template void unary<T>(Unary, const T *, T *, int64_t, cudaStream_t);        \
  template void scale<T>(const T *, T *, int64_t, float, cudaStream_t);        \
  template void divide<T>(T *, int64_t, float, cudaStream_t);                  \
  template void biasAdd<T>(const T *, const T *, T *, int64_t, int64_t,        \
                           cudaStream_t);                                      \
  template void maskedFill<T>(const T *, const int32_t *, T *, int64_t,        \
                              int64_t, float, cudaStream_t);                   \
  template void where<T>(const int32_t *, const T *, const T *, T *, int64_t,  \
                         int64_t, cudaStream_t);                               \
  template void dropout<T>(const T *, T *, int64_t, uint64_t, uint64_t,        \
                           uint32_t, float, cudaStream_t);                     \
  template void rotaryEmbedding<T>(const T *, T *, int64_t, int64_t, int64_t,  \
                                   int64_t, double,                            \
                                   const vecmath::RopeScaling &, bool,         \
                                   cudaStream_t);                              \
  template void sgdUpdate<T>(T *, const T *, T *, int64_t, const SgdScalars &, \
                             cudaStream_t);                                    \
  template void adamUpdate<T>(T *, const T *, T *, T *, int64_t,               \
                              const AdamScalars &, cudaStream_t);

ZTRT_INSTANTIATE(float)
ZTRT_INSTANTIATE(ztrt::bf16)
ZTRT_INSTANTIATE(ztrt::f16)

// The kernels over two element types (A: the gradient's or the source's,
// B: the parameter's or the destination's), for every pair.
#define ZTRT_INSTANTIATE_PAIR(A, B)                                            \
  template void sgdUpdateMaster<A, B>(B *, const A *, float *, float *,        \
                                      int64_t, const SgdScalars &,             \
                                      cudaStream_t);                           \
  template void adamUpdateMaster<A, B>(B *, const A *, float *, float *,       \
                                       float *, int64_t, const AdamScalars &,  \
                                       cudaStream_t);                          \
  template void cast<A, B>(const A *, B *, int64_t, cudaStream_t);
#define ZTRT_INSTANTIATE_PAIRS(A)                                              \
  ZTRT_INSTANTIATE_PAIR(A, float)                                              \
  ZTRT_INSTANTIATE_PAIR(A, ztrt::bf16)                                         \
  ZTRT_INSTANTIATE_PAIR(A, ztrt::f16)

ZTRT_INSTANTIATE_PAIRS(float)
ZTRT_INSTANTIATE_PAIRS(ztrt::bf16)
ZTRT_INSTANTIATE_PAIRS(ztrt::f16)

} // namespace ztrt::cuda
