// RUN: ztrain-opt %s --train-autodiff --train-optimizer=kind=sgd --lower-to-runtime | FileCheck %s
// RUN: ztrain-opt %s --train-autodiff | FileCheck %s --check-prefix=GRAD

// Buffers are `buffer` records of the descriptor (after the states, whole
// tensors, with their rule), read with ztrt_buffer(index) in declaration
// order; a read is the buffer's storage (no allocation, no copy).
// CHECK: llvm.mlir.global external constant @ztrain_descriptor("ztrain-descriptor 1\0Agrid 1\0Aparam w f32 2 4 4 init ones 0\0Agrad w 16 f32\0Abuffer mask i32 2 4 4 init causal 0\0Abuffer table f32 2 4 4 init uniform 0.5\0Ainput x f32 2 4 4 bound 0
// CHECK-LABEL: llvm.func @ztrain_step(
// CHECK-SAME: %[[CTX:.*]]: !llvm.ptr)
// CHECK-DAG: %[[MASK:.*]] = llvm.call @ztrt_buffer(%[[CTX]], %c0_i64)
// CHECK-DAG: %[[TABLE:.*]] = llvm.call @ztrt_buffer(%[[CTX]], %c1_i64)
// CHECK: call @ztrt_mul(%[[CTX]], %c0_i32, %{{.*}}, %[[TABLE]], %{{.*}}, %c16_i64)
// CHECK: call @ztrt_masked_fill(%[[CTX]], %c0_i32, %{{.*}}, %[[MASK]],
// CHECK-NOT: call @ztrt_free(%[[CTX]], %[[TABLE]])
// CHECK: llvm.func @ztrt_buffer(!llvm.ptr, i64) -> !llvm.ptr

// The adjoint of the table's use is not built (buffers are constants): the
// one mul in the backward pass is dy * table for w.
// GRAD-LABEL: func.func @loss
// GRAD: %[[T:.*]] = train.buffer_read @table
// GRAD: train.mul %[[W:.*]], %[[T]]
// GRAD: train.mul %{{.*}}, %[[T]]
// GRAD-NOT: train.mul
// GRAD: return
train.param @w : tensor<4x4xf32> init(ones)
train.buffer @mask : tensor<4x4xi32> init(causal)
train.buffer @table : tensor<4x4xf32> init(uniform, 0.5)
func.func @loss(%x: tensor<4x4xf32> {train.name = "x"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4x4xf32>
  %m = train.buffer_read @mask : tensor<4x4xi32>
  %t = train.buffer_read @table : tensor<4x4xf32>
  %wt = train.mul %w, %t : tensor<4x4xf32>
  %h = train.masked_fill %wt, %m {value = 0.0 : f64} : tensor<4x4xf32>, tensor<4x4xi32>
  %l = train.reduce sum %h [0, 1] : tensor<4x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
