//===- DeepSpeedConfig.cpp - The one reader of ds_config.json ------------===//
//
// Part of ztrain: linked into the runtime (the executable's --config) and
// into ztrain-compile (its --config). See DeepSpeedConfig.h.
//
//===----------------------------------------------------------------------===//

#include "cli/DeepSpeedConfig.h"

#include "base/Json.h"
#include "base/NearestName.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>

namespace ztrt {

std::string DeepSpeedConfig::keyOf(const std::string &flag) const {
  for (const DeepSpeedSetting &s : compileFlags)
    if (s.flag == flag)
      return s.key;
  return "";
}

namespace {

std::string number(double v) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return s;
}

/// Hugging Face's Trainer writes "auto" where it fills a value in from its
/// own arguments; for ztrain it means what the flags and the model say (the
/// key is skipped).
bool isAuto(const Json &v) { return v.is_string() && jsonText(v) == "auto"; }

/// DeepSpeed's monitoring and logging sections (ztrain's --report, --trace
/// and progress lines are what it records instead).
bool isMonitor(const std::string &key) {
  for (const char *k : {"tensorboard", "wandb", "csv_monitor", "comet",
                        "comms_logger", "memory_breakdown", "dump_state"})
    if (key == k)
      return true;
  return false;
}

/// Walks the config, collecting settings and every key it cannot honour.
class Reader {
public:
  explicit Reader(DeepSpeedConfig &out) : out(out) {}

  void top(const Json &root);
  /// The unknown and unsupported keys, sorted, one phrase each.
  std::vector<std::string> problems;

private:
  DeepSpeedConfig &out;
  /// Element counts DeepSpeed gives where ztrain takes bytes: converted once
  /// the precision is known.
  std::optional<int64_t> reduceBucketElements, maxLiveElements;
  std::string precision = "fp32", commType;
  std::optional<double> optimizerLr;

  void flag(const std::string &name, std::string value,
            const std::string &key) {
    out.compileFlags.push_back({name, std::move(value), key});
  }
  void unsupported(const std::string &key, const std::string &why) {
    problems.push_back(key + " (" + why + ")");
  }
  void unknown(const std::string &key) {
    problems.push_back(key + " (unknown)");
  }
  /// An unknown key of a section whose keys are `known`: with the nearest
  /// known one when it is close (a misspelling: zero_optimisation).
  void unknown(const std::string &prefix, const std::string &key,
               const std::vector<std::string> &known) {
    std::string phrase = prefix + key + " (unknown";
    if (std::string best = nearestName(key, known); !best.empty())
      phrase += "; did you mean " + prefix + best + "?";
    problems.push_back(phrase + ")");
  }

  /// The value as an integer >= min, or a problem named after `key`.
  std::optional<int64_t> asInteger(const Json &v, const std::string &key,
                                   int64_t min = 0) {
    if (isAuto(v))
      return std::nullopt;
    int64_t i = 0;
    bool ok = jsonInt64(v, i);
    if (!ok && v.is_number_float()) {
      // DeepSpeed writes sizes as 5e8 too.
      const double d = jsonNumber(v);
      if (std::isfinite(d) && d == std::floor(d) && d < 9.0e18 && d > -9.0e18) {
        i = static_cast<int64_t>(d);
        ok = true;
      }
    }
    if (!ok || i < min) {
      unsupported(key, "expected an integer >= " + std::to_string(min));
      return std::nullopt;
    }
    return i;
  }
  std::optional<double> asNumber(const Json &v, const std::string &key) {
    if (isAuto(v))
      return std::nullopt;
    if (!v.is_number()) {
      unsupported(key, "expected a number");
      return std::nullopt;
    }
    return jsonNumber(v);
  }
  /// A finite number >= 0 (learning rates, the clipping norm).
  std::optional<double> asNonNegative(const Json &v, const std::string &key) {
    if (isAuto(v))
      return std::nullopt;
    const double d = jsonNumber(v);
    if (!(d >= 0.0) || !std::isfinite(d)) {
      unsupported(key, "expected a number >= 0");
      return std::nullopt;
    }
    return d;
  }
  std::optional<bool> asBool(const Json &v, const std::string &key) {
    if (isAuto(v))
      return std::nullopt;
    if (!v.is_boolean()) {
      unsupported(key, "expected true or false");
      return std::nullopt;
    }
    return v.get<bool>();
  }

  void zero(const Json &z);
  void offload(const Json &v, const std::string &key);
  void precisionSection(const std::string &key, const Json &v);
  void fp16(const Json &f);
  void optimizer(const Json &o);
  void scheduler(const Json &s);
  void activationCheckpointing(const Json &a);
  void aio(const Json &a);
  void monitor(const std::string &key, const Json &v);
  void finish();
};

void Reader::top(const Json &root) {
  for (const auto &[key, v] : jsonMembers(root)) {
    if (key == "train_batch_size") {
      if (auto i = asInteger(v, key, 1))
        out.trainBatch = *i;
    } else if (key == "train_micro_batch_size_per_gpu") {
      if (auto i = asInteger(v, key, 1))
        out.microBatch = *i;
    } else if (key == "gradient_accumulation_steps") {
      if (auto i = asInteger(v, key, 1)) {
        flag("grad-accum-steps", std::to_string(*i), key);
        out.gradAccumSteps = *i;
      }
    } else if (key == "gradient_clipping") {
      // Its range is the flag's to check (each tool names flag and key).
      if (auto d = asNumber(v, key)) {
        flag("clip-grad-norm", number(*d), key);
        out.clip = *d;
      }
    } else if (key == "zero_optimization") {
      if (v.is_object())
        zero(v);
      else
        unsupported(key, "expected an object");
    } else if (key == "bf16" || key == "fp16") {
      precisionSection(key, v);
    } else if (key == "communication_data_type") {
      const std::string &s = jsonText(v);
      if (s == "fp32" || s == "bf16" || s == "fp16")
        commType = s;
      else
        unsupported(key, "expected \"fp32\", \"bf16\" or \"fp16\"");
    } else if (key == "optimizer") {
      if (v.is_object())
        optimizer(v);
      else
        unsupported(key, "expected an object");
    } else if (key == "scheduler") {
      out.forExecutable.push_back(key);
      if (v.is_object())
        scheduler(v);
      else
        unsupported(key, "expected an object");
    } else if (key == "steps_per_print") {
      out.forExecutable.push_back(key);
      if (auto i = asInteger(v, key, 0))
        out.stepsPerPrint = *i;
    } else if (key == "activation_checkpointing") {
      if (v.is_object())
        activationCheckpointing(v);
      else
        unsupported(key, "expected an object");
    } else if (key == "wall_clock_breakdown") {
      if (auto on = asBool(v, key); on && *on)
        out.notes.push_back("wall_clock_breakdown: the executable's --trace "
                            "records every kernel and collective");
    } else if (key == "aio") {
      if (v.is_object())
        aio(v);
      else
        unsupported(key, "expected an object");
    } else if (key == "zero_allow_untested_optimizer" ||
               key == "zero_force_ds_cpu_optimizer") {
      // DeepSpeed's guards around optimizers it did not write; ztrain's
      // updates (on the device or in the host step) are its own.
      asBool(v, key);
    } else if (isMonitor(key) || key == "flops_profiler") {
      monitor(key, v);
    } else {
      unknown("", key,
              {"train_batch_size",
               "train_micro_batch_size_per_gpu",
               "gradient_accumulation_steps",
               "gradient_clipping",
               "zero_optimization",
               "bf16",
               "fp16",
               "communication_data_type",
               "optimizer",
               "activation_checkpointing",
               "scheduler",
               "steps_per_print",
               "wall_clock_breakdown",
               "aio",
               "zero_allow_untested_optimizer",
               "zero_force_ds_cpu_optimizer",
               "flops_profiler",
               "tensorboard",
               "wandb",
               "csv_monitor",
               "comet",
               "comms_logger",
               "memory_breakdown",
               "dump_state"});
    }
  }
  finish();
}

/// What needs the whole file: the precision's conversions, the run's lr.
void Reader::finish() {
  if (std::count_if(
          out.compileFlags.begin(), out.compileFlags.end(),
          [](const DeepSpeedSetting &f) { return f.flag == "precision"; }) > 1)
    unsupported("bf16.enabled and fp16.enabled", "both true: choose one");
  const bool low = precision != "fp32";
  if (!commType.empty() && commType != "fp32" && commType != precision)
    unsupported("communication_data_type=" + commType,
                "gradients are reduced in the parameters' type or fp32");
  if (commType == "fp32" && low)
    flag("reduce-dtype", "fp32", "communication_data_type");
  const int64_t gradBytes = low && commType != "fp32" ? 2 : 4;
  const int64_t paramBytes = low ? 2 : 4;
  if (reduceBucketElements)
    flag("bucket-bytes", std::to_string(*reduceBucketElements * gradBytes),
         "zero_optimization.reduce_bucket_size");
  if (maxLiveElements)
    flag("max-live-bytes", std::to_string(*maxLiveElements * paramBytes),
         "zero_optimization.stage3_max_live_parameters");
  // The run's lr: the scheduler's peak where it has one (what DeepSpeed's
  // schedulers warm up to), else the optimizer's.
  if (out.schedule && out.schedule->maxLr)
    out.runHypers.push_back({"--lr", number(*out.schedule->maxLr),
                             "scheduler.params.warmup_max_lr"});
  else if (optimizerLr)
    out.runHypers.push_back(
        {"--lr", number(*optimizerLr), "optimizer.params.lr"});
  std::sort(problems.begin(), problems.end());
  std::sort(out.forExecutable.begin(), out.forExecutable.end());
}

/// bf16 / fp16: {"enabled": true} is --precision; the executable checks
/// the build against it ("fp32" when a section is there but not enabled).
void Reader::precisionSection(const std::string &key, const Json &v) {
  if (!v.is_object()) {
    unsupported(key, "expected an object");
    return;
  }
  if (key == "fp16") {
    fp16(v);
  } else {
    for (const auto &[field, value] : jsonMembers(v)) {
      if (field != "enabled") {
        unknown("bf16." + field);
        continue;
      }
      if (auto on = asBool(value, "bf16.enabled"); on && *on) {
        precision = "bf16";
        flag("precision", "bf16", "bf16.enabled");
      }
    }
  }
  const Json *on = jsonFind(v, "enabled");
  if (on && isAuto(*on))
    return;
  if (on && on->is_boolean() && on->get<bool>())
    out.precision = key;
  else if (out.precision.empty())
    out.precision = "fp32";
}

void Reader::monitor(const std::string &key, const Json &v) {
  // Every DeepSpeed config has some, and none changes what is trained. A
  // note says what ztrain gives instead; their contents are not checked.
  const Json *on = jsonFind(v, "enabled");
  if (key == "flops_profiler") {
    if (!v.is_object())
      unsupported(key, "expected an object");
    else if (on && asBool(*on, "flops_profiler.enabled").value_or(false))
      out.notes.push_back("flops_profiler: the progress line shows the "
                          "achieved TFLOP/s and MFU from the compiler's "
                          "FLOP count; there is no per-module profile");
    return;
  }
  const bool enabled = v.is_object()
                           ? !on || !on->is_boolean() || on->get<bool>()
                           : v.is_boolean() && v.get<bool>();
  if (!v.is_object() && !v.is_boolean())
    unsupported(key, "expected an object");
  else if (enabled)
    out.notes.push_back(key +
                        ": not written by ztrain; the executable's --report "
                        "(losses, learning rates, memory and communication "
                        "per rank), --trace (a Chrome trace of every kernel "
                        "and collective) and progress lines give what it "
                        "records");
}

void Reader::zero(const Json &z) {
  for (const auto &[key, v] : jsonMembers(z)) {
    const std::string name = "zero_optimization." + key;
    if (key == "stage") {
      if (auto i = asInteger(v, name))
        flag("zero-stage", std::to_string(*i), name);
    } else if (key == "overlap_comm") {
      if (auto b = asBool(v, name))
        flag("overlap", *b ? "true" : "false", name);
    } else if (key == "reduce_bucket_size") {
      if (auto i = asInteger(v, name, 0))
        reduceBucketElements = *i;
    } else if (key == "stage3_max_live_parameters") {
      if (auto i = asInteger(v, name, 1))
        maxLiveElements = *i;
    } else if (key == "offload_optimizer" || key == "offload_param") {
      offload(v, name);
    } else if (key == "contiguous_gradients") {
      // ztrain's gradient buffers are contiguous per parameter and its
      // buckets packed: nothing to choose.
      asBool(v, name);
    } else if (key == "reduce_scatter" || key == "allgather_partitions") {
      // What ztrain always does (reduce-scatter, then all-gather the
      // partitions); false asks for DeepSpeed's all-reduce fallback.
      if (auto b = asBool(v, name); b && !*b)
        unsupported(name + "=false", "ztrain always reduce-scatters and "
                                     "all-gathers partitions");
    } else if (key == "stage3_prefetch_bucket_size") {
      if (asInteger(v, name, 0))
        out.notes.push_back(name + ": not used; ztrain prefetches stage 3's "
                                   "gathers by uses ahead (--prefetch-depth, "
                                   "with --overlap)");
    } else if (key == "allgather_bucket_size") {
      if (asInteger(v, name, 0))
        out.notes.push_back(name + ": not used; ztrain all-gathers each "
                                   "updated partition whole");
    } else if (key == "stage3_param_persistence_threshold") {
      if (auto i = asInteger(v, name, 0); i && *i > 0)
        out.notes.push_back(name + ": not used; ztrain partitions every "
                                   "parameter at stage 3");
    } else if (key == "sub_group_size") {
      // DeepSpeed steps the optimizer in groups of this many elements; so
      // does ztrain for states on nvme (chunks through one-chunk buffers).
      if (auto i = asInteger(v, name, 1))
        flag("sub-group-size", std::to_string(*i), name);
    } else if (key == "stage3_gather_16bit_weights_on_model_save" ||
               key == "stage3_gather_fp16_weights_on_model_save") {
      // What the executable's --save always does: whole weights.
      asBool(v, name);
    } else if (key == "stage3_max_reuse_distance") {
      if (auto i = asInteger(v, name, 0); i && *i > 0)
        out.notes.push_back(name + ": not used; ztrain frees each gathered "
                                   "parameter after the forward pass and "
                                   "gathers it again for the backward pass "
                                   "(--reshard-after-forward=false keeps the "
                                   "forward's gathers)");
    } else if (key == "round_robin_gradients") {
      if (auto b = asBool(v, name); b && *b)
        out.notes.push_back(name + ": not used; with --offload-optimizer=cpu "
                                   "each rank copies its partition of each "
                                   "final gradient to host memory as it is "
                                   "made (docs/offload.md)");
    } else if (key == "cpu_offload") {
      // DeepSpeed's deprecated spelling of offload_optimizer.device = cpu.
      if (auto b = asBool(v, name); b && *b) {
        if (jsonFind(z, "offload_optimizer"))
          unsupported(name, "the deprecated spelling of "
                            "offload_optimizer.device; give one of the two");
        else
          flag("offload-optimizer", "cpu", name);
      }
    } else if (key == "load_from_fp32_weights" ||
               key == "ignore_unused_parameters") {
      // ztrain's checkpoints keep the fp32 masters and resume from them;
      // a parameter the loss does not depend on gets zeros (autodiff warns).
      asBool(v, name);
    } else if (key == "zero_quantized_weights" ||
               key == "zero_quantized_gradients") {
      if (auto b = asBool(v, name); b && *b)
        unsupported(name, "ZeRO++'s quantized collectives are not built");
    } else if (key == "mics_shard_size") {
      // MiCS: the ranks of a shard group (DeepSpeed's -1: off). ztrain's
      // hybrid sharding (--dp-shard; the replicas are dp / shard).
      if (auto i = asInteger(v, name, -1); i && *i > 0)
        flag("dp-shard", std::to_string(*i), name);
    } else if (key == "mics_hierarchical_params_gather") {
      // ztrain's parameter gathers run inside the shard group (a node)
      // already: there is no cross-node gather to make hierarchical.
      asBool(v, name);
    } else if (key == "zero_hpz_partition_size") {
      // ZeRO++'s hpZ: the secondary partition's group (1: off).
      if (auto i = asInteger(v, name, 0); i && *i > 1)
        flag("zero-hpz-partition-size", std::to_string(*i), name);
    } else {
      unknown("zero_optimization.", key,
              {"stage",
               "overlap_comm",
               "reduce_bucket_size",
               "stage3_max_live_parameters",
               "offload_optimizer",
               "offload_param",
               "contiguous_gradients",
               "reduce_scatter",
               "allgather_partitions",
               "stage3_prefetch_bucket_size",
               "allgather_bucket_size",
               "stage3_param_persistence_threshold",
               "sub_group_size",
               "stage3_gather_16bit_weights_on_model_save",
               "stage3_gather_fp16_weights_on_model_save",
               "stage3_max_reuse_distance",
               "round_robin_gradients",
               "cpu_offload",
               "load_from_fp32_weights",
               "ignore_unused_parameters",
               "zero_quantized_weights",
               "zero_quantized_gradients",
               "zero_hpz_partition_size",
               "mics_shard_size",
               "mics_hierarchical_params_gather"});
    }
  }
}

/// DeepSpeed's aio section tunes its libaio swapper (block size, queue
/// depth, threads). ztrain's swap engine submits each tensor's transfer
/// whole to io_uring with O_DIRECT and keeps up to 64 in flight
/// (runtime.md, "Swap I/O"): the knobs are checked and noted, GPUDirect
/// Storage is refused.
void Reader::aio(const Json &a) {
  bool tuned = false;
  for (const auto &[key, v] : jsonMembers(a)) {
    const std::string name = "aio." + key;
    if (key == "block_size" || key == "queue_depth" || key == "thread_count" ||
        key == "intra_op_parallelism") {
      tuned |= asInteger(v, name, 1).has_value();
    } else if (key == "io_backend") {
      // DeepSpeed's libaio ("async_io" and its aliases) or plain POSIX
      // reads and writes; ztrain's engine is io_uring either way.
      const std::string b = lower(jsonText(v));
      if (b != "async_io" && b != "aio" && b != "async" && b != "deepnvme" &&
          b != "posix")
        unsupported(name, "expected \"async_io\" or \"posix\"");
      else
        tuned = true;
    } else if (key == "single_submit" || key == "overlap_events") {
      tuned |= asBool(v, name).has_value();
    } else if (key == "use_gds") {
      if (auto on = asBool(v, name); on && *on)
        unsupported(name, "GPUDirect Storage is not built: nvme tensors "
                          "reach the device through pinned host memory");
    } else {
      unknown(name);
    }
  }
  if (tuned)
    out.notes.push_back("aio: not used; ztrain's swap engine submits each "
                        "tensor's transfer whole to io_uring (O_DIRECT), up "
                        "to 64 in flight");
}

/// DeepSpeed checkpoints the functions the model wraps in
/// deepspeed.checkpointing.checkpoint (its blocks): full recompute of each
/// block, which is ztrain's --recompute=full over the builders' block marks.
void Reader::activationCheckpointing(const Json &a) {
  flag("recompute", "full", "activation_checkpointing");
  for (const auto &[key, v] : jsonMembers(a)) {
    const std::string name = "activation_checkpointing." + key;
    if (key == "cpu_checkpointing") {
      // The checkpoints in host memory between the passes (Pa+cpu).
      if (auto on = asBool(v, name); on && *on)
        flag("offload-activations", "cpu", name);
    } else if (key == "partition_activations") {
      if (auto on = asBool(v, name); on && *on)
        unsupported(name, "partitions activations over model-parallel "
                          "ranks; ztrain is data-parallel");
    } else if (key == "contiguous_memory_optimization") {
      // ztrain's activations live in one statically planned arena: what
      // this option asks for is how ztrain always allocates.
      asBool(v, name);
    } else if (key == "number_checkpoints") {
      if (!v.is_null())
        unsupported(name, "ztrain's segments are the model's train.checkpoint "
                          "marks (each block for the builders' models)");
    } else if (key == "synchronize_checkpoint_boundary" || key == "profile") {
      if (auto on = asBool(v, name); on && *on)
        unsupported(name, "a debugging option with no ztrain equivalent");
    } else {
      unknown(name);
    }
  }
}

/// zero_optimization.offload_optimizer / offload_param: the device becomes
/// --offload-optimizer / --offload-param (zero-offload); nvme_path is the
/// executable's --nvme-path. DeepSpeed's buffer and pinning knobs size what
/// ztrain's plan sizes from the tensors themselves: accepted, except
/// buffer_count of the optimizer, which is --offload-buffer-count.
void Reader::offload(const Json &v, const std::string &key) {
  if (!v.is_object()) {
    unsupported(key, "expected an object");
    return;
  }
  const bool optimizerStates = key == "zero_optimization.offload_optimizer";
  for (const auto &[field, value] : jsonMembers(v)) {
    const std::string name = key + "." + field;
    if (field == "device") {
      const std::string &device = jsonText(value);
      if (device != "none" && device != "cpu" && device != "nvme") {
        unsupported(name, "expected \"none\", \"cpu\" or \"nvme\"");
        continue;
      }
      flag(optimizerStates ? "offload-optimizer" : "offload-param", device,
           name);
    } else if (field == "nvme_path") {
      if (!value.is_string()) {
        unsupported(name, "expected a directory");
        continue;
      }
      out.forExecutable.push_back(name);
      if (!out.nvmePath.empty() && out.nvmePath != jsonText(value))
        unsupported("zero_optimization.offload_param.nvme_path",
                    "differs from offload_optimizer's: ztrain keeps one "
                    "swap directory per rank");
      else
        out.nvmePath = jsonText(value);
    } else if (field == "buffer_count" && optimizerStates) {
      if (auto i = asInteger(value, name, 1))
        flag("offload-buffer-count", std::to_string(*i), name);
    } else if (field == "pin_memory" || field == "fast_init" ||
               ((field == "pipeline_read" || field == "pipeline_write") &&
                optimizerStates)) {
      // Swap buffers are pinned on a device backend, and nvme states'
      // reads and write-backs always overlap the host step (chunks with
      // --sub-group-size): nothing to choose.
      asBool(value, name);
    } else if (field == "buffer_count" || field == "buffer_size" ||
               field == "max_in_cpu") {
      // ztrain's swap buffers are the tensors' own sizes, placed by
      // plan-memory, one use ahead.
      asInteger(value, name, 0);
    } else if (field == "ratio") {
      // offload_param has no ratio in DeepSpeed: ztrain's
      // --offload-param-ratio, spelled as offload_optimizer.ratio is.
      std::optional<double> r = asNumber(value, name);
      if (r && !(*r > 0.0 && *r <= 1.0))
        unsupported(name, "expected a number in (0, 1]");
      else if (r)
        flag(optimizerStates ? "offload-ratio" : "offload-param-ratio",
             number(*r), name);
    } else {
      unknown(name);
    }
  }
}

void Reader::fp16(const Json &f) {
  std::optional<bool> enabled;
  std::vector<std::array<std::string, 3>> tuning; // flag, value, key
  for (const auto &[key, v] : jsonMembers(f)) {
    const std::string name = "fp16." + key;
    if (key == "enabled") {
      enabled = asBool(v, name);
    } else if (key == "loss_scale") {
      // 0 is DeepSpeed's dynamic scaling, ztrain's only kind.
      if (auto d = asNumber(v, name); d && *d != 0.0)
        unsupported(name + "=" + number(*d),
                    "static loss scaling; 0 (dynamic) is accepted");
    } else if (key == "initial_scale_power") {
      if (auto i = asInteger(v, name))
        tuning.push_back({"initial-scale-power", std::to_string(*i), name});
    } else if (key == "loss_scale_window") {
      if (auto i = asInteger(v, name, 1))
        tuning.push_back({"loss-scale-window", std::to_string(*i), name});
    } else if (key == "hysteresis") {
      if (auto i = asInteger(v, name, 1))
        tuning.push_back({"hysteresis", std::to_string(*i), name});
    } else if (key == "min_loss_scale") {
      if (auto d = asNumber(v, name))
        tuning.push_back({"min-loss-scale", number(*d), name});
    } else {
      unknown(name);
    }
  }
  if (enabled && *enabled) {
    precision = "fp16";
    flag("precision", "fp16", "fp16.enabled");
    for (auto &[name, value, key] : tuning)
      flag(name, value, key);
  }
}

void Reader::optimizer(const Json &o) {
  std::string kind;
  std::optional<bool> adamW;
  if (const Json *t = jsonFind(o, "type")) {
    const std::string type = lower(jsonText(*t));
    if (type == "adam" || type == "adamw" || type == "sgd")
      kind = type;
    else
      unsupported("optimizer.type=" +
                      (t->is_string() ? jsonText(*t) : std::string("?")),
                  "ztrain has Adam, AdamW and SGD");
  }
  for (const auto &[key, v] : jsonMembers(o))
    if (key != "type" && key != "params")
      unknown("optimizer." + key);
  std::vector<std::array<std::string, 3>> hyper; // flag, value, key
  if (const Json *p = jsonFind(o, "params")) {
    if (!p->is_object())
      unsupported("optimizer.params", "expected an object");
    for (const auto &[key, v] : jsonMembers(*p)) {
      const std::string name = "optimizer.params." + key;
      if (key == "lr") {
        if (auto d = asNumber(v, name)) {
          hyper.push_back({"lr", number(*d), name});
          optimizerLr = d;
        }
      } else if (key == "eps" || key == "weight_decay" || key == "momentum" ||
                 key == "dampening") {
        if (auto d = asNumber(v, name))
          hyper.push_back(
              {key == "weight_decay" ? "weight-decay" : key, number(*d), name});
      } else if (key == "betas") {
        if (isAuto(v))
          continue;
        if (v.is_array() && v.size() == 2 && v[0].is_number() &&
            v[1].is_number()) {
          hyper.push_back({"beta1", number(jsonNumber(v[0])), name + "[0]"});
          hyper.push_back({"beta2", number(jsonNumber(v[1])), name + "[1]"});
        } else {
          unsupported(name, "expected [beta1, beta2]");
        }
      } else if (key == "nesterov") {
        if (auto b = asBool(v, name); b && *b)
          hyper.push_back({"nesterov", "true", name});
      } else if (key == "adam_w_mode") {
        adamW = asBool(v, name);
      } else if (key == "torch_adam") {
        asBool(v, name); // which kernel DeepSpeed uses: the same update
      } else {
        unknown(name);
      }
    }
  }
  // DeepSpeed's "Adam" is FusedAdam with adam_w_mode on by default: AdamW.
  if (kind == "adam" && adamW.value_or(true))
    kind = "adamw";
  else if (kind == "adamw" && adamW && !*adamW)
    kind = "adam";
  if (!kind.empty())
    flag("optimizer", kind, "optimizer.type");
  out.optimizer = kind;
  for (auto &[name, value, key] : hyper) {
    flag(name, value, key);
    // The executable's run-time hyper-parameters (its lr comes from
    // finish(): a scheduler's peak wins).
    if (name != "lr" && name != "nesterov")
      out.runHypers.push_back({"--" + name, value, key});
  }
}

/// DeepSpeed's WarmupLR (constant after a warmup from 0), WarmupDecayLR
/// (then linear to 0) and WarmupCosineLR (then cosine to cos_min_ratio).
void Reader::scheduler(const Json &s) {
  const std::string kind =
      jsonText(jsonFind(s, "type") ? *jsonFind(s, "type") : Json());
  if (kind != "WarmupLR" && kind != "WarmupDecayLR" &&
      kind != "WarmupCosineLR") {
    problems.push_back("scheduler.type=" + kind +
                       " (ztrain has WarmupLR, WarmupDecayLR and "
                       "WarmupCosineLR)");
    return;
  }
  DeepSpeedSchedule schedule;
  schedule.kind = kind == "WarmupLR"        ? "constant"
                  : kind == "WarmupDecayLR" ? "linear"
                                            : "cosine";
  const Json none;
  const Json *params = jsonFind(s, "params");
  for (const auto &[name, v] : jsonMembers(params ? *params : none)) {
    const std::string k = "scheduler.params." + name;
    if (isAuto(v))
      continue;
    const double d = jsonNumber(v);
    if (name == "warmup_num_steps") {
      if (auto i = asInteger(v, k, 0))
        schedule.warmupSteps = *i;
    } else if (name == "total_num_steps" && kind != "WarmupLR") {
      if (auto i = asInteger(v, k, 1))
        schedule.decaySteps = *i;
    } else if (name == "warmup_max_lr" && kind != "WarmupCosineLR") {
      if (auto lr = asNonNegative(v, k))
        schedule.maxLr = lr;
    } else if ((name == "warmup_min_lr" && kind != "WarmupCosineLR") ||
               (name == "warmup_min_ratio" && kind == "WarmupCosineLR")) {
      if (d != 0.0)
        unsupported(k, "ztrain warms up from 0");
    } else if (name == "warmup_type") {
      const std::string &type = jsonText(v);
      if (type != "linear" && type != "log")
        problems.push_back(k + "=" + type + " (\"linear\" or \"log\")");
      else
        schedule.logWarmup = type == "log";
    } else if (name == "cos_min_ratio" && kind == "WarmupCosineLR") {
      if (!(d >= 0.0 && d <= 1.0))
        unsupported(k, "expected a number in [0, 1]");
      else
        schedule.minLrRatio = d;
    } else if (name == "last_batch_iteration") {
      int64_t n = 0;
      if (!jsonInt64(v, n) || n != -1)
        unsupported(k, "a resumed run continues its own steps");
    } else {
      unsupported(k, "unknown for " + kind);
    }
  }
  if (kind == "WarmupCosineLR" && !schedule.minLrRatio)
    schedule.minLrRatio = 0.0001; // DeepSpeed's default cos_min_ratio
  out.schedule = schedule;
}

} // namespace

bool parseDeepSpeedConfig(const std::string &text, DeepSpeedConfig &out,
                          std::string &error) {
  Json root;
  if (!parseJson(text, root, error)) {
    error = "not JSON: " + error;
    return false;
  }
  if (!root.is_object()) {
    error = "expected a JSON object";
    return false;
  }
  Reader reader(out);
  reader.top(root);
  if (reader.problems.empty())
    return true;
  error = reader.problems.size() == 1 ? "a key" : "keys";
  error += " ztrain cannot honour: ";
  for (size_t i = 0; i < reader.problems.size(); ++i)
    error += (i ? "; " : "") + reader.problems[i];
  return false;
}

} // namespace ztrt
