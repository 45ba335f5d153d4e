// ZeRO's Table 1 and Megatron's distributed-optimizer bytes per parameter,
// reproduced by zero-report on a GPT-style graph with Psi = 7,500,001,280
// parameters (width 4096, 37 layers, 32 heads, context 2048, vocabulary
// 9900: 12 d^2 + 13 d per layer, 9900 + 2048 embedding rows, final norm),
// Adam, dp = 64. Pure analysis: nothing is allocated.
//
// RUN: env PYTHONPATH=%ztrain_src/python python3 -m ztrain.models gpt --batch 1 --seq 2048 --vocab 9900 --layers 37 --width 4096 --heads 32 -o %t.mlir
//
// bf16 parameters and gradients, f32 masters and moments (K = 12):
// 16 Psi / (4 + 12/64) Psi / (2 + 14/64) Psi / 16 Psi / 64 = 120 / 31.4 /
// 16.6 / 1.88 GB, the paper's row for 7.5B at N_d = 64.
// RUN: ztrain-opt %t.mlir --ztrain-training=precision=bf16 --zero-partition="stage=0 dp=64" --zero-report -o /dev/null | FileCheck %s --check-prefix=S0
// RUN: ztrain-opt %t.mlir --ztrain-training=precision=bf16 --zero-partition="stage=1 dp=64" --zero-report -o /dev/null | FileCheck %s --check-prefix=S1
// RUN: ztrain-opt %t.mlir --ztrain-training=precision=bf16 --zero-partition="stage=2 dp=64" --zero-report -o /dev/null | FileCheck %s --check-prefix=S2
// RUN: ztrain-opt %t.mlir --ztrain-training=precision=bf16 --zero-partition="stage=3 dp=64" --zero-report -o /dev/null | FileCheck %s --check-prefix=S3
//
// Megatron's distributed optimizer (ZeRO stage 1 in these terms), bytes per
// parameter replicated + sharded over d = 64:
//   bf16 params, fp32 gradients: 18 -> 6 + 12/64 = 6.1875
//   fp32:                        16 -> 8 +  8/64 = 8.1250
// RUN: ztrain-opt %t.mlir --ztrain-training="precision=bf16 reduce-dtype=fp32" --zero-partition="stage=0 dp=64" --zero-report -o /dev/null | FileCheck %s --check-prefix=MEG-BF16-D1
// RUN: ztrain-opt %t.mlir --ztrain-training="precision=bf16 reduce-dtype=fp32" --zero-partition="stage=1 dp=64" --zero-report -o /dev/null | FileCheck %s --check-prefix=MEG-BF16
// RUN: ztrain-opt %t.mlir --ztrain-training --zero-partition="stage=0 dp=64" --zero-report -o /dev/null | FileCheck %s --check-prefix=MEG-F32-D1
// RUN: ztrain-opt %t.mlir --ztrain-training --zero-partition="stage=1 dp=64" --zero-report -o /dev/null | FileCheck %s --check-prefix=MEG-F32
//
// fp16 / fp16: Megatron keeps an fp32 copy of the gradient shard in its
// optimizer, 20 -> 4 + 16/d; ztrain's master-weight update widens the 16-bit
// gradient slice as it reads it and keeps no such copy: 16 -> 4 + 12/64
// (docs/mixed-precision.md).
// RUN: ztrain-opt %t.mlir --ztrain-training=precision=fp16 --zero-partition="stage=1 dp=64" --zero-report -o /dev/null | FileCheck %s --check-prefix=F16
// RUN: ztrain-opt %t.mlir --ztrain-training=precision=bf16 --zero-partition="stage=3 dp=64" --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=JSON

// S0: parameters: 596 tensors, 7500001280 elements, 15000002560 bytes (Psi)
// S0: model states: 120000020480 bytes per rank = 120.00 GB, 16.0000 bytes per parameter
// S0: element types: parameters bf16, gradients bf16, optimizer states f32
// S1: model states: {{[0-9]+}} bytes per rank = 31.41 GB, 4.1875 bytes per parameter
// S2: model states: {{[0-9]+}} bytes per rank = 16.64 GB, 2.2188 bytes per parameter
// S3: model states: {{[0-9]+}} bytes per rank = 1.88 GB, 0.2500 bytes per parameter

// MEG-BF16-D1: 18.0000 bytes per parameter
// MEG-BF16-D1: element types: parameters bf16, gradients f32, optimizer states f32
// MEG-BF16: 6.1875 bytes per parameter
// MEG-F32-D1: 16.0000 bytes per parameter
// MEG-F32-D1: element types: parameters f32, gradients f32, optimizer states f32
// MEG-F32: 8.1250 bytes per parameter
// F16: 4.1875 bytes per parameter
// F16: element types: parameters f16, gradients f16, optimizer states f32

// JSON: "element_types": {
// JSON-NEXT: "gradients": "bf16",
// JSON-NEXT: "optimizer_states": "f32",
// JSON-NEXT: "parameters": "bf16"
// JSON: "model_states": {
// JSON-NEXT: "bytes_per_parameter": 0.25
// JSON-NEXT: "bytes_per_rank": 1875000320
