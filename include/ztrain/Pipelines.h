//===- Pipelines.h - ztrain named pass pipelines ----------------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//
//
// One named pipeline per phase, each with its options struct, so that a
// whole compilation is also a single --pass-pipeline string:
//
//   ztrain-training   train-precision{...}, train-autodiff, train-optimizer{...}
//   ztrain-zero       zero-partition{stage dp}, zero-insert-collectives
//   ztrain-to-llvm    lower-to-runtime, upstream conversions to the LLVM dialect
//
// The options of ztrain-training and ztrain-zero are declared once, in
// PipelineOptions.def.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_PIPELINES_H
#define ZTRAIN_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "ztrain/OptionEnums.h"

namespace ztrain {

// The options are the rows of PipelineOptions.def, shared with
// ztrain-compile's flags.
#define ZTRAIN_PIPELINE_OPTION(MEMBER, TYPE, DEFAULT, OPTION, FLAG, DESC)      \
  Option<TYPE> MEMBER{*this, OPTION, llvm::cl::desc(DESC),                     \
                      llvm::cl::init(DEFAULT), ztrain::optionValues<TYPE>()};

struct TrainingPipelineOptions
    : public mlir::PassPipelineOptions<TrainingPipelineOptions> {
#define ZTRAIN_TRAINING_OPTION ZTRAIN_PIPELINE_OPTION
#include "ztrain/PipelineOptions.def"
};

struct ZeroPipelineOptions
    : public mlir::PassPipelineOptions<ZeroPipelineOptions> {
#define ZTRAIN_ZERO_OPTION ZTRAIN_PIPELINE_OPTION
#include "ztrain/PipelineOptions.def"
};

#undef ZTRAIN_PIPELINE_OPTION

/// ztrain-to-llvm's options (ztrain-compile's --fuse).
struct ToLLVMPipelineOptions
    : public mlir::PassPipelineOptions<ToLLVMPipelineOptions> {
  Option<FuseMode> fuse{
      *this, "fuse",
      llvm::cl::desc("Which ops become generated kernels: none, or chains "
                     "of elementwise ops (train-fuse-elementwise)"),
      llvm::cl::init(FuseMode::none), EnumValues<FuseMode>{}};
};

/// train-precision, train-autodiff then train-optimizer: forward + loss →
/// training step.
void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const TrainingPipelineOptions &options);

/// zero-partition then zero-insert-collectives: a step for `dp` ranks.
void buildZeroPipeline(mlir::OpPassManager &pm,
                       const ZeroPipelineOptions &options);

/// Its two halves: what depends on the stage alone (zero-partition,
/// zero-insert-collectives) and the rest (tiling, the overlap schedule,
/// zero-offload, check-collectives), for the plan search, which shares the first half
/// among the plans of a stage.
void buildZeroPartitionPipeline(mlir::OpPassManager &pm,
                                const ZeroPipelineOptions &options);
void buildZeroSchedulePipeline(mlir::OpPassManager &pm,
                               const ZeroPipelineOptions &options);

/// zero-offload with `options`' placements, when any is set (the schedule
/// pipeline adds it; one process with nothing partitioned runs it alone).
void addZeroOffload(mlir::OpPassManager &pm,
                    const ZeroPipelineOptions &options);

/// train-fuse-elementwise (with `fuse` = elementwise), plan-memory,
/// lower-to-runtime, finalize-llvm, reroll-call-runs with `rerollMinTrips`
/// (0: not run), then outline-long-functions with `outlineMaxOps`.
void buildToLLVMPipeline(mlir::OpPassManager &pm, int64_t outlineMaxOps = 1024,
                         int64_t rerollMinTrips = 32,
                         FuseMode fuse = FuseMode::none);

void registerPipelines();

} // namespace ztrain

#endif // ZTRAIN_PIPELINES_H
