// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=2 dp=2 bucket-bytes=300 overlap=true" --plan-memory | FileCheck %s
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=3 dp=2 overlap=true" --plan-memory | FileCheck %s --check-prefix=GATHER
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=2 dp=2 bucket-bytes=300 overlap=true" --plan-memory --lower-to-runtime | FileCheck %s --check-prefix=LOWER
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=2 dp=2 bucket-bytes=300 overlap=true" --plan-memory --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: not ztrain-opt %s --ztrain-training=optimizer=sgd --plan-memory --plan-memory 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: ztrain-opt %s --ztrain-training=optimizer=sgd --ztrain-zero="stage=2 dp=2 bucket-bytes=300 overlap=true" --plan-memory --lower-to-runtime | FileCheck %s --check-prefix=DESC

// The descriptor lists the arenas, in ztrt_arena's index order, so the
// executable can add up every byte it will allocate before it starts.
// DESC: ztrain_descriptor("{{.*}}\0Aarena activations 772\0Aarena gathered_parameters 0\0Aarena other 576\0Aoptimizer sgd

// Every buffer gets an arena and an offset; buffers whose lifetimes do not
// overlap share bytes. The logits (%L, dead after the cross-entropy
// gradient) and w3's gradient (defined later) both sit at offset 0.
// CHECK: module attributes {dist.arenas = {activations = 772 : i64, gathered_parameters = 0 : i64, other = 576 : i64}
// CHECK: train.param_read @w1 : tensor<8x6xf32>
// CHECK-NEXT: train.matmul %arg0, %{{.*}} {dist.slots = [#dist.slot<"activations", 640, 64>], transpose_b}
// CHECK: %[[L:.*]] = train.matmul %{{.*}}, %{{.*}} {dist.slots = [#dist.slot<"activations", 0, 32>], transpose_b}
// CHECK: train.cross_entropy_with_grad %[[L]], %arg1, %{{.*}} {dist.slots = [#dist.slot<"activations", 768, 4>, #dist.slot<"activations", 384, 32>]}
// CHECK: train.matmul %{{.*}}, %{{.*}} {dist.slots = [#dist.slot<"activations", 0, 128>], transpose_a} : {{.*}} -> tensor<4x8xf32>
// A bucket's packed buffers (2 ranks x 48 floats in, 48 out) are staging
// slots of its start.
// CHECK: dist.reduce_scatter_start mean %{{.*}}, %{{.*}} on @dp {dist.staging = [#dist.slot<"other", 0, 384>, #dist.slot<"other", 384, 192>]}
// Results in persistent gradient buffers need no slot.
// CHECK: %[[G:.*]] = dist.wait %{{.*}} : tensor<24xf32>

// Stage 3: gathered parameters (N padded shards) in their own arena.
// GATHER: dist.arenas = {activations = {{[0-9]+}} : i64, gathered_parameters = 512 : i64
// GATHER: dist.wait %{{.*}} {dist.slots = [#dist.slot<"gathered_parameters", {{[0-9]+}}, 192>]} : tensor<8x6xf32>

// Lowered: one persistent arena per category (ztrt_arena allocates it on
// the first step and returns it on later ones), buffers at their offsets;
// no per-tensor allocation or free.
// LOWER: %[[ACT:.*]] = llvm.call @ztrt_arena(%arg0, %c0_i64, %c772_i64, %c3_i32)
// LOWER-NEXT: %[[OTHER:.*]] = llvm.call @ztrt_arena(%arg0, %c2_i64, %c576_i64, %c4_i32)
// LOWER: llvm.getelementptr %[[ACT]][%c640_i64]
// LOWER-NOT: call @ztrt_alloc
// LOWER-NOT: call @ztrt_free
// LOWER: return

// The report prices the plan: activations = the activation arena,
// communication buffers = the gathered and staging arenas.
// REPORT: "memory_plan": "static",
// REPORT: "activations": 772,
// REPORT-NEXT: "buffers": 0,
// REPORT-NEXT: "communication_buffers": 576,

// TWICE: error: the step already has a memory plan (dist.arenas)

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
