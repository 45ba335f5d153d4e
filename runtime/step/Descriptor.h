//===- Descriptor.h - The model descriptor the compiler embeds --*- C++ -*-===//
//
// Parses the `ztrain_descriptor` text (format in ztrt.h) into the lists of
// parameters, optimizer states and step inputs that main() allocates and
// binds, in the index order of ztrt_param / ztrt_state / ztrt_input.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_STEP_DESCRIPTOR_H
#define ZTRT_STEP_DESCRIPTOR_H

#include "step/LossScaler.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ztrt {

/// Element types of model tensors. bf16 and f16 (2 bytes) hold parameters
/// and optimizer states only (mixed precision); inputs and buffers are f32
/// or i32.
enum class ElemType { F32, I32, BF16, F16 };

/// "f32" / "i32" / "bf16" / "f16", as in the descriptor.
const char *elemTypeName(ElemType type);

struct Descriptor;
/// The step's precision in words: "fp32", or the parameters' 16-bit type
/// with how they are updated ("bf16, f32 master weights"); "bf16+f32" when
/// parameters differ. For the start line and the report's top level.
std::string precisionText(const Descriptor &desc);
/// Bytes of one element (4 for f32 and i32, 2 for bf16 and f16).
int64_t elemTypeBytes(ElemType type);
/// "F32" / "I32" / "BF16" / "F16", as in safetensors headers.
const char *elemTypeSafetensorsName(ElemType type);
/// The ElemType of a safetensors dtype name; false when it names none of
/// the four.
bool elemTypeFromSafetensorsName(const std::string &name, ElemType *type);
/// True for f32, bf16 and f16.
inline bool isFloatType(ElemType type) { return type != ElemType::I32; }

/// Converts `n` elements of floating type `from` at `src` to floating type
/// `to` at `dst` (host memory; may not overlap unless from == to): widening
/// is exact, narrowing rounds to nearest even (DType.h's bf16(float) /
/// f16(float)); bf16 <-> f16 goes through f32. Returns the number of
/// elements whose value the conversion changed (0: it was exact; NaNs
/// count as unchanged when they stay NaN).
int64_t convertElements(ElemType from, const void *src, ElemType to, void *dst,
                        int64_t n);

struct TensorSpec {
  std::string name;
  ElemType type = ElemType::F32;
  std::vector<int64_t> shape;
  int64_t numel = 1;
  /// numel * elemBytes().
  int64_t bytes = 4;
  /// Bytes of one element.
  int64_t elemBytes() const { return elemTypeBytes(type); }
};

/// How each rank stores a parameter or optimizer state: the record's
/// optional `store <E> full|shard` suffix (format in ztrt.h).
enum class StoreMode { Full, Shard };

/// The part of a tensor one rank stores: global row-major elements
/// [begin, begin + count) sit in elements [0, count) of its storage, whose
/// remaining elements [count, storeElems) are zero padding.
struct StorageSlice {
  int64_t begin = 0;
  int64_t count = 0;
};

/// Where a parameter or state lives between steps (the record's `space`,
/// zero-offload): device memory, host memory, or a file of the rank's swap
/// directory.
enum class MemorySpace { Device, Host, Nvme };

/// A tensor that lives in per-rank storage (parameters and states; inputs
/// are always whole per-rank buffers).
struct StoredTensorSpec : TensorSpec {
  MemorySpace space = MemorySpace::Device;
  StoreMode store = StoreMode::Full;
  /// Elements each rank stores (E); numel when the record has no suffix.
  int64_t storeElems = 1;
  /// storeElems * elemBytes(): what every rank allocates (and what the compiler's
  /// memory prediction counts).
  int64_t storeBytes = 4;

  /// What rank `rank` stores: everything for `full`, the rank's E-element
  /// window of the flat tensor for `shard` (empty past the end).
  StorageSlice slice(int64_t rank) const;
};

/// Empty if shards of `spec` on `ranks` ranks cover the whole tensor (always
/// so for `full` storage), else the error naming the tensor; `kind` is
/// "param" or "state".
std::string shardCoverageProblem(const char *kind, const StoredTensorSpec &spec,
                                 int64_t ranks);

/// Causal: buffers only, 1 where the column index exceeds the row index in
/// the last two dims, else 0.
/// External: buffers only, no rule; the values must come from --init (or a
/// checkpoint): what the importer declares for constants it folded.
enum class InitKind { Zeros, Ones, Normal, Uniform, Causal, External };

struct ParamSpec : StoredTensorSpec {
  InitKind init = InitKind::Zeros;
  double scale = 0.0;
  /// The index in Descriptor::states of this parameter's master state, or
  /// -1 (f32 parameters, and 16-bit ones updated without a master).
  int64_t masterIndex = -1;
  /// Not trained (`frozen`): no states, no gradient; a 16-bit one takes an
  /// f32 --init tensor rounded.
  bool frozen = false;
};

/// A train.buffer: the whole tensor on every rank (storeElems == numel),
/// filled before the first step from --init or by its rule.
struct BufferSpec : StoredTensorSpec {
  InitKind init = InitKind::Zeros;
  double scale = 0.0;
};

struct StateSpec : StoredTensorSpec {
  std::string of;
  int64_t paramIndex = -1;
  /// `of <param> master`: the f32 master copy of a bf16 / f16 parameter
  /// (same shape), initialised with the parameter's f32 init values rather
  /// than zeros.
  bool master = false;
};

/// `grad <param> <E> [<dtype>]`: the parameter's persistent gradient buffer
/// holds E elements of `type` per rank (the whole gradient, its padded form
/// or a slice, as the compiler planned it); `type` is the parameter's dtype
/// when the record has none.
struct GradSpec {
  int64_t paramIndex = -1;
  int64_t elements = 0;
  ElemType type = ElemType::F32;
  /// elements * the element's bytes: what every rank allocates.
  int64_t bytes() const { return elements * elemTypeBytes(type); }
};

struct InputSpec : TensorSpec {
  /// Every value of an i32 input must lie in [0, bound); 0 = unknown.
  int64_t bound = 0;
  /// ... or equal `ignore` (cross-entropy's ignore_index), when hasIgnore.
  bool hasIgnore = false;
  int64_t ignore = 0;
  /// Whether `value` is one this input may hold.
  bool allows(int64_t value) const {
    return (value >= 0 && (bound <= 0 || value < bound)) ||
           (hasIgnore && value == ignore);
  }
};

/// Whether plan-memory's arena `name` is host memory on a device backend
/// (zero-offload's host copies of activations and of spilled gradients,
/// the nvme optimizer states' swap buffers; the parameters' swap buffers
/// have a device copy as well).
inline bool isHostArena(const std::string &name) {
  return name == "host_activations" || name == "host_gradients" ||
         name == "state_swap_buffers";
}

struct Descriptor {
  /// The number of ranks the step was compiled for (`grid N`), which
  /// main() insists on; 0 when the record is absent (hand-written models),
  /// which runs on any number of ranks.
  int64_t gridSize = 0;
  /// `mesh <shard> <replicate> <ranks_per_node>` (hybrid sharding): the grid
  /// as `meshReplicate` groups of `meshShard` consecutive ranks, priced by
  /// the compiler for `meshRanksPerNode` ranks per node. Absent (hasMesh
  /// false): shard = the grid (or world) size, replicate 1, ranks per
  /// node 0 (unknown).
  bool hasMesh = false;
  int64_t meshShard = 0, meshReplicate = 1, meshRanksPerNode = 0;
  /// `mesh S R K secondary` (ZeRO++'s hpZ): the groups carry the backward
  /// gathers only; tensors stay sharded over every rank.
  bool meshSecondary = false;
  /// The ranks a `store E shard` tensor is split over on a job of `ranks`
  /// ranks: the mesh's shard, else all of them.
  int64_t shardRanks(int64_t ranks) const {
    return hasMesh && !meshSecondary ? meshShard : ranks;
  }
  std::vector<ParamSpec> params;
  std::vector<StateSpec> states;
  /// In the index order of ztrt_buffer.
  std::vector<BufferSpec> buffers;
  /// Empty, or one per parameter in parameter order.
  std::vector<GradSpec> grads;
  std::vector<InputSpec> inputs;
  /// plan-memory's arenas (`arena <name> <bytes>`), in ztrt_arena's index
  /// order.
  std::vector<std::pair<std::string, int64_t>> arenas;
  std::string optimizer;
  /// `loss_scale init S window W hysteresis H min M`: the step seeds its
  /// backward pass with a dynamic loss scale (fp16) and calls
  /// ztrt_update_loss_scale before its updates.
  std::optional<LossScalePolicy> lossScale;
  /// `clip_grad_norm M`: the step clips its gradients to global norm M
  /// (ztrt_clip_grad_norm before its updates).
  std::optional<double> clipGradNorm;
  /// `grad_accum K`: the step accumulates gradients (ztrt_accumulate_grad,
  /// ztrt_accumulation_boundary); K micro-batches per optimizer step by
  /// default. 0 when absent.
  int64_t gradAccumSteps = 0;
  /// `host_step_buffer B`: on a device backend, updates of host- or
  /// nvme-placed optimizer states run on the host (the host step), staging
  /// gradients and parameters through one pinned buffer of B bytes (the
  /// compiler sizes it for the largest such update). 0 when absent.
  int64_t hostStepBuffer = 0;
  /// `eval`: the model defines ztrain_eval (the forward pass and loss, for
  /// --eval-data).
  bool hasEval = false;
  /// `fused N`: the step runs N kernels the compiler generated for fused
  /// elementwise regions (ztrain-compile --fuse=elementwise, ztrt_fused),
  /// host code that only the cpu backend runs. 0 when absent.
  int64_t fusedKernels = 0;
  /// `flops F`: the matrix-product FLOPs of one call of the step on one
  /// rank (the compiler's count); 0 when unknown.
  int64_t flopsPerStep = 0;
  /// `logits logits <dtype> <shape>`: the model defines ztrain_logits,
  /// whose result (ztrt_set_output) has this type and shape.
  std::optional<TensorSpec> logits;
};

/// Every byte a rank allocates through the context for this model: its
/// parameter, state and gradient storage, inputs, buffers and the step's
/// arenas (what zero-report predicts as the peak, and the report measures).
/// By part, for messages.
struct PlannedBytes {
  int64_t modelStates = 0, inputs = 0, buffers = 0, arenas = 0;
  int64_t total() const { return modelStates + inputs + buffers + arenas; }
};
/// What the plan allocates per rank. `deviceOnly`: what a device backend
/// holds in device memory (host-placed optimizer states and the host
/// arenas are host memory there; the parameters' swap buffers have a
/// device copy, in the arenas).
PlannedBytes plannedBytes(const Descriptor &desc, bool deviceOnly = false);

/// Parses and validates a descriptor; fatal with the line number on any
/// malformed record. With a `grid N` record, shards must cover their tensors
/// on N ranks; without one, call checkStorage() once the world size is known.
Descriptor parseDescriptor(const char *text);

/// Fatal, naming the tensor, if a sharded parameter or state does not fit
/// the shards of a job of `ranks` ranks (E * desc.shardRanks(ranks) <
/// numel).
void checkStorage(const Descriptor &desc, int64_t ranks);

} // namespace ztrt

#endif // ZTRT_STEP_DESCRIPTOR_H
