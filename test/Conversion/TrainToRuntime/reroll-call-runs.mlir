// RUN: ztrain-opt %s --reroll-call-runs=min-trips=3 --split-input-file | FileCheck %s
// RUN: not ztrain-opt %s --reroll-call-runs=min-trips=1 --split-input-file 2>&1 | FileCheck %s --check-prefix=SMALL

// Three calls of one shape (callee; the same %ctx and %x; an address off
// the same base %a; the same and a changing integer) become one loop over
// a table of what changes (the offsets 16, 32, 48 and the integers 1, 2,
// 3: two columns), made where the last call was. The addresses and
// constants only the calls used are gone; the constant integer 4 is made
// in the loop. Attributes of the call stay.

llvm.func @ztrt_arena(!llvm.ptr, i64) -> !llvm.ptr
llvm.func @ztrt_add(!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32)
llvm.func @ztrt_fill(!llvm.ptr, !llvm.ptr, i64)

// CHECK-LABEL: llvm.mlir.global internal constant @step.table0(dense<[16, 1, 32, 2, 48, 3]> : tensor<6xi64>)
// CHECK-SAME:    : !llvm.array<6 x i64>
// CHECK-LABEL: llvm.func internal @step.loop0(
// CHECK-SAME:      %[[CTX:[^:]*]]: !llvm.ptr, %[[X:[^:]*]]: !llvm.ptr, %[[A:[^:]*]]: !llvm.ptr) {
// CHECK:         %[[T:.*]] = llvm.mlir.addressof @step.table0
// CHECK:         %[[N:.*]] = llvm.mlir.constant(4 : i64) : i64
// CHECK:         llvm.br ^[[BODY:.*]](%{{.*}} : i64)
// CHECK:       ^[[BODY]](%[[I:.*]]: i64):
// CHECK-NEXT:    %[[ROW:.*]] = llvm.mul %[[I]], %{{.*}} : i64
// CHECK-NEXT:    %[[AT0:.*]] = llvm.add %[[ROW]], %{{.*}} : i64
// CHECK-NEXT:    %[[S0:.*]] = llvm.getelementptr %[[T]][%[[AT0]]] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK-NEXT:    %[[OFF:.*]] = llvm.load %[[S0]] : !llvm.ptr -> i64
// CHECK-NEXT:    %[[OUT:.*]] = llvm.getelementptr %[[A]][%[[OFF]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-NEXT:    %[[AT1:.*]] = llvm.add %[[ROW]], %{{.*}} : i64
// CHECK-NEXT:    %[[S1:.*]] = llvm.getelementptr %[[T]][%[[AT1]]] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK-NEXT:    %[[K64:.*]] = llvm.load %[[S1]] : !llvm.ptr -> i64
// CHECK-NEXT:    %[[K:.*]] = llvm.trunc %[[K64]] : i64 to i32
// CHECK-NEXT:    llvm.call @ztrt_add(%[[CTX]], %[[X]], %[[OUT]], %[[N]], %[[K]]) {no_unwind}
// CHECK-NEXT:    %[[NEXT:.*]] = llvm.add %[[I]], %{{.*}} : i64
// CHECK-NEXT:    %[[MORE:.*]] = llvm.icmp "slt" %[[NEXT]], %{{.*}} : i64
// CHECK-NEXT:    llvm.cond_br %[[MORE]], ^[[BODY]](%[[NEXT]] : i64), ^[[EXIT:.*]]
// CHECK:       ^[[EXIT]]:
// CHECK-NEXT:    llvm.return
// CHECK-LABEL: llvm.func @step(
// CHECK-SAME:      %[[C:.*]]: !llvm.ptr, %[[XX:.*]]: !llvm.ptr)
// CHECK-NEXT:    %[[SIZE:.*]] = llvm.mlir.constant(64 : i64) : i64
// CHECK-NEXT:    %[[AA:.*]] = llvm.call @ztrt_arena(%[[C]], %[[SIZE]])
// CHECK-NEXT:    llvm.call @step.loop0(%[[C]], %[[XX]], %[[AA]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr) -> ()
// CHECK-NEXT:    llvm.return
// SMALL: error: reroll-call-runs: min-trips must be at least 2, not 1
llvm.func @step(%ctx: !llvm.ptr, %x: !llvm.ptr) {
  %n = llvm.mlir.constant(4 : i64) : i64
  %size = llvm.mlir.constant(64 : i64) : i64
  %k1 = llvm.mlir.constant(1 : i32) : i32
  %k2 = llvm.mlir.constant(2 : i32) : i32
  %k3 = llvm.mlir.constant(3 : i32) : i32
  %a = llvm.call @ztrt_arena(%ctx, %size) : (!llvm.ptr, i64) -> !llvm.ptr
  %b1 = llvm.getelementptr %a[16] : (!llvm.ptr) -> !llvm.ptr, i8
  llvm.call @ztrt_add(%ctx, %x, %b1, %n, %k1) {no_unwind} : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32) -> ()
  %c32 = llvm.mlir.constant(32 : i64) : i64
  %b2 = llvm.getelementptr %a[%c32] : (!llvm.ptr, i64) -> !llvm.ptr, i8
  llvm.call @ztrt_add(%ctx, %x, %b2, %n, %k2) {no_unwind} : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32) -> ()
  %b3 = llvm.getelementptr %a[48] : (!llvm.ptr) -> !llvm.ptr, i8
  llvm.call @ztrt_add(%ctx, %x, %b3, %n, %k3) {no_unwind} : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32) -> ()
  llvm.return
}

// -----

// What stays: runs shorter than min-trips (two adds, then two after a
// call of another shape), calls whose arguments differ otherwise (another
// base %b, another value %y), and calls whose result is used. An address
// the rest of the function still uses stays too.

llvm.func @ztrt_arena(!llvm.ptr, i64) -> !llvm.ptr
llvm.func @ztrt_add(!llvm.ptr, !llvm.ptr, !llvm.ptr, i64)
llvm.func @ztrt_fill(!llvm.ptr, !llvm.ptr, i64)
llvm.func @ztrt_ptr(!llvm.ptr, !llvm.ptr) -> !llvm.ptr

// CHECK-LABEL: llvm.func @step(
// CHECK-NOT:     loop
// CHECK-COUNT-2: llvm.call @ztrt_add
// CHECK:         llvm.call @ztrt_fill
// CHECK-COUNT-3: llvm.call @ztrt_add
// CHECK-COUNT-3: llvm.call @ztrt_ptr
// CHECK:         llvm.call @ztrt_fill
// CHECK-NOT:     loop
// CHECK:         llvm.return
llvm.func @step(%ctx: !llvm.ptr, %x: !llvm.ptr, %y: !llvm.ptr) {
  %n = llvm.mlir.constant(4 : i64) : i64
  %a = llvm.call @ztrt_arena(%ctx, %n) : (!llvm.ptr, i64) -> !llvm.ptr
  %b = llvm.call @ztrt_arena(%ctx, %n) : (!llvm.ptr, i64) -> !llvm.ptr
  %a1 = llvm.getelementptr %a[16] : (!llvm.ptr) -> !llvm.ptr, i8
  %a2 = llvm.getelementptr %a[32] : (!llvm.ptr) -> !llvm.ptr, i8
  %b1 = llvm.getelementptr %b[16] : (!llvm.ptr) -> !llvm.ptr, i8
  llvm.call @ztrt_add(%ctx, %x, %a1, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  llvm.call @ztrt_add(%ctx, %x, %a2, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  llvm.call @ztrt_fill(%ctx, %a1, %n) : (!llvm.ptr, !llvm.ptr, i64) -> ()
  llvm.call @ztrt_add(%ctx, %x, %a1, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  llvm.call @ztrt_add(%ctx, %x, %b1, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  llvm.call @ztrt_add(%ctx, %y, %a2, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  %p1 = llvm.call @ztrt_ptr(%ctx, %a1) : (!llvm.ptr, !llvm.ptr) -> !llvm.ptr
  %p2 = llvm.call @ztrt_ptr(%ctx, %a2) : (!llvm.ptr, !llvm.ptr) -> !llvm.ptr
  %p3 = llvm.call @ztrt_ptr(%ctx, %b1) : (!llvm.ptr, !llvm.ptr) -> !llvm.ptr
  llvm.call @ztrt_fill(%p1, %p2, %n) : (!llvm.ptr, !llvm.ptr, i64) -> ()
  llvm.return
}

// -----

// A run whose trips make several calls: add, fill, add, fill, ... (a
// period of 2, no two neighbours alike) is one loop whose trip makes both
// calls; its table row holds both calls' offsets.

llvm.func @ztrt_add(!llvm.ptr, !llvm.ptr, !llvm.ptr, i64)
llvm.func @ztrt_fill(!llvm.ptr, !llvm.ptr, i64)

// CHECK-LABEL: llvm.mlir.global internal constant @step.table0(dense<[0, 16, 32, 48, 64, 80]> : tensor<6xi64>)
// CHECK-LABEL: llvm.func internal @step.loop0(
// CHECK:       ^[[BODY:.*]](%[[I:.*]]: i64):
// CHECK:         llvm.call @ztrt_add(
// CHECK-NOT:     llvm.cond_br
// CHECK:         llvm.call @ztrt_fill(
// CHECK:         llvm.cond_br %{{.*}}, ^[[BODY]]
// CHECK-LABEL: llvm.func @step(
// CHECK-NEXT:    llvm.call @step.loop0(
// CHECK-NEXT:    llvm.return
llvm.func @step(%ctx: !llvm.ptr, %x: !llvm.ptr) {
  %n = llvm.mlir.constant(4 : i64) : i64
  %o0 = llvm.getelementptr %x[0] : (!llvm.ptr) -> !llvm.ptr, i8
  llvm.call @ztrt_add(%ctx, %x, %o0, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  %o1 = llvm.getelementptr %x[16] : (!llvm.ptr) -> !llvm.ptr, i8
  llvm.call @ztrt_fill(%ctx, %o1, %n) : (!llvm.ptr, !llvm.ptr, i64) -> ()
  %o2 = llvm.getelementptr %x[32] : (!llvm.ptr) -> !llvm.ptr, i8
  llvm.call @ztrt_add(%ctx, %x, %o2, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  %o3 = llvm.getelementptr %x[48] : (!llvm.ptr) -> !llvm.ptr, i8
  llvm.call @ztrt_fill(%ctx, %o3, %n) : (!llvm.ptr, !llvm.ptr, i64) -> ()
  %o4 = llvm.getelementptr %x[64] : (!llvm.ptr) -> !llvm.ptr, i8
  llvm.call @ztrt_add(%ctx, %x, %o4, %n) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
  %o5 = llvm.getelementptr %x[80] : (!llvm.ptr) -> !llvm.ptr, i8
  llvm.call @ztrt_fill(%ctx, %o5, %n) : (!llvm.ptr, !llvm.ptr, i64) -> ()
  llvm.return
}
