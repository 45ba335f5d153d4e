// train-recompute on a two-segment residual model: the segments found from
// the graph (the residual stream: %x0 and %r1), or from a train.checkpoint
// mark; full keeps only the boundaries, selective also the linear layers'
// products; the loss head after the last boundary is not recomputed; the
// clones sit right before the first backward op that reads them and the
// backward ops read them; zero-report prices the recomputed FLOPs.
// RUN: ztrain-opt %s --train-autodiff --train-recompute=policy=full | FileCheck %s --check-prefix=FULL
// RUN: ztrain-opt %s --train-autodiff --train-recompute=policy=selective | FileCheck %s --check-prefix=SEL
// RUN: ztrain-opt %s --train-autodiff --train-recompute=policy=none | FileCheck %s --check-prefix=NONE
// RUN: sed 's/%r1 = train.add %x0, %h1b :/%r1 = train.add %x0, %h1b {train.checkpoint} :/' %s | ztrain-opt --train-autodiff --train-recompute=policy=full | FileCheck %s --check-prefix=MARK
// RUN: ztrain-opt %s --ztrain-training="recompute=full" --ztrain-zero --plan-memory --zero-report -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: ztrain-opt %s --ztrain-training="recompute=full" --ztrain-zero="stage=3 dp=2" | FileCheck %s --check-prefix=Z3
// RUN: env PYTHONPATH=%ztrain_src/python python3 -m ztrain.models gpt --layers 2 --no-checkpoints | ztrain-opt --train-autodiff --train-recompute=policy=full | FileCheck %s --check-prefix=BLOCKS

// FULL: module attributes {train.recompute = "full"}
// FULL: %[[X0:.*]] = train.relu %arg0
// FULL: %[[W1:.*]] = train.param_read @w1
// FULL: %[[H1:.*]] = train.matmul %[[X0]], %[[W1]] {transpose_b}
// FULL: %[[W1B:.*]] = train.param_read @w1b
// FULL: train.cross_entropy_grad
// The tail (from %r1 on) is read as it is.
// FULL: train.gelu_grad %{{.*}}, %[[H2:[0-9]+]] :
// FULL: %[[DG1:.*]] = train.matmul %[[DR1:.*]], %[[W1B]] :
// FULL-NEXT: %[[H1R:.*]] = train.matmul %[[X0]], %[[W1]] {train.recomputed, transpose_b}
// FULL-NEXT: %[[G1R:.*]] = train.gelu %[[H1R]] {train.recomputed}
// FULL-NEXT: train.matmul %[[DR1]], %[[G1R]] {transpose_a}
// FULL-NEXT: train.gelu_grad %[[DG1]], %[[H1R]]
// FULL-NOT: recomputed

// SEL: module attributes {train.recompute = "selective"}
// SEL: %[[H1:.*]] = train.matmul %{{.*}}, %{{.*}} {transpose_b}
// SEL-NOT: recomputed
// SEL: %[[G1R:.*]] = train.gelu %[[H1]] {train.recomputed}
// SEL-NEXT: train.matmul %{{.*}}, %[[G1R]] {transpose_a}
// SEL-NEXT: train.gelu_grad %{{.*}}, %[[H1]]
// SEL-NOT: recomputed

// NONE-NOT: recompute

// With the mark on %r1 alone, %x0 is inside the segment: recomputed too.
// MARK: train.cross_entropy_grad
// MARK: train.relu %arg0 {train.recomputed}
// MARK-NEXT: train.matmul {{.*}} {train.recomputed, transpose_b}
// MARK-NEXT: train.gelu {{.*}} {train.recomputed}

// REPORT: recompute: full, 2 ops repeated in the backward pass, 64 FLOPs per step per rank (+{{.*}}% over the model's 656)

// A GPT without marks: the residual stream's boundaries merge into whole
// blocks (attention and MLP together): block 0 is one segment, recomputed
// from its input x0 in forward order (both norms in one group); of the last
// block the attention is recomputed from x1, its MLP stays with the head.
// (Half-block segments would keep r0 and recompute the MLP's norm from it.)
// BLOCKS: %[[X0:[0-9]+]] = train.add
// BLOCKS: %[[R0:[0-9]+]] = train.add %[[X0]],
// BLOCKS: %[[X1:[0-9]+]] = train.add %[[R0]],
// BLOCKS: %[[R1:[0-9]+]] = train.add %[[X1]],
// BLOCKS: train.cross_entropy_grad
// BLOCKS-NOT: train.layer_norm %[[R1]], {{.*}}train.recomputed
// BLOCKS: train.layer_norm %[[X1]], {{.*}}train.recomputed
// BLOCKS-NOT: train.layer_norm %[[R1]], {{.*}}train.recomputed
// BLOCKS: train.layer_norm %[[X0]], {{.*}}train.recomputed
// The block's middle of the residual stream is recomputed, not kept.
// BLOCKS: %[[R0C:[0-9]+]] = train.add %[[X0]], %{{[0-9]+}} {train.recomputed}
// BLOCKS: train.layer_norm %[[R0C]], {{.*}}train.recomputed
// BLOCKS-NOT: train.layer_norm %[[R0]], {{.*}}train.recomputed

// Stage 3: the recomputed product reads the backward gather of @w1.
// Z3: %[[G:.*]] = dist.gather_param @w1
// Z3: cross_entropy_with_grad
// Z3: %[[G2:.*]] = dist.gather_param @w1 {{.*}}
// Z3-NEXT: train.matmul %{{.*}}, %[[G2]] {train.recomputed, transpose_b}

train.param @w1 : tensor<4x4xf32> init(normal, 0.5)
train.param @w1b : tensor<4x4xf32> init(normal, 0.5)
train.param @w2 : tensor<4x4xf32> init(normal, 0.5)
train.param @w3 : tensor<3x4xf32> init(normal, 0.5)
func.func @loss(%x: tensor<2x4xf32> {train.name = "x"}, %y: tensor<2xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %x0 = train.relu %x : tensor<2x4xf32>
  %w1 = train.param_read @w1 : tensor<4x4xf32>
  %h1 = train.matmul %x0, %w1 {transpose_b} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %g1 = train.gelu %h1 : tensor<2x4xf32>
  %w1b = train.param_read @w1b : tensor<4x4xf32>
  %h1b = train.matmul %g1, %w1b {transpose_b} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %r1 = train.add %x0, %h1b : tensor<2x4xf32>
  %w2 = train.param_read @w2 : tensor<4x4xf32>
  %h2 = train.matmul %r1, %w2 {transpose_b} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %g2 = train.gelu %h2 : tensor<2x4xf32>
  %r2 = train.add %r1, %g2 : tensor<2x4xf32>
  %w3 = train.param_read @w3 : tensor<3x4xf32>
  %logits = train.matmul %r2, %w3 {transpose_b} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  %loss = train.cross_entropy %logits, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
