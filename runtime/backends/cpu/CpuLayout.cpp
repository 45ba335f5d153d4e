//===- CpuLayout.cpp - The cpu backend: transpose, reduce, broadcast ------===//
//
// Part of ztrain's runtime. The cpu backend's layout kernels: transpose and
// broadcast (gathers of whole rows), reduce (sum, mean, max, serially in
// input order) and reduce_max_grad. Determinism and precision:
// CpuBackend.cpp's file comment.
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/CpuBackendImpl.h"

#include <cstdint>
#include <limits>
#include <vector>

namespace ztrt {

namespace {

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
inline void forEachReduced(int64_t rank, const int64_t *xShape,
                           const ReduceShape &shape, F f) {
  RowWalker walk(rank, xShape, shape.outStrides);
  for (int64_t row = 0; row < walk.rows; ++row) {
    int64_t o = walk.offset(row);
    for (int64_t j = 0; j < walk.inner; ++j)
      f(row * walk.inner + j, o + j * walk.innerStride);
  }
}

template <typename T>
inline void reduceT(const T *x, T *out, int64_t rank, const int64_t *xShape,
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
inline void reduceMaxGradT(const T *dy, const T *x, const T *y, T *dx,
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

} // namespace

void CpuBackend::transpose(DType dtype, const void *x, void *out, int64_t rank,
                           const void *xShapeArg, const void *permArg) {
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

void CpuBackend::reduce(DType dtype, const void *x, void *out, int64_t rank,
                        const void *xShape, const void *mask, int32_t kind) {
  ZTRT_CPU_DISPATCH(dtype, reduceT<T>(as<T>(x), as<T>(out), rank,
                                      as<int64_t>(xShape), as<int64_t>(mask),
                                      kind));
}

void CpuBackend::reduceMaxGrad(DType dtype, const void *dy, const void *x,
                               const void *y, void *dx, int64_t rank,
                               const void *xShape, const void *mask) {
  ZTRT_CPU_DISPATCH(dtype, reduceMaxGradT<T>(as<T>(dy), as<T>(x), as<T>(y),
                                             as<T>(dx), rank,
                                             as<int64_t>(xShape),
                                             as<int64_t>(mask)));
}

void CpuBackend::broadcast(DType dtype, const void *x, void *out, int64_t rank,
                           const void *outShapeArg, const void *maskArg,
                           double factor) {
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

} // namespace ztrt
