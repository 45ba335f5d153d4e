// ZeRO-R's Pa+cpu: zero-offload{activations=cpu} moves the checkpoints
// train-recompute keeps to host memory between the forward and the backward
// pass. (The module is train-recompute.mlir's: x0 is the one value a
// recomputation reads.)
// RUN: ztrain-opt %s --ztrain-training="recompute=full" --ztrain-zero="offload-activations=cpu" --plan-memory | FileCheck %s
// RUN: ztrain-opt %s --ztrain-training="recompute=full" --ztrain-zero="offload-activations=cpu" --plan-memory --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: ztrain-opt %s --ztrain-training="recompute=full" --ztrain-zero="offload-activations=cpu" --plan-memory --zero-report -o /dev/null | FileCheck %s --check-prefix=TEXT
// RUN: not ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="activations=cpu" 2>&1 | FileCheck %s --check-prefix=NORECOMPUTE
// RUN: not ztrain-opt %s --ztrain-training="optimizer=adam recompute=full" --zero-offload="activations=gpu" 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// Its host copy: plan-memory's host_activations arena (not in the device's
// activations arena).
// CHECK: dist.arenas = {activations = [[ACT:[0-9]+]] : i64, gathered_parameters = 0 : i64, host_activations = 32 : i64
// Copied out right after it is made; its device buffer lives to its last
// forward use (the residual add), where the copy is waited for.
// CHECK: %[[X0:.*]] = train.relu %arg0
// CHECK-NEXT: %[[OUT:.*]] = dist.offload_activation_start %[[X0]] {dist.staging = [#dist.slot<"host_activations", 0, 32>]} : tensor<2x4xf32>
// CHECK: train.add %[[X0]], %{{.*}}
// CHECK-NEXT: dist.wait %[[OUT]]
// CHECK-NOT: %[[X0]]
// Back before the recomputation that reads it, into a fresh device buffer;
// the recomputation and everything after read that value.
// CHECK: train.cross_entropy_with_grad
// CHECK: %[[IN:.*]] = dist.reload_activation_start %[[X0]] : tensor<2x4xf32>
// CHECK-NEXT: %[[X0B:.*]] = dist.wait %[[IN]] {dist.slots = [#dist.slot<"activations", {{[0-9]+}}, 32>]} : tensor<2x4xf32>
// CHECK-NEXT: train.matmul %[[X0B]], %{{.*}} {{{.*}}train.recomputed
// CHECK-NOT: %[[X0]]
// CHECK: return

// REPORT: "offload": {
// REPORT-NEXT: "device_backend": {
// REPORT-NEXT: "asynchronous_host_steps_per_step": 0,
// REPORT-NEXT: "device_peak": [[#PEAK:]],
// REPORT-NEXT: "device_to_host_per_step": 32,
// REPORT-NEXT: "host_step_buffers": 0,
// REPORT-NEXT: "host_steps_per_step": 0,
// REPORT-NEXT: "host_to_device_per_step": 32
// REPORT-NEXT: },
// REPORT-NEXT: "host": {
// REPORT-NEXT: "activations": 32,
// REPORT: "transfers_per_step": {
// REPORT-NEXT: "activations_to_host": 32,
// REPORT: "predicted_peak": [[#PEAK]]

// TEXT: offloaded (zero-offload), per rank: not in the peak above
// TEXT-NEXT: host: activations 32
// TEXT: activations <-> host 32

// NORECOMPUTE: error: zero-offload: activations=cpu moves the activations train-recompute keeps for the backward pass, but this step recomputes nothing (compile with --recompute=full or selective)
// UNKNOWN: for the --activations option: Cannot find option named 'gpu'!

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
