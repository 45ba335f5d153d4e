//===- CpuBackend.cpp - The host-memory backend ---------------------------===//
//
// Part of ztrain's runtime.
//
// Determinism: OpenMP loops split only independent work (elements, or whole
// rows whose reductions stay inside one thread); every reduction across rows
// runs serially in index order. Results are therefore bitwise identical for
// any OpenMP thread count. OpenBLAS's sgemm, and oneDNN's bf16 matmul
// (backends/cpu/OneDnnGemm.h), are deterministic for a fixed thread count.
//
// Precision: per-row statistics (layer-norm mean and variance, softmax and
// log-sum-exp sums, reductions) are accumulated in double and rounded once;
// elementwise formulas are evaluated in float in PyTorch's order. Every
// kernel is one template over the element type (float, bf16, f16): bf16 /
// f16 elements are widened to float on load and results rounded once on
// store, so those results are the f32 results rounded (base/DType.h).
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/CpuBackend.h"

#include "backends/cpu/OneDnnGemm.h"
#include "backends/cpu/IsaKernels.h"
#include "backends/cpu/OptimizerKernels.h"
#include "backends/cpu/RowKernels.h"
#include "backends/cpu/VecMath.h"
#include "comm/Communicator.h"
#include "base/Rng.h"
#include "base/Support.h"

#include <algorithm>
#include <fstream>
#include <cblas.h>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <malloc.h>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ztrt {

namespace {

// Alignment of every allocation: a cache line, enough for any vector ISA.
constexpr int64_t kAlignment = 64;

/// Row-major walk over a tensor shape one innermost row at a time, mapping
/// each row to an offset in a second tensor through per-dim strides (0 for
/// dims the second tensor does not have). Rows are decoded independently,
/// so callers may process them in parallel.
class RowWalker {
public:
  RowWalker(int64_t rank, const int64_t *shape,
            const std::vector<int64_t> &strides) {
    if (rank == 0)
      return; // One row of one element.
    inner = shape[rank - 1];
    innerStride = strides[rank - 1];
    for (int64_t d = 0; d + 1 < rank; ++d) {
      outerShape.push_back(shape[d]);
      outerStrides.push_back(strides[d]);
      rows *= shape[d];
    }
  }

  /// Offset in the second tensor of the first element of row `row`.
  int64_t offset(int64_t row) const {
    int64_t result = 0;
    for (size_t d = outerShape.size(); d-- > 0;) {
      result += (row % outerShape[d]) * outerStrides[d];
      row /= outerShape[d];
    }
    return result;
  }

  int64_t rows = 1;
  int64_t inner = 1;
  int64_t innerStride = 0;

private:
  std::vector<int64_t> outerShape, outerStrides;
};

/// A buffer argument as an array of T.
template <typename T> const T *as(const void *p) {
  return static_cast<const T *>(p);
}
template <typename T> T *as(void *p) { return static_cast<T *>(p); }

/// An element widened to float (exact), and a float or double result
/// rounded once to T. For T = float both are the identity (or the same
/// double -> float rounding as before), so the f32 kernels are unchanged.
template <typename T> inline float ld(T v) { return static_cast<float>(v); }
template <typename T, typename V> inline T st(V v) {
  return static_cast<T>(v);
}

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

/// n elements of T widened into a float buffer.
template <typename T> std::vector<float> widen(const T *x, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i)
    out[i] = ld(x[i]);
  return out;
}

/// out (contiguous, walk.rows x walk.inner) = the elements of x the walk
/// maps each row to, times `factor`: the gather behind transpose and
/// broadcast.
template <typename T>
void gatherRows(const RowWalker &walk, const T *x, T *out, double factor) {
  int64_t inner = walk.inner, step = walk.innerStride;
#pragma omp parallel for schedule(static) if (walk.rows * inner >=             \
                                              kParallelElements)
  for (int64_t row = 0; row < walk.rows; ++row) {
    const T *src = x + walk.offset(row);
    T *dst = out + row * inner;
    if (factor == 1.0)
      for (int64_t j = 0; j < inner; ++j)
        dst[j] = src[j * step];
    else
      for (int64_t j = 0; j < inner; ++j)
        dst[j] = st<T>(ld(src[j * step]) * factor);
  }
}

/// Row-major element strides of `shape`.
std::vector<int64_t> contiguousStrides(int64_t rank, const int64_t *shape) {
  std::vector<int64_t> strides(rank);
  int64_t stride = 1;
  for (int64_t d = rank; d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

/// log(sum(exp(x))) of one row, max-shifted.
template <typename T> double logSumExp(const T *x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j)
    max = std::max(max, ld(x[j]));
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j)
    sum += std::exp(static_cast<double>(ld(x[j])) - max);
  return max + std::log(sum);
}

/// Mean and 1/sqrt(biased variance + eps) of one row, two-pass in double.
template <typename T>
void rowMoments(const T *x, int64_t n, double eps, double &mean,
                double &rstd) {
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j)
    sum += ld(x[j]);
  mean = sum / n;
  double sq = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    double d = ld(x[j]) - mean;
    sq += d * d;
  }
  rstd = 1.0 / std::sqrt(sq / n + eps);
}

void checkLabels(const char *op, const int32_t *labels, int64_t rows,
                 int64_t classes) {
  for (int64_t r = 0; r < rows; ++r)
    if (labels[r] < 0 || labels[r] >= classes)
      fatal("%s: label %d out of range [0, %lld) at row %lld", op, labels[r],
            static_cast<long long>(classes), static_cast<long long>(r));
}

void checkIds(const char *op, const int32_t *ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      fatal("%s: id %d out of range [0, %lld) at position %lld", op, ids[i],
            static_cast<long long>(vocab), static_cast<long long>(i));
}

class CpuBackend final : public Backend {
public:
  const char *name() const override { return "cpu"; }
  std::string deviceName() const override {
    // /proc/cpuinfo's first "model name" (Linux); the name alone elsewhere.
    const char *kernels = avx512Kernels ? " (AVX-512 kernels)" : "";
    std::ifstream info("/proc/cpuinfo");
    std::string line;
    while (std::getline(info, line))
      if (line.compare(0, 10, "model name") == 0) {
        size_t colon = line.find(':');
        if (colon != std::string::npos && colon + 2 <= line.size())
          return line.substr(colon + 2) + kernels;
      }
    return std::string("host CPU") + kernels;
  }

  void setThreads(int threads) override {
    openblas_set_num_threads(threads);
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
  }

  int threads() const override {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return openblas_get_num_threads();
#endif
  }

  void adoptThreads(int threads) override {
    // OpenMP's thread count is a per-thread setting: a thread that never
    // set it uses the process default (all cores), not the count the step
    // thread was given.
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
  }

  void *allocate(int64_t bytes) override {
    if (bytes > std::numeric_limits<int64_t>::max() - kAlignment)
      return nullptr;
    // aligned_alloc needs a multiple of the alignment; rounding 0 up to one
    // line also makes every pointer distinct.
    int64_t rounded = (std::max<int64_t>(bytes, 1) + kAlignment - 1) /
                      kAlignment * kAlignment;
    return std::aligned_alloc(kAlignment, static_cast<size_t>(rounded));
  }

  void deallocate(void *ptr) override { std::free(ptr); }

  void copyFromHost(void *dst, const void *hostSrc, int64_t bytes) override {
    if (bytes > 0)
      std::memcpy(dst, hostSrc, static_cast<size_t>(bytes));
  }

  void copyToHost(void *hostDst, const void *src, int64_t bytes) override {
    if (bytes > 0)
      std::memcpy(hostDst, src, static_cast<size_t>(bytes));
  }

  void copy(const void *src, void *dst, int64_t bytes) override {
    // memmove: the compiler may copy a buffer onto an overlapping view.
    if (bytes > 0)
      std::memmove(dst, src, static_cast<size_t>(bytes));
  }

  void copy2d(const void *src, void *dst, int64_t rows, int64_t rowBytes,
              int64_t srcStride, int64_t dstStride) override {
    if (rows <= 0 || rowBytes <= 0)
      return;
    const char *from = static_cast<const char *>(src);
    char *to = static_cast<char *>(dst);
    // Packed on both sides: one block.
    if (srcStride == rowBytes && dstStride == rowBytes) {
      std::memcpy(to, from, static_cast<size_t>(rows * rowBytes));
      return;
    }
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(to + r * dstStride, from + r * srcStride,
                  static_cast<size_t>(rowBytes));
  }

  // --- Kernels: each written once over the element type T ---------------------
  // The public methods dispatch on the dtype (base/DType.h); the templates
  // load T as float and store float (or double) results rounded once to T.

#define ZTRT_CPU_DISPATCH(dtype, call)                                        \
  dispatch(dtype, [&](auto tag) {                                              \
    using T = decltype(tag);                                                   \
    call;                                                                      \
  })

  void fill(DType dtype, void *out, int64_t n, double value) override {
    ZTRT_CPU_DISPATCH(dtype, fillT<T>(out, n, value));
  }

  // The elementwise kernels of backends/Elementwise.def: one float expression
  // each, widened inputs, one rounding to T on store.
  // f32 goes to the AVX-512 build of the same kernels where the processor
  // has it (backends/cpu/IsaKernels.h: bitwise the same results).
#define ZTRT_UNARY(method, Name, expr)                                         \
  void method(DType dtype, const void *in, void *out, int64_t n) override {    \
    if (dtype == DType::F32 && avx512Kernels)                                  \
      return avx512::method##F32(as<float>(in), as<float>(out), n);            \
    ZTRT_CPU_DISPATCH(dtype,                                                   \
                      unary<T>(in, out, n, [](float x) { return expr; }));     \
  }
#define ZTRT_BINARY(method, Name, expr)                                        \
  void method(DType dtype, const void *a, const void *b, void *out, int64_t n) \
      override {                                                               \
    if (dtype == DType::F32 && avx512Kernels)                                  \
      return avx512::method##F32(as<float>(a), as<float>(b), as<float>(out),   \
                                 n);                                           \
    ZTRT_CPU_DISPATCH(dtype, binary<T>(a, b, out, n, [](float x, float y) {    \
                        return expr;                                           \
                      }));                                                     \
  }
#include "backends/Elementwise.def"

  void scale(DType dtype, const void *x, void *out, int64_t n,
             double factor) override {
    const float f = static_cast<float>(factor);
    if (dtype == DType::F32 && avx512Kernels)
      return avx512::scaleF32(as<float>(x), as<float>(out), n, f);
    ZTRT_CPU_DISPATCH(dtype,
                      unary<T>(x, out, n, [f](float v) { return v * f; }));
  }

  void biasAdd(DType dtype, const void *x, const void *bias, void *out,
               int64_t rows, int64_t cols) override {
    ZTRT_CPU_DISPATCH(dtype, biasAddT<T>(x, bias, out, rows, cols));
  }

  void maskedFill(DType dtype, const void *x, const void *mask, void *out,
                  int64_t outer, int64_t inner, double value) override {
    ZTRT_CPU_DISPATCH(dtype, maskedFillT<T>(as<T>(x), as<int32_t>(mask),
                                            as<T>(out), outer, inner, value));
  }

  void where(DType dtype, const void *mask, const void *x, const void *y,
             void *out, int64_t outer, int64_t inner) override {
    ZTRT_CPU_DISPATCH(dtype, whereT<T>(as<int32_t>(mask), as<T>(x), as<T>(y),
                                       as<T>(out), outer, inner));
  }

  void dropout(DType dtype, const void *x, void *out, int64_t n, uint64_t key,
               uint64_t counterBase, uint32_t threshold, float scale) override {
    ZTRT_CPU_DISPATCH(dtype, dropoutT<T>(as<T>(x), as<T>(out), n, key,
                                         counterBase, threshold, scale));
  }

  void matmul(DType dtype, const void *a, const void *b, void *c,
              int64_t batch, int64_t m, int64_t n, int64_t k, int32_t transA,
              int32_t transB, int64_t strideA, int64_t strideB,
              int64_t strideC) override {
    ZTRT_CPU_DISPATCH(dtype, matmulT<T>(as<T>(a), as<T>(b), as<T>(c), batch,
                                        m, n, k, transA != 0, transB != 0,
                                        strideA, strideB, strideC));
  }

  void layerNorm(DType dtype, const void *x, const void *gamma,
                 const void *beta, void *y, int64_t rows, int64_t cols,
                 double eps) override {
    ZTRT_CPU_DISPATCH(dtype, layerNormT<T>(as<T>(x), as<T>(gamma),
                                           as<T>(beta), as<T>(y), rows, cols,
                                           eps));
  }

  void layerNormGrad(DType dtype, const void *dy, const void *x,
                     const void *gamma, void *dx, void *dgamma, void *dbeta,
                     int64_t rows, int64_t cols, double eps) override {
    ZTRT_CPU_DISPATCH(dtype,
                      layerNormGradT<T>(as<T>(dy), as<T>(x), as<T>(gamma),
                                        as<T>(dx), as<T>(dgamma), as<T>(dbeta),
                                        rows, cols, eps));
  }

  void softmax(DType dtype, const void *x, void *y, int64_t rows,
               int64_t cols, int32_t causal) override {
    if (dtype == DType::F32 && avx512Kernels)
      return avx512::softmaxF32(as<float>(x), as<float>(y), rows, cols,
                                causal != 0);
    ZTRT_CPU_DISPATCH(dtype,
                      softmaxT<T>(as<T>(x), as<T>(y), rows, cols, causal != 0));
  }

  void softmaxGrad(DType dtype, const void *dy, const void *y, void *dx,
                   int64_t rows, int64_t cols) override {
    if (dtype == DType::F32 && avx512Kernels)
      return avx512::softmaxGradF32(as<float>(dy), as<float>(y),
                                    as<float>(dx), rows, cols);
    ZTRT_CPU_DISPATCH(dtype, softmaxGradT<T>(as<T>(dy), as<T>(y), as<T>(dx),
                                             rows, cols));
  }

  // Fused attention, one head at a time, each step the composed form's own
  // kernel on that head's slice: the scores q k^T (sgemm), the scale, the
  // (causal) softmax rows, the product with v, and in the backward the
  // composed form's adjoint products in its order and with its transposes.
  // So in f32 the results are bitwise those of the composed attention
  // (AttentionKernelTest.F32IsBitwiseTheComposedForm), while [tq, tk]
  // floats of scratch (two in the backward) replace the heads x tq x tk
  // probabilities the composed form keeps. The backward recomputes the
  // probabilities (the same bits as the forward's) and does not read out
  // or lse: the CUDA kernels' tiles do. bf16 / f16: the head's operands
  // widened to float, the float path, each result rounded to T once.
  // Grouped-query (groups > 1): query head h reads key / value head
  // h / groups, and a shared head's dk and dv are its group's per-head
  // results, each rounded to T, summed in double in head order and rounded
  // once: what the repeated heads' gradients (a train.broadcast's adjoint,
  // train.reduce sum) give, bitwise.
  void attention(DType dtype, const void *q, const void *k, const void *v,
                 void *out, void *lse, int64_t heads, int64_t groups,
                 int64_t tq, int64_t tk, int64_t d, int32_t causal,
                 double scale) override {
    ZTRT_CPU_DISPATCH(dtype, attentionT<T>(as<T>(q), as<T>(k), as<T>(v),
                                           as<T>(out), as<float>(lse), heads,
                                           groups, tq, tk, d, causal != 0,
                                           scale));
  }

  void attentionGrad(DType dtype, const void *dout, const void *q,
                     const void *k, const void *v, const void *out,
                     const void *lse, void *dq, void *dk, void *dv,
                     int64_t heads, int64_t groups, int64_t tq, int64_t tk,
                     int64_t d, int32_t causal, double scale) override {
    (void)out;
    (void)lse;
    ZTRT_CPU_DISPATCH(dtype,
                      attentionGradT<T>(as<T>(dout), as<T>(q), as<T>(k),
                                        as<T>(v), as<T>(dq), as<T>(dk),
                                        as<T>(dv), heads, groups, tq, tk, d,
                                        causal != 0, scale));
  }

  void rmsNorm(DType dtype, const void *x, const void *gamma, void *y,
               int64_t rows, int64_t cols, double eps) override {
    ZTRT_CPU_DISPATCH(dtype, rmsNormT<T>(as<T>(x), as<T>(gamma), as<T>(y),
                                         rows, cols, eps));
  }

  void rmsNormGrad(DType dtype, const void *dy, const void *x,
                   const void *gamma, void *dx, void *dgamma, int64_t rows,
                   int64_t cols, double eps) override {
    ZTRT_CPU_DISPATCH(dtype, rmsNormGradT<T>(as<T>(dy), as<T>(x), as<T>(gamma),
                                             as<T>(dx), as<T>(dgamma), rows,
                                             cols, eps));
  }

  void rotaryEmbedding(DType dtype, const void *x, void *out, int64_t outer,
                       int64_t seq, int64_t inner, int64_t dim, double theta,
                       double factor, double low, double high, double original,
                       int32_t inverse) override {
    const vecmath::RopeScaling scaling{factor, low, high, original};
    ZTRT_CPU_DISPATCH(dtype, rotaryT<T>(as<T>(x), as<T>(out), outer, seq,
                                        inner, dim, theta, scaling,
                                        inverse != 0));
  }

  void transpose(DType dtype, const void *x, void *out, int64_t rank,
                 const void *xShapeArg, const void *permArg) override {
    const int64_t *xShape = as<int64_t>(xShapeArg),
                  *perm = as<int64_t>(permArg);
    std::vector<int64_t> xStrides = contiguousStrides(rank, xShape);
    std::vector<int64_t> outShape(rank), srcStrides(rank);
    for (int64_t d = 0; d < rank; ++d) {
      outShape[d] = xShape[perm[d]];
      srcStrides[d] = xStrides[perm[d]];
    }
    RowWalker walk(rank, outShape.data(), srcStrides);
    ZTRT_CPU_DISPATCH(dtype, gatherRows<T>(walk, as<T>(x), as<T>(out), 1.0));
  }

  void reduce(DType dtype, const void *x, void *out, int64_t rank,
              const void *xShape, const void *mask, int32_t kind) override {
    ZTRT_CPU_DISPATCH(dtype, reduceT<T>(as<T>(x), as<T>(out), rank,
                                        as<int64_t>(xShape), as<int64_t>(mask),
                                        kind));
  }

  void reduceMaxGrad(DType dtype, const void *dy, const void *x,
                     const void *y, void *dx, int64_t rank, const void *xShape,
                     const void *mask) override {
    ZTRT_CPU_DISPATCH(dtype, reduceMaxGradT<T>(as<T>(dy), as<T>(x), as<T>(y),
                                               as<T>(dx), rank,
                                               as<int64_t>(xShape),
                                               as<int64_t>(mask)));
  }

  void broadcast(DType dtype, const void *x, void *out, int64_t rank,
                 const void *outShapeArg, const void *maskArg,
                 double factor) override {
    const int64_t *outShape = as<int64_t>(outShapeArg),
                  *mask = as<int64_t>(maskArg);
    // x's strides over the output's dims, 0 along broadcast dims.
    std::vector<int64_t> srcStrides(rank);
    int64_t stride = 1;
    for (int64_t d = rank; d-- > 0;) {
      srcStrides[d] = mask[d] ? 0 : stride;
      if (!mask[d])
        stride *= outShape[d];
    }
    RowWalker walk(rank, outShape, srcStrides);
    ZTRT_CPU_DISPATCH(dtype,
                      gatherRows<T>(walk, as<T>(x), as<T>(out), factor));
  }

  void crossEntropy(DType dtype, const void *logits, const void *labels,
                    void *loss, int64_t rows, int64_t classes) override {
    ZTRT_CPU_DISPATCH(dtype, crossEntropyT<T>(as<T>(logits),
                                              as<int32_t>(labels),
                                              as<float>(loss), rows, classes));
  }

  void crossEntropyWithGrad(DType dtype, const void *logits,
                            const void *labels, const void *dloss, void *loss,
                            void *dlogits, int64_t rows,
                            int64_t classes) override {
    ZTRT_CPU_DISPATCH(dtype, crossEntropyT<T>(as<T>(logits),
                                              as<int32_t>(labels),
                                              as<float>(loss), rows, classes,
                                              as<float>(dloss),
                                              as<T>(dlogits)));
  }

  void crossEntropyGrad(DType dtype, const void *dloss, const void *logits,
                        const void *labels, void *dlogits, int64_t rows,
                        int64_t classes) override {
    ZTRT_CPU_DISPATCH(dtype,
                      crossEntropyGradT<T>(as<float>(dloss), as<T>(logits),
                                           as<int32_t>(labels), as<T>(dlogits),
                                           rows, classes));
  }

  void embedding(DType dtype, const void *table, const void *ids, void *out,
                 int64_t nIds, int64_t vocab, int64_t dim) override {
    const int32_t *idx = as<int32_t>(ids);
    checkIds("embedding", idx, nIds, vocab);
    const int64_t rowBytes = dim * elementBytes(dtype);
    const char *src = static_cast<const char *>(table);
    char *dst = static_cast<char *>(out);
#pragma omp parallel for schedule(static) if (nIds * dim >= kParallelElements)
    for (int64_t i = 0; i < nIds; ++i)
      std::memcpy(dst + i * rowBytes, src + idx[i] * rowBytes,
                  static_cast<size_t>(rowBytes));
  }

  void embeddingGrad(DType dtype, const void *dy, const void *ids,
                     void *dtable, int64_t nIds, int64_t vocab,
                     int64_t dim) override {
    ZTRT_CPU_DISPATCH(dtype, embeddingGradT<T>(as<T>(dy), as<int32_t>(ids),
                                               as<T>(dtable), nIds, vocab,
                                               dim));
  }

  void sgdUpdate(DType dtype, void *param, const void *grad,
                 void *momentumBuf, int64_t n, const SgdHyper &hyper,
                 int64_t step) override {
    const SgdConstants c = sgdConstants(hyper, step);
    if (dtype == DType::F32 && avx512Kernels)
      return avx512::sgdF32(as<float>(param), as<float>(grad),
                            as<float>(momentumBuf), n, c);
    ZTRT_CPU_DISPATCH(dtype, optkernels::sgd<T>(as<T>(param), as<T>(grad),
                                                as<T>(momentumBuf), n, c));
  }

  void adamUpdate(DType dtype, void *param, const void *grad, void *expAvg,
                  void *expAvgSq, int64_t n, const AdamHyper &hyper,
                  int64_t step) override {
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
  void sgdUpdateMaster(DType gradType, DType paramType, void *param,
                       const void *grad, float *master, float *momentumBuf,
                       int64_t n, const SgdHyper &hyper,
                       int64_t step) override {
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

  void adamUpdateMaster(DType gradType, DType paramType, void *param,
                        const void *grad, float *master, float *expAvg,
                        float *expAvgSq, int64_t n, const AdamHyper &hyper,
                        int64_t step) override {
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
  void foundNonfinite(DType dtype, const void *x, int64_t n,
                      const void *foundIn, void *foundOut) override {
    bool found = *as<float>(foundIn) != 0.0f;
    if (!found)
      ZTRT_CPU_DISPATCH(dtype, found = anyNonfinite<T>(as<T>(x), n));
    *as<float>(foundOut) = found ? 1.0f : 0.0f;
  }

  // Chunks of a fixed size summed in parallel, then the chunk sums in
  // order: the same bits for any thread count.
  void gradSqNorm(DType dtype, const void *x, int64_t n, const void *sumIn,
                  void *sumOut) override {
    double total = 0.0;
    ZTRT_CPU_DISPATCH(dtype, total = sumOfSquares<T>(as<T>(x), n));
    *as<float>(sumOut) =
        static_cast<float>(static_cast<double>(*as<float>(sumIn)) + total);
  }

  // x widened, rounded once to the target type; a cast to the same type is
  // a copy (memmove: out may overlap x), which keeps NaN payloads.
  void cast(DType dtype, const void *x, void *out, int64_t n,
            int32_t to) override {
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

  // Collectives: MPI moves the data (Communicator), the sums are ours, so the
  // result is the same on every rank and for any MPI algorithm. Each returns
  // the bytes the communicator handed MPI for other ranks during the call.

  int64_t allReduce(Communicator &comm, DType dtype, const void *in, void *out,
                    int64_t n, bool mean) override {
    const int64_t before = comm.sentBytes();
    ZTRT_CPU_DISPATCH(dtype,
                      allReduceT<T>(comm, as<T>(in), as<T>(out), n, mean));
    return comm.sentBytes() - before;
  }

  int64_t reduceScatter(Communicator &comm, DType dtype, const void *in,
                        void *out, int64_t count, bool mean) override {
    const int64_t before = comm.sentBytes();
    ZTRT_CPU_DISPATCH(dtype, reduceScatterT<T>(comm, as<T>(in), as<T>(out),
                                               count, mean));
    return comm.sentBytes() - before;
  }

  int64_t allGather(Communicator &comm, DType dtype, const void *in, void *out,
                    int64_t count) override {
    const int64_t before = comm.sentBytes();
    ZTRT_CPU_DISPATCH(dtype,
                      allGatherT<T>(comm, as<T>(in), as<T>(out), count));
    return comm.sentBytes() - before;
  }

  int64_t bcast(Communicator &comm, DType dtype, void *buf, int64_t n,
                int root) override {
    const int64_t before = comm.sentBytes();
    comm.broadcast(buf, n, elementBytes(dtype), root);
    return comm.sentBytes() - before;
  }

#undef ZTRT_CPU_DISPATCH

private:
  template <typename T> static void fillT(void *out, int64_t n, double value) {
    const T v = st<T>(static_cast<float>(value));
    T *o = as<T>(out);
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      o[i] = v;
  }

  template <typename T>
  static void biasAddT(const void *xArg, const void *biasArg, void *outArg,
                       int64_t rows, int64_t cols) {
    const T *x = as<T>(xArg), *bias = as<T>(biasArg);
    T *out = as<T>(outArg);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        out[r * cols + c] = st<T>(ld(x[r * cols + c]) + ld(bias[c]));
  }

  /// The f32 GEMM: OpenBLAS's sgemm.
  void sgemm(const float *a, const float *b, float *c, int64_t batch,
             int64_t m, int64_t n, int64_t k, bool transA, bool transB,
             int64_t strideA, int64_t strideB, int64_t strideC) {
    if (batch == 0 || m == 0 || n == 0)
      return;
    if (k == 0) {
      // An empty sum; BLAS implementations disagree on touching C here.
      for (int64_t i = 0; i < batch; ++i)
        fillT<float>(c + i * strideC, m * n, 0.0);
      return;
    }
    int64_t lda = transA ? m : k, ldb = transB ? k : n, ldc = n;
    // A shared B and back-to-back, untransposed A_i / C_i are the rows of
    // one (batch * m) x k matrix: a single GEMM instead of `batch` small ones.
    if (batch > 1 && strideB == 0 && !transA && strideA == m * k &&
        strideC == m * n) {
      m *= batch;
      batch = 1;
    }
    if (std::max({m, n, k, lda, ldb}) > INT_MAX)
      fatal("matmul: %lld x %lld x %lld is too large for BLAS",
            static_cast<long long>(m), static_cast<long long>(n),
            static_cast<long long>(k));
    for (int64_t i = 0; i < batch; ++i)
      cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                  transB ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                  static_cast<int>(n), static_cast<int>(k), 1.0f,
                  a + i * strideA, static_cast<int>(lda), b + i * strideB,
                  static_cast<int>(ldb), 0.0f, c + i * strideC,
                  static_cast<int>(ldc));
  }

  /// bf16 / f16: the operands widened to float, the f32 GEMM (float
  /// accumulation), the product rounded once.
  template <typename T>
  void matmulT(const T *a, const T *b, T *c, int64_t batch, int64_t m,
               int64_t n, int64_t k, bool transA, bool transB, int64_t strideA,
               int64_t strideB, int64_t strideC) {
    if constexpr (std::is_same_v<T, float>) {
      sgemm(a, b, c, batch, m, n, k, transA, transB, strideA, strideB,
            strideC);
    } else if (std::is_same_v<T, bf16> && onednn::bf16GemmEnabled()) {
      // AVX-512 BF16 through oneDNN (backends/cpu/OneDnnGemm.h).
      onednn::bf16Matmul(reinterpret_cast<const bf16 *>(a),
                         reinterpret_cast<const bf16 *>(b),
                         reinterpret_cast<bf16 *>(c), batch, m, n, k, transA,
                         transB, strideA, strideB, strideC);
    } else {
      if (batch == 0 || m == 0 || n == 0)
        return;
      const int64_t spanA = (batch - 1) * strideA + m * k,
                    spanB = (batch - 1) * strideB + k * n;
      std::vector<float> wa = widen(a, spanA), wb = widen(b, spanB);
      std::vector<float> wc(static_cast<size_t>(batch * m * n));
      sgemm(wa.data(), wb.data(), wc.data(), batch, m, n, k, transA, transB,
            strideA, strideB, m * n);
      for (int64_t i = 0; i < batch; ++i) {
        const float *src = wc.data() + i * m * n;
        T *dst = c + i * strideC;
#pragma omp parallel for schedule(static) if (m * n >= kParallelElements)
        for (int64_t j = 0; j < m * n; ++j)
          dst[j] = st<T>(src[j]);
      }
    }
  }

  template <typename T>
  static void layerNormT(const T *x, const T *gamma, const T *beta, T *y,
                         int64_t rows, int64_t cols, double eps) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x + r * cols;
      T *yr = y + r * cols;
      double mean, rstd;
      rowMoments(xr, cols, eps, mean, rstd);
      for (int64_t c = 0; c < cols; ++c)
        yr[c] = st<T>((ld(xr[c]) - mean) * rstd * ld(gamma[c]) +
                      ld(beta[c]));
    }
  }

  template <typename T>
  static void layerNormGradT(const T *dy, const T *x, const T *gamma, T *dx,
                             T *dgamma, T *dbeta, int64_t rows, int64_t cols,
                             double eps) {
    std::vector<double> means(rows), rstds(rows);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x + r * cols, *dyr = dy + r * cols;
      double mean, rstd;
      rowMoments(xr, cols, eps, mean, rstd);
      means[r] = mean;
      rstds[r] = rstd;
      // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
      double sumG = 0.0, sumGX = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        double g = static_cast<double>(ld(dyr[c])) * ld(gamma[c]);
        sumG += g;
        sumGX += g * (ld(xr[c]) - mean) * rstd;
      }
      double meanG = sumG / cols, meanGX = sumGX / cols;
      for (int64_t c = 0; c < cols; ++c) {
        double g = static_cast<double>(ld(dyr[c])) * ld(gamma[c]);
        double xhat = (ld(xr[c]) - mean) * rstd;
        dx[r * cols + c] = st<T>(rstd * (g - meanG - xhat * meanGX));
      }
    }
    // Column sums over rows, serially in row order (see file comment).
    std::vector<double> sumGamma(cols, 0.0), sumBeta(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x + r * cols, *dyr = dy + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        sumGamma[c] += ld(dyr[c]) * ((ld(xr[c]) - means[r]) * rstds[r]);
        sumBeta[c] += ld(dyr[c]);
      }
    }
    for (int64_t c = 0; c < cols; ++c) {
      dgamma[c] = st<T>(sumGamma[c]);
      dbeta[c] = st<T>(sumBeta[c]);
    }
  }

  // Softmax rows: backends/cpu/RowKernels.h (shared with the wider-ISA build).
  /// One head's operand as floats: the head itself for float, else
  /// widened into `buf`.
  template <typename T>
  static const float *headFloats(const T *x, int64_t n,
                                 std::vector<float> &buf) {
    if constexpr (std::is_same_v<T, float>) {
      return x;
    } else {
      buf.resize(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
      for (int64_t i = 0; i < n; ++i)
        buf[i] = ld(x[i]);
      return buf.data();
    }
  }

  /// A float result for one head: written in place for float, else
  /// computed into `buf` and stored rounded by `store`.
  template <typename T> static float *headResult(T *x, int64_t n,
                                                 std::vector<float> &buf) {
    if constexpr (std::is_same_v<T, float>) {
      return x;
    } else {
      buf.resize(static_cast<size_t>(n));
      return buf.data();
    }
  }
  template <typename T>
  static void storeHead(const float *from, T *to, int64_t n) {
    if constexpr (!std::is_same_v<T, float>) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
      for (int64_t i = 0; i < n; ++i)
        to[i] = st<T>(from[i]);
    }
  }

  /// p = softmax(scale * q k^T) of one head, in the composed form's steps,
  /// and the rows' log-sum-exps when `lse` is given.
  void attentionProbs(const float *q, const float *k, float *p, float *lse,
                      int64_t tq, int64_t tk, int64_t d, bool causal,
                      double scale) {
    sgemm(q, k, p, 1, tq, tk, d, false, true, 0, 0, 0);
    this->scale(DType::F32, p, p, tq * tk, scale);
    softmaxF32(p, p, tq, tk, causal, lse);
  }

  void softmaxF32(const float *x, float *y, int64_t rows, int64_t cols,
                  bool causal, float *lse) {
    if (avx512Kernels)
      return avx512::softmaxF32(x, y, rows, cols, causal, lse);
    softmaxT<float>(x, y, rows, cols, causal, lse);
  }

  template <typename T>
  void attentionT(const T *q, const T *k, const T *v, T *out, float *lse,
                  int64_t heads, int64_t groups, int64_t tq, int64_t tk,
                  int64_t d, bool causal, double scale) {
    std::vector<float> p(static_cast<size_t>(tq * tk)), wq, wk, wv, wo;
    const int64_t qn = tq * d, kn = tk * d;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kvh = h / groups;
      const float *fq = headFloats(q + h * qn, qn, wq),
                  *fk = headFloats(k + kvh * kn, kn, wk),
                  *fv = headFloats(v + kvh * kn, kn, wv);
      float *fo = headResult(out + h * qn, qn, wo);
      attentionProbs(fq, fk, p.data(), lse + h * tq, tq, tk, d, causal,
                     scale);
      sgemm(p.data(), fv, fo, 1, tq, d, tk, false, false, 0, 0, 0);
      storeHead(fo, out + h * qn, qn);
    }
  }

  template <typename T>
  void attentionGradT(const T *dout, const T *q, const T *k, const T *v,
                      T *dq, T *dk, T *dv, int64_t heads, int64_t groups,
                      int64_t tq, int64_t tk, int64_t d, bool causal,
                      double scale) {
    std::vector<float> p(static_cast<size_t>(tq * tk)),
        dp(static_cast<size_t>(tq * tk)), wq, wk, wv, wdo, wdq, wdk, wdv;
    const int64_t qn = tq * d, kn = tk * d;
    // Grouped: each query head's dk and dv in float scratch, summed into
    // the shared head's double accumulators.
    std::vector<float> gk(groups > 1 ? kn : 0), gv(groups > 1 ? kn : 0);
    std::vector<double> sk(groups > 1 ? kn : 0), sv(groups > 1 ? kn : 0);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kvh = h / groups, member = h % groups;
      const float *fq = headFloats(q + h * qn, qn, wq),
                  *fk = headFloats(k + kvh * kn, kn, wk),
                  *fv = headFloats(v + kvh * kn, kn, wv),
                  *fdo = headFloats(dout + h * qn, qn, wdo);
      float *fdq = headResult(dq + h * qn, qn, wdq),
            *fdk = groups > 1 ? gk.data() : headResult(dk + h * kn, kn, wdk),
            *fdv = groups > 1 ? gv.data() : headResult(dv + h * kn, kn, wdv);
      attentionProbs(fq, fk, p.data(), nullptr, tq, tk, d, causal, scale);
      // The composed adjoints, in train-autodiff's order: of y = p v, then
      // of the softmax, of the scale, and of s = q k^T.
      sgemm(fdo, fv, dp.data(), 1, tq, tk, d, false, true, 0, 0, 0);
      sgemm(p.data(), fdo, fdv, 1, tk, d, tq, true, false, 0, 0, 0);
      softmaxGrad(DType::F32, dp.data(), p.data(), dp.data(), tq, tk);
      this->scale(DType::F32, dp.data(), dp.data(), tq * tk, scale);
      sgemm(dp.data(), fk, fdq, 1, tq, d, tk, false, false, 0, 0, 0);
      sgemm(dp.data(), fq, fdk, 1, tk, d, tq, true, false, 0, 0, 0);
      storeHead(fdq, dq + h * qn, qn);
      if (groups == 1) {
        storeHead(fdk, dk + h * kn, kn);
        storeHead(fdv, dv + h * kn, kn);
        continue;
      }
      if (member == 0) {
        std::fill(sk.begin(), sk.end(), 0.0);
        std::fill(sv.begin(), sv.end(), 0.0);
      }
      for (int64_t i = 0; i < kn; ++i) {
        sk[i] += ld(st<T>(fdk[i]));
        sv[i] += ld(st<T>(fdv[i]));
      }
      if (member == groups - 1)
        for (int64_t i = 0; i < kn; ++i) {
          dk[kvh * kn + i] = st<T>(sk[i]);
          dv[kvh * kn + i] = st<T>(sv[i]);
        }
    }
  }

  template <typename T>
  static void softmaxT(const T *x, T *y, int64_t rows, int64_t cols,
                       bool causal, float *lse = nullptr) {
#pragma omp parallel if (rows * cols >= kParallelElements)
    {
      // bf16 / f16: the float exponentials wait in a per-thread row, not
      // in y, so that they are rounded to T once, after the scale.
      std::vector<float> row(std::is_same_v<T, float> ? 0 : cols);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        T *yr = y + r * cols;
        float *er;
        if constexpr (std::is_same_v<T, float>)
          er = yr;
        else
          er = row.data();
        // Causal: row i of each [cols x cols] block sees entries 0..i.
        rowkernels::softmaxRow(x + r * cols, yr, er, cols,
                               causal ? r % cols + 1 : cols,
                               lse ? lse + r : nullptr);
      }
    }
  }

  template <typename T>
  static void softmaxGradT(const T *dy, const T *y, T *dx, int64_t rows,
                           int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r)
      rowkernels::softmaxGradRow(dy + r * cols, y + r * cols, dx + r * cols, cols);
  }

  /// The walk of a reduction: x's rows mapped to output offsets (output
  /// strides over x's dims, 0 where a dim is reduced).
  struct ReduceShape {
    std::vector<int64_t> outStrides;
    int64_t outElements = 1, reduced = 1;
    ReduceShape(int64_t rank, const int64_t *xShape, const int64_t *mask)
        : outStrides(rank) {
      for (int64_t d = rank; d-- > 0;) {
        if (mask[d]) {
          outStrides[d] = 0;
          reduced *= xShape[d];
        } else {
          outStrides[d] = outElements;
          outElements *= xShape[d];
        }
      }
    }
  };

  /// For every element of x in input order: f(x index, output index).
  template <typename F>
  static void forEachReduced(int64_t rank, const int64_t *xShape,
                             const ReduceShape &shape, F f) {
    RowWalker walk(rank, xShape, shape.outStrides);
    for (int64_t row = 0; row < walk.rows; ++row) {
      int64_t o = walk.offset(row);
      for (int64_t j = 0; j < walk.inner; ++j)
        f(row * walk.inner + j, o + j * walk.innerStride);
    }
  }

  template <typename T>
  static void reduceT(const T *x, T *out, int64_t rank, const int64_t *xShape,
                      const int64_t *mask, int32_t kind) {
    ReduceShape shape(rank, xShape, mask);
    if (kind == 2) {
      // Max, NaN-propagating: once a NaN is in, no comparison replaces it.
      std::vector<float> acc(shape.outElements,
                             -std::numeric_limits<float>::infinity());
      forEachReduced(rank, xShape, shape, [&](int64_t i, int64_t o) {
        float v = ld(x[i]);
        if (v > acc[o] || v != v)
          acc[o] = v;
      });
      for (int64_t i = 0; i < shape.outElements; ++i)
        out[i] = st<T>(acc[i]);
      return;
    }
    // Serial, in input order: each output's sum has one fixed order.
    std::vector<double> acc(shape.outElements, 0.0);
    RowWalker walk(rank, xShape, shape.outStrides);
    for (int64_t row = 0; row < walk.rows; ++row) {
      const T *src = x + row * walk.inner;
      double *dst = acc.data() + walk.offset(row);
      if (walk.innerStride == 0) {
        double sum = 0.0;
        for (int64_t j = 0; j < walk.inner; ++j)
          sum += ld(src[j]);
        *dst += sum;
      } else {
        for (int64_t j = 0; j < walk.inner; ++j)
          dst[j] += ld(src[j]);
      }
    }
    for (int64_t i = 0; i < shape.outElements; ++i)
      out[i] = st<T>(kind == 1 ? acc[i] / shape.reduced : acc[i]);
  }

  template <typename T>
  static void reduceMaxGradT(const T *dy, const T *x, const T *y, T *dx,
                             int64_t rank, const int64_t *xShape,
                             const int64_t *mask) {
    ReduceShape shape(rank, xShape, mask);
    std::vector<int64_t> ties(shape.outElements, 0);
    forEachReduced(rank, xShape, shape, [&](int64_t i, int64_t o) {
      ties[o] += ld(x[i]) == ld(y[o]);
    });
    // torch.amax's backward: (dy / ties) where x reached the maximum.
    forEachReduced(rank, xShape, shape, [&](int64_t i, int64_t o) {
      dx[i] = st<T>(ld(x[i]) == ld(y[o])
                        ? ld(dy[o]) / static_cast<float>(ties[o])
                        : 0.0f);
    });
  }

  template <typename T>
  static void maskedFillT(const T *x, const int32_t *mask, T *out,
                          int64_t outer, int64_t inner, double value) {
    const T fill = st<T>(static_cast<float>(value));
#pragma omp parallel for schedule(static) if (outer * inner >=                 \
                                              kParallelElements)
    for (int64_t r = 0; r < outer; ++r)
      for (int64_t j = 0; j < inner; ++j)
        out[r * inner + j] = mask[j] ? fill : x[r * inner + j];
  }

  template <typename T>
  static void whereT(const int32_t *mask, const T *x, const T *y, T *out,
                     int64_t outer, int64_t inner) {
#pragma omp parallel for schedule(static) if (outer * inner >=                 \
                                              kParallelElements)
    for (int64_t r = 0; r < outer; ++r)
      for (int64_t j = 0; j < inner; ++j)
        out[r * inner + j] = mask[j] ? x[r * inner + j] : y[r * inner + j];
  }

  template <typename T>
  static void dropoutT(const T *x, T *out, int64_t n, uint64_t key,
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

  /// 1 / sqrt(mean(x^2) + eps) of one row, in double.
  template <typename T>
  static double rowRstd(const T *x, int64_t n, double eps) {
    double sq = 0.0;
    for (int64_t j = 0; j < n; ++j)
      sq += static_cast<double>(ld(x[j])) * ld(x[j]);
    return 1.0 / std::sqrt(sq / n + eps);
  }

  template <typename T>
  static void rmsNormT(const T *x, const T *gamma, T *y, int64_t rows,
                       int64_t cols, double eps) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x + r * cols;
      double rstd = rowRstd(xr, cols, eps);
      for (int64_t c = 0; c < cols; ++c)
        y[r * cols + c] = st<T>(ld(xr[c]) * rstd * ld(gamma[c]));
    }
  }

  template <typename T>
  static void rmsNormGradT(const T *dy, const T *x, const T *gamma, T *dx,
                           T *dgamma, int64_t rows, int64_t cols,
                           double eps) {
    std::vector<double> rstds(rows);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x + r * cols, *dyr = dy + r * cols;
      double rstd = rowRstd(xr, cols, eps);
      rstds[r] = rstd;
      // dx = rstd * (g - xhat * mean(g * xhat)), g = dy * gamma.
      double sumGX = 0.0;
      for (int64_t c = 0; c < cols; ++c)
        sumGX += static_cast<double>(ld(dyr[c])) * ld(gamma[c]) * ld(xr[c]) *
                 rstd;
      double meanGX = sumGX / cols;
      for (int64_t c = 0; c < cols; ++c) {
        double g = static_cast<double>(ld(dyr[c])) * ld(gamma[c]);
        double xhat = ld(xr[c]) * rstd;
        dx[r * cols + c] = st<T>(rstd * (g - xhat * meanGX));
      }
    }
    // Column sums over rows, serially in row order (see file comment).
    std::vector<double> sum(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x + r * cols, *dyr = dy + r * cols;
      for (int64_t c = 0; c < cols; ++c)
        sum[c] += ld(dyr[c]) * (ld(xr[c]) * rstds[r]);
    }
    for (int64_t c = 0; c < cols; ++c)
      dgamma[c] = st<T>(sum[c]);
  }

  template <typename T>
  static void rotaryT(const T *x, T *out, int64_t outer, int64_t seq,
                      int64_t inner, int64_t dim, double theta,
                      const vecmath::RopeScaling &scaling, bool inverse) {
    const int64_t half = dim / 2;
    // The table of one [seq, half] block, shared by every outer and inner.
    std::vector<float> cosT(seq * half), sinT(seq * half);
    for (int64_t t = 0; t < seq; ++t)
      for (int64_t i = 0; i < half; ++i)
        vecmath::ropeCosSin(t, i, dim, theta, scaling, cosT[t * half + i],
                            sinT[t * half + i]);
    const int64_t rows = outer * seq * inner;
#pragma omp parallel for schedule(static) if (rows * dim >= kParallelElements)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t t = (row / inner) % seq;
      const T *xr = x + row * dim;
      T *orow = out + row * dim;
      const float *c = cosT.data() + t * half, *s = sinT.data() + t * half;
      for (int64_t i = 0; i < half; ++i) {
        float lo = ld(xr[i]), hi = ld(xr[i + half]);
        float si = inverse ? -s[i] : s[i];
        orow[i] = st<T>(lo * c[i] - hi * si);
        orow[i + half] = st<T>(hi * c[i] + lo * si);
      }
    }
  }


  /// One row of cross_entropy_grad from its log-sum-exp:
  /// dloss / rows * (softmax - onehot), p in double, rounded once.
  template <typename T>
  static void crossEntropyGradRow(const T *xr, T *dr, int64_t classes,
                                  double lse, int32_t label, double scale) {
    for (int64_t j = 0; j < classes; ++j) {
      double p = std::exp(ld(xr[j]) - lse);
      dr[j] = st<T>((p - (j == label ? 1.0 : 0.0)) * scale);
    }
  }

  template <typename T>
  static void crossEntropyGradT(const float *dloss, const T *logits,
                                const int32_t *labels, T *dlogits,
                                int64_t rows, int64_t classes) {
    checkLabels("cross_entropy_grad", labels, rows, classes);
    double scale = static_cast<double>(dloss[0]) / rows;
#pragma omp parallel for schedule(static) if (rows * classes >=                \
                                              kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = logits + r * classes;
      T *dr = dlogits + r * classes;
      crossEntropyGradRow(xr, dr, classes, logSumExp(xr, classes), labels[r],
                          scale);
    }
  }

  /// The mean cross-entropy and, with dlogits (cross_entropy_with_grad,
  /// train-fuse-loss), its gradient from the same log-sum-exp per row:
  /// crossEntropyGradT's expressions, in its order.
  template <typename T>
  static void crossEntropyT(const T *logits, const int32_t *labels,
                            float *loss, int64_t rows, int64_t classes,
                            const float *dloss = nullptr,
                            T *dlogits = nullptr) {
    checkLabels("cross_entropy", labels, rows, classes);
    std::vector<double> rowLoss(rows);
    const double scale = dlogits ? static_cast<double>(dloss[0]) / rows : 0.0;
#pragma omp parallel for schedule(static) if (rows * classes >=                \
                                              kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = logits + r * classes;
      const double lse = logSumExp(xr, classes);
      rowLoss[r] = lse - ld(xr[labels[r]]);
      if (dlogits)
        crossEntropyGradRow(xr, dlogits + r * classes, classes, lse,
                            labels[r], scale);
    }
    double sum = 0.0;
    for (int64_t r = 0; r < rows; ++r)
      sum += rowLoss[r];
    loss[0] = static_cast<float>(sum / rows);
  }

  template <typename T>
  static void embeddingGradT(const T *dy, const int32_t *ids, T *dtable,
                             int64_t nIds, int64_t vocab, int64_t dim) {
    checkIds("embedding_grad", ids, nIds, vocab);
    // Index order, serially: repeated ids accumulate deterministically, in
    // float (a float table directly; otherwise a float copy rounded once).
    std::vector<float> scratch;
    float *acc;
    if constexpr (std::is_same_v<T, float>) {
      acc = dtable;
    } else {
      scratch.resize(static_cast<size_t>(vocab * dim));
      acc = scratch.data();
    }
    fillT<float>(acc, vocab * dim, 0.0);
    for (int64_t i = 0; i < nIds; ++i) {
      float *dst = acc + ids[i] * dim;
      const T *src = dy + i * dim;
      for (int64_t j = 0; j < dim; ++j)
        dst[j] += ld(src[j]);
    }
    if constexpr (!std::is_same_v<T, float>) {
      for (int64_t i = 0; i < vocab * dim; ++i)
        dtable[i] = st<T>(acc[i]);
    }
  }

  // The scalars of an update, rounded to float once as PyTorch's CPU kernels
  // round each Python scalar (backends/cpu/OptimizerKernels.h has the loops).
  static SgdConstants sgdConstants(const SgdHyper &hyper, int64_t step) {
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
  static AdamConstants adamConstants(const AdamHyper &hyper, int64_t step) {
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

  template <typename T> static double sumOfSquares(const T *x, int64_t n) {
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

  template <typename T> static bool anyNonfinite(const T *x, int64_t n) {
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      bad |= !std::isfinite(ld(x[i]));
    return bad != 0;
  }

  template <typename T>
  void allReduceT(Communicator &comm, const T *in, T *out, int64_t n,
                  bool mean) {
    const int64_t ranks = comm.count();
    const int64_t bytes = static_cast<int64_t>(sizeof(T));
    if (ranks == 1) {
      copy(in, out, n * bytes);
      return;
    }
    // Reduce-scatter chunks of ceil(n / N), then all-gather them. When n is
    // not a multiple of N the input is padded with zeros, which add nothing
    // to any sum; the padded buffer then also receives the gathered result.
    const int64_t chunk = (n + ranks - 1) / ranks;
    const int64_t padded = chunk * ranks;
    std::vector<T> pad;
    const T *send = in;
    if (padded != n) {
      pad.assign(static_cast<size_t>(padded), st<T>(0.0f));
      copy(in, pad.data(), n * bytes);
      send = pad.data();
    }
    std::vector<T> mine(static_cast<size_t>(chunk));
    reduceScatterT(comm, send, mine.data(), chunk, mean);
    // `in` has been read completely, so gathering into `out` is safe even
    // when it is `in`.
    if (padded == n) {
      comm.allGather(mine.data(), out, chunk, bytes);
    } else {
      comm.allGather(mine.data(), pad.data(), chunk, bytes);
      copy(pad.data(), out, n * bytes);
    }
  }

  template <typename T>
  void reduceScatterT(Communicator &comm, const T *in, T *out, int64_t count,
                      bool mean) {
    const int64_t ranks = comm.count();
    const int64_t bytes = static_cast<int64_t>(sizeof(T));
    if (ranks == 1) {
      copy(in, out, count * bytes);
      return;
    }
    // Block s of `received` is rank s's chunk for this rank. `in` is read
    // completely before `out` is written, so the two may overlap.
    std::vector<T> received(static_cast<size_t>(ranks * count));
    comm.allToAll(in, received.data(), count, bytes);
    const T *blocks = received.data();
    const float divisor = static_cast<float>(ranks);
#pragma omp parallel for schedule(static) if (count >= kParallelElements)
    for (int64_t i = 0; i < count; ++i) {
      float sum = ld(blocks[i]);
      for (int64_t s = 1; s < ranks; ++s)
        sum += ld(blocks[s * count + i]);
      out[i] = st<T>(mean ? sum / divisor : sum);
    }
  }

  template <typename T>
  void allGatherT(Communicator &comm, const T *in, T *out, int64_t count) {
    const int64_t ranks = comm.count();
    const int64_t bytes = static_cast<int64_t>(sizeof(T));
    if (ranks == 1) {
      copy(in, out, count * bytes);
      return;
    }
    // MPI forbids overlapping send and receive buffers, so a gather in place
    // (`in` inside `out`, as ZeRO does with its own shard) goes through a
    // copy of `in`.
    std::vector<T> staged;
    auto address = [](const T *p) { return reinterpret_cast<uintptr_t>(p); };
    if (address(in) < address(out + ranks * count) &&
        address(out) < address(in + count)) {
      staged.assign(in, in + count);
      in = staged.data();
    }
    comm.allGather(in, out, count, bytes);
  }

private:
  /// f32 elementwise, softmax and optimizer kernels from the AVX-512 build.
  const bool avx512Kernels = avx512::enabled();
};

} // namespace

bool avx512::enabled() {
#ifdef ZTRT_HAVE_AVX512_KERNELS
  const char *isa = std::getenv("ZTRT_CPU_ISA");
  if (isa && std::strcmp(isa, "baseline") == 0)
    return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

#ifndef ZTRT_HAVE_AVX512_KERNELS
// Never called (enabled() is false): the entry points exist for the linker.
#define ZTRT_UNARY(method, Name, expr)                                         \
  void avx512::method##F32(const float *, float *, int64_t) {}
#define ZTRT_BINARY(method, Name, expr)                                        \
  void avx512::method##F32(const float *, const float *, float *, int64_t) {}
#include "backends/Elementwise.def"
void avx512::scaleF32(const float *, float *, int64_t, float) {}
void avx512::softmaxF32(const float *, float *, int64_t, int64_t, bool) {}
void avx512::softmaxGradF32(const float *, const float *, float *, int64_t,
                            int64_t) {}
void avx512::sgdF32(float *, const float *, float *, int64_t,
                    const SgdConstants &) {}
void avx512::adamF32(float *, const float *, float *, float *, int64_t,
                     const AdamConstants &) {}
void avx512::sgdMasterBf16(float *, const void *, bool, float *, uint16_t *,
                           int64_t, const SgdConstants &) {}
void avx512::adamMasterBf16(float *, const void *, bool, float *, float *,
                            uint16_t *, int64_t, const AdamConstants &) {}
#endif

std::unique_ptr<Backend> createCpuBackend() {
  // A step frees and re-allocates the same activation buffers every time.
  // glibc serves large blocks with mmap and returns freed heap to the OS,
  // so each step would page-fault its activations in again (measured ~3% of
  // a GPT step in the kernel zeroing pages). Keep blocks up to glibc's
  // maximum mmap threshold on the heap, and the heap mapped. The compiler's
  // static memory plan will replace this with one arena.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return std::make_unique<CpuBackend>();
}

} // namespace ztrt
