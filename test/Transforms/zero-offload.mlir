// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=1 dp=2" --zero-insert-collectives --zero-offload="optimizer=nvme" | FileCheck %s --check-prefix=D3
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme buffer-count=1" | FileCheck %s --check-prefix=D1
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme buffer-count=2" | FileCheck %s --check-prefix=D2
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme buffer-count=4" | FileCheck %s --check-prefix=D4
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=cpu" | FileCheck %s --check-prefix=CPU
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme" | FileCheck %s --check-prefix=HOIST
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme" | FileCheck %s --check-prefix=TRANSIENT
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam grad-accum-steps=2" --zero-offload="optimizer=nvme" | FileCheck %s --check-prefix=ACCUMP
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme ratio=0.5" | FileCheck %s --check-prefix=RATIO
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=1 dp=2" --zero-insert-collectives --zero-offload="optimizer=nvme" --plan-memory | FileCheck %s --check-prefix=PLAN
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=1 dp=2" --zero-insert-collectives --zero-offload="optimizer=nvme" --plan-memory --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam grad-accum-steps=2" --zero-offload="optimizer=nvme" | FileCheck %s --check-prefix=ACCUM
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=3 dp=2" --zero-insert-collectives --zero-offload="param=cpu" | FileCheck %s --check-prefix=PCPU
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=3 dp=2" --zero-insert-collectives --zero-offload="param=cpu" --plan-memory --zero-report -o /dev/null | FileCheck %s --check-prefix=PCPUREPORT
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --ztrain-zero="stage=3 dp=1 offload-param=cpu" | FileCheck %s --check-prefix=PCPU1
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=3 dp=2" --zero-insert-collectives --zero-offload="param=cpu param-ratio=0.5" | FileCheck %s --check-prefix=PRATIO
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=3 dp=2" --zero-insert-collectives --zero-offload="param=cpu param-ratio=0.5" --plan-memory --zero-report -o /dev/null | FileCheck %s --check-prefix=PRATIOREPORT
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --ztrain-zero="stage=3 dp=1 offload-param=cpu offload-param-ratio=0.5" | FileCheck %s --check-prefix=PRATIO1
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=1 dp=2" --zero-insert-collectives --zero-offload="optimizer=cpu" | FileCheck %s --check-prefix=SPILL
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=2 dp=2" --zero-insert-collectives --zero-offload="optimizer=cpu" | FileCheck %s --check-prefix=SPILL2
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam precision=fp16 clip-grad-norm=1" --zero-partition="stage=2 dp=2" --zero-insert-collectives --zero-offload="optimizer=cpu" | FileCheck %s --check-prefix=CHECKS
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=2 dp=2" --zero-insert-collectives --zero-offload="optimizer=cpu" --plan-memory --lower-to-runtime | FileCheck %s --check-prefix=ASYNC
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=cpu" | FileCheck %s --check-prefix=ASYNC0
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-offload="optimizer=nvme" --plan-memory --lower-to-runtime | FileCheck %s --check-prefix=ASYNCSWAP
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --ztrain-zero="stage=2 dp=2 overlap=true offload-optimizer=cpu" | FileCheck %s --check-prefix=ASYNCO
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=3 dp=2" --zero-insert-collectives --zero-offload="param=nvme optimizer=cpu" | FileCheck %s --check-prefix=ASYNCNVME
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=3 dp=2" --zero-insert-collectives --zero-offload="param=nvme optimizer=nvme" | FileCheck %s --check-prefix=ASYNCINF
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=1 dp=2" --zero-insert-collectives --zero-offload="optimizer=cpu" --plan-memory --zero-report -o /dev/null | FileCheck %s --check-prefix=HSTEP
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam precision=bf16" --zero-partition="stage=1 dp=2" --zero-insert-collectives --zero-offload="optimizer=cpu" --plan-memory --zero-report -o /dev/null | FileCheck %s --check-prefix=HSTEP16
// RUN: ztrain-opt %s --ztrain-training="optimizer=adam" --zero-partition="stage=3 dp=2" --zero-insert-collectives --zero-offload="param=cpu optimizer=cpu" --plan-memory --zero-report -o /dev/null | FileCheck %s --check-prefix=HSTEPP

// Three parameters, so three updates with two states each: w1 (8x4), b1
// (8), w2 (3x8).
train.param @w1 : tensor<8x4xf32> init(normal, 0.5)
train.param @b1 : tensor<8xf32> init(zeros)
train.param @w2 : tensor<3x8xf32> init(normal, 0.5)
func.func @loss(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w1 = train.param_read @w1 : tensor<8x4xf32>
  %b1 = train.param_read @b1 : tensor<8xf32>
  %w2 = train.param_read @w2 : tensor<3x8xf32>
  %h = train.matmul %x, %w1 {transpose_b} : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  %hb = train.bias_add %h, %b1 : tensor<2x8xf32>, tensor<8xf32>
  %r = train.relu %hb : tensor<2x8xf32>
  %o = train.matmul %r, %w2 {transpose_b} : (tensor<2x8xf32>, tensor<3x8xf32>) -> tensor<2x3xf32>
  %loss = train.cross_entropy %o, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// Every state is placed; the partition stays.
// D3: train.state @[[A:.*]] : tensor<{{.*}}> of @{{.*}} {dist.partition = #dist.partition<@dp, {{[0-9]+}}>, dist.space = #dist.space<nvme>}
// The first update's states are read at the start of the step, behind the
// forward and backward passes.
// D3-LABEL: func.func @loss
// D3-NEXT: %[[I0A:.*]] = dist.swap_in_start @[[U0:.*]].exp_avg
// D3-NEXT: %[[I0B:.*]] = dist.swap_in_start @[[U0]].exp_avg_sq
// The second update's reads start before the first update runs...
// D3: %[[I1A:.*]] = dist.swap_in_start @[[U1:.*]].exp_avg
// D3-NEXT: %[[I1B:.*]] = dist.swap_in_start @[[U1]].exp_avg_sq
// D3-NEXT: dist.wait %[[I0A]]
// D3-NEXT: dist.wait %[[I0B]]
// The update is asynchronous (its host step runs on a device backend's
// host step thread): the next gradient's reduce-scatter is issued meanwhile,
// and its wait comes before the next update's reads start; its states stay
// in their buffers until then and are written back after it.
// D3-NEXT: train.adam_update @[[U0]], %[[G0:[0-9]+]] states(@[[U0]].exp_avg, @[[U0]].exp_avg_sq) {{.*}}dist.async_update
// D3-NEXT: dist.reduce_scatter
// D3-NEXT: dist.update_wait @[[U0]], %[[G0]]
// D3-NEXT: %[[O0A:.*]] = dist.swap_out_start @[[U0]].exp_avg
// D3-NEXT: %[[O0B:.*]] = dist.swap_out_start @[[U0]].exp_avg_sq
// ...and the third's before the second (three buffers: the first update's
// write-back in flight, the second's states stepping, the third's coming in).
// D3-NEXT: %[[I2A:.*]] = dist.swap_in_start @[[U2:.*]].exp_avg
// D3-NEXT: %[[I2B:.*]] = dist.swap_in_start @[[U2]].exp_avg_sq
// D3-NEXT: dist.wait %[[I1A]]
// D3-NEXT: dist.wait %[[I1B]]
// D3-NEXT: train.adam_update @[[U1]]
// The parameters' all-gathers (stages 1-2) move to the end of the step,
// after the updates, as for optimizer=cpu: the last host step runs while
// the first two gather.
// D3: train.adam_update @[[U2]], %[[G2:[0-9]+]]
// D3-NEXT: dist.all_gather_param @[[U0]]
// D3-NEXT: dist.all_gather_param @[[U1]]
// D3-NEXT: dist.update_wait @[[U2]], %[[G2]]
// D3-NEXT: %[[O2A:.*]] = dist.swap_out_start @[[U2]].exp_avg
// D3-NEXT: %[[O2B:.*]] = dist.swap_out_start @[[U2]].exp_avg_sq
// D3-NEXT: dist.all_gather_param @[[U2]]
// Every write-back completes before the step ends.
// D3: dist.wait %[[O0A]]
// D3-NEXT: dist.wait %[[O0B]]
// D3-NEXT: dist.wait %{{.*}}
// D3-NEXT: dist.wait %{{.*}}
// D3-NEXT: dist.wait %[[O2A]]
// D3-NEXT: dist.wait %[[O2B]]
// D3-NEXT: return

// One buffer: update k's read waits for update k-1's write-back; the
// backward ops between two updates overlap the first one's host step (the
// updates moved into the backward pass), its write-back follows its wait.
// D1: train.adam_update @[[V0:[a-z0-9]+]], %[[H0:[0-9]+]]
// D1-NEXT: train.relu_grad
// D1-NEXT: train.reduce
// D1-NEXT: dist.update_wait @[[V0]], %[[H0]]
// D1-NEXT: %[[P0A:.*]] = dist.swap_out_start @[[V0]].exp_avg
// D1-NEXT: %[[P0B:.*]] = dist.swap_out_start @[[V0]].exp_avg_sq
// D1: dist.wait %[[P0A]]
// D1-NEXT: dist.wait %[[P0B]]
// D1-NEXT: %[[J1A:.*]] = dist.swap_in_start @[[V1:[a-z0-9]+]].exp_avg
// D1-NEXT: %[[J1B:.*]] = dist.swap_in_start @[[V1]].exp_avg_sq
// D1-NEXT: dist.wait %[[J1A]]
// D1-NEXT: dist.wait %[[J1B]]
// D1-NEXT: train.adam_update @[[V1]],

// Two buffers: update k's read overlaps update k-1, after update k-2's
// write-back completed (which, behind k-2's host step, has overlapped
// nothing yet: the default of three buffers overlaps both).
// D2: train.adam_update @[[X0:[a-z0-9]+]], %[[R0:[0-9]+]]
// D2-NEXT: train.relu_grad
// D2-NEXT: train.reduce
// D2-NEXT: dist.update_wait @[[X0]], %[[R0]]
// D2-NEXT: %[[Q0A:.*]] = dist.swap_out_start @[[X0]].exp_avg
// D2-NEXT: %[[Q0B:.*]] = dist.swap_out_start @[[X0]].exp_avg_sq
// D2: dist.wait %[[Q0A]]
// D2-NEXT: dist.wait %[[Q0B]]
// D2-NEXT: dist.swap_in_start @[[X2:[a-z0-9]+]].exp_avg
// D2-NEXT: dist.swap_in_start @[[X2]].exp_avg_sq
// D2-NEXT: dist.wait
// D2-NEXT: dist.wait
// D2-NEXT: train.adam_update @[[X1:[a-z0-9]+]],

// Four buffers: reads two uses ahead, so the first two updates' states are
// read at the start of the step and the third's before the first update.
// D4-LABEL: func.func @loss
// D4-NEXT: dist.swap_in_start @[[Y0:[a-z0-9]+]].exp_avg
// D4-NEXT: dist.swap_in_start @[[Y0]].exp_avg_sq
// D4-NEXT: dist.swap_in_start @[[Y1:[a-z0-9]+]].exp_avg
// D4-NEXT: dist.swap_in_start @[[Y1]].exp_avg_sq
// D4: dist.swap_in_start @[[Y2:[a-z0-9]+]].exp_avg
// D4-NEXT: dist.swap_in_start @[[Y2]].exp_avg_sq
// D4-NEXT: dist.wait
// D4-NEXT: dist.wait
// D4-NEXT: train.adam_update @[[Y0]],

// Parameters in host memory (stage 3): each shard keeps its partition and
// gets the space; nothing is scheduled (its gathers and update reach it
// there), and the report moves its bytes off the device.
// PCPU: train.param @w1 : tensor<8x4xf32> {{.*}}dist.partition = #dist.partition<@dp, 16>, dist.space = #dist.space<host>
// PCPU-NOT: dist.swap
// PCPUREPORT: parameters 0
// PCPUREPORT: offloaded (zero-offload), per rank: not in the peak above
// PCPUREPORT-NEXT: host: parameters 128
// On a device the shards cross the host link: each gather reads its shard
// (w1 16, b1 4, w2 12 elements forward and w2 again backward: 176 bytes),
// the update reads them (128) and writes them (128).
// PCPUREPORT: host -> device per step 304
// PCPUREPORT-NEXT: device -> host per step 128

// Partial parameter offload: whole parameters in declaration order until
// half the shards' bytes (32 per rank: w1 16, b1 4, w2 12) are placed: w1
// alone; b1 and w2 stay on the device.
// PRATIO: train.param @w1 : {{.*}}dist.space = #dist.space<host>}
// PRATIO: train.param @b1 : tensor<8xf32> init(zeros) {dist.partition = #dist.partition<@dp, 4>}{{$}}
// PRATIO: train.param @w2 : {{.*}} {dist.partition = #dist.partition<@dp, 12>}{{$}}
// The device keeps 64 bytes of the 128, the host the other 64; the link
// carries w1's forward gather (64) and its update's read (64) and write.
// PRATIOREPORT: parameters 64
// PRATIOREPORT: host: parameters 64
// PRATIOREPORT: host -> device per step 128
// PRATIOREPORT-NEXT: device -> host per step 64
// One rank: only the placed parameter's readers get one-rank gathers.
// PRATIO1-LABEL: func.func @loss(
// PRATIO1: train.param_read @b1
// PRATIO1: train.param_read @w2
// PRATIO1: dist.gather_param @w1 on @dp
// PRATIO1-NOT: train.param_read @w1
// PRATIO1: return

// Host-placed optimizer states: on a device backend the updates run on the
// host (ZeRO-Offload's CPU step). Each gradient is spilled to host memory
// as soon as it is final (at stage 1 the reduce-scatter at the optimizer
// makes it); its wait yields the host copy, which the update reads, and
// the parameter's gradient is transient (no persistent device buffer).
// SPILL: train.param @w1 {{.*}}dist.transient_gradient
// SPILL: %[[RS:[0-9]+]] = dist.reduce_scatter mean {{.*}} -> tensor<16xf32>
// SPILL-NEXT: %[[T:[0-9]+]] = dist.offload_activation_start %[[RS]] : tensor<16xf32>
// SPILL-NEXT: %[[H:[0-9]+]] = dist.wait %[[T]] : tensor<16xf32>
// SPILL-NEXT: train.adam_update @w1, %[[H]] {{.*}}dist.host_gradient
// Stage 2: the gradients are final in the backward pass; one spill is in
// flight at a time, each waited where the next starts (its device buffer
// freed there), the last right before its update. Each update moves up to
// right after its spill's wait, asynchronous (on a device backend its host
// step runs beside the rest of the backward pass), and is waited right
// before its parameter's all-gather, which reads the new values and moves
// to the end of the step, in the updates' order; the host gradient lives
// until that wait.
// SPILL2: %[[T2:[0-9]+]] = dist.offload_activation_start %{{[0-9]+}} : tensor<12xf32>
// SPILL2: %[[H2:[0-9]+]] = dist.wait %[[T2]] : tensor<12xf32>
// SPILL2-NEXT: train.adam_update @w2, %[[H2]] {{.*}}dist.async_update, dist.host_gradient
// SPILL2-NEXT: %[[T1:[0-9]+]] = dist.offload_activation_start %{{[0-9]+}} : tensor<4xf32>
// SPILL2: %[[H1:[0-9]+]] = dist.wait %[[T1]] : tensor<4xf32>
// SPILL2-NEXT: train.adam_update @b1, %[[H1]] {{.*}}dist.async_update
// SPILL2-NEXT: %[[T0:[0-9]+]] = dist.offload_activation_start %{{[0-9]+}} : tensor<16xf32>
// SPILL2-NEXT: %[[H0:[0-9]+]] = dist.wait %[[T0]] : tensor<16xf32>
// SPILL2-NEXT: train.adam_update @w1, %[[H0]] {{.*}}dist.async_update
// SPILL2-NEXT: dist.update_wait @w2, %[[H2]] : tensor<12xf32>
// SPILL2-NEXT: dist.all_gather_param @w2 on @dp
// SPILL2-NEXT: dist.update_wait @b1, %[[H1]] : tensor<4xf32>
// SPILL2-NEXT: dist.all_gather_param @b1 on @dp
// SPILL2-NEXT: dist.update_wait @w1, %[[H0]] : tensor<16xf32>
// SPILL2-NEXT: dist.all_gather_param @w1 on @dp
// SPILL2-NEXT: return

// Lowered: each asynchronous update is announced with the parameter
// pointer it updates (ztrt_update_async), and its wait names the same
// pointer, before the all-gather that reads it.
// ASYNC: call @ztrt_update_async(%arg0, %[[P2:[0-9]+]])
// ASYNC-NEXT: call @ztrt_adam_update(%arg0, %{{.*}}, %[[P2]],
// ASYNC: call @ztrt_update_async(%arg0, %[[P1:[0-9]+]])
// ASYNC-NEXT: call @ztrt_adam_update(%arg0, %{{.*}}, %[[P1]],
// ASYNC: call @ztrt_update_async(%arg0, %[[P0:[0-9]+]])
// ASYNC-NEXT: call @ztrt_adam_update(%arg0, %{{.*}}, %[[P0]],
// ASYNC-NEXT: call @ztrt_update_wait(%arg0, %[[P2]])
// ASYNC: call @ztrt_all_gather(
// ASYNC: call @ztrt_update_wait(%arg0, %[[P1]])
// ASYNC: call @ztrt_all_gather(
// ASYNC: call @ztrt_update_wait(%arg0, %[[P0]])
// ASYNC: call @ztrt_all_gather(
// ASYNC-NEXT: return
// nvme states, lowered: the update is announced and its wait names the
// same pointer; the write-backs of its states' buffers (the pointers the
// update stepped) come after the wait, so they write what the host step
// wrote.
// ASYNCSWAP: %[[IN1:[0-9]+]] = llvm.call @ztrt_swap_in(%arg0, %{{.*}}, %{{.*}}, %[[M:[0-9]+]])
// ASYNCSWAP-NEXT: %{{.*}} = llvm.getelementptr
// ASYNCSWAP-NEXT: %[[IN2:[0-9]+]] = llvm.call @ztrt_swap_in(%arg0, %{{.*}}, %{{.*}}, %[[V:[0-9]+]])
// ASYNCSWAP: call @ztrt_update_async(%arg0, %[[Q:[0-9]+]])
// ASYNCSWAP-NEXT: call @ztrt_adam_update(%arg0, %{{.*}}, %[[Q]], %{{.*}}, %[[M]], %[[V]],
// ASYNCSWAP-NOT: call @ztrt_swap_out
// ASYNCSWAP: call @ztrt_update_wait(%arg0, %[[Q]])
// ASYNCSWAP-NEXT: call @ztrt_swap_out(%arg0, %{{.*}}, %{{.*}}, %[[M]])
// ASYNCSWAP-NEXT: call @ztrt_swap_out(%arg0, %{{.*}}, %{{.*}}, %[[V]])
// Stage 0 (one rank): nothing names a parameter after its update, so the
// waits go at the end of the step, in the updates' order.
// ASYNC0-LABEL: func.func @loss(
// ASYNC0: train.adam_update @w2, %[[G2:[0-9]+]] {{.*}}dist.async_update
// ASYNC0: train.adam_update @b1, %[[G1:[0-9]+]] {{.*}}dist.async_update
// ASYNC0: train.adam_update @w1, %[[G0:[0-9]+]] {{.*}}dist.async_update
// ASYNC0-NEXT: dist.update_wait @w2, %[[G2]] : tensor<3x8xf32>
// ASYNC0-NEXT: dist.update_wait @b1, %[[G1]] : tensor<8xf32>
// ASYNC0-NEXT: dist.update_wait @w1, %[[G0]] : tensor<8x4xf32>
// ASYNC0-NEXT: return
// With --overlap the all-gathers are started after the updates and waited
// at the end: each start (and its update's wait before it) moves to just
// before the first of those waits, so every host step is queued before
// the step thread waits for the first, and the gathers stay in flight
// together.
// ASYNCO-LABEL: func.func @loss(
// ASYNCO: train.adam_update @w1, %[[G0:[0-9]+]] {{.*}}dist.async_update
// ASYNCO: train.adam_update @b1, %[[G1:[0-9]+]] {{.*}}dist.async_update
// ASYNCO: train.adam_update @w2, %[[G2:[0-9]+]] {{.*}}dist.async_update
// ASYNCO-NEXT: dist.update_wait @w1, %[[G0]]
// ASYNCO-NEXT: %[[S0:[0-9]+]] = dist.all_gather_param_start @w1 on @dp
// ASYNCO-NEXT: dist.update_wait @b1, %[[G1]]
// ASYNCO-NEXT: %[[S1:[0-9]+]] = dist.all_gather_param_start @b1 on @dp
// ASYNCO-NEXT: dist.update_wait @w2, %[[G2]]
// ASYNCO-NEXT: %[[S2:[0-9]+]] = dist.all_gather_param_start @w2 on @dp
// ASYNCO-NEXT: dist.wait %[[S0]]
// ASYNCO-NEXT: dist.wait %[[S1]]
// ASYNCO-NEXT: dist.wait %[[S2]]
// A parameter on nvme (states in host memory): its update is asynchronous
// too, one in flight (waited before the next update that swaps), and the
// parameter's swap-out follows the wait.
// ASYNCNVME-LABEL: func.func @loss(
// ASYNCNVME: train.adam_update @w2, %[[N2:[0-9]+]] {{.*}}dist.async_update, dist.host_gradient
// ASYNCNVME-NOT: dist.swap_out_start @w2
// ASYNCNVME: dist.update_wait @w2, %[[N2]]
// ASYNCNVME-NEXT: dist.swap_out_start @w2
// ASYNCNVME-NOT: train.adam_update
// ASYNCNVME: dist.wait
// ASYNCNVME-NEXT: train.adam_update @b1
// ASYNCNVME: dist.update_wait @b1
// ASYNCNVME-NEXT: dist.swap_out_start @b1
// ZeRO-Infinity (parameters and states on nvme): the same, the
// parameter's and the states' write-backs after the wait.
// ASYNCINF-LABEL: func.func @loss(
// ASYNCINF: train.adam_update @w1, %[[I1:[0-9]+]] states(@w1.exp_avg, @w1.exp_avg_sq) {{.*}}dist.async_update
// ASYNCINF-NEXT: dist.update_wait @w1, %[[I1]]
// ASYNCINF-NEXT: dist.swap_out_start @w1
// ASYNCINF-NEXT: dist.swap_out_start @w1.exp_avg
// ASYNCINF-NEXT: dist.swap_out_start @w1.exp_avg_sq

// Clipping's and the loss scaler's chains read every gradient before the
// updates: each link moves up to right after its gradient's spill starts
// (its chain's zero with the first link), so no check keeps a gradient's
// device copy past the spill's wait. The chains keep their order (the
// order the gradients are made), so the sums are the same.
// CHECKS: %[[G2:[0-9]+]] = dist.reduce_scatter mean {{.*}} -> tensor<12xf16>
// CHECKS-NEXT: dist.offload_activation_start %[[G2]] : tensor<12xf16>
// CHECKS-NEXT: %[[Z:[0-9]+]] = train.fill {value = 0.000000e+00 : f64}
// CHECKS-NEXT: %[[N2:[0-9]+]] = train.grad_sq_norm %[[G2]], %[[Z]] : tensor<12xf16>
// CHECKS-NEXT: %[[Y:[0-9]+]] = train.fill {value = 0.000000e+00 : f64}
// CHECKS-NEXT: %[[F2:[0-9]+]] = train.found_nonfinite %[[G2]], %[[Y]] : tensor<12xf16>
// CHECKS: %[[G1:[0-9]+]] = dist.reduce_scatter mean {{.*}} -> tensor<4xf16>
// CHECKS-NEXT: dist.wait
// CHECKS-NEXT: dist.offload_activation_start %[[G1]] : tensor<4xf16>
// CHECKS-NEXT: %[[N1:[0-9]+]] = train.grad_sq_norm %[[G1]], %[[N2]] : tensor<4xf16>
// CHECKS-NEXT: %[[F1:[0-9]+]] = train.found_nonfinite %[[G1]], %[[F2]] : tensor<4xf16>
// CHECKS: %[[G0:[0-9]+]] = dist.reduce_scatter mean {{.*}} -> tensor<16xf16>
// CHECKS-NEXT: dist.wait
// CHECKS-NEXT: dist.offload_activation_start %[[G0]] : tensor<16xf16>
// CHECKS-NEXT: %[[N0:[0-9]+]] = train.grad_sq_norm %[[G0]], %[[N1]] : tensor<16xf16>
// CHECKS-NEXT: %[[F0:[0-9]+]] = train.found_nonfinite %[[G0]], %[[F1]] : tensor<16xf16>
// CHECKS-NEXT: %[[FS:[0-9]+]] = dist.all_reduce sum %[[F0]]
// CHECKS-NEXT: train.update_loss_scale %[[FS]]
// CHECKS-NEXT: %[[NS:[0-9]+]] = dist.all_reduce sum %[[N0]]
// CHECKS-NEXT: train.clip_grad_norm %[[NS]]
// The report: no gradient on the device; the spilled gradients in their
// own host arena (16, 4 and 12 elements, all alive together: each until
// its asynchronous update's wait at the end of the step, 128 bytes), down
// once per step (128);
// the host step buffer holds only the parameter (w1's 16-element shard),
// which goes down (the update reads it, 128) and up (128); nothing of the
// states crosses the link.
// HSTEP: gradients 0
// HSTEP: host: gradients 128
// HSTEP-NEXT: host: optimizer states 256
// HSTEP: gradients -> host 128
// HSTEP: host: step buffers 64
// HSTEP-NEXT: host steps per step 3 (3 asynchronous)
// HSTEP-NEXT: host -> device per step 128
// HSTEP-NEXT: device -> host per step 256
// bf16 with f32 masters (12 bytes per element on the host): the bf16
// gradient goes down and the bf16 parameter up, 64 bytes each way; the
// master-weight update only writes the parameter. (The host gradients:
// 32 + 8 + 24 bytes, each starting 16-byte aligned: 72, all alive
// together.)
// HSTEP16: host: gradients 72
// HSTEP16-NEXT: host: optimizer states 384
// HSTEP16: host: step buffers 32
// HSTEP16-NEXT: host steps per step 3 (3 asynchronous)
// HSTEP16-NEXT: host -> device per step 64
// HSTEP16-NEXT: device -> host per step 64
// Parameters in host memory too (stage 3): the host step updates them where
// they are and stages nothing (no step buffer); only the gradient shards go
// down (128); up go the gathers' reads of the shards (176, as above).
// HSTEPP: host: gradients 128
// HSTEPP-NOT: step buffers
// HSTEPP: host -> device per step 176
// HSTEPP-NEXT: device -> host per step 128

// One rank: stage 3 gathers nothing, so each op that reads a host-placed
// parameter gets a one-rank gather (a copy to the device) instead of
// reading host memory in place; no parameter is read where it lives.
// PCPU1-LABEL: func.func @loss(
// PCPU1-NOT: train.param_read
// PCPU1: dist.gather_param @w1 on @dp
// PCPU1: dist.gather_param @w2 on @dp
// PCPU1: dist.gather_param @w2 on @dp
// PCPU1-NOT: train.param_read

// Host placement: an attribute, no transfers in the step.
// CPU: train.state @{{.*}} {dist.space = #dist.space<host>}
// CPU-NOT: dist.swap_in_start

// Swap buffers: their own arena, 4096-byte aligned, each state's storage
// rounded up to whole blocks (16 elements of w1's 32 per rank: 64 bytes).
// Three updates, three buffers: all six live at once. The states' arena
// is apart from the parameters' (which a device backend copies to the
// device): only the host reads it.
// PLAN: dist.arenas = {{{.*}}state_swap_buffers = 24576 : i64}
// PLAN: dist.swap_in_start @w1.exp_avg {dist.staging = [#dist.slot<"state_swap_buffers", 0, 4096>]}
// PLAN-NEXT: dist.swap_in_start @w1.exp_avg_sq {dist.staging = [#dist.slot<"state_swap_buffers", 4096, 4096>]}

// Six states of one 4096-byte block each; three updates' states at most in
// buffers at once (the plan), each read and written once per step.
// On a device the updates of nvme states run on the host (ZeRO-Infinity's
// CPU step): the states never cross the host link. Each update's gradient
// goes down and its parameter down and back up (stage 1: this rank's
// 16 + 8 + 8 elements of the padded parameters, 128 bytes of each), staged
// through one buffer sized for the largest (w1's 16 elements: 64 + 64).
// Three host steps per step, all asynchronous (their gradients are staged
// by the host step thread).
// REPORT: "offload": {
// REPORT-NEXT: "device_backend": {
// REPORT-NEXT: "asynchronous_host_steps_per_step": 3,
// REPORT-NEXT: "device_peak": [[#DEV:]],
// REPORT-NEXT: "device_to_host_per_step": 256,
// REPORT-NEXT: "host_step_buffers": 128,
// REPORT-NEXT: "host_steps_per_step": 3,
// REPORT-NEXT: "host_to_device_per_step": 128
// REPORT-NEXT: },
// REPORT-NEXT: "host": {
// REPORT-NEXT: "activations": 0,
// REPORT-NEXT: "gradients": 0,
// REPORT-NEXT: "optimizer_states": 0,
// REPORT-NEXT: "parameters": 0,
// REPORT-NEXT: "state_swap_buffers": 24576,
// REPORT-NEXT: "swap_buffers": 0
// REPORT-NEXT: },
// REPORT-NEXT: "nvme": {
// REPORT-NEXT: "optimizer_states": 24576,
// REPORT-NEXT: "parameters": 0
// REPORT-NEXT: },
// REPORT-NEXT: "transfers_per_step": {
// REPORT-NEXT: "activations_to_host": 0,
// REPORT-NEXT: "gradients_to_host": 0,
// REPORT-NEXT: "host_to_nvme": 24576,
// REPORT-NEXT: "nvme_to_host": 24576
// REPORT: "optimizer_states": 0,
// REPORT: "predicted_peak": [[#DEV]]

// The updates move into the backward pass: each right after its gradient
// is final and its parameter's last read (w2's after dW2, before the
// relu's gradient; w1's after dW1).
// HOIST: %[[DH:.*]] = train.matmul %[[G:.*]], %{{.*}} : (tensor<2x3xf32>, tensor<3x8xf32>) -> tensor<2x8xf32>
// HOIST-NEXT: %[[DW2:.*]] = train.matmul %[[G]], %{{.*}} {transpose_a}
// HOIST: train.adam_update @w2, %[[DW2]]
// HOIST: train.relu_grad %[[DH]]
// HOIST: %[[DB1:.*]] = train.reduce sum
// HOIST: train.adam_update @b1, %[[DB1]]
// HOIST: %[[DW1:.*]] = train.matmul {{.*}} {transpose_a}
// HOIST: train.adam_update @w1, %[[DW1]]
// HOIST-NOT: train.adam_update

// Their gradients live in the arena from the op that makes them to the
// update (no persistent buffers), unless gradients accumulate.
// TRANSIENT: train.param @w1 : tensor<8x4xf32> init(normal, 5.000000e-01) {dist.transient_gradient}
// ACCUMP: train.param @w1 : tensor<8x4xf32> init(normal, 5.000000e-01){{$}}

// Partial offload: whole updates' states in step order until half of the
// states' 512 bytes are placed: w1's 256; b1 and w2 stay on the device,
// unswapped.
// RATIO: train.state @w1.exp_avg : {{.*}} {dist.space = #dist.space<nvme>}
// RATIO-NEXT: train.state @w1.exp_avg_sq : {{.*}} {dist.space = #dist.space<nvme>}
// RATIO: train.state @b1.exp_avg : tensor<8xf32> of @b1{{$}}
// RATIO: train.state @w2.exp_avg_sq : tensor<3x8xf32> of @w2{{$}}
// RATIO-NOT: dist.swap_in_start @b1
// RATIO-NOT: dist.swap_in_start @w2

// With accumulation the swaps belong to the optimizer step: after the
// boundary, not in every micro-batch.
// ACCUM: train.accumulation_boundary
// ACCUM-NEXT: dist.swap_in_start
