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
/// Module attribute: a #dist.mesh (hybrid sharding); absent: the grid of
/// the #dist.zero is all the ranks.
inline constexpr llvm::StringLiteral kMeshAttr = "dist.mesh";
/// Module attribute: a #dist.hpz (ZeRO++'s secondary partition).
inline constexpr llvm::StringLiteral kHpzAttr = "dist.hpz";
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
/// Unit attribute on an optimizer update (zero-offload, optimizer=cpu): its
/// gradient was spilled to host memory (a dist.offload_activation_start of
/// the gradient, waited before the update) and the update reads that host
/// copy: on a device backend it runs on the host (ZeRO-Offload's CPU step)
/// without copying its gradient down itself.
inline constexpr llvm::StringLiteral kHostGradientAttr = "dist.host_gradient";
/// Unit attribute on an optimizer update that runs on the host on a device
/// backend (zero-offload: it reads a spilled gradient, kHostGradientAttr, or
/// its states are in host memory or on nvme): its host step may run beside
/// the step (on the runtime's host step thread); the dist.update_wait of its
/// parameter that follows completes it. In between nothing may read,
/// gather, swap or update the parameter, or swap the update's chunk of its
/// states (their write-backs come after the wait).
inline constexpr llvm::StringLiteral kAsyncUpdateAttr = "dist.async_update";
/// Discardable attribute on train.state: a #dist.space (absent: device).
inline constexpr llvm::StringLiteral kSpaceAttr = "dist.space";
/// The alignment (and size granule) of swap buffers and swap files: O_DIRECT
/// transfers move whole 4096-byte blocks.
inline constexpr int64_t kSwapAlignment = 4096;
inline int64_t swapBytes(int64_t bytes) {
  return (bytes + kSwapAlignment - 1) / kSwapAlignment * kSwapAlignment;
}
/// Discardable attribute on an optimizer update (zero-offload's
/// sub-group-size): `array<i64: c, C>`, the update steps only chunk c of
/// its C chunks (chunkElements), whose states were swapped in alone.
inline constexpr llvm::StringLiteral kChunkAttr = "dist.chunk";
/// Chunks start at multiples of this many elements: a whole number of
/// 4096-byte blocks for 2- and 4-byte elements alike, so every chunk of
/// every state of an update starts on a block of its swap file.
inline constexpr int64_t kChunkGranule = 2048;
/// Elements per chunk when n elements are cut into `chunks` chunks:
/// ceil(n / chunks) rounded up to kChunkGranule; the last chunk holds what
/// remains (zero-offload chooses `chunks` so that it is not empty).
inline int64_t chunkElements(int64_t n, int64_t chunks) {
  const int64_t each = (n + chunks - 1) / chunks;
  return (each + kChunkGranule - 1) / kChunkGranule * kChunkGranule;
}
/// Elements of chunk `c`.
inline int64_t chunkSize(int64_t n, int64_t c, int64_t chunks) {
  const int64_t e = chunkElements(n, chunks);
  const int64_t rest = n - c * e;
  return rest < e ? rest : e;
}
} // namespace ztrain::dist

#endif // ZTRAIN_DIALECT_DIST_IR_DISTDIALECT_H
