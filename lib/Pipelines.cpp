//===- Pipelines.cpp - ztrain named pass pipelines ------------------------===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Pipelines.h"
#include "ztrain/Conversion/Passes.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/Transforms/Passes.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace ztrain;

void ztrain::buildTrainingPipeline(OpPassManager &pm,
                                   const TrainingPipelineOptions &options) {
  // fp32 (the default) adds no stage; the pass checks every other choice.
  // A loss-scale option away from its default is a choice the pass checks
  // (it is an error without fp16).
  train::TrainPrecisionOptions defaults;
  bool lossScaleGiven =
      options.initialScalePower != defaults.initialScalePower ||
      options.lossScaleWindow != defaults.lossScaleWindow ||
      options.hysteresis != defaults.hysteresis ||
      options.minLossScale != defaults.minLossScale;
  if (options.precision != Precision::fp32 ||
      options.reduceDtype != ReduceDtype::param || lossScaleGiven) {
    train::TrainPrecisionOptions precision;
    precision.param = options.precision;
    precision.reduce = options.reduceDtype;
    precision.initialScalePower = options.initialScalePower;
    precision.lossScaleWindow = options.lossScaleWindow;
    precision.hysteresis = options.hysteresis;
    precision.minLossScale = options.minLossScale;
    pm.addPass(train::createTrainPrecision(precision));
  }
  if (options.eval)
    pm.addPass(train::createTrainEvalEntry());
  pm.addPass(train::createTrainAutodiff());
  if (options.recompute != RecomputePolicy::none) {
    train::TrainRecomputeOptions recompute;
    recompute.policy = options.recompute;
    pm.addPass(train::createTrainRecompute(recompute));
  }
  pm.addPass(train::createTrainFuseLoss());
  if (options.lossTileBytes != 0) { // the pass refuses a negative bound
    train::TrainTileLossOptions tiling;
    tiling.maxTileBytes = options.lossTileBytes;
    pm.addPass(train::createTrainTileLoss(tiling));
  }
  train::TrainOptimizerOptions opt;
  opt.kind = options.optimizer;
  opt.lr = options.lr;
  opt.beta1 = options.beta1;
  opt.beta2 = options.beta2;
  opt.eps = options.eps;
  opt.weightDecay = options.weightDecay;
  opt.momentum = options.momentum;
  opt.dampening = options.dampening;
  opt.nesterov = options.nesterov;
  opt.clipGradNorm = options.clipGradNorm;
  opt.gradAccumSteps = options.gradAccumSteps;
  opt.noDecay = options.noDecay;
  pm.addPass(train::createTrainOptimizer(opt));
}

void ztrain::buildZeroPipeline(OpPassManager &pm,
                               const ZeroPipelineOptions &options) {
  buildZeroPartitionPipeline(pm, options);
  buildZeroSchedulePipeline(pm, options);
}

void ztrain::buildZeroPartitionPipeline(OpPassManager &pm,
                                        const ZeroPipelineOptions &options) {
  dist::ZeroPartitionOptions partition;
  partition.stage = options.stage;
  partition.dp = options.dp;
  partition.dpShard = options.dpShard;
  partition.dpReplicate = options.dpReplicate;
  partition.ranksPerNode = options.ranksPerNode;
  partition.hpzPartitionSize = options.hpzPartitionSize;
  pm.addPass(dist::createZeroPartition(partition));
  pm.addPass(dist::createZeroInsertCollectives());
}

void ztrain::buildZeroSchedulePipeline(OpPassManager &pm,
                                       const ZeroPipelineOptions &options) {
  if (options.maxTileBytes != 0) { // the pass refuses a negative bound
    dist::MemoryCentricTilingOptions tiling;
    tiling.maxTileBytes = options.maxTileBytes;
    pm.addPass(dist::createMemoryCentricTiling(tiling));
  }
  if (options.overlap) {
    dist::OverlapScheduleOptions schedule;
    schedule.prefetchDepth = options.prefetchDepth;
    schedule.maxLiveBytes = options.maxLiveBytes;
    schedule.bucketBytes = options.bucketBytes;
    schedule.reshardAfterForward = options.reshardAfterForward;
    pm.addPass(dist::createOverlapSchedule(schedule));
  }
  addZeroOffload(pm, options);
  pm.addPass(dist::createCheckCollectives());
}

void ztrain::addZeroOffload(OpPassManager &pm,
                            const ZeroPipelineOptions &options) {
  if (options.offloadOptimizer == OffloadPlacement::none &&
      options.offloadParam == OffloadPlacement::none &&
      options.offloadActivations == ActivationPlacement::none)
    return;
  dist::ZeroOffloadOptions offload;
  offload.optimizer = options.offloadOptimizer;
  offload.param = options.offloadParam;
  offload.activations = options.offloadActivations;
  offload.bufferCount = options.offloadBufferCount;
  offload.subGroupSize = options.offloadSubGroupSize;
  offload.ratio = options.offloadRatio;
  offload.paramRatio = options.offloadParamRatio;
  pm.addPass(dist::createZeroOffload(offload));
}

void ztrain::buildToLLVMPipeline(OpPassManager &pm, int64_t outlineMaxOps,
                                 int64_t rerollMinTrips, FuseMode fuse) {
  if (fuse == FuseMode::elementwise)
    pm.addPass(train::createTrainFuseElementwise());
  pm.addPass(dist::createPlanMemory());
  pm.addPass(createLowerToRuntime());
  pm.addPass(createFinalizeLLVM());
  if (rerollMinTrips > 0)
    pm.addPass(createRerollCallRuns({rerollMinTrips}));
  pm.addPass(createOutlineLongFunctions({outlineMaxOps}));
}

void ztrain::registerPipelines() {
  PassPipelineRegistration<TrainingPipelineOptions>(
      "ztrain-training",
      "Derive the backward pass and the optimizer update: forward + loss "
      "becomes a complete training step",
      buildTrainingPipeline);
  PassPipelineRegistration<ZeroPipelineOptions>(
      "ztrain-zero",
      "Partition a training step over dp ranks the way ZeRO stage `stage` "
      "does, insert its collectives (tiled with max-tile-bytes, scheduled to "
      "overlap compute with overlap=true) and check every rank issues them "
      "alike",
      buildZeroPipeline);
  PassPipelineRegistration<ToLLVMPipelineOptions>(
      "ztrain-to-llvm",
      "Fuse elementwise chains (fuse=elementwise), plan the step's memory "
      "statically, lower it to runtime calls and then to the LLVM dialect, "
      "and cut long functions into bounded parts",
      [](OpPassManager &pm, const ToLLVMPipelineOptions &options) {
        buildToLLVMPipeline(pm, 1024, 32, options.fuse);
      });
}
