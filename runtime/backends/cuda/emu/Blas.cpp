//===- Blas.cpp - cuBLAS's GEMMs on the host ------------------------------===//
//
// Part of ztrain's CUDA emulator (docs/cuda.md#the-cuda-emulator). What the
// cuda backend calls of cuBLAS (cublasSgemmStridedBatched, and
// cublasGemmStridedBatchedEx for bf16 / f16 operands with float compute:
// the same float accumulation on the widened operands, C rounded once),
// with cuBLAS's documented semantics:
// column-major operands, op(A) m x k, op(B) k x n, C m x n; the argument
// checks that return CUBLAS_STATUS_INVALID_VALUE (negative sizes, leading
// dimensions below the rows they must span); beta == 0 never reads C; and
// the work on the handle's stream. Every matrix of every batch must lie in
// device memory: a leading dimension or stride that reaches outside its
// allocation is what faults on a GPU, and faults here.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/emu/Emu.h"
#include "base/DType.h"

#include <cublas_v2.h>

#include <algorithm>

namespace ztrt::cudaemu {
struct BlasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
};
} // namespace ztrt::cudaemu

using namespace ztrt::cudaemu;

namespace {

/// The extent in elements of a column-major rows x cols matrix with leading
/// dimension ld.
long long extent(int rows, int cols, int ld) {
  if (rows == 0 || cols == 0)
    return 0;
  return static_cast<long long>(cols - 1) * ld + rows;
}

/// Every batch's matrix of `rows` x `cols` (leading dimension ld) elements
/// of `elementBytes` bytes lies in device memory; a fault naming `api`
/// otherwise.
bool checkOperand(const char *api, const char *name, const void *p, int rows,
                  int cols, int ld, long long stride, int batch,
                  size_t elementBytes) {
  const long long n = extent(rows, cols, ld);
  if (n == 0)
    return true;
  for (int i = 0; i < batch; ++i) {
    const char *m =
        static_cast<const char *>(p) + static_cast<long long>(i) * stride *
                                           static_cast<long long>(elementBytes);
    if (!isDevice(m, static_cast<size_t>(n) * elementBytes)) {
      fault("%s: %s of batch %d (%d x %d, ld %d, %lld elements from %s) is "
            "not inside device memory",
            api, name, i, rows, cols, ld, n, describe(m).c_str());
      return false;
    }
  }
  return true;
}

/// The GEMM by its definition, column-major, on the host: each C element's
/// k products accumulated in float in k order from operands widened to
/// float, then alpha * acc (+ beta * C) in float, stored once as TC (T, or
/// float for a float C with bf16 / f16 operands). For float every
/// conversion is the identity.
template <typename T, typename TC = T>
void gemm(bool ta, bool tb, int m, int n, int k, float a, const T *A, int lda,
          long long strideA, const T *B, int ldb, long long strideB, float b,
          TC *C, int ldc, long long strideC, int batchCount) {
  for (int i = 0; i < batchCount; ++i) {
    const T *Ai = A + i * strideA, *Bi = B + i * strideB;
    TC *Ci = C + i * strideC;
    for (int col = 0; col < n; ++col)
      for (int row = 0; row < m; ++row) {
        float acc = 0.0f;
        for (int p = 0; p < k; ++p) {
          const float x = static_cast<float>(
              ta ? Ai[p + static_cast<long long>(row) * lda]
                 : Ai[row + static_cast<long long>(p) * lda]);
          const float y = static_cast<float>(
              tb ? Bi[col + static_cast<long long>(p) * ldb]
                 : Bi[p + static_cast<long long>(col) * ldb]);
          acc += x * y;
        }
        TC &c = Ci[row + static_cast<long long>(col) * ldc];
        c = static_cast<TC>(b == 0.0f ? a * acc
                                      : a * acc + b * static_cast<float>(c));
      }
  }
}

/// cuBLAS's argument checks shared by both GEMM entries ("parameters m, n,
/// k, batchCount < 0 or lda, ldb, ldc too small").
bool validGemm(cublasOperation_t transa, cublasOperation_t transb, int m, int n,
               int k, const void *alpha, int lda, int ldb, const void *beta,
               int ldc, int batchCount) {
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  return !(m < 0 || n < 0 || k < 0 || batchCount < 0 || !alpha || !beta ||
           lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) ||
           ldc < std::max(1, m) || transa > CUBLAS_OP_C ||
           transb > CUBLAS_OP_C);
}

/// Checks the operands of a GEMM whose arguments are valid and enqueues it
/// on the handle's stream.
template <typename T, typename TC = T>
cublasStatus_t
runGemm(const char *api, cublasHandle_t handle, cublasOperation_t transa,
        cublasOperation_t transb, int m, int n, int k, float a, const T *A,
        int lda, long long strideA, const T *B, int ldb, long long strideB,
        float b, TC *C, int ldc, long long strideC, int batchCount) {
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  if (m == 0 || n == 0 || batchCount == 0)
    return CUBLAS_STATUS_SUCCESS;
  if (!checkOperand(api, "A", A, ta ? k : m, ta ? m : k, lda, strideA,
                    batchCount, sizeof(T)) ||
      !checkOperand(api, "B", B, tb ? n : k, tb ? k : n, ldb, strideB,
                    batchCount, sizeof(T)) ||
      !checkOperand(api, "C", C, m, n, ldc, strideC, batchCount, sizeof(TC)))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  enqueue(handle->stream, [=] {
    gemm(ta, tb, m, n, k, a, A, lda, strideA, B, ldb, strideB, b, C, ldc,
         strideC, batchCount);
  });
  return CUBLAS_STATUS_SUCCESS;
}

} // namespace

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  if (!handle)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (sticky())
    return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new BlasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!validStream(stream))
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR:
    return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR:
    return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value) {
  if (!value)
    return CUBLAS_STATUS_INVALID_VALUE;
  *value = type == MAJOR_VERSION ? 13 : 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const float *alpha, const float *A, int lda,
    long long strideA, const float *B, int ldb, long long strideB,
    const float *beta, float *C, int ldc, long long strideC, int batchCount) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (sticky())
    return CUBLAS_STATUS_EXECUTION_FAILED;
  if (!validGemm(transa, transb, m, n, k, alpha, lda, ldb, beta, ldc,
                 batchCount))
    return CUBLAS_STATUS_INVALID_VALUE;
  // CUBLAS_POINTER_MODE_HOST: alpha and beta are read now.
  return runGemm("cublasSgemmStridedBatched", handle, transa, transb, m, n, k,
                 *alpha, A, lda, strideA, B, ldb, strideB, *beta, C, ldc,
                 strideC, batchCount);
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
    int lda, long long strideA, const void *B, cudaDataType Btype, int ldb,
    long long strideB, const void *beta, void *C, cudaDataType Ctype, int ldc,
    long long strideC, int batchCount, cublasComputeType_t computeType,
    cublasGemmAlgo_t algo) {
  const char *api = "cublasGemmStridedBatchedEx";
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (sticky())
    return CUBLAS_STATUS_EXECUTION_FAILED;
  if (!validGemm(transa, transb, m, n, k, alpha, lda, ldb, beta, ldc,
                 batchCount))
    return CUBLAS_STATUS_INVALID_VALUE;
  // cuBLAS supports more combinations; the emulator those the backend uses
  // (and says so rather than compute something else).
  const bool known =
      Atype == CUDA_R_32F || Atype == CUDA_R_16F || Atype == CUDA_R_16BF;
  // A float C with bf16 / f16 operands: train.matmul_acc's accumulator.
  if (!known || Btype != Atype || (Ctype != Atype && Ctype != CUDA_R_32F) ||
      computeType != CUBLAS_COMPUTE_32F || algo != CUBLAS_GEMM_DEFAULT) {
    report("%s: the emulator implements A, B all CUDA_R_32F, CUDA_R_16F "
           "or CUDA_R_16BF, C of their type or CUDA_R_32F, with "
           "CUBLAS_COMPUTE_32F and CUBLAS_GEMM_DEFAULT "
           "(got types %d, %d, %d, compute type %d, algo %d)",
           api, static_cast<int>(Atype), static_cast<int>(Btype),
           static_cast<int>(Ctype), static_cast<int>(computeType),
           static_cast<int>(algo));
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // CUBLAS_COMPUTE_32F: alpha and beta are floats, read now.
  const float a = *static_cast<const float *>(alpha),
              b = *static_cast<const float *>(beta);
  if (Ctype == CUDA_R_32F && Atype != CUDA_R_32F) {
    if (Atype == CUDA_R_16BF)
      return runGemm(api, handle, transa, transb, m, n, k, a,
                     static_cast<const ztrt::bf16 *>(A), lda, strideA,
                     static_cast<const ztrt::bf16 *>(B), ldb, strideB, b,
                     static_cast<float *>(C), ldc, strideC, batchCount);
    return runGemm(api, handle, transa, transb, m, n, k, a,
                   static_cast<const ztrt::f16 *>(A), lda, strideA,
                   static_cast<const ztrt::f16 *>(B), ldb, strideB, b,
                   static_cast<float *>(C), ldc, strideC, batchCount);
  }
  switch (Atype) {
  case CUDA_R_16BF:
    return runGemm(api, handle, transa, transb, m, n, k, a,
                   static_cast<const ztrt::bf16 *>(A), lda, strideA,
                   static_cast<const ztrt::bf16 *>(B), ldb, strideB, b,
                   static_cast<ztrt::bf16 *>(C), ldc, strideC, batchCount);
  case CUDA_R_16F:
    return runGemm(api, handle, transa, transb, m, n, k, a,
                   static_cast<const ztrt::f16 *>(A), lda, strideA,
                   static_cast<const ztrt::f16 *>(B), ldb, strideB, b,
                   static_cast<ztrt::f16 *>(C), ldc, strideC, batchCount);
  default:
    return runGemm(api, handle, transa, transb, m, n, k, a,
                   static_cast<const float *>(A), lda, strideA,
                   static_cast<const float *>(B), ldb, strideB, b,
                   static_cast<float *>(C), ldc, strideC, batchCount);
  }
}
