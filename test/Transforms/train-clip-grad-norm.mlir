// Gradient clipping by the global norm through the passes: the chain of
// sums of squares and the clip before the first update (train-optimizer),
// after the loss-scale check in fp16, moved onto the reduced gradients with
// one rank-summed scalar (zero-insert-collectives, stages 1-3), and the
// descriptor record the runtime reads.
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam clip-grad-norm=0.5" | FileCheck %s --check-prefix=ONE
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam clip-grad-norm=0.5" --ztrain-zero="stage=3 dp=2 overlap=false" | FileCheck %s --check-prefix=S3
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam clip-grad-norm=0.5" --ztrain-zero="stage=0 dp=2 overlap=false" | FileCheck %s --check-prefix=S0
// RUN: ztrain-opt %s --ztrain-training="precision=fp16 optimizer=sgd clip-grad-norm=2" | FileCheck %s --check-prefix=F16
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" | FileCheck %s --check-prefix=NONE
// RUN: ztrain-compile %s --clip-grad-norm=0.25 --emit=mlir | FileCheck %s --check-prefix=DESC
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam clip-grad-norm=0.5" --ztrain-zero="stage=2 dp=4" --plan-memory --zero-report -o /dev/null 2>&1 | FileCheck %s --check-prefix=REPORT
// RUN: not ztrain-compile %s --clip-grad-norm=-1 -o %t.exe 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not ztrain-opt %s --ztrain-training="clip-grad-norm=-1" 2>&1 | FileCheck %s --check-prefix=NEGOPT
// RUN: not ztrain-opt %s --ztrain-training="clip-grad-norm=nan" 2>&1 | FileCheck %s --check-prefix=NAN

// The chain visits the gradients in the order the backward pass makes them
// (b's, then w's), not the updates' order, so that zero-offload can move
// each link up to its gradient without changing the sum.
// ONE: %[[GB:.*]] = train.reduce sum
// ONE-NEXT: %[[GW:.*]] = train.matmul %arg0
// ONE-NEXT: %[[Z0:.*]] = train.fill {value = 0.000000e+00 : f64} : tensor<f32>
// ONE-NEXT: %[[Z1:.*]] = train.grad_sq_norm %[[GB]], %[[Z0]] : tensor<3xf32>
// ONE-NEXT: %[[Z2:.*]] = train.grad_sq_norm %[[GW]], %[[Z1]] : tensor<4x3xf32>
// ONE-NEXT: train.clip_grad_norm %[[Z2]] {max_norm = 5.000000e-01 : f64} : tensor<f32>
// ONE-NEXT: train.adam_update @w, %[[GW]]

// S3: %[[RW:.*]] = dist.reduce_scatter mean %{{.*}} on @dp : tensor<12xf32> -> tensor<6xf32>
// S3: train.grad_sq_norm %[[RW]], %{{.*}} : tensor<6xf32>
// S3: %[[T:.*]] = dist.all_reduce sum %{{.*}} on @dp : tensor<f32>
// S3-NEXT: train.clip_grad_norm %[[T]] {max_norm = 5.000000e-01 : f64}
// S3-NEXT: train.adam_update @w, %[[RW]]

// Stage 0: every rank sums the same averaged gradients: no sum.
// S0: %[[AW:.*]] = dist.all_reduce mean %{{.*}} on @dp : tensor<4x3xf32>
// S0: train.grad_sq_norm %[[AW]], %{{.*}} : tensor<4x3xf32>
// S0-NOT: dist.all_reduce sum
// S0: train.clip_grad_norm

// fp16: the overflow check first, then the norm (divided by the scale at
// run time).
// F16: train.update_loss_scale
// F16-NEXT: %{{.*}} = train.fill {value = 0.000000e+00 : f64} : tensor<f32>
// F16-NEXT: train.grad_sq_norm %{{.*}} : tensor<3xf16>
// F16-NEXT: train.grad_sq_norm %{{.*}} : tensor<4x3xf16>
// F16-NEXT: train.clip_grad_norm %{{.*}} {max_norm = 2.000000e+00 : f64}
// F16-NEXT: train.sgd_update @w

// NONE-NOT: grad_sq_norm
// NONE-NOT: clip_grad_norm

// DESC: \0Aclip_grad_norm 0.25\0A
// DESC: call @ztrt_grad_sq_norm(
// DESC: call @ztrt_clip_grad_norm(

// The scalar's all-reduce: 4 bytes, 2 (N-1)/N of them per rank.
// REPORT: all_reduce 6 1

// The tool names the flag before any IR exists; the pass (ztrain-opt)
// names its option at the entry function.
// NEG: ztrain-compile: error: --clip-grad-norm=-1: expected a finite norm >= 0 (0: no clipping)
// NEGOPT: error: invalid adamw hyperparameter: clip-grad-norm must be finite and >= 0 (0: no clipping), got -1.000000e+00
// NAN: error: invalid adamw hyperparameter: clip-grad-norm must be finite and >= 0 (0: no clipping), got nan

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
