// plan-search with a link between nodes: given ranks-per-node and an
// inter-node bandwidth, every plan's bytes are priced by link class
// (zero-report's intra- and inter-node wire bytes) and hybrid sharding
// with a shard group per node ("r2": 2 replicas of shard groups of 2) is a
// candidate of the partitioned stages. Over a slow link between nodes it
// wins (its gradients cross once, as averages of shards; flat ZeRO sends
// two of every three blocks across); when only flat ZeRO's smaller
// states fit, flat ZeRO is chosen; without an inter-node link nothing is
// priced by link and no mesh is tried.
// RUN: ztrain-opt %s --plan-search="memory-budget=10MB dp=4 ranks-per-node=2 inter-node-link-gbps=1 link-gbps=100 latency-us=0" -o /dev/null | FileCheck %s --check-prefix=SLOW
// RUN: ztrain-opt %s --plan-search="memory-budget=650000 dp=4 ranks-per-node=2 inter-node-link-gbps=1 link-gbps=100 latency-us=0" -o /dev/null | FileCheck %s --check-prefix=TIGHT
// RUN: ztrain-opt %s --plan-search="memory-budget=10MB dp=4 ranks-per-node=2 link-gbps=100 latency-us=0" -o /dev/null | FileCheck %s --check-prefix=FLAT
// RUN: ztrain-opt %s --plan-search="memory-budget=10MB dp=4 ranks-per-node=2 inter-node-link-gbps=1 link-gbps=100 latency-us=0 format=json" -o /dev/null | FileCheck %s --check-prefix=JSON
// RUN: not ztrain-opt %s --plan-search="memory-budget=10MB dp=4 inter-node-link-gbps=-1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD

train.param @w1 : tensor<256x128xf32> init(normal, 0.02)
train.param @w2 : tensor<64x256xf32> init(normal, 0.02)
func.func @loss(%x: tensor<2x128xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w1 = train.param_read @w1 : tensor<256x128xf32>
  %h = train.matmul %x, %w1 {transpose_b} : (tensor<2x128xf32>, tensor<256x128xf32>) -> tensor<2x256xf32>
  %r = train.relu %h : tensor<2x256xf32>
  %w2 = train.param_read @w2 : tensor<64x256xf32>
  %l = train.matmul %r, %w2 {transpose_b} : (tensor<2x256xf32>, tensor<64x256xf32>) -> tensor<2x64xf32>
  %loss = train.cross_entropy %l, %y : (tensor<2x64xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// Psi = 196608 bytes. Flat ZeRO's best step sends Psi across at 1 GB/s
// (its reduce-scatter and all-gather, stage 1 or 2, or its all-reduce:
// 0.197 ms, + 0.001 ms for the rest at 100 GB/s); hybrid sharding
// Psi / 2 across and Psi inside the node (0.098 + 0.002 ms).
// SLOW: stage recompute
// SLOW: 2 r2  none {{.*}} 0.100  fits
// SLOW: 2     none {{.*}} 0.198  fits
// SLOW: chosen: --zero-stage=3 --dp-replicate=2 --recompute=none
// SLOW-SAME: 0.100 ms per step
// SLOW: pipeline: {{.*}}ztrain-zero{{.*}} dp=4 dp-replicate=2 {{.*}}ranks-per-node=2 {{.*}}stage=3

// Hybrid sharding keeps twice flat ZeRO's share of the states: at 650000
// bytes none of its plans fits.
// TIGHT: chosen: --zero-stage=2 --recompute=none: predicted peak 607244 bytes

// FLAT-NOT: r2
// FLAT: chosen: --zero-stage=3 --recompute=none

// JSON: "inter_node_bytes": 196608,
// JSON-NEXT: "intra_node_bytes": 98304,
// JSON: "replicate": 1,
// JSON: "inter_node_bytes": 98304,
// JSON-NEXT: "intra_node_bytes": 196608,
// JSON: "replicate": 2,

// BAD: inter-node-link-gbps non-negative
