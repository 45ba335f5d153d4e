//===- Passes.td - ZeRO passes -----------------------------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_TRANSFORMS_PASSES_TD
#define ZTRAIN_DIALECT_DIST_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def ZeroPartition : Pass<"zero-partition", "::mlir::ModuleOp"> {
  let summary = "Decides which model states ZeRO partitions over the grid";
  let description = [{
    Runs on a complete training step (after `train-optimizer`). Declares
    the data-parallel grid `shard.grid @dp(shape = dp)` and records the
    stage as `#dist.zero` on the module. Partitioned states get a
    `#dist.partition` with shard size ceil(elements / dp):

    - stage 0: nothing is partitioned (gradients are averaged by all-reduce);
    - stage 1: the optimizer states (`train.state`);
    - stage 2: also the gradients (recorded by the stage: they are values);
    - stage 3: also the parameters (`train.param`).

    Hybrid sharding (HSDP / MiCS, `dp-replicate=R > 1`): the dp ranks form
    a mesh of `dp-shard` x R (`dp-shard` = dp / R unless given; `dp-shard`
    alone, as DeepSpeed's `mics_shard_size`, makes R = dp / dp-shard). States are
    partitioned over `shard.grid @dp_shard(shape = S)` (the grid of the
    `#dist.zero`) and replicated across `@dp_replicate(shape = R)`; the
    module's `#dist.mesh` relates them and records `ranks-per-node`, the
    node size zero-report prices links with (default: one shard group per
    node). Hybrid sharding needs stage 1, 2 or 3 (stage 0 partitions
    nothing). `ranks-per-node` alone (R = 1) adds the mesh for the link
    accounting only.

    This pass only decides the partition; `zero-insert-collectives`
    rewrites the step to match it (stage 0 so far), and `zero-report`
    prices it.

    Before:
    ```mlir
    train.param @w : tensor<1000x3xf32> init(normal, 0.02)
    train.state @w.exp_avg : tensor<1000x3xf32> of @w
    ```
    After `zero-partition{stage=1 dp=4}`:
    ```mlir
    module attributes {dist.zero = #dist.zero<stage = 1, grid = @dp>} {
      shard.grid @dp(shape = 4)
      train.param @w : tensor<1000x3xf32> init(normal, 0.02)
      train.state @w.exp_avg : tensor<1000x3xf32> of @w {dist.partition = #dist.partition<@dp, 750>}
    ```
  }];
  let dependentDialects = ["::ztrain::dist::DistDialect",
                           "::mlir::shard::ShardDialect"];
  let options = [
    Option<"stage", "stage", "int64_t", "0", "ZeRO stage: 0, 1, 2 or 3">,
    Option<"dp", "dp", "int64_t", "1", "Data-parallel grid size (ranks)">,
    Option<"dpShard", "dp-shard", "int64_t", "0",
           "Hybrid sharding: ranks a shard group partitions the states over "
           "(0: dp / dp-replicate)">,
    Option<"dpReplicate", "dp-replicate", "int64_t", "1",
           "Hybrid sharding: shard groups that replicate the states "
           "(dp = dp-shard x dp-replicate)">,
    Option<"ranksPerNode", "ranks-per-node", "int64_t", "0",
           "Consecutive ranks per node, for zero-report's intra-/inter-node "
           "bytes (0: a shard group per node with dp-replicate > 1, "
           "otherwise one node)">,
    Option<"hpzPartitionSize", "hpz-partition-size", "int64_t", "1",
           "ZeRO++ hpZ (stage 3): after the forward pass each rank keeps "
           "its shard of the gathered parameter over groups of this many "
           "consecutive ranks (a node), and the backward pass gathers "
           "inside the group (1: off)">
  ];
}

def ZeroInsertCollectives : Pass<"zero-insert-collectives", "::mlir::ModuleOp"> {
  let summary = "Inserts the collectives a partitioned step needs";
  let description = [{
    Rewrites the step partitioned by `zero-partition` so that every rank
    computes the same update as single-process training on the global
    batch (the step's inputs are one rank's micro-batch; the global batch
    is dp of them).

    - stage 0 (data parallelism): each gradient is averaged over the grid
      with one `dist.all_reduce mean` right before its update: 2 Psi (N-1)/N
      per step, the minimum for replicated states.
    - stages 1-2: each gradient is padded flat (`dist.pad_flat`) and
      reduce-scattered; the update is `sharded` (this rank's slice of the
      parameter and its states) and `dist.all_gather_param` rebuilds the
      replicated parameter in place: 2 Psi (N-1)/N.
    - stage 3: parameters rest partitioned; `dist.gather_param` gathers each
      once for the forward pass (at its first read) and once for the
      backward pass (before its first backward use): 3 Psi (N-1)/N.

    The collectives are synchronous; `overlap-schedule` turns them into
    start/wait pairs that overlap compute.

    Nothing is inserted on a grid of one rank.

    Before:
    ```mlir
    train.adam_update @w, %dw states(@w.exp_avg, @w.exp_avg_sq) {...} : tensor<7x3xf32>
    ```
    After (stage 0, dp = 4):
    ```mlir
    %0 = dist.all_reduce mean %dw on @dp : tensor<7x3xf32>
    train.adam_update @w, %0 states(@w.exp_avg, @w.exp_avg_sq) {...} : tensor<7x3xf32>
    ```
  }];
  let dependentDialects = ["::ztrain::dist::DistDialect"];
  let statistics = [
    Statistic<"numCollectives", "collectives", "Collectives inserted">
  ];
}

def ZeroReport : Pass<"zero-report", "::mlir::ModuleOp"> {
  let summary = "Per-rank memory and communication of a (partitioned) step";
  let description = [{
    An analysis: prints, without changing the IR, what one rank of the
    plan holds and moves per training step. It works at any point of the
    pipeline (before `train-optimizer` there are no optimizer states yet;
    before `zero-partition` the plan is a single replicated rank) and on
    models far larger than the machine: nothing is allocated.

    - model states per rank, by category: parameters, gradients (same
      element type as their parameter), optimizer states; partitioned
      states count their padded shard;
    - inputs: the step's micro-batch;
    - activations: the `activations` arena plan-memory gives the step,
      which is what the executable allocates. A step planned already is
      priced from its `dist.arenas`; one not planned yet is planned on a
      copy (the IR is not changed). Where it cannot be planned (a
      multi-block step) the row is the peak over the entry function of
      the bytes of live intermediate tensors, labelled `at least`:
      fragmentation can only add to it;
    - communication buffers: the largest full-size tensor a collective of
      the stage materializes at once (a gathered parameter, a gradient
      before its reduce-scatter);
    - predicted peak: the sum of the above;
    - collectives per step by kind, with counts and bytes sent per rank as
      the ZeRO paper counts them: 2 S (N-1)/N for an all-reduce of S bytes,
      S (N-1)/N for a reduce-scatter or all-gather. Stages 0-2 move 2 Psi
      (N-1)/N, stage 3 3 Psi (N-1)/N (Psi = bytes of parameters, padded).

    `format=text` prints a table, `format=json` one JSON object for tools;
    `output=FILE` writes there instead of stdout.
  }];
  let dependentDialects = ["::ztrain::dist::DistDialect"];
  let options = [
    Option<"format", "format", "::ztrain::OutputFormat",
           "::ztrain::OutputFormat::text", "text or json",
           [{::ztrain::optionValues<::ztrain::OutputFormat>()}]>,
    Option<"output", "output", "std::string", "\"-\"",
           "File to write the report to ('-': stdout)">
  ];
}

def MemoryCentricTiling : Pass<"memory-centric-tiling", "::mlir::ModuleOp"> {
  let summary = "Splits operators on huge parameters into tiles gathered alone";
  let description = [{
    ZeRO-Infinity's memory-centric tiling, decided at compile time. Runs
    after `zero-insert-collectives` on a ZeRO stage-3 step (and before
    `overlap-schedule`). Every parameter gather larger than
    `max-tile-bytes` (N padded shards) is split into T tiles, the smallest
    T with bytes / T <= `max-tile-bytes` for which the parameter's R rows
    divide into N x T; each tile is `dist.gather_param ... tile j of T`:
    chunk j of every rank's shard, so the layout at rest, the checkpoints
    and the optimizer are untouched and the T tiles together move exactly
    what one gather moves. Each use is rewritten tile by tile:

    - `train.matmul %x, %W {transpose_b}` (a linear layer, W = [out, in]):
      one matmul per tile produces R / T output features;
      `dist.assemble_tiles` puts them in order. Each output element is the
      same dot product as before.
    - `train.matmul %dy, %W` (its input gradient): each tile multiplies
      its slice of `%dy` (`dist.extract_tile`) and the partial products
      are summed (`train.add`) - the one place the arithmetic changes: the
      sum over R features is split into T partial sums.

    Uses of other shapes keep the whole gather. The weight gradient does not
    need the parameter and is reduced once, as before. With
    `overlap-schedule` every tile's gather is prefetched and released on its
    own, so the gathered working set of the layer falls by about T.
    A parameter that cannot be split (R not divisible by N x T for any T
    small enough) gets a warning and stays whole.

    After `memory-centric-tiling{max-tile-bytes=65536}` (dp = 2, W is
    256 x 256, 256 KiB):
    ```mlir
    %w0 = dist.gather_param @fc2.weight tile 0 of 4 on @dp : tensor<64x256xf32>
    %y0 = train.matmul %x, %w0 {transpose_b} : (tensor<8x256xf32>, tensor<64x256xf32>) -> tensor<8x64xf32>
    ...
    %y = dist.assemble_tiles %y0, %y1, %y2, %y3 on @dp : ... -> tensor<8x256xf32>
    ```
  }];
  let dependentDialects = ["::ztrain::dist::DistDialect",
                           "::ztrain::train::TrainDialect"];
  let options = [
    Option<"maxTileBytes", "max-tile-bytes", "int64_t", "0",
           "Largest gathered tile in bytes (0: no tiling)">
  ];
  let statistics = [
    Statistic<"numTiled", "tiled", "Parameter gathers split into tiles">,
    Statistic<"numTiles", "tiles", "Tile gathers created">
  ];
}

def OverlapSchedule : Pass<"overlap-schedule", "::mlir::ModuleOp"> {
  let summary = "Overlaps a step's collectives with its compute";
  let description = [{
    Runs after `zero-insert-collectives` on a single-block step and turns
    its synchronous collectives into asynchronous ones (a `dist.*_start`
    returning a `!dist.token`, a `dist.wait` yielding the results):

    - **Parameter gathers (stage 3).** Gathers are ordered by first use.
      The wait of each goes right before its first use and a
      `dist.release` right after its last use (through reshapes). The
      start of gather j goes right before the wait of gather
      j - `prefetch-depth` (the first ones at the earliest point), so that
      while one layer computes the next `prefetch-depth` layers' parameters
      are in flight - across the forward/backward boundary too. With
      `max-live-bytes` > 0 a start is delayed until the gathered copies
      live at once (from start to release) fit in that many bytes: the
      static form of FSDP's rate limiter and DeepSpeed's
      `stage3_max_live_parameters`. A parameter that cannot fit, even
      alone at its use, is an error that names it.
    - **reshard-after-forward=false** keeps each forward gather alive into
      the backward pass instead of gathering again: 2 Psi (N-1)/N per step
      instead of 3, for the memory of the full parameters.
    - **Gradient buckets.** Gradient reduce-scatters (all-reduces at
      stage 0) are grouped in the order their gradients become final into
      buckets of at least `bucket-bytes` bytes (0: one per gradient; a
      gradient of `bucket-bytes` or more travels alone, since packing it
      would only copy it). A bucket's start goes right after its last
      gradient is final, during the rest of the backward pass; its wait
      right before the first use of any of its results. The default, 1 MiB,
      batches the small tensors (biases, norms) and was measured faster on
      shared memory than PyTorch DDP's 25 MiB, which is sized for network
      latency (docs/benchmarks.md).
    - **Parameter all-gathers (stages 1-2)** start right after their update
      and are waited at the end of the step, so that they overlap the
      remaining updates.

    The step computes the same values: every collective sums in rank order
    whether bucketed or not. Every rank runs the same schedule (it is
    static), which `check-collectives` verifies.

    Before (stage 3, dp = 2):
    ```mlir
    %w1 = dist.gather_param @fc1.weight on @dp : tensor<16x12xf32>
    %h = train.matmul %x, %w1 ...
    %w2 = dist.gather_param @fc2.weight on @dp : tensor<5x16xf32>
    %y = train.matmul %h, %w2 ...
    ```
    After `overlap-schedule{prefetch-depth=1}`:
    ```mlir
    %t1 = dist.gather_param_start @fc1.weight on @dp
    %t2 = dist.gather_param_start @fc2.weight on @dp
    %w1 = dist.wait %t1 : tensor<16x12xf32>
    %h = train.matmul %x, %w1 ...
    dist.release %w1 : tensor<16x12xf32>
    %w2 = dist.wait %t2 : tensor<5x16xf32>
    %y = train.matmul %h, %w2 ...
    ```
  }];
  let dependentDialects = ["::ztrain::dist::DistDialect"];
  let options = [
    Option<"prefetchDepth", "prefetch-depth", "int64_t", "1",
           "Parameter gathers in flight ahead of the one being used">,
    Option<"maxLiveBytes", "max-live-bytes", "int64_t", "0",
           "Bound on the bytes of gathered parameters allocated at once "
           "(0: unbounded)">,
    Option<"bucketBytes", "bucket-bytes", "int64_t", "1048576",
           "Smallest gradient bucket in bytes (0: one collective per "
           "gradient); a gradient this large travels alone">,
    Option<"reshardAfterForward", "reshard-after-forward", "bool", "true",
           "Free gathered parameters after the forward pass and gather them "
           "again for the backward pass (stage 3)">
  ];
  let statistics = [
    Statistic<"numStarts", "starts", "Asynchronous collectives issued">,
    Statistic<"numBuckets", "buckets", "Gradient buckets (multi-tensor)">,
    Statistic<"numReleases", "releases", "Gathered parameters released">
  ];
}

def CheckCollectives : Pass<"check-collectives", "::mlir::ModuleOp"> {
  let summary = "Verifies that every rank issues the same collectives in order";
  let description = [{
    A compile-time proof obligation of a plan: every rank must issue the
    same collectives, with the same sizes, in the same order, or the job
    deadlocks or silently mixes up buffers. The step is one program run by
    every rank, so this holds when

    - every collective (synchronous, start or wait) is in the top-level
      block of the step function, not inside a region whose execution
      could differ between ranks (a branch or loop on the rank, on data);
    - every start is waited exactly once, in that block, before the step
      ends;
    - collective shapes are static (the verifiers ensure it);
    - the step calls no other function that could hide collectives.

    Anything else is an error located at the offending op, with a note at
    the region that makes it rank-dependent. The pass changes nothing.
  }];
  let dependentDialects = ["::ztrain::dist::DistDialect"];
}

def ZeroOffload : Pass<"zero-offload", "::mlir::ModuleOp"> {
  let summary = "Places optimizer states on host memory or NVMe and schedules their transfers";
  let description = [{
    ZeRO-Offload and ZeRO-Infinity's placement, with DeepSpeed's
    vocabulary. Runs on a complete, partitioned step (after
    `zero-insert-collectives` and `overlap-schedule`); every state keeps its
    ZeRO partition, only the memory it lives in changes:

    - `optimizer=cpu`: every `train.state` gets `dist.space = #dist.space<host>`:
      it lives in host memory and its update runs there (on a device
      backend, ZeRO-Offload's CPU step). Each such update's gradient is
      spilled to host memory as soon as it is final: a
      `dist.offload_activation_start` of it right after the op that makes
      it (after the accumulation boundary when it accumulates), running
      while the backward pass goes on, waited right before the update,
      which reads the host copy (`dist.host_gradient`; plan-memory's
      `host_gradients` arena). The links of gradient clipping's and the
      loss scaler's chains (`train.grad_sq_norm`, `train.found_nonfinite`)
      move up to right after their gradient's spill starts, so that no
      check keeps a spilled gradient's device copy alive to the end of the
      backward pass (the same values, in the same order). Each such update
      then moves up to right after its spill's wait (as the swapped
      updates below do), becomes asynchronous (`dist.async_update`) and
      gets a `dist.update_wait` of its parameter and gradient right before
      the parameter's next reader (its all-gather at stages 1-2, else the
      end of the step): on a device backend its host step runs on the
      runtime's host step thread beside the rest of the backward pass and
      the other updates, and its spilled gradient lives until the wait.
      On the CPU backend host memory is the device's, so the states stay
      where they are, the spill is a memory copy and the update runs at
      its call (the executable says so).

      ```mlir
      %t = dist.offload_activation_start %g : tensor<640xf32>
      ... the backward pass goes on ...
      %h = dist.wait %t : tensor<640xf32>
      train.adam_update @fc2.weight, %h states(...) {dist.async_update, dist.host_gradient, ...}
      ... the backward pass goes on, the host steps beside it ...
      dist.update_wait @fc2.weight, %h : tensor<640xf32>
      dist.all_gather_param @fc2.weight on @dp
      ```
    - `optimizer=nvme`: every `train.state` gets `#dist.space<nvme>`: it
      lives in a file of the rank's swap directory (`--nvme-path` of the
      executable) and only visits host memory for its update. Around each
      optimizer update the pass inserts, per state, a
      `dist.swap_in_start` / `dist.wait` before it and a
      `dist.swap_out_start` after it. On a device backend the update runs
      on the host, from the host swap buffers (ZeRO-Infinity's CPU step):
      the states never go to the device. The update is asynchronous
      (`dist.async_update`) with its `dist.update_wait` right before the
      next op that uses swapped tensors or names the parameter (one host
      step in flight, its device gradient staged by the runtime's host step
      thread), and the states' `dist.swap_out_start` follow that wait. So
      is a host step whose parameter is swapped (`param=nvme`, with its
      states on nvme or in host memory): its parameter's swap-out follows
      the wait.
    - `param=nvme` (stage 3): every `train.param` too; each gather of a
      parameter's shard (each read of it on one rank) reads the shard
      through a swap buffer first and releases it after
      (`dist.swap_release`: nothing is written), and its update swaps it in
      and out with its states.

    `ratio` < 1 places only part of the optimizer states (DeepSpeed's
    `offload_optimizer.ratio`, DeepCompile's partial offload): the states
    of whole updates, in step order, until that fraction of their bytes is
    placed; the others stay on the device. The plan search uses it to
    offload no more than a budget needs. `param-ratio` < 1 does the same
    for the parameter shards of `param`: whole parameters, in declaration
    order, until that fraction of their shards' bytes is placed (at least
    one); the others stay on the device and are gathered from there.

    An update whose tensors are swapped first moves up to where it can
    run: right after its gradient is final and the last read of its
    parameter (and after gradient clipping and the loss scaler's check,
    which need every gradient, and the accumulation boundary). At stages
    0-2 the updates otherwise wait for the whole backward pass; moved, their
    swaps overlap the rest of it, as ZeRO-Offload overlaps its CPU step
    with the backward pass. The update computes the same values wherever
    it runs.

    The swaps are pipelined over these uses in order with `buffer-count`
    uses' tensors in swap buffers at once: the tensors of use k are read
    `buffer-count - 2` uses ahead (at least one; the first ones at the
    start of the function, behind the forward and backward passes), and
    the write-back of use k - `buffer-count` completes before use k's read
    starts (`buffer-count=3`: one use's tensors coming in, one stepping,
    one going out; more reads further ahead with more). With 2, reads
    overlap but write-backs do not; with 1 nothing overlaps. A tensor still
    in its buffer when a later use would read it again stays there; every
    transfer completes before the function returns. `plan-memory` places
    the swap buffers (4096-byte aligned: the states' in the
    `state_swap_buffers` arena, host memory only; the parameters' in
    `swap_buffers`, which a device backend also copies to the device), so
    their bytes are in the report and the plan, like every other buffer.

    The update itself is the same kernel on the same values, so weights
    are bitwise equal with and without offload.

    ```mlir
    %t0 = dist.swap_in_start @w.exp_avg
    %t1 = dist.swap_in_start @w.exp_avg_sq
    ...
    dist.wait %t0
    dist.wait %t1
    train.adam_update @w, %g states(@w.exp_avg, @w.exp_avg_sq) {dist.async_update, ...}
    ... the backward pass goes on, the host step beside it ...
    dist.update_wait @w, %g : tensor<...>
    %o0 = dist.swap_out_start @w.exp_avg
    %o1 = dist.swap_out_start @w.exp_avg_sq
    ...
    dist.wait %o0
    dist.wait %o1
    return %loss : tensor<f32>
    ```

    `param=cpu` (stage 3) places every parameter shard in host memory
    (`#dist.space<host>`) and schedules nothing: its gathers and its update
    read and write it there (on the cuda backend, mapped pinned memory the
    kernels reach over the host link, and which a host step updates where
    it is; on the cpu backend the same memory).
    On one rank, where stage 3 gathers nothing, each op that reads a
    parameter gets a one-rank `dist.gather_param` (a copy into the
    gathered-parameter buffers) instead of reading the host shard in
    place, so the host link carries each parameter once per use, as
    zero-report prices it (`device_backend.host_to_device_per_step`:
    the gathers' shards and a device update's read;
    `device_to_host_per_step`: a device update's write).

    `activations=cpu` is ZeRO-R's Pa+cpu: every value a recomputation
    (`train.recomputed` op) reads that the forward pass made — the
    checkpoints `train-recompute` keeps — is copied to host memory right
    after it is made (`dist.offload_activation_start`, waited after its
    last forward use, which frees its device buffer) and copied back
    before the backward pass needs it (`dist.reload_activation_start`,
    issued one reload ahead: while the previous segment is recomputed),
    the backward pass reading the reloaded value. `plan-memory` places the
    host copies (the `host_activations` arena). Needs a recompute policy
    (there is nothing kept across the passes to move otherwise).

    ```mlir
    %o = dist.offload_activation_start %h : tensor<2x8x16xf32>
    ... forward uses of %h ...
    dist.wait %o
    ...
    %r = dist.reload_activation_start %h : tensor<2x8x16xf32>
    %h2 = dist.wait %r : tensor<2x8x16xf32>
    %a = train.matmul %h2, %w {train.recomputed} ...
    ```
  }];
  let dependentDialects = ["::ztrain::dist::DistDialect"];
  let options = [
    Option<"optimizer", "optimizer", "::ztrain::OffloadPlacement",
           "::ztrain::OffloadPlacement::none",
           "Where optimizer states live: none (the device), cpu (host "
           "memory) or nvme (files under the executable's --nvme-path)",
           [{::ztrain::optionValues<::ztrain::OffloadPlacement>()}]>,
    Option<"param", "param", "::ztrain::OffloadPlacement",
           "::ztrain::OffloadPlacement::none",
           "Where parameters live (stage 3): none, cpu (host memory) or "
           "nvme",
           [{::ztrain::optionValues<::ztrain::OffloadPlacement>()}]>,
    Option<"ratio", "ratio", "double", "1.0",
           "Partial offload: the fraction of the optimizer states' bytes "
           "placed by `optimizer` (whole updates' states, in step order; "
           "the rest stay on the device)">,
    Option<"paramRatio", "param-ratio", "double", "1.0",
           "Partial parameter offload: the fraction of the parameter "
           "shards' bytes placed by `param` (whole parameters, in "
           "declaration order; the rest stay on the device)">,
    Option<"activations", "activations", "::ztrain::ActivationPlacement",
           "::ztrain::ActivationPlacement::none",
           "Where the activations train-recompute keeps for the backward "
           "pass (its checkpoints) live between the passes: none (the "
           "device) or cpu (host memory; ZeRO-R's Pa+cpu, DeepSpeed's "
           "activation_checkpointing.cpu_checkpointing)",
           [{::ztrain::optionValues<::ztrain::ActivationPlacement>()}]>,
    Option<"bufferCount", "buffer-count", "int64_t", "3",
           "nvme: uses whose tensors are in swap buffers at once (1-16; "
           "3 overlaps both the reads and the write-backs with the uses; "
           "more reads further ahead)">,
    Option<"subGroupSize", "sub-group-size", "int64_t", "0",
           "nvme: an update whose states hold more elements than this is "
           "split into chunks of at most this many (rounded up to 2048), "
           "each swapped in, stepped and swapped out on its own (DeepSpeed's "
           "sub_group_size; 0: whole states); not an update whose parameter "
           "is on nvme, swapped whole with its states">
  ];
  let statistics = [
    Statistic<"numSwaps", "swaps", "Swap transfers inserted (in and out)">,
    Statistic<"numHoisted", "hoisted",
              "Optimizer updates moved into the backward pass">,
    Statistic<"numChunkedUpdates", "chunked-updates",
              "Optimizer updates split into chunks (sub-group-size)">,
    Statistic<"numOffloadedActivations", "offloaded-activations",
              "Activations copied to host memory between the passes">,
    Statistic<"numSpilledGradients", "spilled-gradients",
              "Gradients copied to host memory for a host step "
              "(optimizer=cpu)">,
    Statistic<"numHoistedChecks", "hoisted-checks",
              "Clipping and overflow-check links moved up to their "
              "spilled gradients">,
    Statistic<"numAsyncUpdates", "async-updates",
              "Host-stepped updates made asynchronous (dist.update_wait "
              "before their parameter's next reader)">
  ];
}

def PlanMemory : Pass<"plan-memory", "::mlir::ModuleOp"> {
  let summary = "Decides every step buffer's place at compile time";
  let description = [{
    Runs last before `lower-to-runtime` on a straight-line step (after
    `overlap-schedule` when there is one). Every buffer the step needs -
    each intermediate tensor, each gathered parameter (from its gather's
    start to its release), each gradient bucket's packed buffers - gets a
    lifetime (allocation point and last use, from the same analysis the
    lowering and `zero-report` use) and an offset in one arena per memory
    category: `activations`, `gathered_parameters`, `other`, and
    zero-offload's `swap_buffers` (nvme parameter shards),
    `state_swap_buffers` (nvme optimizer states; both 4096-byte aligned),
    `host_activations` and `host_gradients`. Offsets are assigned largest
    buffer first at the lowest address free during the buffer's whole
    lifetime (16-byte aligned), so buffers whose lifetimes do not overlap
    share memory.

    The result is in the IR: `dist.slots = [#dist.slot<arena, offset,
    bytes>, ...]` on each op (one per result; `unit` for results that need
    no buffer: parameter reads, aliases, persistent gradient buffers),
    `dist.staging` on bucket starts, and `dist.arenas = {name = bytes}` on
    the module. `lower-to-runtime` then allocates each arena once per step
    and addresses buffers by offset (no per-tensor allocation), and
    `zero-report` prices the step from the arenas, which is exactly what
    the executable allocates.

    The `gathered_parameters` arena never exceeds the `max-live-bytes` that
    `overlap-schedule` recorded (`dist.max_live_bytes`): if fragmentation
    would make it larger, the pass fails and names the bound.
  }];
  let dependentDialects = ["::ztrain::dist::DistDialect"];
  let statistics = [
    Statistic<"numBuffers", "buffers", "Buffers placed">,
    Statistic<"numBytes", "arena-bytes", "Bytes of all arenas">
  ];
}

#endif // ZTRAIN_DIALECT_DIST_TRANSFORMS_PASSES_TD
