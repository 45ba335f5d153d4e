// RUN: ztrain-opt %s --train-precision=param=fp16 -verify-diagnostics -o /dev/null

// A parameter already in another 16-bit type is not silently re-rounded.
// expected-error @+1 {{parameter @w is 'bf16' but the policy is fp16: declare it f32 (or fp16)}}
train.param @w : tensor<4x3xbf16> init(normal, 0.2)
func.func @loss(%x: tensor<2x4xbf16>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4x3xbf16>
  %h = train.matmul %x, %w : (tensor<2x4xbf16>, tensor<4x3xbf16>) -> tensor<2x3xbf16>
  %l = train.cross_entropy %h, %y : (tensor<2x3xbf16>, tensor<2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
