//===- CommandLine.cpp - The executable's flags ---------------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "cli/Options.h"

#include "base/Support.h"
#include "cli/RunConfig.h"
#include "cli/TrainingSettings.h"
#include "step/Context.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

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
    "  --warmup-type T    linear (default) or log: DeepSpeed's log warmup,\n"
    "                     lr * ln(t) / ln(W)\n"
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

/// The run-time training settings a checkpoint records and a resume
/// continues (CheckpointIndex::run).
constexpr const char *kTrainingFlags[] = {
    "--lr",   "--lr-schedule",   "--warmup-steps", "--warmup-type", "--min-lr",
    "--lr-decay-steps", "--beta1", "--beta2", "--eps",
    "--weight-decay", "--momentum", "--dampening"};

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

} // namespace

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
                                         "--warmup-type",
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
    if (!known) {
      std::vector<std::string> names(std::begin(valued), std::end(valued));
      names.insert(names.end(), {"--help", "--allow-nonfinite-loss",
                                 "--skip-memory-check"});
      std::string near = nearestName(flag, names);
      if (!near.empty())
        usageError("unknown flag '%s' (did you mean '%s'? try --help)",
                   flag.c_str(), near.c_str());
      usageError("unknown flag '%s' (try --help)", flag.c_str());
    }
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
    else if (flag == "--warmup-type") {
      if (value != "linear" && value != "log")
        usageError("flag --warmup-type: '%s' is not a warmup (linear or log)",
                   value.c_str());
      opts.lr.logWarmup = value == "log";
    }
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

} // namespace ztrt
