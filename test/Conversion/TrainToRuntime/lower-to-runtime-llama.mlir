// RUN: ztrain-opt %s --lower-to-runtime | FileCheck %s

// The Llama ops' runtime calls, in bf16 (dtype 1, 2-byte elements).
// rms_norm, rotary_embedding and masked_fill are kernels; neg is the scale
// kernel with factor -1; slice, concat and slice_grad are strided copies
// (ztrt_copy_2d: src, dst, rows, row bytes, src stride, dst stride) at byte
// offsets, the adjoint of a slice after a zero fill; max is reduce kind 2.

// CHECK-LABEL: llvm.func @ztrain_step(
// CHECK-SAME: %[[CTX:.*]]: !llvm.ptr)
// rotary_embedding's theta and Llama 3 scaling (factor, low, high, original)
// CHECK-DAG: %[[THETA:.*]] = arith.constant 5.000000e+05 : f64
// CHECK-DAG: %[[FACTOR:.*]] = arith.constant 3.200000e+01 : f64
// CHECK-DAG: %[[LOW:.*]] = arith.constant 1.000000e+00 : f64
// CHECK-DAG: %[[HIGH:.*]] = arith.constant 4.000000e+00 : f64
// CHECK-DAG: %[[ORIG:.*]] = arith.constant 8.192000e+03 : f64
// CHECK: %[[MASK:.*]] = llvm.call @ztrt_input(%[[CTX]], %c0_i64)
// CHECK: %[[X:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c96_i64,
// CHECK: %[[G:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c8_i64,
// CHECK: %[[RN:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c96_i64,
// rows 12, cols 4, epsilon
// CHECK: call @ztrt_rms_norm(%[[CTX]], %c1_i32, %[[X]], %[[G]], %[[RN]], %c12_i64, %c4_i64, %{{.*}})
// CHECK: %[[RO:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c96_i64,
// outer 2, seq 6, inner 1, dim 4, theta, llama3 scaling (factor, low,
// high, original), not inverse
// CHECK: call @ztrt_rotary_embedding(%[[CTX]], %c1_i32, %[[RN]], %[[RO]], %c2_i64, %c6_i64, %c1_i64, %c4_i64, %[[THETA]], %[[FACTOR]], %[[LOW]], %[[HIGH]], %[[ORIG]], %c0_i32)
// CHECK: %[[MF:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c96_i64,
// outer 2 copies of the [6, 4] mask
// CHECK: call @ztrt_masked_fill(%[[CTX]], %c1_i32, %[[RO]], %[[MASK]], %[[MF]], %c2_i64, %c24_i64, %{{.*}})
// CHECK: %[[N:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c96_i64,
// CHECK: call @ztrt_scale(%[[CTX]], %c1_i32, %[[MF]], %[[N]], %c48_i64, %{{.*}})
// slice dim 1 [2, 5) of [2, 6, 4]: rows of 4 elements = 8 bytes, from byte 16
// CHECK: %[[S:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c48_i64,
// CHECK: %[[AT:.*]] = llvm.getelementptr %[[N]][%c16_i64]
// CHECK: call @ztrt_copy_2d(%[[CTX]], %[[AT]], %[[S]], %c2_i64, %c24_i64, %c48_i64, %c24_i64)
// concat along dim 1 into [2, 9, 4]: %s at byte 0, %n at byte 3 * 8
// CHECK: %[[C:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c144_i64,
// CHECK: %[[C0:.*]] = llvm.getelementptr %[[C]][%c0_i64]
// CHECK: call @ztrt_copy_2d(%[[CTX]], %[[S]], %[[C0]], %c2_i64, %c24_i64, %c24_i64, %c72_i64)
// CHECK: %[[C1:.*]] = llvm.getelementptr %[[C]][%c24_i64]
// CHECK: call @ztrt_copy_2d(%[[CTX]], %[[N]], %[[C1]], %c2_i64, %c48_i64, %c48_i64, %c72_i64)
// slice_grad: zeros, then [2, 3, 4] written at element 1 of dim 2 of [2, 3, 7]
// CHECK: %[[SG:.*]] = llvm.call @ztrt_alloc(%[[CTX]], %c84_i64,
// CHECK: call @ztrt_fill(%[[CTX]], %c1_i32, %[[SG]], %c42_i64, %{{.*}})
// CHECK: %[[SG1:.*]] = llvm.getelementptr %[[SG]][%c2_i64]
// CHECK: call @ztrt_copy_2d(%[[CTX]], %[[S]], %[[SG1]], %c6_i64, %c8_i64, %c8_i64, %c14_i64)
// CHECK: call @ztrt_reduce(%[[CTX]], %c1_i32, %[[C]], %{{.*}}, %c3_i64, %{{.*}}, %{{.*}}, %c2_i32)
func.func @f(%m: tensor<6x4xi32> {train.name = "m"}) -> tensor<f32> attributes {train.entry, train.step} {
  %x = train.fill {value = 3.0 : f64} : tensor<2x6x4xbf16>
  %g = train.fill {value = 1.0 : f64} : tensor<4xbf16>
  %rn = train.rms_norm %x, %g : tensor<2x6x4xbf16>, tensor<4xbf16>
  %ro = train.rotary_embedding %rn {seq_dim = 1 : i64, theta = 500000.0 : f64, llama3_scaling = array<f64: 32.0, 1.0, 4.0, 8192.0>} : tensor<2x6x4xbf16>
  %mf = train.masked_fill %ro, %m {value = -2.0 : f64} : tensor<2x6x4xbf16>, tensor<6x4xi32>
  %n = train.neg %mf : tensor<2x6x4xbf16>
  %s = train.slice %n {dim = 1 : i64, start = 2 : i64} : tensor<2x6x4xbf16> -> tensor<2x3x4xbf16>
  %c = train.concat %s, %n {dim = 1 : i64} : (tensor<2x3x4xbf16>, tensor<2x6x4xbf16>) -> tensor<2x9x4xbf16>
  %sg = train.slice_grad %s {dim = 2 : i64, start = 1 : i64} : tensor<2x3x4xbf16> -> tensor<2x3x7xbf16>
  %mx = train.reduce max %c [1] : tensor<2x9x4xbf16> -> tensor<2x4xbf16>
  %z = train.fill {value = 0.0 : f64} : tensor<f32>
  return %z : tensor<f32>
}
