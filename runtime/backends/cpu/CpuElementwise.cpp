//===- CpuElementwise.cpp - The cpu backend: elementwise kernels ----------===//
//
// Part of ztrain's runtime. The cpu backend's elementwise kernels: fill,
// the kernels of backends/Elementwise.def (the f32 ones from the AVX-512
// build where the processor has it), scale, bias_add, masked_fill, where,
// dropout and cast; and the compiler's fused elementwise kernels
// (runFused). Determinism and precision: CpuBackend.cpp's file comment.
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/CpuBackendImpl.h"

#include "backends/cpu/VecMath.h"
#include "base/Rng.h"

#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ztrt {

namespace {

/// out[i] = f(x[i]) for n elements.
template <typename T, typename F>
void unary(const void *x, void *out, int64_t n, F f) {
  const T *xs = as<T>(x);
  T *os = as<T>(out);
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i)
    os[i] = st<T>(f(ld(xs[i])));
}

/// out[i] = f(a[i], b[i]) for n elements (out may alias an input).
template <typename T, typename F>
void binary(const void *a, const void *b, void *out, int64_t n, F f) {
  const T *as_ = as<T>(a), *bs = as<T>(b);
  T *os = as<T>(out);
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i)
    os[i] = st<T>(f(ld(as_[i]), ld(bs[i])));
}

/// out[i] = U(float(x[i])): one rounding, the only one (widening is exact).
template <typename T, typename U>
void unaryCast(const T *x, U *out, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i)
    out[i] = st<U>(ld(x[i]));
}

template <typename T>
inline void biasAddT(const void *xArg, const void *biasArg, void *outArg,
                     int64_t rows, int64_t cols) {
  const T *x = as<T>(xArg), *bias = as<T>(biasArg);
  T *out = as<T>(outArg);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = st<T>(ld(x[r * cols + c]) + ld(bias[c]));
}

template <typename T>
inline void maskedFillT(const T *x, const int32_t *mask, T *out, int64_t outer,
                        int64_t inner, double value) {
  const T fill = st<T>(static_cast<float>(value));
#pragma omp parallel for schedule(static) if (outer * inner >=                 \
                                              kParallelElements)
  for (int64_t r = 0; r < outer; ++r)
    for (int64_t j = 0; j < inner; ++j)
      out[r * inner + j] = mask[j] ? fill : x[r * inner + j];
}

template <typename T>
inline void whereT(const int32_t *mask, const T *x, const T *y, T *out,
                   int64_t outer, int64_t inner) {
#pragma omp parallel for schedule(static) if (outer * inner >=                 \
                                              kParallelElements)
  for (int64_t r = 0; r < outer; ++r)
    for (int64_t j = 0; j < inner; ++j)
      out[r * inner + j] = mask[j] ? x[r * inner + j] : y[r * inner + j];
}

template <typename T>
inline void dropoutT(const T *x, T *out, int64_t n, uint64_t key,
                     uint64_t counterBase, uint32_t threshold, float scale) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    bool drop = rng::bits24(key, counterBase + static_cast<uint64_t>(i)) <
                threshold;
    // x * 0 for a dropped element, as PyTorch's x * mask: NaN and inf
    // still propagate.
    out[i] = st<T>(ld(x[i]) * (drop ? 0.0f : scale));
  }
}

} // namespace

void CpuBackend::fill(DType dtype, void *out, int64_t n, double value) {
  ZTRT_CPU_DISPATCH(dtype, fillT<T>(out, n, value));
}

// The elementwise kernels of backends/Elementwise.def: one float expression
// each, widened inputs, one rounding to T on store.
// f32 goes to the AVX-512 build of the same kernels where the processor
// has it (backends/cpu/IsaKernels.h: bitwise the same results).
#define ZTRT_UNARY(method, Name, expr)                                         \
  void CpuBackend::method(DType dtype, const void *in, void *out, int64_t n) { \
    if (dtype == DType::F32 && avx512Kernels)                                  \
      return avx512::method##F32(as<float>(in), as<float>(out), n);            \
    ZTRT_CPU_DISPATCH(dtype,                                                   \
                      unary<T>(in, out, n, [](float x) { return expr; }));     \
  }
#define ZTRT_BINARY(method, Name, expr)                                        \
  void CpuBackend::method(DType dtype, const void *a, const void *b,           \
                          void *out, int64_t n) {                              \
    if (dtype == DType::F32 && avx512Kernels)                                  \
      return avx512::method##F32(as<float>(a), as<float>(b), as<float>(out),   \
                                 n);                                           \
    ZTRT_CPU_DISPATCH(dtype, binary<T>(a, b, out, n, [](float x, float y) {    \
                        return expr;                                           \
                      }));                                                     \
  }
#include "backends/Elementwise.def"

void CpuBackend::scale(DType dtype, const void *x, void *out, int64_t n,
                       double factor) {
  const float f = static_cast<float>(factor);
  if (dtype == DType::F32 && avx512Kernels)
    return avx512::scaleF32(as<float>(x), as<float>(out), n, f);
  ZTRT_CPU_DISPATCH(dtype,
                    unary<T>(x, out, n, [f](float v) { return v * f; }));
}

void CpuBackend::biasAdd(DType dtype, const void *x, const void *bias,
                         void *out, int64_t rows, int64_t cols) {
  ZTRT_CPU_DISPATCH(dtype, biasAddT<T>(x, bias, out, rows, cols));
}

void CpuBackend::maskedFill(DType dtype, const void *x, const void *mask,
                            void *out, int64_t outer, int64_t inner,
                            double value) {
  ZTRT_CPU_DISPATCH(dtype, maskedFillT<T>(as<T>(x), as<int32_t>(mask),
                                          as<T>(out), outer, inner, value));
}

void CpuBackend::where(DType dtype, const void *mask, const void *x,
                       const void *y, void *out, int64_t outer, int64_t inner) {
  ZTRT_CPU_DISPATCH(dtype, whereT<T>(as<int32_t>(mask), as<T>(x), as<T>(y),
                                     as<T>(out), outer, inner));
}

void CpuBackend::dropout(DType dtype, const void *x, void *out, int64_t n,
                         uint64_t key, uint64_t counterBase, uint32_t threshold,
                         float scale) {
  ZTRT_CPU_DISPATCH(dtype, dropoutT<T>(as<T>(x), as<T>(out), n, key,
                                       counterBase, threshold, scale));
}

// The compiler's kernel for one fused elementwise region, over contiguous
// chunks of its items: thread t of T takes [t*q + min(t, r), (t+1)*q +
// min(t+1, r)) with q = items / T, r = items % T, so the first r threads
// take one item more. Determinism: each item is computed by one call, from
// its own elements (a row region's broadcast operand is read, never
// written), and the generated kernels promise that an item's result does
// not depend on the range it is computed in (their vector body and scalar
// tail round alike), so the bits are the same for any thread count; a row
// region is only ever split between whole rows, as the row kernels that
// may join fused regions will need. The AVX-512 build of the kernel runs
// where the runtime's own AVX-512 kernels do (the same switch, also
// ZTRT_CPU_ISA=baseline); the compiler builds both from one source
// without FMA contraction, so they round alike.
void CpuBackend::runFused(ztrt_fused_fn fn, ztrt_fused_fn wide,
                          void *const *args, int64_t items,
                          int64_t itemElements) {
  const ztrt_fused_fn kernel = wide && avx512Kernels ? wide : fn;
  if (items <= 0)
    return;
#ifdef _OPENMP
#pragma omp parallel if (items * itemElements >= kParallelElements)
  {
    const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
    const int64_t q = items / threads, r = items % threads;
    const int64_t begin = t * q + std::min(t, r),
                  end = (t + 1) * q + std::min(t + 1, r);
    if (begin < end)
      kernel(args, begin, end);
  }
#else
  kernel(args, 0, items);
#endif
}

// x widened, rounded once to the target type; a cast to the same type is
// a copy (memmove: out may overlap x), which keeps NaN payloads.
void CpuBackend::cast(DType dtype, const void *x, void *out, int64_t n,
                      int32_t to) {
  const DType target = static_cast<DType>(to);
  if (target == dtype) {
    copy(x, out, n * elementBytes(dtype));
    return;
  }
  ZTRT_CPU_DISPATCH(dtype, dispatch(target, [&](auto toTag) {
                      using U = decltype(toTag);
                      unaryCast<T, U>(as<T>(x), as<U>(out), n);
                    }));
}

} // namespace ztrt
