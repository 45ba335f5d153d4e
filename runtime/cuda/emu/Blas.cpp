//===- Blas.cpp - cuBLAS's SGEMM on the host
//--------------------------------===//
//
// Part of ztrain's CUDA emulator (docs/cuda.md#the-cuda-emulator). What the
// cuda backend calls of cuBLAS, with cuBLAS's documented semantics:
// column-major operands, op(A) m x k, op(B) k x n, C m x n; the argument
// checks that return CUBLAS_STATUS_INVALID_VALUE (negative sizes, leading
// dimensions below the rows they must span); beta == 0 never reads C; and
// the work on the handle's stream. Every matrix of every batch must lie in
// device memory: a leading dimension or stride that reaches outside its
// allocation is what faults on a GPU, and faults here.
//
//===----------------------------------------------------------------------===//

#include "cuda/emu/Emu.h"

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

bool checkOperand(const char *name, const float *p, int rows, int cols, int ld,
                  long long stride, int batch) {
  const long long n = extent(rows, cols, ld);
  if (n == 0)
    return true;
  for (int i = 0; i < batch; ++i) {
    const float *m = p + static_cast<long long>(i) * stride;
    if (!isDevice(m, static_cast<size_t>(n) * sizeof(float))) {
      fault("cublasSgemmStridedBatched: %s of batch %d (%d x %d, ld %d, "
            "%lld elements from %s) is not inside device memory",
            name, i, rows, cols, ld, n, describe(m).c_str());
      return false;
    }
  }
  return true;
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
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  // cuBLAS's checks (cublasSgemmStridedBatched: "parameters m, n, k,
  // batchCount < 0 or lda, ldb, ldc too small").
  if (m < 0 || n < 0 || k < 0 || batchCount < 0 || !alpha || !beta ||
      lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) ||
      ldc < std::max(1, m) || transa > CUBLAS_OP_C || transb > CUBLAS_OP_C)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batchCount == 0)
    return CUBLAS_STATUS_SUCCESS;
  const float a = *alpha, b = *beta; // CUBLAS_POINTER_MODE_HOST: read now.
  if (!checkOperand("A", A, ta ? k : m, ta ? m : k, lda, strideA, batchCount) ||
      !checkOperand("B", B, tb ? n : k, tb ? k : n, ldb, strideB, batchCount) ||
      !checkOperand("C", C, m, n, ldc, strideC, batchCount))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  enqueue(handle->stream, [=] {
    for (int i = 0; i < batchCount; ++i) {
      const float *Ai = A + i * strideA, *Bi = B + i * strideB;
      float *Ci = C + i * strideC;
      for (int col = 0; col < n; ++col)
        for (int row = 0; row < m; ++row) {
          float acc = 0.0f;
          for (int p = 0; p < k; ++p) {
            const float x = ta ? Ai[p + static_cast<long long>(row) * lda]
                               : Ai[row + static_cast<long long>(p) * lda];
            const float y = tb ? Bi[col + static_cast<long long>(p) * ldb]
                               : Bi[p + static_cast<long long>(col) * ldb];
            acc += x * y;
          }
          float &c = Ci[row + static_cast<long long>(col) * ldc];
          c = b == 0.0f ? a * acc : a * acc + b * c;
        }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}
