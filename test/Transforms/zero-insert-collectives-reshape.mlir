// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=2 overlap=false" | FileCheck %s

// Stage 3 with a parameter used through a reshape in both passes (the
// second layer's weight, needed for the hidden activation's gradient): the
// backward pass gathers it again and reshapes that copy, so the forward
// copy is released after the forward pass.
// CHECK-LABEL: func.func @f
// CHECK: %[[F:.*]] = dist.gather_param @w on @dp : tensor<20xf32>
// CHECK-NEXT: %[[FR:.*]] = train.reshape %[[F]] : tensor<20xf32> -> tensor<5x4xf32>
// CHECK-NEXT: train.matmul %{{.*}}, %[[FR]] {transpose_b}
// CHECK: train.cross_entropy_with_grad
// CHECK-NOT: %[[FR]]
// CHECK: %[[B:.*]] = dist.gather_param @w on @dp : tensor<20xf32>
// CHECK-NEXT: %[[BR:.*]] = train.reshape %[[B]] : tensor<20xf32> -> tensor<5x4xf32>
// CHECK-NEXT: train.matmul %{{.*}}, %[[BR]] : (tensor<2x5xf32>, tensor<5x4xf32>) -> tensor<2x4xf32>
// CHECK-NOT: %[[FR]]
// CHECK: return

train.param @v : tensor<4x3xf32> init(normal, 0.1)
train.param @w : tensor<20xf32> init(normal, 0.1)
func.func @f(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %v = train.param_read @v : tensor<4x3xf32>
  %h = train.matmul %x, %v {transpose_b} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %r = train.relu %h : tensor<2x4xf32>
  %w0 = train.param_read @w : tensor<20xf32>
  %w = train.reshape %w0 : tensor<20xf32> -> tensor<5x4xf32>
  %l = train.matmul %r, %w {transpose_b} : (tensor<2x4xf32>, tensor<5x4xf32>) -> tensor<2x5xf32>
  %loss = train.cross_entropy %l, %y : (tensor<2x5xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
