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

  // The kernels: one override per ZTRT_KERNEL entry of ztrt_abi.def,
  // generated as Backend.h declares them. Defined by family in
  // CpuElementwise.cpp (fill, the Elementwise.def table, scale, biasAdd,
  // maskedFill, where, cast), CpuRows.cpp (layer/RMS norm, softmax, RoPE),
  // CpuMatmul.cpp (matmul, attention), CpuLayout.cpp (transpose, reduce,
  // broadcast), CpuLosses.cpp (cross-entropy, embedding) and
  // CpuOptimizer.cpp (foundNonfinite, gradSqNorm).
#define ZTRT_FN(...)
#define ZTRT_KERNEL(name, method, names, ...)                                  \
  void method(DType dtype, ZTRT_ARGS(__VA_ARGS__)) override;
#include "ztrt_abi.def"
#undef ZTRT_KERNEL
#undef ZTRT_FN

  // CpuElementwise.cpp
  void dropout(DType dtype, const void *x, void *out, int64_t n, uint64_t key,
               uint64_t counterBase, uint32_t threshold, float scale) override;
  void runFused(ztrt_fused_fn fn, ztrt_fused_fn wide, void *const *args,
                int64_t items, int64_t itemElements) override;

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
  /// c = op(a) op(b) for each of `batch` problems; with `beta` 1, c +=.
  void sgemm(const float *a, const float *b, float *c, int64_t batch, int64_t m,
             int64_t n, int64_t k, bool transA, bool transB, int64_t strideA,
             int64_t strideB, int64_t strideC, float beta = 0.0f);
  template <typename T>
  void matmulAccWidened(const T *a, const T *b, float *c, int64_t m, int64_t n,
                        int64_t k, bool transA, bool transB);
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

  /// f32 elementwise, softmax and optimizer kernels from the AVX-512 build,
  /// and the AVX-512 builds of the compiler's fused kernels.
  const bool avx512Kernels = avx512::enabled();
};

} // namespace ztrt

#endif // ZTRT_BACKENDS_CPU_CPUBACKENDIMPL_H
