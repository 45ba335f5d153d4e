// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=0 dp=4" | FileCheck %s --check-prefix=S0
// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=1 dp=4" | FileCheck %s --check-prefix=S1
// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=2 dp=4" | FileCheck %s --check-prefix=S2
// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=3 dp=4" | FileCheck %s --check-prefix=S3
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=4 dp=4" 2>&1 | FileCheck %s --check-prefix=BADSTAGE
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=1 dp=0" 2>&1 | FileCheck %s --check-prefix=BADDP
// RUN: not ztrain-opt %s --zero-partition="stage=1 dp=2" 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=1 dp=2" --zero-partition="stage=2 dp=2" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=1 dp=2" --lower-to-runtime 2>&1 | FileCheck %s --check-prefix=LOWER

// Shards are ceil(elements / dp): 7 x 3 = 21 elements -> 6 per rank (3
// elements of padding); 7 -> 2 per rank (1 of padding).

// S0: module attributes {dist.zero = #dist.zero<stage = 0, grid = @dp>
// S0: shard.grid @dp(shape = 4)
// S0-NOT: dist.partition

// S1: shard.grid @dp(shape = 4)
// S1-NEXT: train.param @w : tensor<7x3xf32> init(normal, 2.000000e-02){{$}}
// S1-NEXT: train.state @w.exp_avg : tensor<7x3xf32> of @w {dist.partition = #dist.partition<@dp, 6>}
// S1-NEXT: train.state @w.exp_avg_sq : tensor<7x3xf32> of @w {dist.partition = #dist.partition<@dp, 6>}
// S1-NEXT: train.param @b : tensor<7xf32> init(zeros){{$}}
// S1-NEXT: train.state @b.exp_avg : tensor<7xf32> of @b {dist.partition = #dist.partition<@dp, 2>}

// Stage 2 partitions gradients, which are values of the step, not symbols:
// the stage says so; the states are as in stage 1.
// S2: dist.zero = #dist.zero<stage = 2, grid = @dp>
// S2: train.param @w : tensor<7x3xf32> init(normal, 2.000000e-02){{$}}
// S2-NEXT: train.state @w.exp_avg : tensor<7x3xf32> of @w {dist.partition = #dist.partition<@dp, 6>}

// S3: train.param @w : tensor<7x3xf32> init(normal, 2.000000e-02) {dist.partition = #dist.partition<@dp, 6>}
// S3: train.param @b : tensor<7xf32> init(zeros) {dist.partition = #dist.partition<@dp, 2>}

// BADSTAGE: error: unknown ZeRO stage 4 (expected 0, 1, 2 or 3)
// BADDP: error: dp must be >= 1, got 0
// NOSTEP: error: zero-partition runs on a complete training step: run train-autodiff and train-optimizer first
// TWICE: error: the module is already partitioned: #dist.zero<stage = 1, grid = @dp>
// LOWER: error: the gradient of this update is not synchronized over the grid: run zero-insert-collectives first

train.param @w : tensor<7x3xf32> init(normal, 0.02)
train.param @b : tensor<7xf32> init(zeros)
func.func @loss(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<7x3xf32>
  %b = train.param_read @b : tensor<7xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<2x3xf32>, tensor<7x3xf32>) -> tensor<2x7xf32>
  %lb = train.bias_add %l, %b : tensor<2x7xf32>, tensor<7xf32>
  %loss = train.cross_entropy %lb, %y : (tensor<2x7xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
