// RUN: ztrain-opt %s -split-input-file --train-autodiff --train-optimizer=kind=sgd --lower-to-runtime | FileCheck %s

// What the PyTorch importer adds: an `init(external)` buffer is a
// descriptor record like any other (the executable refuses to start when
// --init lacks it), and the exact GELU and its adjoint are elementwise
// kernels (dtype 0 = f32, 8 elements).
// CHECK: llvm.mlir.global external constant @ztrain_descriptor("ztrain-descriptor 1\0Agrid 1\0Aparam w f32 2 2 4 init ones 0\0Agrad w 8 f32\0Abuffer rope.cos f32 2 2 4 init external 0\0A
// CHECK-LABEL: llvm.func @ztrain_step(
// CHECK-SAME: %[[CTX:.*]]: !llvm.ptr)
// CHECK: %[[COS:.*]] = llvm.call @ztrt_buffer(%[[CTX]], %c0_i64)
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

// -----

// A model that shifts its own labels (Hugging Face's labels[..., 1:]): the
// i32 slice is a strided copy (4 bytes an element: rows of 3 of the 4
// labels, from byte offset 4), and the labels' bound is still the class
// count (10), found through the slice and the reshape.
// CHECK: Ainput labels i32 2 2 4 bound 10\0A
// CHECK-LABEL: llvm.func @ztrain_step(
// CHECK: %[[L:.*]] = llvm.call @ztrt_input(%{{.*}}, %c0_i64)
// CHECK: %[[AT:.*]] = llvm.getelementptr %[[L]][%c4_i64]
// CHECK: call @ztrt_copy_2d(%{{.*}}, %[[AT]], %{{.*}}, %c2_i64, %c12_i64, %c16_i64, %c12_i64)
train.param @w : tensor<6x10xf32> init(normal, 0.02)
func.func @loss(%labels: tensor<2x4xi32> {train.name = "labels"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<6x10xf32>
  %s = train.slice %labels {dim = 1 : i64, start = 1 : i64} : tensor<2x4xi32> -> tensor<2x3xi32>
  %r = train.reshape %s : tensor<2x3xi32> -> tensor<6xi32>
  %l = train.cross_entropy %w, %r : (tensor<6x10xf32>, tensor<6xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
