// RUN: ztrain-opt %s --split-input-file --train-autodiff --train-recompute=policy=full --verify-diagnostics
// RUN: not ztrain-opt %s --split-input-file --train-autodiff --train-recompute=policy=fulll 2>&1 | FileCheck %s --check-prefix=POLICY
// RUN: not ztrain-opt %s --split-input-file --train-recompute=policy=full 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not ztrain-opt %s --split-input-file --train-autodiff --train-recompute=policy=selective 2>&1 | FileCheck %s --check-prefix=SEL

// POLICY: for the --policy option: Cannot find option named 'fulll'!
// ORDER: error: train-recompute rewrites the backward pass: run it after train-autodiff and before train-optimizer
// SEL: error: train-recompute{policy=selective}: nothing to recompute in @loss: the backward pass reads only values the policy keeps (1 segment boundary)

// A mark on a value computed from parameters alone.
train.param @w : tensor<4x4xf32> init(normal, 0.5)
func.func @loss(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4x4xf32>
  // expected-error @+1 {{'train.relu' op is marked 'train.checkpoint' but its result is computed from parameters and constants alone}}
  %wr = train.relu %w {train.checkpoint} : tensor<4x4xf32>
  %h = train.matmul %x, %wr {transpose_b} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %loss = train.cross_entropy %h, %y : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A mark on the loss: no forward op reads it, it ends no segment.
train.param @w : tensor<4x4xf32> init(normal, 0.5)
func.func @loss(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4x4xf32>
  %h = train.matmul %x, %w {transpose_b} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  // expected-error @+1 {{'train.cross_entropy' op is marked 'train.checkpoint' but no later forward op reads its result, so it ends no segment}}
  %loss = train.cross_entropy %h, %y {train.checkpoint} : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// The mark takes no value.
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'train.relu' op 'train.checkpoint' is a unit attribute (it takes no value)}}
  %r = train.relu %x {train.checkpoint = 1 : i64} : tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

// No residual stream and no mark: nothing to cut at.
train.param @w1 : tensor<4x4xf32> init(normal, 0.5)
train.param @w2 : tensor<3x4xf32> init(normal, 0.5)
// expected-error @+1 {{train-recompute{policy=full}: nothing to recompute in @loss: the graph has no segment boundary (no residual stream to cut at); mark the values to keep with 'train.checkpoint'}}
func.func @loss(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w1 = train.param_read @w1 : tensor<4x4xf32>
  %h = train.matmul %x, %w1 {transpose_b} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a = train.relu %h : tensor<2x4xf32>
  %w2 = train.param_read @w2 : tensor<3x4xf32>
  %l = train.matmul %a, %w2 {transpose_b} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  %loss = train.cross_entropy %l, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// One marked segment whose backward reads only linear products and the
// boundary: selective keeps them all (full recomputes the product).
train.param @w1 : tensor<4x4xf32> init(normal, 0.5)
train.param @w2 : tensor<3x4xf32> init(normal, 0.5)
func.func @loss(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w1 = train.param_read @w1 : tensor<4x4xf32>
  %h = train.matmul %x, %w1 {transpose_b} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a = train.gelu %h : tensor<2x4xf32>
  %b = train.add %a, %a {train.checkpoint} : tensor<2x4xf32>
  %w2 = train.param_read @w2 : tensor<3x4xf32>
  %l = train.matmul %b, %w2 {transpose_b} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  %loss = train.cross_entropy %l, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
