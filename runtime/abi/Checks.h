//===- Checks.h - The entry points' common checks ---------------*- C++ -*-===//
//
// Part of ztrain's runtime (private: not installed). The ztrt_* entry
// points, by the sections of ztrt_abi.def: Bindings.cpp (buffers and
// bindings, the step's loss, loss scale, clipping, learning rate,
// hyper-parameters and gradient accumulation), Offload.cpp (swaps, host
// copies, copies), Kernels.cpp (the generated kernel entry points and
// dropout), Optimizer.cpp (the optimizer updates) and Collectives.cpp (the
// job and its collectives). The argument checks they share are defined,
// and documented, in Checks.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_ABI_CHECKS_H
#define ZTRT_ABI_CHECKS_H

#include "step/Context.h"

#include <cstdint>

namespace ztrt::abi {

Backend &backendOf(ztrt_ctx *ctx, const char *op);
void checkCount(const char *op, const char *what, int64_t value);
void checkRank(const char *op, int64_t rank, const void *shape);
DType checkDType(const char *op, int32_t code);
DType checkDType(const char *op, const char *argument, int32_t code);
bool overlaps(const void *a, int64_t aBytes, const void *b, int64_t bBytes);

} // namespace ztrt::abi

#endif // ZTRT_ABI_CHECKS_H
