// RUN: ztrain-opt %s --split-input-file --train-autodiff --verify-diagnostics

// expected-error @+1 {{no function is marked 'train.entry': mark the function that returns the loss}}
module {
  func.func @f(%x: tensor<f32>) -> tensor<f32> {
    return %x : tensor<f32>
  }
}

// -----

func.func @a(%x: tensor<f32>) -> tensor<f32> attributes {train.entry} {
  return %x : tensor<f32>
}
// expected-error @+1 {{more than one function is marked 'train.entry' (the first is @a)}}
func.func @b(%x: tensor<f32>) -> tensor<f32> attributes {train.entry} {
  return %x : tensor<f32>
}

// -----

// expected-error @+1 {{the entry function must return exactly one tensor<f32> (the loss), got '(tensor<4xf32>) -> tensor<4xf32>'}}
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {train.entry} {
  return %x : tensor<4xf32>
}

// -----

train.param @w : tensor<f32> init(ones)
func.func @f(%x: tensor<f32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<f32>
  %c = arith.constant dense<2.0> : tensor<f32>
  // expected-error @+1 {{'arith.addf' op is on the path from the parameters to the loss but has no gradient rule}}
  %s = arith.addf %w, %c : tensor<f32>
  return %s : tensor<f32>
}

// -----

// expected-error @+1 {{@f is already differentiated}}
func.func @f(%x: tensor<f32>) -> tensor<f32> attributes {train.entry, train.gradients = []} {
  return %x : tensor<f32>
}

// -----

// attention's lse is kept for the adjoint, not differentiable.
train.param @q : tensor<2x4x8xf32> init(normal, 1.0)
func.func @f() -> tensor<f32> attributes {train.entry} {
  %q = train.param_read @q : tensor<2x4x8xf32>
  // expected-error @+1 {{'train.attention' op has a loss that depends on its lse result, which has no gradient}}
  %y, %lse = train.attention %q, %q, %q {causal, scale = 0.5 : f64} : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>, tensor<2x4xf32>
  %l = train.reduce sum %lse [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A tile of a loss (train-tile-loss's first_row) is made after the backward
// pass exists; a forward pass that holds one is refused, saying where tiles
// come from.
train.param @w : tensor<10x8xf32> init(normal, 0.5)
func.func @tiled(%x: tensor<4x8xf32> {train.name = "x"}, %y: tensor<12xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<10x8xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<4x8xf32>, tensor<10x8xf32>) -> tensor<4x10xf32>
  // expected-error @+1 {{'train.cross_entropy' op is one tile of a loss (first_row): tile the loss with train-tile-loss after differentiating it}}
  %loss = train.cross_entropy %l, %y {first_row = 0 : i64} : (tensor<4x10xf32>, tensor<12xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
