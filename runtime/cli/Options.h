//===- Options.h - The executable's settings ----------------*- C++ -*-===//
//
// What the command line and --config set (struct Options) and the parser
// of the flags (CommandLine.cpp). Everything a run is told, in one struct.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_CLI_OPTIONS_H
#define ZTRT_CLI_OPTIONS_H

#include "ztrt.h"

#include "io/Data.h"
#include "step/LrSchedule.h"

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ztrt {

struct Options {
  int64_t steps = 10;
  uint64_t seed = 0;
  /// Whether --seed was given: --resume takes the checkpoint's seed and
  /// refuses a different explicit one.
  bool seedGiven = false;
  std::string init, data, save, report;
  /// --trace FILE: Chrome trace-event JSON, one file per rank (Trace.h).
  std::string trace;
  /// --save-checkpoint DIR and --resume DIR (sharded checkpoints).
  std::string saveCheckpoint, resume;
  /// --nvme-path DIR: where the rank's swap directory of nvme-resident
  /// optimizer states goes (zero-offload's optimizer=nvme).
  std::string nvmePath;
  /// Also checkpoint after every step divisible by this; 0: only at the end.
  int64_t checkpointEvery = 0;
  /// --keep-checkpoints K: keep the newest K checkpoints; 0: all.
  int64_t keepCheckpoints = 0;
  /// --allow-nonfinite-loss: do not stop at a NaN / infinite loss.
  bool allowNonfiniteLoss = false;
  /// --skip-memory-check: start even if the plan exceeds available memory.
  bool skipMemoryCheck = false;
  /// --collective-timeout: seconds a collective may wait (0: no limit).
  double collectiveTimeout = 600.0;
  /// --ranks-per-node: 0 = the nodes MPI reports.
  int64_t ranksPerNode = 0;
  int64_t logEvery = 1;
  /// 0: leave the libraries' defaults.
  int threads = 0;
  /// --backend: "cpu" or "cuda".
  std::string backend = "cpu";
  /// --lr, --lr-schedule, --warmup-steps, --min-lr, --lr-decay-steps.
  LrSchedule lr;
  /// --grad-accum-steps K: micro-batches per optimizer step; 0: the
  /// compiled default.
  int64_t gradAccumSteps = 0;
  /// --data-format: how --data is read (auto: by its extension).
  DataFormat dataFormat = DataFormat::Auto;
  /// --data-order: token windows drawn from the seed or in file order.
  DataOrder dataOrder = DataOrder::Random;
  /// --eval-data F, --eval-every N (0: only after the last step),
  /// --eval-steps M (batches per evaluation).
  std::string evalData;
  /// --sample PROMPT (after training): generate --sample-tokens tokens
  /// with --temperature (0: greedy) and --top-k (0: all).
  std::string sample;
  /// --sample-ids 1,2,3: a prompt of token ids (models whose vocabulary is
  /// not bytes); the output is then ids too.
  std::vector<int64_t> sampleIds;
  bool sampleGiven = false;
  int64_t sampleTokens = 200, topK = 200;
  double temperature = 0.8;
  /// --peak-tflops: a rank's device peak, for MFU (0: not shown).
  double peakTflops = 0.0;
  int64_t evalEvery = 0, evalSteps = 10;
  /// --beta1 ... --dampening, by ztrt_hyper_id (empty: the compiled value).
  std::array<std::optional<double>, ZTRT_HYPER_COUNT> hypers;
  /// The schedule and hyper-parameter flags (--lr ... --dampening) this
  /// run's command line or --config set: a resumed run takes the others
  /// from its checkpoint.
  std::set<std::string> trainingSet;
  /// What --config says the build is (checked against the descriptor):
  /// optimizer ("sgd", "adam", "adamw"), gradient clipping, 16-bit
  /// precision ("bf16", "fp16", "fp32") and micro-batch; empty when it
  /// does not say.
  std::string configPath, configOptimizer, configPrecision;
  std::optional<double> configClip;
  std::optional<int64_t> configMicroBatch;
};

/// Parses the executable's flags; on --help prints the usage (on rank 0
/// only: every rank of a job parses the same flags) and exits 0; exits 2 with
/// one line on any mistake.
Options parseOptions(int argc, char **argv, int rank = 0);

/// --help: every flag, grouped by topic (the table parseOptions reads).
std::string usageText(const char *program);

} // namespace ztrt

#endif // ZTRT_CLI_OPTIONS_H
