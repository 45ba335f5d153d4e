//===- CpuMatmul.cpp - The cpu backend: matmul and attention --------------===//
//
// Part of ztrain's runtime. The cpu backend's GEMMs (OpenBLAS's sgemm;
// bf16 through oneDNN where it is enabled, else widened to f32) and fused
// attention built from them, head by head. Determinism and precision:
// CpuBackend.cpp's file comment.
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/CpuBackendImpl.h"

#include "backends/cpu/OneDnnGemm.h"
#include "base/Support.h"

#include <algorithm>
#include <cblas.h>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace ztrt {

namespace {

/// n elements of T widened into a float buffer.
template <typename T> std::vector<float> widen(const T *x, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i)
    out[i] = ld(x[i]);
  return out;
}

/// One head's operand as floats: the head itself for float, else
/// widened into `buf`.
template <typename T>
inline const float *headFloats(const T *x, int64_t n, std::vector<float> &buf) {
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
template <typename T>
inline float *headResult(T *x, int64_t n, std::vector<float> &buf) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    buf.resize(static_cast<size_t>(n));
    return buf.data();
  }
}
template <typename T>
inline void storeHead(const float *from, T *to, int64_t n) {
  if constexpr (!std::is_same_v<T, float>) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      to[i] = st<T>(from[i]);
  }
}

} // namespace

void CpuBackend::matmul(DType dtype, const void *a, const void *b, void *c,
                        int64_t batch, int64_t m, int64_t n, int64_t k,
                        int32_t transA, int32_t transB, int64_t strideA,
                        int64_t strideB, int64_t strideC) {
  ZTRT_CPU_DISPATCH(dtype, matmulT<T>(as<T>(a), as<T>(b), as<T>(c), batch,
                                      m, n, k, transA != 0, transB != 0,
                                      strideA, strideB, strideC));
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
void CpuBackend::attention(DType dtype, const void *q, const void *k,
                           const void *v, void *out, void *lse, int64_t heads,
                           int64_t groups, int64_t tq, int64_t tk, int64_t d,
                           int32_t causal, double scale) {
  ZTRT_CPU_DISPATCH(dtype, attentionT<T>(as<T>(q), as<T>(k), as<T>(v),
                                         as<T>(out), as<float>(lse), heads,
                                         groups, tq, tk, d, causal != 0,
                                         scale));
}

void CpuBackend::attentionGrad(DType dtype, const void *dout, const void *q,
                               const void *k, const void *v, const void *out,
                               const void *lse, void *dq, void *dk, void *dv,
                               int64_t heads, int64_t groups, int64_t tq,
                               int64_t tk, int64_t d, int32_t causal,
                               double scale) {
  (void)out;
  (void)lse;
  ZTRT_CPU_DISPATCH(dtype,
                    attentionGradT<T>(as<T>(dout), as<T>(q), as<T>(k),
                                      as<T>(v), as<T>(dq), as<T>(dk),
                                      as<T>(dv), heads, groups, tq, tk, d,
                                      causal != 0, scale));
}

/// The f32 GEMM: OpenBLAS's sgemm.
void CpuBackend::sgemm(const float *a, const float *b, float *c, int64_t batch,
                       int64_t m, int64_t n, int64_t k, bool transA,
                       bool transB, int64_t strideA, int64_t strideB,
                       int64_t strideC, float beta) {
  if (batch == 0 || m == 0 || n == 0 || (k == 0 && beta == 1.0f))
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
                static_cast<int>(n), static_cast<int>(k), 1.0f, a + i * strideA,
                static_cast<int>(lda), b + i * strideB, static_cast<int>(ldb),
                beta, c + i * strideC, static_cast<int>(ldc));
}

/// bf16 / f16: the operands widened to float, the f32 GEMM (float
/// accumulation), the product rounded once.
template <typename T>
void CpuBackend::matmulT(const T *a, const T *b, T *c, int64_t batch, int64_t m,
                         int64_t n, int64_t k, bool transA, bool transB,
                         int64_t strideA, int64_t strideB, int64_t strideC) {
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

// c = c_in + op(a) op(b) in float: c_in copied into c unless c is c_in,
// then the GEMM adds its product to c (beta = 1): sgemm for f32; bf16
// through oneDNN's sum post-op where it is enabled; otherwise (bf16, f16)
// the operands widened to float and sgemm.
void CpuBackend::matmulAcc(DType dtype, const void *a, const void *b,
                           const void *cIn, void *c, int64_t m, int64_t n,
                           int64_t k, int32_t transA, int32_t transB) {
  float *out = as<float>(c);
  if (c != cIn)
    copy(cIn, c, m * n * 4);
  if (m == 0 || n == 0 || k == 0)
    return;
  if (dtype == DType::F32) {
    sgemm(as<float>(a), as<float>(b), out, 1, m, n, k, transA != 0, transB != 0,
          0, 0, 0, 1.0f);
    return;
  }
  if (dtype == DType::BF16 && onednn::bf16GemmEnabled()) {
    onednn::bf16MatmulAcc(as<bf16>(a), as<bf16>(b), out, m, n, k, transA != 0,
                          transB != 0);
    return;
  }
  ZTRT_CPU_DISPATCH(dtype, matmulAccWidened<T>(as<T>(a), as<T>(b), out, m, n, k,
                                               transA != 0, transB != 0));
}

/// matmulAcc's operands widened to float, then sgemm adding to c.
template <typename T>
void CpuBackend::matmulAccWidened(const T *a, const T *b, float *c, int64_t m,
                                  int64_t n, int64_t k, bool transA,
                                  bool transB) {
  std::vector<float> wa = widen(a, m * k), wb = widen(b, k * n);
  sgemm(wa.data(), wb.data(), c, 1, m, n, k, transA, transB, 0, 0, 0, 1.0f);
}

/// p = softmax(scale * q k^T) of one head, in the composed form's steps,
/// and the rows' log-sum-exps when `lse` is given.
void CpuBackend::attentionProbs(const float *q, const float *k, float *p,
                                float *lse, int64_t tq, int64_t tk, int64_t d,
                                bool causal, double scale) {
  sgemm(q, k, p, 1, tq, tk, d, false, true, 0, 0, 0);
  this->scale(DType::F32, p, p, tq * tk, scale);
  softmaxF32(p, p, tq, tk, causal, lse);
}

template <typename T>
void CpuBackend::attentionT(const T *q, const T *k, const T *v, T *out,
                            float *lse, int64_t heads, int64_t groups,
                            int64_t tq, int64_t tk, int64_t d, bool causal,
                            double scale) {
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
void CpuBackend::attentionGradT(const T *dout, const T *q, const T *k,
                                const T *v, T *dq, T *dk, T *dv, int64_t heads,
                                int64_t groups, int64_t tq, int64_t tk,
                                int64_t d, bool causal, double scale) {
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

} // namespace ztrt
