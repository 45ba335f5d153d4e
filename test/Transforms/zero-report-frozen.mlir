// Frozen parameters (train.param ... frozen) in zero-report: priced as
// parameters (sharded at stage 3), with no gradient, no optimizer state and
// no reduction; stage 3 gathers one before its forward use and again before
// its backward use only where it has one. The plan (before
// zero-insert-collectives) and the inserted collectives agree.
// RUN: ztrain-opt %s --ztrain-training=optimizer=adam --zero-partition="stage=3 dp=2" --zero-report -o /dev/null | FileCheck %s --check-prefixes=S3,PLAN
// RUN: ztrain-opt %s --ztrain-training=optimizer=adam --ztrain-zero="stage=3 dp=2" --zero-report -o /dev/null | FileCheck %s --check-prefixes=S3,IR
// RUN: ztrain-opt %s --ztrain-training=optimizer=adam --zero-partition="stage=2 dp=2" --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=S2
// RUN: ztrain-opt %s --ztrain-training=optimizer=adam --ztrain-zero="stage=3 dp=2" -o - | FileCheck %s --check-prefix=GATHERS

// Psi: 40 (@emb, frozen) + 16 (@w) + 20 (@head, frozen) = 76 f32, 304 bytes.
// Stage 3 over 2 ranks: shards of 20 + 8 + 10 elements = 152 bytes; the
// gradient and Adam's two moments of @w only: 8 * 4 = 32 and 64 bytes.
// Collectives: @w reduce-scattered once (8 * 4 bytes to the other rank) and
// gathered once (32: its input comes from a frozen table, so no input
// gradient reads it); @emb gathered once (a frozen table's gradient is not
// computed: 20 * 4); @head twice (the input gradient of the layer under it
// reads it: 2 * 40). all_gather: 32 + 80 + 80 = 192 bytes in 4.
// S3: parameters: 3 tensors, 76 elements, 304 bytes (Psi); 2 of them frozen (60 elements: no gradient, no optimizer state)
// S3: parameters                           152
// S3: gradients                             32
// S3: optimizer states                      64
// PLAN: collectives per step (planned)
// IR: collectives per step
// S3: all_gather                           192           4
// S3: reduce_scatter                        32           1
// S3-NEXT: total                            224

// Stage 2: parameters whole (padded to 2 slices: 76 elements, 304 bytes),
// only @w's gradient shard, its reduce-scatter and all-gather after the
// update.
// S2: "collectives": [
// S2-NEXT: {
// S2-NEXT: "bytes": 32,
// S2-NEXT: "count": 1,
// S2-NEXT: "grid": "dp",
// S2-NEXT: "inter_node_wire_bytes": 0,
// S2-NEXT: "intra_node_wire_bytes": 32,
// S2-NEXT: "kind": "reduce_scatter",
// S2-NEXT: "tensor": "w"
// S2-NEXT: },
// S2-NEXT: {
// S2-NEXT: "bytes": 32,
// S2-NEXT: "count": 1,
// S2-NEXT: "grid": "dp",
// S2-NEXT: "inter_node_wire_bytes": 0,
// S2-NEXT: "intra_node_wire_bytes": 32,
// S2-NEXT: "kind": "all_gather",
// S2-NEXT: "tensor": "w"
// S2-NEXT: }
// S2-NEXT: ]
// S2: "frozen_elements": 60,
// S2-NEXT: "frozen_tensors": 2,
// S2: "gradients": 32,
// S2: "parameters": 304,

// GATHERS-COUNT-1: dist.gather_param @emb
// GATHERS-COUNT-2: dist.gather_param @head
// GATHERS-NOT: dist.reduce_scatter{{.*}}@emb
train.param @emb : tensor<10x4xf32> init(normal, 0.02) frozen
train.param @w : tensor<4x4xf32> init(normal, 0.02)
train.param @head : tensor<5x4xf32> init(normal, 0.02) frozen
func.func @step(%ids: tensor<2x3xi32>, %y: tensor<6xi32>) -> tensor<f32> attributes {train.entry} {
  %emb = train.param_read @emb : tensor<10x4xf32>
  %e = train.embedding %emb, %ids : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  %e2 = train.reshape %e : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %w = train.param_read @w : tensor<4x4xf32>
  %h = train.matmul %e2, %w {transpose_b} : (tensor<6x4xf32>, tensor<4x4xf32>) -> tensor<6x4xf32>
  %head = train.param_read @head : tensor<5x4xf32>
  %l = train.matmul %h, %head {transpose_b} : (tensor<6x4xf32>, tensor<5x4xf32>) -> tensor<6x5xf32>
  %loss = train.cross_entropy %l, %y : (tensor<6x5xf32>, tensor<6xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
