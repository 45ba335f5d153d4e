//===- DeepSpeedConfig.cpp - ztrain-compile --config ds_config.json ------===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#include "DeepSpeedConfig.h"

#include <set>
#include <vector>

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <cmath>
#include <optional>
#include <set>
#include <vector>

using namespace llvm;

namespace {

/// Walks the config, collecting flags and every key it cannot honour.
class Reader {
public:
  explicit Reader(ztrain::DeepSpeedFlags &out) : out(out) {}

  void top(const json::Object &root);
  /// The unknown and unsupported keys, sorted, one phrase each.
  std::vector<std::string> problems;

private:
  void flag(StringRef name, std::string value, const Twine &key) {
    out.flags.push_back({name.str(), std::move(value)});
    out.keys.push_back({name.str(), key.str()});
  }
  void unsupported(const Twine &key, const Twine &why) {
    problems.push_back((key + " (" + why + ")").str());
  }
  void unknown(const Twine &key) { problems.push_back((key + " (unknown)").str()); }
  /// An unknown key of a section whose keys are `known`: with the nearest
  /// known one when it is close (a misspelling: zero_optimisation).
  void unknown(StringRef prefix, StringRef key, ArrayRef<StringRef> known) {
    StringRef best;
    unsigned bestDistance = std::max<unsigned>(2, key.size() / 3) + 1;
    for (StringRef k : known) {
      unsigned d = key.edit_distance(k, /*AllowReplacements=*/true);
      if (d < bestDistance) {
        bestDistance = d;
        best = k;
      }
    }
    std::string phrase = (prefix + key + " (unknown").str();
    if (!best.empty())
      phrase += ("; did you mean " + prefix + best + "?").str();
    problems.push_back(phrase + ")");
  }

  static std::string number(double v) {
    std::string s;
    raw_string_ostream(s) << format("%.17g", v);
    return s;
  }
  static std::string integer(int64_t v) { return std::to_string(v); }

  /// Hugging Face's Trainer writes "auto" where it fills a value in from
  /// its own arguments; for ztrain it means what the flags and the model
  /// say (the key is skipped).
  static bool isAuto(const json::Value &v) {
    std::optional<StringRef> s = v.getAsString();
    return s && *s == "auto";
  }

  /// The value as an integer >= min, or a problem named after `key`.
  std::optional<int64_t> asInteger(const json::Value &v, const Twine &key,
                                   int64_t min = 0) {
    if (isAuto(v))
      return std::nullopt;
    std::optional<int64_t> i = v.getAsInteger();
    if (!i) {
      // DeepSpeed writes sizes as 5e8 too.
      std::optional<double> d = v.getAsNumber();
      if (d && std::isfinite(*d) && *d == std::floor(*d) && *d < 9.0e18)
        i = static_cast<int64_t>(*d);
    }
    if (!i || *i < min) {
      unsupported(key, "expected an integer >= " + Twine(min));
      return std::nullopt;
    }
    return i;
  }
  std::optional<double> asNumber(const json::Value &v, const Twine &key) {
    if (isAuto(v))
      return std::nullopt;
    std::optional<double> d = v.getAsNumber();
    if (!d)
      unsupported(key, "expected a number");
    return d;
  }
  std::optional<bool> asBool(const json::Value &v, const Twine &key) {
    if (isAuto(v))
      return std::nullopt;
    std::optional<bool> b = v.getAsBoolean();
    if (!b)
      unsupported(key, "expected true or false");
    return b;
  }

  void zero(const json::Object &z);
  void offload(const json::Value &v, StringRef key);
  void fp16(const json::Object &f);
  void optimizer(const json::Object &o);
  void activationCheckpointing(const json::Object &a);
  void aio(const json::Object &a);

  ztrain::DeepSpeedFlags &out;
  /// Element counts DeepSpeed gives where ztrain takes bytes: converted once
  /// the precision is known.
  std::optional<int64_t> reduceBucketElements, maxLiveElements;
  std::string precision = "fp32", commType;
};

/// DeepSpeed's monitoring and logging sections (ztrain's --report, --trace
/// and progress lines are what it records instead).
static bool isMonitor(StringRef key) {
  return key == "tensorboard" || key == "wandb" || key == "csv_monitor" ||
         key == "comet" || key == "comms_logger" || key == "memory_breakdown" ||
         key == "dump_state";
}

void Reader::top(const json::Object &root) {
  for (const auto &kv : root) {
    StringRef key = kv.first;
    const json::Value &v = kv.second;
    if (key == "train_batch_size") {
      if (auto i = asInteger(v, key, 1))
        out.trainBatch = *i;
    } else if (key == "train_micro_batch_size_per_gpu") {
      if (auto i = asInteger(v, key, 1))
        out.microBatch = *i;
    } else if (key == "gradient_accumulation_steps") {
      if (auto i = asInteger(v, key, 1))
        flag("grad-accum-steps", integer(*i), key);
    } else if (key == "gradient_clipping") {
      if (auto d = asNumber(v, key))
        flag("clip-grad-norm", number(*d), key);
    } else if (key == "zero_optimization") {
      if (const json::Object *z = v.getAsObject())
        zero(*z);
      else
        unsupported(key, "expected an object");
    } else if (key == "bf16") {
      const json::Object *b = v.getAsObject();
      for (const auto &e : b ? *b : json::Object()) {
        if (StringRef(e.first) != "enabled") {
          unknown("bf16." + StringRef(e.first));
          continue;
        }
        if (auto on = asBool(e.second, "bf16.enabled"); on && *on) {
          precision = "bf16";
          flag("precision", "bf16", "bf16.enabled");
        }
      }
      if (!b)
        unsupported(key, "expected an object");
    } else if (key == "fp16") {
      if (const json::Object *f = v.getAsObject())
        fp16(*f);
      else
        unsupported(key, "expected an object");
    } else if (key == "communication_data_type") {
      std::optional<StringRef> s = v.getAsString();
      if (s && (*s == "fp32" || *s == "bf16" || *s == "fp16"))
        commType = s->str();
      else
        unsupported(key, "expected \"fp32\", \"bf16\" or \"fp16\"");
    } else if (key == "optimizer") {
      if (const json::Object *o = v.getAsObject())
        optimizer(*o);
      else
        unsupported(key, "expected an object");
    } else if (key == "activation_checkpointing") {
      if (const json::Object *a = v.getAsObject())
        activationCheckpointing(*a);
      else
        unsupported(key, "expected an object");
    } else if (key == "scheduler" || key == "steps_per_print") {
      out.forExecutable.push_back(key.str());
    } else if (key == "wall_clock_breakdown") {
      if (auto on = asBool(v, key); on && *on)
        out.notes.push_back("wall_clock_breakdown: the executable's --trace "
                            "records every kernel and collective");
    } else if (key == "aio") {
      if (const json::Object *a = v.getAsObject())
        aio(*a);
      else
        unsupported(key, "expected an object");
    } else if (key == "zero_allow_untested_optimizer" ||
               key == "zero_force_ds_cpu_optimizer") {
      // DeepSpeed's guards around optimizers it did not write; ztrain's
      // updates (on the device or in the host step) are its own.
      asBool(v, key);
    } else if (isMonitor(key)) {
      // DeepSpeed's monitors and loggers: every DeepSpeed config has some,
      // and none changes what is trained. A note says what ztrain gives
      // instead; their contents are not checked.
      const json::Object *m = v.getAsObject();
      const json::Value *on = m ? m->get("enabled") : nullptr;
      const bool enabled = m ? !on || on->getAsBoolean().value_or(true)
                             : v.getAsBoolean().value_or(false);
      if (!m && !v.getAsBoolean())
        unsupported(key, "expected an object");
      else if (enabled)
        out.notes.push_back(
            (key + ": not written by ztrain; the executable's --report "
                   "(losses, learning rates, memory and communication per "
                   "rank), --trace (a Chrome trace of every kernel and "
                   "collective) and progress lines give what it records")
                .str());
    } else if (key == "flops_profiler") {
      const json::Object *f = v.getAsObject();
      const json::Value *on = f ? f->get("enabled") : nullptr;
      if (!f)
        unsupported(key, "expected an object");
      else if (on && asBool(*on, "flops_profiler.enabled").value_or(false))
        out.notes.push_back("flops_profiler: the progress line shows the "
                            "achieved TFLOP/s and MFU from the compiler's "
                            "FLOP count; there is no per-module profile");
    } else {
      static const StringRef known[] = {
          "train_batch_size", "train_micro_batch_size_per_gpu",
          "gradient_accumulation_steps", "gradient_clipping",
          "zero_optimization", "bf16", "fp16", "communication_data_type",
          "optimizer", "activation_checkpointing", "scheduler",
          "steps_per_print", "wall_clock_breakdown", "aio",
          "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
          "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet",
          "comms_logger", "memory_breakdown", "dump_state"};
      unknown("", key, known);
    }
  }

  if (llvm::count_if(out.flags, [](const auto &f) {
        return f.first == "precision";
      }) > 1)
    unsupported("bf16.enabled and fp16.enabled", "both true: choose one");
  // Conversions that need the precision.
  const bool low = precision != "fp32";
  if (!commType.empty() && commType != "fp32" && commType != precision)
    unsupported("communication_data_type=" + commType,
                "gradients are reduced in the parameters' type or fp32");
  if (commType == "fp32" && low)
    flag("reduce-dtype", "fp32", "communication_data_type");
  const int64_t gradBytes = low && commType != "fp32" ? 2 : 4;
  const int64_t paramBytes = low ? 2 : 4;
  if (reduceBucketElements)
    flag("bucket-bytes", integer(*reduceBucketElements * gradBytes),
         "zero_optimization.reduce_bucket_size");
  if (maxLiveElements)
    flag("max-live-bytes", integer(*maxLiveElements * paramBytes),
         "zero_optimization.stage3_max_live_parameters");
  llvm::sort(problems);
}

void Reader::zero(const json::Object &z) {
  for (const auto &kv : z) {
    StringRef key = kv.first;
    std::string name = ("zero_optimization." + key).str();
    const json::Value &v = kv.second;
    if (key == "stage") {
      if (auto i = asInteger(v, name))
        flag("zero-stage", integer(*i), name);
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
        flag("sub-group-size", integer(*i), name);
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
        if (z.get("offload_optimizer"))
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
    } else if (key == "zero_hpz_partition_size") {
      if (auto i = asInteger(v, name, 0); i && *i > 1)
        unsupported(name, "ZeRO++'s secondary partition is not built");
    } else {
      static const StringRef known[] = {
          "stage", "overlap_comm", "reduce_bucket_size",
          "stage3_max_live_parameters", "offload_optimizer", "offload_param",
          "contiguous_gradients", "reduce_scatter", "allgather_partitions",
          "stage3_prefetch_bucket_size", "allgather_bucket_size",
          "stage3_param_persistence_threshold", "sub_group_size",
          "stage3_gather_16bit_weights_on_model_save",
          "stage3_gather_fp16_weights_on_model_save",
          "stage3_max_reuse_distance", "round_robin_gradients", "cpu_offload",
          "load_from_fp32_weights", "ignore_unused_parameters",
          "zero_quantized_weights", "zero_quantized_gradients",
          "zero_hpz_partition_size"};
      unknown("zero_optimization.", key, known);
    }
  }
}

/// DeepSpeed's aio section tunes its libaio swapper (block size, queue
/// depth, threads). ztrain's swap engine submits each tensor's transfer
/// whole to io_uring with O_DIRECT and keeps up to 64 in flight
/// (runtime.md, "Swap I/O"): the knobs are checked and noted, GPUDirect
/// Storage is refused.
void Reader::aio(const json::Object &a) {
  bool tuned = false;
  for (const auto &kv : a) {
    StringRef key = kv.first;
    std::string name = ("aio." + key).str();
    if (key == "block_size" || key == "queue_depth" || key == "thread_count" ||
        key == "intra_op_parallelism") {
      tuned |= asInteger(kv.second, name, 1).has_value();
    } else if (key == "io_backend") {
      // DeepSpeed's libaio ("async_io" and its aliases) or plain POSIX
      // reads and writes; ztrain's engine is io_uring either way.
      std::optional<StringRef> b = kv.second.getAsString();
      if (!b || !llvm::is_contained({"async_io", "aio", "async", "deepnvme",
                                     "posix"},
                                    b->lower()))
        unsupported(name, "expected \"async_io\" or \"posix\"");
      else
        tuned = true;
    } else if (key == "single_submit" || key == "overlap_events") {
      tuned |= asBool(kv.second, name).has_value();
    } else if (key == "use_gds") {
      if (auto on = asBool(kv.second, name); on && *on)
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
void Reader::activationCheckpointing(const json::Object &a) {
  flag("recompute", "full", "activation_checkpointing");
  for (const auto &kv : a) {
    StringRef key = kv.first;
    std::string name = ("activation_checkpointing." + key).str();
    if (key == "cpu_checkpointing") {
      // The checkpoints in host memory between the passes (Pa+cpu).
      std::optional<bool> on = asBool(kv.second, name);
      if (on && *on)
        flag("offload-activations", "cpu", name);
    } else if (key == "partition_activations") {
      std::optional<bool> on = asBool(kv.second, name);
      if (on && *on)
        unsupported(name, "partitions activations over model-parallel "
                          "ranks; ztrain is data-parallel");
    } else if (key == "contiguous_memory_optimization") {
      // ztrain's activations live in one statically planned arena: what
      // this option asks for is how ztrain always allocates.
      asBool(kv.second, name);
    } else if (key == "number_checkpoints") {
      if (!kv.second.getAsNull())
        unsupported(name, "ztrain's segments are the model's train.checkpoint "
                          "marks (each block for the builders' models)");
    } else if (key == "synchronize_checkpoint_boundary" || key == "profile") {
      std::optional<bool> on = asBool(kv.second, name);
      if (on && *on)
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
void Reader::offload(const json::Value &v, StringRef key) {
  const json::Object *o = v.getAsObject();
  if (!o) {
    unsupported(key, "expected an object");
    return;
  }
  const bool optimizerStates = key.ends_with("offload_optimizer");
  for (const auto &kv : *o) {
    StringRef field = kv.first;
    std::string name = (key + "." + field).str();
    if (field == "device") {
      std::optional<StringRef> device = kv.second.getAsString();
      if (!device || (*device != "none" && *device != "cpu" &&
                      *device != "nvme")) {
        unsupported(name, "expected \"none\", \"cpu\" or \"nvme\"");
        continue;
      }
      flag(optimizerStates ? "offload-optimizer" : "offload-param",
           device->str(), name);
    } else if (field == "nvme_path") {
      if (!kv.second.getAsString())
        unsupported(name, "expected a directory");
      else
        out.forExecutable.push_back(name);
    } else if (field == "buffer_count" && optimizerStates) {
      if (auto i = asInteger(kv.second, name, 1))
        flag("offload-buffer-count", integer(*i), name);
    } else if (field == "pin_memory" || field == "fast_init" ||
               ((field == "pipeline_read" || field == "pipeline_write") &&
                optimizerStates)) {
      // Swap buffers are pinned on a device backend, and nvme states'
      // reads and write-backs always overlap the host step (chunks with
      // --sub-group-size): nothing to choose.
      asBool(kv.second, name);
    } else if (field == "buffer_count" || field == "buffer_size" ||
               field == "max_in_cpu") {
      // ztrain's swap buffers are the tensors' own sizes, placed by
      // plan-memory, one use ahead.
      asInteger(kv.second, name, 0);
    } else if (field == "ratio" && optimizerStates) {
      std::optional<double> r = asNumber(kv.second, name);
      if (r && !(*r > 0.0 && *r <= 1.0))
        unsupported(name, "expected a number in (0, 1]");
      else if (r)
        flag("offload-ratio", number(*r), name);
    } else if (field == "ratio") {
      // Not a DeepSpeed key (its offload_param has no ratio): ztrain's
      // --offload-param-ratio, spelled as offload_optimizer.ratio is.
      std::optional<double> r = asNumber(kv.second, name);
      if (r && !(*r > 0.0 && *r <= 1.0))
        unsupported(name, "expected a number in (0, 1]");
      else if (r)
        flag("offload-param-ratio", number(*r), name);
    } else {
      unknown(name);
    }
  }
}

void Reader::fp16(const json::Object &f) {
  std::optional<bool> enabled;
  std::vector<std::array<std::string, 3>> tuning; // flag, value, key
  for (const auto &kv : f) {
    StringRef key = kv.first;
    std::string name = ("fp16." + key).str();
    const json::Value &v = kv.second;
    if (key == "enabled") {
      enabled = asBool(v, name);
    } else if (key == "loss_scale") {
      // 0 is DeepSpeed's dynamic scaling, ztrain's only kind.
      if (auto d = asNumber(v, name); d && *d != 0.0)
        unsupported(name + "=" + number(*d),
                    "static loss scaling; 0 (dynamic) is accepted");
    } else if (key == "initial_scale_power") {
      if (auto i = asInteger(v, name))
        tuning.push_back({"initial-scale-power", integer(*i), name});
    } else if (key == "loss_scale_window") {
      if (auto i = asInteger(v, name, 1))
        tuning.push_back({"loss-scale-window", integer(*i), name});
    } else if (key == "hysteresis") {
      if (auto i = asInteger(v, name, 1))
        tuning.push_back({"hysteresis", integer(*i), name});
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

void Reader::optimizer(const json::Object &o) {
  std::string kind;
  std::optional<bool> adamW;
  if (const json::Value *t = o.get("type")) {
    std::optional<StringRef> s = t->getAsString();
    std::string lower = s ? s->lower() : "";
    if (lower == "adam" || lower == "adamw" || lower == "sgd")
      kind = lower;
    else
      unsupported("optimizer.type=" + (s ? *s : StringRef("?")),
                  "ztrain has Adam, AdamW and SGD");
  }
  for (const auto &kv : o)
    if (StringRef(kv.first) != "type" && StringRef(kv.first) != "params")
      unknown("optimizer." + StringRef(kv.first));
  std::vector<std::array<std::string, 3>> hyper; // flag, value, key
  if (const json::Value *p = o.get("params")) {
    const json::Object *params = p->getAsObject();
    if (!params)
      unsupported("optimizer.params", "expected an object");
    for (const auto &kv : params ? *params : json::Object()) {
      StringRef key = kv.first;
      std::string name = ("optimizer.params." + key).str();
      const json::Value &v = kv.second;
      if (key == "lr" || key == "eps" || key == "weight_decay" ||
          key == "momentum" || key == "dampening") {
        if (auto d = asNumber(v, name))
          hyper.push_back({key == "weight_decay" ? "weight-decay" : key.str(),
                           number(*d), name});
      } else if (key == "betas") {
        if (isAuto(v))
          continue;
        const json::Array *a = v.getAsArray();
        std::optional<double> b1, b2;
        if (a && a->size() == 2) {
          b1 = (*a)[0].getAsNumber();
          b2 = (*a)[1].getAsNumber();
        }
        if (b1 && b2) {
          hyper.push_back({"beta1", number(*b1), name + "[0]"});
          hyper.push_back({"beta2", number(*b2), name + "[1]"});
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
  for (auto &[name, value, key] : hyper)
    flag(name, value, key);
}

} // namespace

/// The first key of valid JSON `text` that an object has twice, as a
/// dotted path ("optimizer.params.lr"), or "" when none does: a config
/// that says a thing twice is a mistake (json::parse keeps one silently;
/// the executable's reader refuses it too).
static std::string duplicateKey(StringRef text) {
  struct Frame {
    bool object;
    bool expectKey = false;
    std::set<std::string> keys;
    std::string key; // the member being read
  };
  std::vector<Frame> stack;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '{' || c == '[') {
      stack.push_back({c == '{'});
      stack.back().expectKey = c == '{';
    } else if (c == '}' || c == ']') {
      stack.pop_back();
    } else if (c == ',') {
      if (!stack.empty() && stack.back().object)
        stack.back().expectKey = true;
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"')
        j += text[j] == '\\' ? 2 : 1;
      if (!stack.empty() && stack.back().object && stack.back().expectKey) {
        Frame &f = stack.back();
        f.key = text.slice(i + 1, j).str();
        f.expectKey = false;
        if (!f.keys.insert(f.key).second) {
          std::string path;
          for (const Frame &g : stack)
            if (g.object)
              path += (path.empty() ? "" : ".") + g.key;
          return path;
        }
      }
      i = j;
    }
  }
  return "";
}

bool ztrain::readDeepSpeedConfig(StringRef path, DeepSpeedFlags &out,
                                 std::string &error) {
  auto buffer = MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer) {
    error = ("--config: cannot read '" + path +
             "': " + buffer.getError().message())
                .str();
    return false;
  }
  Expected<json::Value> root = json::parse((*buffer)->getBuffer());
  if (!root) {
    error = ("--config '" + path + "': not JSON: " + toString(root.takeError()))
                .str();
    return false;
  }
  const json::Object *object = root->getAsObject();
  if (!object) {
    error = ("--config '" + path + "': expected a JSON object").str();
    return false;
  }
  if (std::string key = duplicateKey((*buffer)->getBuffer()); !key.empty()) {
    error = ("--config '" + path + "': the key " + key + " appears twice")
                .str();
    return false;
  }
  Reader reader(out);
  reader.top(*object);
  if (!reader.problems.empty()) {
    error = ("--config '" + path + "': " +
             Twine(reader.problems.size() == 1 ? "a key" : "keys") +
             " ztrain cannot honour: " + join(reader.problems, "; "))
                .str();
    return false;
  }
  llvm::sort(out.forExecutable);
  return true;
}
