//===- Report.cpp - The JSON report (--report) ----------------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "report/Report.h"

#include "base/Json.h"
#include "base/Support.h"
#include "step/Context.h"
#include "step/Descriptor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <unistd.h>

namespace ztrt {

namespace {

Json memoryJson(const MemoryStats &mem, int64_t planned) {
  // "planned": what the descriptor says the rank will allocate, which the
  // memory check compares with the machine (equal to the measured peak),
  // plus a device backend's host step buffer.
  Json json = {{"planned", planned}};
  for (int c = 0; c < ZTRT_CAT_COUNT; ++c)
    json[categoryName(c)] = mem.current[c];
  // "peak": every byte this process allocated; "device_peak": without the
  // host memory of zero-offload (swap buffers, host-resident states), what
  // zero-report's predicted_peak counts.
  json["peak"] = mem.peakTotal;
  json["device_peak"] = mem.peakDevice;
  Json peaks = Json::object();
  for (int c = 0; c < ZTRT_CAT_COUNT; ++c)
    peaks[categoryName(c)] = mem.peak[c];
  json["peak_by_category"] = std::move(peaks);
  return json;
}

/// zero-offload's nvme traffic during the steps (ztrt_swap_*), or null.
Json offloadJson(const ztrt_ctx &ctx) {
  const OffloadStats &o = ctx.offload;
  // Host placement on the cpu backend moves nothing: null, as without
  // offload. A device backend reaches host-placed states over its host link.
  if (!ctx.swap && !o.hostToDeviceBytes && !o.deviceToHostBytes &&
      !o.activationsToHost && !o.gradientsToHost)
    return nullptr;
  int64_t atRest = 0;
  for (int64_t bytes : ctx.stateFileBytes)
    atRest += bytes;
  for (int64_t bytes : ctx.paramFileBytes)
    atRest += bytes;
  return {{"nvme_bytes", atRest},
          {"reads", o.reads},
          {"read_bytes", o.readBytes},
          {"writes", o.writes},
          {"write_bytes", o.writeBytes},
          {"exposed_ms", o.exposedNanos / 1e6},
          {"host_to_device_bytes", o.hostToDeviceBytes},
          {"device_to_host_bytes", o.deviceToHostBytes},
          {"activations_to_host_bytes", o.activationsToHost},
          {"activations_from_host_bytes", o.activationsFromHost},
          {"gradients_to_host_bytes", o.gradientsToHost},
          {"host_steps", o.hostSteps},
          {"asynchronous_host_steps", o.asyncHostSteps},
          {"host_step_ms", o.hostStepNanos / 1e6},
          {"update_wait_ms", o.updateWaitNanos / 1e6},
          {"direct", ctx.swap && ctx.swap->direct()},
          {"asynchronous", ctx.swap && ctx.swap->asynchronous()},
          {"directory", ctx.swap ? Json(ctx.swap->directory()) : Json()}};
}

Json communicationJson(const ztrt_ctx &ctx) {
  Json json = Json::object();
  for (int k = 0; k < kCollectiveKinds; ++k) {
    Collective kind = static_cast<Collective>(k);
    const CollectiveStats &stats = ctx.communication(kind);
    json[collectiveName(kind)] = {
        {"calls", stats.calls},
        {"bytes", stats.bytes},
        {"wire_bytes", stats.wireBytes},
        {"intra_node_wire_bytes", stats.intraNodeWireBytes},
        {"inter_node_wire_bytes", stats.interNodeWireBytes}};
  }
  return json;
}

/// How much communication the steps hid behind compute (OverlapStats).
Json overlapJson(const ztrt_ctx &ctx) {
  const OverlapStats &overlap = ctx.overlap();
  return {{"comm_ms", static_cast<double>(overlap.commNanos) * 1e-6},
          {"exposed_ms", static_cast<double>(overlap.exposedNanos) * 1e-6},
          {"hidden_fraction", overlap.hiddenFraction()}};
}

/// A double that may be non-finite: null then, as JSON has no NaN.
Json finiteOrNull(double value) {
  return std::isfinite(value) ? Json(value) : Json();
}

} // namespace

/// This rank's entry of the report's "ranks" list.
std::string rankJson(const ztrt_ctx &ctx, const Descriptor &desc, int rank,
                     const std::vector<StepRecord> &records) {
  Json losses = Json::array(), times = Json::array();
  for (const StepRecord &r : records) {
    losses.push_back(jsonFloat(r.loss));
    times.push_back(r.timeMs);
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  Json json = {
      {"rank", rank},
      {"node", ctx.comm().node()},
      {"host", host},
      {"device", ctx.backend().deviceName()},
      {"losses", std::move(losses)},
      {"time_ms", std::move(times)},
      {"memory", memoryJson(ctx.memory(), plannedBytes(desc).total() +
                                              ctx.hostStepBufferBytes)},
      {"communication", communicationJson(ctx)},
      {"overlap", overlapJson(ctx)},
      {"offload", offloadJson(ctx)}};
  // Gathered to rank 0 as text, one line.
  return dumpJson(json, 0);
}

/// Written by rank 0: the top-level numbers are rank 0's (the step losses
/// are the means over ranks), `ranks` has every rank's own.
void writeReport(const std::string &path, const ztrt_ctx &ctx,
                 const Descriptor &desc, const std::vector<StepRecord> &records,
                 const std::vector<std::pair<int64_t, float>> &evals,
                 int threads, int worldSize,
                 const std::vector<std::string> &ranks,
                 const Backend::PeakRate &peak) {
  Json json = {
      {"rank", 0},
      {"world_size", worldSize},
      {"nodes", ctx.comm().nodeCount()},
      // The groups the collectives ran on (descriptor `mesh`; S =
      // the world, R = 1 without one) and the ranks per node the
      // compiler priced links with (null: not compiled for one).
      {"mesh",
       {{"shard", ctx.axisComm(1).count()},
        {"replicate", ctx.axisComm(2).count()},
        {"secondary", desc.meshSecondary},
        {"ranks_per_node",
         desc.meshRanksPerNode > 0 ? Json(desc.meshRanksPerNode) : Json()}}},
      {"backend", ctx.backend().name()},
      {"device", ctx.backend().deviceName()},
      {"precision", precisionText(desc)}};
  Json steps = Json::array();
  for (const StepRecord &r : records) {
    Json step = {{"step", r.step},
                 {"loss", jsonFloat(r.meanLoss)},
                 {"time_ms", r.timeMs}};
    if (ctx.scaler) {
      step["loss_scale"] = r.lossScale;
      step["skipped"] = r.skipped;
    }
    if (std::isfinite(r.lr))
      step["lr"] = r.lr;
    if (ctx.clipMaxNorm)
      step["grad_norm"] = finiteOrNull(r.gradNorm);
    steps.push_back(std::move(step));
  }
  json["steps"] = std::move(steps);
  if (!evals.empty()) {
    Json list = Json::array();
    for (const auto &[step, loss] : evals)
      list.push_back({{"step", step}, {"loss", jsonFloat(loss)}});
    json["eval"] = std::move(list);
  }
  if (ctx.clipMaxNorm)
    json["clip_grad_norm"] = *ctx.clipMaxNorm;
  if (ctx.accumSteps > 0)
    json["grad_accum_steps"] = ctx.accumSteps;
  if (desc.flopsPerStep > 0)
    json["flops_per_step_per_rank"] =
        desc.flopsPerStep * std::max<int64_t>(1, ctx.accumSteps);
  // The MFU's denominator, and where it came from (null when unknown).
  json["peak_tflops"] = peak.tflops > 0.0 ? Json(peak.tflops) : Json();
  json["peak_tflops_basis"] = peak.basis;
  {
    // The hyper-parameters the updates used (the run's or the compiled).
    Json h = Json::object();
    for (int id = 0; id < ZTRT_HYPER_COUNT; ++id)
      if (std::isfinite(ctx.hyperSeen[id]))
        h[hyperFlag(id) + 2] = ctx.hyperSeen[id];
    json["hyperparameters"] = std::move(h);
  }
  {
    // The base lr the schedule shapes: the run's --lr, else the compiled
    // one (the descriptor's optimizer record); min_lr as the schedule
    // applies it (a ratio of the base for DeepSpeed's WarmupCosineLR).
    const LrSchedule &s = ctx.lrSchedule;
    std::optional<double> base = s.lr;
    if (size_t at = desc.optimizer.find(" lr="); !base && at != std::string::npos)
      base = std::strtod(desc.optimizer.c_str() + at + 4, nullptr);
    const double minLr =
        s.minLrRatio && base ? *s.minLrRatio * *base : s.minLr;
    json["lr_schedule"] = {{"kind", LrSchedule::kindName(s.kind)},
                           {"lr", base ? Json(*base) : Json()},
                           {"warmup_steps", s.warmup},
                           {"warmup_type", s.logWarmup ? "log" : "linear"},
                           {"min_lr", finiteOrNull(minLr)},
                           {"decay_steps", s.decaySteps}};
  }
  if (ctx.scaler) {
    const LossScalePolicy &p = ctx.scaler->policy();
    const LossScaler::State &st = ctx.scaler->state();
    json["loss_scale"] = {
        {"scale", st.scale},  {"skipped_steps", st.skipped}, {"init", p.init},
        {"window", p.window}, {"hysteresis", p.hysteresis},  {"min", p.min}};
  }
  json["memory"] = memoryJson(ctx.memory(), plannedBytes(desc).total() +
                                                ctx.hostStepBufferBytes);
  json["communication"] = communicationJson(ctx);
  json["overlap"] = overlapJson(ctx);
  json["offload"] = offloadJson(ctx);
  Json perRank = Json::array();
  for (const std::string &text : ranks) {
    Json entry;
    std::string error;
    if (!parseJson(text, entry, error))
      fatal("--report: a rank's entry is not JSON (%s)", error.c_str());
    perRank.push_back(std::move(entry));
  }
  json["ranks"] = std::move(perRank);
  json["threads"] = threads;
  Json params = Json::array();
  for (const ParamSpec &spec : desc.params)
    params.push_back({{"name", spec.name},
                      {"shape", spec.shape},
                      {"dtype", elemTypeName(spec.type)}});
  json["params"] = std::move(params);
  const std::string text = dumpJson(json) + "\n";
  AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

} // namespace ztrt
