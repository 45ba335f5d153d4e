// RUN: ztrain-opt %s | ztrain-opt | FileCheck %s
// RUN: ztrain-opt %s --mlir-print-op-generic | ztrain-opt | FileCheck %s

// CHECK: module attributes {dist.zero = #dist.zero<stage = 3, grid = @dp>}
module attributes {dist.zero = #dist.zero<stage = 3, grid = @dp>} {
  // CHECK: shard.grid @dp(shape = 4)
  shard.grid @dp(shape = 4)
  // CHECK: train.param @w : tensor<10x3xf32> init(zeros) {dist.partition = #dist.partition<@dp, 8>}
  train.param @w : tensor<10x3xf32> init(zeros) {dist.partition = #dist.partition<@dp, 8>}

  // CHECK-LABEL: func.func @collectives
  func.func @collectives(%x: tensor<32xf32>, %s: tensor<8x3xf32>) {
    // CHECK: dist.all_reduce mean %{{.*}} on @dp : tensor<32xf32>
    %0 = dist.all_reduce mean %x on @dp : tensor<32xf32>
    // CHECK: dist.all_reduce sum %{{.*}} on @dp : tensor<32xf32>
    %1 = dist.all_reduce sum %x on @dp : tensor<32xf32>
    // CHECK: dist.reduce_scatter mean %{{.*}} on @dp : tensor<32xf32> -> tensor<8xf32>
    %2 = dist.reduce_scatter mean %x on @dp : tensor<32xf32> -> tensor<8xf32>
    // CHECK: dist.all_gather %{{.*}} on @dp : tensor<8x3xf32> -> tensor<32x3xf32>
    %3 = dist.all_gather %s on @dp : tensor<8x3xf32> -> tensor<32x3xf32>
    // CHECK: dist.broadcast %{{.*}} on @dp root 3 : tensor<32xf32>
    %4 = dist.broadcast %x on @dp root 3 : tensor<32xf32>
    return
  }
}
