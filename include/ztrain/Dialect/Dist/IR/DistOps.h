//===- DistOps.h - dist dialect operations and attributes -------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_IR_DISTOPS_H
#define ZTRAIN_DIALECT_DIST_IR_DISTOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "ztrain/Dialect/Dist/IR/DistDialect.h"

#include <algorithm>

#include "ztrain/Dialect/Dist/IR/DistEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "ztrain/Dialect/Dist/IR/DistAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "ztrain/Dialect/Dist/IR/DistTypes.h.inc"

#include "ztrain/Dialect/Dist/IR/DistInterfaces.h.inc"

#define GET_OP_CLASSES
#include "ztrain/Dialect/Dist/IR/DistOps.h.inc"

namespace ztrain::dist {
/// The size of the one-dimensional static grid `ref` names, looked up from
/// `from`; emits an error at `from` and fails otherwise.
mlir::FailureOr<int64_t> getGridSize(mlir::Operation *from,
                                     mlir::FlatSymbolRefAttr ref,
                                     mlir::SymbolTableCollection &symbols);

/// The data-parallel ranks of a partitioned module and how the runtime's
/// collectives group them (ztrt_abi.def's `axis`). Without a #dist.mesh the
/// #dist.zero grid is every rank, on one node.
struct MeshLayout {
  int64_t world = 1;        ///< every rank: shard x replicate
  int64_t shard = 1;        ///< ranks of a shard group (the #dist.zero grid)
  int64_t replicate = 1;    ///< shard groups, each a replica of the states
  int64_t ranksPerNode = 1; ///< consecutive ranks that share a node
  /// shardGrid: the #dist.zero grid; groupGrid: the grid of runtime axis 1
  /// (the `shard` consecutive ranks: the shard grid under hybrid sharding,
  /// hpZ's secondary grid); replicateGrid: axis 2 (hybrid sharding).
  mlir::FlatSymbolRefAttr shardGrid, groupGrid, replicateGrid;
  /// hpZ: axis 1 groups ranks for the backward gathers only; the states
  /// stay partitioned over every rank.
  bool secondary = false;

  /// The runtime axis a collective over `grid` runs on: 1 the shard group,
  /// 2 the replicate group, 0 every rank (any other grid, e.g. @dp).
  int axisOf(mlir::FlatSymbolRefAttr grid) const;
  /// The ranks of axis `axis`'s group and, of them, how many share a node
  /// with any one member (itself included; the same for every rank: the
  /// mesh verifier requires whole groups per node or nodes per group).
  int64_t groupSize(int axis) const;
  int64_t sameNodeMembers(int axis) const;
};

/// The layout of `module` (a #dist.zero, and a #dist.mesh if it has one);
/// emits an error and fails when a grid is missing or malformed.
mlir::FailureOr<MeshLayout> getMeshLayout(mlir::ModuleOp module,
                                          mlir::SymbolTableCollection &symbols);

/// How one rank stores a parameter or optimizer state of a ZeRO plan: the
/// contract between the lowering (the descriptor's `store` suffix) and
/// zero-report, which must agree byte for byte.
struct StateStorage {
  enum Mode {
    Whole,      ///< the tensor as declared
    PaddedFull, ///< the whole tensor, zero-padded to N equal slices
    Shard       ///< this rank's slice of the flattened, padded tensor
  } mode = Whole;
  int64_t elements = 0; ///< per rank
};

/// The storage of `symbolOp` (a train.param / train.state of `type`) under
/// ZeRO `stage` over `gridSize` ranks: partitioned states are shards, stage
/// 1-2 parameters are padded (updated by slice, all-gathered in place).
StateStorage getStateStorage(mlir::Operation *symbolOp,
                             mlir::RankedTensorType type, int64_t stage,
                             int64_t gridSize);

/// The elements of one rank's persistent gradient buffer of a parameter:
/// the whole gradient (stage 0), the gradient padded to N equal slices
/// (stage 1: reduce-scattered at the optimizer), or this rank's slice
/// (stages 2-3); none for a frozen parameter or one whose gradient lives in
/// the activation arena.
int64_t getGradientElements(mlir::Operation *param, int64_t stage,
                            int64_t gridSize);

/// The host copy of a gradient spilled for a host step (zero-offload,
/// optimizer=cpu): the result of the dist.wait of `op`, null when `op`
/// copies an activation (its wait yields nothing).
mlir::Value spilledGradient(OffloadActivationStartOp op);

/// ZeRO-Offload's CPU step on a device backend: an optimizer update whose
/// first state (its master when it has one, else Adam's exp_avg or SGD's
/// momentum buffer: the state the runtime decides by) is placed in host
/// memory or on nvme runs on the host. What one such update stages
/// through the pinned host step buffer: its gradient unless it was spilled
/// to host memory (dist.host_gradient), its parameter unless the parameter
/// is host-placed; a chunk (dist.chunk) stages its chunk.
/// An update that stages more than two tiles of kHostStepTileElements
/// elements goes through a buffer of two such tiles, a tile at a time,
/// alternating halves, so that a tile's parameter upload overlaps the next
/// tile (the runtime tiles by what fits half the buffer; an update that
/// fits the buffer goes whole).
inline constexpr int64_t kHostStepTileElements = int64_t(1) << 20;
struct HostStep {
  int64_t elements = 0;   ///< the update's elements (its chunk's)
  int64_t gradBytes = 0;  ///< the gradient staged (0: spilled)
  int64_t paramBytes = 0; ///< the parameter staged (0: host-placed)
  bool master = false;    ///< a master-weight update (only writes the
                          ///< parameter: nothing of it goes down)
  /// The host step buffer this update needs: all it stages, at most two
  /// tiles.
  int64_t bufferBytes() const {
    const int64_t staged = gradBytes + paramBytes;
    if (elements <= kHostStepTileElements || staged == 0)
      return staged;
    return std::min(staged,
                    2 * kHostStepTileElements * (staged / elements));
  }
};
/// The host step of `update` (an optimizer update), or nothing when it
/// runs where its states are, on the device.
std::optional<HostStep> getHostStep(mlir::SymbolTableCollection &symbols,
                                    mlir::Operation *update);
/// The pinned host step buffer the runtime allocates for the updates in
/// `fn`: the largest HostStep::bufferBytes of its updates (0: none).
int64_t getHostStepBufferBytes(mlir::Operation *fn);
} // namespace ztrain::dist

#endif // ZTRAIN_DIALECT_DIST_IR_DISTOPS_H
