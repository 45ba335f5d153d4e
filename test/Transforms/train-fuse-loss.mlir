// RUN: ztrain-opt %s --split-input-file --train-autodiff --train-fuse-loss | FileCheck %s

// The loss and its adjoint become one op at the adjoint's place, reading
// the seed; the returned loss is the fused op's.
// CHECK-LABEL: func.func @fused
// CHECK-NOT: train.cross_entropy %
// CHECK: %[[L:.*]] = train.matmul
// CHECK: %[[SEED:.*]] = train.fill {value = 1.000000e+00 : f64} : tensor<f32>
// CHECK: %[[LOSS:[^,]*]], %[[DL:[^ ]*]] = train.cross_entropy_with_grad %[[L]], %arg1, %[[SEED]] : tensor<4x3xf32>, tensor<4xi32>
// CHECK-NOT: train.cross_entropy_grad
// CHECK: train.matmul %[[DL]]
// CHECK: return %[[LOSS]],
train.param @w : tensor<3x5xf32> init(normal, 0.5)
func.func @fused(%x: tensor<4x5xf32> {train.name = "x"}, %y: tensor<4xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<3x5xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<4x5xf32>, tensor<3x5xf32>) -> tensor<4x3xf32>
  %loss = train.cross_entropy %l, %y : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A loss a forward op reads (here scaled before it is returned) is needed
// before the backward pass: the pair stays as it is.
// CHECK-LABEL: func.func @read_early
// CHECK: train.cross_entropy %
// CHECK: train.cross_entropy_grad
// CHECK-NOT: train.cross_entropy_with_grad
train.param @w : tensor<3x5xf32> init(normal, 0.5)
func.func @read_early(%x: tensor<4x5xf32> {train.name = "x"}, %y: tensor<4xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<3x5xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<4x5xf32>, tensor<3x5xf32>) -> tensor<4x3xf32>
  %loss = train.cross_entropy %l, %y : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<f32>
  %half = train.scale %loss {factor = 0.5 : f64} : tensor<f32>
  return %half : tensor<f32>
}

// -----

// ignore_index (PyTorch's -100 label padding) goes from the loss to its
// adjoint (train-autodiff) and to the fused op (train-fuse-loss).
// CHECK-LABEL: func.func @ignored
// CHECK: train.cross_entropy_with_grad %{{.*}}, %arg1, %{{.*}} {ignore_index = -100 : i64} : tensor<4x3xf32>, tensor<4xi32>
train.param @w : tensor<3x5xf32> init(normal, 0.5)
func.func @ignored(%x: tensor<4x5xf32> {train.name = "x"}, %y: tensor<4xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<3x5xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<4x5xf32>, tensor<3x5xf32>) -> tensor<4x3xf32>
  %loss = train.cross_entropy %l, %y {ignore_index = -100 : i64} : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
