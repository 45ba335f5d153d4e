// Gradient accumulation through the passes: train-optimizer sums each final
// gradient into its accumulator and puts the boundary before the updates;
// zero-insert-collectives reduces the sum once per step after the boundary
// at stages 0 and 1 (stage 1 accumulates the padded flat gradient) and
// every micro-batch before the accumulation at stages 2 and 3;
// overlap-schedule starts the stage-1 bucket at the boundary and keeps a
// stage-2 micro-batch's bucket in flight until the next starts; the
// lowered step branches on ztrt_accumulation_boundary; zero-report counts
// per-micro-batch collectives K times.
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam grad-accum-steps=4 clip-grad-norm=1" | FileCheck %s --check-prefix=OPT
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam grad-accum-steps=4" --ztrain-zero="stage=0 dp=2" | FileCheck %s --check-prefix=Z0
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam grad-accum-steps=4" --ztrain-zero="stage=1 dp=2" | FileCheck %s --check-prefix=Z1
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam grad-accum-steps=4" --ztrain-zero="stage=2 dp=2" | FileCheck %s --check-prefix=Z2
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam grad-accum-steps=4" --ztrain-zero="stage=1 dp=2 overlap=true" | FileCheck %s --check-prefix=OV1
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam grad-accum-steps=4" --ztrain-zero="stage=2 dp=2 overlap=true bucket-bytes=16" | FileCheck %s --check-prefix=OV2
// RUN: ztrain-compile %s --grad-accum-steps=4 --emit=mlir -o - | FileCheck %s --check-prefix=LOW
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam grad-accum-steps=4" --ztrain-zero="stage=2 dp=4" --plan-memory --zero-report -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" | FileCheck %s --check-prefix=NONE
// RUN: not ztrain-opt %s --ztrain-training="grad-accum-steps=0" 2>&1 | FileCheck %s --check-prefix=ZERO

// OPT: module attributes {train.grad_accum_steps = 4 : i64
// OPT: %[[DB:.*]] = train.reduce sum
// OPT-NEXT: %[[AB:.*]] = train.accumulate_grad @b, %[[DB]] : tensor<3xf32>
// OPT-NEXT: %[[DW:.*]] = train.matmul
// OPT-NEXT: %[[AW:.*]] = train.accumulate_grad @w, %[[DW]] : tensor<4x3xf32>
// OPT-NEXT: train.accumulation_boundary
// OPT-NEXT: train.fill
// OPT-NEXT: train.grad_sq_norm %[[AB]]
// OPT-NEXT: train.grad_sq_norm %[[AW]]
// OPT-NEXT: train.clip_grad_norm
// OPT-NEXT: train.adam_update @w, %[[AW]]
// OPT-NEXT: train.adam_update @b, %[[AB]]

// Z0: %[[AW:.*]] = train.accumulate_grad @w, %{{.*}} : tensor<4x3xf32>
// Z0-NEXT: train.accumulation_boundary
// Z0-NEXT: %[[RW:.*]] = dist.all_reduce mean %[[AW]] on @dp : tensor<4x3xf32>
// Z0-NEXT: train.adam_update @w, %[[RW]]

// Z1: %[[FB:.*]] = dist.pad_flat %{{.*}} : tensor<3xf32> -> tensor<4xf32>
// Z1-NEXT: %[[AB:.*]] = train.accumulate_grad @b, %[[FB]] : tensor<4xf32>
// Z1: train.accumulation_boundary
// Z1: dist.reduce_scatter mean %{{.*}} on @dp : tensor<12xf32> -> tensor<6xf32>
// Z1: dist.reduce_scatter mean %[[AB]] on @dp : tensor<4xf32> -> tensor<2xf32>

// Z2: %[[FB:.*]] = dist.pad_flat %{{.*}} : tensor<3xf32> -> tensor<4xf32>
// Z2-NEXT: %[[RB:.*]] = dist.reduce_scatter mean %[[FB]] on @dp : tensor<4xf32> -> tensor<2xf32>
// Z2-NEXT: %[[AB:.*]] = train.accumulate_grad @b, %[[RB]] : tensor<2xf32>
// Z2: train.accumulation_boundary
// Z2-NOT: dist.reduce_scatter
// Z2: train.adam_update @b, %[[AB]]

// OV1: train.accumulation_boundary
// OV1-NEXT: %[[ST:.*]] = dist.reduce_scatter_start mean %{{.*}}, %{{.*}} on @dp : tensor<12xf32>, tensor<4xf32>
// OV1-NEXT: dist.wait %[[ST]]

// OV2: %[[ST1:.*]] = dist.reduce_scatter_start mean %{{.*}} on @dp : tensor<4xf32>
// OV2-NEXT: train.matmul
// OV2-NEXT: dist.pad_flat
// OV2-NEXT: %[[W1:.*]] = dist.wait %[[ST1]] : tensor<2xf32>
// OV2-NEXT: train.accumulate_grad @b, %[[W1]]
// OV2-NEXT: %[[ST2:.*]] = dist.reduce_scatter_start mean %{{.*}} on @dp : tensor<12xf32>
// OV2-NEXT: %[[W2:.*]] = dist.wait %[[ST2]] : tensor<6xf32>
// OV2-NEXT: train.accumulate_grad @w, %[[W2]]
// OV2-NEXT: train.accumulation_boundary

// LOW: \0Agrad_accum 4\0A
// LOW: llvm.call @ztrt_accumulate_grad(
// LOW: llvm.call @ztrt_accumulate_grad(
// LOW-NEXT: %[[K:.*]] = llvm.call @ztrt_accumulation_boundary(%arg0) : (!llvm.ptr) -> i32
// LOW-NEXT: %[[LAST:.*]] = llvm.icmp "ne" %[[K]], %{{.*}} : i32
// LOW-NEXT: llvm.cond_br %[[LAST]], ^[[REST:.*]], ^[[SKIP:.*]]
// LOW-NEXT: ^[[SKIP]]:
// LOW-NEXT: llvm.return
// LOW-NEXT: ^[[REST]]:
// LOW: llvm.call @ztrt_adam_update(
// LOW-NOT: train.grad_accum_steps

// REPORT: gradient accumulation: 4 micro-batches per optimizer step
// Each micro-batch reduce-scatters both gradients, (3 + 1) shard elements
// x 4 bytes to each of 3 other ranks = 48 bytes, 4 times a step; the
// parameter all-gathers after the updates run once.
// REPORT: reduce_scatter 192 8
// REPORT-NEXT: all_gather 48 2

// NONE-NOT: accumulate_grad
// NONE-NOT: accumulation_boundary
// NONE-NOT: grad_accum

// ZERO: error: grad-accum-steps must be in [1, 2^30], got 0

train.param @w : tensor<4x3xf32> init(normal, 0.2)
train.param @b : tensor<3xf32> init(zeros)
func.func @loss(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4x3xf32>
  %b = train.param_read @b : tensor<3xf32>
  %h = train.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %hb = train.bias_add %h, %b : tensor<2x3xf32>, tensor<3xf32>
  %l = train.cross_entropy %hb, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
