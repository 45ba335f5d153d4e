// RUN: ztrain-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{element type must be f32, bf16 or f16, got 'i32'}}
train.param @w : tensor<4xi32> init(zeros)

// -----

// expected-error @+1 {{initializer 'normal' needs a positive scale}}
train.param @w : tensor<4xf32> init(normal)

// -----

// expected-error @+1 {{initializer 'zeros' takes no scale}}
train.param @w : tensor<4xf32> init(zeros, 1.0)

// -----

// expected-error @+1 {{enum values for attribute 'init' [zeros, ones, normal, uniform, causal, external]}}
train.param @w : tensor<4xf32> init(gaussian, 1.0)

// -----

// expected-error @+1 {{references undeclared parameter @nope}}
train.state @s : tensor<4xf32> of @nope

// -----

train.param @w : tensor<4xf32> init(zeros)
// expected-error @+1 {{type 'tensor<5xf32>' does not match parameter @w declared as 'tensor<4xf32>'}}
train.state @s : tensor<5xf32> of @w

// -----

func.func @f() {
  // expected-error @+1 {{references undeclared parameter @missing}}
  %0 = train.param_read @missing : tensor<4xf32>
  return
}

// -----

train.param @w : tensor<4x3xf32> init(zeros)
func.func @f() {
  // expected-error @+1 {{type 'tensor<3x4xf32>' does not match parameter @w declared as 'tensor<4x3xf32>'}}
  %0 = train.param_read @w : tensor<3x4xf32>
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
train.state @s : tensor<4xf32> of @w
func.func @f() {
  // expected-error @+1 {{@s is a 'train.state', not a parameter}}
  %0 = train.param_read @s : tensor<4xf32>
  return
}

// -----

func.func @f(%a: tensor<4xf32>, %b: tensor<5xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "train.add"(%a, %b) : (tensor<4xf32>, tensor<5xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%a: tensor<?xf32>) {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %0 = train.relu %a : tensor<?xf32>
  return
}

// -----

func.func @f(%x: tensor<2x8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{bias shape [4] must be [8] (the last dim of input [2, 8])}}
  %0 = train.bias_add %x, %b : tensor<2x8xf32>, tensor<4xf32>
  return
}

// -----

func.func @f(%a: tensor<8xf32>, %b: tensor<8x4xf32>) {
  // expected-error @+1 {{operands must have rank >= 2, got lhs [8] and rhs [8, 4]}}
  %0 = train.matmul %a, %b : (tensor<8xf32>, tensor<8x4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3x8xf32>, %b: tensor<3x8x4xf32>) {
  // expected-error @+1 {{batch dim 0 differs: lhs 2 vs rhs 3}}
  %0 = train.matmul %a, %b : (tensor<2x3x8xf32>, tensor<3x8x4xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3x8xf32>, %b: tensor<2x2x8x4xf32>) {
  // expected-error @+1 {{rhs must be a matrix or have the rank of lhs (3), got [2, 2, 8, 4]}}
  %0 = train.matmul %a, %b : (tensor<2x3x8xf32>, tensor<2x2x8x4xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @f(%a: tensor<3x8xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+1 {{contracted dims differ: lhs [3, 8] gives 8, rhs [4, 8] gives 4}}
  %0 = train.matmul %a, %b : (tensor<3x8xf32>, tensor<4x8xf32>) -> tensor<3x8xf32>
  return
}

// -----

func.func @f(%a: tensor<3x8xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+1 {{result shape [4, 3] must be [3, 4]}}
  %0 = train.matmul %a, %b {transpose_b} : (tensor<3x8xf32>, tensor<4x8xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%c: tensor<3x4xf32>, %a: tensor<8x3xf32>, %b: tensor<8x4xf32>) {
  // expected-error @+1 {{contracted dims differ: lhs [8, 3] gives 3, rhs [8, 4] gives 8}}
  %0 = train.matmul_acc %c, %a, %b : (tensor<3x4xf32>, tensor<8x3xf32>, tensor<8x4xf32>) -> tensor<3x4xf32>
  return
}

// -----

func.func @f(%c: tensor<4x3xf32>, %a: tensor<8x3xf32>, %b: tensor<8x4xf32>) {
  // expected-error @+1 {{acc shape [4, 3] must be [3, 4]}}
  %0 = train.matmul_acc %c, %a, %b {transpose_a} : (tensor<4x3xf32>, tensor<8x3xf32>, tensor<8x4xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%c: tensor<3x4xf32>, %a: tensor<8x3xbf16>, %b: tensor<8x4xf32>) {
  // expected-error @+1 {{lhs and rhs must have the same element type, got 'bf16' and 'f32'}}
  %0 = train.matmul_acc %c, %a, %b {transpose_a} : (tensor<3x4xf32>, tensor<8x3xbf16>, tensor<8x4xf32>) -> tensor<3x4xf32>
  return
}

// -----

func.func @f(%c: tensor<3x4xbf16>, %a: tensor<8x3xbf16>, %b: tensor<8x4xbf16>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float values}}
  %0 = train.matmul_acc %c, %a, %b {transpose_a} : (tensor<3x4xbf16>, tensor<8x3xbf16>, tensor<8x4xbf16>) -> tensor<3x4xbf16>
  return
}

// -----

func.func @f(%c: tensor<2x3x4xf32>, %a: tensor<2x8x3xf32>, %b: tensor<2x8x4xf32>) {
  // expected-error @+1 {{operands must be matrices, got acc [2, 3, 4], lhs [2, 8, 3] and rhs [2, 8, 4]}}
  %0 = train.matmul_acc %c, %a, %b {transpose_a} : (tensor<2x3x4xf32>, tensor<2x8x3xf32>, tensor<2x8x4xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x8xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{gamma/beta shape [4] must be [8] (the last dim of input)}}
  %0 = train.layer_norm %x, %g, %g : tensor<2x8xf32>, tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be positive}}
  %0 = train.layer_norm %x, %g, %g {epsilon = 0.0 : f64} : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x5xf32>) {
  // expected-error @+1 {{causal softmax needs the last two dims equal (a [T, T] score matrix), got [2, 4, 5]}}
  %0 = train.softmax %x {causal} : tensor<2x4x5xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{element count changes from 8 [2, 4] to 9 [3, 3]}}
  %0 = train.reshape %x : tensor<2x4xf32> -> tensor<3x3xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xi32>) {
  // expected-error @+1 {{element type changes from 'i32' to 'f32'}}
  %0 = train.reshape %x : tensor<2x4xi32> -> tensor<8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x3xf32>) {
  // expected-error @+1 {{permutation [0, 0, 1] is not a permutation of [0, 3)}}
  %0 = train.transpose %x [0, 0, 1] : tensor<2x4x3xf32> -> tensor<2x2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x3xf32>) {
  // expected-error @+1 {{permutation has 2 entries for an operand of rank 3}}
  %0 = train.transpose %x [1, 0] : tensor<2x4x3xf32> -> tensor<4x2x3xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x3xf32>) {
  // expected-error @+1 {{result shape [2, 4, 3] must be [2, 3, 4]}}
  %0 = train.transpose %x [0, 2, 1] : tensor<2x4x3xf32> -> tensor<2x4x3xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x3xf32>) {
  // expected-error @+1 {{dim 3 is out of range for operand of rank 3}}
  %0 = train.reduce sum %x [3] : tensor<2x4x3xf32> -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x3xf32>) {
  // expected-error @+1 {{dims [1, 0] must be strictly increasing}}
  %0 = train.reduce sum %x [1, 0] : tensor<2x4x3xf32> -> tensor<3xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x3xf32>) {
  // expected-error @+1 {{result shape [2, 4] must be [2, 3] (operand [2, 4, 3] without dims [1])}}
  %0 = train.reduce mean %x [1] : tensor<2x4x3xf32> -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<4x3xf32>) {
  // expected-error @+1 {{operand shape [4, 3] must be [2, 3] (result [2, 3, 5] without dims [2])}}
  %0 = train.broadcast %x [2] : tensor<4x3xf32> -> tensor<2x3x5xf32>
  return
}

// -----

func.func @f(%t: tensor<10xf32>, %ids: tensor<4xi32>) {
  // expected-error @+1 {{table must be [vocab, dim], got [10]}}
  %0 = train.embedding %t, %ids : (tensor<10xf32>, tensor<4xi32>) -> tensor<4x1xf32>
  return
}

// -----

func.func @f(%t: tensor<10x8xf32>, %ids: tensor<4xi32>) {
  // expected-error @+1 {{result shape [4, 10] must be [4, 8] (ids shape + [dim])}}
  %0 = train.embedding %t, %ids : (tensor<10x8xf32>, tensor<4xi32>) -> tensor<4x10xf32>
  return
}

// -----

func.func @f(%t: tensor<10x8xf32>, %ids: tensor<4xf32>) {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit signless integer values}}
  %0 = train.embedding %t, %ids : (tensor<10x8xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @f(%l: tensor<4x10x2xf32>, %y: tensor<4xi32>) {
  // expected-error @+1 {{logits must be [rows, classes], got [4, 10, 2]}}
  %0 = train.cross_entropy %l, %y : (tensor<4x10x2xf32>, tensor<4xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<4x10xf32>, %y: tensor<5xi32>) {
  // expected-error @+1 {{labels shape [5] must be [4] (one label per logits row)}}
  %0 = train.cross_entropy %l, %y : (tensor<4x10xf32>, tensor<5xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<4x10xf32>, %y: tensor<4xi32>) {
  // expected-error @+1 {{'train.cross_entropy' op ignore_index 4294967296 is not an i32 label}}
  %0 = train.cross_entropy %l, %y {ignore_index = 4294967296 : i64} : (tensor<4x10xf32>, tensor<4xi32>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_tile_outside_labels(%l: tensor<4x10xf32>, %y: tensor<12xi32>) {
  // expected-error @+1 {{'train.cross_entropy' op tile rows [10, 14) must lie inside labels [12]}}
  %0 = train.cross_entropy %l, %y {first_row = 10 : i64} : (tensor<4x10xf32>, tensor<12xi32>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_with_grad_tile_negative(%l: tensor<4x10xf32>, %y: tensor<12xi32>, %s: tensor<f32>) {
  // expected-error @+1 {{'train.cross_entropy_with_grad' op tile rows [-1, 3) must lie inside labels [12]}}
  %0, %1 = train.cross_entropy_with_grad %l, %y, %s {first_row = -1 : i64} : tensor<4x10xf32>, tensor<12xi32>
  return
}

// -----

func.func @f(%dy: tensor<4x8xf32>, %ids: tensor<5xi32>) {
  // expected-error @+1 {{grad shape [4, 8] must be [5, 8] (ids shape + [dim])}}
  %0 = train.embedding_grad %dy, %ids : (tensor<4x8xf32>, tensor<5xi32>) -> tensor<10x8xf32>
  return
}

// -----

func.func @f(%dy: tensor<4x8xf32>, %ids: tensor<4xi32>) {
  // expected-error @+1 {{result must be [vocab, dim], got [10]}}
  %0 = train.embedding_grad %dy, %ids : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<10xf32>
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{momentum needs a momentum_buffer}}
  train.sgd_update @w, %g {lr = 0.1 : f64, momentum = 0.9 : f64} : tensor<4xf32>
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
train.state @w.momentum_buffer : tensor<4xf32> of @w
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{momentum_buffer given but momentum is 0}}
  train.sgd_update @w, %g momentum_buffer(@w.momentum_buffer) {lr = 0.1 : f64} : tensor<4xf32>
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
func.func @f(%g: tensor<5xf32>) {
  // expected-error @+1 {{type 'tensor<5xf32>' does not match parameter @w declared as 'tensor<4xf32>'}}
  train.sgd_update @w, %g {lr = 0.1 : f64} : tensor<5xf32>
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
train.param @v : tensor<4xf32> init(zeros)
train.state @v.exp_avg : tensor<4xf32> of @v
train.state @w.exp_avg_sq : tensor<4xf32> of @w
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{state @v.exp_avg belongs to @v, not @w}}
  train.adam_update @w, %g states(@v.exp_avg, @w.exp_avg_sq) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64} : tensor<4xf32>
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{references undeclared optimizer state @w.m}}
  train.adam_update @w, %g states(@w.m, @w.v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64} : tensor<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'train.param' op expects parent op 'builtin.module'}}
  train.param @w : tensor<4xf32> init(zeros)
  return
}

// -----

// Element types: one per op, f32 / bf16 / f16 only.
func.func @f(%a: tensor<4x8xbf16>, %b: tensor<8x2xf32>) -> tensor<4x2xbf16> {
  // expected-error @+1 {{'train.matmul' op mixes element types: operand #0 is 'bf16' but operand #1 is 'f32'; every floating-point tensor of the op must have the same element type}}
  %c = train.matmul %a, %b : (tensor<4x8xbf16>, tensor<8x2xf32>) -> tensor<4x2xbf16>
  return %c : tensor<4x2xbf16>
}

// -----

func.func @f(%x: tensor<4x8xf16>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf16> {
  // expected-error @+1 {{'train.layer_norm' op mixes element types: operand #0 is 'f16' but operand #1 is 'f32'}}
  %y = train.layer_norm %x, %g, %b : tensor<4x8xf16>, tensor<8xf32>
  return %y : tensor<4x8xf16>
}

// -----

func.func @f(%a: tensor<4xf64>) -> tensor<4xf64> {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<4xf64>'}}
  %0 = train.relu %a : tensor<4xf64>
  return %0 : tensor<4xf64>
}

// -----

func.func @f(%a: tensor<4xbf16>, %b: tensor<4xf32>) -> tensor<4xbf16> {
  // expected-error @+1 {{'train.add' op requires the same type for all operands and results}}
  %0 = "train.add"(%a, %b) : (tensor<4xbf16>, tensor<4xf32>) -> tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

// -----

// Zero-size dimensions are refused (a zero-size class dimension used to
// crash the lowering; a zero-size batch trained on with a NaN loss).
func.func @f(%l: tensor<8x0xf32>, %y: tensor<8xi32>) -> tensor<f32> {
  // expected-error @+1 {{'train.cross_entropy' op operand #0 has a zero-size dimension (dim 1 of [8, 0]); empty tensors are not supported}}
  %loss = train.cross_entropy %l, %y : (tensor<8x0xf32>, tensor<8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// expected-error @+1 {{'train.param' op type has a zero-size dimension (dim 0 of [0, 4])}}
train.param @w : tensor<0x4xf32> init(zeros)

// -----

// Element counts that overflow int64 are refused.
// expected-error @+1 {{'train.param' op type has shape [4294967296, 4294967296], whose byte size overflows int64}}
train.param @w : tensor<4294967296x4294967296xf32> init(zeros)

// -----

func.func @f(%x: tensor<3037000500x3037000500xf32>) -> tensor<3037000500x3037000500xf32> {
  // expected-error @+1 {{'train.relu' op operand #0 has shape [3037000500, 3037000500], whose byte size overflows int64}}
  %y = train.relu %x : tensor<3037000500x3037000500xf32>
  return %y : tensor<3037000500x3037000500xf32>
}

// -----

train.param @w : tensor<4xf32> init(zeros)
func.func @f(%g: tensor<4xbf16>) {
  // expected-error @+1 {{gradient element type 'bf16' differs from parameter @w's element type 'f32'}}
  train.sgd_update @w, %g {lr = 0.1 : f64, sharded} : tensor<4xbf16>
  return
}

// -----

func.func @f(%x: tensor<2x8xf32>, %y: tensor<2x8xbf16>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "train.div"(%x, %y) : (tensor<2x8xf32>, tensor<2x8xbf16>) -> tensor<2x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x8xi32>) {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %0 = train.silu %x : tensor<2x8xi32>
  return
}

// -----

func.func @f(%x: tensor<2x8xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{gamma shape [4] must be [8] (the last dim of input)}}
  %0 = train.rms_norm %x, %g : tensor<2x8xf32>, tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be positive and finite, got 0}}
  %0 = train.rms_norm %x, %g {epsilon = 0.0 : f64} : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x7xf32>) {
  // expected-error @+1 {{the head dim (last dim of [2, 4, 7]) must be even: RoPE rotates pairs of channels}}
  %0 = train.rotary_embedding %x {seq_dim = 1 : i64} : tensor<2x4x7xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{seq_dim 2 must be in [0, 2) for input [2, 4, 8] (the last dim is the head dim)}}
  %0 = train.rotary_embedding %x {seq_dim = 2 : i64} : tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{theta must be positive and finite, got -1}}
  %0 = train.rotary_embedding %x {seq_dim = 1 : i64, theta = -1.0 : f64} : tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{llama3_scaling must hold 4 numbers (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings), got 3}}
  %0 = train.rotary_embedding %x {seq_dim = 1 : i64, llama3_scaling = array<f64: 8.0, 1.0, 4.0>} : tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{llama3_scaling factor must be finite and >= 1, got 5.000000e-01}}
  %0 = train.rotary_embedding %x {seq_dim = 1 : i64, llama3_scaling = array<f64: 0.5, 1.0, 4.0, 8192.0>} : tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{llama3_scaling needs 0 < low_freq_factor < high_freq_factor, got 4.000000e+00 and 1.000000e+00}}
  %0 = train.rotary_embedding %x {seq_dim = 1 : i64, llama3_scaling = array<f64: 8.0, 4.0, 1.0, 8192.0>} : tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{llama3_scaling original_max_position_embeddings must be positive and finite, got 0}}
  %0 = train.rotary_embedding %x {seq_dim = 1 : i64, llama3_scaling = array<f64: 8.0, 1.0, 4.0, 0.0>} : tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x4xf32>, %m: tensor<3x4xi32>) {
  // expected-error @+1 {{mask shape [3, 4] must be a suffix of the input shape [2, 4, 4]}}
  %0 = train.masked_fill %x, %m {value = 0.0 : f64} : tensor<2x4x4xf32>, tensor<3x4xi32>
  return
}

// -----

func.func @f(%x: tensor<2x6xf32>) {
  // expected-error @+1 {{slice [4, 8) is out of range for dim 1 of size 6}}
  %0 = train.slice %x {dim = 1 : i64, start = 4 : i64} : tensor<2x6xf32> -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x6xf32>) {
  // expected-error @+1 {{slice [-1, 3) is out of range for dim 1 of size 6}}
  %0 = train.slice %x {dim = 1 : i64, start = -1 : i64} : tensor<2x6xf32> -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x6xf32>) {
  // expected-error @+1 {{result [3, 4] and operand [2, 6] differ in dim 0, which is not the sliced dim 1}}
  %0 = train.slice %x {dim = 1 : i64, start = 0 : i64} : tensor<2x6xf32> -> tensor<3x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x6xf32>) {
  // expected-error @+1 {{dim 2 is out of range for operand [2, 6]}}
  %0 = train.slice %x {dim = 2 : i64, start = 0 : i64} : tensor<2x6xf32> -> tensor<2x6xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) {
  // expected-error @+1 {{operand #1 [3, 3] and result [2, 6] differ in dim 0, which is not the concatenated dim 1}}
  %0 = train.concat %a, %b {dim = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) {
  // expected-error @+1 {{the operands' sizes along dim 1 add up to 6, but the result has 7}}
  %0 = train.concat %a, %b {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x7xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xbf16>) {
  // expected-error @+1 {{requires the same element type for all operands and results}}
  %0 = train.concat %a, %b {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xbf16>) -> tensor<2x6xf32>
  return
}

// -----

func.func @f(%x: tensor<2x0xf32>) {
  // expected-error @+1 {{operand #0 has a zero-size dimension (dim 1 of [2, 0]); empty tensors are not supported}}
  %0 = train.silu %x : tensor<2x0xf32>
  return
}

// -----

func.func @f(%m: tensor<3x4xi32>, %a: tensor<2x4x4xf32>) {
  // expected-error @+1 {{mask shape [3, 4] must be a suffix of the result shape [2, 4, 4]}}
  %0 = train.where %m, %a, %a : tensor<3x4xi32>, tensor<2x4x4xf32>
  return
}

// -----

func.func @f(%m: tensor<4xi32>, %a: tensor<2x4xf32>, %b: tensor<2x4xbf16>) {
  // expected-error @+1 {{all of {on_true, on_false, result} have same type}}
  %0 = "train.where"(%m, %a, %b) : (tensor<4xi32>, tensor<2x4xf32>, tensor<2x4xbf16>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%m: tensor<4xf32>, %a: tensor<2x4xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit signless integer values}}
  %0 = "train.where"(%m, %a, %a) : (tensor<4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{probability must be in [0, 1], got 1.5}}
  %0 = train.dropout %x {probability = 1.5 : f64, stream = 0 : i64} : tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{probability must be in [0, 1], got nan}}
  %0 = train.dropout %x {probability = 0x7FF8000000000000 : f64, stream = 0 : i64} : tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{stream must be >= 0, got -1}}
  %0 = train.dropout %x {probability = 0.5 : f64, stream = -1 : i64} : tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x0xf32>) {
  // expected-error @+1 {{zero-size}}
  %0 = train.dropout %x {probability = 0.5 : f64, stream = 0 : i64} : tensor<2x0xf32>
  return
}

// -----

// expected-error @+1 {{'train.buffer' op element type must be f32 or i32, got 'bf16'}}
train.buffer @b : tensor<4xbf16> init(zeros)

// -----

// expected-error @+1 {{'train.buffer' op initializer 'normal' needs an f32 buffer, got 'i32'}}
train.buffer @b : tensor<4xi32> init(normal, 1.0)

// -----

// expected-error @+1 {{'train.buffer' op initializer 'uniform' needs a positive scale (finite), e.g. init(uniform, 0.02); got INF}}
train.buffer @b : tensor<4xf32> init(uniform, 0x7FF0000000000000)

// -----

// expected-error @+1 {{'train.buffer' op initializer 'causal' takes no scale}}
train.buffer @b : tensor<4x4xi32> init(causal, 1.0)

// -----

// expected-error @+1 {{'train.buffer' op initializer 'causal' needs rank >= 2, got 'tensor<4xi32>'}}
train.buffer @b : tensor<4xi32> init(causal)

// -----

// expected-error @+1 {{'train.buffer' op type has a zero-size dimension}}
train.buffer @b : tensor<0x4xf32> init(zeros)

// -----

// expected-error @+1 {{'train.param' op initializer 'causal' is for buffers (train.buffer), not parameters}}
train.param @p : tensor<4x4xf32> init(causal)

// -----

// expected-error @+1 {{'train.param' op initializer 'external' is for buffers (train.buffer), not parameters}}
train.param @p : tensor<4x4xf32> init(external)

// -----

// expected-error @+1 {{'train.buffer' op initializer 'external' takes no scale}}
train.buffer @b : tensor<4x4xf32> init(external, 1.0)

// -----

train.param @p : tensor<4xf32> init(zeros)
func.func @f() {
  // expected-error @+1 {{'train.buffer_read' op @p is a 'train.param', not a buffer}}
  %0 = train.buffer_read @p : tensor<4xf32>
  return
}

// -----

train.buffer @b : tensor<4xf32> init(zeros)
func.func @f() {
  // expected-error @+1 {{'train.buffer_read' op references undeclared buffer @c}}
  %0 = train.buffer_read @c : tensor<4xf32>
  return
}

// -----

// NaN slips through `<= 0` tests; these are written so that it cannot.
// expected-error @+1 {{'train.param' op initializer 'normal' needs a positive scale (finite), e.g. init(normal, 0.02); got nan}}
train.param @w : tensor<4xf32> init(normal, 0x7FF8000000000000)

// -----

func.func @f(%x: tensor<2x4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{epsilon must be positive and finite, got nan}}
  %0 = train.layer_norm %x, %g, %g {epsilon = 0x7FF8000000000000 : f64} : tensor<2x4xf32>, tensor<4xf32>
  return
}

// -----

// Mixed precision: casts, master copies and updates with them.
func.func @f(%x: tensor<4x8xf32>) -> tensor<8x4xbf16> {
  // expected-error @+1 {{'train.cast' op changes the shape from [4, 8] to [8, 4]; a cast changes only the element type}}
  %y = train.cast %x : tensor<4x8xf32> to tensor<8x4xbf16>
  return %y : tensor<8x4xbf16>
}

// -----

func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'train.cast' op casts 'f32' to itself}}
  %y = train.cast %x : tensor<4x8xf32> to tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

train.param @w : tensor<4xf32> init(zeros) frozen
// expected-error @+1 {{'train.state' op is a state of @w, which is frozen (not trained: no optimizer state)}}
train.state @w.exp_avg : tensor<4xf32> of @w

// -----

train.param @w : tensor<4xf32> init(zeros) frozen
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'train.sgd_update' op updates @w, which is frozen (not trained)}}
  train.sgd_update @w, %g {lr = 1.0e-1 : f64} : tensor<4xf32>
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
// expected-error @+1 {{'train.state' op is a master copy of @w, which is 'tensor<4xf32>'; master copies are for bf16 and f16 parameters}}
train.state @w.master : tensor<4xf32> of @w master

// -----

train.param @w : tensor<4xbf16> init(zeros)
// expected-error @+1 {{'train.state' op master copy of @w must be 'tensor<4xf32>', got 'tensor<4xf16>'}}
train.state @w.master : tensor<4xf16> of @w master

// -----

train.param @w : tensor<4xbf16> init(zeros)
// expected-error @+1 {{'train.state' op type 'tensor<4xf16>' does not match parameter @w declared as 'tensor<4xbf16>' (or its f32 form)}}
train.state @w.m : tensor<4xf16> of @w

// -----

train.param @w : tensor<4xbf16> init(zeros)
train.state @w.m : tensor<4xbf16> of @w
train.state @w.v : tensor<4xbf16> of @w
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'train.adam_update' op gradient element type 'f32' differs from parameter @w's element type 'bf16'}}
  train.adam_update @w, %g states(@w.m, @w.v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64} : tensor<4xf32>
  return
}

// -----

train.param @w : tensor<4xbf16> init(zeros)
train.state @w.master : tensor<4xf32> of @w master
train.state @w.m : tensor<4xf32> of @w
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'train.adam_update' op state @w.master is a master copy, not a moment}}
  train.adam_update @w, %g master(@w.master) states(@w.master, @w.m) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64} : tensor<4xf32>
  return
}

// -----

train.param @w : tensor<4xbf16> init(zeros)
train.state @w.m : tensor<4xf32> of @w
func.func @f(%g: tensor<4xbf16>) {
  // expected-error @+1 {{'train.sgd_update' op master @w.m is not the master copy of @w}}
  train.sgd_update @w, %g master(@w.m) {lr = 1.0e-1 : f64} : tensor<4xbf16>
  return
}

// -----

train.param @w : tensor<4xbf16> init(zeros)
train.state @w.master : tensor<4xf32> of @w master
train.state @w.buf : tensor<4xbf16> of @w
func.func @f(%g: tensor<4xbf16>) {
  // expected-error @+1 {{'train.sgd_update' op type 'tensor<4xf32>' does not match optimizer state @w.buf declared as 'tensor<4xbf16>'}}
  train.sgd_update @w, %g master(@w.master) momentum_buffer(@w.buf) {lr = 1.0e-1 : f64, momentum = 0.9 : f64} : tensor<4xbf16>
  return
}

// -----

// Gradient accumulation: an accumulator names a parameter.
train.param @w : tensor<4xf32> init(zeros)
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'train.accumulate_grad' op accumulates the gradient of @v, which is not a train.param}}
  %a = train.accumulate_grad @v, %g : tensor<4xf32>
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'train.accumulation_boundary' op appears twice in @f}}
  train.accumulation_boundary
  train.accumulation_boundary
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'train.accumulation_boundary' op precedes a train.accumulate_grad; every micro-batch's gradient is accumulated before it}}
  train.accumulation_boundary
  // expected-note @+1 {{the accumulation}}
  %a = train.accumulate_grad @w, %g : tensor<4xf32>
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
func.func @f(%g: tensor<4xf32>) {
  // expected-note @+1 {{the update}}
  train.sgd_update @w, %g {lr = 1.0e-1 : f64} : tensor<4xf32>
  // expected-error @+1 {{'train.accumulation_boundary' op follows an optimizer update; the updates run after the last micro-batch}}
  train.accumulation_boundary
  return
}

// -----

train.param @b : tensor<4xf32> init(zeros)
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'train.sgd_update' op is in the no-decay group but has weight_decay 1.000000e-01}}
  train.sgd_update @b, %g {lr = 1.0e-1 : f64, weight_decay = 0.1 : f64, no_decay} : tensor<4xf32>
  return
}

// -----

func.func @attention_causal_cross(%q: tensor<2x5x8xf32>, %k: tensor<2x7x8xf32>) {
  // expected-error @+1 {{'train.attention' op causal attention needs as many keys as queries, got Tq = 5 and Tk = 7}}
  %y, %lse = train.attention %q, %k, %k {causal, scale = 0.5 : f64} : tensor<2x5x8xf32>, tensor<2x7x8xf32> -> tensor<2x5x8xf32>, tensor<2x5xf32>
  return
}

// -----

func.func @attention_head_dim(%q: tensor<2x5x8xf32>, %k: tensor<2x5x4xf32>) {
  // expected-error @+1 {{'train.attention' op key [2, 5, 4] must be [..., Tk, D] with query [2, 5, 8]'s leading dims and D (or, grouped-query, [..., Hk, Tk, D] with Hk dividing the query's heads)}}
  %y, %lse = train.attention %q, %k, %k {scale = 0.5 : f64} : tensor<2x5x8xf32>, tensor<2x5x4xf32> -> tensor<2x5x8xf32>, tensor<2x5xf32>
  return
}

// -----

func.func @attention_groups(%q: tensor<2x6x5x8xf32>, %k: tensor<2x4x5x8xf32>) {
  // expected-error @+1 {{'train.attention' op key [2, 4, 5, 8] must be [..., Tk, D] with query [2, 6, 5, 8]'s leading dims and D (or, grouped-query, [..., Hk, Tk, D] with Hk dividing the query's heads)}}
  %y, %lse = train.attention %q, %k, %k {scale = 0.5 : f64} : tensor<2x6x5x8xf32>, tensor<2x4x5x8xf32> -> tensor<2x6x5x8xf32>, tensor<2x6x5xf32>
  return
}

// -----

func.func @attention_scale(%q: tensor<2x5x8xf32>) {
  // expected-error @+1 {{'train.attention' op scale must be finite and positive, got 0}}
  %y, %lse = train.attention %q, %q, %q {scale = 0.0 : f64} : tensor<2x5x8xf32>, tensor<2x5x8xf32> -> tensor<2x5x8xf32>, tensor<2x5xf32>
  return
}

// -----

func.func @attention_lse_shape(%q: tensor<2x5x8xf32>) {
  // expected-error @+1 {{'train.attention' op lse must be 'tensor<2x5xf32>', got 'tensor<2x8xf32>'}}
  %y, %lse = train.attention %q, %q, %q {scale = 0.5 : f64} : tensor<2x5x8xf32>, tensor<2x5x8xf32> -> tensor<2x5x8xf32>, tensor<2x8xf32>
  return
}

// -----

func.func @attention_mixed(%q: tensor<2x5x8xbf16>, %k: tensor<2x5x8xf32>) {
  // expected-error @+1 {{'train.attention' op mixes element types: operand #0 is 'bf16' but operand #1 is 'f32'}}
  %y, %lse = train.attention %q, %k, %k {scale = 0.5 : f64} : tensor<2x5x8xbf16>, tensor<2x5x8xf32> -> tensor<2x5x8xbf16>, tensor<2x5xf32>
  return
}

// -----

// lse is f32 whatever the attention's type; an op that reads it is checked
// as any other.
func.func @attention_lse_reader(%q: tensor<2x5x8xbf16>, %w: tensor<5x5xbf16>) {
  %y, %lse = train.attention %q, %q, %q {scale = 0.5 : f64} : tensor<2x5x8xbf16>, tensor<2x5x8xbf16> -> tensor<2x5x8xbf16>, tensor<2x5xf32>
  // expected-error @+1 {{'train.matmul' op mixes element types: operand #0 is 'f32' but operand #1 is 'bf16'}}
  %m = train.matmul %lse, %w : (tensor<2x5xf32>, tensor<5x5xbf16>) -> tensor<2x5xbf16>
  return
}

// -----

// A misspelt attribute is an error, not an attribute silently ignored (a
// `{casual}` softmax would run non-causal).
func.func @typo(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{'train.softmax' op has no attribute 'casual' (did you mean 'causal'?); its attributes: causal}}
  %s = train.softmax %x {casual} : tensor<2x4xf32>
  return %s : tensor<2x4xf32>
}

// -----

func.func @typo(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{'train.matmul' op has no attribute 'trnaspose_b' (did you mean 'transpose_b'?); its attributes: transpose_a, transpose_b}}
  %h = train.matmul %x, %w {trnaspose_b} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %h : tensor<2x4xf32>
}

// -----

func.func @none(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{'train.gelu' op has no attribute 'approximate'; it takes none}}
  %g = train.gelu %x {approximate} : tensor<2x4xf32>
  return %g : tensor<2x4xf32>
}

// -----

func.func @dialect(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{unknown train dialect attribute 'train.chekpoint' (did you mean 'train.checkpoint'?)}}
  %g = train.gelu %x {train.chekpoint} : tensor<2x4xf32>
  return %g : tensor<2x4xf32>
}

// -----

// expected-error @+1 {{argument #0: unknown train dialect attribute 'train.nmae' (did you mean 'train.name'?); the train dialect's attributes here: train.name}}
func.func @arg(%x: tensor<2x4xf32> {train.nmae = "x"}) -> tensor<2x4xf32> {
  return %x : tensor<2x4xf32>
}

// -----

// expected-error @+1 {{argument #0: 'train.name' is a string (the input's name in data files)}}
func.func @arg(%x: tensor<2x4xf32> {train.name = 3 : i64}) -> tensor<2x4xf32> {
  return %x : tensor<2x4xf32>
}

// -----

// A declaration has no forward pass: the verifier says so (the training
// pipeline used to crash on it).
train.param @w : tensor<4xf32> init(ones)
// expected-error @+1 {{'func.func' op 'train.entry' function @loss is a declaration: the entry function needs a body (the model's forward pass, returning the loss)}}
func.func private @loss(%x: tensor<4xf32> {train.name = "x"}) -> tensor<f32> attributes {train.entry}

// -----

// expected-error @+1 {{'train.param' op 'train.entry' marks a func.func}}
train.param @w : tensor<4xf32> init(ones) {train.entry}

// -----

// Input names are data and checkpoint keys: the verifier refuses a
// duplicate (ztrain-opt passed it and only ztrain-compile refused it).
train.param @w : tensor<4xf32> init(ones)
// expected-error @+1 {{'func.func' op input #1 is named 'x', a name another input, a parameter, state or buffer already has (names are data and checkpoint keys)}}
func.func @loss(%x: tensor<4xf32> {train.name = "x"}, %y: tensor<4xf32> {train.name = "x"}) -> tensor<f32> attributes {train.entry} {
  %l = train.reduce sum %x [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

train.param @w : tensor<4xf32> init(ones)
// expected-error @+1 {{'func.func' op input #0 is named 'w', a name another input, a parameter, state or buffer already has}}
func.func @loss(%x: tensor<4xf32> {train.name = "w"}) -> tensor<f32> attributes {train.entry} {
  %l = train.reduce sum %x [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// train.fused: a body of fusible elementwise ops only.
func.func @fused_not_fusible(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = train.fused(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    // expected-error @+1 {{'train.matmul' op is not fusible: a train.fused body holds fusible elementwise ops only}}
    %1 = train.matmul %a, %a : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    train.yield %1 : tensor<4x4xf32>
  }
  return %0 : tensor<4x4xf32>
}

// -----

func.func @fused_shape(%x: tensor<4x4xf32>, %y: tensor<16xf32>) -> tensor<4x4xf32> {
  %0 = train.fused(%x, %y) : (tensor<4x4xf32>, tensor<16xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>, %b: tensor<16xf32>):
    %1 = train.relu %a : tensor<4x4xf32>
    // expected-error @+1 {{'train.relu' op has shape [16], not the region's iteration shape [4, 4]}}
    %2 = train.relu %b : tensor<16xf32>
    train.yield %1 : tensor<4x4xf32>
  }
  return %0 : tensor<4x4xf32>
}

// -----

func.func @fused_bias(%x: tensor<4x4xf32>, %b: tensor<3xf32>) -> tensor<4x4xf32> {
  %0 = train.fused(%x, %b) : (tensor<4x4xf32>, tensor<3xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>, %c: tensor<3xf32>):
    // expected-error @+1 {{'train.bias_add' op}}
    %1 = train.bias_add %a, %c : tensor<4x4xf32>, tensor<3xf32>
    train.yield %1 : tensor<4x4xf32>
  }
  return %0 : tensor<4x4xf32>
}

// -----

func.func @fused_yield(%x: tensor<4x4xf32>) -> tensor<4x4xbf16> {
  // expected-error @+1 {{'train.fused' op yields 1 values whose types are not its results'}}
  %0 = train.fused(%x) : (tensor<4x4xf32>) -> tensor<4x4xbf16> {
  ^bb0(%a: tensor<4x4xf32>):
    %1 = train.relu %a : tensor<4x4xf32>
    train.yield %1 : tensor<4x4xf32>
  }
  return %0 : tensor<4x4xbf16>
}

// -----

func.func @fused_captures(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-note @+1 {{required by region isolation constraints}}
  %0 = train.fused() : () -> tensor<4x4xf32> {
    // expected-error @+1 {{'train.relu' op using value defined outside the region}}
    %1 = train.relu %x : tensor<4x4xf32>
    train.yield %1 : tensor<4x4xf32>
  }
  return %0 : tensor<4x4xf32>
}

// -----

func.func @fused_f16(%x: tensor<4x4xf16>) -> tensor<4x4xf16> {
  %0 = train.fused(%x) : (tensor<4x4xf16>) -> tensor<4x4xf16> {
  ^bb0(%a: tensor<4x4xf16>):
    // expected-error @+1 {{'train.relu' op computes 'f16'; fused regions hold f32 and bf16}}
    %1 = train.relu %a : tensor<4x4xf16>
    train.yield %1 : tensor<4x4xf16>
  }
  return %0 : tensor<4x4xf16>
}
