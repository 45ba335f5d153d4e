//===- ZeroOffload.h - zero-offload's parts ---------------------*- C++ -*-===//
//
// Part of the ztrain project.
//
// Private to zero-offload. The pass (ZeroOffload.cpp) checks its options and
// calls these in order; they live in files by what they do:
//
//   ZeroOffloadPlacement.cpp  which parameters and optimizer states go where
//                             (dist.space)
//   ZeroOffloadTransfers.cpp  copies to and from host memory: gradient
//                             spills, asynchronous host steps, activations,
//                             updates moved into the backward pass
//   ZeroOffloadSwaps.cpp      nvme: updates split into chunks and the swap
//                             schedule
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_LIB_DIALECT_DIST_TRANSFORMS_ZEROOFFLOAD_H
#define ZTRAIN_LIB_DIALECT_DIST_TRANSFORMS_ZEROOFFLOAD_H

#include "ztrain/Dialect/Dist/IR/DistOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/DenseSet.h"

namespace ztrain::dist::offload {

/// The pass's statistics (Passes.td), which the parts count into.
struct Statistics {
  mlir::Pass::Statistic &swaps, &hoisted, &chunkedUpdates,
      &offloadedActivations, &spilledGradients, &hoistedChecks, &asyncUpdates;
};

/// Which tensors are on nvme (their symbols), the question every part asks.
using OnNvme = llvm::function_ref<bool(mlir::FlatSymbolRefAttr)>;

//===----------------------------------------------------------------------===//
// Placement (ZeroOffloadPlacement.cpp)
//===----------------------------------------------------------------------===//

/// param=cpu|nvme at stage 3 (`zero`): places the parameters in `space`
/// (whole parameters, in declaration order, until `paramRatio` of their
/// shards' bytes), adds those on nvme to `onNvme` and, in host memory,
/// gives each op that reads one a gather of its own.
mlir::LogicalResult placeParameters(mlir::ModuleOp module, ZeroAttr zero,
                                    MemorySpace space, double paramRatio,
                                    llvm::DenseSet<mlir::StringAttr> &onNvme);

/// optimizer=cpu|nvme: places the optimizer states in `space` (the states
/// of whole updates, in step order, until `ratio` of their bytes) and adds
/// those on nvme to `onNvme`.
mlir::LogicalResult
placeOptimizerStates(mlir::ModuleOp module, mlir::func::FuncOp entry,
                     MemorySpace space, double ratio,
                     llvm::DenseSet<mlir::StringAttr> &onNvme);

//===----------------------------------------------------------------------===//
// Transfers to and from host memory (ZeroOffloadTransfers.cpp)
//===----------------------------------------------------------------------===//

/// optimizer=cpu: each host-stepped update's gradient is copied to host
/// memory as soon as it is final.
void spillGradients(mlir::func::FuncOp fn, Statistics &stats);

/// The asynchronous host steps: dist.async_update and a dist.update_wait
/// (`nvme`: the updates that swap tensors; null: those that read a spilled
/// gradient).
void completeAsyncUpdates(mlir::func::FuncOp fn, Statistics &stats,
                          OnNvme nvme = nullptr);

/// activations=cpu (Pa+cpu): the values recomputations read go to host
/// memory between the forward and the backward pass.
mlir::LogicalResult offloadActivations(mlir::func::FuncOp fn,
                                       Statistics &stats);

/// Moves each update `moves` selects up to the earliest point where it
/// computes the same values.
void hoistUpdates(mlir::func::FuncOp fn,
                  llvm::function_ref<bool(mlir::Operation *)> moves,
                  Statistics &stats);

//===----------------------------------------------------------------------===//
// nvme swaps (ZeroOffloadSwaps.cpp)
//===----------------------------------------------------------------------===//

/// sub-group-size: splits each update whose states are all on nvme into
/// chunks of at most `subGroupSize` elements.
mlir::LogicalResult splitIntoChunks(mlir::func::FuncOp fn, int64_t subGroupSize,
                                    OnNvme nvme, Statistics &stats);

/// The swap transfers of one function around the uses of the tensors in
/// `onNvme`, through `bufferCount` buffers.
mlir::LogicalResult
scheduleSwaps(mlir::func::FuncOp fn,
              const llvm::DenseSet<mlir::StringAttr> &onNvme,
              int64_t bufferCount, int64_t subGroupSize, Statistics &stats);

} // namespace ztrain::dist::offload

#endif // ZTRAIN_LIB_DIALECT_DIST_TRANSFORMS_ZEROOFFLOAD_H
