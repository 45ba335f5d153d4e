// REQUIRES: runtime
// ztrain-run launches the ranks the executable was compiled for; rank 0
// prints; a launch on another number of ranks is refused.
// RUN: ztrain-compile %s -o %t.exe --dp=2 --zero-stage=3 --optimizer=sgd --lr=0.1
// RUN: ztrain-run --np 2 %t.exe --steps 4 --log-every 2 --threads 1 | FileCheck %s
// RUN: not ztrain-run --np 3 %t.exe --steps 1 2>&1 | FileCheck %s --check-prefix=MISMATCH

// CHECK: step 2/4 loss
// CHECK-NEXT: step 4/4 loss
// CHECK-NOT: {{^}}step
// MISMATCH: ztrain: error: [rank 0] the model was compiled for dp=2 ranks but was launched on 3 (compile with --dp=3, or launch 2 ranks)
// MISMATCH-NOT: {{.}}

train.param @w : tensor<3x4xf32> init(normal, 0.1)
func.func @f(%x: tensor<4x4xf32> {train.name = "x"}, %y: tensor<4xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<3x4xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<4x4xf32>, tensor<3x4xf32>) -> tensor<4x3xf32>
  %loss = train.cross_entropy %l, %y : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
