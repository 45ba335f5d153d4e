// RUN: ztrain-opt %s --split-input-file --train-autodiff | FileCheck %s

// The gradient rules of the ops Llama-class models need. Each rule's
// numbers are checked against finite differences and PyTorch autograd in
// test/e2e/test_gradcheck.py; this file pins the ops each rule builds.

// exp: dy * y; sqrt: (dy / y) * 0.5; div: da = dy / b, db = -(da * (a / b)).
// CHECK-LABEL: func.func @div_sqrt_exp
// CHECK: %[[A:.*]] = train.param_read @a
// CHECK: %[[B:.*]] = train.param_read @b
// CHECK: %[[Q:.*]] = train.div %[[A]], %[[B]]
// CHECK: %[[S:.*]] = train.sqrt %[[Q]]
// CHECK: %[[E:.*]] = train.exp %[[S]]
// CHECK: %[[DE:.*]] = train.broadcast
// CHECK: %[[DS:.*]] = train.mul %[[DE]], %[[E]]
// CHECK: %[[H:.*]] = train.div %[[DS]], %[[S]]
// CHECK: %[[DQ:.*]] = train.scale %[[H]] {factor = 5.000000e-01 : f64}
// CHECK: %[[DA:.*]] = train.div %[[DQ]], %[[B]]
// CHECK: %[[P:.*]] = train.mul %[[DA]], %[[Q]]
// CHECK: %[[DB:.*]] = train.neg %[[P]]
// CHECK: return %{{.*}}, %[[DA]], %[[DB]]
train.param @a : tensor<2x4xf32> init(normal, 1.0)
train.param @b : tensor<2x4xf32> init(normal, 1.0)
func.func @div_sqrt_exp() -> tensor<f32> attributes {train.entry} {
  %a = train.param_read @a : tensor<2x4xf32>
  %b = train.param_read @b : tensor<2x4xf32>
  %q = train.div %a, %b : tensor<2x4xf32>
  %s = train.sqrt %q : tensor<2x4xf32>
  %e = train.exp %s : tensor<2x4xf32>
  %l = train.reduce sum %e [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// silu: silu_grad(dy, x); sigmoid and rsqrt: their grad ops on the result;
// neg: neg; max: reduce_max_grad(dy, x, y).
// CHECK-LABEL: func.func @activations
// CHECK: %[[X:.*]] = train.param_read @x
// CHECK: %[[N:.*]] = train.neg %[[X]]
// CHECK: %[[SI:.*]] = train.silu %[[N]]
// CHECK: %[[SG:.*]] = train.sigmoid %[[SI]]
// CHECK: %[[R:.*]] = train.rsqrt %[[SG]]
// CHECK: %[[M:.*]] = train.reduce max %[[R]] [1] : tensor<2x4xf32> -> tensor<2xf32>
// CHECK: %[[DM:.*]] = train.broadcast
// CHECK: %[[DR:.*]] = train.reduce_max_grad %[[DM]], %[[R]], %[[M]] [1] : tensor<2xf32>, tensor<2x4xf32>
// CHECK: %[[DSG:.*]] = train.rsqrt_grad %[[DR]], %[[R]]
// CHECK: %[[DSI:.*]] = train.sigmoid_grad %[[DSG]], %[[SG]]
// CHECK: %[[DN:.*]] = train.silu_grad %[[DSI]], %[[N]]
// CHECK: %[[DX:.*]] = train.neg %[[DN]]
// CHECK: return %{{.*}}, %[[DX]]
train.param @x : tensor<2x4xf32> init(normal, 1.0)
func.func @activations() -> tensor<f32> attributes {train.entry} {
  %x = train.param_read @x : tensor<2x4xf32>
  %n = train.neg %x : tensor<2x4xf32>
  %si = train.silu %n : tensor<2x4xf32>
  %sg = train.sigmoid %si : tensor<2x4xf32>
  %r = train.rsqrt %sg : tensor<2x4xf32>
  %m = train.reduce max %r [1] : tensor<2x4xf32> -> tensor<2xf32>
  %l = train.reduce sum %m [0] : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// rms_norm: one rms_norm_grad for x and gamma; RoPE: the inverse rotation;
// masked_fill: the same mask filled with 0 (the mask gets no gradient).
// CHECK-LABEL: func.func @norm_rope_mask
// CHECK: %[[RN:.*]] = train.rms_norm %[[X:.*]], %[[G:.*]] {epsilon = 9.9999999999999995E-7 : f64}
// CHECK: %[[RO:.*]] = train.rotary_embedding %[[RN]] {seq_dim = 1 : i64, theta = 5.000000e+05 : f64}
// CHECK: train.masked_fill %[[RO]], %[[MASK:[^ ]*]] {value = 0xFFF0000000000000 : f64}
// CHECK: %[[DRO:.*]] = train.masked_fill %{{.*}}, %[[MASK]] {value = 0.000000e+00 : f64}
// CHECK: %[[DRN:.*]] = train.rotary_embedding %[[DRO]] {inverse, seq_dim = 1 : i64, theta = 5.000000e+05 : f64}
// CHECK: %{{.*}}, %[[DG:.*]] = train.rms_norm_grad %[[DRN]], %[[X]], %[[G]] {epsilon = 9.9999999999999995E-7 : f64}
// CHECK: return %{{.*}}, %[[DG]]
train.param @g : tensor<8xf32> init(ones)
func.func @norm_rope_mask(%x: tensor<2x4x2x8xf32>, %mask: tensor<2x4x2x8xi32>) -> tensor<f32> attributes {train.entry} {
  %g = train.param_read @g : tensor<8xf32>
  %rn = train.rms_norm %x, %g {epsilon = 1.0e-6 : f64} : tensor<2x4x2x8xf32>, tensor<8xf32>
  %ro = train.rotary_embedding %rn {seq_dim = 1 : i64, theta = 500000.0 : f64} : tensor<2x4x2x8xf32>
  %mf = train.masked_fill %ro, %mask {value = 0xFFF0000000000000 : f64} : tensor<2x4x2x8xf32>, tensor<2x4x2x8xi32>
  %l = train.reduce max %mf [0, 1, 2, 3] : tensor<2x4x2x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// slice: slice_grad at the same place; concat: one slice of dy per operand,
// at the operand's offset; the two adjoints of the shared value add up.
// CHECK-LABEL: func.func @slice_concat
// CHECK: %[[W:.*]] = train.param_read @w
// CHECK: %[[S:.*]] = train.slice %[[W]] {dim = 1 : i64, start = 1 : i64} : tensor<2x5xf32> -> tensor<2x3xf32>
// CHECK: %[[C:.*]] = train.concat %[[W]], %[[S]] {dim = 1 : i64}
// CHECK: %[[DC:.*]] = train.broadcast
// CHECK-DAG: %[[D0:.*]] = train.slice %[[DC]] {dim = 1 : i64, start = 0 : i64} : tensor<2x8xf32> -> tensor<2x5xf32>
// CHECK-DAG: %[[D1:.*]] = train.slice %[[DC]] {dim = 1 : i64, start = 5 : i64} : tensor<2x8xf32> -> tensor<2x3xf32>
// CHECK: %[[DS:.*]] = train.slice_grad %[[D1]] {dim = 1 : i64, start = 1 : i64} : tensor<2x3xf32> -> tensor<2x5xf32>
// CHECK: %[[DW:.*]] = train.add
// CHECK: return %{{.*}}, %[[DW]]
train.param @w : tensor<2x5xf32> init(normal, 1.0)
func.func @slice_concat() -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<2x5xf32>
  %s = train.slice %w {dim = 1 : i64, start = 1 : i64} : tensor<2x5xf32> -> tensor<2x3xf32>
  %c = train.concat %w, %s {dim = 1 : i64} : (tensor<2x5xf32>, tensor<2x3xf32>) -> tensor<2x8xf32>
  %l = train.reduce sum %c [0, 1] : tensor<2x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// where: the adjoint of on_true is where(mask, dy, 0), of on_false
// where(mask, 0, dy), one zero fill shared; dropout: the same op (same
// probability, same stream, so the same elements drop) applied to dy.
// CHECK-LABEL: func.func @where_dropout
// CHECK: %[[A:.*]] = train.param_read @a
// CHECK: %[[B:.*]] = train.param_read @b
// CHECK: %[[W:.*]] = train.where %[[MASK:[^,]*]], %[[A]], %[[B]]
// CHECK: %[[D:.*]] = train.dropout %[[W]] {probability = 2.500000e-01 : f64, stream = 5 : i64}
// CHECK: %[[DD:.*]] = train.dropout %{{.*}} {probability = 2.500000e-01 : f64, stream = 5 : i64}
// CHECK: %[[Z:.*]] = train.fill {value = 0.000000e+00 : f64} : tensor<2x3xf32>
// CHECK: %[[DA:.*]] = train.where %[[MASK]], %[[DD]], %[[Z]]
// CHECK: %[[DB:.*]] = train.where %[[MASK]], %[[Z]], %[[DD]]
// CHECK: return %{{.*}}, %[[DA]], %[[DB]]
train.param @a : tensor<2x3xf32> init(ones)
train.param @b : tensor<2x3xf32> init(zeros)
func.func @where_dropout(%mask: tensor<3xi32>) -> tensor<f32> attributes {train.entry} {
  %a = train.param_read @a : tensor<2x3xf32>
  %b = train.param_read @b : tensor<2x3xf32>
  %w = train.where %mask, %a, %b : tensor<3xi32>, tensor<2x3xf32>
  %d = train.dropout %w {probability = 0.25 : f64, stream = 5 : i64} : tensor<2x3xf32>
  %l = train.reduce sum %d [0, 1] : tensor<2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// gelu_erf (the exact GELU of imported PyTorch models): gelu_erf_grad(dy, x).
// CHECK-LABEL: func.func @exact_gelu
// CHECK: %[[X:.*]] = train.param_read @x
// CHECK: train.gelu_erf %[[X]] : tensor<2x4xf32>
// CHECK: %[[DX:.*]] = train.gelu_erf_grad %{{.*}}, %[[X]] : tensor<2x4xf32>
// CHECK: return %{{.*}}, %[[DX]]
train.param @x : tensor<2x4xf32> init(normal, 1.0)
func.func @exact_gelu() -> tensor<f32> attributes {train.entry} {
  %x = train.param_read @x : tensor<2x4xf32>
  %g = train.gelu_erf %x : tensor<2x4xf32>
  %l = train.reduce sum %g [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// tanh: tanh_grad(dy, y) on the result; erf: erf_grad(dy, x) on the input.
// CHECK-LABEL: func.func @tanh_erf
// CHECK: %[[X:.*]] = train.param_read @x
// CHECK: %[[T:.*]] = train.tanh %[[X]] : tensor<2x4xf32>
// CHECK: %[[E:.*]] = train.erf %[[T]] : tensor<2x4xf32>
// CHECK: %[[DT:.*]] = train.erf_grad %{{.*}}, %[[T]] : tensor<2x4xf32>
// CHECK: %[[DX:.*]] = train.tanh_grad %[[DT]], %[[T]] : tensor<2x4xf32>
// CHECK: return %{{.*}}, %[[DX]]
train.param @x : tensor<2x4xf32> init(normal, 1.0)
func.func @tanh_erf() -> tensor<f32> attributes {train.entry} {
  %x = train.param_read @x : tensor<2x4xf32>
  %t = train.tanh %x : tensor<2x4xf32>
  %e = train.erf %t : tensor<2x4xf32>
  %l = train.reduce sum %e [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
