//===- ZeroReport.h - zero-report's step analysis ---------------*- C++ -*-===//
//
// Part of the ztrain project.
//
// Private to zero-report: what a step costs per rank (Report), computed by
// analyzeStep (ZeroReportAnalysis.cpp) and printed by the pass
// (ZeroReport.cpp); summarizeStep hands plan-search the same numbers.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_LIB_DIALECT_DIST_TRANSFORMS_ZEROREPORT_H
#define ZTRAIN_LIB_DIALECT_DIST_TRANSFORMS_ZEROREPORT_H

#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "ztrain/Dialect/Dist/IR/DistOps.h"

#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <string>
#include <vector>

namespace ztrain::dist::report {

struct Collective {
  std::string kind;
  std::string tensor;
  int64_t count = 0;
  int64_t bytes = 0; // sent per rank per step, all executions together
  /// The grid it runs over, and the bytes the CPU runtime's algorithm hands
  /// MPI per step for ranks on this rank's node and on other nodes
  /// (MeshLayout::ranksPerNode; broadcasts, whose sends are the root's
  /// alone, count in neither).
  std::string grid;
  int64_t intraNodeBytes = 0, interNodeBytes = 0;
};

struct Report {
  int64_t stage = 0;
  /// The ranks states are partitioned over (the #dist.zero grid's size: a
  /// shard group's under hybrid sharding) and all ranks with their groups.
  int64_t worldSize = 1;
  MeshLayout mesh;
  std::string grid;
  int64_t paramCount = 0, paramElements = 0, paramBytes = 0;
  /// Of those, the frozen ones (no gradient, no optimizer state).
  int64_t frozenCount = 0, frozenElements = 0;
  int64_t parameters = 0, gradients = 0, optimizerStates = 0;
  /// Optimizer states placed off the device by zero-offload (#dist.space):
  /// in host memory, and in nvme files (whole 4096-byte blocks); the host
  /// buffers nvme parameter shards pass through (the swap_buffers arena)
  /// and those nvme states pass through (state_swap_buffers); the bytes
  /// read from and written to nvme per optimizer step, and of those the
  /// parameters' (which a device backend copies to and from the device).
  int64_t hostStates = 0, nvmeStates = 0, swapBuffers = 0, nvmeParams = 0;
  int64_t stateSwapBuffers = 0;
  /// Parameter shards placed in host memory (param=cpu).
  int64_t hostParams = 0;
  int64_t nvmeToHost = 0, hostToNvme = 0;
  int64_t paramsNvmeToHost = 0, paramsHostToNvme = 0;
  /// Activations offloaded to host memory (Pa+cpu): the host_activations
  /// arena, and the bytes copied to host memory (and back) per step.
  int64_t hostActivations = 0, activationsToHost = 0;
  /// Gradients spilled to host memory for a host step (optimizer=cpu): the
  /// host_gradients arena, and the bytes copied down per step.
  int64_t hostGradients = 0, gradientsToHost = 0;
  /// Host-placed parameters' bytes over the host link per step (device
  /// backends): read (gathers, updates) and written (updates).
  int64_t hostParamsToDevice = 0, hostParamsToHost = 0;
  /// ZeRO-Offload's CPU step (device backends): an update whose states are
  /// host-placed runs on the host, its gradient sent down and its parameter
  /// (unless host-placed) down (unless a master-weight update, which only
  /// writes it) and back up, staged through one pinned buffer sized for the
  /// largest such update.
  int64_t hostStepToDevice = 0, hostStepToHost = 0, hostStepBuffers = 0;
  /// Host steps per step, and how many of them run on the runtime's host
  /// step thread (dist.async_update).
  int64_t hostSteps = 0, asyncHostSteps = 0;
  /// The bytes those host steps read and write in host memory: gradient,
  /// parameter, every state read and written.
  int64_t hostStepBytes = 0;
  /// On a device backend (cuda): the parameters' swap buffers have a
  /// device copy, each of their swaps moves its bytes between that copy and
  /// its pinned staging copy (the states' are stepped on the host: no
  /// device copy).
  int64_t devicePeakOnDevice() const { return predictedPeak() + swapBuffers; }
  /// (Plus the offloaded activations, which cross it every micro-batch.)
  /// And host-placed parameters' shards: read by their gathers and by a
  /// device update, written by a device update. And the host steps'
  /// gradients and parameters.
  int64_t hostToDevice() const {
    return paramsNvmeToHost + activationsToHost + hostParamsToDevice +
           hostStepToDevice;
  }
  int64_t deviceToHost() const {
    return paramsHostToNvme + activationsToHost + hostParamsToHost +
           hostStepToHost + gradientsToHost;
  }
  int64_t buffers = 0, inputs = 0, activations = 0, communicationBuffers = 0;
  /// Of the activations: gathered parameters allocated at once.
  int64_t gatheredPeak = 0;
  bool hasStates = false;
  /// Element types: parameters, gradients (as the updates consume them),
  /// optimizer states; empty when there are none.
  std::string paramType, gradType, stateType;
  /// fp16's dynamic loss scaling (train.loss_scale), when the step has it.
  std::optional<train::LossScalePolicy> lossScale;
  /// Micro-batches per optimizer step (train.grad_accum_steps; 1 without
  /// accumulation): "per step" means per optimizer step.
  int64_t accumSteps = 1;
  /// Matrix-product FLOPs per optimizer step and rank: the model's (as MFU
  /// counts them) and those train-recompute repeats, with the policy and
  /// the number of ops it repeats.
  int64_t modelFlops = 0, recomputeFlops = 0, recomputedOps = 0;
  /// Bytes the other kernels read and write per optimizer step and rank
  /// (memory-bound work), the model's and the recomputed ones.
  int64_t kernelBytes = 0, recomputeKernelBytes = 0;
  std::string recompute = "none";
  bool collectivesFromIR = false;
  /// Memory from plan-memory's arenas (exact) rather than a liveness sweep.
  bool staticPlan = false;
  std::vector<Collective> collectives;

  /// Parameters, gradients and optimizer states: ZeRO's model states.
  int64_t modelStates() const {
    return parameters + gradients + optimizerStates;
  }
  double bytesPerParameter() const {
    return paramElements ? (double)modelStates() / (double)paramElements : 0.0;
  }
  int64_t predictedPeak() const {
    return parameters + gradients + optimizerStates + buffers + inputs +
           activations + communicationBuffers;
  }
  int64_t communicationBytes() const {
    int64_t total = 0;
    for (const Collective &c : collectives)
      total += c.bytes;
    return total;
  }
  int64_t intraNodeBytes() const {
    int64_t total = 0;
    for (const Collective &c : collectives)
      total += c.intraNodeBytes;
    return total;
  }
  int64_t interNodeBytes() const {
    int64_t total = 0;
    for (const Collective &c : collectives)
      total += c.interNodeBytes;
    return total;
  }
};

/// Prices the step of `module` per rank (any stage of the pipeline).
mlir::FailureOr<Report> analyzeStep(mlir::ModuleOp module);

} // namespace ztrain::dist::report

#endif // ZTRAIN_LIB_DIALECT_DIST_TRANSFORMS_ZEROREPORT_H
