// RUN: ztrain-opt %s --split-input-file --train-fuse-elementwise --plan-memory --lower-to-runtime | FileCheck %s

// Two layers' bias_add + silu: two regions, one generated kernel (and its
// AVX-512 copy), each called through ztrt_fused with its buffers in the
// step's pointer array; the intermediates (bias_add's results) have no
// buffer. Items are rows of 8 (the bias is read by column): 4 rows.
// CHECK: llvm.mlir.global internal constant @ztrain_fused.0.name("fused:bias_add+silu\00")
// CHECK: @ztrain_descriptor("{{.*}}\0Afused 2\0A
// CHECK-LABEL: llvm.func @ztrain_step(
// CHECK-SAME: %[[CTX:.*]]: !llvm.ptr)
// CHECK-DAG: %[[ROWS:.*]] = arith.constant 4 : i64
// CHECK-DAG: %[[COLS:.*]] = arith.constant 8 : i64
// CHECK: %[[ARGS:.*]] = llvm.alloca %{{.*}} x !llvm.array<16 x ptr>
// CHECK: %[[S0:.*]] = llvm.getelementptr %[[ARGS]][0]
// CHECK-NEXT: llvm.store %{{.*}}, %[[S0]] : !llvm.ptr, !llvm.ptr
// CHECK: %[[S2:.*]] = llvm.getelementptr %[[ARGS]][2]
// CHECK-NEXT: llvm.store %{{.*}}, %[[S2]] : !llvm.ptr, !llvm.ptr
// CHECK-NEXT: %[[NAME:.*]] = llvm.mlir.addressof @ztrain_fused.0.name
// CHECK-NEXT: %[[FN:.*]] = llvm.mlir.addressof @ztrain_fused.0 :
// CHECK-NEXT: %[[WIDE:.*]] = llvm.mlir.addressof @ztrain_fused.0.avx512 :
// CHECK-NEXT: llvm.call @ztrt_fused(%[[CTX]], %[[NAME]], %[[FN]], %[[WIDE]], %[[ARGS]], %[[ROWS]], %[[COLS]])
// CHECK: llvm.mlir.addressof @ztrain_fused.0 :
// CHECK: llvm.call @ztrt_fused(
// CHECK-NOT: @ztrain_fused.1
//
// The kernel: the pointers from the array, rows [begin, end), 4 lanes
// then 1; the bias read at the column; silu's exp a call of expf per lane;
// no fastmath flags (no contraction) anywhere.
// CHECK-LABEL: llvm.func internal @ztrain_fused.0(
// CHECK-SAME: %[[A:.*]]: !llvm.ptr, %[[BEGIN:.*]]: i64, %[[END:.*]]: i64)
// CHECK-NOT: fastmath
// CHECK: llvm.br ^bb1(%[[BEGIN]] : i64)
// CHECK: llvm.icmp "slt" %{{.*}}, %[[END]] : i64
// CHECK: %[[X:.*]] = llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr -> vector<4xf32>
// CHECK: %[[B:.*]] = llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr -> vector<4xf32>
// CHECK: %[[H:.*]] = llvm.fadd %[[X]], %[[B]] : vector<4xf32>
// CHECK: llvm.fneg %[[H]] : vector<4xf32>
// CHECK-COUNT-4: llvm.call @expf(
// CHECK: llvm.fdiv %[[H]], %{{.*}} : vector<4xf32>
// CHECK: llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr -> f32
// CHECK: llvm.call @expf(
// CHECK: llvm.return
// CHECK-LABEL: llvm.func internal @ztrain_fused.0.avx512(
// CHECK-SAME: target_features = #llvm.target_features<["+avx512f", "+avx512vl", "+avx512bw", "+avx512dq"]>
// CHECK-NOT: fastmath
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> vector<16xf32>
// CHECK-COUNT-16: llvm.call @expf(
func.func @step(%x: tensor<4x8xf32> {train.name = "x"}, %b: tensor<8xf32> {train.name = "b"}, %w: tensor<8x8xf32> {train.name = "w"}) -> tensor<f32> attributes {train.entry, train.step} {
  %0 = train.bias_add %x, %b : tensor<4x8xf32>, tensor<8xf32>
  %1 = train.silu %0 : tensor<4x8xf32>
  %2 = train.matmul %1, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %3 = train.bias_add %2, %b : tensor<4x8xf32>, tensor<8xf32>
  %4 = train.silu %3 : tensor<4x8xf32>
  %l = train.reduce sum %4 [0, 1] : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// bf16: loads widen (zext, shl 16), every member's result is rounded to
// bf16 with the runtime's integer sequence (NaN: quiet with its sign and
// payload; else + 0x7fff + the lsb, >> 16) and stores narrow (trunc).
// Items are elements (no bias): 64.
// CHECK-LABEL: llvm.func @ztrain_step(
// CHECK-DAG: %[[N:.*]] = arith.constant 64 : i64
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : i64
// CHECK: llvm.call @ztrt_fused(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[N]], %[[ONE]])
// CHECK-LABEL: llvm.func internal @ztrain_fused.0(
// CHECK: llvm.load %{{.*}} {alignment = 2 : i64} : !llvm.ptr -> vector<4xi16>
// CHECK: llvm.zext %{{.*}} : vector<4xi16> to vector<4xi32>
// CHECK: llvm.shl
// CHECK: llvm.bitcast %{{.*}} : vector<4xi32> to vector<4xf32>
// CHECK: llvm.mlir.constant(dense<2147483647> : vector<4xi32>)
// CHECK: llvm.mlir.constant(dense<2139095040> : vector<4xi32>)
// CHECK: llvm.icmp "ugt"
// CHECK: llvm.mlir.constant(dense<64> : vector<4xi32>)
// CHECK: llvm.mlir.constant(dense<32767> : vector<4xi32>)
// CHECK: llvm.select
// CHECK: llvm.trunc %{{.*}} : vector<4xi32> to vector<4xi16>
// CHECK: llvm.store %{{.*}} {alignment = 2 : i64} : vector<4xi16>, !llvm.ptr
func.func @step(%input: tensor<4x8xf32> {train.name = "x"}) -> tensor<f32> attributes {train.entry, train.step} {
  %x = train.cast %input : tensor<4x8xf32> to tensor<4x8xbf16>
  %m = train.matmul %x, %x {transpose_a} : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<8x8xbf16>
  %0 = train.gelu %m : tensor<8x8xbf16>
  %1 = train.mul %0, %m : tensor<8x8xbf16>
  %2 = train.matmul %1, %1 {transpose_b} : (tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8x8xbf16>
  %3 = train.cast %2 : tensor<8x8xbf16> to tensor<8x8xf32>
  %l = train.reduce sum %3 [0, 1] : tensor<8x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
