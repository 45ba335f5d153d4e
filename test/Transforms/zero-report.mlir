// RUN: ztrain-opt %s --train-autodiff --zero-report -o /dev/null | FileCheck %s --check-prefix=GRAD
// RUN: ztrain-opt %s --ztrain-training --zero-report -o /dev/null | FileCheck %s --check-prefix=ONE
// A step planned already is priced from its arenas: the same numbers.
// RUN: ztrain-opt %s --ztrain-training --plan-memory --zero-report -o /dev/null | FileCheck %s --check-prefix=ONE
// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=0 dp=4" --zero-report -o /dev/null | FileCheck %s --check-prefix=S0
// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=1 dp=4" --zero-report -o /dev/null | FileCheck %s --check-prefix=S1
// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=2 dp=4" --zero-report -o /dev/null | FileCheck %s --check-prefix=S2
// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=3 dp=4" --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=S3
// RUN: ztrain-opt %s --ztrain-training --zero-partition="stage=3 dp=4" --zero-report="output=%t.json format=json" -o /dev/null && FileCheck %s --check-prefix=S3 < %t.json
// RUN: ztrain-opt %s --ztrain-training --ztrain-zero="stage=3 dp=4" --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=S3IR
// RUN: not ztrain-opt %s --zero-report=format=yaml -o /dev/null 2>&1 | FileCheck %s --check-prefix=FORMAT

// Psi = (7*3 + 7) f32 = 112 bytes. Over 4 ranks, shards are ceil(n/4):
// 6 + 2 elements = 32 bytes; padded Psi = 4 * 32 = 128 bytes.
// Live activations peak at the cross-entropy gradient: biased logits (56),
// loss (4), seed (4) and dlogits (56) = 120 bytes (the unbiased logits are
// dead by then; the gradients the optimizer consumes count as gradients).
// The executable allocates plan-memory's arena, 148 bytes here (16-byte
// aligned offsets, and buffers whose lifetimes overlap at some point cannot
// share), so that is what zero-report prices even before plan-memory ran:
// it plans a copy of the step (issue 49: the README's command without
// --plan-memory under-predicted the measured peak).

// GRAD: zero-report: stage 0, 1 rank (not partitioned)
// GRAD: optimizer states (none yet)              0
// GRAD: total                                    0

// ONE: parameters: 2 tensors, 28 elements, 112 bytes (Psi)
// ONE: parameters                           112
// ONE: gradients                            112
// ONE: optimizer states                     224
// ONE: inputs (micro-batch)                  32
// ONE: activations (arena)                  148
// ONE: communication buffers                  0
// ONE: predicted peak                       628

// Stage 0: everything replicated, gradients all-reduced: 2 Psi (N-1)/N.
// S0: zero-report: stage 0, 4 ranks over @dp
// S0: parameters                           112
// S0: gradients                            112
// S0: optimizer states                     224
// S0: all_reduce                           168           2
// S0: total                                168

// Stage 1: states 2 x 32 bytes; parameters and gradients stay full-size but
// padded to 4 equal slices (128 bytes: parameters are updated by slice and
// all-gathered in place, gradients reduce-scattered from the padded buffer);
// reduce-scatter + all-gather of the padded buffers: 2 x 128 x 3/4 = 192
// bytes, never an all-reduce.
// S1: parameters                           128
// S1: gradients                            128
// S1: optimizer states                      64
// S1: reduce_scatter                        96           2
// S1: all_gather                            96           2
// S1-NOT: all_reduce
// S1: total                                192

// S2: parameters                           128
// S2: gradients                             32
// S2: optimizer states                      64
// S2: communication buffers                 96
// S2: total                                192

// Stage 3: each parameter gathered for its forward use only: the step has
// no backward use of either (the layer's input is data, so no input
// gradient reads @w; the bias's gradient does not read @b), which is what
// zero-insert-collectives inserts (the IR run below): 2 x 128 x 3/4 = 192.
// (The ZeRO paper's 3 Psi counts a backward gather for every parameter.)
// S3: "communication_bytes_per_step": 192,
// S3: "per_rank": {
// S3-NEXT: "activations": 148,
// S3-NEXT: "buffers": 0,
// S3-NEXT: "communication_buffers": 96,
// S3-NEXT: "gathered_parameters_peak": 0,
// S3-NEXT: "gradients": 32,
// S3-NEXT: "inputs": 32,
// S3-NEXT: "optimizer_states": 64,
// S3-NEXT: "parameters": 32,
// S3-NEXT: "predicted_peak": 404
// S3: "stage": 3,
// S3-NEXT: "world_size": 4

// S3IR: "collectives_source": "ir",
// S3IR-NEXT: "communication_bytes_per_step": 192,

// FORMAT: for the --format option: Cannot find option named 'yaml'!

train.param @w : tensor<7x3xf32> init(normal, 0.02)
train.param @b : tensor<7xf32> init(zeros)
func.func @loss(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<7x3xf32>
  %b = train.param_read @b : tensor<7xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<2x3xf32>, tensor<7x3xf32>) -> tensor<2x7xf32>
  %lb = train.bias_add %l, %b : tensor<2x7xf32>, tensor<7xf32>
  %loss = train.cross_entropy %lb, %y : (tensor<2x7xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
