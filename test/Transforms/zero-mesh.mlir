// Hybrid sharding (HSDP / MiCS): dp = 4 ranks as 2 shard groups of 2
// ranks, states partitioned inside a group and replicated across groups.
// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=3 dp=4 dp-replicate=2" | FileCheck %s --check-prefix=MESH
// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=3 dp-shard=2 dp-replicate=2 dp=4 ranks-per-node=4" | FileCheck %s --check-prefix=NODE4
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=2 dp=4 dp-replicate=2 overlap=false" | FileCheck %s --check-prefix=S2
// RUN: ztrain-opt %s --ztrain-training="grad-accum-steps=2" --ztrain-zero="stage=2 dp=4 dp-replicate=2 overlap=false" | FileCheck %s --check-prefix=ACC
// RUN: ztrain-opt %s --ztrain-training="clip-grad-norm=1.0" --ztrain-zero="stage=1 dp=4 dp-replicate=2 overlap=false" | FileCheck %s --check-prefix=CLIP
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=4 dp-replicate=2 overlap=true bucket-bytes=0" | FileCheck %s --check-prefix=OVERLAP
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=2 dp=4 dp-replicate=2 overlap=false" --plan-memory --lower-to-runtime | FileCheck %s --check-prefix=LOWER
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=4 dp-replicate=2 overlap=false" --zero-report -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=4 ranks-per-node=2 overlap=false" --zero-report -o /dev/null | FileCheck %s --check-prefix=FLAT
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=4 dp-replicate=2 overlap=false" --zero-report="format=json" -o /dev/null | FileCheck %s --check-prefix=JSON
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=2 dp=4 dp-replicate=3" 2>&1 | FileCheck %s --check-prefix=DIVIDE
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=2 dp=8 dp-shard=2 dp-replicate=2" 2>&1 | FileCheck %s --check-prefix=PRODUCT
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=0 dp=4 dp-replicate=2" 2>&1 | FileCheck %s --check-prefix=STAGE0
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=2 dp=4 dp-replicate=4" 2>&1 | FileCheck %s --check-prefix=SHARD1
// RUN: not ztrain-opt %s --ztrain-training --zero-partition="stage=2 dp=8 dp-replicate=2 ranks-per-node=3" 2>&1 | FileCheck %s --check-prefix=NODES

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

// The mesh: @dp is every rank; states are partitioned over @dp_shard (the
// grid of the #dist.zero) in shards of ceil(12 / 2) and ceil(20 / 2); by
// default a node holds one shard group.
// MESH: module attributes {dist.mesh = #dist.mesh<shard = @dp_shard, replicate = @dp_replicate, ranks_per_node = 2>, dist.zero = #dist.zero<stage = 3, grid = @dp_shard>
// MESH-NEXT: shard.grid @dp(shape = 4)
// MESH-NEXT: shard.grid @dp_shard(shape = 2)
// MESH-NEXT: shard.grid @dp_replicate(shape = 2)
// MESH-NEXT: train.param @w1 : tensor<4x3xf32> init(normal, 2.000000e-02) {dist.partition = #dist.partition<@dp_shard, 6>}
// MESH: train.param @w2 : tensor<5x4xf32> init(normal, 2.000000e-02) {dist.partition = #dist.partition<@dp_shard, 10>}
// NODE4: dist.mesh = #dist.mesh<shard = @dp_shard, replicate = @dp_replicate, ranks_per_node = 4>

// Each gradient is reduce-scattered inside its shard group as soon as it
// is final, and the shard averaged across the replicas right before the
// update; the updated slices are gathered inside the shard group.
// S2: %[[F2:.*]] = dist.pad_flat %{{.*}} : tensor<5x4xf32> -> tensor<20xf32>
// S2-NEXT: %[[R2:.*]] = dist.reduce_scatter mean %[[F2]] on @dp_shard : tensor<20xf32> -> tensor<10xf32>
// S2: %[[R1:.*]] = dist.reduce_scatter mean %{{.*}} on @dp_shard : tensor<12xf32> -> tensor<6xf32>
// S2-NEXT: %[[A1:.*]] = dist.all_reduce mean %[[R1]] on @dp_replicate : tensor<6xf32>
// S2-NEXT: train.adam_update @w1, %[[A1]] {{.*}}sharded{{.*}} : tensor<6xf32>
// S2-NEXT: dist.all_gather_param @w1 on @dp_shard
// S2-NEXT: %[[A2:.*]] = dist.all_reduce mean %[[R2]] on @dp_replicate : tensor<10xf32>
// S2-NEXT: train.adam_update @w2, %[[A2]]
// S2-NEXT: dist.all_gather_param @w2 on @dp_shard

// With gradient accumulation the shard group reduces every micro-batch and
// the replicas average the accumulated shard once, after the boundary: the
// link between groups carries each shard once per optimizer step.
// ACC: %[[R1:.*]] = dist.reduce_scatter mean %{{.*}} on @dp_shard : tensor<12xf32> -> tensor<6xf32>
// ACC-NEXT: %[[S1:.*]] = train.accumulate_grad @w1, %[[R1]] : tensor<6xf32>
// ACC-NEXT: train.accumulation_boundary
// ACC-NEXT: %[[A1:.*]] = dist.all_reduce mean %[[S1]] on @dp_replicate : tensor<6xf32>
// ACC-NEXT: train.adam_update @w1, %[[A1]]

// Clipping's sum of squares is summed over the shard group only: the
// replicas hold the same averaged shards.
// CLIP: train.grad_sq_norm
// CLIP: %[[SQ:.*]] = train.grad_sq_norm
// CLIP-NEXT: %[[SUM:.*]] = dist.all_reduce sum %[[SQ]] on @dp_shard : tensor<f32>
// CLIP-NEXT: train.clip_grad_norm %[[SUM]]

// overlap-schedule starts the average across replicas once the shard's
// reduce-scatter is in (a second round of buckets).
// OVERLAP: %[[T:.*]] = dist.reduce_scatter_start mean %{{.*}} on @dp_shard : tensor<12xf32>
// OVERLAP: %[[S:.*]] = dist.wait %[[T]] : tensor<6xf32>
// OVERLAP-NEXT: %[[U:.*]] = dist.all_reduce_start mean %[[S]] on @dp_replicate : tensor<6xf32>
// OVERLAP: dist.wait %[[U]] : tensor<6xf32>

// The runtime gets the mesh (shard 2 x replicate 2, 2 ranks per node) and
// each collective its axis (last argument: 1 the shard group, 2 the
// replicate group); a rank's slice of a parameter is at its shard rank.
// LOWER: grid 4\0Amesh 2 2 2\0A
// LOWER-DAG: %[[ONE:.*]] = arith.constant 1 : i32
// LOWER-DAG: %[[TWO:.*]] = arith.constant 2 : i32
// LOWER-DAG: %[[RANK:.*]] = llvm.call @ztrt_rank(%{{.*}}) : (!llvm.ptr) -> i64
// LOWER: llvm.call @ztrt_reduce_scatter(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ONE]], %[[ONE]]) : (!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, i64, i32, i32) -> ()
// LOWER: llvm.call @ztrt_all_reduce(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ONE]], %[[TWO]]) : (!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, i64, i32, i32) -> ()
// LOWER: llvm.srem %[[RANK]], %{{.*}} : i64
// LOWER: llvm.call @ztrt_all_gather(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ONE]]) : (!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, i64, i32) -> ()

// Per step and rank, the bytes the CPU runtime hands MPI for ranks on its
// node and on the other: gathers and reduce-scatters stay in the node
// (blocks of 24 + 40 + 40 and 40 + 24 bytes to the one other rank of the
// group), the averages across replicas cross it (two phases of
// ceil(6 / 2) and ceil(10 / 2) f32 to the one other replica).
// REPORT: zero-report: stage 3, 4 ranks over @dp_shard
// REPORT-NEXT: mesh: states partitioned over shard groups of 2 ranks (@dp_shard), replicated 2 times (@dp_replicate); 2 ranks per node
// REPORT: all_reduce 64 2
// REPORT: wire bytes, 2 ranks/node
// REPORT-NEXT: intra-node 168
// REPORT-NEXT: inter-node 64
// Flat ZeRO-3 on the same two nodes: every gather and reduce-scatter sends
// 2 of its 3 blocks across (blocks of 12 + 20 + 20 and 20 + 12 bytes).
// FLAT: wire bytes, 2 ranks/node
// FLAT-NEXT: intra-node 84
// FLAT-NEXT: inter-node 168
// JSON: "grid": "dp_replicate",
// JSON-NEXT: "inter_node_wire_bytes": 24,
// JSON-NEXT: "intra_node_wire_bytes": 0,
// JSON-NEXT: "kind": "all_reduce",
// JSON: "links": {
// JSON-NEXT: "inter_node_wire_bytes": 64,
// JSON-NEXT: "intra_node_wire_bytes": 168,
// JSON-NEXT: "ranks_per_node": 2
// JSON: "mesh": {
// JSON-NEXT: "ranks_per_node": 2,
// JSON-NEXT: "replicate": 2,
// JSON-NEXT: "shard": 2
// JSON: "world_size": 4

// DIVIDE: error: dp-replicate 3 does not divide the 4 ranks (dp)
// PRODUCT: error: dp-shard 2 x dp-replicate 2 is 4 ranks, but dp is 8
// STAGE0: error: hybrid sharding (dp-replicate 2) needs ZeRO stage 1, 2 or 3: stage 0 partitions nothing
// SHARD1: error: hybrid sharding needs shard groups of 2 or more ranks
// NODES: error: ranks-per-node 3 must divide the 8 ranks and divide or be a multiple of the shard group's 4 ranks
