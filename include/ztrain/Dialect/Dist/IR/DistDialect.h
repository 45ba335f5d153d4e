//===- DistDialect.h - The dist dialect -------------------------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_IR_DISTDIALECT_H
#define ZTRAIN_DIALECT_DIST_IR_DISTDIALECT_H

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/Dialect.h"

#include "ztrain/Dialect/Dist/IR/DistDialect.h.inc"

namespace ztrain::dist {
/// Discardable attribute on train.param / train.state: a #dist.partition.
inline constexpr llvm::StringLiteral kPartitionAttr = "dist.partition";
/// Module attribute: a #dist.zero.
inline constexpr llvm::StringLiteral kZeroAttr = "dist.zero";
/// plan-memory's results: per-result #dist.slot arrays on ops, the packed
/// buffers of a bucket on its start op, and the arena sizes on the module.
inline constexpr llvm::StringLiteral kSlotsAttr = "dist.slots";
inline constexpr llvm::StringLiteral kStagingAttr = "dist.staging";
inline constexpr llvm::StringLiteral kArenasAttr = "dist.arenas";
/// Unit attribute on train.param (zero-offload): the gradient its update
/// consumes lives in the step's activation arena, from the op that makes it
/// to the update, instead of a persistent gradient buffer (0 elements).
inline constexpr llvm::StringLiteral kTransientGradientAttr =
    "dist.transient_gradient";
/// Discardable attribute on train.state: a #dist.space (absent: device).
inline constexpr llvm::StringLiteral kSpaceAttr = "dist.space";
/// The alignment (and size granule) of swap buffers and swap files: O_DIRECT
/// transfers move whole 4096-byte blocks.
inline constexpr int64_t kSwapAlignment = 4096;
inline int64_t swapBytes(int64_t bytes) {
  return (bytes + kSwapAlignment - 1) / kSwapAlignment * kSwapAlignment;
}
} // namespace ztrain::dist

#endif // ZTRAIN_DIALECT_DIST_IR_DISTDIALECT_H
