//===- RunConfig.cpp - --config: a DeepSpeed JSON config ------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "cli/RunConfig.h"

#include "base/Json.h"
#include "base/Support.h"
#include "cli/Options.h"
#include "step/Context.h"
#include "step/Descriptor.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <vector>

namespace ztrt {

/// --config ds_config.json, the executable's part (docs/config.md): the
/// scheduler (WarmupLR, WarmupDecayLR, WarmupCosineLR with linear warmup
/// from 0), gradient_accumulation_steps, steps_per_print and the offload
/// nvme_path (--nvme-path); the compiler's
/// keys are skipped; unknown keys and what ztrain cannot honour are one
/// line. A flag in `given` overrides the file.
void applyRunConfig(const std::string &path, const std::set<std::string> &given,
                    Options &opts) {
  std::vector<char> text = readInputFile(path, "--config");
  Json root;
  const Json kNull;
  std::string error;
  if (!parseJson(std::string_view(text.data(), text.size()), root, error))
    usageError("flag --config '%s': not JSON: %s", path.c_str(), error.c_str());
  if (!root.is_object())
    usageError("flag --config '%s': expected a JSON object", path.c_str());
  // The compiler's keys: what the build is. The executable checks the
  // ones it can see in the descriptor against it (checkConfigAgainstBuild)
  // and takes optimizer.params as its run-time hyper-parameters.
  static const char *const compilerKeys[] = {
      "train_batch_size",         "zero_optimization",
      "communication_data_type",  "activation_checkpointing",
      "wall_clock_breakdown",     "flops_profiler",
      "aio",                      "zero_allow_untested_optimizer",
      "zero_force_ds_cpu_optimizer",
      // DeepSpeed's monitors and loggers: the compiler notes what ztrain
      // records instead (--report, --trace); nothing to run here.
      "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger",
      "memory_breakdown", "dump_state"};
  // Hugging Face's "auto": the value the flags and the build give.
  auto isAuto = [](const Json &v) { return jsonText(v) == "auto"; };
  std::optional<double> optimizerLr;
  std::vector<std::string> problems;
  auto has = [&](const char *flag) { return given.count(flag) > 0; };
  auto integer = [&](const Json &v, const std::string &key, int64_t min,
                     int64_t &out) {
    double d = jsonNumber(v);
    if (!jsonInt64(v, out)) {
      if (!(d == std::floor(d)) || !(d >= -9.0e18 && d <= 9.0e18)) {
        problems.push_back(key + " (expected an integer)");
        return false;
      }
      out = static_cast<int64_t>(d);
    }
    if (out < min) {
      problems.push_back(key + " (expected an integer >= " +
                         std::to_string(min) + ")");
      return false;
    }
    return true;
  };
  for (const auto &[key, value] : jsonMembers(root)) {
    int64_t n = 0;
    if (isAuto(value))
      continue;
    if (key == "train_micro_batch_size_per_gpu") {
      if (integer(value, key, 1, n))
        opts.configMicroBatch = n;
    } else if (key == "gradient_clipping") {
      const double d = jsonNumber(value);
      if (!(d >= 0.0) || !std::isfinite(d))
        problems.push_back(key + " (expected a number >= 0)");
      else
        opts.configClip = d;
    } else if (key == "bf16" || key == "fp16") {
      const Json *on = jsonFind(value, "enabled");
      if (on && isAuto(*on))
        continue;
      if (on && on->is_boolean() && on->get<bool>())
        opts.configPrecision = key;
      else if (opts.configPrecision.empty())
        opts.configPrecision = "fp32";
    } else if (key == "optimizer") {
      const Json *type = jsonFind(value, "type");
      const Json *params = jsonFind(value, "params");
      std::string kind = type ? jsonText(*type) : "";
      std::transform(kind.begin(), kind.end(), kind.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false.
      const Json *wMode = params ? jsonFind(*params, "adam_w_mode") : nullptr;
      const bool decoupled =
          !wMode || !wMode->is_boolean() || wMode->get<bool>();
      if (kind == "adam" || kind == "adamw")
        kind = decoupled ? "adamw" : "adam";
      opts.configOptimizer = kind;
      for (const auto &[name, v] : jsonMembers(params ? *params : kNull)) {
        const std::string k = "optimizer.params." + name;
        if (isAuto(v))
          continue;
        auto hyper = [&](int id, const Json &x, const std::string &kk) {
          const double d = jsonNumber(x);
          const std::string problem =
              x.is_number() ? hyperProblem(id, d) : "is not a number";
          if (!problem.empty())
            problems.push_back(kk + " (" + problem + ")");
          else if (!has(hyperFlag(id))) {
            opts.hypers[id] = d;
            opts.trainingSet.insert(hyperFlag(id));
          }
        };
        if (name == "lr") {
          const double d = jsonNumber(v);
          if (!(d >= 0.0) || !std::isfinite(d))
            problems.push_back(k + " (expected a number >= 0)");
          else
            optimizerLr = d;
        } else if (name == "betas" && v.is_array() && v.size() == 2) {
          hyper(ZTRT_HYPER_BETA1, v[0], k + "[0]");
          hyper(ZTRT_HYPER_BETA2, v[1], k + "[1]");
        } else if (name == "eps") {
          hyper(ZTRT_HYPER_EPS, v, k);
        } else if (name == "weight_decay") {
          hyper(ZTRT_HYPER_WEIGHT_DECAY, v, k);
        } else if (name == "momentum") {
          hyper(ZTRT_HYPER_MOMENTUM, v, k);
        } else if (name == "dampening") {
          hyper(ZTRT_HYPER_DAMPENING, v, k);
        } else if (name != "adam_w_mode" && name != "torch_adam" &&
                   name != "nesterov") {
          problems.push_back(k + (name == "betas" ? " (expected [beta1, beta2])"
                                                  : " (unknown)"));
        }
      }
    } else if (key == "gradient_accumulation_steps") {
      if (integer(value, key, 1, n) && !has("--grad-accum-steps"))
        opts.gradAccumSteps = n;
    } else if (key == "steps_per_print") {
      if (integer(value, key, 0, n) && !has("--log-every"))
        opts.logEvery = n;
    } else if (key == "scheduler") {
      const Json *type = jsonFind(value, "type");
      const Json *params = jsonFind(value, "params");
      const std::string kind = type ? jsonText(*type) : "";
      if (kind != "WarmupLR" && kind != "WarmupDecayLR" &&
          kind != "WarmupCosineLR") {
        problems.push_back("scheduler.type=" + kind +
                           " (ztrain has WarmupLR, WarmupDecayLR and "
                           "WarmupCosineLR)");
        continue;
      }
      LrSchedule s = opts.lr;
      std::optional<double> maxLr;
      for (const auto &[name, v] : jsonMembers(params ? *params : kNull)) {
        const std::string k = "scheduler.params." + name;
        if (isAuto(v))
          continue;
        const double d = jsonNumber(v);
        if (name == "warmup_num_steps") {
          if (integer(v, k, 0, n))
            s.warmup = n;
        } else if (name == "total_num_steps" && kind != "WarmupLR") {
          if (integer(v, k, 1, n))
            s.decaySteps = n;
        } else if (name == "warmup_max_lr" && kind != "WarmupCosineLR") {
          if (!(d >= 0.0) || !std::isfinite(d))
            problems.push_back(k + " (expected a number >= 0)");
          else
            maxLr = d;
        } else if ((name == "warmup_min_lr" && kind != "WarmupCosineLR") ||
                   (name == "warmup_min_ratio" && kind == "WarmupCosineLR")) {
          if (d != 0.0)
            problems.push_back(k + " (ztrain warms up from 0)");
        } else if (name == "warmup_type") {
          if (jsonText(v) != "linear" && jsonText(v) != "log")
            problems.push_back(k + "=" + jsonText(v) +
                               " (\"linear\" or \"log\")");
          else
            s.logWarmup = jsonText(v) == "log";
        } else if (name == "cos_min_ratio" && kind == "WarmupCosineLR") {
          if (!(d >= 0.0 && d <= 1.0))
            problems.push_back(k + " (expected a number in [0, 1])");
          else
            s.minLrRatio = d;
        } else if (name == "last_batch_iteration") {
          if (!integer(v, k, -1, n) || n != -1)
            problems.push_back(k + " (a resumed run continues its own steps)");
        } else {
          problems.push_back(k + " (unknown for " + kind + ")");
        }
      }
      // DeepSpeed's warmup_type defaults to "log".
      if (!(params && jsonFind(*params, "warmup_type")))
        s.logWarmup = true;
      if (kind == "WarmupCosineLR" && !s.minLrRatio)
        s.minLrRatio = 0.0001; // DeepSpeed's default cos_min_ratio
      s.kind = kind == "WarmupLR"       ? LrSchedule::Kind::Constant
               : kind == "WarmupDecayLR" ? LrSchedule::Kind::Linear
                                         : LrSchedule::Kind::Cosine;
      if (kind == "WarmupDecayLR")
        s.minLr = 0.0;
      // The command line's schedule flags win, field by field.
      for (const char *f : {"--lr-schedule", "--warmup-steps", "--warmup-type",
                            "--lr-decay-steps", "--min-lr"})
        opts.trainingSet.insert(f);
      if (maxLr)
        opts.trainingSet.insert("--lr");
      if (!has("--lr-schedule"))
        opts.lr.kind = s.kind;
      if (!has("--warmup-steps"))
        opts.lr.warmup = s.warmup;
      if (!has("--warmup-type"))
        opts.lr.logWarmup = s.logWarmup;
      if (!has("--lr-decay-steps"))
        opts.lr.decaySteps = s.decaySteps;
      if (!has("--min-lr")) {
        opts.lr.minLr = s.minLr;
        opts.lr.minLrRatio = s.minLrRatio;
      }
      if (maxLr && !has("--lr"))
        opts.lr.lr = maxLr;
      if (maxLr)
        optimizerLr.reset(); // the scheduler's peak is the lr
    } else if (key == "zero_optimization") {
      // The compiler's, except where offloaded tensors go (--nvme-path).
      std::string path;
      for (const char *which : {"offload_optimizer", "offload_param"}) {
        const Json *o = jsonFind(value, which);
        const Json *p = o ? jsonFind(*o, "nvme_path") : nullptr;
        if (!p)
          continue;
        if (!p->is_string())
          problems.push_back(std::string("zero_optimization.") + which +
                             ".nvme_path (expected a directory)");
        else if (!path.empty() && path != jsonText(*p))
          problems.push_back("zero_optimization.offload_param.nvme_path "
                             "(differs from offload_optimizer's: ztrain "
                             "keeps one swap directory per rank)");
        else
          path = jsonText(*p);
      }
      if (!path.empty() && !has("--nvme-path"))
        opts.nvmePath = path;
    } else if (std::find_if(std::begin(compilerKeys), std::end(compilerKeys),
                            [&](const char *k) { return key == k; }) ==
               std::end(compilerKeys)) {
      std::vector<std::string> known(std::begin(compilerKeys),
                                     std::end(compilerKeys));
      known.insert(known.end(),
                   {"train_micro_batch_size_per_gpu", "gradient_clipping",
                    "bf16", "fp16", "optimizer", "scheduler",
                    "gradient_accumulation_steps", "steps_per_print",
                    "zero_optimization"});
      std::string near = nearestName(key, known);
      problems.push_back(key + (near.empty() ? " (unknown)"
                                             : " (unknown; did you mean " +
                                                   near + "?)"));
    }
  }
  if (optimizerLr && !has("--lr") && !opts.lr.lr) {
    opts.lr.lr = optimizerLr;
    opts.trainingSet.insert("--lr");
  }
  if (!problems.empty()) {
    std::sort(problems.begin(), problems.end());
    std::string all;
    for (const std::string &p : problems)
      all += (all.empty() ? "" : "; ") + p;
    usageError("flag --config '%s': %s ztrain cannot honour: %s", path.c_str(),
               problems.size() == 1 ? "a key" : "keys", all.c_str());
  }
}

/// --config's compiler keys against what this executable was compiled as:
/// a config that says another optimizer, clipping, precision or
/// micro-batch describes another build (one line saying to recompile).
void checkConfigAgainstBuild(const Descriptor &desc, const Options &opts,
                             const std::string &configPath) {
  const char *path = configPath.c_str();
  const std::string compiled = desc.optimizer.substr(0, desc.optimizer.find(' '));
  if (!opts.configOptimizer.empty() && opts.configOptimizer != compiled)
    refuse("--config '%s': optimizer.type is %s but this executable was "
           "compiled for %s (recompile with ztrain-compile --config %s)",
           path, opts.configOptimizer.c_str(), compiled.c_str(), path);
  const double clip = desc.clipGradNorm.value_or(0.0);
  if (opts.configClip && *opts.configClip != clip)
    refuse("--config '%s': gradient_clipping is %g but this executable was "
           "compiled with %s (recompile with ztrain-compile --config %s)",
           path, *opts.configClip,
           clip > 0.0 ? format("--clip-grad-norm=%g", clip).c_str()
                      : "no clipping",
           path);
  if (!opts.configPrecision.empty()) {
    std::string built = "fp32";
    for (const ParamSpec &p : desc.params)
      if (p.type == ElemType::BF16 || p.type == ElemType::F16)
        built = p.type == ElemType::BF16 ? "bf16" : "fp16";
    if (built != opts.configPrecision)
      refuse("--config '%s': it asks for %s but this executable was "
             "compiled with --precision=%s (recompile with ztrain-compile "
             "--config %s)",
             path,
             opts.configPrecision == "fp32" ? "fp32 (no bf16 / fp16 enabled)"
                                            : opts.configPrecision.c_str(),
             built.c_str(), path);
  }
  if (opts.configMicroBatch && !desc.inputs.empty() &&
      !desc.inputs[0].shape.empty() &&
      *opts.configMicroBatch != desc.inputs[0].shape[0])
    refuse("--config '%s': train_micro_batch_size_per_gpu is %lld but this "
           "model's micro-batch (its inputs' batch dimension) is %lld",
           path, static_cast<long long>(*opts.configMicroBatch),
           static_cast<long long>(desc.inputs[0].shape[0]));
}

} // namespace ztrt
