//===- ztrt.h - ztrain runtime C ABI ---------------------------*- C -*-===//
//
// The flat C ABI between code compiled by ztrain and its runtime. No MLIR or
// LLVM dependency. The functions themselves are listed once, in
// ztrt_abi.def; this header expands that table into prototypes.
//
// A compiled model object defines two symbols:
//
//   const char ztrain_descriptor[];   // NUL-terminated, see below
//   void ztrain_step(ztrt_ctx *ctx);  // one training step
//
// and is linked with libztrt_main (which owns main()) and the runtime.
//
// Descriptor format (text, one record per line, fields separated by one
// space, names contain no whitespace):
//
//   ztrain-descriptor 1
//   grid <N>
//   mesh <shard> <replicate> <ranks_per_node>
//   param <name> <dtype> <rank> <d0> .. <dn-1> init <kind> <scale> [<store>]
//         [space nvme] [frozen]
//   state <name> <dtype> <rank> <d0> .. <dn-1> of <param-name> [master]
//         [<store>] [space host|nvme]
//   buffer <name> <dtype> <rank> <d0> .. <dn-1> init <kind> <scale>
//   grad <param-name> <E> [<dtype>]
//   input <name> <dtype> <rank> <d0> .. <dn-1> bound <b> [ignore <k>]
//   arena <name> <bytes>
//   optimizer <free text up to end of line>
//   loss_scale init <S> window <W> hysteresis <H> min <M>
//   clip_grad_norm <M>
//   host_step_buffer <bytes>
//
// `grad p E dtype` (optional; then one per parameter, in parameter order):
// the persistent gradient buffer of parameter p, E elements of `dtype` per
// rank, returned by ztrt_grad: the type the parameter's optimizer update
// consumes (the parameter's, or f32 when mixed precision reduces in f32).
// The compiler always writes the dtype; without it (hand-written models)
// it is the parameter's.
// `host_step_buffer bytes`: a device backend runs the updates of host- and
// nvme-placed optimizer states on the host (the host step), staging their
// gradients (unless spilled to host memory) and parameters (unless
// host-placed) through one pinned buffer of that size, which the compiler
// sizes for the largest such update, at most two tiles of 2^20 of its
// elements (zero-report's device_backend.host_step_buffers); an update
// larger than the buffer goes in tiles of half of it, alternating halves.
// Without the record there is no buffer, and a host step that needs one
// is an error.
// `arena name bytes`: an arena the step asks for with ztrt_arena, in index
// order (plan-memory's); with the other records, every byte a rank
// allocates, which main() checks against the memory available.
// `loss_scale ...` (fp16 mixed precision): the step seeds its backward pass
// with ztrt_loss_scale and calls ztrt_update_loss_scale once, before its
// optimizer updates; the runtime's dynamic loss scaler starts at S, halves
// after H overflows (never below M; an overflow at M ends the run) and
// doubles after W consecutive clean steps (DeepSpeed's DynamicLossScaler).
// `clip_grad_norm M`: the step calls ztrt_clip_grad_norm once before its
// optimizer updates (after ztrt_update_loss_scale), which scale the
// gradients down to global norm M when it is exceeded.
// `grid N`: the step was compiled for N data-parallel ranks; main() refuses
// any other world size (absent: any size, for hand-written models).
// `mesh S R K` (hybrid sharding; at most once, with a grid record, S * R =
// N): the ranks form R replicate groups of S consecutive ranks. Rank r's
// shard group (collective axis 1) is ranks r - r % S .. r - r % S + S - 1,
// its replicate group (axis 2) the ranks j * S + r % S; `store E shard`
// tensors are split over the S ranks of a shard group (rank r holds shard
// r % S, so needs E * S >= n) and replicated across its replicate group.
// K >= 1 is the number of ranks per node the compiler priced links with.
// Absent: S = N, R = 1, K unknown. <dtype>
// is f32 or i32, and for params, states and grads also bf16 or f16 (mixed
// precision; 2-byte elements, ztrt_dtype ZTRT_BF16 / ZTRT_F16). <kind> is
// zeros | ones | normal | uniform: normal draws N(0, scale^2), uniform draws
// U(-scale, scale); a bf16 / f16 parameter gets the values an f32 parameter
// of its name and shape gets, each rounded to nearest even. States start at
// zero, except a `master` state: the f32 master copy of a bf16 / f16
// parameter (an f32 state of the same shape, at most one per parameter),
// which starts as those f32 values unrounded (with --init: the file's
// values, or the parameter's widened); the compiled step keeps the
// parameter equal to its master rounded.
// A `frozen` parameter (train.param ... frozen) is not trained: it has no
// states, its grad record has 0 elements, and a bf16 / f16 one takes an f32
// --init tensor rounded to nearest even (what autocast computes with).
// A buffer (train.buffer, ztrt_buffer) is whole on every rank; its <kind>
// may also be causal (1 where column > row in the last two dims); it is
// filled from --init when the file has its name, else by its rule.
// For an i32 input, bound b > 0 means every value must lie in [0, b) (a
// class count or vocabulary size the compiler derived); 0 means unknown.
// `ignore k`: the value k is allowed too (the labels of a cross-entropy
// with ignore_index k, PyTorch's -100 padding).
// The index of a param / state / buffer / input in ztrt_param /
// ztrt_state / ztrt_buffer / ztrt_input is its position among the records
// of its kind.
//
// `space` (zero-offload): where the state (or, for a stage-3 parameter,
// nvme only: its shard) lives between steps. host: in
// host memory (on the cpu backend the device's memory: nothing changes);
// nvme: in a file of the rank's swap directory under --nvme-path, read
// into a buffer the step gives (ztrt_swap_in) before its update and
// written back after it (ztrt_swap_out); ztrt_state has no storage for it.
//
// <store> is `store <E> full` or `store <E> shard`: what each rank stores
// of the tensor (n elements, row-major) in the buffer ztrt_param /
// ztrt_state return, E elements of its dtype on every rank, for ZeRO:
//   absent           the whole tensor, E = n;
//   `store E full`   E >= n: the whole tensor in [0, n), zeros in [n, E);
//   `store E shard`  rank r holds flat elements [s*E, s*E + E) of its
//                    shard s = r (r % S with a mesh), zeros for indices
//                    >= n; needs E * world size (S) >= n.
// The runtime initialises, loads (--init) and saves (--save) full tensors
// and slices / gathers them; the padding starts at zero and the compiled
// step must keep it zero.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_H
#define ZTRT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ztrt_ctx ztrt_ctx;

// The cross-entropy kernels' `ignore` argument when no label is ignored: a
// value no int32 label has (train.cross_entropy without ignore_index).
#define ZTRT_NO_IGNORE_INDEX INT64_MIN

// Memory categories for byte accounting (the ztrt_alloc category argument).
typedef enum ztrt_category {
  ZTRT_CAT_PARAMETERS = 0,
  ZTRT_CAT_GRADIENTS = 1,
  ZTRT_CAT_OPTIMIZER_STATES = 2,
  ZTRT_CAT_ACTIVATIONS = 3,
  ZTRT_CAT_OTHER = 4,
  // Full copies of parameters partitioned at rest (ZeRO stage 3), from
  // their gather's start to their release: what `max-live-bytes` bounds.
  ZTRT_CAT_GATHERED = 5,
  // Non-trainable module tensors (train.buffer), whole on every rank.
  ZTRT_CAT_BUFFERS = 6,
  // zero-offload: the host buffers nvme-resident parameter shards are
  // swapped through (the swap_buffers arena; a device backend computes on a
  // device copy of each), and optimizer states placed in host memory. Host
  // memory: on the cpu backend the same memory as the rest.
  ZTRT_CAT_SWAP_BUFFERS = 7,
  ZTRT_CAT_HOST_STATES = 8,
  // Host copies of activations kept for the backward pass (Pa+cpu: the
  // host_activations arena). Host memory (pinned on a device backend).
  ZTRT_CAT_HOST_ACTIVATIONS = 9,
  // Parameter storage placed in host memory (--offload-param=cpu): mapped
  // pinned memory that a device backend's kernels read and write in place.
  ZTRT_CAT_HOST_PARAMETERS = 10,
  // ZeRO-Offload's CPU step on a device backend: the pinned host buffer an
  // update with host-placed states stages its gradient (and the parameter
  // it sends back) through. Host memory; unused on the cpu backend.
  ZTRT_CAT_HOST_STEP_BUFFERS = 11,
  // Host copies of gradients spilled for a host step (zero-offload's
  // host_gradients arena, optimizer=cpu). Host memory (pinned on a device
  // backend).
  ZTRT_CAT_HOST_GRADIENTS = 12,
  // The swap buffers of nvme-resident optimizer states (the
  // state_swap_buffers arena): 4096-byte aligned host memory (pinned on a
  // device backend, which steps those states on the host: no device copy).
  ZTRT_CAT_STATE_SWAP_BUFFERS = 13,
  ZTRT_CAT_COUNT = 14
} ztrt_category;

// The optimizer hyper-parameters a compiled update asks the run for
// (ztrt_hyper): the executable's flag of that name, else the compiled value.
typedef enum ztrt_hyper_id {
  ZTRT_HYPER_BETA1 = 0,
  ZTRT_HYPER_BETA2 = 1,
  ZTRT_HYPER_EPS = 2,
  ZTRT_HYPER_WEIGHT_DECAY = 3,
  ZTRT_HYPER_MOMENTUM = 4,
  ZTRT_HYPER_DAMPENING = 5,
  ZTRT_HYPER_COUNT = 6
} ztrt_hyper_id;

// What a swap moves (the KIND argument of ztrt_swap_in / ztrt_swap_out).
typedef enum ztrt_swap_kind {
  ZTRT_SWAP_STATE = 0,
  ZTRT_SWAP_PARAM = 1
} ztrt_swap_kind;

// Element types of tensor buffers (the DTYPE argument of kernels and
// collectives): stored as such, computed in float.
typedef enum ztrt_dtype {
  ZTRT_F32 = 0,
  ZTRT_BF16 = 1,
  ZTRT_F16 = 2
} ztrt_dtype;

// A kernel the compiler generated for one fused elementwise region
// (ztrt_fused): computes items [begin, end) of the region, reading and
// writing the buffers of `args` (inputs then outputs).
typedef void (*ztrt_fused_fn)(void *const *args, int64_t begin, int64_t end);

#define ZTRT_TYPE_CTX ztrt_ctx *
#define ZTRT_TYPE_DTYPE int32_t
#define ZTRT_TYPE_PTR void *
#define ZTRT_TYPE_CPTR const void *
#define ZTRT_TYPE_I32 int32_t
#define ZTRT_TYPE_I64 int64_t
#define ZTRT_TYPE_F64 double
#define ZTRT_TYPE_VOID void

#define ZTRT_T_(tag) ZTRT_TYPE_##tag
#define ZTRT_ARGS_1(a) ZTRT_T_(a)
#define ZTRT_ARGS_2(a, ...) ZTRT_T_(a), ZTRT_ARGS_1(__VA_ARGS__)
#define ZTRT_ARGS_3(a, ...) ZTRT_T_(a), ZTRT_ARGS_2(__VA_ARGS__)
#define ZTRT_ARGS_4(a, ...) ZTRT_T_(a), ZTRT_ARGS_3(__VA_ARGS__)
#define ZTRT_ARGS_5(a, ...) ZTRT_T_(a), ZTRT_ARGS_4(__VA_ARGS__)
#define ZTRT_ARGS_6(a, ...) ZTRT_T_(a), ZTRT_ARGS_5(__VA_ARGS__)
#define ZTRT_ARGS_7(a, ...) ZTRT_T_(a), ZTRT_ARGS_6(__VA_ARGS__)
#define ZTRT_ARGS_8(a, ...) ZTRT_T_(a), ZTRT_ARGS_7(__VA_ARGS__)
#define ZTRT_ARGS_9(a, ...) ZTRT_T_(a), ZTRT_ARGS_8(__VA_ARGS__)
#define ZTRT_ARGS_10(a, ...) ZTRT_T_(a), ZTRT_ARGS_9(__VA_ARGS__)
#define ZTRT_ARGS_11(a, ...) ZTRT_T_(a), ZTRT_ARGS_10(__VA_ARGS__)
#define ZTRT_ARGS_12(a, ...) ZTRT_T_(a), ZTRT_ARGS_11(__VA_ARGS__)
#define ZTRT_ARGS_13(a, ...) ZTRT_T_(a), ZTRT_ARGS_12(__VA_ARGS__)
#define ZTRT_ARGS_14(a, ...) ZTRT_T_(a), ZTRT_ARGS_13(__VA_ARGS__)
#define ZTRT_ARGS_15(a, ...) ZTRT_T_(a), ZTRT_ARGS_14(__VA_ARGS__)
#define ZTRT_ARGS_16(a, ...) ZTRT_T_(a), ZTRT_ARGS_15(__VA_ARGS__)
#define ZTRT_ARGS_17(a, ...) ZTRT_T_(a), ZTRT_ARGS_16(__VA_ARGS__)
#define ZTRT_ARGS_18(a, ...) ZTRT_T_(a), ZTRT_ARGS_17(__VA_ARGS__)
#define ZTRT_ARGS_19(a, ...) ZTRT_T_(a), ZTRT_ARGS_18(__VA_ARGS__)
#define ZTRT_ARGS_20(a, ...) ZTRT_T_(a), ZTRT_ARGS_19(__VA_ARGS__)
#define ZTRT_NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13,   \
                    _14, _15, _16, _17, _18, _19, _20, N, ...)                \
  N
#define ZTRT_NARGS(...)                                                        \
  ZTRT_NARGS_(__VA_ARGS__, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8,  \
              7, 6, 5, 4, 3, 2, 1)
#define ZTRT_CAT2_(a, b) a##b
#define ZTRT_CAT2(a, b) ZTRT_CAT2_(a, b)
#define ZTRT_ARGS(...)                                                         \
  ZTRT_CAT2(ZTRT_ARGS_, ZTRT_NARGS(__VA_ARGS__))(__VA_ARGS__)

#define ZTRT_FN(name, ret, ...) ZTRT_T_(ret) ztrt_##name(ZTRT_ARGS(__VA_ARGS__));
#include "ztrt_abi.def"
#undef ZTRT_FN

#ifdef __cplusplus
}
#endif

#endif // ZTRT_H
