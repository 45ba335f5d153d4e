// RUN: ztrain-opt %s | ztrain-opt | FileCheck %s --check-prefix=ROUND
// RUN: ztrain-opt %s --train-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: ztrain-opt %s --train-precision=param=bf16 | FileCheck %s --check-prefix=BF16

// train.attention (fused scaled dot-product attention) prints and parses
// back; its gradient rule is one train.attention_grad fed by the forward
// operands, output and lse; train-precision makes its tensors bf16 but
// keeps lse f32. (Recompute with the fused op: test/e2e/test_attention.py.)

// ROUND-LABEL: func.func @attention
// ROUND: %{{.*}}, %{{.*}} = train.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 2.500000e-01 : f64} : tensor<2x3x8x16xf32>, tensor<2x3x8x16xf32> -> tensor<2x3x8x16xf32>, tensor<2x3x8xf32>

// GRAD-LABEL: func.func @attention
// GRAD: %[[Q:.*]] = train.param_read @q
// GRAD: %[[K:.*]] = train.param_read @k
// GRAD: %[[V:.*]] = train.param_read @v
// GRAD: %[[Y:[^,]*]], %[[L:[^ ]*]] = train.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 2.500000e-01 : f64}
// GRAD: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^ ]*]] = train.attention_grad %{{.*}}, %[[Q]], %[[K]], %[[V]], %[[Y]], %[[L]] {causal, scale = 2.500000e-01 : f64} : tensor<2x3x8x16xf32>, tensor<2x3x8x16xf32>, tensor<2x3x8x16xf32>, tensor<2x3x8xf32>
// GRAD: return %{{.*}}, %[[DV]], %[[DK]], %[[DQ]]

// BF16-LABEL: func.func @attention
// BF16: train.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 2.500000e-01 : f64} : tensor<2x3x8x16xbf16>, tensor<2x3x8x16xbf16> -> tensor<2x3x8x16xbf16>, tensor<2x3x8xf32>

train.param @v : tensor<2x3x8x16xf32> init(normal, 1.0)
train.param @k : tensor<2x3x8x16xf32> init(normal, 1.0)
train.param @q : tensor<2x3x8x16xf32> init(normal, 1.0)
func.func @attention() -> tensor<f32> attributes {train.entry} {
  %q = train.param_read @q : tensor<2x3x8x16xf32>
  %k = train.param_read @k : tensor<2x3x8x16xf32>
  %v = train.param_read @v : tensor<2x3x8x16xf32>
  %y, %lse = train.attention %q, %k, %v {causal, scale = 0.25 : f64}
      : tensor<2x3x8x16xf32>, tensor<2x3x8x16xf32> -> tensor<2x3x8x16xf32>, tensor<2x3x8xf32>
  %l = train.reduce sum %y [0, 1, 2, 3] : tensor<2x3x8x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

