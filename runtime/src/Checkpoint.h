//===- Checkpoint.h - Sharded checkpoints: save, resume, consolidate -*- C++
//-*-===//
//
// A sharded checkpoint is a directory, as Hugging Face stores sharded weights:
//
//   DIR/rank-<r>-of-<N>.safetensors   rank r's storage of every parameter,
//                                     optimizer state and buffer, exactly as
//                                     it lives in memory (1-D, E elements,
//                                     padding included), named as in the
//                                     descriptor;
//   DIR/index.json                    {"metadata", "weight_map"} plus a
//                                     "ztrain" object: the descriptor, the
//                                     storage of every tensor, the number of
//                                     ranks, the steps done, the seed.
//
// Saving is collective and ordered so that a crash never leaves an index
// that points at missing or foreign shards: the old index goes first, every
// rank commits its shard (atomically), and only after a barrier does rank 0
// write the new index. docs/runtime.md specifies the layout.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_SRC_CHECKPOINT_H
#define ZTRT_SRC_CHECKPOINT_H

#include "src/Descriptor.h"

#include <cstdint>
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
  /// "param", "state" or "buffer", as in the index.
  const char *kindName() const {
    return kind == Kind::Param ? "param"
           : kind == Kind::State ? "state"
                                 : "buffer";
  }
};

/// The "ztrain" part of DIR/index.json.
struct CheckpointIndex {
  std::string dir;
  /// The number of ranks (and shard files) that wrote it.
  int64_t worldSize = 1;
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
};

/// What the driver knows about the run when it saves.
struct CheckpointProgress {
  int64_t step = 0;
  uint64_t seed = 0;
  std::string data;
};

/// Collective: writes `dir`/rank-<r>-of-<N>.safetensors on every rank and,
/// after a barrier, `dir`/index.json on rank 0 (creating `dir` if needed).
void saveCheckpoint(ztrt_ctx &ctx, const Descriptor &desc,
                    const char *descriptorText,
                    const CheckpointProgress &progress, const std::string &dir);

/// Reads and validates `dir`/index.json; fatal, naming `what` (the flag or
/// tool) and the file, on any problem.
CheckpointIndex readCheckpointIndex(const std::string &dir, const char *what);

/// Fatal with one line naming both values if `index` cannot continue the
/// model of `desc` / `descriptorText` on `ranks` ranks: another number of
/// ranks, a missing or extra tensor, another dtype, shape or storage, or any
/// other difference in the descriptor (optimizer, inputs).
void checkResumable(const CheckpointIndex &index, const Descriptor &desc,
                    const char *descriptorText, int64_t ranks);

/// Fills this rank's parameter and state storage (ctx.params, ctx.states)
/// from its shard file; `index` has passed checkResumable.
void loadCheckpointShard(ztrt_ctx &ctx, const Descriptor &desc,
                         const CheckpointIndex &index);

/// Reassembles every parameter of the checkpoint in `dir` as its full tensor
/// (shards concatenated in rank order, padding dropped) and writes them to
/// the safetensors file `out`: the bytes --save of the same run writes.
/// Optimizer states are not part of it. Fatal, leaving no `out`, on a
/// missing or corrupt index or shard.
void consolidateCheckpoint(const std::string &dir, const std::string &out);

} // namespace ztrt

#endif // ZTRT_SRC_CHECKPOINT_H
