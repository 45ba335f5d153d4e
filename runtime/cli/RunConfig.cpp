//===- RunConfig.cpp - --config: a DeepSpeed JSON config ------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "cli/RunConfig.h"

#include "base/Support.h"
#include "cli/DeepSpeedConfig.h"
#include "cli/Options.h"
#include "cli/TrainingSettings.h"
#include "step/Context.h"
#include "step/Descriptor.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <vector>

namespace ztrt {

/// --config ds_config.json, the executable's part (docs/config.md), read
/// by the reader ztrain-compile uses too (cli/DeepSpeedConfig), so both
/// refuse the same files: the scheduler (WarmupLR, WarmupDecayLR,
/// WarmupCosineLR with linear warmup from 0), optimizer.params,
/// gradient_accumulation_steps, steps_per_print and the offload nvme_path
/// (--nvme-path); the build's keys are kept for checkConfigAgainstBuild. A
/// flag in `given` overrides the file.
void applyRunConfig(const std::string &path, const std::set<std::string> &given,
                    Options &opts) {
  std::vector<char> bytes = readInputFile(path, "--config");
  DeepSpeedConfig config;
  std::string error;
  if (!parseDeepSpeedConfig(std::string(bytes.begin(), bytes.end()), config,
                            error))
    usageError("flag --config '%s': %s", path.c_str(), error.c_str());
  auto has = [&](const char *flag) { return given.count(flag) > 0; };
  opts.configOptimizer = config.optimizer;
  opts.configPrecision = config.precision;
  opts.configClip = config.clip;
  if (config.microBatch > 0)
    opts.configMicroBatch = config.microBatch;
  if (config.gradAccumSteps && !has("--grad-accum-steps"))
    opts.gradAccumSteps = *config.gradAccumSteps;
  if (config.stepsPerPrint && !has("--log-every"))
    opts.logEvery = *config.stepsPerPrint;
  if (!config.nvmePath.empty() && !has("--nvme-path"))
    opts.nvmePath = config.nvmePath;

  if (const std::optional<DeepSpeedSchedule> &s = config.schedule) {
    // The command line's schedule flags win, field by field; the run
    // records them all as set (a resume continues this schedule).
    for (const char *f : {"--lr-schedule", "--warmup-steps", "--warmup-type",
                          "--lr-decay-steps", "--min-lr"})
      opts.trainingSet.insert(f);
    if (!has("--lr-schedule"))
      LrSchedule::parseKind(s->kind, opts.lr.kind);
    if (!has("--warmup-steps"))
      opts.lr.warmup = s->warmupSteps;
    if (!has("--warmup-type"))
      opts.lr.logWarmup = s->logWarmup;
    if (!has("--lr-decay-steps"))
      opts.lr.decaySteps = s->decaySteps;
    if (!has("--min-lr")) {
      opts.lr.minLr = 0.0;
      opts.lr.minLrRatio = s->minLrRatio;
    }
  }

  // optimizer.params (and the scheduler's peak as the lr): the run's
  // hyper-parameters, each checked as its flag is.
  std::vector<std::string> problems;
  // Ranges are each tool's to check, as its flags are (the compiler's
  // option parsers name the flag and the key).
  if (config.clip && !(*config.clip >= 0.0 && std::isfinite(*config.clip)))
    problems.push_back("gradient_clipping (expected a number >= 0)");
  for (const DeepSpeedSetting &h : config.runHypers) {
    const double value = std::strtod(h.value.c_str(), nullptr);
    if (h.flag == "--lr" && !(value >= 0.0 && std::isfinite(value))) {
      problems.push_back(h.key + " (expected a number >= 0)");
      continue;
    }
    if (h.flag == "--lr") {
      opts.trainingSet.insert("--lr");
      if (!has("--lr"))
        opts.lr.lr = value;
      continue;
    }
    const int id = hyperId(h.flag);
    if (id < 0)
      continue;
    if (std::string problem = hyperProblem(id, value); !problem.empty())
      problems.push_back(h.key + " (" + problem + ")");
    else if (!has(h.flag.c_str())) {
      opts.hypers[id] = value;
      opts.trainingSet.insert(h.flag);
    }
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
