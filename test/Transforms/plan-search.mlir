// plan-search: every candidate plan compiled to plan-memory and priced by
// zero-report; the fastest that fits is chosen (here, with dp=2, the
// communication-bound ones: no recompute is needed until the budget is
// tight, then the stage and the policy that fit), and a budget no plan
// meets is one error naming the smallest peak. The model is
// train-recompute.mlir's.
// RUN: ztrain-opt %s --plan-search="memory-budget=100000 dp=2" -o /dev/null | FileCheck %s --check-prefix=LOOSE
// RUN: ztrain-opt %s --plan-search="memory-budget=900 dp=2" -o /dev/null | FileCheck %s --check-prefix=TIGHT
// RUN: ztrain-opt %s --plan-search="memory-budget=1.25kB dp=1" -o /dev/null | FileCheck %s --check-prefix=ONE
// RUN: not ztrain-opt %s --plan-search="memory-budget=500 dp=2" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not ztrain-opt %s --plan-search="memory-budget=lots dp=2" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: ztrain-opt %s --plan-search="memory-budget=900 dp=2" | FileCheck %s --check-prefix=SAME
// RUN: ztrain-opt %s --plan-search="memory-budget=900 dp=2 format=json" -o /dev/null | FileCheck %s --check-prefix=JSON
// RUN: ztrain-opt %s --plan-search="memory-budget=1.25kB dp=1 precision=auto" -o /dev/null | FileCheck %s --check-prefix=AUTO
// RUN: ztrain-opt %s --plan-search="memory-budget=700 host-memory-budget=1MB dp=1" -o /dev/null | FileCheck %s --check-prefix=DEVICE
// RUN: ztrain-opt %s --plan-search="memory-budget=420 host-memory-budget=1MB dp=1" -o /dev/null | FileCheck %s --check-prefix=DEVACT
// RUN: ztrain-opt %s --plan-search="memory-budget=1000 host-memory-budget=1MB dp=1" -o /dev/null | FileCheck %s --check-prefix=DEVPART
// RUN: ztrain-opt %s --plan-search="memory-budget=700 host-memory-budget=1MB dp=1 format=json" -o /dev/null | FileCheck %s --check-prefix=DEVJSON
// RUN: not ztrain-opt %s --plan-search="memory-budget=700 host-memory-budget=100 dp=1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=HOSTNONE

// host-memory-budget: a device backend's plan. The device budget bounds the
// device's peak alone; when no plan fits without offload, host memory is
// tried (Pa+cpu with a recompute policy, part or all of the optimizer
// states, both, and at stage 3 the parameter shards) before nvme, and the
// host link's bytes and the host's optimizer step are priced. At 700
// bytes the parameters and optimizer states in host memory at stage 3 win:
// the host step updates the shards where they are, so only the gradients
// (spilled down, none kept on the device) and the gathers' reads (up)
// cross the link, and nothing is recomputed. At 420 only that with
// selective recompute and its checkpoints in host memory fits; at 1000
// half of the states suffice.
// DEVICE: plan search: memory budget 700 bytes (0.70 kB) per rank of device memory and 1000000 bytes (1.00 MB) of host memory (a device backend), dp=1;{{.*}}, host link 25.0 GB/s, host step 50.0 GB/s
// DEVICE: device kB {{.*}} offload (host / nvme io / host link per step)
// Half the parameter shards (the others on the device) is a candidate too;
// it fits, with more device memory for the same cost.
// DEVICE: {{^}}   3     none {{.*}} fits  optimizer=cpu param=cpu ratio=0.5 (0.91 / 0.00 / 0.66 kB)
// DEVICE: {{^}} * 3     none {{.*}} fits  optimizer=cpu param=cpu (0.96 / 0.00 / 0.66 kB)
// DEVICE: chosen: --zero-stage=3 --recompute=none --offload-optimizer=cpu --offload-param=cpu: predicted device peak 460 bytes (0.46 kB) per rank and 960 bytes of host memory, 656 bytes over the host link
// DEVICE-NEXT: pipeline: builtin.module(ztrain-training{{{.*}}recompute=none{{.*}}},ztrain-zero{{{.*}}offload-optimizer=cpu offload-param=cpu{{.*}} stage=3 {{.*}}},ztrain-to-llvm)
// DEVACT: chosen: --zero-stage=3 --recompute=selective --offload-optimizer=cpu --offload-param=cpu --offload-activations=cpu: predicted device peak 396 bytes (0.40 kB) per rank and 992 bytes of host memory, 720 bytes over the host link
// DEVPART: chosen: --recompute=none --offload-optimizer=cpu --offload-ratio=0.5: predicted device peak 892 bytes
// DEVJSON-DAG: "host_memory_budget": 1000000
// DEVJSON-DAG: "host_link_bytes_per_second": 25000000000
// DEVJSON-DAG: "host_memory_bytes_per_second": 50000000000
// DEVJSON-DAG: "device_peak": 460
// DEVJSON-DAG: "host_link_bytes": 656
// The host step reads and writes 28 bytes per element (gradient 4, the
// parameter 8, Adam's moments 16), 60 elements: 1680 bytes at 50 GB/s.
// DEVJSON-DAG: "host_step_seconds": {{3\.36[0-9]*e-08}}
// HOSTNONE-DAG: {{^}}no plan fits 700 bytes of device memory per rank (with 100 bytes of host memory); the smallest device peak is 1180 bytes (1.18 kB)
// HOSTNONE-DAG: error: plan-search: no plan fits 700 bytes of device memory per rank (with 100 bytes of host memory); the smallest device peak is 1180 bytes

// precision=auto: fp32 and bf16 are candidates. bf16 halves the activations
// (its parameters plus the f32 masters weigh what f32 parameters do), so it
// fits 1.25 kB without recompute, which fp32 does not; its matmuls are
// priced at device-tflops-16bit.
// AUTO: device 100.00 TFLOP/s (200.00 TFLOP/s 16-bit)
// AUTO: {{^}}   prec stage recompute
// AUTO-DAG: {{^}} * bf16 0     none {{.*}} fits
// AUTO-DAG: {{^}}   fp32 0     none {{.*}} over
// AUTO: searched 6 plans in
// AUTO-NEXT: chosen: --precision=bf16 --recompute=none: predicted peak 1148 bytes
// AUTO-NEXT: pipeline: {{.*}}precision=bf16 recompute=none

// LOOSE: plan search: memory budget 100000 bytes (100.00 kB) per rank, dp=2
// LOOSE: searched 63 plans in
// LOOSE-NEXT: chosen: --zero-stage=0 --recompute={{.*}} --overlap: predicted peak {{[0-9]+}} bytes
// LOOSE-NEXT: pipeline: builtin.module(ztrain-training{{{.*}}recompute={{.*}}},ztrain-zero{{{.*}}dp=2{{.*}}overlap=true{{.*}}stage=0 sub-group-size=0},ztrain-to-llvm)

// TIGHT: {{^}} * 2     full {{.*}} fits
// TIGHT: chosen: --zero-stage=2 --recompute=full: predicted peak 900 bytes (0.90 kB) per rank

// One rank: stage 0 without collectives; the stages and overlap are not searched.
// ONE: searched 3 plans in
// ONE-NEXT: chosen: --recompute=selective: predicted peak 1244 bytes

// NONE-DAG: no plan fits: the smallest predicted peak is 828 bytes (0.83 kB) per rank, above the budget of 500 bytes
// NONE-DAG: error: plan-search: no plan fits 500 bytes per rank; the smallest predicted peak is 828 bytes

// BAD: error: plan-search: memory-budget must be a size in bytes (1e10, 16GB, 16GiB), got 'lots'

// JSON-DAG: "memory_budget": 900
// JSON-DAG: "chosen": {{[0-9]+}}
// JSON-DAG: "smallest_peak": 828
// JSON-DAG: "pipeline": "builtin.module(ztrain-training{{.*}}recompute=full{{.*}}stage=2 sub-group-size=0},ztrain-to-llvm)"
// JSON-DAG: "peak": 900

// The search leaves the module as it was.
// SAME-NOT: train.recomputed
// SAME-NOT: dist.
// SAME: func.func @loss
// SAME-NOT: train.step

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
