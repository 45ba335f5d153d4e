// ZeRO++'s hpZ: stage 3 over dp = 4 ranks with a secondary partition over
// groups of 2 (a node): the forward pass gathers each parameter over every
// rank, each rank keeps its half of it, and the backward pass gathers the
// halves inside the group. States stay partitioned over all 4 ranks.
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=4 hpz-partition-size=2 overlap=false" | FileCheck %s
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=4 hpz-partition-size=2 overlap=false" --plan-memory --lower-to-runtime | FileCheck %s --check-prefix=LOWER
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=4 hpz-partition-size=2 overlap=false" --zero-report -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=3 dp=4 hpz-partition-size=2" --zero-report -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=4 ranks-per-node=2 overlap=false" --zero-report -o /dev/null | FileCheck %s --check-prefix=FLAT
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=2 dp=4 hpz-partition-size=2" 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=3 dp=4 hpz-partition-size=3" 2>&1 | FileCheck %s --check-prefix=DIVIDE
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=3 dp=4 dp-replicate=2 hpz-partition-size=2" 2>&1 | FileCheck %s --check-prefix=MESH

train.param @w1 : tensor<4x3xf32> init(normal, 0.02)
train.param @w2 : tensor<5x4xf32> init(normal, 0.02)
func.func @loss(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w1 = train.param_read @w1 : tensor<4x3xf32>
  %h = train.matmul %x, %w1 {transpose_b} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %r = train.relu %h : tensor<2x4xf32>
  %w2 = train.param_read @w2 : tensor<5x4xf32>
  %l = train.matmul %r, %w2 {transpose_b} : (tensor<2x4xf32>, tensor<5x4xf32>) -> tensor<2x5xf32>
  %loss = train.cross_entropy %l, %y : (tensor<2x5xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// CHECK: module attributes {dist.hpz = #dist.hpz<grid = @dp_hpz, ranks_per_node = 2>, dist.zero = #dist.zero<stage = 3, grid = @dp>
// CHECK-NEXT: shard.grid @dp(shape = 4)
// CHECK-NEXT: shard.grid @dp_hpz(shape = 2)
// CHECK-NEXT: train.param @w1 : tensor<4x3xf32> init(normal, 2.000000e-02) {dist.partition = #dist.partition<@dp, 3>}
// @w1 has no backward use (the first layer's input is data): no shard kept.
// CHECK: dist.gather_param @w1 on @dp : tensor<4x3xf32>
// CHECK-NOT: dist.slice_shard
// CHECK: %[[W2:.*]] = dist.gather_param @w2 on @dp : tensor<5x4xf32>
// CHECK-NEXT: %[[F:.*]] = dist.pad_flat %[[W2]] : tensor<5x4xf32> -> tensor<20xf32>
// CHECK-NEXT: %[[S:.*]] = dist.slice_shard %[[F]] on @dp_hpz : tensor<20xf32> -> tensor<10xf32>
// CHECK: %[[G:.*]] = dist.all_gather %[[S]] on @dp_hpz : tensor<10xf32> -> tensor<20xf32>
// CHECK-NEXT: %[[B:.*]] = train.reshape %[[G]] : tensor<20xf32> -> tensor<5x4xf32>
// CHECK-NEXT: train.matmul %{{.*}}, %[[B]]
// CHECK-NOT: dist.gather_param @w2
// CHECK: dist.reduce_scatter mean %{{.*}} on @dp : tensor<20xf32> -> tensor<5xf32>

// The runtime gets the groups (2 x 2, 2 ranks per node, "secondary": the
// states stay sharded over all 4); a rank's shard is at rank % 2.
// LOWER: grid 4\0Amesh 2 2 2 secondary\0A
// LOWER: %[[RANK:.*]] = llvm.call @ztrt_rank
// LOWER: %[[R:.*]] = llvm.srem %[[RANK]], %c2_i64 : i64
// LOWER-NEXT: %[[OFF:.*]] = llvm.mul %[[R]], %c40_i64 : i64
// LOWER: llvm.call @ztrt_all_gather(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %c10_i64, %c1_i32)

// Bytes per step: the forward gathers and the reduce-scatters over every
// rank (2 of each 3 blocks cross to the other node), the backward gather
// of @w2 inside the node (one 40-byte block): 128 bytes cross instead of
// flat ZeRO-3's 168. Planned (before the collectives) and from the IR
// alike.
// REPORT: hpZ: each gathered parameter's shard over groups of 2 ranks (@dp_hpz) kept after the forward pass; the backward gathers stay in the group; 2 ranks per node
// REPORT: wire bytes, 2 ranks/node
// REPORT-NEXT: intra-node 104
// REPORT-NEXT: inter-node 128
// FLAT: wire bytes, 2 ranks/node
// FLAT-NEXT: intra-node 84
// FLAT-NEXT: inter-node 168

// STAGE: error: hpz-partition-size 2: ZeRO++'s secondary partition needs stage 3 without dp-replicate
// DIVIDE: error: hpz-partition-size 3
// MESH: error: hpz-partition-size 2: {{.*}}(got stage 3, dp-replicate 2)
