//===- ZeroReport.cpp - zero-report ---------------------------------------===//
//
// Part of the ztrain project.
//
// Prices a (partitioned) training step per rank: model-state bytes by
// category, activation peak, communication buffers and the collectives of a
// step. Pure analysis over the IR: it allocates nothing, so it works on
// models far larger than the machine. This file is the pass and its text
// and JSON reports; ZeroReportAnalysis.cpp computes the numbers.
//
//===----------------------------------------------------------------------===//

#include "ZeroReport.h"

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"

#define DEBUG_TYPE "zero-report"

namespace ztrain::dist {
#define GEN_PASS_DEF_ZEROREPORT
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace ztrain::dist

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;
using namespace ztrain::dist::report;

namespace {
struct ZeroReportPass : public dist::impl::ZeroReportBase<ZeroReportPass> {
  using ZeroReportBase::ZeroReportBase;
  void runOnOperation() override;
  void printText(llvm::raw_ostream &os, const Report &r);
  void printJson(llvm::raw_ostream &os, const Report &r);
};

} // namespace

static std::string mib(int64_t bytes) {
  return llvm::formatv("{0:F2}", bytes / (1024.0 * 1024.0)).str();
}

void ZeroReportPass::printText(llvm::raw_ostream &os, const Report &r) {
  os << "zero-report: stage " << r.stage << ", " << r.mesh.world
     << (r.mesh.world == 1 ? " rank" : " ranks")
     << (r.grid.empty() ? std::string(" (not partitioned)")
                        : " over @" + r.grid)
     << "\n";
  if (r.mesh.replicateGrid)
    os << llvm::formatv("mesh: states partitioned over shard groups of {0} "
                        "ranks (@{1}), replicated {2} times (@{3}); {4} "
                        "ranks per node\n",
                        r.mesh.shard, r.mesh.shardGrid.getValue(),
                        r.mesh.replicate, r.mesh.replicateGrid.getValue(),
                        r.mesh.ranksPerNode);
  if (r.mesh.secondary)
    os << llvm::formatv("hpZ: each gathered parameter's shard over groups of "
                        "{0} ranks (@{1}) kept after the forward pass; the "
                        "backward gathers stay in the group; {2} ranks per "
                        "node\n",
                        r.mesh.shard, r.mesh.groupGrid.getValue(),
                        r.mesh.ranksPerNode);
  os << llvm::formatv("parameters: {0} tensors, {1} elements, {2} bytes "
                      "(Psi)",
                      r.paramCount, r.paramElements, r.paramBytes);
  if (r.frozenCount)
    os << llvm::formatv("; {0} of them frozen ({1} elements: no gradient, "
                        "no optimizer state)",
                        r.frozenCount, r.frozenElements);
  os << "\n";
  os << llvm::formatv("{0,-26}{1,16}{2,12}\n", "per rank", "bytes", "MiB");
  auto row = [&](StringRef what, int64_t bytes) {
    os << llvm::formatv("  {0,-24}{1,16}{2,12}\n", what, bytes, mib(bytes));
  };
  row("parameters", r.parameters);
  row("gradients", r.gradients);
  row(r.hasStates ? "optimizer states" : "optimizer states (none yet)",
      r.optimizerStates);
  if (r.buffers)
    row("buffers", r.buffers);
  row("inputs (micro-batch)", r.inputs);
  row(r.staticPlan ? "activations (arena)" : "activations (at least)",
      r.activations);
  if (r.gatheredPeak)
    row("  of which gathered", r.gatheredPeak);
  row("communication buffers", r.communicationBuffers);
  row("predicted peak", r.predictedPeak());
  if (r.hostStates || r.nvmeStates || r.swapBuffers || r.nvmeParams ||
      r.hostActivations || r.hostParams || r.hostGradients ||
      r.stateSwapBuffers) {
    os << "offloaded (zero-offload), per rank: not in the peak above\n";
    if (r.hostParams)
      row("host: parameters", r.hostParams);
    if (r.hostActivations)
      row("host: activations", r.hostActivations);
    if (r.hostGradients)
      row("host: gradients", r.hostGradients);
    if (r.hostStates)
      row("host: optimizer states", r.hostStates);
    if (r.swapBuffers)
      row("host: swap buffers", r.swapBuffers);
    if (r.stateSwapBuffers)
      row("host: state swap buffers", r.stateSwapBuffers);
    if (r.nvmeParams)
      row("nvme: parameters", r.nvmeParams);
    if (r.nvmeStates)
      row("nvme: optimizer states", r.nvmeStates);
    if (r.nvmeToHost || r.hostToNvme || r.activationsToHost ||
        r.gradientsToHost) {
      os << llvm::formatv("{0,-26}{1,16}{2,12}\n", "transfers per step",
                          "bytes/rank", "MiB");
      if (r.nvmeToHost || r.hostToNvme) {
        row("nvme -> host", r.nvmeToHost);
        row("host -> nvme", r.hostToNvme);
      }
      if (r.activationsToHost)
        row("activations <-> host", r.activationsToHost);
      if (r.gradientsToHost)
        row("gradients -> host", r.gradientsToHost);
    }
    // A device backend computes on device copies of the parameters' swap
    // buffers and runs the updates of host- and nvme-placed states on the
    // host (their gradients down, their parameters up, through the host
    // step buffer).
    os << "on a device backend (--backend cuda), per rank: the "
          "parameters' swap buffers on the device too\n";
    row("device peak", r.devicePeakOnDevice());
    if (r.hostStepBuffers)
      row("host: step buffers", r.hostStepBuffers);
    if (r.hostSteps)
      os << llvm::formatv("  host steps per step {0,17} ({1} asynchronous)\n",
                          r.hostSteps, r.asyncHostSteps);
    row("host -> device per step", r.hostToDevice());
    row("device -> host per step", r.deviceToHost());
  }
  // ZeRO's model states in its units (GB = 10^9 bytes) and Megatron's
  // bytes per parameter.
  os << llvm::formatv("model states: {0} bytes per rank = {1:F2} GB, "
                      "{2:F4} bytes per parameter\n",
                      r.modelStates(), r.modelStates() / 1e9,
                      r.bytesPerParameter());
  if (!r.paramType.empty())
    os << "element types: parameters " << r.paramType << ", gradients "
       << r.gradType << ", optimizer states "
       << (r.stateType.empty() ? "-" : r.stateType) << "\n";
  if (r.lossScale)
    os << "loss scaling: dynamic, initial scale "
       << llvm::format("%g", r.lossScale->init) << ", doubled after "
       << r.lossScale->window << " clean steps, halved after "
       << r.lossScale->hysteresis << " overflow(s), minimum "
       << llvm::format("%g", r.lossScale->min)
       << "; overflowed steps are skipped\n";
  if (r.accumSteps > 1)
    os << "gradient accumulation: " << r.accumSteps
       << " micro-batches per optimizer step (inputs and activations are "
          "per micro-batch; the collectives of each micro-batch are counted "
       << r.accumSteps << " times)\n";

  if (r.recompute != "none")
    os << llvm::formatv(
        "recompute: {0}, {1} ops repeated in the backward pass, {2} FLOPs "
        "per step per rank (+{3:F1}% over the model's {4})\n",
        r.recompute, r.recomputedOps, r.recomputeFlops,
        r.modelFlops ? 100.0 * r.recomputeFlops / r.modelFlops : 0.0,
        r.modelFlops);

  llvm::MapVector<StringRef, std::pair<int64_t, int64_t>> byKind;
  for (const Collective &c : r.collectives) {
    auto &slot = byKind[c.kind];
    slot.first += c.count;
    slot.second += c.bytes;
  }
  os << llvm::formatv("{0,-26}{1,16}{2,12}\n",
                      r.collectivesFromIR ? "collectives per step"
                                          : "collectives per step (planned)",
                      "bytes/rank", "count");
  for (auto &[kind, v] : byKind)
    os << llvm::formatv("  {0,-24}{1,16}{2,12}\n", kind, v.second, v.first);
  os << llvm::formatv("  {0,-24}{1,16}\n", "total", r.communicationBytes());
  if (r.mesh.world > 1) {
    // What the CPU runtime hands MPI per destination, by the destination's
    // node: the bytes that cross the slower link between nodes.
    os << llvm::formatv(
        "{0,-26}{1,16}\n",
        llvm::formatv("wire bytes, {0} ranks/node", r.mesh.ranksPerNode).str(),
        "bytes/rank");
    os << llvm::formatv("  {0,-24}{1,16}\n", "intra-node", r.intraNodeBytes());
    os << llvm::formatv("  {0,-24}{1,16}\n", "inter-node", r.interNodeBytes());
  }
}

void ZeroReportPass::printJson(llvm::raw_ostream &os, const Report &r) {
  llvm::json::Array collectives;
  for (const Collective &c : r.collectives)
    collectives.push_back(
        llvm::json::Object{{"kind", c.kind},
                           {"tensor", c.tensor},
                           {"grid", c.grid},
                           {"count", c.count},
                           {"bytes", c.bytes},
                           {"intra_node_wire_bytes", c.intraNodeBytes},
                           {"inter_node_wire_bytes", c.interNodeBytes}});
  llvm::json::Value mesh = nullptr;
  if (r.mesh.replicateGrid)
    mesh = llvm::json::Object{{"shard", r.mesh.shard},
                              {"replicate", r.mesh.replicate},
                              {"ranks_per_node", r.mesh.ranksPerNode}};
  llvm::json::Value hpz = nullptr;
  if (r.mesh.secondary)
    hpz = llvm::json::Object{{"partition_size", r.mesh.shard},
                             {"ranks_per_node", r.mesh.ranksPerNode}};
  llvm::json::Object root{
      {"stage", r.stage},
      {"hpz", std::move(hpz)},
      {"world_size", r.mesh.world},
      {"mesh", std::move(mesh)},
      {"grid", r.grid},
      {"parameters", llvm::json::Object{{"tensors", r.paramCount},
                                        {"elements", r.paramElements},
                                        {"bytes", r.paramBytes},
                                        {"frozen_tensors", r.frozenCount},
                                        {"frozen_elements", r.frozenElements}}},
      {"per_rank",
       llvm::json::Object{{"parameters", r.parameters},
                          {"gradients", r.gradients},
                          {"optimizer_states", r.optimizerStates},
                          {"buffers", r.buffers},
                          {"inputs", r.inputs},
                          {"activations", r.activations},
                          {"communication_buffers", r.communicationBuffers},
                          {"gathered_parameters_peak", r.gatheredPeak},
                          {"predicted_peak", r.predictedPeak()}}},
      {"model_states",
       llvm::json::Object{{"bytes_per_rank", r.modelStates()},
                          {"bytes_per_parameter", r.bytesPerParameter()}}},
      {"element_types", llvm::json::Object{{"parameters", r.paramType},
                                           {"gradients", r.gradType},
                                           {"optimizer_states", r.stateType}}},
      {"loss_scale", r.lossScale ? llvm::json::Value(llvm::json::Object{
                                       {"init", r.lossScale->init},
                                       {"window", r.lossScale->window},
                                       {"hysteresis", r.lossScale->hysteresis},
                                       {"min", r.lossScale->min}})
                                 : llvm::json::Value(nullptr)},
      {"grad_accum_steps", r.accumSteps},
      {"flops_per_step", r.modelFlops},
      {"kernel_bytes_per_step", r.kernelBytes},
      {"recompute",
       llvm::json::Object{{"policy", r.recompute},
                          {"ops", r.recomputedOps},
                          {"flops_per_step", r.recomputeFlops},
                          {"kernel_bytes_per_step", r.recomputeKernelBytes}}},
      {"offload",
       llvm::json::Object{
           {"host",
            llvm::json::Object{{"optimizer_states", r.hostStates},
                               {"swap_buffers", r.swapBuffers},
                               {"state_swap_buffers", r.stateSwapBuffers},
                               {"activations", r.hostActivations},
                               {"gradients", r.hostGradients},
                               {"parameters", r.hostParams}}},
           {"nvme", llvm::json::Object{{"parameters", r.nvmeParams},
                                       {"optimizer_states", r.nvmeStates}}},
           {"transfers_per_step",
            llvm::json::Object{{"nvme_to_host", r.nvmeToHost},
                               {"host_to_nvme", r.hostToNvme},
                               {"activations_to_host", r.activationsToHost},
                               {"gradients_to_host", r.gradientsToHost}}},
           {"device_backend",
            llvm::json::Object{
                {"device_peak", r.devicePeakOnDevice()},
                {"host_step_buffers", r.hostStepBuffers},
                {"host_steps_per_step", r.hostSteps},
                {"asynchronous_host_steps_per_step", r.asyncHostSteps},
                {"host_to_device_per_step", r.hostToDevice()},
                {"device_to_host_per_step", r.deviceToHost()}}}}},
      {"collectives_source", r.collectivesFromIR ? "ir" : "plan"},
      {"memory_plan", r.staticPlan ? "static" : "liveness"},
      {"collectives", std::move(collectives)},
      {"communication_bytes_per_step", r.communicationBytes()},
      {"links",
       llvm::json::Object{{"ranks_per_node", r.mesh.ranksPerNode},
                          {"intra_node_wire_bytes", r.intraNodeBytes()},
                          {"inter_node_wire_bytes", r.interNodeBytes()}}}};
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

void ZeroReportPass::runOnOperation() {
  ModuleOp module = getOperation();
  // The executable always runs on plan-memory's arenas, which can exceed
  // the liveness peak (fragmentation, buffers that cannot share). A step
  // without a plan yet is priced as plan-memory will place it, on a copy;
  // only where that cannot be done (a multi-block step, a plan that fails)
  // does the liveness sweep stand in, and the report says it is a bound.
  OwningOpRef<ModuleOp> planned;
  if (!module->hasAttr(kArenasAttr)) {
    func::FuncOp entry = train::getEntryFunction(module);
    if (entry && entry.getBody().hasOneBlock()) {
      planned = cast<ModuleOp>(module->clone());
      ScopedDiagnosticHandler quiet(&getContext(),
                                    [](Diagnostic &) { return success(); });
      if (failed(dist::planMemory(*planned)))
        planned = nullptr;
    }
  }
  FailureOr<Report> report = analyzeStep(planned ? *planned : module);
  if (failed(report))
    return signalPassFailure();
  std::string err;
  auto out = openOutputFile(output, &err);
  if (!out) {
    getOperation().emitError() << "zero-report: " << err;
    return signalPassFailure();
  }
  if (format == OutputFormat::json)
    printJson(out->os(), *report);
  else
    printText(out->os(), *report);
  out->keep();
  markAllAnalysesPreserved();
}
