// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 max-tile-bytes=65536 overlap=false" | FileCheck %s
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 max-tile-bytes=65536 overlap=true" | FileCheck %s --check-prefix=SCHED
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 max-tile-bytes=65536 overlap=false" --lower-to-runtime | FileCheck %s --check-prefix=LOWER
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 max-tile-bytes=1000 overlap=false" 2>&1 | FileCheck %s --check-prefix=WARN
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=2 dp=2 max-tile-bytes=65536 overlap=false" | FileCheck %s --check-prefix=STAGE2

// fc2 gathers 256 x 256 floats (256 KiB) > 64 KiB: 4 tiles of 64 rows, each
// chunk j of both ranks' shards. The forward matmul is done per tile and the
// output features put back in order; fc1 (16 KiB) and fc3 (8 KiB) stay whole.
// CHECK: dist.gather_param @fc1.weight on @dp : tensor<256x16xf32>
// CHECK: %[[T0:.*]] = dist.gather_param @fc2.weight tile 0 of 4 on @dp : tensor<64x256xf32>
// CHECK-NEXT: %[[Y0:.*]] = train.matmul %[[X:.*]], %[[T0]] {transpose_b} : (tensor<4x256xf32>, tensor<64x256xf32>) -> tensor<4x64xf32>
// CHECK-NEXT: dist.gather_param @fc2.weight tile 1 of 4
// CHECK-NEXT: %[[Y1:.*]] = train.matmul %[[X]]
// CHECK: dist.gather_param @fc2.weight tile 3 of 4
// CHECK-NEXT: %[[Y3:.*]] = train.matmul %[[X]]
// CHECK-NEXT: dist.assemble_tiles %[[Y0]], %[[Y1]], %{{.*}}, %[[Y3]] on @dp : {{.*}} -> tensor<4x256xf32>
// Backward: the input gradient sums the tiles' partial products; the weight
// gradient is computed and reduce-scattered once, untiled.
// CHECK: %[[D0:.*]] = dist.extract_tile %[[DY:.*]] tile 0 of 4 on @dp : tensor<4x256xf32> -> tensor<4x64xf32>
// CHECK-NEXT: %[[B0:.*]] = dist.gather_param @fc2.weight tile 0 of 4
// CHECK-NEXT: %[[P0:.*]] = train.matmul %[[D0]], %[[B0]] : (tensor<4x64xf32>, tensor<64x256xf32>) -> tensor<4x256xf32>
// CHECK-NEXT: dist.extract_tile %[[DY]] tile 1 of 4
// CHECK-NEXT: dist.gather_param @fc2.weight tile 1 of 4
// CHECK-NEXT: %[[P1:.*]] = train.matmul
// CHECK-NEXT: train.add %[[P0]], %[[P1]] : tensor<4x256xf32>
// CHECK: train.matmul %[[DY]], %{{.*}} {transpose_a} : {{.*}} -> tensor<256x256xf32>
// CHECK-NEXT: dist.pad_flat
// CHECK-NEXT: dist.reduce_scatter mean %{{.*}} on @dp : tensor<65536xf32> -> tensor<32768xf32>

// With overlap-schedule each tile is prefetched and released on its own.
// SCHED: %[[S1:.*]] = dist.gather_param_start @fc2.weight tile 1 of 4 on @dp
// SCHED-NEXT: %[[W0:.*]] = dist.wait %{{.*}} : tensor<64x256xf32>
// SCHED-NEXT: train.matmul %{{.*}}, %[[W0]] {transpose_b}
// SCHED-NEXT: dist.release %[[W0]] : tensor<64x256xf32>
// SCHED-NEXT: dist.gather_param_start @fc2.weight tile 2 of 4 on @dp
// SCHED-NEXT: %[[W1:.*]] = dist.wait %[[S1]] : tensor<64x256xf32>

// Lowered: tile j of T gathers chunk j of each shard (32768 floats / 4 =
// 8192 per rank, at byte offset j x 32768), into 64 KiB; the tiles'
// features move back with one strided copy per rank (2 ranks x 32
// features of 4 rows).
// LOWER: %[[OFF:.*]] = llvm.getelementptr %{{.*}}[%c32768_i64]
// LOWER-NEXT: %[[BUF:.*]] = llvm.call @ztrt_alloc(%arg0, %c65536_i64, %c5_i32)
// LOWER-NEXT: call @ztrt_all_gather(%arg0, %c0_i32, %[[OFF]], %[[BUF]], %c8192_i64, %c0_i32)
// LOWER: call @ztrt_copy_2d(%arg0, %{{.*}}, %{{.*}}, %c4_i64, %c128_i64, %c256_i64, %c1024_i64)

// A bound no tile count can meet (fc2 would need 263 tiles but has 256 rows
// for 2 ranks) warns and keeps the gather whole.
// WARN: warning: cannot tile @fc2.weight (262144 bytes) into tiles of at most 1000 bytes: its 256 rows do not split into grid size x tiles; it is gathered whole

// Below stage 3 nothing is gathered, so nothing is tiled.
// STAGE2-NOT: tile

train.param @fc1.weight : tensor<256x16xf32> init(normal, 0.1)
train.param @fc2.weight : tensor<256x256xf32> init(normal, 0.05)
train.param @fc3.weight : tensor<8x256xf32> init(normal, 0.05)
func.func @loss(%x: tensor<4x16xf32> {train.name = "x"}, %y: tensor<4xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w1 = train.param_read @fc1.weight : tensor<256x16xf32>
  %h1 = train.matmul %x, %w1 {transpose_b} : (tensor<4x16xf32>, tensor<256x16xf32>) -> tensor<4x256xf32>
  %r1 = train.relu %h1 : tensor<4x256xf32>
  %w2 = train.param_read @fc2.weight : tensor<256x256xf32>
  %h2 = train.matmul %r1, %w2 {transpose_b} : (tensor<4x256xf32>, tensor<256x256xf32>) -> tensor<4x256xf32>
  %r2 = train.relu %h2 : tensor<4x256xf32>
  %w3 = train.param_read @fc3.weight : tensor<8x256xf32>
  %l = train.matmul %r2, %w3 {transpose_b} : (tensor<4x256xf32>, tensor<8x256xf32>) -> tensor<4x8xf32>
  %loss = train.cross_entropy %l, %y : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
