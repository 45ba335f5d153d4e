// RUN: ztrain-opt %s --split-input-file --train-autodiff --verify-diagnostics | FileCheck %s

// A linear layer: x @ W^T. dW = dY^T x; dx is built by the matmul rule but
// removed again, because x is an input.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: -> (tensor<f32>, tensor<3x4xf32>)
// CHECK-SAME: train.gradients = [@w]
// CHECK: %[[W:.*]] = train.param_read @w
// CHECK: %[[Y:.*]] = train.matmul %[[X:.*]], %[[W]] {transpose_b}
// CHECK: %[[L:.*]] = train.cross_entropy %[[Y]], %[[LAB:.*]] :
// CHECK: %[[ONE:.*]] = train.fill {value = 1.000000e+00 : f64} : tensor<f32>
// CHECK: %[[DY:.*]] = train.cross_entropy_grad %[[ONE]], %[[Y]], %[[LAB]]
// CHECK-NOT: -> tensor<2x4xf32>
// CHECK: %[[DW:.*]] = train.matmul %[[DY]], %[[X]] {transpose_a} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<3x4xf32>
// CHECK: return %[[L]], %[[DW]]
train.param @w : tensor<3x4xf32> init(normal, 0.02)
func.func @linear(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<3x4xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  %loss = train.cross_entropy %l, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tied weights: the table is read twice (embedding and output projection);
// its gradient is the sum of both adjoints. A shared rhs applied to a
// [batch, seq, dim] activation folds the batch into one GEMM.
// CHECK-LABEL: func.func @tied
// CHECK: %[[E1:.*]] = train.param_read @wte
// CHECK: %[[H:.*]] = train.embedding %[[E1]], %[[IDS:.*]] :
// CHECK: %[[E2:.*]] = train.param_read @wte
// CHECK: %[[LOG:.*]] = train.matmul %[[H]], %[[E2]] {transpose_b}
// CHECK: %[[HF:.*]] = train.reshape %[[H]] : tensor<2x3x4xf32> -> tensor<6x4xf32>
// CHECK: %[[DLF:.*]] = train.reshape %{{.*}} : tensor<2x3x10xf32> -> tensor<6x10xf32>
// CHECK: %[[DHF:.*]] = train.matmul %[[DLF]], %[[E2]] : (tensor<6x10xf32>, tensor<10x4xf32>) -> tensor<6x4xf32>
// CHECK: %[[DE2:.*]] = train.matmul %[[DLF]], %[[HF]] {transpose_a} : (tensor<6x10xf32>, tensor<6x4xf32>) -> tensor<10x4xf32>
// CHECK: %[[DH:.*]] = train.reshape %[[DHF]] : tensor<6x4xf32> -> tensor<2x3x4xf32>
// CHECK: %[[DE1:.*]] = train.embedding_grad %[[DH]], %[[IDS]]
// CHECK: %[[SUM:.*]] = train.add %[[DE2]], %[[DE1]] : tensor<10x4xf32>
// CHECK: return %{{.*}}, %[[SUM]]
train.param @wte : tensor<10x4xf32> init(normal, 0.02)
func.func @tied(%ids: tensor<2x3xi32>, %y: tensor<2x3xi32>) -> tensor<f32> attributes {train.entry} {
  %e = train.param_read @wte : tensor<10x4xf32>
  %h = train.embedding %e, %ids : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  %e2 = train.param_read @wte : tensor<10x4xf32>
  %l = train.matmul %h, %e2 {transpose_b} : (tensor<2x3x4xf32>, tensor<10x4xf32>) -> tensor<2x3x10xf32>
  %l2 = train.reshape %l : tensor<2x3x10xf32> -> tensor<6x10xf32>
  %y2 = train.reshape %y : tensor<2x3xi32> -> tensor<6xi32>
  %loss = train.cross_entropy %l2, %y2 : (tensor<6x10xf32>, tensor<6xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A value used twice accumulates its adjoint; layer_norm yields three
// adjoints; reduce mean becomes broadcast + scale; bias_add reduces over the
// leading dims.
// CHECK-LABEL: func.func @norm
// CHECK: %[[LN:.*]] = train.layer_norm %[[X:[^,]*]], %[[G:[^,]*]], %[[B:[^ ]*]] {epsilon = 1.000000e-03 : f64}
// CHECK: %[[BA:.*]] = train.bias_add %[[LN]], %[[C:.*]] :
// CHECK: %[[M:.*]] = train.mul %[[BA]], %[[BA]]
// CHECK: %[[DM:.*]] = train.broadcast %{{.*}} [0, 1] : tensor<f32> -> tensor<2x4xf32>
// CHECK: %[[DMS:.*]] = train.scale %[[DM]] {factor = 1.250000e-01 : f64}
// CHECK: %[[P1:.*]] = train.mul %[[DMS]], %[[BA]]
// CHECK: %[[P2:.*]] = train.mul %[[DMS]], %[[BA]]
// CHECK: %[[DBA:.*]] = train.add %[[P1]], %[[P2]]
// CHECK: %[[DC:.*]] = train.reduce sum %[[DBA]] [0] : tensor<2x4xf32> -> tensor<4xf32>
// CHECK: %{{.*}}, %[[DG:.*]], %[[DB:.*]] = train.layer_norm_grad %[[DBA]], %[[X]], %[[G]] {epsilon = 1.000000e-03 : f64}
// CHECK: return %{{.*}}, %[[DG]], %[[DB]], %[[DC]]
train.param @g : tensor<4xf32> init(ones)
train.param @b : tensor<4xf32> init(zeros)
train.param @c : tensor<4xf32> init(zeros)
func.func @norm(%x: tensor<2x4xf32>) -> tensor<f32> attributes {train.entry} {
  %g = train.param_read @g : tensor<4xf32>
  %b = train.param_read @b : tensor<4xf32>
  %c = train.param_read @c : tensor<4xf32>
  %ln = train.layer_norm %x, %g, %b {epsilon = 1.0e-3 : f64} : tensor<2x4xf32>, tensor<4xf32>
  %ba = train.bias_add %ln, %c : tensor<2x4xf32>, tensor<4xf32>
  %m = train.mul %ba, %ba : tensor<2x4xf32>
  %loss = train.reduce mean %m [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Attention-style chain: transpose inverts its permutation, softmax uses
// its own result, sub negates the rhs adjoint.
// CHECK-LABEL: func.func @attn
// CHECK: %[[P:.*]] = train.softmax %{{.*}} {causal} : tensor<2x3x3xf32>
// CHECK: %[[T:.*]] = train.transpose %{{.*}} [1, 2, 0] : tensor<2x3x3xf32> -> tensor<3x3x2xf32>
// CHECK: train.transpose %{{.*}} [2, 0, 1] : tensor<3x3x2xf32> -> tensor<2x3x3xf32>
// CHECK: train.scale %{{.*}} {factor = -1.000000e+00 : f64}
// CHECK: train.softmax_grad %{{.*}}, %[[P]] : tensor<2x3x3xf32>
train.param @q : tensor<2x3x3xf32> init(normal, 1.0)
func.func @attn(%r: tensor<3x3x2xf32>) -> tensor<f32> attributes {train.entry} {
  %q = train.param_read @q : tensor<2x3x3xf32>
  %p = train.softmax %q {causal} : tensor<2x3x3xf32>
  %d = train.sub %q, %p : tensor<2x3x3xf32>
  %t = train.transpose %d [1, 2, 0] : tensor<2x3x3xf32> -> tensor<3x3x2xf32>
  %m = train.mul %t, %r : tensor<3x3x2xf32>
  %loss = train.reduce sum %m [0, 1, 2] : tensor<3x3x2xf32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A parameter the loss ignores gets a zero gradient and a warning.
// CHECK-LABEL: func.func @unused_param
// CHECK: %[[Z:.*]] = train.fill {value = 0.000000e+00 : f64} : tensor<5xf32>
// CHECK: return %{{.*}}, %{{.*}}, %[[Z]]
train.param @used : tensor<4xf32> init(ones)
// expected-warning @+1 {{the loss does not depend on @unused; its gradient is zero}}
train.param @unused : tensor<5xf32> init(ones)
func.func @unused_param(%r: tensor<4xf32>) -> tensor<f32> attributes {train.entry} {
  %u = train.param_read @used : tensor<4xf32>
  %m = train.mul %u, %r : tensor<4xf32>
  %loss = train.reduce sum %m [0] : tensor<4xf32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A constant in the forward pass (train.fill, and what is computed from it
// and the inputs alone) is on no path from a parameter: it needs no
// gradient rule, and the gradient of @w is the one without it.
// CHECK-LABEL: func.func @constant
// CHECK: %[[W:.*]] = train.param_read @w
// CHECK: %[[ONE:.*]] = train.fill {value = 1.000000e+00 : f64} : tensor<2x4xf32>
// CHECK: %[[X1:.*]] = train.add %arg0, %[[ONE]]
// CHECK: %[[H:.*]] = train.mul %[[X1]], %[[W]]
// CHECK: %[[L:.*]] = train.reduce sum %[[H]]
// CHECK: %[[SEED:.*]] = train.fill {value = 1.000000e+00 : f64} : tensor<f32>
// CHECK: %[[DH:.*]] = train.broadcast %[[SEED]]
// CHECK: %[[DW:.*]] = train.mul %[[DH]], %[[X1]]
// CHECK: return %[[L]], %[[DW]]
train.param @w : tensor<2x4xf32> init(ones)
func.func @constant(%x: tensor<2x4xf32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<2x4xf32>
  %one = train.fill {value = 1.0 : f64} : tensor<2x4xf32>
  %x1 = train.add %x, %one : tensor<2x4xf32>
  %h = train.mul %x1, %w : tensor<2x4xf32>
  %l = train.reduce sum %h [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Two dropouts with one stream drop the same elements: a warning at the
// second (the adjoints reuse the streams on purpose, without one).
// CHECK-LABEL: func.func @same_stream
train.param @w : tensor<2x4xf32> init(ones)
func.func @same_stream(%x: tensor<2x4xf32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<2x4xf32>
  %a = train.dropout %x {probability = 0.5 : f64, stream = 0 : i64} : tensor<2x4xf32>
  // expected-warning @+1 {{shares stream 0 with an earlier train.dropout (line }}
  %b = train.dropout %w {probability = 0.5 : f64, stream = 0 : i64} : tensor<2x4xf32>
  %h = train.mul %a, %b : tensor<2x4xf32>
  %l = train.reduce sum %h [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A frozen parameter (requires_grad=False): a constant of the step. No
// gradient is computed for it, the function returns none and says so in
// train.gradients, and no warning; its value still feeds the input gradient
// of the layer under it (the backward pass reads it).
// CHECK-LABEL: func.func @frozen
// CHECK-SAME: -> (tensor<f32>, tensor<3x4xf32>)
// CHECK-SAME: train.gradients = [@w]
// CHECK: %[[W:.*]] = train.param_read @w
// CHECK: %[[H:.*]] = train.matmul %[[X:.*]], %[[W]] {transpose_b}
// CHECK: %[[B:.*]] = train.param_read @base
// CHECK: %[[L:.*]] = train.matmul %[[H]], %[[B]] {transpose_b}
// CHECK: %[[DH:.*]] = train.matmul %{{.*}}, %[[B]] : (tensor<2x5xf32>, tensor<5x3xf32>) -> tensor<2x3xf32>
// CHECK-NOT: tensor<5x3xf32>
// CHECK: %[[DW:.*]] = train.matmul %[[DH]], %[[X]] {transpose_a}
// CHECK: return %{{.*}}, %[[DW]] : tensor<f32>, tensor<3x4xf32>
train.param @w : tensor<3x4xf32> init(normal, 0.02)
train.param @base : tensor<5x3xf32> init(normal, 0.02) frozen
func.func @frozen(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<3x4xf32>
  %h = train.matmul %x, %w {transpose_b} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  %b = train.param_read @base : tensor<5x3xf32>
  %l = train.matmul %h, %b {transpose_b} : (tensor<2x3xf32>, tensor<5x3xf32>) -> tensor<2x5xf32>
  %loss = train.cross_entropy %l, %y : (tensor<2x5xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
