// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=2 overlap=false" | FileCheck %s

// Stage 3 with tied weights: the table is read by the embedding and by the
// output projection. The forward uses share one gather (before the first of
// them), the backward use gets a second one: never more than two gathers
// per parameter, so a step moves at most 3 Psi (N-1)/N.
// CHECK-LABEL: func.func @tied
// CHECK: %[[F:.*]] = dist.gather_param @wte on @dp : tensor<10x4xf32>
// CHECK-NEXT: train.embedding %[[F]]
// CHECK-NOT: dist.gather_param
// CHECK: train.matmul %{{.*}}, %[[F]] {transpose_b}
// CHECK: train.cross_entropy_with_grad
// CHECK: %[[B:.*]] = dist.gather_param @wte on @dp : tensor<10x4xf32>
// CHECK-NEXT: train.matmul %{{.*}}, %[[B]] : (tensor<6x10xf32>, tensor<10x4xf32>) -> tensor<6x4xf32>
// CHECK-NOT: dist.gather_param
// CHECK: return

train.param @wte : tensor<10x4xf32> init(normal, 0.02)
func.func @tied(%ids: tensor<2x3xi32>, %y: tensor<2x3xi32>) -> tensor<f32> attributes {train.entry} {
  %e = train.param_read @wte : tensor<10x4xf32>
  %h = train.embedding %e, %ids : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  %e2 = train.param_read @wte : tensor<10x4xf32>
  %l = train.matmul %h, %e2 {transpose_b} : (tensor<2x3x4xf32>, tensor<10x4xf32>) -> tensor<2x3x10xf32>
  %l2 = train.reshape %l : tensor<2x3x10xf32> -> tensor<6x10xf32>
  %y2 = train.reshape %y : tensor<2x3xi32> -> tensor<6xi32>
  %loss = train.cross_entropy %l2, %y2 : (tensor<6x10xf32>, tensor<6xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
