// RUN: not ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 max-live-bytes=200 overlap=true" 2>&1 | FileCheck %s --check-prefix=TOOBIG
// RUN: not ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 max-live-bytes=300 reshard-after-forward=false overlap=true" 2>&1 | FileCheck %s --check-prefix=CROWDED
// RUN: not ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 overlap=true" --overlap-schedule 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 overlap=false" --overlap-schedule=prefetch-depth=-1 2>&1 | FileCheck %s --check-prefix=NEGATIVE

// w2 alone (256 bytes gathered) exceeds the bound: the error names it and
// points at its read.
// TOOBIG: overlap-schedule-invalid.mlir:[[# @LINE + 17]]:9: error: 'dist.gather_param' op gathers 256 bytes of @w2, more than max-live-bytes=200: raise the bound or tile the operators that use it (memory-centric-tiling)

// Keeping forward gathers for the backward pass (reshard-after-forward=false)
// leaves w2 (256) live while w3 (128) is needed: 300 bytes cannot hold both.
// CROWDED: error: 'dist.gather_param' op cannot gather @w3 (128 bytes) within max-live-bytes=300: 256 bytes of other gathered parameters are live during its use

// TWICE: error: the step is already scheduled (it has dist.wait ops)

// NEGATIVE: error: overlap-schedule: prefetch-depth, max-live-bytes and bucket-bytes must be >= 0

train.param @w1 : tensor<8x6xf32> init(normal, 0.02)
train.param @w2 : tensor<8x8xf32> init(normal, 0.02)
train.param @w3 : tensor<4x8xf32> init(normal, 0.02)
func.func @loss(%x: tensor<2x6xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w1 = train.param_read @w1 : tensor<8x6xf32>
  %h1 = train.matmul %x, %w1 {transpose_b} : (tensor<2x6xf32>, tensor<8x6xf32>) -> tensor<2x8xf32>
  %r1 = train.relu %h1 : tensor<2x8xf32>
  %w2 = train.param_read @w2 : tensor<8x8xf32>
  %h2 = train.matmul %r1, %w2 {transpose_b} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %r2 = train.relu %h2 : tensor<2x8xf32>
  %w3 = train.param_read @w3 : tensor<4x8xf32>
  %l = train.matmul %r2, %w3 {transpose_b} : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  %loss = train.cross_entropy %l, %y : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
