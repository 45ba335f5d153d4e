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

namespace ztrt {

namespace {

/// JSON has no NaN or Infinity: a non-finite loss is null. %.9g round-trips
/// a float.
std::string jsonLoss(float loss) {
  return std::isfinite(loss) ? format("%.9g", loss) : "null";
}

std::string memoryJson(const MemoryStats &mem, int64_t planned) {
  // "planned": what the descriptor says the rank will allocate, which the
  // memory check compares with the machine (equal to the measured peak),
  // plus a device backend's host step buffer.
  std::string json =
      format("{\"planned\": %lld, ", static_cast<long long>(planned));
  for (int c = 0; c < ZTRT_CAT_COUNT; ++c)
    json += format("\"%s\": %lld, ", categoryName(c),
                   static_cast<long long>(mem.current[c]));
  // "peak": every byte this process allocated; "device_peak": without the
  // host memory of zero-offload (swap buffers, host-resident states), what
  // zero-report's predicted_peak counts.
  json += format("\"peak\": %lld, \"device_peak\": %lld, "
                 "\"peak_by_category\": {",
                 static_cast<long long>(mem.peakTotal),
                 static_cast<long long>(mem.peakDevice));
  for (int c = 0; c < ZTRT_CAT_COUNT; ++c)
    json += format("%s\"%s\": %lld", c ? ", " : "", categoryName(c),
                   static_cast<long long>(mem.peak[c]));
  return json + "}}";
}

/// zero-offload's nvme traffic during the steps (ztrt_swap_*), or null.
std::string offloadJson(const ztrt_ctx &ctx) {
  const OffloadStats &o = ctx.offload;
  // Host placement on the cpu backend moves nothing: null, as without
  // offload. A device backend reaches host-placed states over its host link.
  if (!ctx.swap && !o.hostToDeviceBytes && !o.deviceToHostBytes &&
      !o.activationsToHost && !o.gradientsToHost)
    return "null";
  int64_t atRest = 0;
  for (int64_t bytes : ctx.stateFileBytes)
    atRest += bytes;
  for (int64_t bytes : ctx.paramFileBytes)
    atRest += bytes;
  return format("{\"nvme_bytes\": %lld, \"reads\": %lld, "
                "\"read_bytes\": %lld, \"writes\": %lld, "
                "\"write_bytes\": %lld, \"exposed_ms\": %.3f, "
                "\"host_to_device_bytes\": %lld, "
                "\"device_to_host_bytes\": %lld, "
                "\"activations_to_host_bytes\": %lld, "
                "\"activations_from_host_bytes\": %lld, "
                "\"gradients_to_host_bytes\": %lld, "
                "\"host_steps\": %lld, \"asynchronous_host_steps\": %lld, "
                "\"host_step_ms\": %.3f, \"update_wait_ms\": %.3f, "
                "\"direct\": %s, \"asynchronous\": %s, "
                "\"directory\": %s}",
                static_cast<long long>(atRest),
                static_cast<long long>(o.reads),
                static_cast<long long>(o.readBytes),
                static_cast<long long>(o.writes),
                static_cast<long long>(o.writeBytes), o.exposedNanos / 1e6,
                static_cast<long long>(o.hostToDeviceBytes),
                static_cast<long long>(o.deviceToHostBytes),
                static_cast<long long>(o.activationsToHost),
                static_cast<long long>(o.activationsFromHost),
                static_cast<long long>(o.gradientsToHost),
                static_cast<long long>(o.hostSteps),
                static_cast<long long>(o.asyncHostSteps),
                o.hostStepNanos / 1e6, o.updateWaitNanos / 1e6,
                ctx.swap && ctx.swap->direct() ? "true" : "false",
                ctx.swap && ctx.swap->asynchronous() ? "true" : "false",
                ctx.swap ? jsonQuote(ctx.swap->directory()).c_str() : "null");
}

std::string communicationJson(const ztrt_ctx &ctx) {
  std::string json = "{";
  for (int k = 0; k < kCollectiveKinds; ++k) {
    Collective kind = static_cast<Collective>(k);
    const CollectiveStats &stats = ctx.communication(kind);
    json += format("%s\"%s\": {\"calls\": %lld, \"bytes\": %lld, "
                   "\"wire_bytes\": %lld}",
                   k ? ", " : "", collectiveName(kind),
                   static_cast<long long>(stats.calls),
                   static_cast<long long>(stats.bytes),
                   static_cast<long long>(stats.wireBytes));
  }
  return json + "}";
}

/// How much communication the steps hid behind compute (OverlapStats).
std::string overlapJson(const ztrt_ctx &ctx) {
  const OverlapStats &overlap = ctx.overlap();
  return format("{\"comm_ms\": %.6f, \"exposed_ms\": %.6f, "
                "\"hidden_fraction\": %.6f}",
                static_cast<double>(overlap.commNanos) * 1e-6,
                static_cast<double>(overlap.exposedNanos) * 1e-6,
                overlap.hiddenFraction());
}

} // namespace

/// This rank's entry of the report's "ranks" list.
std::string rankJson(const ztrt_ctx &ctx, const Descriptor &desc, int rank,
                     const std::vector<StepRecord> &records) {
  std::string losses, times;
  for (size_t i = 0; i < records.size(); ++i) {
    losses += (i ? ", " : "") + jsonLoss(records[i].loss);
    times += format("%s%.6f", i ? ", " : "", records[i].timeMs);
  }
  return format("{\"rank\": %d, \"device\": %s, \"losses\": [%s], "
                "\"time_ms\": [%s],\n"
                "     \"memory\": %s,\n     \"communication\": %s,\n"
                "     \"overlap\": %s,\n     \"offload\": %s}",
                rank, jsonQuote(ctx.backend().deviceName()).c_str(),
                losses.c_str(), times.c_str(),
                memoryJson(ctx.memory(), plannedBytes(desc).total() + ctx.hostStepBufferBytes).c_str(),
                communicationJson(ctx).c_str(), overlapJson(ctx).c_str(),
                offloadJson(ctx).c_str());
}

/// Written by rank 0: the top-level numbers are rank 0's (the step losses
/// are the means over ranks), `ranks` has every rank's own.
void writeReport(const std::string &path, const ztrt_ctx &ctx,
                 const Descriptor &desc, const std::vector<StepRecord> &records,
                 const std::vector<std::pair<int64_t, float>> &evals,
                 int threads, int worldSize,
                 const std::vector<std::string> &ranks,
                 const Backend::PeakRate &peak) {
  std::string json = format(
      "{\n  \"rank\": 0,\n  \"world_size\": %d,\n  \"backend\": %s,\n"
      "  \"device\": %s,\n  \"precision\": %s,\n  \"steps\": [",
      worldSize, jsonQuote(ctx.backend().name()).c_str(),
      jsonQuote(ctx.backend().deviceName()).c_str(),
      jsonQuote(precisionText(desc)).c_str());
  for (size_t i = 0; i < records.size(); ++i) {
    const StepRecord &r = records[i];
    json += format("%s\n    {\"step\": %lld, \"loss\": %s, \"time_ms\": %.6f",
                   i ? "," : "", static_cast<long long>(r.step),
                   jsonLoss(r.meanLoss).c_str(), r.timeMs);
    if (ctx.scaler)
      json += format(", \"loss_scale\": %.17g, \"skipped\": %s", r.lossScale,
                     r.skipped ? "true" : "false");
    if (std::isfinite(r.lr))
      json += format(", \"lr\": %.17g", r.lr);
    if (ctx.clipMaxNorm)
      json += ", \"grad_norm\": " + (std::isfinite(r.gradNorm)
                                         ? format("%.9g", r.gradNorm)
                                         : std::string("null"));
    json += "}";
  }
  json += records.empty() ? "],\n" : "\n  ],\n";
  if (!evals.empty()) {
    json += "  \"eval\": [";
    for (size_t i = 0; i < evals.size(); ++i)
      json += format("%s\n    {\"step\": %lld, \"loss\": %s}", i ? "," : "",
                     static_cast<long long>(evals[i].first),
                     jsonLoss(evals[i].second).c_str());
    json += "\n  ],\n";
  }
  if (ctx.clipMaxNorm)
    json += format("  \"clip_grad_norm\": %.17g,\n", *ctx.clipMaxNorm);
  if (ctx.accumSteps > 0)
    json += format("  \"grad_accum_steps\": %lld,\n",
                   static_cast<long long>(ctx.accumSteps));
  if (desc.flopsPerStep > 0)
    json += format("  \"flops_per_step_per_rank\": %lld,\n",
                   static_cast<long long>(desc.flopsPerStep *
                                          std::max<int64_t>(1, ctx.accumSteps)));
  // The MFU's denominator, and where it came from (null when unknown).
  json += "  \"peak_tflops\": " +
          (peak.tflops > 0.0 ? format("%.17g", peak.tflops)
                             : std::string("null")) +
          ", \"peak_tflops_basis\": " + jsonQuote(peak.basis) + ",\n";
  {
    // The hyper-parameters the updates used (the run's or the compiled).
    std::string h;
    for (int id = 0; id < ZTRT_HYPER_COUNT; ++id)
      if (std::isfinite(ctx.hyperSeen[id]))
        h += format("%s\"%s\": %.17g", h.empty() ? "" : ", ",
                    hyperFlag(id) + 2, ctx.hyperSeen[id]);
    json += "  \"hyperparameters\": {" + h + "},\n";
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
    json += format("  \"lr_schedule\": {\"kind\": \"%s\", \"lr\": %s, "
                   "\"warmup_steps\": %lld, \"warmup_type\": \"%s\", "
                   "\"min_lr\": %.17g, \"decay_steps\": %lld},\n",
                   LrSchedule::kindName(s.kind),
                   base ? format("%.17g", *base).c_str() : "null",
                   static_cast<long long>(s.warmup),
                   s.logWarmup ? "log" : "linear", minLr,
                   static_cast<long long>(s.decaySteps));
  }
  if (ctx.scaler) {
    const LossScalePolicy &p = ctx.scaler->policy();
    const LossScaler::State &st = ctx.scaler->state();
    json += format("  \"loss_scale\": {\"scale\": %.17g, \"skipped_steps\": "
                   "%lld, \"init\": %.17g, \"window\": %lld, "
                   "\"hysteresis\": %lld, \"min\": %.17g},\n",
                   st.scale, static_cast<long long>(st.skipped), p.init,
                   static_cast<long long>(p.window),
                   static_cast<long long>(p.hysteresis), p.min);
  }
  json += "  \"memory\": " + memoryJson(ctx.memory(), plannedBytes(desc).total() + ctx.hostStepBufferBytes) + ",\n";
  json += "  \"communication\": " + communicationJson(ctx) + ",\n";
  json += "  \"overlap\": " + overlapJson(ctx) + ",\n";
  json += "  \"offload\": " + offloadJson(ctx) + ",\n";
  json += "  \"ranks\": [";
  for (size_t r = 0; r < ranks.size(); ++r)
    json += (r ? ",\n    " : "\n    ") + ranks[r];
  json += "\n  ],\n";
  json += format("  \"threads\": %d,\n  \"params\": [", threads);
  for (size_t i = 0; i < desc.params.size(); ++i) {
    const ParamSpec &spec = desc.params[i];
    json += format("%s\n    {\"name\": %s, \"shape\": [", i ? "," : "",
                   jsonQuote(spec.name).c_str());
    for (size_t d = 0; d < spec.shape.size(); ++d)
      json += format("%s%lld", d ? ", " : "",
                     static_cast<long long>(spec.shape[d]));
    json += format("], \"dtype\": \"%s\"}", elemTypeName(spec.type));
  }
  json += desc.params.empty() ? "]\n}\n" : "\n  ]\n}\n";
  AtomicFile file(path);
  file.write(json.data(), json.size());
  file.commit();
}

} // namespace ztrt
