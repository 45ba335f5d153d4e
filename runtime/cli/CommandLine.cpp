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

namespace {

/// What parsing the flags has gathered beyond Options.
struct ParseState {
  Options &opts;
  bool minLrGiven = false;
  std::string configPath;
};

/// One flag: its name, the placeholder of its value (null: a switch), its
/// help, and what it does with its value.
struct Flag {
  const char *name;
  const char *metavar;
  const char *help;
  void (*apply)(ParseState &, const std::string &flag,
                const std::string &value);
};

struct FlagGroup {
  const char *title;
  std::vector<Flag> flags;
};

void setHyper(ParseState &s, const std::string &flag,
              const std::string &value) {
  const int id = hyperId(flag);
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(value.c_str(), &end);
  std::string problem = *end != '\0' || errno == ERANGE
                            ? std::string("is not a number")
                            : hyperProblem(id, v);
  if (!problem.empty())
    usageError("flag %s: '%s' %s", flag.c_str(), value.c_str(),
               problem.c_str());
  s.opts.hypers[id] = v;
}

/// Every flag, by topic: the parser, the unknown-flag suggestions and
/// --help all read this table.
const std::vector<FlagGroup> &flagTable() {
  using S = ParseState;
  using V = const std::string &;
  static const std::vector<FlagGroup> table = {
      {"The run",
       {{"--steps", "N",
         "number of steps to run (default 10); with --resume, steps after "
         "the checkpoint's",
         [](S &s, V f, V v) { s.opts.steps = parseInteger(f, v, 0); }},
        {"--seed", "S", "seed of parameter init and synthetic data (default 0)",
         [](S &s, V, V v) {
           s.opts.seed = parseSeed(v);
           s.opts.seedGiven = true;
         }},
        {"--threads", "N",
         "threads for BLAS and kernels (default: the "
         "libraries')",
         [](S &s, V f, V v) {
           s.opts.threads = static_cast<int>(
               std::min<int64_t>(parseInteger(f, v, 1), 1 << 16));
         }},
        {"--backend", "B",
         "where the steps run: cpu (host memory, OpenBLAS, MPI; the default) "
         "or cuda (a GPU per rank, cuBLAS, NCCL; needs a runtime built with "
         "CUDA)",
         [](S &s, V, V v) {
           if (v != "cpu" && v != "cuda")
             usageError("flag --backend: '%s' is not a backend (cpu or cuda)",
                        v.c_str());
           s.opts.backend = v;
         }},
        {"--config", "F",
         "a DeepSpeed JSON config: its scheduler (WarmupLR, WarmupDecayLR, "
         "WarmupCosineLR), optimizer.params, gradient_accumulation_steps and "
         "steps_per_print; the compiled keys are checked against this build; "
         "flags override it (docs/config.md)",
         [](S &s, V, V v) { s.configPath = v; }},
        {"--collective-timeout", "S",
         "end the job when a collective has waited S seconds for the other "
         "ranks (default 600; 0: never)",
         [](S &s, V, V v) {
           char *end = nullptr;
           double seconds = std::strtod(v.c_str(), &end);
           if (*end != '\0' || !(seconds >= 0.0) || !std::isfinite(seconds))
             usageError("flag --collective-timeout: '%s' is not a number of "
                        "seconds >= 0",
                        v.c_str());
           s.opts.collectiveTimeout = seconds;
         }},
        {"--ranks-per-node", "N",
         "treat every N consecutive ranks as one node (default: the nodes "
         "MPI reports, the ranks that share memory); for testing multi-node "
         "layouts on one machine",
         [](S &s, V f, V v) {
           s.opts.ranksPerNode =
               std::min<int64_t>(parseInteger(f, v, 1), 1 << 30);
         }},
        {"--skip-memory-check", nullptr,
         "start even when the compiled plan needs more memory than this node "
         "has available per rank",
         [](S &s, V, V) { s.opts.skipMemoryCheck = true; }},
        {"--allow-nonfinite-loss", nullptr,
         "keep training after a NaN or infinite loss (default: stop with an "
         "error naming the step)",
         [](S &s, V, V) { s.opts.allowNonfiniteLoss = true; }}}},
      {"Data and initial parameters",
       {{"--data", "F",
         "F.safetensors: one tensor [N, ...] per input; token files for "
         "inputs (tokens, targets): .bin (nanoGPT's uint16), .npy, .txt "
         "(bytes), or any name with --data-format; other names are refused; "
         "default: synthetic data",
         [](S &s, V, V v) { s.opts.data = v; }},
        {"--data-format", "F",
         "how --data is read: safetensors, text (bytes as tokens), u16 / u32 "
         "(little-endian token ids, as nanoGPT's train.bin), npy (a 1-D token "
         "array) or auto (default: by the extension; .bin is u16)",
         [](S &s, V, V v) {
           if (!parseDataFormat(v, s.opts.dataFormat))
             usageError("flag --data-format: '%s' is not a format (auto, "
                        "safetensors, text, u8, u16, u32 or npy)",
                        v.c_str());
         }},
        {"--data-order", "O",
         "token windows: random (default, drawn from the seed, nanoGPT's) or "
         "sequential (file order)",
         [](S &s, V, V v) {
           if (v == "random")
             s.opts.dataOrder = DataOrder::Random;
           else if (v == "sequential")
             s.opts.dataOrder = DataOrder::Sequential;
           else
             usageError("flag --data-order: '%s' is not an order (random or "
                        "sequential)",
                        v.c_str());
         }},
        {"--init", "F",
         "initial parameters from safetensors file F, or a Hugging Face "
         "sharded checkpoint (its index file or directory)",
         [](S &s, V, V v) { s.opts.init = v; }}}},
      {"Checkpoints and saved weights",
       {{"--save", "F", "write the final parameters to safetensors file F",
         [](S &s, V, V v) { s.opts.save = v; }},
        {"--save-checkpoint", "D",
         "write a sharded checkpoint (parameters, optimizer states, buffers; "
         "one file per rank, index.json) to D/global_step<N> at the end and "
         "point D/latest at it",
         [](S &s, V, V v) { s.opts.saveCheckpoint = v; }},
        {"--checkpoint-every", "N", "also write one after every N-th step",
         [](S &s, V f, V v) {
           s.opts.checkpointEvery = parseInteger(f, v, 1);
         }},
        {"--keep-checkpoints", "K",
         "keep only the newest K checkpoints in D (default 0: keep all)",
         [](S &s, V f, V v) {
           s.opts.keepCheckpoints = parseInteger(f, v, 0);
         }},
        {"--resume", "D",
         "continue the training saved in checkpoint D (the one D/latest "
         "names, or a global_step<N> directory); also on another number of "
         "ranks or ZeRO stage (resharded on load); the run's --lr ... "
         "--dampening continue unless given again",
         [](S &s, V, V v) { s.opts.resume = v; }},
        {"--nvme-path", "DIR",
         "where optimizer states compiled with --offload-optimizer=nvme "
         "live: each rank swaps them through "
         "DIR/ztrain-swap-<host>-<pid>-rank<r> (created fresh, removed at "
         "exit; those of runs that were killed are removed at the next "
         "start); required by such models",
         [](S &s, V, V v) { s.opts.nvmePath = v; }}}},
      {"Optimizer and learning-rate schedule (default: the compiled values)",
       {{"--lr", "LR", "learning rate (default: the one compiled in)",
         [](S &s, V f, V v) { s.opts.lr.lr = parseReal(f, v); }},
        {"--lr-schedule", "S",
         "constant (default), cosine or linear: decay from the learning rate "
         "to --min-lr over --lr-decay-steps",
         [](S &s, V, V v) {
           if (!LrSchedule::parseKind(v, s.opts.lr.kind))
             usageError("flag --lr-schedule: '%s' is not a schedule "
                        "(constant, cosine or linear)",
                        v.c_str());
         }},
        {"--warmup-steps", "W",
         "raise the learning rate linearly over the first W optimizer steps "
         "(default 0)",
         [](S &s, V f, V v) { s.opts.lr.warmup = parseInteger(f, v, 0); }},
        {"--warmup-type", "T",
         "linear (default) or log: DeepSpeed's log warmup, lr * ln(t) / ln(W)",
         [](S &s, V, V v) {
           if (v != "linear" && v != "log")
             usageError(
                 "flag --warmup-type: '%s' is not a warmup (linear or log)",
                 v.c_str());
           s.opts.lr.logWarmup = v == "log";
         }},
        {"--min-lr", "LR", "where cosine and linear decay end (default 0)",
         [](S &s, V f, V v) {
           s.opts.lr.minLr = parseReal(f, v);
           s.minLrGiven = true;
         }},
        {"--lr-decay-steps", "T",
         "the optimizer step where the decay ends (default: the run's last "
         "step)",
         [](S &s, V f, V v) { s.opts.lr.decaySteps = parseInteger(f, v, 1); }},
        {"--grad-accum-steps", "K",
         "micro-batches per optimizer step: gradients accumulate over K "
         "batches before each update (default: the compiled ztrain-compile "
         "--grad-accum-steps; needs a model compiled with it)",
         [](S &s, V f, V v) {
           s.opts.gradAccumSteps =
               std::min<int64_t>(parseInteger(f, v, 1), int64_t(1) << 30);
         }},
        {"--beta1", "B", "Adam(W)'s beta1", setHyper},
        {"--beta2", "B", "Adam(W)'s beta2", setHyper},
        {"--eps", "E", "Adam(W)'s epsilon", setHyper},
        {"--weight-decay", "W",
         "weight decay of the decaying parameters (not the no-decay group: "
         "biases, norms, 1-D parameters)",
         setHyper},
        {"--momentum", "M", "SGD's momentum", setHyper},
        {"--dampening", "D", "SGD's dampening", setHyper}}},
      {"Progress, reports and traces",
       {{"--log-every", "N",
         "print a progress line every N steps and on the last (default 1; 0 "
         "prints none)",
         [](S &s, V f, V v) { s.opts.logEvery = parseInteger(f, v, 0); }},
        {"--report", "F",
         "write a JSON report (losses, times, memory, communication, "
         "overlap) to F",
         [](S &s, V, V v) { s.opts.report = v; }},
        {"--trace", "F",
         "write a Chrome trace of every kernel call and collective to F "
         "(open it in ui.perfetto.dev); with several ranks, rank r writes F "
         "with .rank<r> before the extension (trace.rank0.json)",
         [](S &s, V, V v) { s.opts.trace = v; }},
        {"--peak-tflops", "P",
         "the peak TFLOP/s of one rank's device, for the MFU in the progress "
         "line (achieved matmul FLOPs / P); default: the GPU's peak (cuda "
         "backend)",
         [](S &s, V f, V v) {
           s.opts.peakTflops = parseReal(f, v, /*positive=*/true);
         }}}},
      {"Evaluation and sampling",
       {{"--eval-data", "F",
         "evaluate the loss on F (the --data formats) with the forward pass "
         "only, after the last step and every --eval-every N steps, over "
         "--eval-steps M batches (default 10)",
         [](S &s, V, V v) { s.opts.evalData = v; }},
        {"--eval-every", "N", "evaluate after every N-th step",
         [](S &s, V f, V v) { s.opts.evalEvery = parseInteger(f, v, 0); }},
        {"--eval-steps", "M", "batches per evaluation (default 10)",
         [](S &s, V f, V v) { s.opts.evalSteps = parseInteger(f, v, 1); }},
        {"--sample", "TEXT",
         "after training, continue TEXT (bytes as tokens) with --sample-tokens "
         "N (200) tokens drawn at --temperature T (0.8; 0: greedy) from the "
         "--top-k K (200; 0: all) most likely, seeded by --seed",
         [](S &s, V, V v) {
           s.opts.sample = v;
           s.opts.sampleGiven = true;
         }},
        {"--sample-ids", "IDS",
         "as --sample, from token ids (1,2,3), printing ids",
         [](S &s, V f, V v) {
           size_t at = 0;
           while (at <= v.size()) {
             size_t comma = v.find(',', at);
             std::string id =
                 v.substr(at, comma == std::string::npos ? std::string::npos
                                                         : comma - at);
             s.opts.sampleIds.push_back(parseInteger(f, id, 0));
             if (comma == std::string::npos)
               break;
             at = comma + 1;
           }
           s.opts.sampleGiven = true;
         }},
        {"--sample-tokens", "N", "tokens to sample (default 200)",
         [](S &s, V f, V v) { s.opts.sampleTokens = parseInteger(f, v, 1); }},
        {"--temperature", "T", "sampling temperature (default 0.8; 0: greedy)",
         [](S &s, V f, V v) { s.opts.temperature = parseReal(f, v); }},
        {"--top-k", "K",
         "sample from the K most likely tokens (default 200; 0: all)",
         [](S &s, V f, V v) { s.opts.topK = parseInteger(f, v, 0); }}}},
      {"Help", {{"--help", nullptr, "show this help", nullptr}}}};
  return table;
}

const Flag *findFlag(const std::string &name) {
  for (const FlagGroup &group : flagTable())
    for (const Flag &flag : group.flags)
      if (name == flag.name)
        return &flag;
  return nullptr;
}

/// `text` wrapped at 76 columns, continuation lines indented `indent`.
std::string wrap(const std::string &text, size_t column, size_t indent) {
  std::string out, word;
  size_t at = column;
  auto flush = [&] {
    if (word.empty())
      return;
    if (at + 1 + word.size() > 76 && at > indent) {
      out += "\n" + std::string(indent, ' ');
      at = indent;
    } else if (at > indent || !out.empty()) {
      out += ' ';
      ++at;
    }
    out += word;
    at += word.size();
    word.clear();
  };
  for (char c : text) {
    if (c == ' ')
      flush();
    else
      word += c;
  }
  flush();
  return out;
}

/// The checks of flags against each other, once all are read.
void checkCombinations(const Options &opts, const std::set<std::string> &given,
                       bool minLrGiven) {
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
}

} // namespace

std::string usageText(const char *program) {
  std::string out = format("usage: %s [flags]\n"
                           "Runs the training steps compiled into this "
                           "executable.\n",
                           program);
  for (const FlagGroup &group : flagTable()) {
    out += std::string("\n") + group.title + ":\n";
    for (const Flag &flag : group.flags) {
      std::string head = std::string("  ") + flag.name;
      if (flag.metavar)
        head += std::string(" ") + flag.metavar;
      // The help starts at column 21, or two spaces after a long name.
      head += head.size() < 20 ? std::string(21 - head.size(), ' ')
                               : std::string("  ");
      out += head + wrap(flag.help, head.size(), 21) + "\n";
    }
  }
  return out;
}

Options parseOptions(int argc, char **argv, int rank) {
  Options opts;
  ParseState state{opts, false, {}};
  std::set<std::string> given;
  const char *program = argc > 0 ? argv[0] : "ztrain-model";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.compare(0, 2, "--") != 0)
      usageError("unexpected argument '%s' (flags start with --; try --help)",
                 arg.c_str());
    size_t eq = arg.find('=');
    std::string name = arg.substr(0, eq);
    bool inlineValue = eq != std::string::npos;
    const Flag *flag = findFlag(name);
    if (!flag) {
      std::vector<std::string> names;
      for (const FlagGroup &group : flagTable())
        for (const Flag &f : group.flags)
          names.push_back(f.name);
      std::string near = nearestName(name, names);
      if (!near.empty())
        usageError("unknown flag '%s' (did you mean '%s'? try --help)",
                   name.c_str(), near.c_str());
      usageError("unknown flag '%s' (try --help)", name.c_str());
    }
    if (!flag->metavar) {
      if (inlineValue)
        usageError("flag %s takes no value", name.c_str());
      if (!flag->apply) { // --help
        if (rank == 0)
          std::fputs(usageText(program).c_str(), stdout);
        std::exit(0);
      }
      flag->apply(state, name, "");
      continue;
    }
    std::string value;
    if (inlineValue) {
      value = arg.substr(eq + 1);
    } else {
      // A following flag is not a value: `--save --report r.json` is a
      // missing value, not a checkpoint named "--report".
      if (i + 1 >= argc || std::strncmp(argv[i + 1], "--", 2) == 0)
        usageError("flag %s needs a value", name.c_str());
      value = argv[++i];
    }
    if (value.empty())
      usageError("flag %s needs a value", name.c_str());
    given.insert(name);
    flag->apply(state, name, value);
  }
  for (const char *f : kTrainingFlags)
    if (given.count(f))
      opts.trainingSet.insert(f);
  if (!state.configPath.empty()) {
    applyRunConfig(state.configPath, given, opts);
    opts.configPath = state.configPath;
  }
  checkCombinations(opts, given, state.minLrGiven);
  return opts;
}

} // namespace ztrt
