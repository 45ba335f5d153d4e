//===- PlanSearch.h - The plan under a memory budget ------------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//
//
// Given a model (forward + loss), the data-parallel degree and a memory
// budget per rank, compile every candidate plan (ZeRO stage, recompute
// policy, tiling bound, overlap with its prefetch depth and resharding) up
// to plan-memory, price it with zero-report's exact bytes and a cost model
// (bytes sent over a link bandwidth plus a latency per collective; matmul
// FLOPs over a device rate plus the other kernels' bytes over a memory
// bandwidth; overlapped plans take the larger of the two),
// and choose the fastest plan whose predicted peak fits. When none fits,
// the same search again with optimizer states on nvme, and at stage 3 with
// parameters there too (zero-offload), their swaps priced over an nvme
// bandwidth. With a host budget the plan is for a device backend: the
// device's memory and the host's are budgeted apart, and the offload round
// also tries host memory (optimizer states, parameters, and the
// activations recomputation reads: ZeRO-R's Pa+cpu), priced over the host
// link. With an inter-node link (and ranks per node) bytes are priced by
// link class and hybrid sharding, one shard group per node, is a candidate
// of the partitioned stages. The precision is the user's unless they ask the
// search to choose it (precision=auto: fp32 or bf16, its matmuls priced at a
// 16-bit device rate).
//
// Used by ztrain-compile --memory-budget (which then compiles the choice)
// and by the plan-search pass (which only prints the search).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_PLANSEARCH_H
#define ZTRAIN_PLANSEARCH_H

#include "ztrain/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace ztrain {

struct CostModel {
  /// Bytes per second one rank sends (ring algorithms: what zero-report
  /// counts per rank).
  double linkBytesPerSecond = 25e9;
  /// Bytes per second one rank sends to ranks on other nodes (0: not
  /// modelled, every byte at linkBytesPerSecond). When set, a plan's bytes
  /// are priced by link class (zero-report's intra- and inter-node wire
  /// bytes, with the zero options' ranks-per-node) and the search also
  /// tries hybrid sharding with a shard group per node.
  double interNodeLinkBytesPerSecond = 0;
  /// Seconds per collective beyond its bytes.
  double collectiveLatency = 10e-6;
  /// Matmul FLOPs per second of one rank's device, float32.
  double deviceFlopsPerSecond = 100e12;
  /// The same for bf16 / fp16 matmuls (float32 accumulation), for plans
  /// whose precision the search chooses (the tensor cores' rate is a
  /// multiple of float32's: 2x TF32's on A100 and H100).
  double device16FlopsPerSecond = 200e12;
  /// Bytes per second the other kernels (elementwise, norms, softmax)
  /// move through the device's memory.
  double memoryBytesPerSecond = 2e12;
  /// Bytes per second one rank reads or writes its swap directory
  /// (offloaded plans).
  double nvmeBytesPerSecond = 2e9;
  /// Bytes per second between one rank's device and host memory, each way
  /// (PCIe): what host-placed states, offloaded activations and swap
  /// copies cost on a device backend (plans with a host budget).
  double hostLinkBytesPerSecond = 25e9;
  /// Bytes per second the host's optimizer step (ZeRO-Offload's CPU step,
  /// host-placed optimizer states on a device backend) reads and writes in
  /// host memory: the step is bound by host memory bandwidth.
  double hostMemoryBytesPerSecond = 50e9;
};

/// The dimensions the search varies. A field the user fixed (given on the
/// command line) is searched over that one value only.
struct PlanChoice {
  /// ztrain-training's precision: the user's, or fp32 / bf16 when the user
  /// hands the choice to the search (PlanSearchRequest::searchPrecision).
  std::string precision = "fp32";
  int64_t stage = 0;
  /// Hybrid sharding's replicas (--dp-replicate; 1: flat ZeRO).
  int64_t replicate = 1;
  std::string recompute = "none";
  int64_t maxTileBytes = 0;
  /// train-tile-loss's bound on a tile of the loss's logits (0: untiled).
  int64_t lossTileBytes = 0;
  bool overlap = false;
  int64_t prefetchDepth = 1;
  bool reshardAfterForward = true;
  /// zero-offload's placements: "none" or "nvme" (what the search tries
  /// when no plan fits without offload), or the user's.
  std::string offloadOptimizer = "none", offloadParam = "none";
  /// ZeRO-R's Pa+cpu: the activations recomputation reads kept in host
  /// memory ("cpu"); searched only for a device backend (a host budget).
  std::string offloadActivations = "none";
  /// The fraction of the optimizer states' bytes offloaded (partial
  /// offload when < 1).
  double offloadRatio = 1.0;
  /// The fraction of the parameter shards' bytes offloaded (stage 3).
  double offloadParamRatio = 1.0;
};

struct PlanCandidate {
  PlanChoice choice;
  /// Empty when the plan compiled; otherwise why it did not (a policy with
  /// nothing to recompute, ...).
  std::string error;
  int64_t peak = 0, activations = 0, communicationBytes = 0, collectives = 0;
  /// The wire bytes per step by link class (zero-report's links).
  int64_t intraNodeBytes = 0, interNodeBytes = 0;
  int64_t flops = 0, recomputeFlops = 0;
  int64_t kernelBytes = 0, recomputeKernelBytes = 0;
  /// Offload: host memory (swap buffers, host-resident states), which the
  /// budget counts too (on the cpu backend it is the same memory), and the
  /// bytes read from and written to nvme per step.
  int64_t hostBytes = 0, ioBytes = 0;
  /// On a device backend: the device's peak (with the swap buffers' device
  /// copies) and the bytes crossing the host link per step.
  int64_t devicePeak = 0, hostLinkBytes = 0;
  double computeSeconds = 0, communicationSeconds = 0, ioSeconds = 0;
  double hostLinkSeconds = 0;
  /// The host's optimizer steps (device backend, host-placed states).
  double hostStepSeconds = 0;
  double stepSeconds = 0;
  bool fits = false;
};

struct PlanSearchRequest {
  int64_t budget = 0; // bytes per rank
  /// 0: one memory (the cpu backend): `budget` bounds the device peak plus
  /// the host buffers of offload. Otherwise the plan is for a device
  /// backend: `budget` bounds the device's peak (swap buffers' device
  /// copies included) and this the host memory of offload, the host link
  /// is priced, and the offload round also tries host placements
  /// (optimizer states, parameters, Pa+cpu activations).
  int64_t hostBudget = 0;
  CostModel cost;
  /// Search the precision too (fp32, then bf16), the user's
  /// `--precision=auto`: it changes the numbers a run computes, so only
  /// when asked.
  bool searchPrecision = false;
  /// Fixed dimensions: -1 / empty / unset = searched.
  int64_t stage = -1;
  /// --dp-replicate (searched, over flat and one shard group per node, only
  /// with an inter-node link in the cost model).
  int64_t replicate = -1;
  std::string recompute;
  int64_t maxTileBytes = -1;
  int64_t lossTileBytes = -1;
  int overlap = -1;
  int64_t prefetchDepth = -1;
  int reshardAfterForward = -1;
  /// Offload placements the user gave (empty: searched, and only when no
  /// plan fits without offload), and the ratio (< 0: searched).
  std::string offloadOptimizer, offloadParam, offloadActivations;
  double offloadRatio = -1;
  double offloadParamRatio = -1;
};

struct PlanSearchResult {
  std::vector<PlanCandidate> candidates; // in the order they were tried
  int chosen = -1;                       // index into candidates, -1: none fits
  /// Of the plans that compiled: the smallest of what `budget` bounds (for
  /// a device backend, the device peak of the plans whose host memory
  /// fits; -1 when none does), and the least host memory any needs.
  int64_t smallestPeak = -1;
  int64_t smallestHost = -1;
  double seconds = 0;                    // wall time of the search
};

/// Runs the search on a copy of `forward` (left unchanged). The other
/// options of `training` and `zero` (precision, optimizer, dp, bucket size,
/// ...) are the user's and stay as they are. Fails (after an error at the
/// module) only when no candidate compiles at all.
mlir::FailureOr<PlanSearchResult>
searchPlan(mlir::ModuleOp forward, const TrainingPipelineOptions &training,
           const ZeroPipelineOptions &zero, const PlanSearchRequest &request);

/// Why nothing fits, after "no plan fits ": the budget and the smallest
/// achievable peak ("500 bytes per rank; the smallest predicted peak is
/// 828 bytes (0.00 GB)"), for a device backend the device's or, when no
/// plan's host memory fits, the host's.
std::string describeNoFit(const PlanSearchResult &result,
                          const PlanSearchRequest &request);

/// Copies a choice into the pipeline options.
void applyPlanChoice(const PlanChoice &choice,
                     TrainingPipelineOptions &training,
                     ZeroPipelineOptions &zero);

/// The candidates as a table, the chosen plan and its pipeline string, or
/// the line naming the smallest achievable peak when nothing fits.
void printPlanSearch(llvm::raw_ostream &os, const PlanSearchResult &result,
                     const PlanSearchRequest &request,
                     const TrainingPipelineOptions &training,
                     const ZeroPipelineOptions &zero);

/// The same as JSON: every candidate with its numbers (or its error), the
/// chosen index (null when none fits), the smallest peak, the pipeline.
void printPlanSearchJson(llvm::raw_ostream &os,
                         const PlanSearchResult &result,
                         const PlanSearchRequest &request,
                         const TrainingPipelineOptions &training,
                         const ZeroPipelineOptions &zero);

/// The error in a cost model's numbers ("" when they are usable), in the
/// flags' names with `prefix` ("--" for ztrain-compile, "" for the pass).
std::string checkCostModel(const CostModel &model, llvm::StringRef prefix);

/// "16GB", "16GiB", "1.5e10", "512MiB", "1024" -> bytes; false when not a
/// size.
bool parseByteSize(llvm::StringRef text, int64_t &bytes);

} // namespace ztrain

#endif // ZTRAIN_PLANSEARCH_H
