// RUN: ztrain-opt %s --train-autodiff --train-optimizer | FileCheck %s --check-prefix=ADAMW
// RUN: ztrain-opt %s --train-autodiff --train-optimizer="kind=adam lr=0.01 weight-decay=0.1" | FileCheck %s --check-prefix=ADAM
// RUN: ztrain-opt %s --train-autodiff --train-optimizer="kind=sgd lr=0.1 momentum=0.9 nesterov=true" | FileCheck %s --check-prefix=SGDM
// RUN: ztrain-opt %s --train-autodiff --train-optimizer="kind=sgd lr=0.5" | FileCheck %s --check-prefix=SGD
// RUN: ztrain-opt %s --ztrain-training="optimizer=sgd lr=0.5" | FileCheck %s --check-prefix=SGD
// RUN: ztrain-opt %s --ztrain-training="optimizer=adamw weight-decay=0.1 no-decay=none" | FileCheck %s --check-prefix=ALL
// RUN: ztrain-compile %s --weight-decay=0.1 --emit=mlir -o - | FileCheck %s --check-prefix=HYPER
// RUN: not ztrain-opt %s --ztrain-training="no-decay=bias" 2>&1 | FileCheck %s --check-prefix=BADGROUP

// States follow their parameter, in declaration order.
// ADAMW: module attributes {train.optimizer = "adamw lr=1.000000e-03 beta1=9.000000e-01 beta2=9.990000e-01 eps=1.000000e-08 weight_decay=0.000000e+00 no_decay=1d"}
// ADAMW-NEXT: train.param @w
// ADAMW-NEXT: train.state @w.exp_avg : tensor<3x4xf32> of @w
// ADAMW-NEXT: train.state @w.exp_avg_sq : tensor<3x4xf32> of @w
// ADAMW-NEXT: train.param @b
// ADAMW-NEXT: train.state @b.exp_avg : tensor<3xf32> of @b
// ADAMW-NEXT: train.state @b.exp_avg_sq : tensor<3xf32> of @b
// ADAMW-LABEL: func.func @loss
// ADAMW-SAME: -> tensor<f32> attributes {train.entry, train.step}
// ADAMW: train.adam_update @w, %{{.*}} states(@w.exp_avg, @w.exp_avg_sq) {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decoupled, epsilon = 1.000000e-08 : f64, lr = 1.000000e-03 : f64} : tensor<3x4xf32>
// ADAMW-NEXT: train.adam_update @b, %{{.*}} states(@b.exp_avg, @b.exp_avg_sq)
// ADAMW-NEXT: return %{{.*}} : tensor<f32>

// The matrix decays, the bias (rank 1) is in the no-decay group.
// ADAM-LABEL: func.func @loss
// ADAM: train.adam_update @w, %{{.*}} states(@w.exp_avg, @w.exp_avg_sq) {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, epsilon = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, weight_decay = 1.000000e-01 : f64} : tensor<3x4xf32>
// ADAM-NEXT: train.adam_update @b, %{{.*}} states(@b.exp_avg, @b.exp_avg_sq) {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, epsilon = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, no_decay} : tensor<3xf32>

// no-decay=none: one group, every parameter decays.
// ALL: no_decay=none
// ALL: train.adam_update @w, {{.*}}weight_decay = 1.000000e-01 : f64}
// ALL-NEXT: train.adam_update @b, {{.*}}weight_decay = 1.000000e-01 : f64}

// The lowered updates ask the run for beta1, beta2, eps (ids 0-2) and, for
// the decaying matrix, the weight decay (id 3, compiled 0.1); the bias gets
// a constant 0.
// HYPER-DAG: %[[B1:.*]] = llvm.mlir.constant(9.000000e-01 : f64) : f64
// HYPER-DAG: %[[WD:.*]] = llvm.mlir.constant(1.000000e-01 : f64) : f64
// HYPER-DAG: %[[ZERO:.*]] = llvm.mlir.constant(0.000000e+00 : f64) : f64
// HYPER-DAG: %[[ID3:.*]] = llvm.mlir.constant(3 : i32) : i32
// HYPER: llvm.call @ztrt_hyper(%arg0, %{{.*}}, %[[B1]])
// HYPER: %[[W:.*]] = llvm.call @ztrt_hyper(%arg0, %[[ID3]], %[[WD]])
// HYPER-NEXT: llvm.call @ztrt_adam_update({{.*}}, %[[W]], %{{.*}})
// HYPER: llvm.call @ztrt_adam_update({{.*}}, %[[ZERO]], %{{.*}})

// BADGROUP: for the --no-decay option: Cannot find option named 'bias'!

// SGDM: train.state @w.momentum_buffer : tensor<3x4xf32> of @w
// SGDM: train.state @b.momentum_buffer : tensor<3xf32> of @b
// SGDM: train.sgd_update @w, %{{.*}} momentum_buffer(@w.momentum_buffer) {lr = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, nesterov} : tensor<3x4xf32>

// SGD-NOT: train.state
// SGD: train.sgd_update @w, %{{.*}} {lr = 5.000000e-01 : f64} : tensor<3x4xf32>
// SGD-NEXT: train.sgd_update @b, %{{.*}} {lr = 5.000000e-01 : f64, no_decay} : tensor<3xf32>

train.param @w : tensor<3x4xf32> init(normal, 0.02)
train.param @b : tensor<3xf32> init(zeros)
func.func @loss(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<3x4xf32>
  %b = train.param_read @b : tensor<3xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  %lb = train.bias_add %l, %b : tensor<2x3xf32>, tensor<3xf32>
  %loss = train.cross_entropy %lb, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
