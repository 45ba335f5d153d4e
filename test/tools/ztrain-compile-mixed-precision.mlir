// Mixed precision reaches the executable's descriptor: 16-bit parameters,
// their f32 master states (the `master` word), f32 moments, and each
// gradient buffer's type (the parameter's, or f32 with --reduce-dtype=fp32).
// RUN: ztrain-compile %s --precision=bf16 --emit=mlir | FileCheck %s --check-prefix=BF16
// RUN: ztrain-compile %s --precision=fp16 --emit=mlir | FileCheck %s --check-prefix=FP16
// RUN: ztrain-compile %s --precision=bf16 --reduce-dtype=fp32 --emit=mlir | FileCheck %s --check-prefix=RED32
// RUN: ztrain-compile %s --precision=bf16 --dp=2 --zero-stage=3 --emit=mlir | FileCheck %s --check-prefix=ZERO3
// RUN: ztrain-compile %s --emit=mlir | FileCheck %s --check-prefix=FP32

// BF16: @ztrain_descriptor("ztrain-descriptor 1\0Agrid 1\0Aparam w bf16 2 4 3 init normal 0.20000000000000001\0Aparam b bf16 1 3 init zeros 0\0Agrad w 12 bf16\0Agrad b 3 bf16\0Astate w.master f32 2 4 3 of w master\0Astate w.exp_avg f32 2 4 3 of w\0Astate w.exp_avg_sq f32 2 4 3 of w\0Astate b.master f32 1 3 of b master\0Astate b.exp_avg f32 1 3 of b\0Astate b.exp_avg_sq f32 1 3 of b\0Ainput arg0 f32 2 2 4 bound 0\0Ainput arg1 i32 1 2 bound 3\0A
// FP16: param w f16 2 4 3 init normal 0.20000000000000001\0Aparam b f16 1 3 init zeros 0\0Agrad w 12 f16\0Agrad b 3 f16\0Astate w.master f32 2 4 3 of w master\0A
// RED32: \0Agrad w 12 f32\0Agrad b 3 f32\0Astate w.master f32 2 4 3 of w master\0A
// ZERO3: \0Aparam w bf16 2 4 3 init normal 0.20000000000000001 store 6 shard\0Aparam b bf16 1 3 init zeros 0 store 2 shard\0Agrad w 6 bf16\0Agrad b 2 bf16\0Astate w.master f32 2 4 3 of w master store 6 shard\0A
// FP32: \0Aparam w f32 2 4 3 init normal 0.20000000000000001\0Aparam b f32 1 3 init zeros 0\0Agrad w 12 f32\0Agrad b 3 f32\0Astate w.exp_avg f32 2 4 3 of w\0A
// FP32-NOT: master

train.param @w : tensor<4x3xf32> init(normal, 0.2)
train.param @b : tensor<3xf32> init(zeros)
func.func @loss(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4x3xf32>
  %b = train.param_read @b : tensor<3xf32>
  %h = train.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %hb = train.bias_add %h, %b : tensor<2x3xf32>, tensor<3xf32>
  %l = train.cross_entropy %hb, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
