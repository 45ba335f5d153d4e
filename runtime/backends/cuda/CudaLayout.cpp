//===- CudaLayout.cpp - The cuda backend: transpose, reduce, broadcast ----===//
//
// Part of ztrain's runtime. The cuda backend's layout kernels: transpose
// and broadcast (gathers), reduce and reduce_max_grad, with the plans
// (cuda::Gather, cuda::Reduction) that the kernels of Layout.cu walk.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/CudaBackendImpl.h"

#include <cstdint>
#include <vector>

namespace ztrt {

namespace {

/// Drops unit dims and merges dims d, d+1 whose source strides are
/// contiguous (stride[d] == stride[d+1] * shape[d+1]): fewer divisions per
/// element, same offsets in the same order.
void simplify(int &rank, int64_t *shape, int64_t *strides) {
  int out = 0;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 1)
      continue;
    if (out > 0 && strides[out - 1] == strides[d] * shape[d]) {
      shape[out - 1] *= shape[d];
      strides[out - 1] = strides[d];
      continue;
    }
    shape[out] = shape[d];
    strides[out] = strides[d];
    ++out;
  }
  rank = out;
}

std::vector<int64_t> contiguousStrides(int64_t rank, const int64_t *shape) {
  std::vector<int64_t> strides(rank);
  int64_t stride = 1;
  for (int64_t d = rank; d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

} // namespace

void CudaBackend::transpose(DType dtype, const void *x, void *out, int64_t rank,
                            const void *xShapeArg, const void *permArg) {
  const int64_t *xShape = as<int64_t>(xShapeArg),
                *perm = as<int64_t>(permArg);
  std::vector<int64_t> xStrides = contiguousStrides(rank, xShape);
  cuda::Gather plan;
  plan.rank = static_cast<int>(rank);
  for (int64_t d = 0; d < rank; ++d) {
    plan.shape[d] = xShape[perm[d]];
    plan.strides[d] = xStrides[perm[d]];
  }
  simplify(plan.rank, plan.shape, plan.strides);
  ZTRT_CUDA_DISPATCH(dtype,
                     cuda::gather(as<T>(x), as<T>(out), plan, 1.0, compute));
}

void CudaBackend::reduce(DType dtype, const void *x, void *out, int64_t rank,
                         const void *xShape, const void *mask, int32_t kind) {
  const cuda::Reduction plan =
      reduction(rank, as<int64_t>(xShape), as<int64_t>(mask));
  ZTRT_CUDA_DISPATCH(dtype, cuda::reduce(as<T>(x), as<T>(out), plan,
                                         static_cast<cuda::ReduceKind>(kind),
                                         compute));
}

void CudaBackend::reduceMaxGrad(DType dtype, const void *dy, const void *x,
                                const void *y, void *dx, int64_t rank,
                                const void *xShapeArg, const void *maskArg) {
  const int64_t *xShape = as<int64_t>(xShapeArg),
                *mask = as<int64_t>(maskArg);
  const cuda::Reduction plan = reduction(rank, xShape, mask);
  // x's shape with the output's strides (0 along the reduced dims).
  cuda::Gather toOutput;
  toOutput.rank = static_cast<int>(rank);
  int64_t stride = 1;
  for (int64_t d = rank; d-- > 0;) {
    toOutput.shape[d] = xShape[d];
    toOutput.strides[d] = mask[d] ? 0 : stride;
    if (!mask[d])
      stride *= xShape[d];
  }
  simplify(toOutput.rank, toOutput.shape, toOutput.strides);
  ZTRT_CUDA_DISPATCH(dtype,
                     cuda::reduceMaxGrad(as<T>(dy), as<T>(x), as<T>(y),
                                         as<T>(dx), plan, toOutput, compute));
}

void CudaBackend::broadcast(DType dtype, const void *x, void *out, int64_t rank,
                            const void *outShapeArg, const void *maskArg,
                            double factor) {
  const int64_t *outShape = as<int64_t>(outShapeArg),
                *mask = as<int64_t>(maskArg);
  cuda::Gather plan;
  plan.rank = static_cast<int>(rank);
  int64_t stride = 1;
  for (int64_t d = rank; d-- > 0;) {
    plan.shape[d] = outShape[d];
    plan.strides[d] = mask[d] ? 0 : stride;
    if (!mask[d])
      stride *= outShape[d];
  }
  simplify(plan.rank, plan.shape, plan.strides);
  ZTRT_CUDA_DISPATCH(
      dtype, cuda::gather(as<T>(x), as<T>(out), plan, factor, compute));
}

/// The plan of a reduction of x (xShape) over the dims with mask[d] != 0.
cuda::Reduction CudaBackend::reduction(int64_t rank, const int64_t *xShape,
                                       const int64_t *mask) {
  std::vector<int64_t> strides = contiguousStrides(rank, xShape);
  cuda::Reduction plan;
  for (int64_t d = 0; d < rank; ++d) {
    if (mask[d]) {
      plan.reducedShape[plan.reducedRank] = xShape[d];
      plan.reducedStrides[plan.reducedRank++] = strides[d];
      plan.reduced *= xShape[d];
    } else {
      plan.keptShape[plan.keptRank] = xShape[d];
      plan.keptStrides[plan.keptRank++] = strides[d];
      plan.outputs *= xShape[d];
    }
  }
  simplify(plan.keptRank, plan.keptShape, plan.keptStrides);
  simplify(plan.reducedRank, plan.reducedShape, plan.reducedStrides);
  if (plan.reducedRank == 0) {
    // One term per output (nothing reduced, or only unit dims).
    plan.reducedRank = 1;
    plan.reducedShape[0] = 1;
    plan.reducedStrides[0] = 0;
  }
  return plan;
}

} // namespace ztrt
