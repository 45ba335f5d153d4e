// RUN: not ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=ssd" 2>&1 | FileCheck %s --check-prefix=SPACE
// RUN: not ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme param=nvme" 2>&1 | FileCheck %s --check-prefix=PARAM
// RUN: not ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme buffer-count=0" 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme sub-group-size=-5" 2>&1 | FileCheck %s --check-prefix=GROUP
// RUN: not ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="param=cpu" 2>&1 | FileCheck %s --check-prefix=PCPU
// RUN: not ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme ratio=1.5" 2>&1 | FileCheck %s --check-prefix=RATIO
// RUN: not ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme param-ratio=0" 2>&1 | FileCheck %s --check-prefix=PRATIO
// RUN: not ztrain-opt %s --ztrain-training="optimizer=sgd" --zero-offload="optimizer=nvme" 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme" --zero-offload="optimizer=cpu" 2>&1 | FileCheck %s --check-prefix=TWICE

// SPACE: for the --optimizer option: Cannot find option named 'ssd'!
// PARAM: error: zero-offload: param=nvme needs ZeRO stage 3 (parameters partitioned at rest and gathered for use), as DeepSpeed's offload_param; this step is at stage 0
// PCPU: error: zero-offload: param=cpu needs ZeRO stage 3 (parameters partitioned at rest and gathered for use), as DeepSpeed's offload_param; this step is at stage 0
// RATIO: error: zero-offload: ratio=1.5 is out of range (0, 1]
// PRATIO: error: zero-offload: param-ratio=0 is out of range (0, 1]
// GROUP: error: zero-offload: sub-group-size=-5 must be >= 0 (elements; 0: whole states)
// COUNT: error: zero-offload: buffer-count=0 is out of range (1-16)
// NONE: error: zero-offload: optimizer=nvme, but the step has no optimizer states to place (SGD without momentum keeps none)
// TWICE: error: 'train.state' op is already placed (dist.space): zero-offload runs once

train.param @w : tensor<3x4xf32> init(normal, 0.5)
func.func @loss(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<3x4xf32>
  %o = train.matmul %x, %w {transpose_b} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  %loss = train.cross_entropy %o, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
