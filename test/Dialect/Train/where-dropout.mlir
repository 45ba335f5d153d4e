// RUN: ztrain-opt %s | ztrain-opt | FileCheck %s

// train.where and train.dropout print and parse back unchanged, in every
// element type.

// CHECK-LABEL: func.func @where_dropout
// CHECK: train.where %{{.*}}, %{{.*}}, %{{.*}} : tensor<4x4xi32>, tensor<2x4x4xf32>
// CHECK: train.where %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x4x4xi32>, tensor<2x4x4xbf16>
// CHECK: train.dropout %{{.*}} {probability = 1.000000e-01 : f64, stream = 0 : i64} : tensor<2x4x4xf32>
// CHECK: train.dropout %{{.*}} {probability = 1.000000e+00 : f64, stream = 7 : i64} : tensor<2x4x4xf16>
func.func @where_dropout(%m: tensor<4x4xi32>, %m3: tensor<2x4x4xi32>,
                         %a: tensor<2x4x4xf32>, %b: tensor<2x4x4xf32>,
                         %c: tensor<2x4x4xbf16>, %h: tensor<2x4x4xf16>) {
  %0 = train.where %m, %a, %b : tensor<4x4xi32>, tensor<2x4x4xf32>
  %1 = train.where %m3, %c, %c : tensor<2x4x4xi32>, tensor<2x4x4xbf16>
  %2 = train.dropout %0 {probability = 0.1 : f64, stream = 0 : i64} : tensor<2x4x4xf32>
  %3 = train.dropout %h {probability = 1.0 : f64, stream = 7 : i64} : tensor<2x4x4xf16>
  return
}

// Buffers: non-trainable module tensors with a rule, read by buffer_read.
// CHECK: train.buffer @attn.mask : tensor<8x8xi32> init(causal)
// CHECK: train.buffer @table : tensor<8x4xf32> init(normal, 2.000000e-02)
// CHECK: train.buffer @ones : tensor<4xf32> init(ones)
// CHECK-LABEL: func.func @buffers
// CHECK: train.buffer_read @attn.mask : tensor<8x8xi32>
// CHECK: train.buffer_read @table : tensor<8x4xf32>
train.buffer @attn.mask : tensor<8x8xi32> init(causal)
train.buffer @table : tensor<8x4xf32> init(normal, 0.02)
train.buffer @ones : tensor<4xf32> init(ones)
func.func @buffers() {
  %m = train.buffer_read @attn.mask : tensor<8x8xi32>
  %t = train.buffer_read @table : tensor<8x4xf32>
  return
}
