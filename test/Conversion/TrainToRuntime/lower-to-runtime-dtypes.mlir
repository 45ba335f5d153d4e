// RUN: ztrain-opt %s --lower-to-runtime | FileCheck %s

// The element type is data: every kernel call passes its ztrt_dtype
// (0 f32, 1 bf16, 2 f16) after the context, and buffers are sized by the
// element type (2 bytes for bf16 and f16).

// CHECK-LABEL: llvm.func @ztrain_step(
// CHECK-SAME: %[[CTX:.*]]: !llvm.ptr)
// CHECK: %[[X:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c8_i64, %{{.*}})
// CHECK: call @ztrt_fill(%[[CTX]], %c1_i32, %[[X]], %c4_i64, %{{.*}}) : (!llvm.ptr, i32, !llvm.ptr, i64, f64) -> ()
// CHECK: call @ztrt_relu(%[[CTX]], %c1_i32, %[[X]], %{{.*}}, %c4_i64)
// CHECK: %[[H:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c24_i64, %{{.*}})
// CHECK: call @ztrt_fill(%[[CTX]], %c2_i32, %[[H]], %c12_i64, %{{.*}})
// CHECK: call @ztrt_add(%[[CTX]], %c2_i32, %[[H]], %[[H]], %{{.*}}, %c12_i64)
// CHECK: call @ztrt_fill(%[[CTX]], %c0_i32, %{{.*}}, %c1_i64, %{{.*}})
// CHECK-DAG: llvm.func @ztrt_relu(!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, i64)
func.func @f(%l: tensor<f32>) -> tensor<f32> attributes {train.entry, train.step} {
  %x = train.fill {value = 1.0 : f64} : tensor<4xbf16>
  %y = train.relu %x : tensor<4xbf16>
  %h = train.fill {value = 2.0 : f64} : tensor<3x4xf16>
  %s = train.add %h, %h : tensor<3x4xf16>
  %z = train.fill {value = 0.0 : f64} : tensor<f32>
  return %z : tensor<f32>
}
