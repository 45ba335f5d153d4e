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
/// (stages 2-3).
int64_t getGradientElements(mlir::Operation *param, int64_t stage,
                            int64_t gridSize);

/// The host copy of a gradient spilled for a host step (zero-offload,
/// optimizer=cpu): the result of the dist.wait of `op`, null when `op`
/// copies an activation (its wait yields nothing).
mlir::Value spilledGradient(OffloadActivationStartOp op);
} // namespace ztrain::dist

#endif // ZTRAIN_DIALECT_DIST_IR_DISTOPS_H
