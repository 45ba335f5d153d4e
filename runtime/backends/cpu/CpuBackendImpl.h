//===- CpuBackendImpl.h - The cpu backend's class ---------------*- C++ -*-===//
//
// Part of ztrain's runtime (private: not installed). The cpu backend's
// class, declared once and defined by kernel family: CpuBackend.cpp (the
// device, memory and copies; the kernels' determinism and precision
// contract), CpuElementwise.cpp, CpuRows.cpp (normalization, softmax,
// RoPE), CpuMatmul.cpp (GEMM, attention), CpuLayout.cpp, CpuLosses.cpp,
// CpuOptimizer.cpp and CpuCollectives.cpp, all compiled with the same
// flags (runtime/CMakeLists.txt); and the helpers more than one of them
// uses, in an anonymous namespace as in RowKernels.h (each file its own
// copy).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CPU_CPUBACKENDIMPL_H
#define ZTRT_BACKENDS_CPU_CPUBACKENDIMPL_H

#include "backends/Backend.h"
#include "backends/cpu/IsaKernels.h"
#include "base/DType.h"

#include <cstdint>
#include <string>

namespace ztrt {

namespace {

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

template <typename T> inline void fillT(void *out, int64_t n, double value) {
  const T v = st<T>(static_cast<float>(value));
  T *o = as<T>(out);
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i)
    o[i] = v;
}

} // namespace

// --- Kernels: each written once over the element type T ---------------------
// The public methods dispatch on the dtype (base/DType.h); the templates
// load T as float and store float (or double) results rounded once to T.

#define ZTRT_CPU_DISPATCH(dtype, call)                                        \
  dispatch(dtype, [&](auto tag) {                                              \
    using T = decltype(tag);                                                   \
    call;                                                                      \
  })

class CpuBackend final : public Backend {
public:
  // CpuBackend.cpp
  const char *name() const override;
  std::string deviceName() const override;
  void setThreads(int threads) override;
  int threads() const override;
  void adoptThreads(int threads) override;
  void *allocate(int64_t bytes) override;
  void deallocate(void *ptr) override;
  void copyFromHost(void *dst, const void *hostSrc, int64_t bytes) override;
  void copyToHost(void *hostDst, const void *src, int64_t bytes) override;
  void copy(const void *src, void *dst, int64_t bytes) override;
  void copy2d(const void *src, void *dst, int64_t rows, int64_t rowBytes,
              int64_t srcStride, int64_t dstStride) override;

  // CpuElementwise.cpp
  void fill(DType dtype, void *out, int64_t n, double value) override;
#define ZTRT_UNARY(method, Name, expr)                                         \
  void method(DType dtype, const void *in, void *out, int64_t n) override;
#define ZTRT_BINARY(method, Name, expr)                                        \
  void method(DType dtype, const void *a, const void *b, void *out, int64_t n) \
      override;
#include "backends/Elementwise.def"
  void scale(DType dtype, const void *x, void *out, int64_t n,
             double factor) override;
  void biasAdd(DType dtype, const void *x, const void *bias, void *out,
               int64_t rows, int64_t cols) override;
  void maskedFill(DType dtype, const void *x, const void *mask, void *out,
                  int64_t outer, int64_t inner, double value) override;
  void where(DType dtype, const void *mask, const void *x, const void *y,
             void *out, int64_t outer, int64_t inner) override;
  void dropout(DType dtype, const void *x, void *out, int64_t n, uint64_t key,
               uint64_t counterBase, uint32_t threshold, float scale) override;
  void cast(DType dtype, const void *x, void *out, int64_t n,
            int32_t to) override;

  // CpuMatmul.cpp
  void matmul(DType dtype, const void *a, const void *b, void *c, int64_t batch,
              int64_t m, int64_t n, int64_t k, int32_t transA, int32_t transB,
              int64_t strideA, int64_t strideB, int64_t strideC) override;
  void attention(DType dtype, const void *q, const void *k, const void *v,
                 void *out, void *lse, int64_t heads, int64_t groups,
                 int64_t tq, int64_t tk, int64_t d, int32_t causal,
                 double scale) override;
  void attentionGrad(DType dtype, const void *dout, const void *q,
                     const void *k, const void *v, const void *out,
                     const void *lse, void *dq, void *dk, void *dv,
                     int64_t heads, int64_t groups, int64_t tq, int64_t tk,
                     int64_t d, int32_t causal, double scale) override;

  // CpuRows.cpp
  void layerNorm(DType dtype, const void *x, const void *gamma,
                 const void *beta, void *y, int64_t rows, int64_t cols,
                 double eps) override;
  void layerNormGrad(DType dtype, const void *dy, const void *x,
                     const void *gamma, void *dx, void *dgamma, void *dbeta,
                     int64_t rows, int64_t cols, double eps) override;
  void softmax(DType dtype, const void *x, void *y, int64_t rows, int64_t cols,
               int32_t causal) override;
  void softmaxGrad(DType dtype, const void *dy, const void *y, void *dx,
                   int64_t rows, int64_t cols) override;
  void rmsNorm(DType dtype, const void *x, const void *gamma, void *y,
               int64_t rows, int64_t cols, double eps) override;
  void rmsNormGrad(DType dtype, const void *dy, const void *x,
                   const void *gamma, void *dx, void *dgamma, int64_t rows,
                   int64_t cols, double eps) override;
  void rotaryEmbedding(DType dtype, const void *x, void *out, int64_t outer,
                       int64_t seq, int64_t inner, int64_t dim, double theta,
                       double factor, double low, double high, double original,
                       int32_t inverse) override;

  // CpuLayout.cpp
  void transpose(DType dtype, const void *x, void *out, int64_t rank,
                 const void *xShapeArg, const void *permArg) override;
  void reduce(DType dtype, const void *x, void *out, int64_t rank,
              const void *xShape, const void *mask, int32_t kind) override;
  void reduceMaxGrad(DType dtype, const void *dy, const void *x, const void *y,
                     void *dx, int64_t rank, const void *xShape,
                     const void *mask) override;
  void broadcast(DType dtype, const void *x, void *out, int64_t rank,
                 const void *outShapeArg, const void *maskArg,
                 double factor) override;

  // CpuLosses.cpp
  void crossEntropy(DType dtype, const void *logits, const void *labels,
                    void *loss, int64_t rows, int64_t classes,
                    int64_t ignore) override;
  void crossEntropyWithGrad(DType dtype, const void *logits, const void *labels,
                            const void *dloss, void *loss, void *dlogits,
                            int64_t rows, int64_t classes,
                            int64_t ignore) override;
  void crossEntropyGrad(DType dtype, const void *dloss, const void *logits,
                        const void *labels, void *dlogits, int64_t rows,
                        int64_t classes, int64_t ignore) override;
  void embedding(DType dtype, const void *table, const void *ids, void *out,
                 int64_t nIds, int64_t vocab, int64_t dim) override;
  void embeddingGrad(DType dtype, const void *dy, const void *ids, void *dtable,
                     int64_t nIds, int64_t vocab, int64_t dim) override;

  // CpuOptimizer.cpp
  void sgdUpdate(DType dtype, void *param, const void *grad, void *momentumBuf,
                 int64_t n, const SgdHyper &hyper, int64_t step) override;
  void adamUpdate(DType dtype, void *param, const void *grad, void *expAvg,
                  void *expAvgSq, int64_t n, const AdamHyper &hyper,
                  int64_t step) override;
  void sgdUpdateMaster(DType gradType, DType paramType, void *param,
                       const void *grad, float *master, float *momentumBuf,
                       int64_t n, const SgdHyper &hyper, int64_t step) override;
  void adamUpdateMaster(DType gradType, DType paramType, void *param,
                        const void *grad, float *master, float *expAvg,
                        float *expAvgSq, int64_t n, const AdamHyper &hyper,
                        int64_t step) override;
  void foundNonfinite(DType dtype, const void *x, int64_t n,
                      const void *foundIn, void *foundOut) override;
  void gradSqNorm(DType dtype, const void *x, int64_t n, const void *sumIn,
                  void *sumOut) override;

  // CpuCollectives.cpp
  int64_t allReduce(Communicator &comm, DType dtype, const void *in, void *out,
                    int64_t n, bool mean) override;
  int64_t reduceScatter(Communicator &comm, DType dtype, const void *in,
                        void *out, int64_t count, bool mean) override;
  int64_t allGather(Communicator &comm, DType dtype, const void *in, void *out,
                    int64_t count) override;
  int64_t bcast(Communicator &comm, DType dtype, void *buf, int64_t n,
                int root) override;

private:
  // CpuMatmul.cpp
  void sgemm(const float *a, const float *b, float *c, int64_t batch, int64_t m,
             int64_t n, int64_t k, bool transA, bool transB, int64_t strideA,
             int64_t strideB, int64_t strideC);
  template <typename T>
  void matmulT(const T *a, const T *b, T *c, int64_t batch, int64_t m,
               int64_t n, int64_t k, bool transA, bool transB, int64_t strideA,
               int64_t strideB, int64_t strideC);
  void attentionProbs(const float *q, const float *k, float *p, float *lse,
                      int64_t tq, int64_t tk, int64_t d, bool causal,
                      double scale);
  template <typename T>
  void attentionT(const T *q, const T *k, const T *v, T *out, float *lse,
                  int64_t heads, int64_t groups, int64_t tq, int64_t tk,
                  int64_t d, bool causal, double scale);
  template <typename T>
  void attentionGradT(const T *dout, const T *q, const T *k, const T *v, T *dq,
                      T *dk, T *dv, int64_t heads, int64_t groups, int64_t tq,
                      int64_t tk, int64_t d, bool causal, double scale);

  // CpuRows.cpp
  void softmaxF32(const float *x, float *y, int64_t rows, int64_t cols,
                  bool causal, float *lse);

  // CpuCollectives.cpp
  template <typename T>
  void allReduceT(Communicator &comm, const T *in, T *out, int64_t n,
                  bool mean);
  template <typename T>
  void reduceScatterT(Communicator &comm, const T *in, T *out, int64_t count,
                      bool mean);
  template <typename T>
  void allGatherT(Communicator &comm, const T *in, T *out, int64_t count);

  /// f32 elementwise, softmax and optimizer kernels from the AVX-512 build.
  const bool avx512Kernels = avx512::enabled();
};

} // namespace ztrt

#endif // ZTRT_BACKENDS_CPU_CPUBACKENDIMPL_H
