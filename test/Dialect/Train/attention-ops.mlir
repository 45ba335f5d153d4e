// RUN: ztrain-opt %s | ztrain-opt | FileCheck %s

// Cross-attention: 5 queries over 7 keys, no mask, the default order of
// the attributes; an attention_grad written by hand round-trips too.
// CHECK-LABEL: func.func @cross
// CHECK: train.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f64} : tensor<4x5x8xf16>, tensor<4x7x8xf16> -> tensor<4x5x8xf16>, tensor<4x5xf32>
// CHECK: train.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f64} : tensor<4x5x8xf16>, tensor<4x7x8xf16>, tensor<4x7x8xf16>, tensor<4x5xf32>
func.func @cross(%q: tensor<4x5x8xf16>, %k: tensor<4x7x8xf16>, %v: tensor<4x7x8xf16>, %dy: tensor<4x5x8xf16>) {
  %y, %lse = train.attention %q, %k, %v {scale = 1.0 : f64}
      : tensor<4x5x8xf16>, tensor<4x7x8xf16> -> tensor<4x5x8xf16>, tensor<4x5xf32>
  %dq, %dk, %dv = train.attention_grad %dy, %q, %k, %v, %y, %lse {scale = 1.0 : f64}
      : tensor<4x5x8xf16>, tensor<4x7x8xf16>, tensor<4x7x8xf16>, tensor<4x5xf32>
  return
}

// Grouped-query: 6 query heads over 2 key / value heads (3 query heads
// each); the adjoint's dk and dv have the key's shape.
// CHECK-LABEL: func.func @grouped
// CHECK: train.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 5.000000e-01 : f64} : tensor<2x6x7x4xf32>, tensor<2x2x7x4xf32> -> tensor<2x6x7x4xf32>, tensor<2x6x7xf32>
// CHECK: train.attention_grad {{.*}} : tensor<2x6x7x4xf32>, tensor<2x2x7x4xf32>, tensor<2x2x7x4xf32>, tensor<2x6x7xf32>
func.func @grouped(%q: tensor<2x6x7x4xf32>, %k: tensor<2x2x7x4xf32>, %dy: tensor<2x6x7x4xf32>) {
  %y, %lse = train.attention %q, %k, %k {causal, scale = 0.5 : f64}
      : tensor<2x6x7x4xf32>, tensor<2x2x7x4xf32> -> tensor<2x6x7x4xf32>, tensor<2x6x7xf32>
  %dq, %dk, %dv = train.attention_grad %dy, %q, %k, %k, %y, %lse {causal, scale = 0.5 : f64}
      : tensor<2x6x7x4xf32>, tensor<2x2x7x4xf32>, tensor<2x2x7x4xf32>, tensor<2x6x7xf32>
  return
}
