// The host step buffer (ZeRO-Offload's and ZeRO-Infinity's CPU step on a
// device backend): the compiler sizes it (dist::getHostStep), zero-report
// prices it, and the descriptor's host_step_buffer record hands it to the
// runtime. An update that stages more than 2^20 elements goes through it
// in tiles of 2^20, alternating two halves (a tile's upload overlaps the
// next tile); smaller ones stage whole.
// RUN: ztrain-opt %s --ztrain-training="optimizer=adamw" --ztrain-zero="stage=0 dp=1 offload-optimizer=cpu" --plan-memory --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=CPU
// RUN: ztrain-opt %s --ztrain-training="optimizer=adamw" --ztrain-zero="stage=0 dp=1 offload-optimizer=nvme" --plan-memory --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=NVME
// RUN: ztrain-opt %s --ztrain-training="optimizer=adamw" --ztrain-zero="stage=0 dp=1 offload-optimizer=nvme sub-group-size=1048576" --plan-memory --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=CHUNKS
// RUN: ztrain-opt %s --ztrain-training="optimizer=adamw" --ztrain-zero="stage=0 dp=1 offload-optimizer=nvme sub-group-size=1572864" --plan-memory --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=MID
// RUN: ztrain-compile %s --offload-optimizer=nvme --emit=mlir -o - | FileCheck %s --check-prefix=DESC
// RUN: ztrain-compile %s --emit=mlir -o - | FileCheck %s --check-prefix=NONE

// w has 2^22 elements (16 MiB in f32). optimizer=cpu: the gradients are
// spilled, so only the 4-byte parameter is staged: two tiles of 2^20
// elements, 8 MiB, not the whole parameter's 16 MiB.
// CPU: "host_step_buffers": 8388608,
// nvme: gradient and parameter staged, 8 bytes an element: two tiles,
// 16 MiB, not the whole update's 32 MiB.
// NVME: "host_step_buffers": 16777216,
// Chunks of 2^20 elements (sub-group-size) stage whole: one chunk, 8 MiB.
// CHUNKS: "host_step_buffers": 8388608,
// Chunks of 1398784 elements (three): more than one tile, less than two:
// they stage whole, 8 bytes an element, which is less than two tiles.
// MID: "host_step_buffers": 11190272,
// DESC: \0Ahost_step_buffer 16777216\0A
// NONE-NOT: host_step_buffer

train.param @w : tensor<4096x1024xf32> init(normal, 0.02)
train.param @b : tensor<4096xf32> init(zeros)
func.func @loss(%x: tensor<2x1024xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4096x1024xf32>
  %b = train.param_read @b : tensor<4096xf32>
  %h = train.matmul %x, %w {transpose_b} : (tensor<2x1024xf32>, tensor<4096x1024xf32>) -> tensor<2x4096xf32>
  %hb = train.bias_add %h, %b : tensor<2x4096xf32>, tensor<4096xf32>
  %l = train.cross_entropy %hb, %y : (tensor<2x4096xf32>, tensor<2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
