// fp16 dynamic loss scaling through the passes: the policy recorded by
// train-precision, the scaled seed of train-autodiff, the overflow check
// and the scaler call before the first update (train-optimizer), and the
// check moved onto the reduced gradients with one rank-agreed sum
// (zero-insert-collectives, stages 1-3; stage 0 checks the averaged
// gradients, identical on every rank).
// RUN: ztrain-opt %s --ztrain-training="precision=fp16 optimizer=adam" | FileCheck %s --check-prefix=ONE
// RUN: ztrain-opt %s --ztrain-training="precision=fp16 optimizer=adam initial-scale-power=8 loss-scale-window=50 hysteresis=1 min-loss-scale=0.25" | FileCheck %s --check-prefix=OPTS
// RUN: ztrain-opt %s --ztrain-training="precision=fp16 optimizer=adam" --ztrain-zero="stage=2 dp=2 overlap=false" | FileCheck %s --check-prefix=S2
// RUN: ztrain-opt %s --ztrain-training="precision=fp16 optimizer=adam" --ztrain-zero="stage=1 dp=2 overlap=false" | FileCheck %s --check-prefix=S1
// RUN: ztrain-opt %s --ztrain-training="precision=fp16 optimizer=adam" --ztrain-zero="stage=0 dp=2 overlap=false" | FileCheck %s --check-prefix=S0
// RUN: ztrain-opt %s --ztrain-training="precision=fp16 reduce-dtype=fp32 optimizer=sgd" | FileCheck %s --check-prefix=RED32
// RUN: ztrain-opt %s --ztrain-training="precision=bf16" | FileCheck %s --check-prefix=BF16
// RUN: ztrain-compile %s --precision=fp16 --loss-scale-window=7 --emit=mlir | FileCheck %s --check-prefix=DESC
// RUN: ztrain-opt %s --ztrain-training="precision=fp16 optimizer=adam" --ztrain-zero="stage=2 dp=4" --plan-memory --zero-report -o /dev/null 2>&1 | FileCheck %s --check-prefix=REPORT
// RUN: ztrain-opt %s --ztrain-training="precision=bf16 optimizer=adam" --ztrain-zero="stage=2 dp=4" --plan-memory --zero-report -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOREPORT

// REPORT: element types: parameters f16, gradients f16, optimizer states f32
// REPORT-NEXT: loss scaling: dynamic, initial scale 65536, doubled after 1000 clean steps, halved after 2 overflow(s), minimum 1; overflowed steps are skipped
// The flag's all-reduce: 4 bytes, 2 (N-1)/N of them on the wire per rank.
// REPORT: all_reduce 6 1
// NOREPORT-NOT: loss scaling

// ONE: module attributes {train.loss_scale = {hysteresis = 2 : i64, init = 6.553600e+04 : f64, min = 1.000000e+00 : f64, window = 1000 : i64}
// ONE: %[[S:.*]] = train.loss_scale : tensor<f32>
// ONE: train.cross_entropy_with_grad %{{.*}}, %{{.*}}, %[[S]] :
// ONE: %[[F0:.*]] = train.fill {value = 0.000000e+00 : f64} : tensor<f32>
// (In the order the backward pass makes the gradients: b's, then w's.)
// ONE-NEXT: %[[F1:.*]] = train.found_nonfinite %[[GB:.*]], %[[F0]] : tensor<3xf16>
// ONE-NEXT: %[[F2:.*]] = train.found_nonfinite %[[GW:.*]], %[[F1]] : tensor<4x3xf16>
// ONE-NEXT: train.update_loss_scale %[[F2]] : tensor<f32>
// ONE-NEXT: train.adam_update @w, %[[GW]] master(@w.master)
// ONE-NEXT: train.adam_update @b, %[[GB]] master(@b.master)
// ONE-NOT: dist.all_reduce

// OPTS: train.loss_scale = {hysteresis = 1 : i64, init = 2.560000e+02 : f64, min = 2.500000e-01 : f64, window = 50 : i64}

// Stage 2: each rank checks its shards; the flag is summed before the scaler.
// S2: %[[RB:.*]] = dist.reduce_scatter mean %{{.*}} on @dp : tensor<4xf16> -> tensor<2xf16>
// S2: %[[RW:.*]] = dist.reduce_scatter mean %{{.*}} on @dp : tensor<12xf16> -> tensor<6xf16>
// S2: %[[F1:.*]] = train.found_nonfinite %[[RB]], %{{.*}} : tensor<2xf16>
// S2-NEXT: %[[F2:.*]] = train.found_nonfinite %[[RW]], %[[F1]] : tensor<6xf16>
// S2-NEXT: %[[SUM:.*]] = dist.all_reduce sum %[[F2]] on @dp : tensor<f32>
// S2-NEXT: train.update_loss_scale %[[SUM]] : tensor<f32>
// S2-NEXT: train.adam_update @w, %[[RW]] master(@w.master)

// Stage 1: the reduce-scatters move ahead of the check, which reads shards.
// S1: %[[RW:.*]] = dist.reduce_scatter mean %{{.*}} on @dp : tensor<12xf16> -> tensor<6xf16>
// S1: %[[F1:.*]] = train.found_nonfinite %[[RW]], %{{.*}} : tensor<6xf16>
// S1: dist.all_reduce sum %{{.*}} on @dp : tensor<f32>
// S1-NEXT: train.update_loss_scale

// Stage 0: every rank checks the same averaged gradients: no sum.
// S0: %[[AW:.*]] = dist.all_reduce mean %{{.*}} on @dp : tensor<4x3xf16>
// S0: %[[F1:.*]] = train.found_nonfinite %[[AW]], %{{.*}} : tensor<4x3xf16>
// S0-NOT: dist.all_reduce sum
// S0: train.update_loss_scale
// S0-NEXT: train.adam_update @w, %[[AW]]

// Reduced in f32: the check reads the f32 gradients the update consumes.
// RED32: %[[C:.*]] = train.cast %{{.*}} : tensor<4x3xf16> to tensor<4x3xf32>
// RED32: train.found_nonfinite %[[C]], %{{.*}} : tensor<4x3xf32>
// RED32: train.update_loss_scale
// RED32-NEXT: train.sgd_update @w, %[[C]] master(@w.master)

// bf16 has fp32's range: no loss scaling.
// BF16-NOT: loss_scale
// BF16-NOT: found_nonfinite

// x [2,4] w [4,3]: the forward matmul and the weight gradient, 2 x 2 x 3 x 4 each.
// DESC: optimizer adamw lr=1.000000e-03 beta1=9.000000e-01 beta2=9.990000e-01 eps=1.000000e-08 weight_decay=0.000000e+00 no_decay=1d\0Aflops 96\0Aeval\0Alogits logits f16 2 2 3\0Aloss_scale init 65536 window 7 hysteresis 2 min 1\0A
// DESC: call @ztrt_loss_scale(
// DESC: call @ztrt_found_nonfinite(
// DESC: call @ztrt_update_loss_scale(
// DESC: call @ztrt_adam_update_master(

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
