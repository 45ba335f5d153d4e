// RUN: ztrain-opt %s --train-autodiff --train-optimizer=kind=sgd --lower-to-runtime | FileCheck %s

// What the PyTorch importer adds: an `init(external)` buffer is a
// descriptor record like any other (the executable refuses to start when
// --init lacks it), and the exact GELU and its adjoint are elementwise
// kernels (dtype 0 = f32, 8 elements).
// CHECK: llvm.mlir.global external constant @ztrain_descriptor("ztrain-descriptor 1\0Agrid 1\0Aparam w f32 2 2 4 init ones 0\0Agrad w 8 f32\0Abuffer rope.cos f32 2 2 4 init external 0\0A
// CHECK-LABEL: func.func @ztrain_step(
// CHECK-SAME: %[[CTX:.*]]: !llvm.ptr)
// CHECK: %[[COS:.*]] = call @ztrt_buffer(%[[CTX]], %c0_i64)
// CHECK: call @ztrt_mul(%[[CTX]], %c0_i32, %{{.*}}, %[[COS]], %{{.*}}, %c8_i64)
// CHECK: call @ztrt_gelu_erf(%[[CTX]], %c0_i32, %{{.*}}, %{{.*}}, %c8_i64)
// CHECK: call @ztrt_gelu_erf_grad(%[[CTX]], %c0_i32, %{{.*}}, %{{.*}}, %{{.*}}, %c8_i64)
train.param @w : tensor<2x4xf32> init(ones)
train.buffer @rope.cos : tensor<2x4xf32> init(external)
func.func @loss(%x: tensor<2x4xf32> {train.name = "x"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<2x4xf32>
  %c = train.buffer_read @rope.cos : tensor<2x4xf32>
  %h = train.mul %w, %c : tensor<2x4xf32>
  %g = train.gelu_erf %h : tensor<2x4xf32>
  %l = train.reduce mean %g [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
