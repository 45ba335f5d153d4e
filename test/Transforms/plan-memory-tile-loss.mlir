// RUN: ztrain-opt %s --ztrain-training="optimizer=sgd loss-tile-bytes=800 eval=false" --ztrain-zero="stage=0" --plan-memory | FileCheck %s
// RUN: ztrain-opt %s --ztrain-training="optimizer=sgd loss-tile-bytes=800 eval=false" --ztrain-zero="stage=0" --plan-memory --lower-to-runtime | FileCheck %s --check-prefix=LOWER
// RUN: ztrain-opt %s --ztrain-training="optimizer=sgd loss-tile-bytes=800 eval=false" --ztrain-zero="stage=2 dp=2" --plan-memory | FileCheck %s --check-prefix=TEMP
// RUN: ztrain-opt %s --ztrain-training="optimizer=sgd loss-tile-bytes=800 eval=false precision=bf16" --plan-memory | FileCheck %s --check-prefix=BF16

// The head's dW summed over the loss's 3 tiles (train-tile-loss) is one
// buffer: each train.matmul_acc adds to its accumulator in place (its
// result aliases it: no slot of its own). At stage 0 the sum is the
// parameter's gradient, so the first tile's product is written straight into
// the persistent gradient buffer (no slot either), and the lowering passes
// that buffer as both c_in and c.
// CHECK: %[[DW0:.*]] = train.matmul %{{[^ ]*}}, %{{[^ ]*}} {transpose_a} : (tensor<4x40xf32>, tensor<4x32xf32>) -> tensor<40x32xf32>
// CHECK: %[[DW1:.*]] = train.matmul_acc %[[DW0]], %{{[^ ]*}}, %{{[^ ]*}} {transpose_a} :
// CHECK: %[[DW2:.*]] = train.matmul_acc %[[DW1]], %{{[^ ]*}}, %{{[^ ]*}} {transpose_a} :
// CHECK: train.sgd_update @head.weight, %[[DW2]]

// LOWER: %[[G:.*]] = llvm.call @ztrt_grad(%arg0, %c1_i64)
// LOWER: llvm.call @ztrt_matmul_acc(%arg0, %c0_i32, %{{[^,]*}}, %{{[^,]*}}, %[[G]], %[[G]], %c40_i64, %c32_i64, %c4_i64, %c1_i32, %c0_i32)
// LOWER: llvm.call @ztrt_matmul_acc(%arg0, %c0_i32, %{{[^,]*}}, %{{[^,]*}}, %[[G]], %[[G]], %c40_i64, %c32_i64, %c4_i64, %c1_i32, %c0_i32)

// Stage 2: the sum is a temporary the reduce-scatter reads: one activation
// slot of 40 x 32 floats, for the first product; the accumulations have none.
// TEMP: train.matmul %{{[^ ]*}}, %{{[^ ]*}} {dist.slots = [#dist.slot<"activations", {{[0-9]+}}, 5120>], transpose_a} : (tensor<4x40xf32>, tensor<4x32xf32>) -> tensor<40x32xf32>
// TEMP: train.matmul_acc %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} {transpose_a} :
// TEMP: train.matmul_acc %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} {transpose_a} :
// TEMP: dist.reduce_scatter mean

// bf16: the f32 sum starts from a zero fill, which has the one slot.
// BF16: train.fill {dist.slots = [#dist.slot<"activations", {{[0-9]+}}, 5120>], value = 0.000000e+00 : f64} : tensor<40x32xf32>
// BF16: train.matmul_acc %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} {transpose_a} : (tensor<40x32xf32>, tensor<6x40xbf16>, tensor<6x32xbf16>) -> tensor<40x32xf32>
// BF16: train.matmul_acc %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} {transpose_a} :
// BF16: train.cast %{{.*}} : tensor<40x32xf32> to tensor<40x32xbf16>

train.param @fc.weight : tensor<32x16xf32> init(normal, 0.2)
train.param @head.weight : tensor<40x32xf32> init(normal, 0.05)
func.func @loss(%x: tensor<12x16xf32> {train.name = "x"}, %y: tensor<12xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w1 = train.param_read @fc.weight : tensor<32x16xf32>
  %h = train.matmul %x, %w1 {transpose_b} : (tensor<12x16xf32>, tensor<32x16xf32>) -> tensor<12x32xf32>
  %r = train.gelu %h : tensor<12x32xf32>
  %w2 = train.param_read @head.weight : tensor<40x32xf32>
  %l = train.matmul %r, %w2 {transpose_b} : (tensor<12x32xf32>, tensor<40x32xf32>) -> tensor<12x40xf32>
  %loss = train.cross_entropy %l, %y : (tensor<12x40xf32>, tensor<12xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
