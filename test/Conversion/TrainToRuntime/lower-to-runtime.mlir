// RUN: ztrain-opt %s --ztrain-training="optimizer=sgd lr=0.1 momentum=0.9" --lower-to-runtime | FileCheck %s
// RUN: ztrain-opt %s --ztrain-training --ztrain-to-llvm | FileCheck %s --check-prefix=LLVM

// The descriptor lists parameters, states and inputs in index order; the
// label input's bound is the class count of the cross-entropy it feeds.
// CHECK: llvm.mlir.global external constant @ztrain_descriptor("ztrain-descriptor 1\0Agrid 1\0Aparam w f32 2 3 4 init normal 0.02\0Aparam b f32 1 3 init zeros 0\0Agrad w 12 f32\0Agrad b 3 f32\0Astate w.momentum_buffer f32 2 3 4 of w\0Astate b.momentum_buffer f32 1 3 of b\0Ainput x f32 3 2 5 4 bound 0\0Ainput labels i32 2 2 5 bound 3\0Aoptimizer sgd
// CHECK-NOT: train.param
// CHECK-NOT: train.state

// CHECK-LABEL: llvm.func @ztrain_step(
// CHECK-SAME: %[[CTX:.*]]: !llvm.ptr)
// CHECK-DAG: %[[X:.*]] = llvm.call @ztrt_input(%[[CTX]], %[[C0:.*]]) : (!llvm.ptr, i64) -> !llvm.ptr
// CHECK-DAG: %[[LAB:.*]] = llvm.call @ztrt_input(%[[CTX]], %[[C1:.*]]) : (!llvm.ptr, i64) -> !llvm.ptr
// CHECK: %[[W:.*]] = llvm.call @ztrt_param(%[[CTX]], %[[C0]])
// A linear layer on [2, 5, 4] folds the batch into one GEMM: m = 10.
// CHECK: %[[H:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %[[C120:.*]], %[[ACT:.*]]) : (!llvm.ptr, i64, i32) -> !llvm.ptr
// CHECK: call @ztrt_matmul(%[[CTX]], %c0_i32, %[[X]], %[[W]], %[[H]], %{{.*}}) : (!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64, i64, i32, i32, i64, i64, i64) -> ()
// The reshape aliases its operand: no call, the cross-entropy reads %H's
// bias-added successor directly.
// CHECK-NOT: reshape
// The loss and its adjoint in one call (train-fuse-loss): logits, labels,
// the seed, the loss, the logits' gradient, rows, classes, and the ignored label
// (none: ZTRT_NO_IGNORE_INDEX, INT64_MIN).
// CHECK: call @ztrt_cross_entropy_with_grad(%[[CTX]], %c0_i32, %[[LOGITS:.*]], %[[LAB]], %{{.*}}, %[[LOSS:[^,]*]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %c-9223372036854775808_i64)
// The loss is reported as soon as it exists, before the in-place updates.
// CHECK-NEXT: call @ztrt_set_loss(%[[CTX]], %[[LOSS]])
// Gradients are written straight into the runtime's persistent gradient
// buffers (the descriptor's grad records), which the step never frees.
// CHECK: %[[DW:.*]] = llvm.call @ztrt_grad(%[[CTX]], %[[C0]])
// CHECK: call @ztrt_sgd_update(%[[CTX]], %c0_i32, %{{.*}}, %[[DW]], %{{.*}}) : (!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, f64, f64, f64, f64, i32) -> ()
// CHECK-NOT: call @ztrt_free(%[[CTX]], %[[DW]])
// CHECK: call @ztrt_free(%[[CTX]], %[[LOSS]])
// CHECK-NEXT: return
// Runtime functions are declared once, from the ABI table.
// CHECK-DAG: llvm.func @ztrt_alloc(!llvm.ptr, i64, i32) -> !llvm.ptr
// CHECK-DAG: llvm.func @ztrt_matmul(!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64, i64, i32, i32, i64, i64, i64)

// LLVM: llvm.func @ztrain_step(%{{.*}}: !llvm.ptr)
// LLVM: llvm.call @ztrt_adam_update(
// LLVM: llvm.func @ztrt_arena(!llvm.ptr, i64, i64, i32) -> !llvm.ptr

train.param @w : tensor<3x4xf32> init(normal, 0.02)
train.param @b : tensor<3xf32> init(zeros)
func.func @loss(%x: tensor<2x5x4xf32> {train.name = "x"}, %y: tensor<2x5xi32> {train.name = "labels"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<3x4xf32>
  %b = train.param_read @b : tensor<3xf32>
  %h = train.matmul %x, %w {transpose_b} : (tensor<2x5x4xf32>, tensor<3x4xf32>) -> tensor<2x5x3xf32>
  %hb = train.bias_add %h, %b : tensor<2x5x3xf32>, tensor<3xf32>
  %l = train.reshape %hb : tensor<2x5x3xf32> -> tensor<10x3xf32>
  %yl = train.reshape %y : tensor<2x5xi32> -> tensor<10xi32>
  %loss = train.cross_entropy %l, %yl : (tensor<10x3xf32>, tensor<10xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
