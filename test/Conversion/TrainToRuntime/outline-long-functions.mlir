// RUN: ztrain-opt %s --outline-long-functions=max-ops=2 --split-input-file | FileCheck %s
// RUN: not ztrain-opt %s --outline-long-functions=max-ops=1 --split-input-file 2>&1 | FileCheck %s --check-prefix=SMALL

// A function of more than 4 * max-ops ops is cut into runs of max-ops:
// each run becomes an internal function called in its place. Values used
// across runs are passed as arguments (%ctx) or returned (one result as
// itself, several as a struct); constants and global addresses are copied
// into the parts that use them and the unused originals dropped; an
// address into a buffer (a getelementptr with constant offsets) is
// recomputed from its base in each part that uses it (%b) rather than
// passed; the terminator stays.

llvm.func @ztrt_arena(!llvm.ptr, i64) -> !llvm.ptr
llvm.func @ztrt_param(!llvm.ptr, i64) -> !llvm.ptr
llvm.func @ztrt_add(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64)
llvm.mlir.global internal constant @shape(dense<4> : tensor<1xi64>) {addr_space = 0 : i32} : !llvm.array<1 x i64>

// CHECK-LABEL: llvm.func @step(
// CHECK-SAME:      %[[CTX:.*]]: !llvm.ptr)
// CHECK-NEXT:    %[[S0:.*]] = llvm.call @step.part0(%[[CTX]]) : (!llvm.ptr) -> !llvm.struct<(ptr, ptr)>
// CHECK-NEXT:    %[[A:.*]] = llvm.extractvalue %[[S0]][0]
// CHECK-NEXT:    %[[P:.*]] = llvm.extractvalue %[[S0]][1]
// CHECK-NEXT:    llvm.call @step.part1(%[[A]], %[[CTX]], %[[P]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr) -> ()
// CHECK-NEXT:    llvm.call @step.part2(%[[A]], %[[CTX]]) : (!llvm.ptr, !llvm.ptr) -> ()
// CHECK-NEXT:    llvm.return
// CHECK-NEXT:  }
// CHECK-NEXT:  llvm.func internal @step.part0(%[[CTX0:.*]]: !llvm.ptr) -> !llvm.struct<(ptr, ptr)> {
// CHECK-NEXT:    %[[SIZE:.*]] = llvm.mlir.constant(64 : i64) : i64
// CHECK-NEXT:    %[[ZERO:.*]] = llvm.mlir.constant(0 : i64) : i64
// CHECK-NEXT:    %[[A0:.*]] = llvm.call @ztrt_arena(%[[CTX0]], %[[SIZE]])
// CHECK-NEXT:    %[[P0:.*]] = llvm.call @ztrt_param(%[[CTX0]], %[[ZERO]])
// CHECK-NEXT:    %[[U:.*]] = llvm.mlir.poison : !llvm.struct<(ptr, ptr)>
// CHECK-NEXT:    %[[U1:.*]] = llvm.insertvalue %[[A0]], %[[U]][0]
// CHECK-NEXT:    %[[U2:.*]] = llvm.insertvalue %[[P0]], %[[U1]][1]
// CHECK-NEXT:    llvm.return %[[U2]]
// CHECK-NEXT:  }
// CHECK-NEXT:  llvm.func internal @step.part1(%[[A1:.*]]: !llvm.ptr, %[[CTX1:.*]]: !llvm.ptr, %[[P1:.*]]: !llvm.ptr) {
// CHECK-NEXT:    %[[N1:.*]] = llvm.mlir.constant(4 : i64) : i64
// CHECK-NEXT:    %[[B1:.*]] = llvm.getelementptr %[[A1]][16]
// CHECK-NEXT:    llvm.call @ztrt_add(%[[CTX1]], %[[P1]], %[[B1]], %[[B1]], %[[N1]])
// CHECK-NEXT:    llvm.return
// CHECK-NEXT:  }
// CHECK-NEXT:  llvm.func internal @step.part2(%[[A2:.*]]: !llvm.ptr, %[[CTX2:.*]]: !llvm.ptr) {
// CHECK-NEXT:    %[[SHAPE:.*]] = llvm.mlir.addressof @shape
// CHECK-NEXT:    %[[N2:.*]] = llvm.mlir.constant(4 : i64) : i64
// CHECK-NEXT:    %[[D:.*]] = llvm.getelementptr %[[A2]][48]
// CHECK-NEXT:    %[[B2:.*]] = llvm.getelementptr %[[A2]][16]
// CHECK-NEXT:    llvm.call @ztrt_add(%[[CTX2]], %[[B2]], %[[SHAPE]], %[[D]], %[[N2]])
// CHECK-NEXT:    llvm.return
// CHECK-NEXT:  }
// SMALL: error: outline-long-functions: max-ops must be at least 2, not 1
llvm.func @step(%ctx: !llvm.ptr) {
  %n = llvm.mlir.constant(4 : i64) : i64
  %size = llvm.mlir.constant(64 : i64) : i64
  %zero = llvm.mlir.constant(0 : i64) : i64
  %shape = llvm.mlir.addressof @shape : !llvm.ptr
  %a = llvm.call @ztrt_arena(%ctx, %size) : (!llvm.ptr, i64) -> !llvm.ptr
  %p = llvm.call @ztrt_param(%ctx, %zero) : (!llvm.ptr, i64) -> !llvm.ptr
  %b = llvm.getelementptr %a[16] : (!llvm.ptr) -> !llvm.ptr, i8
  llvm.call @ztrt_add(%ctx, %p, %b, %b, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  %d = llvm.getelementptr %a[48] : (!llvm.ptr) -> !llvm.ptr, i8
  llvm.call @ztrt_add(%ctx, %b, %shape, %d, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  llvm.return
}

// -----

// Not longer than 4 * max-ops (8): left alone.

llvm.func @ztrt_add(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64)

// CHECK-LABEL: llvm.func @short(
// CHECK-NOT:   part
// CHECK:       llvm.return
// CHECK-NOT:   part
llvm.func @short(%ctx: !llvm.ptr) {
  %n = llvm.mlir.constant(4 : i64) : i64
  llvm.call @ztrt_add(%ctx, %ctx, %ctx, %ctx, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  llvm.call @ztrt_add(%ctx, %ctx, %ctx, %ctx, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  llvm.call @ztrt_add(%ctx, %ctx, %ctx, %ctx, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  llvm.return
}
