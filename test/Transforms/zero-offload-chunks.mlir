// zero-offload's sub-group-size: an update whose nvme states hold more
// elements than sub-group-size is split into chunks (ceil(n / C) rounded up
// to 2048 elements: w1's 5120 into 2048, 2048 and 1024), each its own use:
// the chunk's states are read one use ahead, stepped, and written back,
// through buffers of one chunk. w2 (240 elements) stays whole.
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme sub-group-size=2048" | FileCheck %s
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme sub-group-size=2048" --plan-memory --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme" --plan-memory --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=WHOLE
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme sub-group-size=1000000" | FileCheck %s --check-prefix=BIG

// CHECK-LABEL: func.func @loss
// CHECK: %[[W2A:.*]] = dist.swap_in_start @w2.exp_avg{{$}}
// CHECK: %[[C0A:.*]] = dist.swap_in_start @w1.exp_avg chunk 0 of 3
// CHECK-NEXT: %[[C0B:.*]] = dist.swap_in_start @w1.exp_avg_sq chunk 0 of 3
// CHECK: train.adam_update @w2,
// CHECK: %[[C1A:.*]] = dist.swap_in_start @w1.exp_avg chunk 1 of 3
// CHECK-NEXT: %[[C1B:.*]] = dist.swap_in_start @w1.exp_avg_sq chunk 1 of 3
// CHECK-NEXT: dist.wait %[[C0A]]
// CHECK-NEXT: dist.wait %[[C0B]]
// CHECK-NEXT: train.adam_update @w1, %[[G:[0-9]+]] states(@w1.exp_avg, @w1.exp_avg_sq) {{.*}}dist.async_update, dist.chunk = array<i64: 0, 3>
// Each chunk's host step is asynchronous (a device backend's host step
// thread runs it), waited before the next use: the next chunk's update.
// CHECK-NEXT: dist.update_wait @w1, %[[G]]
// CHECK-NEXT: dist.swap_out_start @w1.exp_avg chunk 0 of 3
// CHECK-NEXT: dist.swap_out_start @w1.exp_avg_sq chunk 0 of 3
// CHECK: dist.swap_in_start @w1.exp_avg chunk 2 of 3
// CHECK: train.adam_update @w1, %[[G]] states(@w1.exp_avg, @w1.exp_avg_sq) {{.*}}dist.async_update, dist.chunk = array<i64: 1, 3>
// CHECK-NEXT: dist.update_wait @w1, %[[G]]
// CHECK-NEXT: dist.swap_out_start @w1.exp_avg chunk 1 of 3
// CHECK: train.adam_update @w1, %[[G]] states(@w1.exp_avg, @w1.exp_avg_sq) {{.*}}dist.async_update, dist.chunk = array<i64: 2, 3>
// CHECK-NEXT: dist.update_wait @w1, %[[G]]
// CHECK-NEXT: dist.swap_out_start @w1.exp_avg chunk 2 of 3
// CHECK-NEXT: dist.swap_out_start @w1.exp_avg_sq chunk 2 of 3

// The swap buffers: three uses' at once (buffer-count 3): w2's two states
// (4096 bytes each, rounded) and two chunks of w1's (2 x 8192 each):
// 40960 bytes, where whole states need w2's and w1's two 20480-byte
// states, 49152. The same bytes move per step either way.
// REPORT: "state_swap_buffers": 40960
// REPORT: "host_to_nvme": 49152
// REPORT-NEXT: "nvme_to_host": 49152
// WHOLE: "state_swap_buffers": 49152
// WHOLE: "host_to_nvme": 49152
// WHOLE-NEXT: "nvme_to_host": 49152

// BIG-NOT: chunk
// BIG-NOT: dist.chunk

train.param @w1 : tensor<80x64xf32> init(normal, 0.5)
train.param @w2 : tensor<3x80xf32> init(normal, 0.5)
func.func @loss(%x: tensor<2x64xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w1 = train.param_read @w1 : tensor<80x64xf32>
  %w2 = train.param_read @w2 : tensor<3x80xf32>
  %h = train.matmul %x, %w1 {transpose_b} : (tensor<2x64xf32>, tensor<80x64xf32>) -> tensor<2x80xf32>
  %r = train.relu %h : tensor<2x80xf32>
  %o = train.matmul %r, %w2 {transpose_b} : (tensor<2x80xf32>, tensor<3x80xf32>) -> tensor<2x3xf32>
  %loss = train.cross_entropy %o, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
