//===- PlanSearch.cpp - The plan under a memory budget --------------------===//
//
// Part of the ztrain project.
//
// Every candidate is compiled, not estimated: the training pipeline once per
// recompute policy, then for each ZeRO plan the zero pipeline and
// plan-memory on a copy, and zero-report's analysis of the result. The
// predicted peak of the chosen plan is therefore exactly what its
// executable allocates (the report-is-the-truth tests hold for every
// candidate), and only the time is a model. This file is the search and
// the plan-search pass; PlanSearchPrint.cpp prints the result.
//
//===----------------------------------------------------------------------===//

#include "ztrain/PlanSearch.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/ElementType.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"
#include "ztrain/Transforms/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ToolOutputFile.h"

#include <algorithm>
#include <chrono>
#include <cmath>

using namespace mlir;
using namespace ztrain;

bool ztrain::parseByteSize(StringRef text, int64_t &bytes) {
  text = text.trim();
  static const std::pair<StringRef, double> units[] = {
      {"KiB", 1024.0},  {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0},             {"KB", 1e3},
      {"MB", 1e6},      {"GB", 1e9},        {"TB", 1e12},
      {"B", 1.0}};
  double scale = 1.0;
  for (auto [suffix, factor] : units)
    if (text.ends_with_insensitive(suffix)) {
      text = text.drop_back(suffix.size()).rtrim();
      scale = factor;
      break;
    }
  double value;
  if (text.empty() || text.getAsDouble(value) || !std::isfinite(value) ||
      value <= 0)
    return false;
  double total = value * scale;
  if (total >= 9.2e18 || total < 1)
    return false;
  bytes = static_cast<int64_t>(total);
  return true;
}

std::string ztrain::checkCostModel(const CostModel &m, StringRef prefix) {
  auto positive = [](double v) { return v > 0 && std::isfinite(v); };
  if (positive(m.linkBytesPerSecond) && positive(m.deviceFlopsPerSecond) &&
      positive(m.device16FlopsPerSecond) && positive(m.memoryBytesPerSecond) &&
      positive(m.nvmeBytesPerSecond) && positive(m.hostLinkBytesPerSecond) &&
      positive(m.hostMemoryBytesPerSecond) && m.collectiveLatency >= 0 &&
      std::isfinite(m.collectiveLatency) &&
      m.interNodeLinkBytesPerSecond >= 0 &&
      std::isfinite(m.interNodeLinkBytesPerSecond))
    return "";
  return (prefix + "link-gbps, " + prefix + "device-tflops, " + prefix +
          "device-tflops-16bit, " + prefix + "memory-gbps, " + prefix +
          "nvme-gbps, " + prefix + "host-link-gbps and " + prefix +
          "host-memory-gbps must be positive and " + prefix +
          "latency-us and " + prefix + "inter-node-link-gbps non-negative")
      .str();
}

void ztrain::applyPlanChoice(const PlanChoice &c,
                             TrainingPipelineOptions &training,
                             ZeroPipelineOptions &zero) {
  training.precision = *symbolize<Precision>(c.precision);
  training.recompute = *symbolize<RecomputePolicy>(c.recompute);
  training.lossTileBytes = c.lossTileBytes;
  zero.stage = c.stage;
  zero.dpReplicate = c.replicate;
  zero.dpShard = 0;
  zero.maxTileBytes = c.maxTileBytes;
  zero.overlap = c.overlap;
  zero.prefetchDepth = c.prefetchDepth;
  zero.reshardAfterForward = c.reshardAfterForward;
  zero.offloadOptimizer = *symbolize<OffloadPlacement>(c.offloadOptimizer);
  zero.offloadParam = *symbolize<OffloadPlacement>(c.offloadParam);
  zero.offloadActivations =
      *symbolize<ActivationPlacement>(c.offloadActivations);
  zero.offloadRatio = c.offloadRatio;
  zero.offloadParamRatio = c.offloadParamRatio;
}

namespace {
/// The values one dimension takes: the user's, or the searched ones.
template <typename T>
SmallVector<T> valuesOf(bool fixed, T given, ArrayRef<T> searched) {
  if (fixed)
    return {given};
  return SmallVector<T>(searched.begin(), searched.end());
}

/// An offload placement of the search: where optimizer states, parameters
/// and checkpointed activations live, and the fractions placed.
struct Placement {
  std::string optimizer, param;
  double ratio;
  std::string activations = "none";
  double paramRatio = 1.0;
};
} // namespace

/// The placements tried when nothing fits on the device alone.
static SmallVector<Placement>
offloadPlacements(const PlanSearchRequest &request, bool deviceBackend,
                  double givenParamRatio) {
  SmallVector<Placement> placements;
  // Part of the optimizer states first (the least I/O that fits wins
  // on time), all of them, then the parameters too.
  SmallVector<double> ratios = valuesOf<double>(
      request.offloadRatio > 0, request.offloadRatio, {0.25, 0.5, 1.0});
  // A device backend first tries host memory, which the host link
  // reaches faster than nvme: the checkpointed activations (Pa+cpu),
  // the optimizer states, both. (On the cpu backend host memory is the
  // device's: moving there saves nothing.)
  if (deviceBackend) {
    placements.push_back({"none", "none", 1.0, "cpu"});
    for (double r : ratios)
      placements.push_back({"cpu", "none", r});
    placements.push_back({"cpu", "none", 1.0, "cpu"});
    // Stage 3: the parameter shards too (ZeRO-Offload's offload_param),
    // half of them first.
    for (double pr : valuesOf<double>(request.offloadParamRatio > 0,
                                      request.offloadParamRatio, {0.5, 1.0}))
      placements.push_back({"cpu", "cpu", 1.0, "none", pr});
    placements.push_back({"cpu", "cpu", 1.0, "cpu", givenParamRatio});
  }
  for (double r : ratios)
    placements.push_back({"nvme", "none", r});
  placements.push_back({"nvme", "nvme", 1.0, "none", givenParamRatio});
  if (deviceBackend)
    placements.push_back({"nvme", "nvme", 1.0, "cpu", givenParamRatio});
  return placements;
}

/// Compiles one candidate from the partitioned step (a copy): the zero
/// schedule and plan-memory, then zero-report's analysis.
static FailureOr<dist::StepSummary>
compileCandidate(ModuleOp partitioned, const PlanChoice &choice,
                 const ZeroPipelineOptions &zero, int64_t dp,
                 std::string &firstError) {
  OwningOpRef<ModuleOp> plan = cast<ModuleOp>(partitioned->clone());
  ZeroPipelineOptions z;
  z.copyOptionValuesFrom(zero);
  TrainingPipelineOptions unused;
  applyPlanChoice(choice, unused, z);
  PassManager zpm(partitioned.getContext());
  zpm.enableVerifier(false);
  if (dp != 1 || choice.stage != 0)
    buildZeroSchedulePipeline(zpm, z);
  else
    addZeroOffload(zpm, z); // one process: placement only
  zpm.addPass(dist::createPlanMemory());
  firstError.clear();
  FailureOr<dist::StepSummary> s = failure();
  if (succeeded(zpm.run(*plan)))
    s = dist::summarizeStep(*plan);
  return s;
}

/// The cost model: the candidate's time and whether it fits, from its
/// compiled summary.
static void priceCandidate(PlanCandidate &c, const dist::StepSummary &s,
                           const PlanSearchRequest &request) {
  const bool deviceBackend = request.hostBudget > 0;
  c.peak = s.predictedPeak;
  c.activations = s.activations;
  c.communicationBytes = s.communicationBytes;
  c.collectives = s.collectives;
  c.flops = s.modelFlops;
  c.recomputeFlops = s.recomputeFlops;
  c.kernelBytes = s.kernelBytes;
  c.recomputeKernelBytes = s.recomputeKernelBytes;
  const CostModel &m = request.cost;
  c.computeSeconds =
      (double)(c.flops + c.recomputeFlops) / (c.choice.precision == "fp32"
                                                  ? m.deviceFlopsPerSecond
                                                  : m.device16FlopsPerSecond) +
      (double)(c.kernelBytes + c.recomputeKernelBytes) / m.memoryBytesPerSecond;
  c.intraNodeBytes = s.intraNodeBytes;
  c.interNodeBytes = s.interNodeBytes;
  c.communicationSeconds =
      (m.interNodeLinkBytesPerSecond > 0
           ? (double)c.intraNodeBytes / m.linkBytesPerSecond +
                 (double)c.interNodeBytes / m.interNodeLinkBytesPerSecond
           : (double)c.communicationBytes / m.linkBytesPerSecond) +
      (double)c.collectives * m.collectiveLatency;
  c.stepSeconds = c.choice.overlap
                      ? std::max(c.computeSeconds, c.communicationSeconds)
                      : c.computeSeconds + c.communicationSeconds;
  // Swaps: counted in full (the optimizer phase's are mostly
  // exposed; the first reads hide behind the passes).
  c.hostBytes = s.hostBytes;
  c.ioBytes = s.nvmeTransferBytes;
  c.ioSeconds = (double)c.ioBytes / m.nvmeBytesPerSecond;
  c.stepSeconds += c.ioSeconds;
  c.devicePeak = s.devicePeak;
  c.hostLinkBytes = s.hostLinkBytes;
  if (deviceBackend) {
    // The host link's bytes, counted in full as the swaps are
    // (the updates over mapped memory wait for them; the
    // activation copies overlap the passes only in part).
    c.hostLinkSeconds = (double)c.hostLinkBytes / m.hostLinkBytesPerSecond;
    // Host- and nvme-placed optimizer states are stepped on
    // the host (ZeRO-Offload's and ZeRO-Infinity's CPU step),
    // through a pinned buffer.
    c.hostStepSeconds = (double)s.hostStepBytes / m.hostMemoryBytesPerSecond;
    c.hostBytes += s.hostStepBuffers;
    c.stepSeconds += c.hostLinkSeconds + c.hostStepSeconds;
    c.fits =
        c.devicePeak <= request.budget && c.hostBytes <= request.hostBudget;
  } else {
    c.fits = c.peak + c.hostBytes <= request.budget;
  }
}

/// The fastest that fits; among equally fast, the smaller peak, then the
/// simpler plan (the order tried: lower stage, less recompute, no tiling,
/// no overlap first). Also the smallest peak and host bytes, for the
/// message when none fits.
static void choosePlan(PlanSearchResult &result,
                       const PlanSearchRequest &request) {
  const bool deviceBackend = request.hostBudget > 0;
  for (auto [i, c] : llvm::enumerate(result.candidates)) {
    if (!c.error.empty())
      continue;
    // What the budget bounds: the device's peak for a device backend (of
    // the plans whose host memory fits), else the one memory's.
    const bool counted = !deviceBackend || c.hostBytes <= request.hostBudget;
    const int64_t bounded = deviceBackend ? c.devicePeak : c.peak + c.hostBytes;
    if (counted && (result.smallestPeak < 0 || bounded < result.smallestPeak))
      result.smallestPeak = bounded;
    if (result.smallestHost < 0 || c.hostBytes < result.smallestHost)
      result.smallestHost = c.hostBytes;
    if (!c.fits)
      continue;
    if (result.chosen < 0) {
      result.chosen = i;
      continue;
    }
    const PlanCandidate &best = result.candidates[result.chosen];
    if (c.stepSeconds < best.stepSeconds * (1 - 1e-9) ||
        (c.stepSeconds <= best.stepSeconds * (1 + 1e-9) && c.peak < best.peak))
      result.chosen = i;
  }
}

/// Partitions a copy of the trained step at `stage` (zero-partition and
/// its collectives depend on the stage alone); `error` says why it failed.
static OwningOpRef<ModuleOp> partitionStep(ModuleOp trained, int64_t stage,
                                           int64_t replicate,
                                           const ZeroPipelineOptions &zero,
                                           std::string &firstError,
                                           std::string &error) {
  OwningOpRef<ModuleOp> partitioned = cast<ModuleOp>(trained->clone());
  if (zero.dp != 1 || stage != 0) {
    ZeroPipelineOptions z;
    z.copyOptionValuesFrom(zero);
    z.stage = stage;
    z.dpReplicate = replicate;
    z.dpShard = 0;
    PassManager ppm(trained.getContext());
    ppm.enableVerifier(false);
    buildZeroPartitionPipeline(ppm, z);
    firstError.clear();
    if (failed(ppm.run(*partitioned)))
      error = firstError.empty() ? "does not compile" : firstError;
  }
  return partitioned;
}

/// Whether a placement is a candidate at this stage and recompute policy.
static bool placementApplies(const Placement &placement, int64_t stage,
                             StringRef policy, int64_t dp,
                             const PlanSearchRequest &request) {
  if (placement.param != "none" && stage != 3)
    return false;
  // One rank at stage 3 only for the parameters' placement
  // (the stage itself partitions nothing there).
  if (dp == 1 && stage == 3 && request.stage < 0 && placement.param == "none")
    return false;
  // Pa+cpu moves what recomputation reads: nothing without it.
  if (placement.activations != "none" && policy == "none")
    return false;
  return true;
}

/// The candidates of one precision and recompute policy: the training
/// pipeline once, then every stage (partitioned once per stage), tiling
/// bound, schedule and placement, each compiled on a copy and priced,
/// appended to `result`.
static void
addCandidates(ModuleOp forward, const TrainingPipelineOptions &training,
              const ZeroPipelineOptions &zero, const PlanSearchRequest &request,
              const std::string &precision, const std::string &policy,
              int64_t lossTile, ArrayRef<int64_t> stages,
              ArrayRef<Placement> placements, std::string &firstError,
              PlanSearchResult &result) {
  const int64_t dp = zero.dp;
  OwningOpRef<ModuleOp> trained = cast<ModuleOp>(forward->clone());
  TrainingPipelineOptions t;
  t.copyOptionValuesFrom(training);
  t.precision = *symbolize<Precision>(precision);
  t.recompute = *symbolize<RecomputePolicy>(policy);
  t.lossTileBytes = lossTile;
  PassManager pm(forward.getContext());
  pm.enableVerifier(false);
  buildTrainingPipeline(pm, t);
  firstError.clear();
  bool trainedOk = succeeded(pm.run(*trained));
  std::string trainError = firstError;

  // Tiling bounds: none, and half and a quarter of the largest
  // parameter (stage 3 only: tiles split what stage 3 gathers).
  int64_t largest = 0;
  if (trainedOk)
    for (auto p : trained->getOps<train::ParamOp>())
      largest = std::max(largest, ztrain::tensorBytes(p.getTensorType()));
  // Hybrid sharding: flat, and a shard group per node, when the cost model
  // knows the link between nodes (partitioned stages only).
  const int64_t node = zero.ranksPerNode;
  const bool meshes = request.cost.interNodeLinkBytesPerSecond > 0 &&
                      node >= 2 && node < dp && dp % node == 0;
  for (int64_t stage : stages)
    for (int64_t replicate : valuesOf<int64_t>(
             request.replicate >= 0, request.replicate,
             meshes && stage >= 1 ? ArrayRef<int64_t>{1, dp / node}
                                  : ArrayRef<int64_t>{1})) {
      bool stage3 = stage == 3;
      std::string partitionError;
      OwningOpRef<ModuleOp> partitioned;
      if (trainedOk)
        partitioned = partitionStep(*trained, stage, replicate, zero,
                                    firstError, partitionError);
      SmallVector<int64_t> tiles =
          valuesOf<int64_t>(request.maxTileBytes >= 0, request.maxTileBytes,
                            stage3 && largest >= 4
                                ? ArrayRef<int64_t>{0, largest / 2, largest / 4}
                                : ArrayRef<int64_t>{0});
      SmallVector<int> overlaps =
          valuesOf<int>(request.overlap >= 0, request.overlap,
                        dp > 1 ? ArrayRef<int>{0, 1} : ArrayRef<int>{0});
      for (int64_t tile : tiles)
        for (int overlap : overlaps) {
          SmallVector<int64_t> prefetches = valuesOf<int64_t>(
              request.prefetchDepth >= 0, request.prefetchDepth,
              stage3 && overlap ? ArrayRef<int64_t>{1, 2}
                                : ArrayRef<int64_t>{zero.prefetchDepth});
          // Resharding is the overlap schedule's choice (without it the
          // gathers are synchronous and freed after each use).
          SmallVector<int> reshards = valuesOf<int>(
              request.reshardAfterForward >= 0, request.reshardAfterForward,
              stage3 && overlap
                  ? ArrayRef<int>{1, 0}
                  : ArrayRef<int>{zero.reshardAfterForward ? 1 : 0});
          for (int64_t prefetch : prefetches)
            for (int reshard : reshards)
              for (const Placement &placement : placements) {
                if (!placementApplies(placement, stage, policy, dp, request))
                  continue;
                PlanCandidate c;
                c.choice = {precision,
                            stage,
                            replicate,
                            policy,
                            tile,
                            lossTile,
                            overlap != 0,
                            prefetch,
                            reshard != 0,
                            placement.optimizer,
                            placement.param,
                            placement.activations,
                            placement.ratio,
                            placement.paramRatio};
                if (!trainedOk || !partitionError.empty()) {
                  c.error = trainedOk ? partitionError : trainError;
                  result.candidates.push_back(std::move(c));
                  continue;
                }
                FailureOr<dist::StepSummary> s = compileCandidate(
                    *partitioned, c.choice, zero, dp, firstError);
                if (failed(s)) {
                  c.error =
                      firstError.empty() ? "does not compile" : firstError;
                  result.candidates.push_back(std::move(c));
                  continue;
                }
                priceCandidate(c, *s, request);
                result.candidates.push_back(std::move(c));
              }
        }
    }
}

FailureOr<PlanSearchResult>
ztrain::searchPlan(ModuleOp forward, const TrainingPipelineOptions &training,
                   const ZeroPipelineOptions &zero,
                   const PlanSearchRequest &request) {
  auto started = std::chrono::steady_clock::now();
  MLIRContext *ctx = forward.getContext();
  PlanSearchResult result;
  const int64_t dp = zero.dp;

  // Candidates fail quietly (a policy with nothing to recompute, a tile
  // bound that splits nothing): their first error is recorded in the
  // table, and warnings are the compile's business, not the search's.
  std::string firstError;
  ScopedDiagnosticHandler quiet(ctx, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error && firstError.empty())
      firstError = d.str();
    return success();
  });

  SmallVector<std::string> policies =
      valuesOf<std::string>(!request.recompute.empty(), request.recompute,
                            {"none", "selective", "full"});
  // The loss in tiles (train-tile-loss): untiled, and eighths of the
  // loss's f32 logits when they are big enough to matter (1 MiB or more).
  int64_t logitsBytes = 0;
  forward.walk([&](train::CrossEntropyOp ce) {
    auto type = cast<RankedTensorType>(ce.getLogits().getType());
    logitsBytes = std::max(logitsBytes, type.getNumElements() * 4);
  });
  SmallVector<int64_t> lossTiles = valuesOf<int64_t>(
      request.lossTileBytes >= 0, request.lossTileBytes,
      logitsBytes >= (int64_t(1) << 20) ? ArrayRef<int64_t>{0, logitsBytes / 8}
                                        : ArrayRef<int64_t>{0});
  SmallVector<int64_t> stages =
      valuesOf<int64_t>(request.stage >= 0, request.stage,
                        dp > 1 ? ArrayRef<int64_t>{0, 1, 2, 3}
                               : ArrayRef<int64_t>{0});

  // Offload placements: the user's, else none first, and optimizer states
  // (then, at stage 3, parameters too) on nvme only when nothing fits
  // without: offload trades step time for memory.
  const bool deviceBackend = request.hostBudget > 0;
  const bool placementFixed = !request.offloadOptimizer.empty() ||
                              !request.offloadParam.empty() ||
                              !request.offloadActivations.empty();
  auto orNone = [](const std::string &v) { return v.empty() ? "none" : v; };
  const double givenRatio = request.offloadRatio > 0 ? request.offloadRatio
                                                     : 1.0;
  const double givenParamRatio =
      request.offloadParamRatio > 0 ? request.offloadParamRatio : 1.0;
  SmallVector<Placement> placements{
      placementFixed
          ? Placement{orNone(request.offloadOptimizer),
                      orNone(request.offloadParam), givenRatio,
                      orNone(request.offloadActivations), givenParamRatio}
          : Placement{"none", "none", 1.0}};
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      if (placementFixed ||
          llvm::any_of(result.candidates,
                       [](const PlanCandidate &c) { return c.fits; }))
        break;
      placements = offloadPlacements(request, deviceBackend, givenParamRatio);
      // Parameters off the device need stage 3, which one rank can use too.
      if (request.stage < 0 && dp == 1)
        stages = {0, 3};
    }
    // The precision: the user's, or fp32 then bf16 when asked to choose.
    SmallVector<std::string> precisions =
        request.searchPrecision
            ? SmallVector<std::string>{"fp32", "bf16"}
            : SmallVector<std::string>{
                  stringify<Precision>(training.precision).str()};
    for (const std::string &precision : precisions)
      for (const std::string &policy : policies)
        for (int64_t lossTile : lossTiles)
          addCandidates(forward, training, zero, request, precision, policy,
                        lossTile, stages, placements, firstError, result);
  }

  choosePlan(result, request);
  result.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - started)
                       .count();
  const bool anyCompiled = llvm::any_of(
      result.candidates, [](const PlanCandidate &c) { return c.error.empty(); });
  if (!anyCompiled) {
    std::string why = result.candidates.empty()
                          ? std::string("no candidate")
                          : result.candidates.front().error;
    forward.emitError() << "plan search: no candidate plan compiles: " << why;
    return failure();
  }
  return result;
}

//===----------------------------------------------------------------------===//
// plan-search: the search as a pass (prints, changes nothing)
//===----------------------------------------------------------------------===//

namespace ztrain {
#define GEN_PASS_DEF_PLANSEARCH
#include "ztrain/Transforms/Passes.h.inc"
} // namespace ztrain

namespace {
struct PlanSearchPass : public ztrain::impl::PlanSearchBase<PlanSearchPass> {
  using PlanSearchBase::PlanSearchBase;
  void runOnOperation() override;
};
} // namespace

void PlanSearchPass::runOnOperation() {
  ModuleOp module = getOperation();
  PlanSearchRequest request;
  if (!parseByteSize(memoryBudget, request.budget)) {
    module.emitError() << "plan-search: memory-budget must be a size in bytes "
                          "(1e10, 16GB, 16GiB), got '"
                       << memoryBudget << "'";
    return signalPassFailure();
  }
  request.cost.linkBytesPerSecond = linkGBps * 1e9;
  request.cost.deviceFlopsPerSecond = deviceTflops * 1e12;
  request.cost.device16FlopsPerSecond = device16Tflops * 1e12;
  request.cost.collectiveLatency = latencyUs * 1e-6;
  request.cost.memoryBytesPerSecond = memoryGBps * 1e9;
  request.cost.nvmeBytesPerSecond = nvmeGBps * 1e9;
  request.cost.hostLinkBytesPerSecond = hostLinkGBps * 1e9;
  request.cost.hostMemoryBytesPerSecond = hostMemoryGBps * 1e9;
  request.cost.interNodeLinkBytesPerSecond = interNodeLinkGBps * 1e9;
  if (!hostMemoryBudget.empty() &&
      !parseByteSize(hostMemoryBudget, request.hostBudget)) {
    module.emitError() << "plan-search: host-memory-budget must be a size in "
                          "bytes (1e10, 64GB, 64GiB), got '"
                       << hostMemoryBudget << "'";
    return signalPassFailure();
  }
  if (std::string error = checkCostModel(request.cost, ""); !error.empty()) {
    module.emitError() << "plan-search: " << error;
    return signalPassFailure();
  }
  if (dp < 1) {
    module.emitError() << "plan-search: dp must be >= 1, got " << dp;
    return signalPassFailure();
  }
  TrainingPipelineOptions training;
  ZeroPipelineOptions zero;
  // auto: the search chooses fp32 or bf16.
  request.searchPrecision = precision == Precision::automatic;
  training.precision =
      request.searchPrecision ? Precision::fp32 : Precision(precision);
  training.optimizer = optimizer;
  zero.dp = dp;
  zero.ranksPerNode = ranksPerNode;
  FailureOr<PlanSearchResult> result =
      searchPlan(module, training, zero, request);
  if (failed(result))
    return signalPassFailure();
  std::string err;
  auto out = openOutputFile(output, &err);
  if (!out) {
    module.emitError() << "plan-search: " << err;
    return signalPassFailure();
  }
  if (format == OutputFormat::json)
    printPlanSearchJson(out->os(), *result, request, training, zero);
  else
    printPlanSearch(out->os(), *result, request, training, zero);
  out->keep();
  if (result->chosen < 0) {
    module.emitError() << "plan-search: no plan fits "
                       << describeNoFit(*result, request);
    return signalPassFailure();
  }
  markAllAnalysesPreserved();
}
