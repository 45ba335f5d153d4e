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
