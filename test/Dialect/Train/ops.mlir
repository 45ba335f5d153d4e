// RUN: ztrain-opt %s | ztrain-opt | FileCheck %s
// RUN: ztrain-opt %s --mlir-print-op-generic | ztrain-opt | FileCheck %s

// CHECK: train.param @w : tensor<4x3xf32> init(normal, 2.000000e-02)
train.param @w : tensor<4x3xf32> init(normal, 0.02)
// CHECK: train.param @b : tensor<4xf32> init(zeros)
train.param @b : tensor<4xf32> init(zeros)
// CHECK: train.param @frozen : tensor<4xf32> init(ones) frozen
train.param @frozen : tensor<4xf32> init(ones) frozen
// CHECK: train.param @g : tensor<4xf32> init(ones)
train.param @g : tensor<4xf32> init(ones)
// CHECK: train.param @e : tensor<10x4xf32> init(uniform, 1.000000e-01)
train.param @e : tensor<10x4xf32> init(uniform, 0.1)
// CHECK: train.state @w.exp_avg : tensor<4x3xf32> of @w
train.state @w.exp_avg : tensor<4x3xf32> of @w
train.state @w.exp_avg_sq : tensor<4x3xf32> of @w
train.state @b.momentum_buffer : tensor<4xf32> of @b

// CHECK-LABEL: func.func @all_ops
func.func @all_ops(%x: tensor<2x5x3xf32> {train.name = "x"}, %ids: tensor<2x5xi32>,
                   %y: tensor<10xi32>) -> tensor<f32> attributes {train.entry} {
  // CHECK: train.param_read @w : tensor<4x3xf32>
  %w = train.param_read @w : tensor<4x3xf32>
  %b = train.param_read @b : tensor<4xf32>
  %g = train.param_read @g : tensor<4xf32>
  %e = train.param_read @e : tensor<10x4xf32>
  // CHECK: train.matmul %{{.*}}, %{{.*}} {transpose_b} : (tensor<2x5x3xf32>, tensor<4x3xf32>) -> tensor<2x5x4xf32>
  %h = train.matmul %x, %w {transpose_b} : (tensor<2x5x3xf32>, tensor<4x3xf32>) -> tensor<2x5x4xf32>
  // CHECK: train.bias_add %{{.*}}, %{{.*}} : tensor<2x5x4xf32>, tensor<4xf32>
  %hb = train.bias_add %h, %b : tensor<2x5x4xf32>, tensor<4xf32>
  // CHECK: train.relu %{{.*}} : tensor<2x5x4xf32>
  %r = train.relu %hb : tensor<2x5x4xf32>
  // CHECK: train.gelu
  %ge = train.gelu %r : tensor<2x5x4xf32>
  // CHECK: train.add
  %a = train.add %ge, %hb : tensor<2x5x4xf32>
  // CHECK: train.sub
  %s = train.sub %a, %hb : tensor<2x5x4xf32>
  // CHECK: train.mul
  %m = train.mul %s, %a : tensor<2x5x4xf32>
  // CHECK: train.scale %{{.*}} {factor = 5.000000e-01 : f64} : tensor<2x5x4xf32>
  %sc = train.scale %m {factor = 0.5 : f64} : tensor<2x5x4xf32>
  // CHECK: train.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 1.000000e-03 : f64} : tensor<2x5x4xf32>, tensor<4xf32>
  %ln = train.layer_norm %sc, %g, %b {epsilon = 1.0e-3 : f64} : tensor<2x5x4xf32>, tensor<4xf32>
  // CHECK: train.embedding %{{.*}}, %{{.*}} : (tensor<10x4xf32>, tensor<2x5xi32>) -> tensor<2x5x4xf32>
  %em = train.embedding %e, %ids : (tensor<10x4xf32>, tensor<2x5xi32>) -> tensor<2x5x4xf32>
  %sum = train.add %ln, %em : tensor<2x5x4xf32>
  // CHECK: train.transpose %{{.*}} [0, 2, 1] : tensor<2x5x4xf32> -> tensor<2x4x5xf32>
  %t = train.transpose %sum [0, 2, 1] : tensor<2x5x4xf32> -> tensor<2x4x5xf32>
  // CHECK: train.matmul %{{.*}}, %{{.*}} : (tensor<2x5x4xf32>, tensor<2x4x5xf32>) -> tensor<2x5x5xf32>
  %sq = train.matmul %sum, %t : (tensor<2x5x4xf32>, tensor<2x4x5xf32>) -> tensor<2x5x5xf32>
  // CHECK: train.softmax %{{.*}} {causal} : tensor<2x5x5xf32>
  %p = train.softmax %sq {causal} : tensor<2x5x5xf32>
  // CHECK: train.reduce mean %{{.*}} [2] : tensor<2x5x5xf32> -> tensor<2x5xf32>
  %rm = train.reduce mean %p [2] : tensor<2x5x5xf32> -> tensor<2x5xf32>
  // CHECK: train.broadcast %{{.*}} [2] : tensor<2x5xf32> -> tensor<2x5x10xf32>
  %bc = train.broadcast %rm [2] : tensor<2x5xf32> -> tensor<2x5x10xf32>
  // CHECK: train.reshape %{{.*}} : tensor<2x5x10xf32> -> tensor<10x10xf32>
  %logits = train.reshape %bc : tensor<2x5x10xf32> -> tensor<10x10xf32>
  // CHECK: train.cross_entropy %{{.*}}, %{{.*}} : (tensor<10x10xf32>, tensor<10xi32>) -> tensor<f32>
  %loss = train.cross_entropy %logits, %y : (tensor<10x10xf32>, tensor<10xi32>) -> tensor<f32>
  // CHECK: train.cross_entropy %{{.*}}, %{{.*}} {ignore_index = -100 : i64} : (tensor<10x10xf32>, tensor<10xi32>) -> tensor<f32>
  %masked = train.cross_entropy %logits, %y {ignore_index = -100 : i64} : (tensor<10x10xf32>, tensor<10xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @backward_ops
func.func @backward_ops(%dy: tensor<2x5x4xf32>, %x: tensor<2x5x4xf32>, %g: tensor<4xf32>,
                        %p: tensor<3x3xf32>, %dl: tensor<f32>, %l: tensor<6x10xf32>,
                        %y: tensor<6xi32>, %ids: tensor<2x5xi32>) {
  // CHECK: train.relu_grad %{{.*}}, %{{.*}} : tensor<2x5x4xf32>
  %0 = train.relu_grad %dy, %x : tensor<2x5x4xf32>
  // CHECK: train.gelu_grad
  %1 = train.gelu_grad %dy, %x : tensor<2x5x4xf32>
  // CHECK: train.softmax_grad %{{.*}}, %{{.*}} : tensor<3x3xf32>
  %2 = train.softmax_grad %p, %p : tensor<3x3xf32>
  // CHECK: train.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x5x4xf32>, tensor<4xf32>
  %3:3 = train.layer_norm_grad %dy, %x, %g {epsilon = 1.0e-5 : f64} : tensor<2x5x4xf32>, tensor<4xf32>
  // CHECK: train.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} : (tensor<f32>, tensor<6x10xf32>, tensor<6xi32>) -> tensor<6x10xf32>
  %4 = train.cross_entropy_grad %dl, %l, %y : (tensor<f32>, tensor<6x10xf32>, tensor<6xi32>) -> tensor<6x10xf32>
  // CHECK: train.embedding_grad %{{.*}}, %{{.*}} : (tensor<2x5x4xf32>, tensor<2x5xi32>) -> tensor<10x4xf32>
  %5 = train.embedding_grad %dy, %ids : (tensor<2x5x4xf32>, tensor<2x5xi32>) -> tensor<10x4xf32>
  // CHECK: train.fill {value = 0.000000e+00 : f64} : tensor<4x3xf32>
  %6 = train.fill {value = 0.0 : f64} : tensor<4x3xf32>
  // CHECK: train.adam_update @w, %{{.*}} states(@w.exp_avg, @w.exp_avg_sq) {{{.*}}decoupled{{.*}}} : tensor<4x3xf32>
  train.adam_update @w, %6 states(@w.exp_avg, @w.exp_avg_sq) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, decoupled} : tensor<4x3xf32>
  // CHECK: train.sgd_update @b, %{{.*}} momentum_buffer(@b.momentum_buffer) {{{.*}}momentum = 9.000000e-01{{.*}}} : tensor<4xf32>
  train.sgd_update @b, %g momentum_buffer(@b.momentum_buffer) {lr = 0.1 : f64, momentum = 0.9 : f64, nesterov} : tensor<4xf32>
  // CHECK: train.sgd_update @b, %{{.*}} {lr = 1.000000e-01 : f64} : tensor<4xf32>
  train.sgd_update @b, %g {lr = 0.1 : f64} : tensor<4xf32>
  return
}

// Compute ops take bf16 and f16 tensors as they take f32 ones; the loss of
// a cross-entropy stays f32.
// CHECK-LABEL: func.func @low_precision
func.func @low_precision(%x: tensor<2x5x4xbf16>, %w: tensor<3x4xbf16>, %g: tensor<4xbf16>, %h: tensor<6x10xf16>, %y: tensor<6xi32>) -> tensor<f32> {
  // CHECK: train.matmul %{{.*}}, %{{.*}} {transpose_b} : (tensor<2x5x4xbf16>, tensor<3x4xbf16>) -> tensor<2x5x3xbf16>
  %0 = train.matmul %x, %w {transpose_b} : (tensor<2x5x4xbf16>, tensor<3x4xbf16>) -> tensor<2x5x3xbf16>
  // CHECK: train.layer_norm %{{.*}} : tensor<2x5x4xbf16>, tensor<4xbf16>
  %1 = train.layer_norm %x, %g, %g : tensor<2x5x4xbf16>, tensor<4xbf16>
  // CHECK: train.gelu %{{.*}} : tensor<6x10xf16>
  %2 = train.gelu %h : tensor<6x10xf16>
  // CHECK: train.cross_entropy %{{.*}} : (tensor<6x10xf16>, tensor<6xi32>) -> tensor<f32>
  %3 = train.cross_entropy %2, %y : (tensor<6x10xf16>, tensor<6xi32>) -> tensor<f32>
  return %3 : tensor<f32>
}

// Mixed precision: a bf16 parameter with its f32 master copy and moments,
// casts, and the master-weight update.
// CHECK-LABEL: train.param @mp.w : tensor<4x8xbf16>
// CHECK: train.state @mp.w.master : tensor<4x8xf32> of @mp.w master
// CHECK: train.state @mp.w.m : tensor<4x8xf32> of @mp.w
// CHECK-NOT: master
// CHECK: train.cast %{{.*}} : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK: train.adam_update @mp.w, %{{.*}} master(@mp.w.master) states(@mp.w.m, @mp.w.v)
// CHECK: train.sgd_update @mp.w, %{{.*}} master(@mp.w.master) {lr
train.param @mp.w : tensor<4x8xbf16> init(normal, 0.02)
train.state @mp.w.master : tensor<4x8xf32> of @mp.w master
train.state @mp.w.m : tensor<4x8xf32> of @mp.w
train.state @mp.w.v : tensor<4x8xf32> of @mp.w
func.func @mixed(%x: tensor<4x8xf32>, %g: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  %xb = train.cast %x : tensor<4x8xf32> to tensor<4x8xbf16>
  %g32 = train.cast %g : tensor<4x8xbf16> to tensor<4x8xf32>
  train.adam_update @mp.w, %g32 master(@mp.w.master) states(@mp.w.m, @mp.w.v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64} : tensor<4x8xf32>
  train.sgd_update @mp.w, %g master(@mp.w.master) {lr = 1.0e-1 : f64} : tensor<4x8xbf16>
  return %xb : tensor<4x8xbf16>
}
