//===- CpuLosses.cpp - The cpu backend: losses and lookups ----------------===//
//
// Part of ztrain's runtime. The cpu backend's cross-entropy (alone, its
// gradient, and both from one pass) and embedding lookups with their
// gradient. Determinism and precision: CpuBackend.cpp's file comment.
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/CpuBackendImpl.h"

#include "base/Support.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace ztrt {

namespace {

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

/// Checks the labels and returns how many rows count: those not labelled
/// `ignore` (ZTRT_NO_IGNORE_INDEX: every row).
int64_t checkLabels(const char *op, const int32_t *labels, int64_t rows,
                    int64_t classes, int64_t ignore) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (labels[r] == ignore)
      continue;
    ++count;
    if (labels[r] < 0 || labels[r] >= classes)
      fatal("%s: label %d out of range [0, %lld) at row %lld", op, labels[r],
            static_cast<long long>(classes), static_cast<long long>(r));
  }
  return count;
}

void checkIds(const char *op, const int32_t *ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      fatal("%s: id %d out of range [0, %lld) at position %lld", op, ids[i],
            static_cast<long long>(vocab), static_cast<long long>(i));
}

/// One row of cross_entropy_grad from its log-sum-exp:
/// dloss / count * (softmax - onehot), p in double, rounded once; zeros for
/// an ignored row.
template <typename T>
inline void crossEntropyGradRow(const T *xr, T *dr, int64_t classes, double lse,
                                int32_t label, double scale, bool ignored) {
  if (ignored) {
    fillT<T>(dr, classes, 0.0);
    return;
  }
  for (int64_t j = 0; j < classes; ++j) {
    double p = std::exp(ld(xr[j]) - lse);
    dr[j] = st<T>((p - (j == label ? 1.0 : 0.0)) * scale);
  }
}

template <typename T>
inline void crossEntropyGradT(const float *dloss, const T *logits,
                              const int32_t *labels, T *dlogits, int64_t rows,
                              int64_t classes, int64_t ignore) {
  const int64_t count =
      checkLabels("cross_entropy_grad", labels, rows, classes, ignore);
  double scale = static_cast<double>(dloss[0]) / count;
#pragma omp parallel for schedule(static) if (rows * classes >=                \
                                              kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = logits + r * classes;
    T *dr = dlogits + r * classes;
    if (labels[r] == ignore)
      crossEntropyGradRow(xr, dr, classes, 0.0, 0, scale, true);
    else
      crossEntropyGradRow(xr, dr, classes, logSumExp(xr, classes), labels[r],
                          scale, false);
  }
}

/// The mean cross-entropy and, with dlogits (cross_entropy_with_grad,
/// train-fuse-loss), its gradient from the same log-sum-exp per row:
/// crossEntropyGradT's expressions, in its order. A tile (train-tile-loss)
/// is rows [firstRow, firstRow + rows) of labelRows: the divisor counts all
/// of them, the sum only the tile's rows.
template <typename T>
inline void crossEntropyT(const T *logits, const int32_t *labels, float *loss,
                          int64_t rows, int64_t classes, int64_t ignore,
                          const float *dloss, T *dlogits, int64_t firstRow,
                          int64_t labelRows) {
  const int64_t count =
      checkLabels("cross_entropy", labels, labelRows, classes, ignore);
  labels += firstRow;
  std::vector<double> rowLoss(rows);
  const double scale = dlogits ? static_cast<double>(dloss[0]) / count : 0.0;
#pragma omp parallel for schedule(static) if (rows * classes >=                \
                                              kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = logits + r * classes;
    if (labels[r] == ignore) {
      rowLoss[r] = 0.0;
      if (dlogits)
        crossEntropyGradRow(xr, dlogits + r * classes, classes, 0.0, 0, scale,
                            true);
      continue;
    }
    const double lse = logSumExp(xr, classes);
    rowLoss[r] = lse - ld(xr[labels[r]]);
    if (dlogits)
      crossEntropyGradRow(xr, dlogits + r * classes, classes, lse, labels[r],
                          scale, false);
  }
  // Ignored rows add 0.0: the sum of the others, bitwise (adding +0.0 to a
  // double changes no value but -0.0, and a sum of losses >= 0 is not -0.0).
  double sum = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    sum += rowLoss[r];
  loss[0] = static_cast<float>(sum / count);
}

template <typename T>
inline void embeddingGradT(const T *dy, const int32_t *ids, T *dtable,
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

} // namespace

void CpuBackend::crossEntropy(DType dtype, const void *logits,
                              const void *labels, void *loss, int64_t rows,
                              int64_t classes, int64_t ignore) {
  ZTRT_CPU_DISPATCH(dtype, crossEntropyT<T>(as<T>(logits), as<int32_t>(labels),
                                            as<float>(loss), rows, classes,
                                            ignore, nullptr, nullptr, 0, rows));
}

void CpuBackend::crossEntropyWithGrad(DType dtype, const void *logits,
                                      const void *labels, const void *dloss,
                                      void *loss, void *dlogits, int64_t rows,
                                      int64_t classes, int64_t ignore) {
  ZTRT_CPU_DISPATCH(dtype, crossEntropyT<T>(as<T>(logits), as<int32_t>(labels),
                                            as<float>(loss), rows, classes,
                                            ignore, as<float>(dloss),
                                            as<T>(dlogits), 0, rows));
}

void CpuBackend::crossEntropyTile(DType dtype, const void *logits,
                                  const void *labels, void *loss, int64_t rows,
                                  int64_t classes, int64_t ignore,
                                  int64_t firstRow, int64_t labelRows) {
  ZTRT_CPU_DISPATCH(dtype,
                    crossEntropyT<T>(as<T>(logits), as<int32_t>(labels),
                                     as<float>(loss), rows, classes, ignore,
                                     nullptr, nullptr, firstRow, labelRows));
}

void CpuBackend::crossEntropyTileWithGrad(DType dtype, const void *logits,
                                          const void *labels, const void *dloss,
                                          void *loss, void *dlogits,
                                          int64_t rows, int64_t classes,
                                          int64_t ignore, int64_t firstRow,
                                          int64_t labelRows) {
  ZTRT_CPU_DISPATCH(dtype,
                    crossEntropyT<T>(as<T>(logits), as<int32_t>(labels),
                                     as<float>(loss), rows, classes, ignore,
                                     as<float>(dloss), as<T>(dlogits), firstRow,
                                     labelRows));
}

void CpuBackend::crossEntropyGrad(DType dtype, const void *dloss,
                                  const void *logits, const void *labels,
                                  void *dlogits, int64_t rows, int64_t classes,
                                  int64_t ignore) {
  ZTRT_CPU_DISPATCH(dtype,
                    crossEntropyGradT<T>(as<float>(dloss), as<T>(logits),
                                         as<int32_t>(labels), as<T>(dlogits),
                                         rows, classes, ignore));
}

void CpuBackend::embedding(DType dtype, const void *table, const void *ids,
                           void *out, int64_t nIds, int64_t vocab,
                           int64_t dim) {
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

void CpuBackend::embeddingGrad(DType dtype, const void *dy, const void *ids,
                               void *dtable, int64_t nIds, int64_t vocab,
                               int64_t dim) {
  ZTRT_CPU_DISPATCH(dtype, embeddingGradT<T>(as<T>(dy), as<int32_t>(ids),
                                             as<T>(dtable), nIds, vocab,
                                             dim));
}

} // namespace ztrt
