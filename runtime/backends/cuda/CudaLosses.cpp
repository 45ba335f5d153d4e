//===- CudaLosses.cpp - The cuda backend: losses and lookups --------------===//
//
// Part of ztrain's runtime. The cuda backend's cross-entropy (alone, its
// gradient, and both from one pass) and embedding lookups with their
// gradient: the kernels that check their labels and ids, each given an
// error slot (CudaBackend.cpp reports them).
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/CudaBackendImpl.h"

#include "base/Support.h"

#include <cstdint>

namespace ztrt {


// The loss and dloss are one float whatever the dtype; labels and ids
// int32.
void CudaBackend::crossEntropy(DType dtype, const void *logits,
                               const void *labels, void *loss, int64_t rows,
                               int64_t classes, int64_t ignore) {
  checkRows("cross_entropy", rows);
  cuda::ErrorSlot *error = slot("cross_entropy", true, classes);
  ZTRT_CUDA_DISPATCH(dtype,
                     cuda::crossEntropy(as<T>(logits), as<int32_t>(labels),
                                        as<float>(loss), rows, classes, ignore,
                                        error, compute, 0, rows));
}
void CudaBackend::crossEntropyTile(DType dtype, const void *logits,
                                   const void *labels, void *loss, int64_t rows,
                                   int64_t classes, int64_t ignore,
                                   int64_t firstRow, int64_t labelRows) {
  checkRows("cross_entropy_tile", labelRows);
  cuda::ErrorSlot *error = slot("cross_entropy_tile", true, classes);
  ZTRT_CUDA_DISPATCH(dtype,
                     cuda::crossEntropy(as<T>(logits), as<int32_t>(labels),
                                        as<float>(loss), rows, classes, ignore,
                                        error, compute, firstRow, labelRows));
}
void CudaBackend::crossEntropyTileWithGrad(
    DType dtype, const void *logits, const void *labels, const void *dloss,
    void *loss, void *dlogits, int64_t rows, int64_t classes, int64_t ignore,
    int64_t firstRow, int64_t labelRows) {
  checkRows("cross_entropy_tile", labelRows);
  cuda::ErrorSlot *error = slot("cross_entropy_tile", true, classes);
  ZTRT_CUDA_DISPATCH(
      dtype, cuda::crossEntropyWithGrad(as<T>(logits), as<int32_t>(labels),
                                        as<float>(dloss), as<float>(loss),
                                        as<T>(dlogits), rows, classes, ignore,
                                        error, compute, firstRow, labelRows));
}
void CudaBackend::crossEntropyWithGrad(DType dtype, const void *logits,
                                       const void *labels, const void *dloss,
                                       void *loss, void *dlogits, int64_t rows,
                                       int64_t classes, int64_t ignore) {
  checkRows("cross_entropy", rows);
  cuda::ErrorSlot *error = slot("cross_entropy", true, classes);
  ZTRT_CUDA_DISPATCH(
      dtype, cuda::crossEntropyWithGrad(as<T>(logits), as<int32_t>(labels),
                                        as<float>(dloss), as<float>(loss),
                                        as<T>(dlogits), rows, classes, ignore,
                                        error, compute, 0, rows));
}
void CudaBackend::crossEntropyGrad(DType dtype, const void *dloss,
                                   const void *logits, const void *labels,
                                   void *dlogits, int64_t rows, int64_t classes,
                                   int64_t ignore) {
  checkRows("cross_entropy_grad", rows);
  cuda::ErrorSlot *error = slot("cross_entropy_grad", true, classes);
  ZTRT_CUDA_DISPATCH(
      dtype, cuda::crossEntropyGrad(as<float>(dloss), as<T>(logits),
                                    as<int32_t>(labels), as<T>(dlogits), rows,
                                    classes, ignore, error, compute));
}
void CudaBackend::embedding(DType dtype, const void *table, const void *ids,
                            void *out, int64_t nIds, int64_t vocab,
                            int64_t dim) {
  checkRows("embedding", nIds);
  cuda::ErrorSlot *error = slot("embedding", false, vocab);
  ZTRT_CUDA_DISPATCH(dtype, cuda::embedding(as<T>(table), as<int32_t>(ids),
                                            as<T>(out), nIds, vocab, dim,
                                            error, compute));
}
void CudaBackend::embeddingGrad(DType dtype, const void *dy, const void *ids,
                                void *dtable, int64_t nIds, int64_t vocab,
                                int64_t dim) {
  checkRows("embedding_grad", nIds);
  cuda::ErrorSlot *error = slot("embedding_grad", false, vocab);
  ZTRT_CUDA_DISPATCH(dtype, cuda::embeddingGrad(as<T>(dy), as<int32_t>(ids),
                                                as<T>(dtable), nIds, vocab,
                                                dim, error, compute));
}

void CudaBackend::checkRows(const char *op, int64_t rows) {
  // Error slots hold the row in 32 bits.
  if (rows > INT32_MAX)
    fatal("%s: %lld rows exceed the cuda backend's limit of %d", op,
          static_cast<long long>(rows), INT32_MAX);
}

} // namespace ztrt
