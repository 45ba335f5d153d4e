// RUN: ztrain-opt %s --split-input-file --train-fuse-elementwise | FileCheck %s
// RUN: ztrain-opt %s --split-input-file --train-fuse-elementwise --train-fuse-elementwise | FileCheck %s --check-prefix=TWICE

// bias_add + residual add: the bias_add's result is read only by the add,
// so it vanishes inside the region; the bias is a last-dimension operand.
// CHECK-LABEL: func.func @bias_residual
// CHECK: %[[F:.*]] = train.fused(%arg0, %arg1, %arg2) : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>, %[[R:.*]]: tensor<4x8xf32>):
// CHECK-NEXT:   %[[S:.*]] = train.bias_add %[[X]], %[[B]]
// CHECK-NEXT:   %[[A:.*]] = train.add %[[R]], %[[S]]
// CHECK-NEXT:   train.yield %[[A]] : tensor<4x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
// A second run finds nothing more to fuse: one region, holding both ops.
// TWICE-LABEL: func.func @bias_residual
// TWICE: train.fused
// TWICE-NEXT: ^bb0
// TWICE-NEXT: train.bias_add
// TWICE-NEXT: train.add
// TWICE-NEXT: train.yield
// TWICE-NEXT: }
// TWICE-NEXT: return
func.func @bias_residual(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %r: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {train.entry} {
  %0 = train.bias_add %x, %b : tensor<4x8xf32>, tensor<8xf32>
  %1 = train.add %r, %0 : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// bias_add + gelu whose bias_add result is read later (by gelu_grad): the
// region yields both; the later reader is outside.
// CHECK-LABEL: func.func @two_results
// CHECK: %[[F:.*]]:2 = train.fused(%arg0, %arg1)
// CHECK:   train.yield %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32>
// CHECK: train.gelu_grad %arg2, %[[F]]#0
func.func @two_results(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %dy: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {train.entry} {
  %0 = train.bias_add %x, %b : tensor<4x8xf32>, tensor<8xf32>
  %1 = train.gelu %0 : tensor<4x8xf32>
  %2 = train.matmul %1, %1 {transpose_b} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  %3 = train.gelu_grad %dy, %0 : tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// -----

// A chain never spans a collective: the region would move the mul past
// it. silu_grad and add, both after it, fuse; the mul keeps its kernel.
// CHECK-LABEL: func.func @collective
// CHECK: %[[M:.*]] = train.mul %arg0, %arg1
// CHECK-NEXT: %[[R:.*]] = dist.all_reduce
// CHECK-NEXT: train.fused(%[[M]], %arg0, %[[R]])
// CHECK-NEXT: ^bb0
// CHECK-NEXT: train.silu_grad
// CHECK-NEXT: train.add
// CHECK-NOT: train.mul
shard.grid @dp(shape = 2)
func.func @collective(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %w: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {train.entry} {
  %0 = train.mul %a, %b : tensor<4x8xf32>
  %1 = dist.all_reduce mean %w on @dp : tensor<4x8xf32>
  %2 = train.silu_grad %0, %a : tensor<4x8xf32>
  %3 = train.add %2, %1 : tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// -----

// A reader of the group's value between its members blocks the merge: the
// region's results exist only at its last member.
// CHECK-LABEL: func.func @reader_between
// CHECK-NOT: train.fused
func.func @reader_between(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x8xf32>) attributes {train.entry} {
  %0 = train.mul %a, %b : tensor<4x8xf32>
  %1 = train.matmul %0, %0 {transpose_b} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  %2 = train.relu %0 : tensor<4x8xf32>
  return %1, %2 : tensor<4x4xf32>, tensor<4x8xf32>
}

// -----

// Single ops keep their kernel; f16 is not fused; shapes must match.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: train.fused
func.func @left_alone(%a: tensor<4x8xf16>, %b: tensor<4x8xf32>, %c: tensor<8xf32>) -> (tensor<4x8xf16>, tensor<8xf32>) attributes {train.entry} {
  %0 = train.relu %a : tensor<4x8xf16>
  %1 = train.gelu %0 : tensor<4x8xf16>
  %2 = train.reduce sum %b [0] : tensor<4x8xf32> -> tensor<8xf32>
  %3 = train.relu %c : tensor<8xf32>
  return %1, %3 : tensor<4x8xf16>, tensor<8xf32>
}

// -----

// Recomputed ops and the others are not mixed (zero-report prices the
// recomputation by op); a recomputed chain is a recomputed region.
// CHECK-LABEL: func.func @recomputed
// CHECK: train.fused(%arg0) {train.recomputed}
// CHECK: train.yield
// CHECK: train.tanh
// CHECK-NOT: train.fused
func.func @recomputed(%a: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {train.entry} {
  %0 = train.exp %a {train.recomputed} : tensor<4x8xf32>
  %1 = train.sqrt %0 {train.recomputed} : tensor<4x8xf32>
  %2 = train.tanh %1 : tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// bf16 with casts: the mixed-precision chain fuses, casts included.
// CHECK-LABEL: func.func @bf16
// CHECK: train.fused(%arg0, %arg1) : (tensor<4x8xf32>, tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK: train.cast
// CHECK: train.mul
// CHECK: train.cast
func.func @bf16(%a: tensor<4x8xf32>, %b: tensor<4x8xbf16>) -> tensor<4x8xf32> attributes {train.entry} {
  %0 = train.cast %a : tensor<4x8xf32> to tensor<4x8xbf16>
  %1 = train.mul %0, %b : tensor<4x8xbf16>
  %2 = train.cast %1 : tensor<4x8xbf16> to tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// Two chains meeting at a consumer merge into one region.
// CHECK-LABEL: func.func @merge
// CHECK-COUNT-1: train.fused
// CHECK-NOT: train.fused
// CHECK: train.exp
// CHECK: train.neg
// CHECK: train.div
func.func @merge(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {train.entry} {
  %0 = train.exp %a : tensor<4x8xf32>
  %1 = train.neg %b : tensor<4x8xf32>
  %2 = train.div %0, %1 : tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// The evaluation function is fused too.
// CHECK-LABEL: func.func @step
// CHECK: train.fused
// CHECK-LABEL: func.func @eval
// CHECK: train.fused
func.func @step(%a: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {train.entry} {
  %0 = train.scale %a {factor = 0.5 : f64} : tensor<4x8xf32>
  %1 = train.sigmoid %0 : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}
func.func @eval(%a: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {train.eval} {
  %0 = train.scale %a {factor = 0.5 : f64} : tensor<4x8xf32>
  %1 = train.sigmoid %0 : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// A region holds at most 64 ops: a chain of 66 adds is two regions (64 and 2).
// CHECK-LABEL: func.func @long_chain
// CHECK: %[[A:.*]] = train.fused(%arg0, %arg1)
// CHECK-COUNT-64: train.add
// CHECK: train.yield
// CHECK: train.fused(%[[A]], %arg1)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: train.add
// CHECK-NEXT: train.add
// CHECK-NEXT: train.yield
func.func @long_chain(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> attributes {train.entry} {
  %h0 = train.add %x, %w : tensor<4xf32>
  %h1 = train.add %h0, %w : tensor<4xf32>
  %h2 = train.add %h1, %w : tensor<4xf32>
  %h3 = train.add %h2, %w : tensor<4xf32>
  %h4 = train.add %h3, %w : tensor<4xf32>
  %h5 = train.add %h4, %w : tensor<4xf32>
  %h6 = train.add %h5, %w : tensor<4xf32>
  %h7 = train.add %h6, %w : tensor<4xf32>
  %h8 = train.add %h7, %w : tensor<4xf32>
  %h9 = train.add %h8, %w : tensor<4xf32>
  %h10 = train.add %h9, %w : tensor<4xf32>
  %h11 = train.add %h10, %w : tensor<4xf32>
  %h12 = train.add %h11, %w : tensor<4xf32>
  %h13 = train.add %h12, %w : tensor<4xf32>
  %h14 = train.add %h13, %w : tensor<4xf32>
  %h15 = train.add %h14, %w : tensor<4xf32>
  %h16 = train.add %h15, %w : tensor<4xf32>
  %h17 = train.add %h16, %w : tensor<4xf32>
  %h18 = train.add %h17, %w : tensor<4xf32>
  %h19 = train.add %h18, %w : tensor<4xf32>
  %h20 = train.add %h19, %w : tensor<4xf32>
  %h21 = train.add %h20, %w : tensor<4xf32>
  %h22 = train.add %h21, %w : tensor<4xf32>
  %h23 = train.add %h22, %w : tensor<4xf32>
  %h24 = train.add %h23, %w : tensor<4xf32>
  %h25 = train.add %h24, %w : tensor<4xf32>
  %h26 = train.add %h25, %w : tensor<4xf32>
  %h27 = train.add %h26, %w : tensor<4xf32>
  %h28 = train.add %h27, %w : tensor<4xf32>
  %h29 = train.add %h28, %w : tensor<4xf32>
  %h30 = train.add %h29, %w : tensor<4xf32>
  %h31 = train.add %h30, %w : tensor<4xf32>
  %h32 = train.add %h31, %w : tensor<4xf32>
  %h33 = train.add %h32, %w : tensor<4xf32>
  %h34 = train.add %h33, %w : tensor<4xf32>
  %h35 = train.add %h34, %w : tensor<4xf32>
  %h36 = train.add %h35, %w : tensor<4xf32>
  %h37 = train.add %h36, %w : tensor<4xf32>
  %h38 = train.add %h37, %w : tensor<4xf32>
  %h39 = train.add %h38, %w : tensor<4xf32>
  %h40 = train.add %h39, %w : tensor<4xf32>
  %h41 = train.add %h40, %w : tensor<4xf32>
  %h42 = train.add %h41, %w : tensor<4xf32>
  %h43 = train.add %h42, %w : tensor<4xf32>
  %h44 = train.add %h43, %w : tensor<4xf32>
  %h45 = train.add %h44, %w : tensor<4xf32>
  %h46 = train.add %h45, %w : tensor<4xf32>
  %h47 = train.add %h46, %w : tensor<4xf32>
  %h48 = train.add %h47, %w : tensor<4xf32>
  %h49 = train.add %h48, %w : tensor<4xf32>
  %h50 = train.add %h49, %w : tensor<4xf32>
  %h51 = train.add %h50, %w : tensor<4xf32>
  %h52 = train.add %h51, %w : tensor<4xf32>
  %h53 = train.add %h52, %w : tensor<4xf32>
  %h54 = train.add %h53, %w : tensor<4xf32>
  %h55 = train.add %h54, %w : tensor<4xf32>
  %h56 = train.add %h55, %w : tensor<4xf32>
  %h57 = train.add %h56, %w : tensor<4xf32>
  %h58 = train.add %h57, %w : tensor<4xf32>
  %h59 = train.add %h58, %w : tensor<4xf32>
  %h60 = train.add %h59, %w : tensor<4xf32>
  %h61 = train.add %h60, %w : tensor<4xf32>
  %h62 = train.add %h61, %w : tensor<4xf32>
  %h63 = train.add %h62, %w : tensor<4xf32>
  %h64 = train.add %h63, %w : tensor<4xf32>
  %h65 = train.add %h64, %w : tensor<4xf32>
  return %h65 : tensor<4xf32>
}
