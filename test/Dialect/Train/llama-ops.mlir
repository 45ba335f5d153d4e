// RUN: ztrain-opt %s | ztrain-opt | FileCheck %s

// The ops Llama-class models need print and parse back unchanged, in every
// element type.

// CHECK-LABEL: func.func @elementwise
// CHECK: train.silu %{{.*}} : tensor<2x8xf32>
// CHECK: train.sigmoid %{{.*}} : tensor<2x8xf32>
// CHECK: train.exp %{{.*}} : tensor<2x8xf32>
// CHECK: train.sqrt %{{.*}} : tensor<2x8xf32>
// CHECK: train.rsqrt %{{.*}} : tensor<2x8xf32>
// CHECK: train.neg %{{.*}} : tensor<2x8xf32>
// CHECK: train.div %{{.*}}, %{{.*}} : tensor<2x8xf32>
// CHECK: train.silu %{{.*}} : tensor<2x8xbf16>
// CHECK: train.div %{{.*}}, %{{.*}} : tensor<2x8xf16>
// CHECK: train.gelu_erf %{{.*}} : tensor<2x8xf32>
// CHECK: train.gelu_erf_grad %{{.*}}, %{{.*}} : tensor<2x8xbf16>
// CHECK: train.tanh %{{.*}} : tensor<2x8xf16>
// CHECK: train.tanh_grad %{{.*}}, %{{.*}} : tensor<2x8xf32>
// CHECK: train.erf %{{.*}} : tensor<2x8xbf16>
// CHECK: train.erf_grad %{{.*}}, %{{.*}} : tensor<2x8xf32>
func.func @elementwise(%x: tensor<2x8xf32>, %b: tensor<2x8xbf16>, %h: tensor<2x8xf16>) {
  %0 = train.silu %x : tensor<2x8xf32>
  %1 = train.sigmoid %0 : tensor<2x8xf32>
  %2 = train.exp %1 : tensor<2x8xf32>
  %3 = train.sqrt %2 : tensor<2x8xf32>
  %4 = train.rsqrt %3 : tensor<2x8xf32>
  %5 = train.neg %4 : tensor<2x8xf32>
  %6 = train.div %5, %x : tensor<2x8xf32>
  %7 = train.silu %b : tensor<2x8xbf16>
  %8 = train.div %h, %h : tensor<2x8xf16>
  %9 = train.gelu_erf %x : tensor<2x8xf32>
  %10 = train.gelu_erf_grad %b, %b : tensor<2x8xbf16>
  %11 = train.tanh %h : tensor<2x8xf16>
  %12 = train.tanh_grad %x, %x : tensor<2x8xf32>
  %13 = train.erf %b : tensor<2x8xbf16>
  %14 = train.erf_grad %x, %x : tensor<2x8xf32>
  return
}

// CHECK-LABEL: func.func @norm_rope_mask
// CHECK: train.rms_norm %{{.*}}, %{{.*}} {epsilon = 9.9999999999999995E-7 : f64} : tensor<2x4x3x8xf32>, tensor<8xf32>
// CHECK: train.rotary_embedding %{{.*}} {seq_dim = 1 : i64, theta = 5.000000e+05 : f64} : tensor<2x4x3x8xf32>
// CHECK: train.rotary_embedding %{{.*}} {inverse, seq_dim = 2 : i64} : tensor<2x3x4x8xbf16>
// CHECK: train.rotary_embedding %{{.*}} {llama3_scaling = array<f64: 8.000000e+00, 1.000000e+00, 4.000000e+00, 8.192000e+03>, seq_dim = 1 : i64, theta = 5.000000e+05 : f64} : tensor<2x4x3x8xf32>
// CHECK: train.masked_fill %{{.*}}, %{{.*}} {value = 0xFFF0000000000000 : f64} : tensor<2x3x4x4xf32>, tensor<4x4xi32>
func.func @norm_rope_mask(%x: tensor<2x4x3x8xf32>, %g: tensor<8xf32>, %q: tensor<2x3x4x8xbf16>,
                          %s: tensor<2x3x4x4xf32>, %m: tensor<4x4xi32>) {
  %0 = train.rms_norm %x, %g {epsilon = 1.0e-6 : f64} : tensor<2x4x3x8xf32>, tensor<8xf32>
  %1 = train.rotary_embedding %0 {seq_dim = 1 : i64, theta = 500000.0 : f64} : tensor<2x4x3x8xf32>
  %2 = train.rotary_embedding %q {seq_dim = 2 : i64, inverse} : tensor<2x3x4x8xbf16>
  %4 = train.rotary_embedding %0 {seq_dim = 1 : i64, theta = 500000.0 : f64, llama3_scaling = array<f64: 8.0, 1.0, 4.0, 8192.0>} : tensor<2x4x3x8xf32>
  %3 = train.masked_fill %s, %m {value = 0xFFF0000000000000 : f64} : tensor<2x3x4x4xf32>, tensor<4x4xi32>
  return
}

// CHECK-LABEL: func.func @layout
// CHECK: train.slice %{{.*}} {dim = 1 : i64, start = 2 : i64} : tensor<2x6x4xf32> -> tensor<2x3x4xf32>
// CHECK: train.concat %{{.*}}, %{{.*}} {dim = 2 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x8xf32>
// CHECK: train.slice_grad %{{.*}} {dim = 1 : i64, start = 2 : i64} : tensor<2x3x4xf32> -> tensor<2x6x4xf32>
// CHECK: train.reduce max %{{.*}} [1] : tensor<2x6x4xf32> -> tensor<2x4xf32>
// CHECK: train.reduce_max_grad %{{.*}}, %{{.*}}, %{{.*}} [1] : tensor<2x4xf32>, tensor<2x6x4xf32>
func.func @layout(%x: tensor<2x6x4xf32>) {
  %0 = train.slice %x {dim = 1 : i64, start = 2 : i64} : tensor<2x6x4xf32> -> tensor<2x3x4xf32>
  %1 = train.concat %0, %0 {dim = 2 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x8xf32>
  %2 = train.slice_grad %0 {dim = 1 : i64, start = 2 : i64} : tensor<2x3x4xf32> -> tensor<2x6x4xf32>
  %3 = train.reduce max %x [1] : tensor<2x6x4xf32> -> tensor<2x4xf32>
  %4 = train.reduce_max_grad %3, %x, %3 [1] : tensor<2x4xf32>, tensor<2x6x4xf32>
  return
}
