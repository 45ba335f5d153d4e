// RUN: ztrain-opt %s --lower-to-runtime | FileCheck %s

// train.attention and its adjoint are one kernel call each: the buffers
// (lse is f32 whatever the dtype: 2 x 6 x 5 floats = 240 bytes), then
// heads (the query's leading dims, 12), groups (query heads per key /
// value head: 6 / 3 = 2, grouped-query), Tq 5, Tk 7, D 4, causal and the
// scale. dk and dv have the key's shape.

// CHECK-LABEL: llvm.func @ztrain_step(
// CHECK-SAME: %[[CTX:.*]]: !llvm.ptr)
// CHECK: %[[Q:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c480_i64,
// CHECK: %[[K:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c336_i64,
// CHECK: %[[Y:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c480_i64,
// CHECK: %[[L:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c240_i64,
// CHECK: call @ztrt_attention(%[[CTX]], %c1_i32, %[[Q]], %[[K]], %[[K]], %[[Y]], %[[L]], %c12_i64, %c2_i64, %c5_i64, %c7_i64, %c4_i64, %c0_i32, %{{.*}})
// CHECK: %[[DQ:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c480_i64,
// CHECK: %[[DK:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c336_i64,
// CHECK: %[[DV:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c336_i64,
// CHECK: call @ztrt_attention_grad(%[[CTX]], %c1_i32, %[[Q]], %[[Q]], %[[K]], %[[K]], %[[Y]], %[[L]], %[[DQ]], %[[DK]], %[[DV]], %c12_i64, %c2_i64, %c5_i64, %c7_i64, %c4_i64, %c0_i32, %{{.*}})
// CHECK-DAG: llvm.func @ztrt_attention(!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64, i64, i64, i32, f64)
func.func @f(%l: tensor<f32>) -> tensor<f32> attributes {train.entry, train.step} {
  %q = train.fill {value = 1.0 : f64} : tensor<2x6x5x4xbf16>
  %k = train.fill {value = 2.0 : f64} : tensor<2x3x7x4xbf16>
  %y, %lse = train.attention %q, %k, %k {scale = 0.5 : f64}
      : tensor<2x6x5x4xbf16>, tensor<2x3x7x4xbf16> -> tensor<2x6x5x4xbf16>, tensor<2x6x5xf32>
  %dq, %dk, %dv = train.attention_grad %q, %q, %k, %k, %y, %lse {scale = 0.5 : f64}
      : tensor<2x6x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x6x5xf32>
  %z = train.fill {value = 0.0 : f64} : tensor<f32>
  return %z : tensor<f32>
}
