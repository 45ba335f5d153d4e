// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=0 dp=4" --zero-insert-collectives | FileCheck %s
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=0 dp=1" | FileCheck %s --check-prefix=ONE
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=0 dp=4" --lower-to-runtime | FileCheck %s --check-prefix=LOWER
// RUN: not ztrain-opt %s --ztrain-training --ztrain-zero="stage=2 dp=4" 2>&1 | FileCheck %s --check-prefix=STAGE2
// RUN: not ztrain-opt %s --ztrain-training --zero-insert-collectives 2>&1 | FileCheck %s --check-prefix=NOPART
// RUN: not ztrain-opt %s --ztrain-training --ztrain-zero="stage=0 dp=4" --zero-insert-collectives 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=0 dp=4" --lower-to-runtime 2>&1 | FileCheck %s --check-prefix=UNSYNC

// Stage 0: each gradient is averaged right before its update.
// CHECK-LABEL: func.func @loss
// CHECK: %[[DB:.*]] = train.reduce sum
// CHECK: %[[DW:.*]] = train.matmul %{{.*}}, %{{.*}} {transpose_a}
// CHECK: %[[AW:.*]] = dist.all_reduce mean %[[DW]] on @dp : tensor<7x3xf32>
// CHECK-NEXT: train.adam_update @w, %[[AW]]
// CHECK-NEXT: %[[AB:.*]] = dist.all_reduce mean %[[DB]] on @dp : tensor<7xf32>
// CHECK-NEXT: train.adam_update @b, %[[AB]]

// ONE-NOT: dist.all_reduce

// LOWER: @ztrain_descriptor("ztrain-descriptor 1\0Agrid 4\0A
// LOWER: call @ztrt_all_reduce_f32(%{{.*}}, %{{.*}}, %{{.*}}, %c21_i64, %c1_i32)
// LOWER: call @ztrt_adam_update_f32

// STAGE2: error: zero-insert-collectives: ZeRO stage 2 is not implemented yet (stage 0 is)
// NOPART: error: the step is not partitioned: run zero-partition first
// TWICE: error: the step already has collectives
// UNSYNC: error: the gradient of this update is not synchronized over the grid: run zero-insert-collectives first

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
