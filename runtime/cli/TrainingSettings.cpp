//===- TrainingSettings.cpp - Run-time hyper-parameters and schedule ------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "cli/TrainingSettings.h"

#include "base/Support.h"
#include "cli/Options.h"
#include "step/Context.h"
#include "step/Descriptor.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace ztrt {

namespace {

/// The shortest decimal text that reads back as exactly `v`.
std::string exactText(double v) {
  for (int digits = 15; digits < 17; ++digits) {
    std::string text = format("%.*g", digits, v);
    if (std::strtod(text.c_str(), nullptr) == v)
      return text;
  }
  return format("%.17g", v);
}

} // namespace

/// The ztrt_hyper_id of a hyper-parameter flag, or -1.
int hyperId(const std::string &flag) {
  for (int id = 0; id < ZTRT_HYPER_COUNT; ++id)
    if (flag == hyperFlag(id))
      return id;
  return -1;
}

/// What is wrong with a schedule whose decay would end before its warmup
/// does (the learning rate would fall to the minimum right after the
/// warmup), or "".
std::string scheduleProblem(const LrSchedule &lr) {
  if (lr.kind == LrSchedule::Kind::Constant || lr.decaySteps == 0 ||
      lr.decaySteps > lr.warmup)
    return "";
  return format("flag --lr-decay-steps %lld ends the decay at or before "
                "--warmup-steps %lld ends the warmup (the decay runs from "
                "the end of the warmup to step T): give T > W",
                static_cast<long long>(lr.decaySteps),
                static_cast<long long>(lr.warmup));
}

/// The run's schedule and hyper-parameter overrides as a checkpoint
/// records them: flag, value (doubles exactly, in their shortest text).
std::vector<std::pair<std::string, std::string>>
trainingSettings(const LrSchedule &lr,
                 const std::array<std::optional<double>, ZTRT_HYPER_COUNT>
                     &hypers) {
  std::vector<std::pair<std::string, std::string>> out;
  if (lr.lr)
    out.push_back({"--lr", exactText(*lr.lr)});
  out.push_back({"--lr-schedule", LrSchedule::kindName(lr.kind)});
  out.push_back({"--warmup-steps",
                 format("%lld", static_cast<long long>(lr.warmup))});
  if (lr.logWarmup)
    out.push_back({"--warmup-type", "log"});
  out.push_back({"--min-lr", exactText(lr.minLr)});
  if (lr.minLrRatio)
    out.push_back({"min_lr_ratio", exactText(*lr.minLrRatio)});
  if (lr.kind != LrSchedule::Kind::Constant)
    out.push_back({"--lr-decay-steps",
                   format("%lld", static_cast<long long>(lr.decaySteps))});
  for (int id = 0; id < ZTRT_HYPER_COUNT; ++id)
    if (hypers[id])
      out.push_back({hyperFlag(id), exactText(*hypers[id])});
  return out;
}

/// Takes the checkpoint's recorded settings for every flag this run did
/// not set itself (field by field); returns the ones that differ from the
/// defaults, as "--flag value" text for the note. A value that does not
/// parse (a damaged index) is fatal.
std::string continueTrainingSettings(
    const std::vector<std::pair<std::string, std::string>> &recorded,
    Options &opts, const std::string &checkpoint) {
  const Options defaults;
  std::string restored;
  auto number = [&](const std::string &flag, const std::string &text) {
    char *end = nullptr;
    errno = 0;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
      fatal("--resume '%s': the checkpoint's %s '%s' is not a number",
            checkpoint.c_str(), flag.c_str(), text.c_str());
    return v;
  };
  for (const auto &[flag, text] : recorded) {
    const bool ratio = flag == "min_lr_ratio";
    if (opts.trainingSet.count(ratio ? "--min-lr" : flag))
      continue;
    bool changed = true;
    if (flag == "--lr") {
      opts.lr.lr = number(flag, text);
    } else if (flag == "--lr-schedule") {
      if (!LrSchedule::parseKind(text, opts.lr.kind))
        fatal("--resume '%s': the checkpoint's --lr-schedule '%s' is not a "
              "schedule",
              checkpoint.c_str(), text.c_str());
      changed = opts.lr.kind != defaults.lr.kind;
    } else if (flag == "--warmup-steps" || flag == "--lr-decay-steps") {
      const double v = number(flag, text);
      if (v < 0 || v != std::floor(v))
        fatal("--resume '%s': the checkpoint's %s '%s' is not a step count",
              checkpoint.c_str(), flag.c_str(), text.c_str());
      (flag == "--warmup-steps" ? opts.lr.warmup : opts.lr.decaySteps) =
          static_cast<int64_t>(v);
      changed = v != 0;
    } else if (flag == "--warmup-type") {
      if (text != "linear" && text != "log")
        fatal("--resume '%s': the checkpoint's --warmup-type '%s' is not a "
              "warmup",
              checkpoint.c_str(), text.c_str());
      opts.lr.logWarmup = text == "log";
      changed = opts.lr.logWarmup;
    } else if (flag == "--min-lr") {
      opts.lr.minLr = number(flag, text);
      changed = opts.lr.minLr != defaults.lr.minLr;
    } else if (ratio) {
      opts.lr.minLrRatio = number(flag, text);
    } else if (int id = hyperId(flag); id >= 0) {
      opts.hypers[id] = number(flag, text);
    } else {
      continue; // a setting of a newer runtime: nothing to continue here
    }
    if (changed)
      restored += (restored.empty() ? "" : " ") +
                  (ratio ? std::string("cos_min_ratio") : flag) + " " + text;
  }
  return restored;
}

/// The run-time hyper-parameters must belong to the compiled optimizer and
/// be usable with what it compiled (a momentum buffer exists only when the
/// build has momentum; Nesterov needs momentum and no dampening).
void checkHyperOverrides(const Descriptor &desc, const Options &opts) {
  const std::string &o = desc.optimizer;
  auto compiled = [&](const char *key) -> std::optional<double> {
    std::string k = std::string(" ") + key + "=";
    size_t at = o.find(k);
    if (at == std::string::npos)
      return std::nullopt;
    return std::strtod(o.c_str() + at + k.size(), nullptr);
  };
  const bool sgd = o.rfind("sgd", 0) == 0;
  const bool adam = o.rfind("adam", 0) == 0;
  for (int id = 0; id < ZTRT_HYPER_COUNT; ++id) {
    if (!opts.hypers[id])
      continue;
    const bool sgdOnly = id == ZTRT_HYPER_MOMENTUM || id == ZTRT_HYPER_DAMPENING;
    const bool adamOnly = id == ZTRT_HYPER_BETA1 || id == ZTRT_HYPER_BETA2 ||
                          id == ZTRT_HYPER_EPS;
    if ((sgdOnly && adam) || (adamOnly && sgd))
      refuse("%s is %s's; this model was compiled for %s", hyperFlag(id),
             sgdOnly ? "SGD" : "Adam(W)",
             o.substr(0, o.find(' ')).c_str());
  }
  if (!sgd)
    return;
  const std::optional<double> momentum = compiled("momentum");
  const double runMomentum =
      opts.hypers[ZTRT_HYPER_MOMENTUM].value_or(momentum.value_or(0.0));
  if (momentum && *momentum == 0.0 && runMomentum != 0.0)
    refuse("--momentum %g: this model was compiled without momentum, so it "
           "has no momentum buffer (compile with --momentum=M)",
           runMomentum);
  if (compiled("nesterov").value_or(0.0) != 0.0) {
    const double damp = opts.hypers[ZTRT_HYPER_DAMPENING].value_or(
        compiled("dampening").value_or(0.0));
    if (runMomentum <= 0.0 || damp != 0.0)
      refuse("Nesterov momentum (compiled in) needs momentum > 0 and "
             "dampening 0; this run has momentum %g, dampening %g",
             runMomentum, damp);
  }
}

} // namespace ztrt
