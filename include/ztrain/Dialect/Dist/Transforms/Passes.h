//===- Passes.h - ZeRO passes -----------------------------------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_TRANSFORMS_PASSES_H
#define ZTRAIN_DIALECT_DIST_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "ztrain/Dialect/Dist/IR/DistDialect.h"
#include "ztrain/OptionEnums.h"

namespace ztrain::dist {
#define GEN_PASS_DECL
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"

/// What zero-report prices for one rank and one optimizer step, for
/// programs that compare plans (the plan search).
struct StepSummary {
  /// Every category zero-report adds up (bytes).
  int64_t predictedPeak = 0;
  int64_t activations = 0;
  /// Parameters, gradients and optimizer states (bytes).
  int64_t modelStates = 0;
  /// Bytes this rank sends and the number of collectives it issues.
  int64_t communicationBytes = 0;
  int64_t collectives = 0;
  /// The bytes the runtime hands MPI per step for ranks on this rank's node
  /// and on other nodes (zero-report's links).
  int64_t intraNodeBytes = 0, interNodeBytes = 0;
  /// Matrix-product FLOPs: the model's and the recomputed ones.
  int64_t modelFlops = 0;
  int64_t recomputeFlops = 0;
  /// Bytes the other (memory-bound) kernels read and write.
  int64_t kernelBytes = 0;
  int64_t recomputeKernelBytes = 0;
  /// Offload: host memory (swap buffers, host-resident states) and the
  /// bytes read from and written to nvme per step.
  int64_t hostBytes = 0;
  int64_t nvmeTransferBytes = 0;
  /// On a device backend (cuda): the device's peak (the predicted peak plus
  /// the swap buffers' device copies) and the bytes that cross the host
  /// link per step, both ways together (zero-report's device_backend).
  int64_t devicePeak = 0;
  int64_t hostLinkBytes = 0;
  /// Device backends: the pinned buffer the host steps stage through, and
  /// the bytes those steps (ZeRO-Offload's CPU step: updates of host-placed
  /// states) read and write in host memory per step.
  int64_t hostStepBuffers = 0;
  int64_t hostStepBytes = 0;
};
/// plan-memory's work on `module`: places every step buffer and sets
/// `dist.arenas` (an error at the op that cannot be planned otherwise).
/// `numBuffers` / `numBytes`, when given, receive what was placed.
mlir::LogicalResult planMemory(mlir::ModuleOp module,
                               int64_t *numBuffers = nullptr,
                               int64_t *numBytes = nullptr);
/// zero-report's analysis of `module` (after an error at the module when it
/// has no step to price).
mlir::FailureOr<StepSummary> summarizeStep(mlir::ModuleOp module);
} // namespace ztrain::dist

#endif // ZTRAIN_DIALECT_DIST_TRANSFORMS_PASSES_H
