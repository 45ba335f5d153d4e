//===- PlanSearchPrint.cpp - plan-search's table and JSON -----------------===//
//
// Part of the ztrain project.
//
// What plan-search tells: the candidates it compiled with their predicted
// peaks and times, the choice as flags and as one pipeline string, and why
// none fits when none does; as a table or as JSON.
//
//===----------------------------------------------------------------------===//

#include "ztrain/PlanSearch.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>

using namespace mlir;
using namespace ztrain;

/// A decimal unit that shows `magnitude` with a few digits: {name, scale}.
static std::pair<const char *, double> unitFor(double magnitude,
                                               bool flops = false) {
  if (magnitude >= (flops ? 1e12 : 1e9))
    return {flops ? "TFLOP" : "GB", flops ? 1e12 : 1e9};
  if (magnitude >= (flops ? 1e9 : 1e6))
    return {flops ? "GFLOP" : "MB", flops ? 1e9 : 1e6};
  return {flops ? "MFLOP" : "kB", flops ? 1e6 : 1e3};
}

/// `bytes` exactly, then in the decimal unit that suits it:
/// "3845636 bytes (3.85 MB)".
static std::string sized(int64_t bytes) {
  auto [unit, scale] = unitFor((double)bytes);
  return llvm::formatv("{0} bytes ({1:F2} {2})", bytes, bytes / scale, unit)
      .str();
}

std::string ztrain::describeNoFit(const PlanSearchResult &result,
                                  const PlanSearchRequest &request) {
  if (request.hostBudget <= 0)
    return llvm::formatv("{0} bytes per rank; the smallest predicted peak is "
                         "{1}",
                         request.budget, sized(result.smallestPeak));
  if (result.smallestPeak < 0)
    return llvm::formatv("{0} bytes of host memory per rank; the least any "
                         "plan needs is {1}",
                         request.hostBudget, sized(result.smallestHost));
  return llvm::formatv("{0} bytes of device memory per rank (with {1} bytes of "
                       "host memory); the smallest device peak is {2}",
                       request.budget, request.hostBudget,
                       sized(result.smallestPeak));
}

/// The ztrain-compile flags of a choice (its precision when the search
/// chose it).
static std::string flagsOf(const PlanChoice &c, int64_t dp,
                           bool withPrecision) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (withPrecision)
    os << "--precision=" << c.precision << ' ';
  if (dp > 1 || c.stage != 0)
    os << "--zero-stage=" << c.stage << ' ';
  if (c.replicate > 1)
    os << "--dp-replicate=" << c.replicate << ' ';
  os << "--recompute=" << c.recompute;
  if (c.maxTileBytes > 0)
    os << " --max-tile-bytes=" << c.maxTileBytes;
  if (c.lossTileBytes > 0)
    os << " --loss-tile-bytes=" << c.lossTileBytes;
  if (c.overlap) {
    os << " --overlap";
    if (c.stage == 3)
      os << " --prefetch-depth=" << c.prefetchDepth;
  }
  if (c.stage == 3 && !c.reshardAfterForward)
    os << " --reshard-after-forward=false";
  if (c.offloadOptimizer != "none")
    os << " --offload-optimizer=" << c.offloadOptimizer;
  if (c.offloadOptimizer != "none" && c.offloadRatio < 1.0)
    os << " --offload-ratio=" << llvm::format("%g", c.offloadRatio);
  if (c.offloadParam != "none")
    os << " --offload-param=" << c.offloadParam;
  if (c.offloadParam != "none" && c.offloadParamRatio < 1.0)
    os << " --offload-param-ratio=" << llvm::format("%g", c.offloadParamRatio);
  if (c.offloadActivations != "none")
    os << " --offload-activations=" << c.offloadActivations;
  return s;
}

/// The whole compilation of a choice as one --pass-pipeline string.
static std::string pipelineOf(const PlanChoice &choice,
                              const TrainingPipelineOptions &training,
                              const ZeroPipelineOptions &zero) {
  TrainingPipelineOptions t;
  t.copyOptionValuesFrom(training);
  ZeroPipelineOptions z;
  z.copyOptionValuesFrom(zero);
  applyPlanChoice(choice, t, z);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "builtin.module(ztrain-training";
  t.print(os);
  if (zero.dp != 1 || choice.stage != 0) {
    os << ",ztrain-zero";
    z.print(os);
  } else if (choice.offloadOptimizer != "none" ||
             choice.offloadParam != "none" ||
             choice.offloadActivations != "none") {
    os << ",zero-offload{optimizer=" << choice.offloadOptimizer
       << " param=" << choice.offloadParam
       << " activations=" << choice.offloadActivations
       << " ratio=" << llvm::format("%g", choice.offloadRatio)
       << " buffer-count=" << z.offloadBufferCount
       << " sub-group-size=" << z.offloadSubGroupSize << "}";
  }
  os << ",ztrain-to-llvm)";
  return s;
}

void ztrain::printPlanSearch(raw_ostream &os, const PlanSearchResult &result,
                             const PlanSearchRequest &request,
                             const TrainingPipelineOptions &training,
                             const ZeroPipelineOptions &zero) {
  const CostModel &m = request.cost;
  // The table's units from its largest entries, so that a small model's
  // table under a large budget is not all zeros.
  const bool deviceBackend = request.hostBudget > 0;
  double maxFlops = 0, maxBytes = 0;
  for (const PlanCandidate &c : result.candidates) {
    maxFlops = std::max(maxFlops, (double)(c.flops + c.recomputeFlops));
    maxBytes =
        std::max({maxBytes, (double)(deviceBackend ? c.devicePeak : c.peak),
                  (double)c.communicationBytes});
  }
  auto [byteUnit, byteScale] = unitFor(maxBytes);
  auto [budgetUnit, budgetScale] = unitFor((double)request.budget);
  auto [hostUnit, hostScale] = unitFor((double)request.hostBudget);
  auto [flopUnit, flopScale] = unitFor(maxFlops, /*flops=*/true);
  os << llvm::formatv(
      "plan search: memory budget {0} bytes ({1:F2} {2}) per rank{10}, "
      "dp={3}; cost model: link {4:F1} GB/s and {5:F1} us per collective, "
      "device {6:F2} TFLOP/s{9} and {7:F1} GB/s memory, nvme {8:F1} "
      "GB/s{11}\n",
      request.budget, request.budget / budgetScale, budgetUnit, zero.dp,
      m.linkBytesPerSecond / 1e9, m.collectiveLatency * 1e6,
      m.deviceFlopsPerSecond / 1e12, m.memoryBytesPerSecond / 1e9,
      m.nvmeBytesPerSecond / 1e9,
      request.searchPrecision ? llvm::formatv(" ({0:F2} TFLOP/s 16-bit)",
                                              m.device16FlopsPerSecond / 1e12)
                                    .str()
                              : std::string(),
      deviceBackend
          ? llvm::formatv(" of device memory and {0} bytes ({1:F2} {2}) of "
                          "host memory (a device backend)",
                          request.hostBudget, request.hostBudget / hostScale,
                          hostUnit)
                .str()
          : std::string(),
      deviceBackend
          ? llvm::formatv(", host link {0:F1} GB/s, host step {1:F1} GB/s",
                          m.hostLinkBytesPerSecond / 1e9,
                          m.hostMemoryBytesPerSecond / 1e9)
                .str()
          : std::string());
  // The precision column only when the search chose it.
  const bool precisionColumn = request.searchPrecision;
  // The loss tile column only when the search tried tiling the loss.
  const bool lossColumn =
      llvm::any_of(result.candidates, [](const PlanCandidate &c) {
        return c.choice.lossTileBytes > 0;
      });
  auto precisionCell = [&](const PlanChoice &p) {
    return (precisionColumn ? llvm::formatv(" {0,-4}", p.precision).str()
                            : std::string()) +
           (lossColumn ? llvm::formatv(" {0,9}", p.lossTileBytes).str()
                       : std::string());
  };
  const bool anyOffload =
      llvm::any_of(result.candidates, [](const PlanCandidate &c) {
        return c.choice.offloadOptimizer != "none" ||
               c.choice.offloadParam != "none" ||
               c.choice.offloadActivations != "none";
      });
  os << llvm::formatv(
      "  {11} {0,-5} {1,-9} {2,12} {3,-7} {4,8} {5,7} {6,10} "
      "{7,10} {8,9} {9,10}  {10}\n",
      "stage", "recompute", "tile bytes", "overlap", "prefetch", "reshard",
      std::string(deviceBackend ? "device " : "peak ") + byteUnit,
      std::string("comm ") + byteUnit, flopUnit, "step ms",
      anyOffload ? (deviceBackend ? "offload (host / nvme io / host "
                                    "link per step)"
                                  : "offload (host / nvme io per step)")
                 : "",
      std::string(precisionColumn ? " prec" : "") +
          (lossColumn ? " loss tile" : ""));
  // Fastest first; plans that did not compile last.
  SmallVector<unsigned> order;
  for (unsigned i = 0; i < result.candidates.size(); ++i)
    order.push_back(i);
  llvm::stable_sort(order, [&](unsigned a, unsigned b) {
    const PlanCandidate &x = result.candidates[a], &y = result.candidates[b];
    if (x.error.empty() != y.error.empty())
      return x.error.empty();
    return x.stepSeconds < y.stepSeconds;
  });
  for (unsigned i : order) {
    const PlanCandidate &c = result.candidates[i];
    const PlanChoice &p = c.choice;
    std::string head = llvm::formatv(
        " {0}{7} {1,-5} {2,-9} {3,12} {4,-7} {5,8} {6,7}",
        (int)i == result.chosen ? "*" : " ",
        // Hybrid sharding's replicas beside the stage: "3 r2".
        std::to_string(p.stage) +
            (p.replicate > 1 ? " r" + std::to_string(p.replicate) : ""),
        p.recompute, p.maxTileBytes, p.overlap ? "yes" : "no",
        p.overlap && p.stage == 3 ? std::to_string(p.prefetchDepth) : "-",
        p.stage == 3 && p.overlap ? (p.reshardAfterForward ? "yes" : "no")
                                  : "-",
        precisionCell(p));
    if (!c.error.empty()) {
      os << head << "  does not compile: " << c.error << "\n";
      continue;
    }
    std::string offload;
    if (p.offloadOptimizer != "none" || p.offloadParam != "none" ||
        p.offloadActivations != "none")
      offload =
          llvm::formatv(
              "  optimizer={0}{5} param={1}{8}{6} ({2:F2} / {3:F2}{7} {4})",
              p.offloadOptimizer, p.offloadParam, c.hostBytes / byteScale,
              c.ioBytes / byteScale, byteUnit,
              p.offloadRatio < 1.0
                  ? llvm::formatv(" ratio={0}",
                                  llvm::format("%g", p.offloadRatio))
                        .str()
                  : std::string(),
              p.offloadActivations != "none"
                  ? " activations=" + p.offloadActivations
                  : std::string(),
              deviceBackend
                  ? llvm::formatv(" / {0:F2}", c.hostLinkBytes / byteScale)
                        .str()
                  : std::string(),
              p.offloadParam != "none" && p.offloadParamRatio < 1.0
                  ? llvm::formatv(" ratio={0}",
                                  llvm::format("%g", p.offloadParamRatio))
                        .str()
                  : std::string())
              .str();
    os << head
       << llvm::formatv(" {0,10:F2} {1,10:F2} {2,9:F3} {3,10:F3}  {4}{5}\n",
                        (deviceBackend ? c.devicePeak : c.peak) / byteScale,
                        c.communicationBytes / byteScale,
                        (c.flops + c.recomputeFlops) / flopScale,
                        c.stepSeconds * 1e3, c.fits ? "fits" : "over", offload);
  }
  os << llvm::formatv("searched {0} plans in {1:F2} s\n",
                      result.candidates.size(), result.seconds);
  if (result.chosen < 0 && !deviceBackend) {
    os << "no plan fits: the smallest predicted peak is "
       << sized(result.smallestPeak) << " per rank, above the budget of "
       << request.budget << " bytes\n";
    return;
  }
  if (result.chosen < 0) {
    os << "no plan fits " << describeNoFit(result, request) << "\n";
    return;
  }
  const PlanCandidate &c = result.candidates[result.chosen];
  os << "chosen: " << flagsOf(c.choice, zero.dp, request.searchPrecision)
     << (deviceBackend ? ": predicted device peak " : ": predicted peak ")
     << sized(deviceBackend ? c.devicePeak : c.peak) << " per rank"
     << (c.hostBytes ? llvm::formatv(" and {0} bytes of host {1}", c.hostBytes,
                                     deviceBackend ? "memory" : "buffers")
                           .str()
                     : std::string())
     << (deviceBackend && c.hostLinkBytes
             ? llvm::formatv(", {0} bytes over the host link", c.hostLinkBytes)
                   .str()
             : std::string())
     << ", " << llvm::formatv("{0:F3}", c.stepSeconds * 1e3)
     << " ms per step in the cost model\n";
  os << "pipeline: " << pipelineOf(c.choice, training, zero) << "\n";
}

void ztrain::printPlanSearchJson(raw_ostream &os,
                                 const PlanSearchResult &result,
                                 const PlanSearchRequest &request,
                                 const TrainingPipelineOptions &training,
                                 const ZeroPipelineOptions &zero) {
  llvm::json::Array candidates;
  for (const PlanCandidate &c : result.candidates) {
    const PlanChoice &p = c.choice;
    llvm::json::Object o{{"precision", p.precision},
                         {"stage", p.stage},
                         {"replicate", p.replicate},
                         {"recompute", p.recompute},
                         {"max_tile_bytes", p.maxTileBytes},
                         {"loss_tile_bytes", p.lossTileBytes},
                         {"overlap", p.overlap},
                         {"prefetch_depth", p.prefetchDepth},
                         {"reshard_after_forward", p.reshardAfterForward},
                         {"offload_optimizer", p.offloadOptimizer},
                         {"offload_param", p.offloadParam},
                         {"offload_activations", p.offloadActivations},
                         {"offload_ratio", p.offloadRatio},
                         {"offload_param_ratio", p.offloadParamRatio}};
    if (!c.error.empty()) {
      o["error"] = c.error;
    } else {
      o["peak"] = c.peak;
      o["activations"] = c.activations;
      o["communication_bytes"] = c.communicationBytes;
      o["intra_node_bytes"] = c.intraNodeBytes;
      o["inter_node_bytes"] = c.interNodeBytes;
      o["collectives"] = c.collectives;
      o["flops"] = c.flops;
      o["recompute_flops"] = c.recomputeFlops;
      o["kernel_bytes"] = c.kernelBytes;
      o["recompute_kernel_bytes"] = c.recomputeKernelBytes;
      o["compute_seconds"] = c.computeSeconds;
      o["communication_seconds"] = c.communicationSeconds;
      o["host_bytes"] = c.hostBytes;
      o["nvme_transfer_bytes"] = c.ioBytes;
      o["io_seconds"] = c.ioSeconds;
      o["device_peak"] = c.devicePeak;
      o["host_link_bytes"] = c.hostLinkBytes;
      o["host_link_seconds"] = c.hostLinkSeconds;
      o["host_step_seconds"] = c.hostStepSeconds;
      o["step_seconds"] = c.stepSeconds;
      o["fits"] = c.fits;
    }
    candidates.push_back(std::move(o));
  }
  const CostModel &m = request.cost;
  llvm::json::Object root{
      {"memory_budget", request.budget},
      {"host_memory_budget", request.hostBudget > 0
                                 ? llvm::json::Value(request.hostBudget)
                                 : llvm::json::Value(nullptr)},
      {"dp", static_cast<int64_t>(zero.dp)},
      {"cost_model",
       llvm::json::Object{
           {"link_bytes_per_second", m.linkBytesPerSecond},
           {"collective_latency_seconds", m.collectiveLatency},
           {"device_flops_per_second", m.deviceFlopsPerSecond},
           {"device_16bit_flops_per_second", m.device16FlopsPerSecond},
           {"memory_bytes_per_second", m.memoryBytesPerSecond},
           {"nvme_bytes_per_second", m.nvmeBytesPerSecond},
           {"host_link_bytes_per_second", m.hostLinkBytesPerSecond},
           {"host_memory_bytes_per_second", m.hostMemoryBytesPerSecond}}},
      {"candidates", std::move(candidates)},
      {"chosen", result.chosen >= 0 ? llvm::json::Value(result.chosen)
                                    : llvm::json::Value(nullptr)},
      {"smallest_peak", result.smallestPeak},
      {"seconds", result.seconds},
      {"pipeline",
       result.chosen >= 0
           ? llvm::json::Value(pipelineOf(
                 result.candidates[result.chosen].choice, training, zero))
           : llvm::json::Value(nullptr)}};
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}
