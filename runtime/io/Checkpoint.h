//===- Checkpoint.h - Sharded checkpoints: save, resume, consolidate -*- C++
//-*-===//
//
// --save-checkpoint ROOT keeps one directory per saved step, as DeepSpeed's
// global_stepN and PyTorch DCP do, and a pointer to the newest complete one:
//
//   ROOT/latest                       "global_step<N>": switched atomically
//                                     once that checkpoint is durable;
//   ROOT/global_step<N>/              one checkpoint (below);
//   ROOT/.tmp-global_step<N>/         a save in progress (ignored; removed
//                                     by the next save).
//
// A checkpoint is a directory, as Hugging Face stores sharded weights:
//
//   DIR/rank-<r>-of-<N>.safetensors   rank r's storage of every parameter,
//                                     (with a mesh: shard r of N = S,
//                                     written by replicate group 0's rank r)
//                                     optimizer state and buffer, exactly as
//                                     it lives in memory (1-D, E elements,
//                                     padding included), named as in the
//                                     descriptor;
//   DIR/index.json                    {"metadata", "weight_map"} plus a
//                                     "ztrain" object: the descriptor, the
//                                     storage of every tensor with each
//                                     rank's CRC-32C of it, the number of
//                                     ranks, the steps done, the seed.
//
// Saving is collective and ordered so that a crash at any point leaves the
// previous checkpoint, and `latest` naming it, intact: every rank commits
// its shard into the temporary directory (fsynced), rank 0 writes the index
// there, renames the directory into place and only then switches `latest`
// (each step fsynced). docs/runtime.md specifies the layout.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_IO_CHECKPOINT_H
#define ZTRT_IO_CHECKPOINT_H

#include "step/Descriptor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

struct ztrt_ctx;

namespace ztrt {

/// How a checkpoint names a tensor's per-rank storage: "whole" (E = n, no
/// padding), "full" (the whole tensor padded to E > n) or "shard".
const char *storageName(const StoredTensorSpec &spec);

/// "rank-<rank>-of-<ranks>.safetensors".
std::string checkpointShardName(int64_t rank, int64_t ranks);

/// One parameter, optimizer state or buffer as the index records it.
struct CheckpointTensor {
  enum class Kind { Param, State, Buffer };
  StoredTensorSpec spec;
  Kind kind = Kind::Param;
  /// CRC-32C of each rank's storage of it, in rank order (empty in a
  /// version-1 index, which had none).
  /// "param", "state" or "buffer", as in the index.
  const char *kindName() const {
    return kind == Kind::Param ? "param"
           : kind == Kind::State ? "state"
                                 : "buffer";
  }
  std::vector<uint32_t> crc;
  /// For the f32 master state of a bf16 / f16 parameter: the parameter's
  /// name (the index's optional "master_of"); else empty.
  std::string masterOf;
};

/// The "ztrain" part of DIR/index.json.
struct CheckpointIndex {
  /// The checkpoint's directory (where its index and shards are).
  std::string dir;
  /// The path the user named (the root holding `latest`, or `dir`): what
  /// messages about the checkpoint as a whole quote.
  std::string named;
  /// The number of ranks (and shard files) that wrote it: with hybrid
  /// sharding, one shard group's (the mesh's shard S).
  int64_t worldSize = 1;
  /// The replicate groups of the run that wrote it (the index's "mesh":
  /// {"shard", "replicate"}; 1 without): that run had worldSize x
  /// replicate ranks, each group holding the same shards.
  int64_t replicate = 1;
  /// Training steps done; a resumed run continues with step `step + 1`.
  int64_t step = 0;
  /// The --seed of the run: synthetic data and token windows depend on it.
  uint64_t seed = 0;
  /// The --data argument of the run ("" for synthetic data); informative.
  std::string data;
  /// Parameters, then states, then buffers, in descriptor order.
  std::vector<CheckpointTensor> tensors;
  /// The descriptor of the executable that wrote it, verbatim.
  std::string descriptor;
  /// The dynamic loss scaler after `step` (the index's "loss_scaler";
  /// present iff the descriptor has a loss_scale record).
  std::optional<LossScaler::State> lossScaler;
  /// Micro-batches per optimizer step of the run (the index's
  /// "grad_accum_steps"; 0 when the model does not accumulate): the data
  /// position of step `step` depends on it.
  int64_t gradAccumSteps = 0;
  /// The --data file's fingerprint ("data_size", "data_crc32c"), when the
  /// index records one.
  std::optional<std::pair<uint64_t, uint32_t>> dataPrint;
  /// Samples the run's steps had consumed ("data_samples": steps x ranks x
  /// micro-batch x micro-batches, summed over resumes); -1 in older
  /// indexes (then `step` x the checkpoint's global batch).
  int64_t dataSamples = -1;
  /// How the run read --data ("data_format", resolved from auto: "u16";
  /// "data_order": "random" or "sequential"); empty in older indexes.
  std::string dataFormat, dataOrder;
  /// The run-time training settings of the run (the index's "run"): its
  /// learning-rate schedule and hyper-parameter overrides as flag and
  /// value ("--lr-schedule" "cosine", "--weight-decay" "0.29999999999999999",
  /// "min_lr_ratio" for --config's cos_min_ratio), which a resumed run
  /// continues unless its own flags or --config set them. Empty in older
  /// indexes.
  std::vector<std::pair<std::string, std::string>> run;
};

/// Which --data file a run trained on, as far as a resume can tell without
/// reading it all: its size and the CRC-32C of its first and last MiB.
struct DataFingerprint {
  uint64_t size = 0;
  uint32_t crc = 0;
  bool operator==(const DataFingerprint &o) const {
    return size == o.size && crc == o.crc;
  }
};
/// The fingerprint of `path` (fatal if it cannot be read).
DataFingerprint dataFingerprint(const std::string &path);

/// Fatal, in one line, unless the run's --data (`data`, "" for synthetic)
/// is the data the checkpoint trained on: present when it had a file, absent
/// when it had none, and the same file (by fingerprint) when it recorded
/// one.
/// `format` and `order` are how this run reads it (as the index records
/// them): a resume that would read the same file differently is refused.
void checkResumedData(const CheckpointIndex &index, const std::string &data,
                      const std::string &format, const std::string &order,
                      const std::string &resumeArg);

/// What the driver knows about the run when it saves.
struct CheckpointProgress {
  int64_t step = 0;
  uint64_t seed = 0;
  std::string data;
  std::optional<LossScaler::State> lossScaler;
  int64_t gradAccumSteps = 0;
  /// Rank 0's fingerprint of the --data file (written to the index).
  std::optional<DataFingerprint> dataPrint;
  /// How --data is read (CheckpointIndex::dataFormat / dataOrder).
  std::string dataFormat, dataOrder;
  /// Samples consumed by steps 1..step (CheckpointIndex::dataSamples).
  int64_t dataSamples = 0;
  /// CheckpointIndex::run.
  std::vector<std::pair<std::string, std::string>> run = {};
};

/// Samples one optimizer step of the checkpoint's run consumed: its ranks x
/// its micro-batch (the descriptor's first batched input) x its
/// micro-batches per step.
int64_t checkpointGlobalBatch(const CheckpointIndex &index);

/// "global_step<step>": a checkpoint's directory name under its root.
std::string checkpointTag(int64_t step);

/// Collective: saves the checkpoint of `progress.step` as
/// `root`/global_step<N> and then points `root`/latest at it (creating
/// `root` if needed), in the crash-safe order above; then removes all but
/// the newest `keep` checkpoints (keep <= 0: keep all) and the leftovers
/// of interrupted saves.
void saveCheckpoint(ztrt_ctx &ctx, const Descriptor &desc,
                    const char *descriptorText,
                    const CheckpointProgress &progress, const std::string &root,
                    int64_t keep);

/// The checkpoint directory `path` names: `path`/<latest> when `path` has a
/// `latest` file, else `path` itself (a global_step<N> directory, or a
/// checkpoint of the earlier one-directory layout). Fatal, naming `what`,
/// when `latest` is malformed.
std::string resolveCheckpoint(const std::string &path, const char *what);

/// Reads and validates the index of the checkpoint `path` names
/// (resolveCheckpoint); fatal, naming `what` (the flag or tool) and the
/// file, on any problem.
CheckpointIndex readCheckpointIndex(const std::string &path, const char *what);

/// Fatal with one line naming both values if `index` cannot continue the
/// model of `desc` / `descriptorText`: a missing or extra tensor, another
/// dtype or shape, or any other difference in the descriptor (optimizer,
/// inputs, loss scaling) except the layout on the ranks (grid, storage,
/// gradient buffers, arenas) and the batch (the inputs' batch dimension,
/// micro-batches per step): another number of ranks or ZeRO stage is
/// resharded on load (a universal checkpoint), another global batch
/// continues the data from the checkpoint's sample position.
void checkResumable(const CheckpointIndex &index, const Descriptor &desc,
                    const char *descriptorText, int64_t ranks);

/// Whether `index` stores every tensor exactly as this build on `ranks`
/// ranks does (then each rank loads its own shard file as it is).
bool checkpointLayoutMatches(const CheckpointIndex &index,
                             const Descriptor &desc, int64_t ranks);

/// Fills this rank's parameter, state and buffer storage from its shard
/// file, after checking every tensor against its CRC-32C in the index;
/// `index` has passed checkResumable. In another layout (checkpoint-
/// LayoutMatches false) every rank reads every shard file, assembles each
/// tensor whole and takes its own storage of it.
void loadCheckpointShard(ztrt_ctx &ctx, const Descriptor &desc,
                         const CheckpointIndex &index);

/// The element type ztrain-consolidate writes floating-point tensors in
/// (--dtype): each tensor's own, f32, or bf16. i32 tensors stay i32.
enum class ConsolidateType { Own, FP32, BF16 };

/// Reassembles every parameter and buffer of the checkpoint in `dir` as its
/// full tensor (shards concatenated in rank order, padding dropped) and
/// writes them to the safetensors file `out`: with ConsolidateType::Own,
/// the bytes --save of the same run writes. FP32 writes a parameter that
/// has an f32 master state as that master (the unrounded weights), every
/// other floating tensor widened (exact); BF16 rounds every floating tensor
/// to bf16 (nearest even). Optimizer states are not part of it. Fatal,
/// leaving no `out`, on a missing or corrupt index or shard (every tensor's
/// CRC-32C is checked).
/// With `maxShardBytes` > 0, `out` is a directory (created if missing)
/// that receives a Hugging Face sharded checkpoint instead of one file:
/// model-0000i-of-0000N.safetensors of at most that many bytes of tensors
/// each (a larger tensor alone in its file), in tensor order, and
/// model.safetensors.index.json ("metadata": {"total_size"}, "weight_map":
/// tensor -> file), written last.
void consolidateCheckpoint(const std::string &dir, const std::string &out,
                           ConsolidateType dtype = ConsolidateType::Own,
                           int64_t maxShardBytes = 0);

} // namespace ztrt

#endif // ZTRT_IO_CHECKPOINT_H
