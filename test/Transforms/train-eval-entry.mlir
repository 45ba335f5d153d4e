// The forward-only evaluation function: train-eval-entry copies the entry
// before autodiff with dropout removed; the step is unaffected; ZeRO stage 3
// gathers its parameters at their first read; plan-memory plans it into the
// step's arenas; the lowering makes ztrain_eval and an `eval` record; an
// existing evaluation function or a differentiated entry are refused.
// RUN: ztrain-opt %s --train-eval-entry | FileCheck %s --check-prefix=COPY
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=2" | FileCheck %s --check-prefix=S3
// RUN: ztrain-opt %s --ztrain-training --plan-memory | FileCheck %s --check-prefix=PLAN
// RUN: ztrain-compile %s --emit=mlir -o - | FileCheck %s --check-prefix=LOW
// RUN: ztrain-opt %s --ztrain-training="eval=false" | FileCheck %s --check-prefix=NONE
// RUN: not ztrain-opt %s --train-eval-entry --train-eval-entry 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not ztrain-opt %s --train-autodiff --train-eval-entry 2>&1 | FileCheck %s --check-prefix=LATE

// COPY-LABEL: func.func @loss(
// COPY: train.dropout
// COPY-LABEL: func.func @loss_eval(%arg0: tensor<2x4xf32>, %arg1: tensor<2xi32>) -> tensor<f32> attributes {train.eval}
// COPY-NEXT: %[[W:.*]] = train.param_read @w
// COPY-NEXT: %[[B:.*]] = train.param_read @b
// COPY-NEXT: %[[H:.*]] = train.matmul %arg0, %[[W]]
// COPY-NEXT: %[[HB:.*]] = train.bias_add %[[H]], %[[B]]
// COPY-NEXT: %[[L:.*]] = train.cross_entropy %[[HB]], %arg1
// COPY-NEXT: return %[[L]] : tensor<f32>
// The loss is a cross-entropy: a logits function for sampling, the
// cross-entropy and what only fed it gone.
// COPY-LABEL: func.func @loss_logits(%arg0: tensor<2x4xf32>, %arg1: tensor<2xi32>) -> tensor<2x3xf32> attributes {train.logits}
// COPY: %[[LB:.*]] = train.bias_add
// COPY-NEXT: return %[[LB]] : tensor<2x3xf32>

// S3-LABEL: func.func @loss_eval
// S3-NEXT: dist.gather_param @w on @dp : tensor<4x3xf32>
// S3-NEXT: dist.gather_param @b on @dp : tensor<3xf32>
// S3-LABEL: func.func @loss_logits
// S3-NEXT: dist.gather_param @w on @dp : tensor<4x3xf32>
// S3-NOT: train.param_read
// S3-NOT: _update

// Both functions' buffers have slots in the one set of arenas (the
// first matmul of each at offset 0: they never run at once).
// PLAN: dist.arenas = {activations =
// PLAN-LABEL: func.func @loss(
// PLAN: train.matmul {{.*}}dist.slots = [#dist.slot<"activations", 0, 24>]
// PLAN-LABEL: func.func @loss_eval(
// PLAN: train.matmul {{.*}}dist.slots = [#dist.slot<"activations", 0, 24>]

// LOW: \0Aeval\0Alogits logits f32 2 2 3\0A
// LOW: llvm.func @ztrain_step(
// LOW: llvm.func @ztrain_eval(
// LOW-NOT: ztrt_dropout
// LOW: llvm.call @ztrt_set_loss(
// LOW: llvm.func @ztrain_logits(
// LOW-NOT: ztrt_set_loss
// LOW: llvm.call @ztrt_set_output(

// NONE-NOT: train.eval

// TWICE: error: the module already has an evaluation function
// LATE: error: train-eval-entry copies the forward pass, but @{{.*}} is already differentiated: run it before train-autodiff, and the training pipeline once

train.param @w : tensor<4x3xf32> init(normal, 0.2)
train.param @b : tensor<3xf32> init(zeros)
func.func @loss(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4x3xf32>
  %b = train.param_read @b : tensor<3xf32>
  %h = train.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %d = train.dropout %h {probability = 0.1 : f64, stream = 0 : i64} : tensor<2x3xf32>
  %hb = train.bias_add %d, %b : tensor<2x3xf32>, tensor<3xf32>
  %l = train.cross_entropy %hb, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
