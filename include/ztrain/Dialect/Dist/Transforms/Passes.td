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
    Option<"dp", "dp", "int64_t", "1", "Data-parallel grid size (ranks)">
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
    - stages 1-3: not implemented yet (the pass says so and fails).

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
    - activations: the peak over the straight-line entry function of the
      bytes of live intermediate tensors (parameter reads and reshapes
      alias storage and are not counted);
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
    Option<"format", "format", "std::string", "\"text\"", "text or json">,
    Option<"output", "output", "std::string", "\"-\"",
           "File to write the report to ('-': stdout)">
  ];
}

#endif // ZTRAIN_DIALECT_DIST_TRANSFORMS_PASSES_TD
