// RUN: ztrain-opt %s --lower-to-runtime | FileCheck %s

// train.where and train.dropout in f16 (dtype 2, 2-byte elements):
// where is ztrt_where(mask, on_true, on_false, out, outer, inner) with the
// [4] mask broadcast over 6 outer rows; dropout is ztrt_dropout(x, out, n,
// stream, probability): the runtime adds the seed, the step and the rank.

// CHECK-LABEL: llvm.func @ztrain_step(
// CHECK-SAME: %[[CTX:.*]]: !llvm.ptr)
// CHECK: %[[P:.*]] = arith.constant 2.500000e-01 : f64
// CHECK: %[[MASK:.*]] = llvm.call @ztrt_input(%[[CTX]], %c0_i64)
// CHECK: %[[A:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c48_i64,
// CHECK: %[[B:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c48_i64,
// CHECK: %[[W:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c48_i64,
// CHECK: call @ztrt_where(%[[CTX]], %c2_i32, %[[MASK]], %[[A]], %[[B]], %[[W]], %c6_i64, %c4_i64)
// CHECK: %[[D:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c48_i64,
// CHECK: call @ztrt_dropout(%[[CTX]], %c2_i32, %[[W]], %[[D]], %c24_i64, %c9_i64, %[[P]])
// CHECK-DAG: llvm.func @ztrt_where(!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64)
// CHECK-DAG: llvm.func @ztrt_dropout(!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, i64, i64, f64)
func.func @f(%m: tensor<4xi32> {train.name = "m"}) -> tensor<f32> attributes {train.entry, train.step} {
  %a = train.fill {value = 3.0 : f64} : tensor<2x3x4xf16>
  %b = train.fill {value = 1.0 : f64} : tensor<2x3x4xf16>
  %w = train.where %m, %a, %b : tensor<4xi32>, tensor<2x3x4xf16>
  %d = train.dropout %w {probability = 0.25 : f64, stream = 9 : i64} : tensor<2x3x4xf16>
  %z = train.fill {value = 0.0 : f64} : tensor<f32>
  return %z : tensor<f32>
}
