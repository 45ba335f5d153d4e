// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=0 dp=4" --zero-insert-collectives | FileCheck %s --check-prefix=S0
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=1 dp=4 overlap=false" | FileCheck %s --check-prefix=S1
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=2 dp=4 overlap=false" | FileCheck %s --check-prefix=S2
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=4 overlap=false" | FileCheck %s --check-prefix=S3
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=1 overlap=false" | FileCheck %s --check-prefix=ONE
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=0 dp=4 overlap=false" --lower-to-runtime | FileCheck %s --check-prefix=LOWER0
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=1 dp=4 overlap=false" --lower-to-runtime | FileCheck %s --check-prefix=LOWER1
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=4 overlap=false" --lower-to-runtime | FileCheck %s --check-prefix=LOWER3
// RUN: not ztrain-opt %s --ztrain-training --zero-insert-collectives 2>&1 | FileCheck %s --check-prefix=NOPART
// RUN: not ztrain-opt %s --ztrain-training --ztrain-zero="stage=0 dp=4 overlap=false" --zero-insert-collectives 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=0 dp=4" --lower-to-runtime 2>&1 | FileCheck %s --check-prefix=UNSYNC
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=3 dp=4" --lower-to-runtime 2>&1 | FileCheck %s --check-prefix=UNSYNC

// A two-layer MLP: W2 is used by the forward and (for dh) by the backward
// pass; W1 only by the forward pass (dx is not needed).

// Stage 0: each gradient is averaged right before its update.
// S0-LABEL: func.func @loss
// S0: %[[DW2:.*]] = train.matmul %{{.*}}, %{{.*}} {transpose_a} : {{.*}} -> tensor<5x4xf32>
// S0: %[[DW1:.*]] = train.matmul %{{.*}}, %{{.*}} {transpose_a} : {{.*}} -> tensor<4x3xf32>
// S0: %[[A1:.*]] = dist.all_reduce mean %[[DW1]] on @dp : tensor<4x3xf32>
// S0-NEXT: train.adam_update @w1, %[[A1]]
// S0-NEXT: %[[A2:.*]] = dist.all_reduce mean %[[DW2]] on @dp : tensor<5x4xf32>
// S0-NEXT: train.adam_update @w2, %[[A2]]

// Stage 1: full gradients live until the optimizer, each in its flat
// buffer padded to 4 equal slices as soon as it is final (the tensor the
// backward pass produced dies there); at the optimizer each is
// reduce-scattered, its slice updated (states are slices), and the
// parameter's slices all-gathered in place.
// S1: %[[DW2:.*]] = train.matmul %{{.*}}, %{{.*}} {transpose_a} : {{.*}} -> tensor<5x4xf32>
// S1-NEXT: %[[F2:.*]] = dist.pad_flat %[[DW2]] : tensor<5x4xf32> -> tensor<20xf32>
// S1: %[[DW1:.*]] = train.matmul %{{.*}}, %{{.*}} {transpose_a} : {{.*}} -> tensor<4x3xf32>
// S1-NEXT: %[[F1:.*]] = dist.pad_flat %[[DW1]] : tensor<4x3xf32> -> tensor<12xf32>
// S1-NEXT: %[[SL1:.*]] = dist.reduce_scatter mean %[[F1]] on @dp : tensor<12xf32> -> tensor<3xf32>
// S1-NEXT: train.adam_update @w1, %[[SL1]] states(@w1.exp_avg, @w1.exp_avg_sq) {{{.*}}sharded{{.*}}} : tensor<3xf32>
// S1-NEXT: dist.all_gather_param @w1 on @dp
// S1-NEXT: %[[SL2:.*]] = dist.reduce_scatter mean %[[F2]] on @dp : tensor<20xf32> -> tensor<5xf32>
// S1-NEXT: train.adam_update @w2, %[[SL2]] {{.*}} : tensor<5xf32>
// S1-NEXT: dist.all_gather_param @w2 on @dp
// S1-NOT: all_reduce

// Stage 2: each gradient is reduce-scattered as soon as it is final.
// S2: %[[DW2:.*]] = train.matmul %{{.*}}, %{{.*}} {transpose_a} : {{.*}} -> tensor<5x4xf32>
// S2-NEXT: %[[F2:.*]] = dist.pad_flat %[[DW2]]
// S2-NEXT: %[[SL2:.*]] = dist.reduce_scatter mean %[[F2]]
// S2: train.adam_update @w1
// S2-NEXT: dist.all_gather_param @w1 on @dp
// S2-NEXT: train.adam_update @w2, %[[SL2]]
// S2-NEXT: dist.all_gather_param @w2 on @dp

// Stage 3: parameters rest as slices; each read is a gather before use,
// W2 gathered again for the backward pass; no all-gather after updates.
// S3: train.param @w1 : tensor<4x3xf32> init(normal, 2.000000e-02) {dist.partition = #dist.partition<@dp, 3>}
// S3: %[[G1:.*]] = dist.gather_param @w1 on @dp : tensor<4x3xf32>
// S3-NEXT: train.matmul %{{.*}}, %[[G1]] {transpose_b}
// S3: %[[G2:.*]] = dist.gather_param @w2 on @dp : tensor<5x4xf32>
// S3-NEXT: train.matmul %{{.*}}, %[[G2]] {transpose_b}
// S3: train.cross_entropy_with_grad
// S3: %[[G2B:.*]] = dist.gather_param @w2 on @dp : tensor<5x4xf32>
// S3-NEXT: train.matmul %{{.*}}, %[[G2B]] : (tensor<2x5xf32>, tensor<5x4xf32>) -> tensor<2x4xf32>
// S3-NOT: all_gather_param
// S3: train.adam_update @w1, %{{.*}} {{.*}}sharded
// S3-NOT: train.param_read

// On one rank there is nothing to communicate.
// ONE-NOT: = dist.
// ONE-NOT: dist.all_gather_param

// LOWER0: @ztrain_descriptor("ztrain-descriptor 1\0Agrid 4\0Aparam w1 f32 2 4 3 init normal 0.02\0A
// LOWER0: call @ztrt_all_reduce(%{{.*}}, %c0_i32, %{{.*}}, %{{.*}}, %c12_i64, %c1_i32, %c0_i32)

// Stage 1: padded replicated parameters, sharded states; this rank's slice
// is at rank * slice bytes.
// LOWER1: @ztrain_descriptor("ztrain-descriptor 1\0Agrid 4\0Aparam w1 f32 2 4 3 init normal 0.02 store 12 full\0Aparam w2 f32 2 5 4 init normal 0.02 store 20 full\0Agrad w1 12 f32\0Agrad w2 20 f32\0Astate w1.exp_avg f32 2 4 3 of w1 store 3 shard
// LOWER1: %[[RANK:.*]] = llvm.call @ztrt_rank(%[[CTX:.*]]) : (!llvm.ptr) -> i64
// LOWER1: call @ztrt_reduce_scatter(%[[CTX]], %c0_i32, %{{.*}}, %[[SLICE:.*]], %c3_i64, %c1_i32, %c0_i32)
// LOWER1: %[[W1:.*]] = llvm.call @ztrt_param(%[[CTX]], %c0_i64)
// LOWER1: %[[OFF:.*]] = llvm.mul %[[RANK]], %c12_i64 : i64
// LOWER1: %[[MINE:.*]] = llvm.getelementptr %[[W1]][%[[OFF]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// LOWER1: call @ztrt_adam_update(%[[CTX]], %c0_i32, %[[MINE]], %[[SLICE]], %{{.*}}, %{{.*}}, %c3_i64,
// LOWER1: call @ztrt_all_gather(%[[CTX]], %c0_i32, %{{.*}}, %{{.*}}, %c3_i64, %c0_i32)

// Stage 3: shard storage; gathers into communication buffers (category 4).
// LOWER3: param w1 f32 2 4 3 init normal 0.02 store 3 shard
// LOWER3: %[[BUF:.*]] = llvm.call @ztrt_alloc(%{{.*}}, %c48_i64, %c5_i32)
// LOWER3-NEXT: call @ztrt_all_gather(%{{.*}}, %c0_i32, %{{.*}}, %[[BUF]], %c3_i64, %c0_i32)

// NOPART: error: the step is not partitioned: run zero-partition first
// TWICE: error: the step already has collectives
// UNSYNC: error: the gradient of this update is not synchronized over the grid: run zero-insert-collectives first

train.param @w1 : tensor<4x3xf32> init(normal, 0.02)
train.param @w2 : tensor<5x4xf32> init(normal, 0.02)
func.func @loss(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w1 = train.param_read @w1 : tensor<4x3xf32>
  %h = train.matmul %x, %w1 {transpose_b} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %r = train.relu %h : tensor<2x4xf32>
  %w2 = train.param_read @w2 : tensor<5x4xf32>
  %l = train.matmul %r, %w2 {transpose_b} : (tensor<2x4xf32>, tensor<5x4xf32>) -> tensor<2x5xf32>
  %loss = train.cross_entropy %l, %y : (tensor<2x5xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
