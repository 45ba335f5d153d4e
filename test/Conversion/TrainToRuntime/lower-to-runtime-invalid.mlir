// RUN: ztrain-opt %s --split-input-file --lower-to-runtime --verify-diagnostics

// expected-error @+1 {{@f is not a training step yet: run train-autodiff and train-optimizer (the ztrain-training pipeline) first}}
func.func @f(%x: tensor<f32>) -> tensor<f32> attributes {train.entry} {
  return %x : tensor<f32>
}

// -----

// expected-error @+1 {{'train.param' op name 'my weight' must be non-empty and contain no whitespace or control characters}}
train.param @"my weight" : tensor<f32> init(ones)
func.func @f(%x: tensor<f32>) -> tensor<f32> attributes {train.entry, train.step} {
  return %x : tensor<f32>
}

// -----

// expected-error @+1 {{input name 'the x' must be non-empty}}
func.func @f(%x: tensor<f32> {train.name = "the x"}) -> tensor<f32> attributes {train.entry, train.step} {
  return %x : tensor<f32>
}

// -----

// expected-error @+1 {{input #0 has type 'tensor<4xf16>'; inputs must be static tensors of f32 or i32}}
func.func @f(%x: tensor<4xf16>, %l: tensor<f32>) -> tensor<f32> attributes {train.entry, train.step} {
  return %l : tensor<f32>
}

// -----

func.func @f(%x: tensor<f32>) -> tensor<f32> attributes {train.entry, train.step} {
  // expected-error @+1 {{'arith.addf' op cannot be lowered to the ztrain runtime}}
  %y = arith.addf %x, %x : tensor<f32>
  return %y : tensor<f32>
}
