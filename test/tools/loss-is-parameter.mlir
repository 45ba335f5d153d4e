// REQUIRES: runtime
// The reported loss is the value before the step's in-place updates, even
// when the loss is a parameter itself (SGD, lr 0.1, gradient 1: 1 -> 0.9).
// RUN: ztrain-compile %s -o %t.exe --optimizer=sgd --lr=0.1
// RUN: %t.exe --steps 2 | FileCheck %s
// RUN: ztrain-compile %s -o %t.z3 --optimizer=sgd --lr=0.1 --dp=2 --zero-stage=3
// RUN: ztrain-run --np 2 %t.z3 --steps 2 --threads 1 | FileCheck %s
// RUN: ztrain-compile %s -o %t.z1 --optimizer=sgd --lr=0.1 --dp=2 --zero-stage=1
// RUN: ztrain-run --np 2 %t.z1 --steps 2 --threads 1 | FileCheck %s

// CHECK: step 1/2 loss 1 {{[0-9.]+}} ms/step
// CHECK: step 2/2 loss 0.9 {{[0-9.]+}} ms/step

train.param @s : tensor<f32> init(ones)
func.func @f(%x: tensor<2xf32> {train.name = "x"}) -> tensor<f32> attributes {train.entry} {
  %s = train.param_read @s : tensor<f32>
  return %s : tensor<f32>
}
