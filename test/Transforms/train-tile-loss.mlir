// RUN: ztrain-opt %s --split-input-file --verify-diagnostics --train-eval-entry --train-autodiff --train-fuse-loss --train-tile-loss="max-tile-bytes=800" | FileCheck %s

// [12 rows, 40 classes] of f32 logits are 1920 bytes: tiles of at most 800
// bytes hold 5 rows, so 3 tiles, balanced to 4 rows each. Each tile slices
// its rows of x, projects them, takes its share of the loss and its rows of
// the adjoint (first_row), its rows of dx and its term of dW; the shares are
// summed, the first tile's dW term starts the sum that train.matmul_acc adds
// the others' products to (in place, one buffer: plan-memory-tile-loss.mlir),
// the dx rows concatenated. No [12, 40] tensor is left in
// the step or the evaluation function, and the sampling function (which
// returns the whole logits) is gone.
// CHECK-LABEL: func.func @loss(
// CHECK-NOT: tensor<12x40xf32>
// CHECK: %[[SEED:.*]] = train.fill {value = 1.000000e+00 : f64} : tensor<f32>
// CHECK: %[[X:.*]] = train.reshape %{{.*}} : tensor<2x6x32xf32> -> tensor<12x32xf32>
// CHECK: %[[X0:.*]] = train.slice %[[X]] {dim = 0 : i64, start = 0 : i64} : tensor<12x32xf32> -> tensor<4x32xf32>
// CHECK: %[[L0:.*]] = train.matmul %[[X0]], %[[W:.*]] {transpose_b} : (tensor<4x32xf32>, tensor<40x32xf32>) -> tensor<4x40xf32>
// CHECK: %[[S0:[^,]*]], %[[G0:[^ ]*]] = train.cross_entropy_with_grad %[[L0]], %[[Y:.*]], %[[SEED]] {first_row = 0 : i64, ignore_index = -100 : i64} : tensor<4x40xf32>, tensor<12xi32>
// CHECK: %[[DX0:.*]] = train.matmul %[[G0]], %[[W]] : (tensor<4x40xf32>, tensor<40x32xf32>) -> tensor<4x32xf32>
// CHECK: %[[DW0:.*]] = train.matmul %[[G0]], %[[X0]] {transpose_a} : (tensor<4x40xf32>, tensor<4x32xf32>) -> tensor<40x32xf32>
// CHECK: train.slice %[[X]] {dim = 0 : i64, start = 4 : i64}
// CHECK: %[[S1:[^,]*]], %[[G1:[^ ]*]] = train.cross_entropy_with_grad %{{.*}}, %[[Y]], %[[SEED]] {first_row = 4 : i64, ignore_index = -100 : i64}
// CHECK: %[[LOSS1:.*]] = train.add %[[S0]], %[[S1]] : tensor<f32>
// CHECK: %[[DX1:.*]] = train.matmul %[[G1]], %[[W]]
// CHECK: %[[DWS:.*]] = train.matmul_acc %[[DW0]], %[[G1]], %{{.*}} {transpose_a} : (tensor<40x32xf32>, tensor<4x40xf32>, tensor<4x32xf32>) -> tensor<40x32xf32>
// CHECK: train.slice %[[X]] {dim = 0 : i64, start = 8 : i64}
// CHECK: %[[S2:[^,]*]], %[[G2:[^ ]*]] = train.cross_entropy_with_grad %{{.*}} {first_row = 8 : i64, ignore_index = -100 : i64}
// CHECK: %[[LOSS:.*]] = train.add %[[LOSS1]], %[[S2]] : tensor<f32>
// CHECK: %[[DX2:.*]] = train.matmul %[[G2]], %[[W]]
// CHECK: %[[DW:.*]] = train.matmul_acc %[[DWS]], %[[G2]], %{{.*}} {transpose_a}
// CHECK: %[[DX:.*]] = train.concat %[[DX0]], %[[DX1]], %[[DX2]] {dim = 0 : i64} : (tensor<4x32xf32>, tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<12x32xf32>
// CHECK: train.reshape %[[DX]] : tensor<12x32xf32> -> tensor<2x6x32xf32>
// CHECK-NOT: tensor<12x40xf32>
// CHECK: return %[[LOSS]], %{{.*}}, %[[DW]] :
// CHECK-LABEL: func.func @loss_eval(
// CHECK-NOT: tensor<12x40xf32>
// CHECK: %[[E0:.*]] = train.cross_entropy %{{.*}}, %{{.*}} {first_row = 0 : i64, ignore_index = -100 : i64} : (tensor<4x40xf32>, tensor<12xi32>) -> tensor<f32>
// CHECK: %[[E1:.*]] = train.cross_entropy %{{.*}}, %{{.*}} {first_row = 4 : i64, ignore_index = -100 : i64}
// CHECK: %[[ES:.*]] = train.add %[[E0]], %[[E1]] : tensor<f32>
// CHECK: %[[E2:.*]] = train.cross_entropy %{{.*}}, %{{.*}} {first_row = 8 : i64, ignore_index = -100 : i64}
// CHECK: %[[E:.*]] = train.add %[[ES]], %[[E2]] : tensor<f32>
// CHECK: return %[[E]]
// CHECK-NOT: func.func @loss_logits
train.param @fc.weight : tensor<32x16xf32> init(normal, 0.2)
train.param @head.weight : tensor<40x32xf32> init(normal, 0.05)
func.func @loss(%x: tensor<2x6x16xf32> {train.name = "x"}, %y: tensor<2x6xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w1 = train.param_read @fc.weight : tensor<32x16xf32>
  %h = train.matmul %x, %w1 {transpose_b} : (tensor<2x6x16xf32>, tensor<32x16xf32>) -> tensor<2x6x32xf32>
  %r = train.gelu %h : tensor<2x6x32xf32>
  %w2 = train.param_read @head.weight : tensor<40x32xf32>
  %l = train.matmul %r, %w2 {transpose_b} : (tensor<2x6x32xf32>, tensor<40x32xf32>) -> tensor<2x6x40xf32>
  %l2 = train.reshape %l : tensor<2x6x40xf32> -> tensor<12x40xf32>
  %y2 = train.reshape %y : tensor<2x6xi32> -> tensor<12xi32>
  %loss = train.cross_entropy %l2, %y2 {ignore_index = -100 : i64} : (tensor<12x40xf32>, tensor<12xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Logits that fit one tile (10 x 20 f32 = 800 bytes) stay as they are, and
// so does the sampling function.
// CHECK-LABEL: func.func @fits(
// CHECK: train.matmul %arg0, %{{.*}} {transpose_b} : (tensor<10x8xf32>, tensor<20x8xf32>) -> tensor<10x20xf32>
// CHECK: train.cross_entropy_with_grad %{{.*}}, %arg1, %{{.*}} : tensor<10x20xf32>, tensor<10xi32>
// CHECK-NOT: first_row
// CHECK: func.func @fits_logits(
train.param @w : tensor<20x8xf32> init(normal, 0.5)
func.func @fits(%x: tensor<10x8xf32> {train.name = "x"}, %y: tensor<10xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<20x8xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<10x8xf32>, tensor<20x8xf32>) -> tensor<10x20xf32>
  %loss = train.cross_entropy %l, %y : (tensor<10x20xf32>, tensor<10xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Logits something else reads (here the loss of a bias_add, not of the
// projection itself) are not a projection the tiles can recompute: nothing
// is tiled, and the module says so.
// expected-warning @+1 {{train-tile-loss: no cross-entropy of a projection x W^T to tile}}
module {
// CHECK-LABEL: func.func @biased(
// CHECK: train.cross_entropy_with_grad %{{.*}}, %arg1, %{{.*}} : tensor<10x40xf32>, tensor<10xi32>
// CHECK-NOT: first_row
train.param @w : tensor<40x8xf32> init(normal, 0.5)
train.param @b : tensor<40xf32> init(zeros)
func.func @biased(%x: tensor<10x8xf32> {train.name = "x"}, %y: tensor<10xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<40x8xf32>
  %b = train.param_read @b : tensor<40xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<10x8xf32>, tensor<40x8xf32>) -> tensor<10x40xf32>
  %lb = train.bias_add %l, %b : tensor<10x40xf32>, tensor<40xf32>
  %loss = train.cross_entropy %lb, %y : (tensor<10x40xf32>, tensor<10xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
}

// -----

// bf16 logits (16 x 40 x 2 bytes: two tiles of 8 rows): the tiles' dW
// products are accumulated in f32 from a zero-filled accumulator (neither a
// term nor the sum is rounded to bf16 per tile) and rounded once to the
// bf16 gradient.
// CHECK-LABEL: func.func @bf16(
// CHECK: %[[Z:.*]] = train.fill {value = 0.000000e+00 : f64} : tensor<40x8xf32>
// CHECK: %[[A0:.*]] = train.matmul_acc %[[Z]], %{{.*}}, %{{.*}} {transpose_a} : (tensor<40x8xf32>, tensor<8x40xbf16>, tensor<8x8xbf16>) -> tensor<40x8xf32>
// CHECK: %[[A1:.*]] = train.matmul_acc %[[A0]], %{{.*}}, %{{.*}} {transpose_a} : (tensor<40x8xf32>, tensor<8x40xbf16>, tensor<8x8xbf16>) -> tensor<40x8xf32>
// CHECK: train.cast %[[A1]] : tensor<40x8xf32> to tensor<40x8xbf16>
train.param @w : tensor<40x8xbf16> init(normal, 0.5)
func.func @bf16(%x: tensor<16x8xbf16> {train.name = "x"}, %y: tensor<16xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<40x8xbf16>
  %l = train.matmul %x, %w {transpose_b} : (tensor<16x8xbf16>, tensor<40x8xbf16>) -> tensor<16x40xbf16>
  %loss = train.cross_entropy %l, %y : (tensor<16x40xbf16>, tensor<16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
