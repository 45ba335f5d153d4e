// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 overlap=true" | FileCheck %s --check-prefix=DEPTH1
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 prefetch-depth=0 overlap=true" | FileCheck %s --check-prefix=DEPTH0
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 prefetch-depth=2 overlap=true" | FileCheck %s --check-prefix=DEPTH2
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 max-live-bytes=320 overlap=true" | FileCheck %s --check-prefix=LIVE
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 reshard-after-forward=false overlap=true" | FileCheck %s --check-prefix=KEEP
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=2 dp=2 bucket-bytes=300 overlap=true" | FileCheck %s --check-prefix=BUCKET
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=2 dp=2 bucket-bytes=0 overlap=true" | FileCheck %s --check-prefix=NOBUCKET
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=0 dp=2 bucket-bytes=300 overlap=true" | FileCheck %s --check-prefix=S0
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=1 dp=2 overlap=true" | FileCheck %s --check-prefix=S1
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 overlap=false" --overlap-schedule | FileCheck %s --check-prefix=DEPTH1
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 max-live-bytes=320 overlap=true" --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: ztrain-opt %s --ztrain-training="optimizer=sgd eval=false" --ztrain-zero="stage=3 dp=2 overlap=true" --lower-to-runtime | FileCheck %s --check-prefix=LOWER3
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=2 dp=2 bucket-bytes=300 overlap=true" --lower-to-runtime | FileCheck %s --check-prefix=LOWER2

// Three layers, stage 3 over 2 ranks. Gathered sizes: w1 192 bytes, w2 256,
// w3 128 (no padding: every size is even).

// Prefetch depth 1 (the default): gathers are issued one use ahead, each
// waited right before its first use and released right after its last.
// The forward gather of w3 is released at once and gathered again for the
// backward pass (reshard-after-forward); the backward gathers are prefetched
// across the forward/backward boundary.
// DEPTH1-LABEL: func.func @loss
// DEPTH1-NEXT: %[[T1:.*]] = dist.gather_param_start @w1 on @dp
// DEPTH1-NEXT: %[[T2:.*]] = dist.gather_param_start @w2 on @dp
// DEPTH1-NEXT: %[[W1:.*]] = dist.wait %[[T1]] : tensor<8x6xf32>
// DEPTH1-NEXT: %[[H1:.*]] = train.matmul %arg0, %[[W1]]
// DEPTH1-NEXT: dist.release %[[W1]] : tensor<8x6xf32>
// DEPTH1-NEXT: %[[R1:.*]] = train.relu %[[H1]]
// DEPTH1-NEXT: %[[T3:.*]] = dist.gather_param_start @w3 on @dp
// DEPTH1-NEXT: %[[W2:.*]] = dist.wait %[[T2]] : tensor<8x8xf32>
// DEPTH1-NEXT: train.matmul %[[R1]], %[[W2]]
// DEPTH1-NEXT: dist.release %[[W2]]
// DEPTH1-NEXT: train.relu
// DEPTH1-NEXT: %[[T3B:.*]] = dist.gather_param_start @w3 on @dp
// DEPTH1-NEXT: %[[W3:.*]] = dist.wait %[[T3]] : tensor<4x8xf32>
// DEPTH1-NEXT: train.matmul %{{.*}}, %[[W3]]
// DEPTH1-NEXT: dist.release %[[W3]]
// DEPTH1: train.cross_entropy_with_grad
// DEPTH1-NEXT: %[[T2B:.*]] = dist.gather_param_start @w2 on @dp
// DEPTH1-NEXT: %[[W3B:.*]] = dist.wait %[[T3B]] : tensor<4x8xf32>
// DEPTH1-NEXT: train.matmul %{{.*}}, %[[W3B]] :
// DEPTH1-NEXT: dist.release %[[W3B]]
// DEPTH1: %[[W2B:.*]] = dist.wait %[[T2B]] : tensor<8x8xf32>
// DEPTH1-NEXT: train.matmul %{{.*}}, %[[W2B]] :
// DEPTH1-NEXT: dist.release %[[W2B]]
// The default bucket (1 MiB) holds every gradient: one reduce-scatter,
// issued when the last gradient is final, waited before the first update.
// DEPTH1: %[[BK:.*]] = dist.reduce_scatter_start mean %{{.*}}, %{{.*}}, %{{.*}} on @dp : tensor<32xf32>, tensor<64xf32>, tensor<48xf32>
// DEPTH1-NEXT: %[[G:.*]]:3 = dist.wait %[[BK]] : tensor<16xf32>, tensor<32xf32>, tensor<24xf32>
// DEPTH1-NEXT: train.sgd_update @w1, %[[G]]#2
// DEPTH1-NOT: dist.gather_param {{.*}}:
// DEPTH1: return

// Depth 0: no prefetch, every start right before its wait.
// DEPTH0-LABEL: func.func @loss
// DEPTH0-NEXT: %[[T1:.*]] = dist.gather_param_start @w1 on @dp
// DEPTH0-NEXT: dist.wait %[[T1]]
// DEPTH0: dist.release
// DEPTH0-NEXT: train.relu
// DEPTH0-NEXT: %[[T2:.*]] = dist.gather_param_start @w2 on @dp
// DEPTH0-NEXT: dist.wait %[[T2]]

// Depth 2: three gathers in flight before the first use.
// DEPTH2-LABEL: func.func @loss
// DEPTH2-NEXT: dist.gather_param_start @w1 on @dp
// DEPTH2-NEXT: dist.gather_param_start @w2 on @dp
// DEPTH2-NEXT: dist.gather_param_start @w3 on @dp
// DEPTH2-NEXT: dist.wait

// max-live-bytes=320: w1 (192) and w2 (256) cannot be gathered at once, so
// w2 starts only after w1 is released; w3's two gathers (128 each) fit
// together, and the backward gather of w2 waits for them to be released.
// LIVE-LABEL: func.func @loss
// LIVE-NEXT: %[[T1:.*]] = dist.gather_param_start @w1 on @dp
// LIVE-NEXT: %[[W1:.*]] = dist.wait %[[T1]]
// LIVE-NEXT: train.matmul
// LIVE-NEXT: dist.release %[[W1]]
// LIVE-NEXT: dist.gather_param_start @w2 on @dp
// LIVE: dist.release
// LIVE-NEXT: dist.gather_param_start @w3 on @dp
// LIVE-NEXT: train.relu
// LIVE-NEXT: dist.gather_param_start @w3 on @dp
// LIVE: train.cross_entropy_with_grad
// LIVE: %[[W3B:.*]] = dist.wait %{{.*}} : tensor<4x8xf32>
// LIVE-NEXT: train.matmul %{{.*}}, %[[W3B]] :
// LIVE-NEXT: dist.release %[[W3B]]
// LIVE-NEXT: dist.gather_param_start @w2 on @dp

// The report's prediction follows the schedule: at most 320 bytes gathered.
// REPORT: "gathered_parameters_peak": 256,

// reshard-after-forward=false: one gather per parameter, kept from the
// forward use to the last backward use.
// KEEP-LABEL: func.func @loss
// KEEP-COUNT-3: dist.gather_param_start
// KEEP-NOT: dist.gather_param_start
// KEEP: %[[W3:.*]] = dist.wait %{{.*}} : tensor<4x8xf32>
// KEEP: train.cross_entropy_with_grad
// KEEP-NEXT: train.matmul %{{.*}}, %[[W3]] :
// KEEP-NEXT: dist.release %[[W3]]

// Buckets of at least 300 bytes in the order gradients become final: w3's
// (128 bytes) and w2's (256) together, issued after w2's gradient, while
// w1's gradient is still computed; w1's alone.
// BUCKET: %[[F3:.*]] = dist.pad_flat %{{.*}} : tensor<4x8xf32> -> tensor<32xf32>
// BUCKET: %[[F2:.*]] = dist.pad_flat %{{.*}} : tensor<8x8xf32> -> tensor<64xf32>
// BUCKET-NEXT: %[[B1:.*]] = dist.reduce_scatter_start mean %[[F3]], %[[F2]] on @dp : tensor<32xf32>, tensor<64xf32>
// BUCKET-NEXT: train.relu_grad
// BUCKET-NEXT: train.matmul
// BUCKET-NEXT: %[[F1:.*]] = dist.pad_flat
// BUCKET-NEXT: %[[B2:.*]] = dist.reduce_scatter_start mean %[[F1]] on @dp : tensor<48xf32>
// BUCKET-NEXT: %[[G1:.*]] = dist.wait %[[B2]] : tensor<24xf32>
// BUCKET-NEXT: train.sgd_update @w1, %[[G1]]
// Stages 1-2 rebuild parameters with in-place all-gathers that overlap the
// remaining updates and are waited at the end of the step.
// BUCKET-NEXT: %[[A1:.*]] = dist.all_gather_param_start @w1 on @dp
// BUCKET-NEXT: %[[G:.*]]:2 = dist.wait %[[B1]] : tensor<16xf32>, tensor<32xf32>
// BUCKET-NEXT: train.sgd_update @w2, %[[G]]#1
// BUCKET-NEXT: %[[A2:.*]] = dist.all_gather_param_start @w2 on @dp
// BUCKET-NEXT: train.sgd_update @w3, %[[G]]#0
// BUCKET-NEXT: %[[A3:.*]] = dist.all_gather_param_start @w3 on @dp
// BUCKET-NEXT: dist.wait %[[A1]]
// BUCKET-NEXT: dist.wait %[[A2]]
// BUCKET-NEXT: dist.wait %[[A3]]
// BUCKET-NEXT: return

// bucket-bytes=0: one reduce-scatter per gradient, right after it is final,
// at most two in flight: the first is waited for before the third starts
// (a collective reads its full gradient until its wait).
// NOBUCKET: dist.pad_flat %{{.*}} : tensor<4x8xf32> -> tensor<32xf32>
// NOBUCKET-NEXT: %[[R1:.*]] = dist.reduce_scatter_start mean %{{.*}} on @dp : tensor<32xf32>
// NOBUCKET: dist.pad_flat %{{.*}} : tensor<8x8xf32> -> tensor<64xf32>
// NOBUCKET-NEXT: dist.reduce_scatter_start mean %{{.*}} on @dp : tensor<64xf32>
// NOBUCKET: dist.pad_flat %{{.*}} : tensor<8x6xf32> -> tensor<48xf32>
// NOBUCKET-NEXT: dist.wait %[[R1]] : tensor<16xf32>
// NOBUCKET-NEXT: dist.reduce_scatter_start mean %{{.*}} on @dp : tensor<48xf32>

// Stage 0: bucketed all-reduces of the gradients as they are.
// S0: %[[D3:.*]] = train.matmul %{{.*}}, %{{.*}} {transpose_a} : {{.*}} -> tensor<4x8xf32>
// S0: %[[D2:.*]] = train.matmul %{{.*}}, %{{.*}} {transpose_a} : {{.*}} -> tensor<8x8xf32>
// S0-NEXT: dist.all_reduce_start mean %[[D3]], %[[D2]] on @dp : tensor<4x8xf32>, tensor<8x8xf32>
// S0-NOT: dist.all_reduce {{.*}}:

// Stage 1: the padded flat gradients move to where the gradients are final;
// at the default bucket size they travel together.
// S1: dist.reduce_scatter_start mean %{{.*}}, %{{.*}}, %{{.*}} on @dp : tensor<32xf32>, tensor<64xf32>, tensor<48xf32>
// S1-COUNT-3: dist.all_gather_param_start
// S1-COUNT-3: dist.wait

// Lowered: gathers into the gathered_parameters category (5), started
// asynchronously and waited by handle.
// LOWER3: %[[FULL:.*]] = llvm.call @ztrt_alloc(%arg0, %c192_i64, %c5_i32)
// LOWER3-NEXT: %[[H:.*]] = llvm.call @ztrt_all_gather_start(%arg0, %c0_i32, %{{.*}}, %[[FULL]], %c24_i64, %c0_i32)
// LOWER3: call @ztrt_alloc(%arg0, %c256_i64, %c5_i32)
// LOWER3: call @ztrt_wait(%arg0, %[[H]])
// LOWER3-NEXT: %[[Y:.*]] = llvm.call @ztrt_alloc
// LOWER3-NEXT: call @ztrt_matmul(%arg0, %c0_i32, %{{.*}}, %[[FULL]], %[[Y]],
// LOWER3-NEXT: call @ztrt_free(%arg0, %[[FULL]])
// LOWER3: call @ztrt_reduce_scatter_start(
// LOWER3-NOT: call @ztrt_all_gather(

// A bucket is packed rank-major (chunk r of each gradient in row r: 2 rows
// of 16 + 32 floats = 192 bytes) and unpacked into the gradient buffers.
// LOWER2: %[[IN:.*]] = llvm.call @ztrt_alloc(%arg0, %c384_i64, %c4_i32)
// LOWER2-NEXT: %[[OUT:.*]] = llvm.call @ztrt_alloc(%arg0, %c192_i64, %c4_i32)
// LOWER2: call @ztrt_copy_2d(%arg0, %{{.*}}, %{{.*}}, %c2_i64, %c64_i64, %c64_i64, %c192_i64)
// LOWER2: call @ztrt_copy_2d(%arg0, %{{.*}}, %{{.*}}, %c2_i64, %c128_i64, %c128_i64, %c192_i64)
// LOWER2-NEXT: %[[H:.*]] = llvm.call @ztrt_reduce_scatter_start(%arg0, %c0_i32, %[[IN]], %[[OUT]], %c48_i64, %c1_i32, %c0_i32)
// LOWER2: call @ztrt_wait(%arg0, %[[H]])
// LOWER2: call @ztrt_grad
// LOWER2: call @ztrt_copy(

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
