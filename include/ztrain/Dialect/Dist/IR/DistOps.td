//===- DistOps.td - dist dialect operations ----------------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_DISTOPS_TD
#define ZTRAIN_DIALECT_DIST_DISTOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "ztrain/Dialect/Dist/IR/DistDialect.td"
include "ztrain/Dialect/Dist/IR/DistEnums.td"
include "ztrain/Dialect/Dist/IR/DistAttrs.td"
include "ztrain/Dialect/Dist/IR/DistInterfaces.td"
include "ztrain/Dialect/Dist/IR/DistTypes.td"

// Collectives have value semantics: every rank runs the same program, so
// any rewrite (CSE, dead-code removal, reordering of independent ones) is
// applied on every rank alike.
class Dist_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, !listconcat(traits, [Pure,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>,
        DeclareOpInterfaceMethods<Dist_CollectiveOpInterface,
                                  ["getCommunicatedBytes"]>])>;

def Dist_AllReduceOp : Dist_CollectiveOp<"all_reduce", [SameOperandsAndResultType]> {
  let summary = "sum or mean of a tensor over the ranks of a grid";
  let description = [{
    Every rank gets the elementwise sum (or mean) of the operand over all
    ranks. Stage-0 data parallelism averages gradients with it.

    ```mlir
    %g = dist.all_reduce mean %grad on @dp : tensor<1024x256xf32>
    ```

    **Constraints:**
    - `@grid` is a one-dimensional `shard.grid` with a static size.
  }];
  let arguments = (ins Dist_Reduction:$reduction, AnyStaticShapeTensor:$input,
                       FlatSymbolRefAttr:$grid);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$reduction $input `on` $grid attr-dict `:` type($result)";
}

def Dist_ReduceScatterOp : Dist_CollectiveOp<"reduce_scatter"> {
  let summary = "reduce over ranks, each rank keeping its chunk";
  let description = [{
    The operand's dim 0 is split into N equal chunks; rank r gets the sum
    (or mean) over all ranks of chunk r. ZeRO stages 2 and 3 reduce
    gradients this way, each rank keeping the shard it updates.

    ```mlir
    %shard = dist.reduce_scatter mean %flat on @dp : tensor<1024xf32> -> tensor<256xf32>
    ```

    **Constraints:**
    - operand dim 0 = result dim 0 x grid size; other dims equal;
    - element types equal.
  }];
  let arguments = (ins Dist_Reduction:$reduction, AnyStaticShapeTensor:$input,
                       FlatSymbolRefAttr:$grid);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $reduction $input `on` $grid attr-dict `:` type($input) `->` type($result)
  }];
}

def Dist_AllGatherOp : Dist_CollectiveOp<"all_gather"> {
  let summary = "concatenation of every rank's tensor along dim 0";
  let description = [{
    Every rank gets the operands of all ranks concatenated along dim 0 in
    rank order. ZeRO gathers partitioned parameters this way.

    ```mlir
    %full = dist.all_gather %shard on @dp : tensor<256xf32> -> tensor<1024xf32>
    ```

    **Constraints:**
    - result dim 0 = operand dim 0 x grid size; other dims equal;
    - element types equal.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$grid);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$input `on` $grid attr-dict `:` type($input) `->` type($result)";
}

def Dist_BroadcastOp : Dist_CollectiveOp<"broadcast", [SameOperandsAndResultType]> {
  let summary = "every rank gets the root rank's tensor";
  let description = [{
    ```mlir
    %w = dist.broadcast %w0 on @dp root 0 : tensor<1024xf32>
    ```

    **Constraints:**
    - `root` is a rank of the grid.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$grid,
                       I64Attr:$root);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$input `on` $grid `root` $root attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// ZeRO's partitioned parameters
//===----------------------------------------------------------------------===//

def Dist_PadFlatOp : Op<Dist_Dialect, "pad_flat", [Pure]> {
  let summary = "flattens a tensor and pads it with zeros";
  let description = [{
    The row-major elements of the operand followed by zeros up to the
    result's size: the flat buffer ZeRO reduce-scatters, N equal shards.

    ```mlir
    %flat = dist.pad_flat %dw : tensor<7x3xf32> -> tensor<24xf32>
    ```

    **Constraints:**
    - the result is one-dimensional, no smaller than the operand, with the
      same element type.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Dist_SliceShardOp : Op<Dist_Dialect, "slice_shard", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "this rank's shard of a flat tensor every rank of a grid holds";
  let description = [{
    The operand is cut into G equal shards over the grid `@grid` of G
    ranks; the result is shard k of rank k of the grid. No communication:
    every rank of the grid holds the whole operand (a parameter just
    gathered), and keeps its part. ZeRO++'s hpZ keeps a gathered
    parameter's shard over the node-local `@dp_hpz` this way after the
    forward pass, so that the backward pass gathers it inside the node
    (`dist.all_gather` on the same grid).

    ```mlir
    %flat = dist.pad_flat %w : tensor<4x3xf32> -> tensor<12xf32>
    %mine = dist.slice_shard %flat on @dp_hpz : tensor<12xf32> -> tensor<6xf32>
    ```

    **Constraints:**
    - `@grid` is a one-dimensional `shard.grid` with a static size G;
    - operand and result are one-dimensional, of one element type, and the
      operand has G x the result's elements.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$grid);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$input `on` $grid attr-dict `:` type($input) `->` type($result)";
}

// Collectives on a partitioned parameter's storage: they read or write
// module-level state, so they carry memory effects instead of being pure.
class Dist_ParamCollectiveOp<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, !listconcat(traits, [
        DeclareOpInterfaceMethods<SymbolUserOpInterface>,
        DeclareOpInterfaceMethods<Dist_CollectiveOpInterface,
                                  ["getCommunicatedBytes"]>])>;

def Dist_GatherParamOp : Dist_ParamCollectiveOp<"gather_param",
    [MemoryEffects<[MemRead]>]> {
  let summary = "the full value of a parameter partitioned at rest";
  let description = [{
    ZeRO stage 3 keeps each parameter as one flat shard per rank and
    all-gathers it before use, once for the forward pass and again for the
    backward pass; the gathered copy is released after its last use.

    ```mlir
    %w = dist.gather_param @fc1.weight on @dp : tensor<128x784xf32>
    ```

    **Tiles** (`memory-centric-tiling`): `tile j of T` gathers only chunk j
    of the T equal chunks of every rank's shard, so the result holds R / T
    of the parameter's R rows: rank r's rows r*R/N + j*R/(N*T) + i for
    i < R/(N*T), in rank order. The shard layout at rest is unchanged and
    the T tiles together move exactly what one gather moves.
    `dist.assemble_tiles` / `dist.extract_tile` map between that row order
    and the parameter's.

    ```mlir
    %w1 = dist.gather_param @fc2.weight tile 1 of 4 on @dp : tensor<64x256xf32>
    ```

    **Constraints:**
    - `@param` is a `train.param` with a `#dist.partition` over `@grid`,
      of the result type (untiled);
    - tiled: `tile` < `tiles`, the parameter's dim 0 (R) divisible by
      N x `tiles`, the result R / `tiles` rows of the parameter's shape.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param,
                       OptionalAttr<I64Attr>:$tile, OptionalAttr<I64Attr>:$tiles,
                       FlatSymbolRefAttr:$grid);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $param (`tile` $tile^ `of` $tiles)? `on` $grid attr-dict `:` type($result)
  }];
}

def Dist_AllGatherParamOp : Dist_ParamCollectiveOp<"all_gather_param",
    [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "gathers every rank's updated slice of a parameter";
  let description = [{
    ZeRO stages 1 and 2 keep parameters replicated but update them by
    slice (each rank owns the optimizer states of one slice). After the
    sharded updates, this writes every rank's slice into every rank's
    parameter storage, in place.

    ```mlir
    dist.all_gather_param @fc1.weight on @dp
    ```

    **Constraints:**
    - `@param` is a `train.param` stored replicated (no `#dist.partition`).
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, FlatSymbolRefAttr:$grid);
  let assemblyFormat = "$param `on` $grid attr-dict";
}

//===----------------------------------------------------------------------===//
// Asynchronous collectives
//===----------------------------------------------------------------------===//

// A start issues a collective to the communication stream and returns a
// token; it reads its operands until the matching dist.wait. Starts and
// waits carry memory effects so that nothing moves them behind the
// scheduler's back: their order is the communication order of every rank.
class Dist_StartOp<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, !listconcat(traits, [
        MemoryEffects<[MemRead, MemWrite]>,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>,
        DeclareOpInterfaceMethods<Dist_CollectiveOpInterface,
                                  ["getCommunicatedBytes"]>])> {
  let results = (outs Dist_TokenType:$token);
  let hasVerifier = 1;
}

def Dist_GatherParamStartOp : Dist_StartOp<"gather_param_start"> {
  let summary = "starts gathering a parameter partitioned at rest";
  let description = [{
    The asynchronous form of `dist.gather_param`: the full copy's buffer is
    allocated here and filled while the ops up to the matching `dist.wait`
    run. The wait yields the parameter's full value; `dist.release` frees
    it after its last use.

    ```mlir
    %t = dist.gather_param_start @fc1.weight on @dp
    ...
    %w = dist.wait %t : tensor<128x784xf32>
    ```

    **Constraints:**
    - as for `dist.gather_param` (tiles included); the wait's one result
      has the type the gather would have.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param,
                       OptionalAttr<I64Attr>:$tile, OptionalAttr<I64Attr>:$tiles,
                       FlatSymbolRefAttr:$grid);
  let assemblyFormat = "$param (`tile` $tile^ `of` $tiles)? `on` $grid attr-dict";
}

def Dist_ReduceScatterStartOp : Dist_StartOp<"reduce_scatter_start"> {
  let summary = "starts a reduce-scatter of one or more flat buffers (a bucket)";
  let description = [{
    The asynchronous, bucketed form of `dist.reduce_scatter` on flat
    buffers: every operand is a one-dimensional tensor of N equal chunks and
    the wait yields, for each operand, this rank's reduced chunk. All
    operands travel in one collective (a gradient bucket): they are packed
    rank-major, chunk r of every operand next to each other, so that one
    reduce-scatter leaves each rank exactly its chunks. The sums are the
    same as with one collective per operand.

    ```mlir
    %t = dist.reduce_scatter_start mean %a, %b on @dp : tensor<1024xf32>, tensor<64xf32>
    ...
    %sa, %sb = dist.wait %t : tensor<256xf32>, tensor<16xf32>
    ```

    **Constraints:**
    - at least one operand; every operand one-dimensional with a size
      divisible by the grid size, all of one element type.
  }];
  let arguments = (ins Dist_Reduction:$reduction,
                       Variadic<AnyStaticShapeTensor>:$inputs,
                       FlatSymbolRefAttr:$grid);
  let assemblyFormat = [{
    $reduction $inputs `on` $grid attr-dict `:` type($inputs)
  }];
}

def Dist_AllReduceStartOp : Dist_StartOp<"all_reduce_start"> {
  let summary = "starts an all-reduce of one or more tensors (a bucket)";
  let description = [{
    The asynchronous, bucketed form of `dist.all_reduce`: the operands
    travel concatenated in one collective and the wait yields each one's
    sum (or mean) over the ranks.

    ```mlir
    %t = dist.all_reduce_start mean %dw, %db on @dp : tensor<16x12xf32>, tensor<16xf32>
    ...
    %w, %b = dist.wait %t : tensor<16x12xf32>, tensor<16xf32>
    ```

    **Constraints:**
    - at least one operand, all of one element type.
  }];
  let arguments = (ins Dist_Reduction:$reduction,
                       Variadic<AnyStaticShapeTensor>:$inputs,
                       FlatSymbolRefAttr:$grid);
  let assemblyFormat = [{
    $reduction $inputs `on` $grid attr-dict `:` type($inputs)
  }];
}

def Dist_AllGatherParamStartOp : Dist_StartOp<"all_gather_param_start"> {
  let summary = "starts gathering every rank's updated slice of a parameter";
  let description = [{
    The asynchronous form of `dist.all_gather_param` (ZeRO stages 1-2): the
    parameter's storage is rewritten in place by the time the matching
    `dist.wait` (which has no results) returns, and must not be read or
    written before.

    ```mlir
    %t = dist.all_gather_param_start @fc1.weight on @dp
    ...
    dist.wait %t
    ```

    **Constraints:**
    - as for `dist.all_gather_param`.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, FlatSymbolRefAttr:$grid);
  let assemblyFormat = "$param `on` $grid attr-dict";
}

//===----------------------------------------------------------------------===//
// Offload transfers (zero-offload)
//===----------------------------------------------------------------------===//

// A swap start issues one tensor's transfer between its nvme file and a
// host buffer to the rank's I/O engine and returns a token; the matching
// dist.wait completes it. Like collectives' starts they carry memory
// effects, so their order is the one zero-offload scheduled. The swapped
// tensor is a train.state or a train.param whose dist.space is nvme; one
// tensor's swap buffers never overlap in time (a swap-in follows the end
// of the previous one: its swap-out's wait or its release), so every
// reader of the tensor between a swap-in's wait and its end reads that
// buffer.
class Dist_SwapStartOp<string mnemonic>
    : Op<Dist_Dialect, mnemonic, [MemoryEffects<[MemRead, MemWrite]>,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let arguments = (ins FlatSymbolRefAttr:$state, OptionalAttr<I64Attr>:$chunk,
                       OptionalAttr<I64Attr>:$chunks);
  let results = (outs Dist_TokenType:$token);
  let assemblyFormat = "$state (`chunk` $chunk^ `of` $chunks)? attr-dict";
}

def Dist_SwapInStartOp : Dist_SwapStartOp<"swap_in_start"> {
  let summary = "starts reading an nvme-resident state or parameter into a host buffer";
  let description = [{
    Allocates the tensor's swap buffer (`plan-memory` places it in the
    `state_swap_buffers` arena for an optimizer state, `swap_buffers` for a
    parameter shard, 4096-byte aligned, its size rounded up to 4096:
    `dist.staging`) and starts reading the tensor's file into it. From the
    matching `dist.wait` on, the tensor's reads and writes (its optimizer
    update, a stage-3 parameter's gather) use that buffer;
    `dist.swap_out_start` writes it back and its wait frees it, or
    `dist.swap_release` frees it unwritten (it was only read).

    ```mlir
    %t = dist.swap_in_start @fc1.weight.exp_avg
    ...
    dist.wait %t
    train.adam_update @fc1.weight, %g states(@fc1.weight.exp_avg, ...) ...
    %o = dist.swap_out_start @fc1.weight.exp_avg
    ...
    dist.wait %o
    ```

    **Chunks** (`zero-offload`'s `sub-group-size`): `chunk c of C` moves
    only chunk c of the state's C chunks of E elements each, E = ceil(n /
    C) rounded up to a multiple of 2048 elements (`dist::chunkElements`:
    whole 4096-byte blocks), the last chunk what remains: the file's bytes
    from c * E elements on, the buffer that chunk's size rounded up to
    whole blocks. The update that uses it carries `dist.chunk = array<i64:
    c, C>` and steps only those elements. A state of many GB streams through
    a buffer of one chunk.

    ```mlir
    %t = dist.swap_in_start @emb.exp_avg chunk 1 of 4
    ```

    **Constraints:**
    - `@state` names a `train.state` or `train.param` whose `dist.space`
      is `nvme`.
    - `chunk` and `chunks` come together, 0 <= chunk < chunks, chunks >= 2,
      and the chunk holds elements of the tensor's per-rank storage.
  }];
}

def Dist_SwapOutStartOp : Dist_SwapStartOp<"swap_out_start"> {
  let summary = "starts writing a swapped-in tensor back to its nvme file";
  let description = [{
    Starts writing the swap buffer of a tensor that `dist.swap_in_start`
    brought in back to the tensor's file; the buffer is freed at the
    matching `dist.wait`, and must not be read or written before it. With
    `chunk c of C`, the chunk that swap-in of the same chunk brought in.

    ```mlir
    %o = dist.swap_out_start @fc1.weight.exp_avg
    ```

    **Constraints:**
    - `@state` names a `train.state` or `train.param` whose `dist.space`
      is `nvme`.
  }];
}

def Dist_SwapReleaseOp : Op<Dist_Dialect, "swap_release", [
    MemoryEffects<[MemFree]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "frees a swapped-in tensor's buffer without writing it back";
  let description = [{
    Ends the lifetime of the swap buffer `dist.swap_in_start` filled for a
    tensor that was only read since (a stage-3 parameter's gather): its
    file still holds the same bytes, so nothing is written.

    ```mlir
    %t = dist.swap_in_start @fc1.weight
    dist.wait %t
    %w = dist.gather_param @fc1.weight on @dp : tensor<128x784xf32>
    dist.swap_release @fc1.weight
    ```

    **Constraints:**
    - `@state` names a `train.state` or `train.param` whose `dist.space`
      is `nvme`.
  }];
  let arguments = (ins FlatSymbolRefAttr:$state);
  let assemblyFormat = "$state attr-dict";
}

def Dist_UpdateWaitOp : Op<Dist_Dialect, "update_wait", [
    MemoryEffects<[MemRead, MemWrite]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "completes an asynchronous optimizer update of a parameter";
  let description = [{
    The completion of the update of `@param` marked `dist.async_update`
    before it (zero-offload, `optimizer=cpu` or `nvme`): on a device backend
    that update runs on the host (ZeRO-Offload's and ZeRO-Infinity's CPU
    step) on the runtime's host step thread, beside the work issued after
    it, and reads `gradient` (its spilled host copy, or the device gradient
    the host step stages itself: either lives until here) and, with nvme
    states, writes their swap buffers (their write-back comes after this
    op). This op blocks until the host step has run and makes the work
    issued after it wait for the parameter's upload: the parameter's new
    values are there for its next reader. zero-offload places it right
    before that reader (the parameter's all-gather at stages 1-2, a read or
    gather of it, or the end of the step), and with nvme states before the
    next op that uses swapped tensors if that comes first. On a host
    backend the update ran at its call and this is a no-op.

    ```mlir
    train.adam_update @fc1.weight, %g states(...) {dist.async_update, dist.host_gradient, ...}
    ...
    dist.update_wait @fc1.weight, %g : tensor<50176xf32>
    dist.all_gather_param @fc1.weight on @dp
    ```

    **Constraints:**
    - `@param` names a `train.param`;
    - an update of `@param` reading `gradient`, marked
      `dist.async_update`, precedes it in the block;
    - between that update and this op no op reads, gathers, swaps or
      updates `@param`, or swaps the update's chunk of its states in or out
      (checked on the update's `dist.async_update`).
  }];
  let arguments = (ins FlatSymbolRefAttr:$param,
                       AnyStaticShapeTensor:$gradient);
  let assemblyFormat = "$param `,` $gradient attr-dict `:` type($gradient)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Activation offload (ZeRO-R's Pa+cpu, zero-offload{activations=cpu})
//===----------------------------------------------------------------------===//

def Dist_OffloadActivationStartOp : Op<Dist_Dialect, "offload_activation_start", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "starts copying an activation kept for the backward pass to host memory";
  let description = [{
    ZeRO-R's Pa+cpu: starts copying `input`, a value the backward pass's
    recomputation reads (a checkpoint `train-recompute` kept), to a host
    buffer (`plan-memory` places it in the `host_activations` arena:
    `dist.staging`). The device buffer of `input` lives until the matching
    `dist.wait` (which yields nothing); the backward pass reads the value
    `dist.reload_activation_start` brings back instead. On the cuda backend
    the copy is ordered on the compute stream behind the op that made the
    value; on the cpu backend it is a memory copy.

    zero-offload's gradient spill (`optimizer=cpu`) uses the same copy for a
    final gradient: its host copy (the `host_gradients` arena) lives until
    the optimizer update that reads it, which carries `dist.host_gradient`
    and is waited for right before it; nothing reloads it.

    ```mlir
    %t = dist.offload_activation_start %h : tensor<2x8x16xf32>
    ... forward uses of %h ...
    dist.wait %t
    ```

    **Constraints:** `input` is a tensor result of an op of the same block.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input);
  let results = (outs Dist_TokenType:$token);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Dist_ReloadActivationStartOp : Op<Dist_Dialect, "reload_activation_start", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "starts copying an offloaded activation back from host memory";
  let description = [{
    Starts copying the host copy of `input` (the one its
    `dist.offload_activation_start` made) into a fresh device buffer, which
    the matching `dist.wait` yields; the backward pass reads that value.
    The operand names which host copy: it is not a read of the device
    value, whose buffer was freed at the offload's wait. The host buffer
    is freed at this op's wait.

    ```mlir
    %r = dist.reload_activation_start %h : tensor<2x8x16xf32>
    dist.wait %o
    %h2 = dist.wait %r : tensor<2x8x16xf32>
    ```

    **Constraints:** `input` is offloaded by a
    `dist.offload_activation_start` earlier in the same block, whose wait
    precedes this op.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input);
  let results = (outs Dist_TokenType:$token);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Dist_WaitOp : Op<Dist_Dialect, "wait", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "waits for an asynchronous collective or transfer and yields its results";
  let description = [{
    Blocks until the collective (or swap transfer) that produced `token`
    has completed on this rank, then yields its results: the gathered
    parameter of a `gather_param_start`, the reduced chunks of a
    `reduce_scatter_start`, the reduced tensors of an `all_reduce_start`,
    the reloaded activation of a `reload_activation_start`, nothing for an
    `all_gather_param_start`, a `swap_in_start`, a `swap_out_start` or an
    `offload_activation_start`.

    ```mlir
    %w = dist.wait %t : tensor<128x784xf32>
    ```

    **Constraints:**
    - `token` comes from a `dist.*_start` in the same block, and this is its
      only use;
    - the result types are what that start produces.
  }];
  let arguments = (ins Dist_TokenType:$token);
  let results = (outs Variadic<AnyStaticShapeTensor>:$results);
  let assemblyFormat = "$token attr-dict (`:` type($results)^)?";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The start op this wait completes (null if the token is a block
    /// argument, which the verifier rejects).
    ::mlir::Operation *getStart() { return getToken().getDefiningOp(); }
  }];
}

def Dist_ReleaseOp : Op<Dist_Dialect, "release", [MemoryEffects<[MemFree]>]> {
  let summary = "frees a gathered parameter after its last use";
  let description = [{
    Ends the lifetime of the full copy of a parameter partitioned at rest:
    its buffer is freed here. Nothing may use the value (or a reshape of
    it) afterwards. `overlap-schedule` places one right after the last use
    of every gather, and `max-live-bytes` counts gathered copies from their
    start to their release.

    ```mlir
    %w = dist.wait %t : tensor<128x784xf32>
    %y = train.matmul %x, %w ...
    dist.release %w : tensor<128x784xf32>
    ```

    **Constraints:**
    - the operand is the result of a `dist.wait` on a
      `dist.gather_param_start`, or of a `dist.gather_param`;
    - no use of it, or of a reshape of it, follows in the block.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Memory-centric tiling
//===----------------------------------------------------------------------===//

def Dist_AssembleTilesOp : Op<Dist_Dialect, "assemble_tiles", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "puts per-tile output features back in parameter order";
  let description = [{
    The operands are the outputs of one computation per tile of a
    parameter gathered with `tile j of T` (operand j for tile j), each
    with R / T features in the last dimension, in the tile's row order
    (see `dist.gather_param`). The result has the R features in the
    parameter's order: feature r*R/N + j*R/(N*T) + i comes from operand j,
    position r*R/(N*T) + i. A pure permutation (copies, no arithmetic).

    ```mlir
    %y = dist.assemble_tiles %y0, %y1 on @dp : tensor<8x64xf32>, tensor<8x64xf32> -> tensor<8x128xf32>
    ```

    **Constraints:**
    - T >= 1 operands of one type; the result has their shape with the
      last dimension T times larger, divisible by N x T.
  }];
  let arguments = (ins Variadic<AnyStaticShapeTensor>:$inputs,
                       FlatSymbolRefAttr:$grid);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $inputs `on` $grid attr-dict `:` type($inputs) `->` type($result)
  }];
}

def Dist_ExtractTileOp : Op<Dist_Dialect, "extract_tile", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the features of one tile, in the tile's row order";
  let description = [{
    The inverse of `dist.assemble_tiles` for one tile: the R / T features
    (last dimension) that tile `tile` of `tiles` of a parameter's R rows
    covers, in the order `dist.gather_param ... tile` gathers those rows.
    The backward pass of a tiled layer multiplies this slice of the output
    gradient with the tile.

    ```mlir
    %d1 = dist.extract_tile %dy tile 1 of 2 on @dp : tensor<8x128xf32> -> tensor<8x64xf32>
    ```

    **Constraints:**
    - the operand's last dimension is divisible by grid size x `tiles`;
      the result has it divided by `tiles`, other dimensions equal;
    - `tile` < `tiles`.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, I64Attr:$tile,
                       I64Attr:$tiles, FlatSymbolRefAttr:$grid);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $input `tile` $tile `of` $tiles `on` $grid attr-dict `:` type($input) `->` type($result)
  }];
}

#endif // ZTRAIN_DIALECT_DIST_DISTOPS_TD
