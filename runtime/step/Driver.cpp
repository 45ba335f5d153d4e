//===- Driver.cpp - What a compiled model's main() does -------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "step/Driver.h"

#include "backends/cpu/CpuBackend.h"
#ifdef ZTRT_HAVE_CUDA
#include "backends/cuda/CudaBackend.h"
#endif
#include "io/Checkpoint.h"
#include "comm/Communicator.h"
#include "step/Context.h"
#include "io/Data.h"
#include "step/Descriptor.h"
#include "step/Init.h"
#include "base/Json.h"
#include "base/Rng.h"
#include "io/Safetensors.h"
#include "base/Support.h"
#include "report/Trace.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <vector>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

namespace ztrt {

namespace {

const char kUsage[] =
    "usage: %s [flags]\n"
    "Runs the training steps compiled into this executable.\n"
    "\n"
    "  --steps N          number of steps to run (default 10); with --resume,\n"
    "                     steps after the checkpoint's\n"
    "  --seed S           seed of parameter init and synthetic data "
    "(default 0)\n"
    "  --init F           initial parameters from safetensors file F, or a\n"
    "                     Hugging Face sharded checkpoint (its index file\n"
    "                     or directory)\n"
    "  --data F           F.safetensors: one tensor [N, ...] per input; token\n"
    "                     files for inputs (tokens, targets): .bin (nanoGPT's\n"
    "                     uint16), .npy, .txt (bytes), or any name with\n"
    "                     --data-format; other names are refused; default:\n"
    "                     synthetic data\n"
    "  --save F           write the final parameters to safetensors file F\n"
    "  --save-checkpoint D  write a sharded checkpoint (parameters, optimizer\n"
    "                     states, buffers; one file per rank, index.json) to\n"
    "                     D/global_step<N> at the end and point D/latest at it\n"
    "  --checkpoint-every N  also write one after every N-th step\n"
    "  --keep-checkpoints K  keep only the newest K checkpoints in D\n"
    "                     (default 0: keep all)\n"
    "  --resume D         continue the training saved in checkpoint D (the\n"
    "                     one D/latest names, or a global_step<N> directory);\n"
    "                     also on another number of ranks or ZeRO stage\n"
    "                     (resharded on load); the run's --lr ...\n"
    "                     --dampening continue unless given again\n"
    "  --nvme-path DIR    where optimizer states compiled with\n"
    "                     --offload-optimizer=nvme live: each rank swaps\n"
    "                     them through DIR/ztrain-swap-<host>-<pid>-rank<r>\n"
    "                     (created fresh, removed at exit; those of runs that\n"
    "                     were killed are removed at the next start); required\n"
    "                     by such models\n"
    "  --collective-timeout S  end the job when a collective has waited S\n"
    "                     seconds for the other ranks (default 600; 0: never)\n"
    "  --skip-memory-check  start even when the compiled plan needs more\n"
    "                     memory than this node has available per rank\n"
    "  --allow-nonfinite-loss  keep training after a NaN or infinite loss\n"
    "                     (default: stop with an error naming the step)\n"
    "  --log-every N      print a progress line every N steps and on the last\n"
    "                     (default 1; 0 prints none)\n"
    "  --report F         write a JSON report (losses, times, memory,\n"
    "                     communication, overlap) to F\n"
    "  --trace F          write a Chrome trace of every kernel call and\n"
    "                     collective to F (open it in ui.perfetto.dev); with\n"
    "                     several ranks, rank r writes F with .rank<r> before\n"
    "                     the extension (trace.rank0.json)\n"
    "  --lr LR            learning rate (default: the one compiled in)\n"
    "  --lr-schedule S    constant (default), cosine or linear: decay from the\n"
    "                     learning rate to --min-lr over --lr-decay-steps\n"
    "  --warmup-steps W   raise the learning rate linearly over the first W\n"
    "                     optimizer steps (default 0)\n"
    "  --min-lr LR        where cosine and linear decay end (default 0)\n"
    "  --lr-decay-steps T  the optimizer step where the decay ends (default:\n"
    "                     the run's last step)\n"
    "  --beta1 B, --beta2 B, --eps E  Adam(W)'s betas and epsilon\n"
    "  --weight-decay W   weight decay of the decaying parameters (not the\n"
    "                     no-decay group: biases, norms, 1-D parameters)\n"
    "  --momentum M, --dampening D  SGD's (default: the compiled values)\n"
    "  --config F         a DeepSpeed JSON config: its scheduler\n"
    "                     (WarmupLR, WarmupDecayLR, WarmupCosineLR),\n"
    "                     optimizer.params, gradient_accumulation_steps and\n"
    "                     steps_per_print; the compiled keys are checked\n"
    "                     against this build; flags override it\n"
    "                     (docs/config.md)\n"
    "  --data-format F    how --data is read: safetensors, text (bytes as\n"
    "                     tokens), u16 / u32 (little-endian token ids, as\n"
    "                     nanoGPT's train.bin), npy (a 1-D token array) or\n"
    "                     auto (default: by the extension; .bin is u16)\n"
    "  --eval-data F      evaluate the loss on F (the --data formats) with\n"
    "                     the forward pass only, after the last step and\n"
    "                     every --eval-every N steps, over --eval-steps M\n"
    "                     batches (default 10)\n"
    "  --sample TEXT      after training, continue TEXT (bytes as tokens;\n"
    "                     --sample-ids 1,2,3 gives token ids and prints ids)\n"
    "                     with --sample-tokens N (200) tokens drawn at\n"
    "                     --temperature T (0.8; 0: greedy) from the --top-k K\n"
    "                     (200; 0: all) most likely, seeded by --seed\n"
    "  --peak-tflops P    the peak TFLOP/s of one rank's device, for the MFU\n"
    "                     in the progress line (achieved matmul FLOPs / P);\n"
    "                     default: the GPU's peak (cuda backend)\n"
    "  --data-order O     token windows: random (default, drawn from the\n"
    "                     seed, nanoGPT's) or sequential (file order)\n"
    "  --grad-accum-steps K  micro-batches per optimizer step: gradients\n"
    "                     accumulate over K batches before each update\n"
    "                     (default: the compiled ztrain-compile\n"
    "                     --grad-accum-steps; needs a model compiled with it)\n"
    "  --threads N        threads for BLAS and kernels (default: the "
    "libraries')\n"
    "  --backend B        where the steps run: cpu (host memory, OpenBLAS,\n"
    "                     MPI; the default) or cuda (a GPU per rank, cuBLAS,\n"
    "                     NCCL; needs a runtime built with CUDA)\n"
    "  --help             show this help\n";

/// --config ds_config.json, the executable's part (docs/config.md): the
/// scheduler (WarmupLR, WarmupDecayLR, WarmupCosineLR with linear warmup
/// from 0), gradient_accumulation_steps, steps_per_print and the offload
/// nvme_path (--nvme-path); the compiler's
/// keys are skipped; unknown keys and what ztrain cannot honour are one
/// line. A flag in `given` overrides the file.
void applyRunConfig(const std::string &path, const std::set<std::string> &given,
                    Options &opts) {
  std::vector<char> text = readInputFile(path, "--config");
  JsonValue root;
  std::string error;
  if (!parseJson(std::string_view(text.data(), text.size()), root, error))
    usageError("flag --config '%s': not JSON: %s", path.c_str(), error.c_str());
  if (root.kind != JsonValue::Kind::Object)
    usageError("flag --config '%s': expected a JSON object", path.c_str());
  // The compiler's keys: what the build is. The executable checks the
  // ones it can see in the descriptor against it (checkConfigAgainstBuild)
  // and takes optimizer.params as its run-time hyper-parameters.
  static const char *const compilerKeys[] = {
      "train_batch_size",         "zero_optimization",
      "communication_data_type",  "activation_checkpointing",
      "wall_clock_breakdown",     "flops_profiler",
      "aio",                      "zero_allow_untested_optimizer",
      "zero_force_ds_cpu_optimizer"};
  // Hugging Face's "auto": the value the flags and the build give.
  auto isAuto = [](const JsonValue &v) {
    return v.kind == JsonValue::Kind::String && v.text == "auto";
  };
  std::optional<double> optimizerLr;
  std::vector<std::string> problems;
  auto has = [&](const char *flag) { return given.count(flag) > 0; };
  auto integer = [&](const JsonValue &v, const std::string &key, int64_t min,
                     int64_t &out) {
    double d = v.getDouble();
    if (!v.getInt64(out)) {
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
  for (const auto &[key, value] : root.members) {
    int64_t n = 0;
    if (isAuto(value))
      continue;
    if (key == "train_micro_batch_size_per_gpu") {
      if (integer(value, key, 1, n))
        opts.configMicroBatch = n;
    } else if (key == "gradient_clipping") {
      const double d = value.getDouble();
      if (!(d >= 0.0) || !std::isfinite(d))
        problems.push_back(key + " (expected a number >= 0)");
      else
        opts.configClip = d;
    } else if (key == "bf16" || key == "fp16") {
      const JsonValue *on = value.find("enabled");
      if (on && isAuto(*on))
        continue;
      if (on && on->kind == JsonValue::Kind::Bool && on->boolean)
        opts.configPrecision = key;
      else if (opts.configPrecision.empty())
        opts.configPrecision = "fp32";
    } else if (key == "optimizer") {
      const JsonValue *type = value.find("type");
      const JsonValue *params = value.find("params");
      std::string kind = type ? type->text : "";
      std::transform(kind.begin(), kind.end(), kind.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false.
      const JsonValue *wMode = params ? params->find("adam_w_mode") : nullptr;
      const bool decoupled = !wMode || wMode->kind != JsonValue::Kind::Bool ||
                             wMode->boolean;
      if (kind == "adam" || kind == "adamw")
        kind = decoupled ? "adamw" : "adam";
      opts.configOptimizer = kind;
      for (const auto &[name, v] : params ? params->members
                                          : decltype(root.members)()) {
        const std::string k = "optimizer.params." + name;
        if (isAuto(v))
          continue;
        auto hyper = [&](int id, const JsonValue &x, const std::string &kk) {
          const double d = x.getDouble();
          const std::string problem = x.kind == JsonValue::Kind::Number
                                          ? hyperProblem(id, d)
                                          : "is not a number";
          if (!problem.empty())
            problems.push_back(kk + " (" + problem + ")");
          else if (!has(hyperFlag(id))) {
            opts.hypers[id] = d;
            opts.trainingSet.insert(hyperFlag(id));
          }
        };
        if (name == "lr") {
          const double d = v.getDouble();
          if (!(d >= 0.0) || !std::isfinite(d))
            problems.push_back(k + " (expected a number >= 0)");
          else
            optimizerLr = d;
        } else if (name == "betas" && v.kind == JsonValue::Kind::Array &&
                   v.items.size() == 2) {
          hyper(ZTRT_HYPER_BETA1, v.items[0], k + "[0]");
          hyper(ZTRT_HYPER_BETA2, v.items[1], k + "[1]");
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
      const JsonValue *type = value.find("type");
      const JsonValue *params = value.find("params");
      const std::string kind = type ? type->text : "";
      if (kind != "WarmupLR" && kind != "WarmupDecayLR" &&
          kind != "WarmupCosineLR") {
        problems.push_back("scheduler.type=" + kind +
                           " (ztrain has WarmupLR, WarmupDecayLR and "
                           "WarmupCosineLR)");
        continue;
      }
      LrSchedule s = opts.lr;
      std::optional<double> maxLr;
      for (const auto &[name, v] : params ? params->members
                                          : decltype(root.members)()) {
        const std::string k = "scheduler.params." + name;
        if (isAuto(v))
          continue;
        const double d = v.getDouble();
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
          if (v.text != "linear")
            problems.push_back(k + "=" + v.text +
                               " (ztrain warms up linearly: \"linear\")");
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
      // DeepSpeed's warmup_type defaults to "log", which ztrain has not.
      if (!(params && params->find("warmup_type")) && s.warmup > 0)
        problems.push_back("scheduler.params.warmup_type (DeepSpeed's "
                           "default is \"log\"; ztrain warms up linearly: "
                           "set \"linear\")");
      if (kind == "WarmupCosineLR" && !s.minLrRatio)
        s.minLrRatio = 0.0001; // DeepSpeed's default cos_min_ratio
      s.kind = kind == "WarmupLR"       ? LrSchedule::Kind::Constant
               : kind == "WarmupDecayLR" ? LrSchedule::Kind::Linear
                                         : LrSchedule::Kind::Cosine;
      if (kind == "WarmupDecayLR")
        s.minLr = 0.0;
      // The command line's schedule flags win, field by field.
      for (const char *f :
           {"--lr-schedule", "--warmup-steps", "--lr-decay-steps", "--min-lr"})
        opts.trainingSet.insert(f);
      if (maxLr)
        opts.trainingSet.insert("--lr");
      if (!has("--lr-schedule"))
        opts.lr.kind = s.kind;
      if (!has("--warmup-steps"))
        opts.lr.warmup = s.warmup;
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
        const JsonValue *o = value.find(which);
        const JsonValue *p = o ? o->find("nvme_path") : nullptr;
        if (!p)
          continue;
        if (p->kind != JsonValue::Kind::String)
          problems.push_back(std::string("zero_optimization.") + which +
                             ".nvme_path (expected a directory)");
        else if (!path.empty() && path != p->text)
          problems.push_back("zero_optimization.offload_param.nvme_path "
                             "(differs from offload_optimizer's: ztrain "
                             "keeps one swap directory per rank)");
        else
          path = p->text;
      }
      if (!path.empty() && !has("--nvme-path"))
        opts.nvmePath = path;
    } else if (std::find_if(std::begin(compilerKeys), std::end(compilerKeys),
                            [&](const char *k) { return key == k; }) ==
               std::end(compilerKeys)) {
      problems.push_back(key + " (unknown)");
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

/// A finite number >= 0 (> 0 with `positive`); exit 2 naming the flag
/// otherwise.
double parseReal(const std::string &flag, const std::string &value,
                 bool positive = false) {
  char *end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (*end != '\0' || !std::isfinite(v) || !(positive ? v > 0.0 : v >= 0.0))
    usageError("flag %s: '%s' is not a finite number %s", flag.c_str(),
               value.c_str(), positive ? "> 0" : ">= 0");
  return v;
}

/// The ztrt_hyper_id of a hyper-parameter flag, or -1.
int hyperId(const std::string &flag) {
  for (int id = 0; id < ZTRT_HYPER_COUNT; ++id)
    if (flag == hyperFlag(id))
      return id;
  return -1;
}

/// The run-time training settings a checkpoint records and a resume
/// continues (CheckpointIndex::run).
constexpr const char *kTrainingFlags[] = {
    "--lr",   "--lr-schedule",   "--warmup-steps", "--min-lr",
    "--lr-decay-steps", "--beta1", "--beta2", "--eps",
    "--weight-decay", "--momentum", "--dampening"};

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

/// The shortest decimal text that reads back as exactly `v`.
std::string exactText(double v) {
  for (int digits = 15; digits < 17; ++digits) {
    std::string text = format("%.*g", digits, v);
    if (std::strtod(text.c_str(), nullptr) == v)
      return text;
  }
  return format("%.17g", v);
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


int64_t parseInteger(const std::string &flag, const std::string &value,
                     int64_t min) {
  errno = 0;
  char *end = nullptr;
  long long parsed = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || parsed < min ||
      value[0] == '+' || value[0] == ' ')
    usageError("flag %s: '%s' is not an integer >= %lld", flag.c_str(),
               value.c_str(), static_cast<long long>(min));
  return parsed;
}

uint64_t parseSeed(const std::string &value) {
  errno = 0;
  char *end = nullptr;
  unsigned long long parsed = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE ||
      !(value[0] >= '0' && value[0] <= '9'))
    usageError("flag --seed: '%s' is not a non-negative 64-bit integer",
               value.c_str());
  return parsed;
}

/// Copies `bytes` of backend memory to a host vector.
std::vector<char> toHost(Backend &backend, const void *src, int64_t bytes) {
  std::vector<char> host(static_cast<size_t>(bytes));
  backend.copyToHost(host.data(), src, bytes);
  return host;
}

/// Refuses a plan that needs more than `budget` bytes (this rank's; -1:
/// unknown) on any rank: every rank learns every budget, and rank 0 names
/// the ranks that are short, in one line. `memory` says which memory.
void refuseShortRanks(Communicator &comm, const PlannedBytes &planned,
                      int64_t budget, const std::string &memory) {
  std::vector<int64_t> budgets(static_cast<size_t>(comm.count()));
  comm.allGather(&budget, budgets.data(), 1, sizeof(budget));
  std::string short_;
  for (int r = 0; r < comm.count(); ++r)
    if (budgets[r] >= 0 && budgets[r] < planned.total())
      short_ += format("%s%d (%s)", short_.empty() ? "" : ", ", r,
                       formatBytes(static_cast<uint64_t>(budgets[r])).c_str());
  if (short_.empty())
    return;
  refuse("the compiled plan needs %s per rank (model states %s, inputs %s, "
         "buffers %s, step arenas %s) but rank(s) %s have less %s; use more "
         "ranks, a higher ZeRO stage or a smaller batch (--skip-memory-check "
         "runs anyway)",
         formatBytes(static_cast<uint64_t>(planned.total())).c_str(),
         formatBytes(static_cast<uint64_t>(planned.modelStates)).c_str(),
         formatBytes(static_cast<uint64_t>(planned.inputs)).c_str(),
         formatBytes(static_cast<uint64_t>(planned.buffers)).c_str(),
         formatBytes(static_cast<uint64_t>(planned.arenas)).c_str(),
         short_.c_str(), memory.c_str());
}

/// Refuses, before anything is allocated, a plan that needs more host
/// memory per rank than this node has for each of its ranks (MemAvailable
/// or the cgroup's limit, shared by the node's ranks).
void checkMemory(Communicator &comm, const Descriptor &desc,
                 const Options &opts) {
  if (opts.skipMemoryCheck || opts.backend != "cpu")
    return;
  uint64_t available = 0;
  std::string source;
  int64_t budget = -1; // unknown
  if (hostMemoryAvailable(available, source))
    budget = static_cast<int64_t>(available /
                                  static_cast<uint64_t>(comm.localCount()));
  refuseShortRanks(comm, plannedBytes(desc), budget,
                   format("available (%s, shared by the node's %d rank(s))",
                          source.c_str(), comm.localCount()));
}

/// The same check against each rank's GPU before the model is allocated
/// there: the plan's bytes all live in device memory on the cuda backend.
void checkDeviceMemory(Backend &backend, Communicator &comm,
                       const Descriptor &desc, const Options &opts) {
  uint64_t free = 0, total = 0;
  if (opts.skipMemoryCheck || !backend.deviceMemory(free, total))
    return;
  refuseShortRanks(comm, plannedBytes(desc, /*deviceOnly=*/true),
                   static_cast<int64_t>(free),
                   "free device memory (cudaMemGetInfo on the rank's GPU)");
}

/// Fatal, naming the file and the tensor, unless the --init tensor has the
/// model's dtype and shape.
void checkInitTensor(const char *path, const SafetensorsTensor &tensor,
                     const TensorSpec &spec) {
  const char *dtype = elemTypeSafetensorsName(spec.type);
  if (tensor.dtype != dtype)
    fatal("--init '%s': tensor '%s' has dtype %s, the model expects %s", path,
          spec.name.c_str(), tensor.dtype.c_str(), dtype);
  if (tensor.shape != spec.shape)
    fatal("--init '%s': tensor '%s' has shape %s, the model expects %s", path,
          spec.name.c_str(), formatShape(tensor.shape).c_str(),
          formatShape(spec.shape).c_str());
}

/// Fills every buffer, and every parameter's storage on this rank, from the
/// seed or from the
/// --init file (which holds full tensors: each rank takes its slice). Every
/// rank computes exactly its own elements, so replicas and shards start
/// consistent without communication.
/// The tensors --init names: one safetensors file, or a Hugging Face
/// sharded checkpoint (its model.safetensors.index.json, or a directory
/// with that index or a model.safetensors), each shard read once.
class InitTensors {
public:
  explicit InitTensors(const std::string &path) {
    struct stat info;
    std::string index = path;
    if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
      std::string dir = path + "/";
      if (::access((dir + "model.safetensors.index.json").c_str(), F_OK) == 0)
        index = dir + "model.safetensors.index.json";
      else if (::access((dir + "model.safetensors").c_str(), F_OK) == 0)
        index = dir + "model.safetensors";
      else
        fatal("--init '%s': a directory without model.safetensors.index.json "
              "or model.safetensors",
              path.c_str());
    }
    if (index.size() < 5 || index.compare(index.size() - 5, 5, ".json") != 0) {
      files.push_back(SafetensorsFile::read(index, "--init"));
      return;
    }
    // {"weight_map": {"tensor": "file.safetensors", ...}}: the files are
    // names in the index's directory.
    std::vector<char> text = readInputFile(index, "--init");
    JsonValue root;
    std::string error;
    if (!parseJson(std::string_view(text.data(), text.size()), root, error))
      fatal("--init '%s': not JSON: %s", index.c_str(), error.c_str());
    const JsonValue *map = root.find("weight_map");
    if (!map || map->kind != JsonValue::Kind::Object)
      fatal("--init '%s': no \"weight_map\" object (a Hugging Face "
            "sharded-checkpoint index)",
            index.c_str());
    const size_t slash = index.find_last_of('/');
    const std::string dir =
        slash == std::string::npos ? std::string() : index.substr(0, slash + 1);
    std::vector<std::string> names;
    for (const auto &[tensor, file] : map->members) {
      if (file.kind != JsonValue::Kind::String || file.text.empty() ||
          file.text.find('/') != std::string::npos || file.text == "." ||
          file.text == "..")
        fatal("--init '%s': \"weight_map\" entry '%s' is not a file name in "
              "the index's directory",
              index.c_str(), tensor.c_str());
      auto it = std::find(names.begin(), names.end(), file.text);
      size_t at = it - names.begin();
      if (it == names.end()) {
        names.push_back(file.text);
        files.push_back(SafetensorsFile::read(dir + file.text, "--init"));
      }
      fileOf.emplace_back(tensor, at);
    }
  }
  /// The tensor named `name`, or null: in the one file, or in the file the
  /// index maps it to (which must hold it).
  const SafetensorsTensor *find(const std::string &name) const {
    if (fileOf.empty())
      return files.front().find(name);
    for (const auto &[tensor, at] : fileOf)
      if (tensor == name) {
        const SafetensorsTensor *t = files[at].find(name);
        if (!t)
          fatal("--init '%s': the index maps '%s' to it, but it has no such "
                "tensor",
                files[at].path().c_str(), name.c_str());
        return t;
      }
    return nullptr;
  }

private:
  std::vector<SafetensorsFile> files;
  std::vector<std::pair<std::string, size_t>> fileOf;
};

void initParams(ztrt_ctx &ctx, const Descriptor &desc, const Options &opts) {
  Backend &backend = ctx.backend();
  const int64_t rank = ctx.comm().rank();
  // Buffers: the --init file's tensor of that name when it has one (a
  // state dict with persistent buffers), else the buffer's rule.
  std::optional<InitTensors> initFile;
  if (!opts.init.empty())
    initFile.emplace(opts.init);
  for (size_t i = 0; i < desc.buffers.size(); ++i) {
    const BufferSpec &spec = desc.buffers[i];
    const SafetensorsTensor *tensor =
        initFile ? initFile->find(spec.name) : nullptr;
    if (tensor) {
      checkInitTensor(opts.init.c_str(), *tensor, spec);
      backend.copyFromHost(ctx.buffers[i], tensor->data, spec.bytes);
      continue;
    }
    if (spec.init == InitKind::External)
      fatal("buffer '%s' has no rule (init external): its values come from "
            "the --init file the importer wrote%s",
            spec.name.c_str(),
            opts.init.empty() ? "; pass --init FILE"
                              : (" and '" + opts.init + "' has no tensor of that name")
                                    .c_str());
    std::vector<char> host(static_cast<size_t>(spec.bytes));
    initBuffer(spec, opts.seed, host.data());
    backend.copyFromHost(ctx.buffers[i], host.data(), spec.bytes);
  }
  // A 16-bit parameter's master state starts as the f32 values the
  // parameter is the rounding of (other states stay zero).
  auto masterOf = [&](const ParamSpec &spec) -> const StateSpec * {
    return spec.masterIndex >= 0 ? &desc.states[spec.masterIndex] : nullptr;
  };
  if (opts.init.empty()) {
    for (size_t i = 0; i < desc.params.size(); ++i) {
      const ParamSpec &spec = desc.params[i];
      std::vector<char> host(static_cast<size_t>(spec.storeBytes));
      initParameterStorage(spec, opts.seed, rank, host.data());
      ctx.paramFromHost(i, host.data(), spec.storeBytes);
      if (const StateSpec *master = masterOf(spec)) {
        std::vector<char> wide(static_cast<size_t>(master->storeBytes));
        initMasterStorage(*master, spec, opts.seed, rank, wide.data());
        ctx.stateFromHost(static_cast<size_t>(spec.masterIndex), wide.data(),
                          master->storeBytes);
      }
    }
    return;
  }
  const InitTensors &file = *initFile;
  const char *path = opts.init.c_str();
  for (size_t i = 0; i < desc.params.size(); ++i) {
    const ParamSpec &spec = desc.params[i];
    const SafetensorsTensor *tensor = file.find(spec.name);
    if (!tensor)
      fatal("--init '%s': no tensor named '%s'", path, spec.name.c_str());
    const StateSpec *master = masterOf(spec);
    std::vector<char> host(static_cast<size_t>(spec.storeBytes));
    std::vector<char> wide(master ? static_cast<size_t>(master->storeBytes)
                                  : 0);
    std::string problem =
        loadInitTensor(spec, master, *tensor, rank, host.data(), wide.data());
    if (!problem.empty())
      fatal("--init '%s': %s", path, problem.c_str());
    ctx.paramFromHost(i, host.data(), spec.storeBytes);
    if (master)
      ctx.stateFromHost(static_cast<size_t>(spec.masterIndex), wide.data(),
                        master->storeBytes);
  }
}

/// The ranks of one machine whose --nvme-path is on one file system share its
/// free space, and each rank's own check (SwapSpace) sees only its share:
/// refused on every rank, before any reserves a byte, when their swap files
/// need more together than the file system has free. Ranks on other nodes
/// count apart (a shared file system across nodes is found when a
/// reservation fails, by the line that names the bytes per rank).
void checkSharedSwapSpace(Communicator &comm, const std::string &path,
                          int64_t bytes) {
  if (comm.count() < 2)
    return;
  struct Record {
    uint64_t host = 0, device = 0;
    int64_t bytes = 0, avail = -1; // -1: not known (SwapSpace says why)
  } mine;
  // The machine: its kernel's boot id, which exactly the processes that
  // share a kernel (and so its device numbers) share, containers included;
  // the host name where there is none.
  std::string machine;
  {
    std::ifstream bootId("/proc/sys/kernel/random/boot_id");
    std::getline(bootId, machine);
  }
  if (machine.empty()) {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    machine = std::string("host:") + name;
  }
  mine.host = 1469598103934665603ull; // FNV-1a
  for (char c : machine)
    mine.host = (mine.host ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  mine.bytes = bytes;
  struct stat info;
  struct statvfs fs;
  // A path that is not a writable directory is SwapSpace's to name.
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode) &&
      ::statvfs(path.c_str(), &fs) == 0 && !(fs.f_flag & ST_RDONLY)) {
    mine.device = static_cast<uint64_t>(info.st_dev);
    mine.avail = static_cast<int64_t>(
        std::min<long double>(static_cast<long double>(fs.f_bavail) *
                                  fs.f_frsize,
                              static_cast<long double>(INT64_MAX)));
  }
  static_assert(sizeof(Record) == 32, "four 8-byte fields");
  std::vector<Record> all(static_cast<size_t>(comm.count()));
  comm.allGather(&mine, all.data(), 4, 8);
  // The same verdict on every rank: the first group, in rank order, that
  // does not fit.
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].avail < 0)
      continue;
    std::vector<size_t> group;
    int64_t total = 0;
    for (size_t s = 0; s < all.size(); ++s)
      if (all[s].host == all[r].host && all[s].device == all[r].device &&
          all[s].avail >= 0) {
        group.push_back(s);
        if (__builtin_add_overflow(total, all[s].bytes, &total))
          total = INT64_MAX;
      }
    if (group.front() != r || group.size() < 2 || all[r].avail >= total)
      continue;
    std::string ranks;
    for (size_t i = 0; i < group.size(); ++i)
      ranks += (i == 0 ? "" : i + 1 == group.size() ? " and " : ", ") +
               std::to_string(group[i]);
    refuse("--nvme-path '%s': %lld bytes free on the file system that ranks "
           "%s share on one node, and their swap files need %lld bytes "
           "together (%lld bytes for rank %zu)",
           path.c_str(), static_cast<long long>(all[r].avail), ranks.c_str(),
           static_cast<long long>(total),
           static_cast<long long>(all[r].bytes), r);
  }
}

/// zero-offload's placements: the swap directory and one file per
/// nvme-resident state (space reserved now, so a full disk is found before
/// the first step), and the one-time note that host placement changes
/// nothing on the cpu backend. Every rank refuses the same way.
void setUpOffload(ztrt_ctx &ctx, const Descriptor &desc, const Options &opts,
                  int rank) {
  int64_t nvmeBytes = 0, files = 0; // one file per nvme tensor
  bool host = false;
  for (const StateSpec &spec : desc.states) {
    if (spec.space == MemorySpace::Nvme) {
      nvmeBytes += SwapSpace::roundUp(spec.storeBytes);
      ++files;
    }
    host |= spec.space == MemorySpace::Host;
  }
  bool hostParams = false;
  for (const ParamSpec &spec : desc.params) {
    hostParams |= spec.space == MemorySpace::Host;
    if (spec.space == MemorySpace::Nvme) {
      nvmeBytes += SwapSpace::roundUp(spec.storeBytes);
      ++files;
    }
  }
  if (host && rank == 0 && opts.backend == "cpu")
    warning("--offload-optimizer=cpu: on the cpu backend host memory is the "
            "device's, so the optimizer states stay where they are (their "
            "bytes are reported as host_optimizer_states) and the updates "
            "run where they always do; only each gradient is copied once "
            "into host_gradients, where its update reads it");
  if (hostParams && rank == 0 && opts.backend == "cpu")
    warning("--offload-param=cpu: on the cpu backend host memory is the "
            "device's, so the parameters stay where they are and nothing "
            "moves (their bytes are reported as host_parameters)");
  ctx.stateFiles.assign(desc.states.size(), -1);
  ctx.stateFileBytes.assign(desc.states.size(), 0);
  ctx.paramFiles.assign(desc.params.size(), -1);
  ctx.paramFileBytes.assign(desc.params.size(), 0);
  if (!nvmeBytes) {
    if (!opts.nvmePath.empty() && rank == 0)
      warning("--nvme-path: this model keeps nothing on nvme (compiled "
              "without --offload-optimizer=nvme or --offload-param=nvme); "
              "ignored");
    return;
  }
  if (opts.nvmePath.empty())
    refuse("this model keeps its %s on nvme (--offload-%s=nvme, %s per "
           "rank): give --nvme-path DIR, a directory on a fast local disk",
           host ? "optimizer states" : "model states",
           host ? "optimizer" : "optimizer/param",
           formatBytes(static_cast<uint64_t>(nvmeBytes)).c_str());
  SwapSpace::reserveFiles(files, opts.nvmePath);
  // The leftovers of runs that ended without removing theirs first, by
  // whichever rank takes each one's lock, and every rank's done before any
  // counts the free space (the allGather below is after the barrier too).
  for (const SwapSpace::Stale &stale : SwapSpace::reclaimStale(opts.nvmePath))
    warning("--nvme-path: removed '%s' (%s), the swap directory of a run "
            "that ended without removing it",
            stale.dir.c_str(),
            formatBytes(static_cast<uint64_t>(stale.bytes)).c_str());
  ctx.comm().barrier();
  checkSharedSwapSpace(ctx.comm(), opts.nvmePath, nvmeBytes);
  ctx.swap = std::make_unique<SwapSpace>(opts.nvmePath, rank, nvmeBytes);
  for (size_t i = 0; i < desc.params.size(); ++i) {
    const ParamSpec &spec = desc.params[i];
    if (spec.space != MemorySpace::Nvme)
      continue;
    ctx.paramFileBytes[i] = SwapSpace::roundUp(spec.storeBytes);
    ctx.paramFiles[i] = ctx.swap->createFile(spec.name, spec.storeBytes);
  }
  for (size_t i = 0; i < desc.states.size(); ++i) {
    const StateSpec &spec = desc.states[i];
    if (spec.space != MemorySpace::Nvme)
      continue;
    ctx.stateFileBytes[i] = SwapSpace::roundUp(spec.storeBytes);
    ctx.stateFiles[i] = ctx.swap->createFile(spec.name, spec.storeBytes);
  }
}

/// Writes the full parameters, then the buffers, to `path` on rank 0, as one
/// process holding them would: padding dropped, shards gathered to rank 0
/// in rank order.
/// Every rank calls it: the gathers of sharded parameters are collective.
void saveParams(ztrt_ctx &ctx, const Descriptor &desc,
                const std::string &path) {
  Backend &backend = ctx.backend();
  Communicator &comm = ctx.comm();
  const bool root = comm.rank() == 0;
  std::vector<std::vector<char>> host;
  for (size_t i = 0; i < desc.params.size(); ++i) {
    const ParamSpec &spec = desc.params[i];
    if (spec.store == StoreMode::Full) {
      // The tensor is the first numel elements; the padding stays behind.
      if (root) {
        host.emplace_back(static_cast<size_t>(spec.storeBytes));
        ctx.paramToHost(i, host.back().data(), spec.storeBytes);
        host.back().resize(static_cast<size_t>(spec.bytes));
      }
      continue;
    }
    std::vector<char> shard(static_cast<size_t>(spec.storeBytes));
    ctx.paramToHost(i, shard.data(), spec.storeBytes);
    std::vector<char> all(root ? static_cast<size_t>(comm.count()) *
                                     static_cast<size_t>(spec.storeBytes)
                               : 0);
    // Shards concatenated in rank order are the flat tensor followed by the
    // padding (checkStorage: E * N >= numel). The gather moves elements as
    // bits, without converting them.
    comm.gather(shard.data(), all.data(), spec.storeElems, spec.elemBytes(),
                0);
    if (root) {
      all.resize(static_cast<size_t>(spec.bytes));
      host.push_back(std::move(all));
    }
  }
  if (!root)
    return;
  // Then the buffers, as a state dict holds persistent buffers: every rank
  // has the whole tensor.
  for (size_t i = 0; i < desc.buffers.size(); ++i)
    host.push_back(toHost(backend, ctx.buffers[i], desc.buffers[i].bytes));
  std::vector<SafetensorsWriteTensor> tensors;
  for (size_t i = 0; i < desc.params.size(); ++i) {
    const ParamSpec &spec = desc.params[i];
    tensors.push_back({spec.name, elemTypeSafetensorsName(spec.type),
                       spec.shape, host[i].data()});
  }
  for (size_t i = 0; i < desc.buffers.size(); ++i) {
    const BufferSpec &spec = desc.buffers[i];
    tensors.push_back({spec.name, elemTypeSafetensorsName(spec.type),
                       spec.shape, host[desc.params.size() + i].data()});
  }
  // "format": "pt" is what Hugging Face loaders look for in PyTorch weights.
  writeSafetensors(path, tensors, {{"format", "pt"}});
}

struct StepRecord {
  int64_t step;
  /// This rank's loss, and the mean over ranks (what is printed).
  float loss, meanLoss;
  double timeMs;
  /// Dynamic loss scaling: the scale the step used, and whether it
  /// overflowed (its updates were skipped). Scale 0: no loss scaling.
  double lossScale = 0.0;
  bool skipped = false;
  /// Gradient clipping: the step's global gradient norm (unscaled).
  double gradNorm = 0.0;
  /// The learning rate the step's updates used (NaN: the model asked none).
  double lr = 0.0;
};

/// The mean of one value per rank, summed in rank order in float and divided
/// by the number of ranks in float: the same on every rank, and the value
/// itself in a world of one.
float meanOverRanks(Communicator &comm, float value) {
  std::vector<float> values(static_cast<size_t>(comm.count()));
  comm.allGather(&value, values.data(), 1, sizeof(value));
  float sum = values[0];
  for (size_t r = 1; r < values.size(); ++r)
    sum += values[r];
  return sum / static_cast<float>(values.size());
}

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
      "  \"device\": %s,\n  \"steps\": [",
      worldSize, jsonQuote(ctx.backend().name()).c_str(),
      jsonQuote(ctx.backend().deviceName()).c_str());
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
                   "\"warmup_steps\": %lld, \"min_lr\": %.17g, "
                   "\"decay_steps\": %lld},\n",
                   LrSchedule::kindName(s.kind),
                   base ? format("%.17g", *base).c_str() : "null",
                   static_cast<long long>(s.warmup), minLr,
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

} // namespace

std::unique_ptr<Backend> createBackend(const std::string &name,
                                       const Communicator &comm) {
  if (name == "cpu")
    return createCpuBackend();
#ifdef ZTRT_HAVE_CUDA
  CudaOptions options;
  // Fatal, naming the reason, when there is no usable GPU for this rank.
  options.device = selectCudaDevice(comm.params());
  return createCudaBackend(options);
#else
  fatal("--backend cuda: this executable was built without CUDA support "
        "(the runtime was configured without the CUDA toolkit and NCCL; "
        "see docs/cuda.md)");
#endif
}

Options parseOptions(int argc, char **argv, int rank) {
  Options opts;
  bool minLrGiven = false;
  std::set<std::string> given;
  std::string configPath;
  const char *program = argc > 0 ? argv[0] : "ztrain-model";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.compare(0, 2, "--") != 0)
      usageError("unexpected argument '%s' (flags start with --; try --help)",
                 arg.c_str());
    size_t eq = arg.find('=');
    std::string flag = arg.substr(0, eq);
    bool inlineValue = eq != std::string::npos;
    if (flag == "--help") {
      if (inlineValue)
        usageError("flag --help takes no value");
      if (rank == 0)
        std::printf(kUsage, program);
      std::exit(0);
    }
    if (flag == "--allow-nonfinite-loss" || flag == "--skip-memory-check") {
      if (inlineValue)
        usageError("flag %s takes no value", flag.c_str());
      (flag == "--skip-memory-check" ? opts.skipMemoryCheck
                                     : opts.allowNonfiniteLoss) = true;
      continue;
    }
    static const char *const valued[] = {"--steps",
                                         "--seed",
                                         "--init",
                                         "--data",
                                         "--save",
                                         "--log-every",
                                         "--report",
                                         "--threads",
                                         "--save-checkpoint",
                                         "--nvme-path",
                                         "--checkpoint-every",
                                         "--keep-checkpoints",
                                         "--collective-timeout",
                                         "--resume",
                                         "--trace",
                                         "--backend",
                                         "--lr",
                                         "--lr-schedule",
                                         "--warmup-steps",
                                         "--min-lr",
                                         "--lr-decay-steps",
                                         "--grad-accum-steps",
                                         "--data-format",
                                         "--beta1",
                                         "--beta2",
                                         "--eps",
                                         "--weight-decay",
                                         "--momentum",
                                         "--dampening",
                                         "--config",
                                         "--eval-data",
                                         "--eval-every",
                                         "--eval-steps",
                                         "--peak-tflops",
                                         "--sample",
                                         "--sample-tokens",
                                         "--temperature",
                                         "--top-k",
                                         "--data-order",
                                         "--sample-ids"};
    bool known = false;
    for (const char *name : valued)
      known = known || flag == name;
    if (!known)
      usageError("unknown flag '%s' (try --help)", flag.c_str());
    std::string value;
    if (inlineValue) {
      value = arg.substr(eq + 1);
    } else {
      // A following flag is not a value: `--save --report r.json` is a
      // missing value, not a checkpoint named "--report".
      if (i + 1 >= argc || std::strncmp(argv[i + 1], "--", 2) == 0)
        usageError("flag %s needs a value", flag.c_str());
      value = argv[++i];
    }
    if (value.empty())
      usageError("flag %s needs a value", flag.c_str());
    given.insert(flag);
    if (flag == "--config")
      configPath = value;
    else if (flag == "--eval-data")
      opts.evalData = value;
    else if (flag == "--eval-every")
      opts.evalEvery = parseInteger(flag, value, 0);
    else if (flag == "--eval-steps")
      opts.evalSteps = parseInteger(flag, value, 1);
    else if (flag == "--data-order") {
      if (value == "random")
        opts.dataOrder = DataOrder::Random;
      else if (value == "sequential")
        opts.dataOrder = DataOrder::Sequential;
      else
        usageError("flag --data-order: '%s' is not an order (random or "
                   "sequential)",
                   value.c_str());
    } else if (flag == "--sample") {
      opts.sample = value;
      opts.sampleGiven = true;
    } else if (flag == "--sample-ids") {
      size_t at = 0;
      while (at <= value.size()) {
        size_t comma = value.find(',', at);
        std::string id = value.substr(
            at, comma == std::string::npos ? std::string::npos : comma - at);
        opts.sampleIds.push_back(parseInteger(flag, id, 0));
        if (comma == std::string::npos)
          break;
        at = comma + 1;
      }
      opts.sampleGiven = true;
    } else if (flag == "--sample-tokens")
      opts.sampleTokens = parseInteger(flag, value, 1);
    else if (flag == "--top-k")
      opts.topK = parseInteger(flag, value, 0);
    else if (flag == "--temperature")
      opts.temperature = parseReal(flag, value);
    else if (flag == "--peak-tflops")
      opts.peakTflops = parseReal(flag, value, /*positive=*/true);
    else if (flag == "--steps")
      opts.steps = parseInteger(flag, value, 0);
    else if (flag == "--seed") {
      opts.seed = parseSeed(value);
      opts.seedGiven = true;
    } else if (flag == "--init")
      opts.init = value;
    else if (flag == "--data")
      opts.data = value;
    else if (flag == "--save")
      opts.save = value;
    else if (flag == "--log-every")
      opts.logEvery = parseInteger(flag, value, 0);
    else if (flag == "--report")
      opts.report = value;
    else if (flag == "--trace")
      opts.trace = value;
    else if (flag == "--save-checkpoint")
      opts.saveCheckpoint = value;
    else if (flag == "--nvme-path")
      opts.nvmePath = value;
    else if (flag == "--checkpoint-every")
      opts.checkpointEvery = parseInteger(flag, value, 1);
    else if (flag == "--keep-checkpoints")
      opts.keepCheckpoints = parseInteger(flag, value, 0);
    else if (flag == "--collective-timeout") {
      char *end = nullptr;
      double seconds = std::strtod(value.c_str(), &end);
      if (*end != '\0' || !(seconds >= 0.0) || !std::isfinite(seconds))
        usageError("flag --collective-timeout: '%s' is not a number of "
                   "seconds >= 0",
                   value.c_str());
      opts.collectiveTimeout = seconds;
    }
    else if (flag == "--resume")
      opts.resume = value;
    else if (flag == "--backend") {
      if (value != "cpu" && value != "cuda")
        usageError("flag --backend: '%s' is not a backend (cpu or cuda)",
                   value.c_str());
      opts.backend = value;
    } else if (flag == "--lr" || flag == "--min-lr") {
      const double v = parseReal(flag, value);
      if (flag == "--lr")
        opts.lr.lr = v;
      else {
        opts.lr.minLr = v;
        minLrGiven = true;
      }
    } else if (int id = hyperId(flag); id >= 0) {
      char *end = nullptr;
      errno = 0;
      double v = std::strtod(value.c_str(), &end);
      std::string problem = *end != '\0' || errno == ERANGE
                                ? std::string("is not a number")
                                : hyperProblem(id, v);
      if (!problem.empty())
        usageError("flag %s: '%s' %s", flag.c_str(), value.c_str(),
                   problem.c_str());
      opts.hypers[id] = v;
    } else if (flag == "--lr-schedule") {
      if (!LrSchedule::parseKind(value, opts.lr.kind))
        usageError("flag --lr-schedule: '%s' is not a schedule (constant, "
                   "cosine or linear)",
                   value.c_str());
    } else if (flag == "--warmup-steps")
      opts.lr.warmup = parseInteger(flag, value, 0);
    else if (flag == "--lr-decay-steps")
      opts.lr.decaySteps = parseInteger(flag, value, 1);
    else if (flag == "--data-format") {
      if (!parseDataFormat(value, opts.dataFormat))
        usageError("flag --data-format: '%s' is not a format (auto, "
                   "safetensors, text, u8, u16, u32 or npy)",
                   value.c_str());
    } else if (flag == "--grad-accum-steps")
      opts.gradAccumSteps =
          std::min<int64_t>(parseInteger(flag, value, 1), int64_t(1) << 30);
    else if (flag == "--threads")
      opts.threads = static_cast<int>(
          std::min<int64_t>(parseInteger(flag, value, 1), 1 << 16));
  }
  for (const char *f : kTrainingFlags)
    if (given.count(f))
      opts.trainingSet.insert(f);
  if (!configPath.empty()) {
    applyRunConfig(configPath, given, opts);
    opts.configPath = configPath;
  }
  if (std::string problem = scheduleProblem(opts.lr); !problem.empty())
    usageError("%s", problem.c_str());
  // (Resumed, the schedule may be the checkpoint's: checked after it is
  // read.)
  if (opts.resume.empty() && opts.lr.kind == LrSchedule::Kind::Constant &&
      (minLrGiven || opts.lr.decaySteps > 0))
    usageError("flag %s shapes a decaying schedule; with --lr-schedule="
               "constant it has no effect (add --lr-schedule=cosine or linear)",
               minLrGiven ? "--min-lr" : "--lr-decay-steps");
  if (opts.data.empty() &&
      (given.count("--data-format") || given.count("--data-order")))
    usageError("flag %s says how --data is read; without --data FILE (the "
               "inputs are then synthetic) it has no effect",
               given.count("--data-format") ? "--data-format" : "--data-order");
  if (opts.evalData.empty() &&
      (given.count("--eval-every") || given.count("--eval-steps")))
    usageError("flag %s needs --eval-data FILE",
               given.count("--eval-every") ? "--eval-every" : "--eval-steps");
  if (opts.checkpointEvery > 0 && opts.saveCheckpoint.empty())
    usageError("flag --checkpoint-every needs --save-checkpoint DIR");
  for (const char *f : {"--temperature", "--top-k", "--sample-tokens"})
    if (given.count(f) && !opts.sampleGiven && opts.sampleIds.empty())
      usageError("flag %s shapes --sample's text; without --sample TEXT or "
                 "--sample-ids it has no effect",
                 f);
  if (opts.keepCheckpoints > 0 && opts.saveCheckpoint.empty())
    usageError("flag --keep-checkpoints needs --save-checkpoint DIR");
  if (!opts.resume.empty() && !opts.init.empty())
    usageError("flags --init and --resume exclude each other (a resumed run "
               "continues the checkpoint's parameters)");
  return opts;
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

/// The step the collective watchdog names in its message.
std::atomic<int64_t> watchdogStep{0};

int runMain(int argc, char **argv, const char *descriptor, StepFn step,
            StepFn eval, StepFn logitsFn) {
  // Past the file-size limit (ulimit -f) a write fails with EFBIG instead of
  // killing the process with SIGXFSZ: the writer's error removes its
  // temporary file and says which file could not be written.
  std::signal(SIGXFSZ, SIG_IGN);
  std::unique_ptr<Communicator> world = Communicator::initWorld(&argc, &argv);
  const int rank = world->rank(), ranks = world->count();
  reportTermination(&watchdogStep);
  Options opts = parseOptions(argc, argv, rank);
  Descriptor desc = parseDescriptor(descriptor);
  if (desc.gridSize > 0 && desc.gridSize != ranks)
    refuse("the model was compiled for dp=%lld ranks but was launched on "
           "%d (compile with --dp=%d, or launch %lld ranks)",
           static_cast<long long>(desc.gridSize), ranks, ranks,
           static_cast<long long>(desc.gridSize));
  // Shards must cover their tensors on the ranks there are. The parser
  // checks that against a grid record; without one this is the first point
  // at which the number of ranks is known.
  checkStorage(desc, ranks);
  // (Also one rank under a launcher: the watchdog ends it if the launcher
  // is gone.)
  if (ranks > 1 || launchedByMpi())
    startCollectiveWatchdog(opts.collectiveTimeout, &watchdogStep);
  checkMemory(*world, desc, opts);

  // A resumed run continues the checkpoint's data stream, so its seed must
  // be known before the data source opens. Rank 0 alone checks the index
  // against this model, so that a mismatch is one line; the other ranks
  // wait at the barrier until the check passes or rank 0's error aborts the
  // job, and then read the index it accepted.
  // How --data is read, as checkpoints record it.
  std::string dataFormatText;
  if (!opts.data.empty()) {
    // The file first (createDataSource's order): a device or a missing
    // file is named as such before its name is read for a format.
    uint64_t size = 0;
    ::close(openInputFile(opts.data, "--data", size));
    dataFormatText =
        dataFormatName(resolveDataFormat(opts.data, opts.dataFormat));
  }
  const std::string dataOrderText =
      opts.data.empty() ? ""
      : opts.dataOrder == DataOrder::Random ? "random"
                                            : "sequential";
  CheckpointIndex resumed;
  if (!opts.resume.empty()) {
    if (rank == 0) {
      resumed = readCheckpointIndex(opts.resume, "--resume");
      checkResumable(resumed, desc, descriptor, ranks);
      checkResumedData(resumed, opts.data, dataFormatText, dataOrderText,
                       opts.resume);
      if (opts.seedGiven && opts.seed != resumed.seed)
        fatal("--resume '%s': the checkpoint was trained with --seed %llu, "
              "this run has --seed %llu (leave --seed out to continue its "
              "data)",
              opts.resume.c_str(),
              static_cast<unsigned long long>(resumed.seed),
              static_cast<unsigned long long>(opts.seed));
    }
    world->barrier();
    if (rank != 0)
      resumed = readCheckpointIndex(opts.resume, "--resume");
    opts.seed = resumed.seed;
    // The schedule and hyper-parameters continue as the run set them,
    // except where this run's flags (or --config) say otherwise.
    const std::string restored =
        continueTrainingSettings(resumed.run, opts, opts.resume);
    // What this command line changed must fit what it continues (a
    // schedule the checkpoint recorded as it ran is taken as it is).
    const bool changed = opts.trainingSet.count("--warmup-steps") ||
                         opts.trainingSet.count("--lr-decay-steps");
    if (std::string problem = scheduleProblem(opts.lr);
        changed && !problem.empty())
      fatal("--resume '%s': with the checkpoint's schedule, %s",
            opts.resume.c_str(), problem.c_str());
    for (const char *flag : {"--min-lr", "--lr-decay-steps"})
      if (opts.lr.kind == LrSchedule::Kind::Constant &&
          opts.trainingSet.count(flag))
        fatal("--resume '%s': flag %s shapes a decaying schedule; the "
              "checkpoint's and this run's --lr-schedule is constant (add "
              "--lr-schedule=cosine or linear)",
              opts.resume.c_str(), flag);
    if (rank == 0 && !restored.empty() && opts.logEvery > 0) {
      std::printf("resuming with the checkpoint's %s (flags given here "
                  "replace them)\n",
                  restored.c_str());
      std::fflush(stdout);
    }
  }

  std::unique_ptr<Backend> impl = createBackend(opts.backend, *world);
  ztrt_ctx ctx(std::move(impl), std::move(world));
  ctx.seed = opts.seed;
  if (desc.lossScale)
    ctx.scaler.emplace(*desc.lossScale);
  ctx.clipMaxNorm = desc.clipGradNorm;
  ctx.lrSchedule = opts.lr;
  checkHyperOverrides(desc, opts);
  if (!opts.configPath.empty())
    checkConfigAgainstBuild(desc, opts, opts.configPath);
  ctx.hyperOverrides = opts.hypers;
  if (opts.gradAccumSteps > 0 && desc.gradAccumSteps == 0 &&
      opts.gradAccumSteps != 1)
    refuse("--grad-accum-steps %lld: this model was compiled without "
           "gradient accumulation (recompile with ztrain-compile "
           "--grad-accum-steps=K)",
           static_cast<long long>(opts.gradAccumSteps));
  if (desc.gradAccumSteps > 0)
    ctx.accumSteps =
        opts.gradAccumSteps > 0 ? opts.gradAccumSteps : desc.gradAccumSteps;
  // The samples an optimizer step consumes: ranks x micro-batch x
  // micro-batches. A run resumed with another global batch (other ranks,
  // micro-batch or --grad-accum-steps) shifts its sample indices so that
  // its data continues where the checkpoint's stopped.
  int64_t globalBatch = ranks * std::max<int64_t>(1, ctx.accumSteps);
  for (const InputSpec &in : desc.inputs)
    if (!in.shape.empty()) {
      globalBatch *= in.shape[0];
      break;
    }
  int64_t rowShift = 0;
  if (!opts.resume.empty()) {
    const int64_t consumed = resumed.dataSamples >= 0
                                 ? resumed.dataSamples
                                 : resumed.step * checkpointGlobalBatch(resumed);
    rowShift = consumed - resumed.step * globalBatch;
    const int64_t before = checkpointGlobalBatch(resumed);
    if (rank == 0 && before != globalBatch && opts.logEvery > 0) {
      std::printf("resuming with %lld samples per optimizer step (the "
                  "checkpoint's run took %lld): the data continues at "
                  "sample %lld\n",
                  static_cast<long long>(globalBatch),
                  static_cast<long long>(before),
                  static_cast<long long>(consumed));
      std::fflush(stdout);
    }
  }
  Backend &backend = ctx.backend();
  Communicator &comm = ctx.comm();
  checkDeviceMemory(backend, comm, desc, opts);
  // A large model takes seconds to allocate and initialize: say so first.
  if (rank == 0 && plannedBytes(desc).total() >= (int64_t(1) << 30)) {
    double params = 0.0;
    for (const ParamSpec &spec : desc.params)
      params += static_cast<double>(spec.numel);
    std::printf("starting: %.1fM parameters, %s per rank planned; "
                "initializing\n",
                params / 1e6,
                formatBytes(static_cast<uint64_t>(plannedBytes(desc).total()))
                    .c_str());
    std::fflush(stdout);
  }
  if (opts.threads > 0)
    backend.setThreads(opts.threads);
  ctx.hostStepThreads = opts.threads;
  if (!opts.trace.empty()) {
    // Every rank takes its time origin as it leaves this barrier, so the
    // ranks' traces line up to within the barrier's skew.
    comm.barrier();
    ctx.enableTrace();
  }

  // Outputs are checked before the first step, so that an unwritable path
  // does not surface after the whole run.
  if (rank == 0) {
    if (!opts.save.empty())
      checkOutputPath(opts.save, "--save");
    if (!opts.report.empty())
      checkOutputPath(opts.report, "--report");
    if (!opts.saveCheckpoint.empty()) {
      checkOutputDirectory(opts.saveCheckpoint, "--save-checkpoint");
      // One writer per checkpoint directory (rank 0 speaks for its job): a
      // second run started on it is refused now, not a silent mixture of
      // two runs' steps later. A directory the first save creates is
      // locked there.
      struct stat info;
      if (::stat(opts.saveCheckpoint.c_str(), &info) == 0)
        lockOutputDirectory(opts.saveCheckpoint, "--save-checkpoint");
    }
  }
  if (!opts.trace.empty())
    checkOutputPath(traceFilePath(opts.trace, rank, ranks), "--trace");

  // Open the data before allocating anything: a bad file fails in
  // milliseconds, not after initialising a large model.
  std::optional<DataFingerprint> dataPrint;
  if (!opts.data.empty() && rank == 0 && !opts.saveCheckpoint.empty())
    dataPrint = dataFingerprint(opts.data);
  std::unique_ptr<DataSource> data =
      createDataSource(desc, opts.data, opts.seed, rank, ranks,
                       opts.dataFormat, opts.dataOrder, rowShift);
  std::unique_ptr<DataSource> evalSource;
  if (!opts.evalData.empty()) {
    if (!desc.hasEval || !eval)
      refuse("--eval-data: this model was compiled without evaluation "
             "(ztrain-compile --eval=false); recompile without it");
    evalSource = createDataSource(desc, opts.evalData, opts.seed, rank, ranks,
                                  opts.dataFormat, opts.dataOrder);
  }

  // Parameters and states take their per-rank storage (E elements), which
  // is what the compiler's memory prediction counts.
  setUpOffload(ctx, desc, opts, rank);
  for (const ParamSpec &spec : desc.params)
    ctx.params.push_back(
        spec.space == MemorySpace::Nvme // in its swap file
            ? nullptr
            : ctx.allocate(spec.storeBytes,
                           spec.space == MemorySpace::Host
                               ? ZTRT_CAT_HOST_PARAMETERS
                               : ZTRT_CAT_PARAMETERS,
                           ("param '" + spec.name + "'").c_str()));
  for (size_t i = 0; i < desc.states.size(); ++i) {
    const StateSpec &spec = desc.states[i];
    std::vector<char> zeros(static_cast<size_t>(spec.storeBytes), 0);
    if (spec.space == MemorySpace::Nvme) {
      // Its file starts as zeros too (the master's values come below).
      ctx.states.push_back(nullptr);
      ctx.stateFromHost(i, zeros.data(), spec.storeBytes);
      continue;
    }
    void *ptr = ctx.allocate(spec.storeBytes,
                             spec.space == MemorySpace::Host
                                 ? ZTRT_CAT_HOST_STATES
                                 : ZTRT_CAT_OPTIMIZER_STATES,
                             ("state '" + spec.name + "'").c_str());
    ctx.states.push_back(ptr);
    // (Host memory on a device backend: written by the host.)
    ctx.stateFromHost(i, zeros.data(), spec.storeBytes);
  }
  if (!backend.hostResident()) {
    ctx.hostStepBufferBytes = desc.hostStepBuffer;
    if (ctx.hostStepBufferBytes)
      ctx.hostStepBuffer =
          ctx.allocate(ctx.hostStepBufferBytes, ZTRT_CAT_HOST_STEP_BUFFERS,
                       "host step buffer");
  }
  if (!desc.grads.empty() && desc.grads.size() != desc.params.size())
    fatal("descriptor: %zu gradient records for %zu parameters",
          desc.grads.size(), desc.params.size());
  // A gradient of 0 elements lives in the step's arena (zero-offload).
  for (const GradSpec &spec : desc.grads)
    ctx.grads.push_back(
        spec.elements == 0
            ? nullptr
            : ctx.allocate(spec.bytes(), ZTRT_CAT_GRADIENTS,
                           ("gradient of '" +
                            desc.params[spec.paramIndex].name + "'")
                               .c_str()));
  for (const InputSpec &spec : desc.inputs)
    ctx.inputs.push_back(ctx.allocate(spec.bytes, ZTRT_CAT_OTHER,
                                      ("input '" + spec.name + "'").c_str()));
  for (const BufferSpec &spec : desc.buffers)
    ctx.buffers.push_back(ctx.allocate(spec.bytes, ZTRT_CAT_BUFFERS,
                                       ("buffer '" + spec.name + "'").c_str()));
  if (opts.resume.empty())
    initParams(ctx, desc, opts);
  else
    loadCheckpointShard(ctx, desc, resumed);

  // Steps are numbered as if the run had never stopped: the data of step t,
  // Adam's bias correction (1 - beta^t) and SGD's first-step momentum all
  // depend on t, so a resumed run computes exactly what an uninterrupted
  // one would.
  const int64_t first = resumed.step + 1, last = resumed.step + opts.steps;
  if (ctx.lrSchedule.decaySteps == 0)
    ctx.lrSchedule.decaySteps = last;
  auto checkpoint = [&](int64_t done) {
    CheckpointProgress progress{done, opts.seed, opts.data, std::nullopt,
                                ctx.accumSteps, dataPrint, dataFormatText,
                                dataOrderText, rowShift + done * globalBatch,
                                trainingSettings(ctx.lrSchedule,
                                                 ctx.hyperOverrides)};
    if (ctx.scaler)
      progress.lossScaler = ctx.scaler->state();
    saveCheckpoint(ctx, desc, descriptor, progress, opts.saveCheckpoint,
                   opts.keepCheckpoints);
  };
  std::vector<std::vector<char>> staging;
  for (const InputSpec &spec : desc.inputs)
    staging.emplace_back(static_cast<size_t>(spec.bytes));
  int width = static_cast<int>(std::to_string(last).size());
  std::vector<StepRecord> records;
  // Evaluation after step t: the same --eval-steps batches every time (so
  // the numbers compare across the run), forward only; the mean loss over
  // them and over the ranks.
  std::vector<std::pair<int64_t, float>> evals;
  auto evaluate = [&](int64_t t) {
    double sum = 0.0;
    for (int64_t u = 1; u <= opts.evalSteps; ++u) {
      for (size_t i = 0; i < desc.inputs.size(); ++i) {
        evalSource->fill(u, i, staging[i].data());
        backend.copyFromHost(ctx.inputs[i], staging[i].data(),
                             desc.inputs[i].bytes);
      }
      ctx.lossSet = false;
      eval(&ctx);
      ctx.synchronize();
      ctx.requireCollectivesWaited("evaluation", t);
      if (!ctx.lossSet)
        fatal("evaluation after step %lld: the model did not report a loss",
              static_cast<long long>(t));
      sum += ctx.loss;
    }
    const float loss = meanOverRanks(
        comm, static_cast<float>(sum / static_cast<double>(opts.evalSteps)));
    evals.push_back({t, loss});
    if (rank == 0 && opts.logEvery > 0) {
      std::printf("eval %*lld/%lld  loss %.7g  (%lld batch%s)\n", width,
                  static_cast<long long>(t), static_cast<long long>(last),
                  loss, static_cast<long long>(opts.evalSteps),
                  opts.evalSteps == 1 ? "" : "es");
      std::fflush(stdout);
    }
  };

  // Gradient accumulation: each optimizer step runs the compiled step once
  // per micro-batch; the last one's call runs the updates.
  const int64_t micro = std::max<int64_t>(1, ctx.accumSteps);

  // Throughput in the progress line: tokens per second for a language
  // model (inputs tokens, targets: i32 [B, T]), achieved TFLOP/s per rank
  // from the compiler's matmul FLOP count (and MFU against --peak-tflops),
  // and the time left, from the mean of this run's steps after its first.
  const bool tokenModel = desc.inputs.size() == 2 &&
                          desc.inputs[0].type == ElemType::I32 &&
                          desc.inputs[0].shape.size() == 2 &&
                          desc.inputs[0].shape == desc.inputs[1].shape;
  const double tokensPerStep =
      tokenModel ? static_cast<double>(desc.inputs[0].numel) * ranks * micro
                 : 0.0;
  const double flopsPerStep = static_cast<double>(desc.flopsPerStep) * micro;
  // The MFU's denominator: --peak-tflops, else the peak the device reports
  // for the parameters' precision (16-bit parameters: 16-bit GEMMs).
  Backend::PeakRate peak{opts.peakTflops, "--peak-tflops"};
  if (peak.tflops <= 0.0) {
    const bool sixteenBit =
        std::any_of(desc.params.begin(), desc.params.end(),
                    [](const ParamSpec &p) {
                      return p.type == ElemType::BF16 ||
                             p.type == ElemType::F16;
                    });
    peak = backend.peakRate(sixteenBit);
    if (rank == 0 && opts.logEvery > 0 && flopsPerStep > 0.0 &&
        peak.tflops > 0.0) {
      std::printf("MFU against the device's peak of %.4g TFLOP/s (%s; "
                  "--peak-tflops sets another)\n",
                  peak.tflops, peak.basis.c_str());
      std::fflush(stdout);
    }
  }
  double steadyMs = 0.0;
  int64_t steadySteps = 0;
  auto throughputText = [&](int64_t t, double ms) {
    std::string s;
    if (tokensPerStep > 0.0 && ms > 0.0) {
      const double rate = tokensPerStep / (ms / 1e3);
      s += rate >= 1e6   ? format("  %.2fM tok/s", rate / 1e6)
           : rate >= 1e3 ? format("  %.1fk tok/s", rate / 1e3)
                         : format("  %.0f tok/s", rate);
    }
    if (flopsPerStep > 0.0 && ms > 0.0) {
      const double tflops = flopsPerStep / (ms / 1e3) / 1e12;
      s += format("  %.3g TFLOP/s", tflops);
      if (peak.tflops > 0.0)
        s += format(" (MFU %.1f%%)", 100.0 * tflops / peak.tflops);
    }
    if (steadySteps > 0 && t < last) {
      const double left =
          steadyMs / static_cast<double>(steadySteps) * (last - t) / 1e3;
      if (left >= 1.0) {
        const long long secs = std::llround(left);
        s += secs >= 3600 ? format("  ETA %lldh%02lldm", secs / 3600,
                                   secs / 60 % 60)
             : secs >= 60 ? format("  ETA %lldm%02llds", secs / 60, secs % 60)
                          : format("  ETA %llds", secs);
      }
    }
    return s;
  };
  for (int64_t t = first; t <= last; ++t) {
    ctx.step = t;
    watchdogStep.store(t);
    ctx.stepScale = ctx.scaler ? ctx.scaler->scale() : 1.0;
    ctx.scaleUpdated = ctx.skipUpdates = false;
    ctx.clipChecked = false;
    ctx.clipCoef = 1.0;
    ctx.gradNorm = ctx.stepLr = std::nan("");
    double lossSum = 0.0;
    auto start = Clock::now();
    for (int64_t m = 1; m <= micro; ++m) {
      // Data follows the micro-batch: K micro-batches of B rows read the
      // rows one step of K * B rows would.
      ctx.microStep = m;
      ctx.microBatch = ctx.accumSteps > 0 ? (t - 1) * micro + m : t;
      for (size_t i = 0; i < desc.inputs.size(); ++i) {
        data->fill(ctx.microBatch, i, staging[i].data());
        backend.copyFromHost(ctx.inputs[i], staging[i].data(),
                             desc.inputs[i].bytes);
      }
      ctx.lossSet = false;
      ctx.boundaryAsked = false;
      step(&ctx);
      // The step owns its asynchronous host steps too.
      ctx.requireUpdatesWaited(
          format("step %lld", static_cast<long long>(t)).c_str());
      // A device backend has only enqueued the step: its time, its loss and
      // errors its kernels found are known once the device has run it.
      ctx.synchronize();
      // The step owns its collectives; the driver's own exchanges below
      // must find the communication thread idle.
      ctx.requireCollectivesWaited("step", t);
      if (!ctx.lossSet)
        fatal("step %lld: the model did not report a loss (ztrt_set_loss)",
              static_cast<long long>(t));
      if (ctx.accumSteps > 0 && !ctx.boundaryAsked)
        fatal("step %lld: the model accumulates gradients but did not ask "
              "for the boundary (ztrt_accumulation_boundary)",
              static_cast<long long>(t));
      lossSum += ctx.loss;
    }
    auto end = Clock::now();
    if (Trace *trace = ctx.trace()) {
      TraceEvent event(TraceEvent::Type::Step);
      event.begin = start;
      event.end = end;
      event.value = t;
      trace->add(event);
    }
    if (ctx.clipMaxNorm && !ctx.clipChecked)
      fatal("step %lld: the model clips its gradients but did not compute "
            "their norm (ztrt_clip_grad_norm)",
            static_cast<long long>(t));
    if (ctx.scaler && !ctx.scaleUpdated)
      fatal("step %lld: the model scales its loss but did not check its "
            "gradients (ztrt_update_loss_scale)",
            static_cast<long long>(t));
    double ms = std::chrono::duration<double, std::milli>(end - start).count();
    // The step's loss: the mean over its micro-batches (the loss of one
    // batch of K * B rows); exactly the step's loss without accumulation.
    const float rankLoss = static_cast<float>(lossSum / static_cast<double>(micro));
    // The driver's own exchange, not the model's traffic: it is not counted
    // in the communication statistics.
    float meanLoss = meanOverRanks(comm, rankLoss);
    records.push_back({t, rankLoss, meanLoss, ms,
                       ctx.scaler ? ctx.stepScale : 0.0, ctx.skipUpdates,
                       ctx.gradNorm, ctx.stepLr});
    // A non-finite loss is where training went wrong: stop there, naming
    // it. Every rank has the same mean: rank 0 reports, all stop.
    if (!std::isfinite(meanLoss) && !opts.allowNonfiniteLoss)
      refuse("step %lld: the loss is %s; stopping (--allow-nonfinite-loss "
            "trains on)",
            static_cast<long long>(t), std::isnan(meanLoss) ? "NaN" : "infinite");
    // Every step after the run's first (which warms caches and threads)
    // enters the ETA's mean, logged or not.
    if (t > first) {
      steadyMs += ms;
      ++steadySteps;
    }
    if (rank == 0 && opts.logEvery > 0 &&
        (t % opts.logEvery == 0 || t == last)) {
      std::string scale;
      if (ctx.lrSchedule.visible() && std::isfinite(ctx.stepLr))
        scale += format("  lr %.4g", ctx.stepLr);
      if (ctx.clipMaxNorm)
        scale += format("  grad norm %.4g", ctx.gradNorm);
      if (ctx.scaler)
        scale += format("  loss scale %.17g%s", ctx.stepScale,
                       ctx.skipUpdates ? " (overflow: step skipped)" : "");
      scale += throughputText(t, ms);
      std::printf("step %*lld/%lld  loss %.7g  %.2f ms/step%s\n", width,
                  static_cast<long long>(t), static_cast<long long>(last),
                  meanLoss, ms, scale.c_str());
      std::fflush(stdout);
    }
    if (evalSource &&
        (t == last || (opts.evalEvery > 0 && t % opts.evalEvery == 0)))
      evaluate(t);
    // The last step's checkpoint is the one written below.
    if (opts.checkpointEvery > 0 && t % opts.checkpointEvery == 0 && t != last)
      checkpoint(t);
  }

  // --steps 0 with --eval-data evaluates the weights as they are (an
  // --init file or a --resume checkpoint).
  if (evalSource && first > last)
    evaluate(last);
  // Nothing but steps starts collectives; this covers --steps 0 too.
  ctx.requireCollectivesWaited("before saving");
  if (!opts.save.empty())
    saveParams(ctx, desc, opts.save);
  if (!opts.saveCheckpoint.empty())
    checkpoint(last);
  if (!opts.report.empty()) {
    std::vector<std::string> perRank =
        comm.gatherToRoot(rankJson(ctx, desc, rank, records));
    if (rank == 0)
      writeReport(opts.report, ctx, desc, records, evals, backend.threads(),
                  ranks, perRank, peak);
  }
  // Sampling (--sample): a byte-level language model continues the prompt,
  // one forward pass of the logits function per token (the context is the
  // last T tokens, in row 0 of the batch; causal attention makes the
  // positions after it irrelevant). Every rank computes the same logits and
  // draws the same token from the same seeded stream; rank 0 prints.
  if (opts.sampleGiven) {
    if (!tokenModel)
      refuse("--sample needs a language model with inputs (tokens, targets), "
             "both i32 [B, T]");
    if (!desc.logits || !logitsFn)
      refuse("--sample: this model has no logits function (its loss is not "
             "a cross-entropy of logits, or it was compiled with --eval=false)");
    const int64_t B = desc.inputs[0].shape[0], T = desc.inputs[0].shape[1];
    const TensorSpec &ls = *desc.logits;
    const int64_t V = ls.shape.empty() ? 0 : ls.shape.back();
    if (V <= 0 || ls.numel != B * T * V)
      refuse("--sample: the logits [%s] are not [B*T, V] of the inputs' "
             "[%lld, %lld]",
             formatShape(ls.shape).c_str(), static_cast<long long>(B),
             static_cast<long long>(T));
    const int64_t bound = desc.inputs[0].bound > 0 ? desc.inputs[0].bound : V;
    // Text (bytes as tokens) or ids; ids in and out when given as ids.
    const bool asIds = !opts.sampleIds.empty();
    if (asIds && !opts.sample.empty())
      refuse("--sample and --sample-ids exclude each other");
    std::vector<int32_t> tokens;
    for (unsigned char c : opts.sample) {
      if (c >= bound)
        refuse("--sample: byte %u of the prompt is not a token of this "
               "model's vocabulary of %lld",
               static_cast<unsigned>(c), static_cast<long long>(bound));
      tokens.push_back(c);
    }
    for (int64_t id : opts.sampleIds) {
      if (id >= bound)
        refuse("--sample-ids: %lld is not a token of this model's vocabulary "
               "of %lld",
               static_cast<long long>(id), static_cast<long long>(bound));
      tokens.push_back(static_cast<int32_t>(id));
    }
    if (tokens.empty())
      refuse("--sample: the prompt is empty");
    const uint64_t key = rng::streamKey(opts.seed, "sample");
    std::vector<char> host(static_cast<size_t>(ls.bytes));
    std::vector<float> row(static_cast<size_t>(V));
    std::string text = opts.sample;
    for (int64_t i = 0; i < opts.sampleTokens; ++i) {
      const int64_t n = std::min<int64_t>(T, tokens.size());
      std::vector<int32_t> in(static_cast<size_t>(B * T), 0);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < n; ++j)
          in[b * T + j] = tokens[tokens.size() - n + j];
      backend.copyFromHost(ctx.inputs[0], in.data(), desc.inputs[0].bytes);
      std::fill(in.begin(), in.end(), 0);
      backend.copyFromHost(ctx.inputs[1], in.data(), desc.inputs[1].bytes);
      ctx.outputSet = false;
      logitsFn(&ctx);
      ctx.synchronize();
      ctx.requireCollectivesWaited("sampling");
      if (!ctx.outputSet || ctx.outputElems != ls.numel)
        fatal("sampling: the logits function did not hand over its %lld "
              "logits (ztrt_set_output)",
              static_cast<long long>(ls.numel));
      backend.copyToHost(host.data(), ctx.output, ls.bytes);
      convertElements(ls.type,
                      host.data() + (n - 1) * V * ls.elemBytes(),
                      ElemType::F32, row.data(), V);
      int64_t next = 0;
      if (opts.temperature == 0.0) {
        next = std::max_element(row.begin(), row.end()) - row.begin();
      } else {
        // The top-k logits (ties: the lower id first), softmax at the
        // temperature in double, one uniform draw.
        std::vector<int64_t> ids(static_cast<size_t>(V));
        for (int64_t v = 0; v < V; ++v)
          ids[v] = v;
        const int64_t k = opts.topK > 0 ? std::min(opts.topK, V) : V;
        std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                          [&](int64_t a, int64_t b) {
                            return row[a] != row[b] ? row[a] > row[b] : a < b;
                          });
        std::vector<double> p(static_cast<size_t>(k));
        double total = 0.0;
        for (int64_t j = 0; j < k; ++j)
          total += p[j] = std::exp((row[ids[j]] - row[ids[0]]) /
                                   opts.temperature);
        const double u = static_cast<double>(rng::draw(key, i) >> 11) *
                         0x1p-53 * total;
        double acc = 0.0;
        next = ids[k - 1];
        for (int64_t j = 0; j < k; ++j)
          if ((acc += p[j]) > u) {
            next = ids[j];
            break;
          }
      }
      tokens.push_back(static_cast<int32_t>(next));
      text += static_cast<char>(next);
    }
    if (asIds) {
      text.clear();
      for (size_t j = 0; j < tokens.size(); ++j)
        text += (j ? " " : "") + std::to_string(tokens[j]);
    }
    if (rank == 0) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    }
  }

  // Each rank its own file, no communication: written last, so that a
  // failed save or report leaves no trace file either.
  if (Trace *trace = ctx.trace())
    trace->write(traceFilePath(opts.trace, rank, ranks), rank, ranks);
  return 0;
}

} // namespace ztrt
