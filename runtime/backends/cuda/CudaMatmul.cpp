//===- CudaMatmul.cpp - The cuda backend: matmul and attention ------------===//
//
// Part of ztrain's runtime. The cuda backend's GEMMs (cuBLAS) and fused
// attention: the tiled tensor-core kernels of Attention*.cu for bf16 / f16,
// else the composed form's kernels over groups of heads.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/CudaBackendImpl.h"

#include "base/Support.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

namespace ztrt {


// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
// gets B first, with the row-major leading dimensions unchanged (a
// row-major matrix is its transpose in column-major order). float:
// cublasSgemmStridedBatched; bf16 / f16: cublasGemmStridedBatchedEx with
// the operands and C in the dtype and CUBLAS_COMPUTE_32F (products and
// sums in float, C rounded once to the dtype).
void CudaBackend::matmul(DType dtype, const void *a, const void *b, void *c,
                         int64_t batch, int64_t m, int64_t n, int64_t k,
                         int32_t transA, int32_t transB, int64_t strideA,
                         int64_t strideB, int64_t strideC) {
  if (batch == 0 || m == 0 || n == 0)
    return;
  if (k == 0) {
    // An empty sum; cuBLAS, like BLAS, need not touch C when k == 0.
    const int64_t elem = elementBytes(dtype);
    if (strideC == m * n)
      fill(dtype, c, batch * m * n, 0.0);
    else
      for (int64_t i = 0; i < batch; ++i)
        fill(dtype, static_cast<char *>(c) + i * strideC * elem, m * n, 0.0);
    return;
  }
  const int64_t lda = transA ? m : k, ldb = transB ? k : n;
  // As on the cpu: a shared B with packed, untransposed A_i and packed
  // C_i is one (batch * m) x k GEMM.
  if (batch > 1 && strideB == 0 && !transA && strideA == m * k &&
      strideC == m * n) {
    m *= batch;
    batch = 1;
  }
  if (std::max({m, n, k, lda, ldb, batch}) > INT_MAX)
    fatal("matmul: %lld x %lld x %lld (batch %lld) is too large for "
          "cuBLAS",
          static_cast<long long>(m), static_cast<long long>(n),
          static_cast<long long>(k), static_cast<long long>(batch));
  const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float one = 1.0f, zero = 0.0f;
  if (dtype == DType::F32) {
    checkBlas(cuda::cublas().sgemmStridedBatched(
                  handle, opB, opA, static_cast<int>(n), static_cast<int>(m),
                  static_cast<int>(k), &one, as<float>(b),
                  static_cast<int>(ldb), strideB, as<float>(a),
                  static_cast<int>(lda), strideA, &zero, as<float>(c),
                  static_cast<int>(n), strideC, static_cast<int>(batch)),
              "cublasSgemmStridedBatched");
    return;
  }
  const cudaDataType type = dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  // CUBLAS_COMPUTE_32F: alpha and beta are floats.
  checkBlas(cuda::cublas().gemmStridedBatchedEx(
                handle, opB, opA, static_cast<int>(n), static_cast<int>(m),
                static_cast<int>(k), &one, b, type, static_cast<int>(ldb),
                strideB, a, type, static_cast<int>(lda), strideA, &zero, c,
                type, static_cast<int>(n), strideC, static_cast<int>(batch),
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx");
}

// c = c_in + op(a) op(b): c_in copied into c unless c is c_in, then one
// GEMM with beta = 1 and C float: cublasSgemmStridedBatched for f32,
// cublasGemmStridedBatchedEx with bf16 / f16 operands, a CUDA_R_32F C and
// CUBLAS_COMPUTE_32F otherwise (the same row-major-as-column-major swap as
// matmul).
void CudaBackend::matmulAcc(DType dtype, const void *a, const void *b,
                            const void *cIn, void *c, int64_t m, int64_t n,
                            int64_t k, int32_t transA, int32_t transB) {
  if (c != cIn)
    copy(cIn, c, m * n * 4);
  if (m == 0 || n == 0 || k == 0)
    return;
  const int64_t lda = transA ? m : k, ldb = transB ? k : n;
  if (std::max({m, n, k, lda, ldb}) > INT_MAX)
    fatal("matmul_acc: %lld x %lld x %lld is too large for cuBLAS",
          static_cast<long long>(m), static_cast<long long>(n),
          static_cast<long long>(k));
  const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float one = 1.0f;
  if (dtype == DType::F32) {
    checkBlas(cuda::cublas().sgemmStridedBatched(
                  handle, opB, opA, static_cast<int>(n), static_cast<int>(m),
                  static_cast<int>(k), &one, as<float>(b),
                  static_cast<int>(ldb), k * n, as<float>(a),
                  static_cast<int>(lda), m * k, &one, as<float>(c),
                  static_cast<int>(n), m * n, 1),
              "cublasSgemmStridedBatched");
    return;
  }
  const cudaDataType type = dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  checkBlas(cuda::cublas().gemmStridedBatchedEx(
                handle, opB, opA, static_cast<int>(n), static_cast<int>(m),
                static_cast<int>(k), &one, b, type, static_cast<int>(ldb),
                k * n, a, type, static_cast<int>(lda), m * k, &one, c,
                CUDA_R_32F, static_cast<int>(n), m * n, 1, CUBLAS_COMPUTE_32F,
                CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx");
}

// Fused attention: the composed form's kernels (float GEMMs, scale,
// softmax, softmax gradient) over groups of heads whose [tq, tk] float
// scores fit options.attentionScratchElements, so no heads x tq x tk
// tensor outlives the op; bf16 / f16 operands are widened to float
// scratch and the results rounded once. A correct baseline with the cpu
// backend's numerics (the conformance suite), not a fast one: a tiled
// tensor-core kernel (FlashAttention) is the next step (docs/cuda.md).

/// Heads per group: at least 1, at most `heads`.
int64_t CudaBackend::attentionGroup(int64_t heads, int64_t tq,
                                    int64_t tk) const {
  return std::max<int64_t>(
      1, std::min<int64_t>(heads,
                           options.attentionScratchElements / (tq * tk)));
}

/// Grouped-query: the key / value heads of query heads [h, h + g) in
/// float, one per query head (head i reads (h + i) / kvGroups), into
/// `scratch` (g x n floats).
const float *CudaBackend::repeatedHeadFloats(DType dtype, const void *x,
                                             int64_t h, int64_t g,
                                             int64_t kvGroups, int64_t n,
                                             float *scratch) {
  const int64_t elem = elementBytes(dtype);
  for (int64_t i = 0; i < g; ++i) {
    const void *src = offset(x, (h + i) / kvGroups * n * elem);
    if (dtype == DType::F32)
      check(cudaMemcpyAsync(scratch + i * n, src,
                            static_cast<size_t>(n * 4),
                            cudaMemcpyDeviceToDevice, compute),
            "cudaMemcpyAsync (attention key / value heads)");
    else
      cast(dtype, src, scratch + i * n, n, static_cast<int32_t>(DType::F32));
  }
  return scratch;
}

const void *CudaBackend::offset(const void *p, int64_t bytes) {
  return static_cast<const char *>(p) + bytes;
}
void *CudaBackend::offset(void *p, int64_t bytes) {
  return static_cast<char *>(p) + bytes;
}

/// `n` elements of dtype at `x` as floats: `x` itself for f32, else
/// widened into `scratch` (n floats).
const float *CudaBackend::floatsOf(DType dtype, const void *x, int64_t n,
                                   float *scratch) {
  if (dtype == DType::F32)
    return as<float>(x);
  cast(dtype, x, scratch, n, static_cast<int32_t>(DType::F32));
  return scratch;
}
/// Where a float result for `x` goes: `x` for f32, else `scratch`, then
/// rounded into `x` by storeFloats.
float *CudaBackend::floatResult(DType dtype, void *x, float *scratch) {
  return dtype == DType::F32 ? as<float>(x) : scratch;
}
void CudaBackend::storeFloats(DType dtype, const float *from, void *x,
                              int64_t n) {
  if (dtype != DType::F32)
    cast(DType::F32, from, x, n, static_cast<int32_t>(dtype));
}

void CudaBackend::attention(DType dtype, const void *q, const void *k,
                            const void *v, void *out, void *lse, int64_t heads,
                            int64_t kvGroups, int64_t tq, int64_t tk, int64_t d,
                            int32_t causal, double scaleFactor) {
  // bf16 / f16 with a head dim the tiled kernel has: the tensor cores.
  bool tiled = false;
  ZTRT_CUDA_DISPATCH(dtype, if constexpr (!std::is_same_v<T, float>) {
    tiled = cuda::attentionForward(
        as<T>(q), as<T>(k), as<T>(v), as<T>(out), as<float>(lse), heads,
        kvGroups, tq, tk, d, causal != 0, static_cast<float>(scaleFactor),
        compute);
  });
  if (tiled)
    return;
  const int64_t group = attentionGroup(heads, tq, tk);
  const int64_t qn = tq * d, kn = tk * d, pn = tq * tk,
                elem = elementBytes(dtype);
  // Widened operands; grouped-query: the shared key / value heads
  // repeated, one per query head of the group.
  const bool wide = dtype != DType::F32 || kvGroups > 1;
  float *p = static_cast<float *>(
      cuda::scratch(group * pn * 4, compute, "attention"));
  float *w = wide ? static_cast<float *>(cuda::scratch(
                        group * (2 * qn + 2 * kn) * 4, compute, "attention"))
                  : nullptr;
  for (int64_t h = 0; h < heads; h += group) {
    const int64_t g = std::min(group, heads - h);
    const float *fq = floatsOf(dtype, offset(q, h * qn * elem), g * qn, w),
                *fk = kvGroups > 1
                          ? repeatedHeadFloats(dtype, k, h, g, kvGroups, kn,
                                               w + group * qn)
                          : floatsOf(dtype, offset(k, h * kn * elem), g * kn,
                                     w + group * qn),
                *fv = kvGroups > 1
                          ? repeatedHeadFloats(dtype, v, h, g, kvGroups, kn,
                                               w + group * (qn + kn))
                          : floatsOf(dtype, offset(v, h * kn * elem), g * kn,
                                     w + group * (qn + kn));
    void *o = offset(out, h * qn * elem);
    float *fo = dtype == DType::F32 ? as<float>(o)
                                    : w + group * (qn + 2 * kn);
    matmul(DType::F32, fq, fk, p, g, tq, tk, d, 0, 1, qn, kn, pn);
    scale(DType::F32, p, p, g * pn, scaleFactor);
    cuda::softmax<float>(p, p, g * tq, tk, causal != 0, compute,
                         as<float>(lse) + h * tq);
    matmul(DType::F32, p, fv, fo, g, tq, d, tk, 0, 0, pn, kn, qn);
    storeFloats(dtype, fo, o, g * qn);
  }
  cuda::release(p, compute);
  if (w)
    cuda::release(w, compute);
}

void CudaBackend::attentionGrad(DType dtype, const void *dout, const void *q,
                                const void *k, const void *v, const void *out,
                                const void *lse, void *dq, void *dk, void *dv,
                                int64_t heads, int64_t kvGroups, int64_t tq,
                                int64_t tk, int64_t d, int32_t causal,
                                double scaleFactor) {
  bool tiled = false;
  ZTRT_CUDA_DISPATCH(dtype, if constexpr (!std::is_same_v<T, float>) {
    tiled = cuda::attentionBackward(
        as<T>(dout), as<T>(q), as<T>(k), as<T>(v), as<T>(out),
        as<float>(lse), as<T>(dq), as<T>(dk), as<T>(dv), heads, kvGroups,
        tq, tk, d, causal != 0, static_cast<float>(scaleFactor), compute);
  });
  if (tiled)
    return;
  // The composed kernels (which read neither out nor lse). Grouped-query:
  // the key / value heads repeated per query head as in the forward, each
  // query head's dk and dv in float scratch, added in head order into a
  // float accumulator per shared head (dk and dv themselves in f32, else
  // `sums`, rounded once at the end): K and V's size, not the scores'.
  const int64_t group = attentionGroup(heads, tq, tk);
  const int64_t qn = tq * d, kn = tk * d, pn = tq * tk,
                elem = elementBytes(dtype);
  const bool grouped = kvGroups > 1;
  const bool wide = dtype != DType::F32 || grouped;
  const int64_t kvHeads = heads / kvGroups;
  float *p = static_cast<float *>(
      cuda::scratch(2 * group * pn * 4, compute, "attention_grad"));
  float *dp = p + group * pn;
  // Widened q, dout, k, v and the float dq, dk, dv.
  float *w = wide ? static_cast<float *>(cuda::scratch(
                        group * (4 * qn + 4 * kn) * 4, compute,
                        "attention_grad"))
                  : nullptr;
  float *sums = grouped && dtype != DType::F32
                    ? static_cast<float *>(cuda::scratch(
                          2 * kvHeads * kn * 4, compute, "attention_grad"))
                    : nullptr;
  float *accK = dtype == DType::F32 ? as<float>(dk) : sums,
        *accV = dtype == DType::F32 ? as<float>(dv) : sums + kvHeads * kn;
  if (grouped)
    for (float *acc : {accK, accV})
      check(cudaMemsetAsync(acc, 0, static_cast<size_t>(kvHeads * kn * 4),
                            compute),
            "cudaMemsetAsync (attention_grad dk / dv)");
  for (int64_t h = 0; h < heads; h += group) {
    const int64_t g = std::min(group, heads - h);
    const float *fq = floatsOf(dtype, offset(q, h * qn * elem), g * qn, w),
                *fdo = floatsOf(dtype, offset(dout, h * qn * elem), g * qn,
                                w + group * qn),
                *fk = grouped ? repeatedHeadFloats(dtype, k, h, g, kvGroups,
                                                   kn, w + group * 2 * qn)
                              : floatsOf(dtype, offset(k, h * kn * elem),
                                         g * kn, w + group * 2 * qn),
                *fv = grouped ? repeatedHeadFloats(dtype, v, h, g, kvGroups,
                                                   kn,
                                                   w + group * (2 * qn + kn))
                              : floatsOf(dtype, offset(v, h * kn * elem),
                                         g * kn, w + group * (2 * qn + kn));
    void *oq = offset(dq, h * qn * elem),
         *ok = grouped ? nullptr : offset(dk, h * kn * elem),
         *ov = grouped ? nullptr : offset(dv, h * kn * elem);
    float *fdq = dtype == DType::F32 ? as<float>(oq)
                                     : w + group * (2 * qn + 2 * kn),
          *fdk = grouped || dtype != DType::F32
                     ? w + group * (3 * qn + 2 * kn)
                     : as<float>(ok),
          *fdv = grouped || dtype != DType::F32
                     ? w + group * (3 * qn + 3 * kn)
                     : as<float>(ov);
    matmul(DType::F32, fq, fk, p, g, tq, tk, d, 0, 1, qn, kn, pn);
    scale(DType::F32, p, p, g * pn, scaleFactor);
    cuda::softmax<float>(p, p, g * tq, tk, causal != 0, compute);
    // The composed form's adjoints (as the cpu backend's attentionGrad).
    matmul(DType::F32, fdo, fv, dp, g, tq, tk, d, 0, 1, qn, kn, pn);
    matmul(DType::F32, p, fdo, fdv, g, tk, d, tq, 1, 0, pn, qn, kn);
    softmaxGrad(DType::F32, dp, p, dp, g * tq, tk);
    scale(DType::F32, dp, dp, g * pn, scaleFactor);
    matmul(DType::F32, dp, fk, fdq, g, tq, d, tk, 0, 0, pn, kn, qn);
    matmul(DType::F32, dp, fq, fdk, g, tk, d, tq, 1, 0, pn, qn, kn);
    storeFloats(dtype, fdq, oq, g * qn);
    if (grouped) {
      for (int64_t i = 0; i < g; ++i) {
        const int64_t at = (h + i) / kvGroups * kn;
        add(DType::F32, accK + at, fdk + i * kn, accK + at, kn);
        add(DType::F32, accV + at, fdv + i * kn, accV + at, kn);
      }
      continue;
    }
    storeFloats(dtype, fdk, ok, g * kn);
    storeFloats(dtype, fdv, ov, g * kn);
  }
  cuda::release(p, compute);
  if (w)
    cuda::release(w, compute);
  if (sums) {
    storeFloats(dtype, accK, dk, kvHeads * kn);
    storeFloats(dtype, accV, dv, kvHeads * kn);
    cuda::release(sums, compute);
  }
}

} // namespace ztrt
