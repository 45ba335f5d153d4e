//===- Pipelines.h - ztrain named pass pipelines ----------------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//
//
// One named pipeline per phase, each with its options struct, so that a
// whole compilation is also a single --pass-pipeline string:
//
//   ztrain-training   train-autodiff, train-optimizer{...}
//   ztrain-zero       zero-partition{stage dp}, zero-insert-collectives
//   ztrain-to-llvm    lower-to-runtime, upstream conversions to the LLVM dialect
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_PIPELINES_H
#define ZTRAIN_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace ztrain {

struct TrainingPipelineOptions
    : public mlir::PassPipelineOptions<TrainingPipelineOptions> {
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("sgd, adam or adamw"),
                                llvm::cl::init("adamw")};
  Option<double> lr{*this, "lr", llvm::cl::desc("Learning rate"),
                    llvm::cl::init(1e-3)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("Adam beta1"),
                       llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("Adam beta2"),
                       llvm::cl::init(0.999)};
  Option<double> eps{*this, "eps", llvm::cl::desc("Adam epsilon"),
                     llvm::cl::init(1e-8)};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("Weight decay"),
                             llvm::cl::init(0.0)};
  Option<double> momentum{*this, "momentum", llvm::cl::desc("SGD momentum"),
                          llvm::cl::init(0.0)};
  Option<double> dampening{*this, "dampening",
                           llvm::cl::desc("SGD dampening"),
                           llvm::cl::init(0.0)};
  Option<bool> nesterov{*this, "nesterov", llvm::cl::desc("SGD Nesterov"),
                        llvm::cl::init(false)};
};

struct ZeroPipelineOptions
    : public mlir::PassPipelineOptions<ZeroPipelineOptions> {
  Option<int64_t> stage{*this, "stage", llvm::cl::desc("ZeRO stage 0-3"),
                        llvm::cl::init(0)};
  Option<int64_t> dp{*this, "dp", llvm::cl::desc("Data-parallel ranks"),
                     llvm::cl::init(1)};
  Option<bool> overlap{
      *this, "overlap",
      llvm::cl::desc("Schedule the collectives to overlap compute "
                     "(overlap-schedule; off by default, see "
                     "docs/benchmarks.md)"),
      llvm::cl::init(false)};
  Option<int64_t> prefetchDepth{
      *this, "prefetch-depth",
      llvm::cl::desc("overlap-schedule: gathers in flight ahead of use"),
      llvm::cl::init(1)};
  Option<int64_t> maxLiveBytes{
      *this, "max-live-bytes",
      llvm::cl::desc("overlap-schedule: bound on gathered parameter bytes "
                     "(0: none)"),
      llvm::cl::init(0)};
  Option<int64_t> bucketBytes{
      *this, "bucket-bytes",
      llvm::cl::desc("overlap-schedule: gradient bucket size in bytes"),
      llvm::cl::init(1 << 20)};
  Option<int64_t> maxTileBytes{
      *this, "max-tile-bytes",
      llvm::cl::desc("memory-centric-tiling: largest gathered tile in bytes "
                     "(0: no tiling)"),
      llvm::cl::init(0)};
  Option<bool> reshardAfterForward{
      *this, "reshard-after-forward",
      llvm::cl::desc("overlap-schedule: gather again for the backward pass"),
      llvm::cl::init(true)};
};

/// train-autodiff then train-optimizer: forward + loss → training step.
void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const TrainingPipelineOptions &options);

/// zero-partition then zero-insert-collectives: a step for `dp` ranks.
void buildZeroPipeline(mlir::OpPassManager &pm,
                       const ZeroPipelineOptions &options);

/// lower-to-runtime then the upstream conversions to the LLVM dialect.
void buildToLLVMPipeline(mlir::OpPassManager &pm);

void registerPipelines();

} // namespace ztrain

#endif // ZTRAIN_PIPELINES_H
