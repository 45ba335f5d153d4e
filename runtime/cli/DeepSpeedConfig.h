//===- DeepSpeedConfig.h - The one reader of ds_config.json ----*- C++ -*-===//
//
// Part of ztrain. A DeepSpeed JSON config is read here, once, for both
// tools: ztrain-compile takes the keys that decide what is built (as the
// compiler flags they mean, applied as if given on its command line) and
// the compiled executable takes the keys of the run (scheduler,
// optimizer.params, gradient_accumulation_steps, steps_per_print,
// nvme_path) and checks the build's keys against what it was compiled as.
// Every key is validated by this one walk, so the two tools accept and
// refuse the same files with the same words (docs/config.md has the table).
//
// No LLVM and no process exit: the compiler links this file too. The
// header uses only the standard library.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_CLI_DEEPSPEEDCONFIG_H
#define ZTRT_CLI_DEEPSPEEDCONFIG_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ztrt {

/// A setting and the config key it came from ("zero_optimization.stage"),
/// for messages about its value.
struct DeepSpeedSetting {
  /// A ztrain-compile flag name without dashes ("zero-stage"), or an
  /// executable flag with them ("--beta1").
  std::string flag;
  std::string value;
  std::string key;
};

/// A scheduler section (WarmupLR, WarmupDecayLR, WarmupCosineLR), with
/// DeepSpeed's defaults where a key is absent.
struct DeepSpeedSchedule {
  /// "constant" (WarmupLR), "linear" (WarmupDecayLR) or "cosine".
  std::string kind;
  int64_t warmupSteps = 0;
  /// DeepSpeed's warmup_type defaults to "log".
  bool logWarmup = true;
  /// total_num_steps; 0 when absent (the run's last step).
  int64_t decaySteps = 0;
  /// warmup_max_lr: the peak, which is the run's lr.
  std::optional<double> maxLr;
  /// WarmupCosineLR's cos_min_ratio (DeepSpeed's default 0.0001); the
  /// other two decay to 0.
  std::optional<double> minLrRatio;
};

struct DeepSpeedConfig {
  // --- ztrain-compile's part ------------------------------------------------
  /// The compiler flags the file means, in the file's order.
  std::vector<DeepSpeedSetting> compileFlags;
  /// train_micro_batch_size_per_gpu and train_batch_size (-1: absent or
  /// "auto"), checked against the model's batch.
  int64_t microBatch = -1, trainBatch = -1;
  /// Keys only the executable acts on (the compiler says so).
  std::vector<std::string> forExecutable;
  /// Keys accepted with no effect on what ztrain builds, each with why.
  std::vector<std::string> notes;

  // --- The executable's part -------------------------------------------------
  /// Run-time hyper-parameters from optimizer.params ("--beta1", ...), and
  /// "--lr" (the scheduler's warmup_max_lr, else optimizer.params.lr).
  std::vector<DeepSpeedSetting> runHypers;
  std::optional<DeepSpeedSchedule> schedule;
  std::optional<int64_t> gradAccumSteps, stepsPerPrint;
  /// offload_optimizer / offload_param nvme_path ("" when absent).
  std::string nvmePath;
  /// What the file says the build is, for the executable's check:
  /// optimizer ("adam", "adamw", "sgd" or ""), clipping, precision ("" when
  /// neither bf16 nor fp16 is a section, "fp32" when neither is enabled).
  std::string optimizer, precision;
  std::optional<double> clip;

  /// The config key that set compiler flag `flag`, or "".
  std::string keyOf(const std::string &flag) const;
};

/// Reads and checks a config's text (each tool reads the file under its
/// own input rules). On failure returns false with `error` one line, for
/// the tool to prefix with the file's name: "not JSON: ..." (a duplicate
/// key among them), "expected a JSON object", or "keys ztrain cannot
/// honour: a (why); b (why)" with every such key, sorted.
bool parseDeepSpeedConfig(const std::string &text, DeepSpeedConfig &out,
                          std::string &error);

} // namespace ztrt

#endif // ZTRT_CLI_DEEPSPEEDCONFIG_H
