// RUN: ztrain-opt %s | ztrain-opt | FileCheck %s

// A train.fused region round-trips: inputs, body, yield, results.
// CHECK-LABEL: func.func @fused
// CHECK: %[[F:.*]]:2 = train.fused(%arg0, %arg1) {train.recomputed} : (tensor<4x8xbf16>, tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xf32>) {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<4x8xbf16>, %[[B:.*]]: tensor<8xbf16>):
// CHECK-NEXT:   %[[S:.*]] = train.bias_add %[[X]], %[[B]] : tensor<4x8xbf16>, tensor<8xbf16>
// CHECK-NEXT:   %[[G:.*]] = train.gelu %[[S]] : tensor<4x8xbf16>
// CHECK-NEXT:   %[[C:.*]] = train.cast %[[G]] : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK-NEXT:   train.yield %[[S]], %[[C]] : tensor<4x8xbf16>, tensor<4x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]#1
func.func @fused(%x: tensor<4x8xbf16>, %b: tensor<8xbf16>) -> tensor<4x8xf32> {
  %0:2 = train.fused(%x, %b) {train.recomputed} : (tensor<4x8xbf16>, tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xf32>) {
  ^bb0(%a: tensor<4x8xbf16>, %c: tensor<8xbf16>):
    %1 = train.bias_add %a, %c : tensor<4x8xbf16>, tensor<8xbf16>
    %2 = train.gelu %1 : tensor<4x8xbf16>
    %3 = train.cast %2 : tensor<4x8xbf16> to tensor<4x8xf32>
    train.yield %1, %3 : tensor<4x8xbf16>, tensor<4x8xf32>
  }
  return %0#1 : tensor<4x8xf32>
}
