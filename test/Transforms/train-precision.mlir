// RUN: ztrain-opt %s --train-precision=param=bf16 | FileCheck %s --check-prefix=BF16
// RUN: ztrain-opt %s --train-precision=param=fp16 | FileCheck %s --check-prefix=F16
// RUN: ztrain-opt %s --train-precision=param=fp32 | FileCheck %s --check-prefix=F32
// RUN: ztrain-opt %s --ztrain-training="precision=bf16 optimizer=adamw" | FileCheck %s --check-prefix=ADAM
// RUN: ztrain-opt %s --ztrain-training="precision=bf16 reduce-dtype=fp32 optimizer=sgd momentum=0.9" | FileCheck %s --check-prefix=SGD32
// RUN: ztrain-opt %s --ztrain-training="precision=bf16 reduce-dtype=fp32" --ztrain-zero="stage=2 dp=2 bucket-bytes=0" | FileCheck %s --check-prefix=ZERO2

// The forward graph in bf16: parameters, every computed float value, one
// cast per f32 input / buffer (before its first use, shared by later ones);
// integer labels untouched; the loss returned as f32.
// BF16: module attributes {train.precision = {param = bf16, reduce = bf16}}
// BF16: train.param @w : tensor<4x3xbf16> init(normal, 2.000000e-01)
// BF16: train.param @b : tensor<3xbf16> init(zeros)
// BF16: train.buffer @scale : tensor<3xf32> init(ones)
// BF16-LABEL: func.func @loss
// BF16-SAME: (%[[X:.*]]: tensor<2x4xf32>, %[[Y:.*]]: tensor<2x3xf32>) -> tensor<f32>
// BF16: %[[W:.*]] = train.param_read @w : tensor<4x3xbf16>
// BF16: %[[B:.*]] = train.param_read @b : tensor<3xbf16>
// BF16: %[[XB:.*]] = train.cast %[[X]] : tensor<2x4xf32> to tensor<2x4xbf16>
// BF16: %[[H:.*]] = train.matmul %[[XB]], %[[W]] : (tensor<2x4xbf16>, tensor<4x3xbf16>) -> tensor<2x3xbf16>
// BF16: %[[HB:.*]] = train.bias_add %[[H]], %[[B]] : tensor<2x3xbf16>, tensor<3xbf16>
// BF16: %[[S:.*]] = train.buffer_read @scale : tensor<3xf32>
// BF16: %[[SB:.*]] = train.cast %[[S]] : tensor<3xf32> to tensor<3xbf16>
// BF16: %[[YB:.*]] = train.cast %[[Y]] : tensor<2x3xf32> to tensor<2x3xbf16>
// BF16-NEXT: train.sub %{{.*}}, %[[YB]] : tensor<2x3xbf16>
// BF16-NEXT: train.mul %{{.*}}, %[[YB]] : tensor<2x3xbf16>
// BF16-NOT: train.cast %[[X]]
// BF16: train.reduce sum %[[XB]] [1] : tensor<2x4xbf16> -> tensor<2xbf16>
// BF16: %[[L:.*]] = train.reduce mean %{{.*}} [0, 1] : tensor<2x3xbf16> -> tensor<bf16>
// BF16: %[[L32:.*]] = train.cast %[[L]] : tensor<bf16> to tensor<f32>
// BF16: return %[[L32]] : tensor<f32>

// F16: module attributes {train.loss_scale = {hysteresis = 2 : i64, init = 6.553600e+04 : f64, min = 1.000000e+00 : f64, window = 1000 : i64}, train.precision = {param = f16, reduce = f16}}
// F16: train.param @w : tensor<4x3xf16>
// F16: train.cast %{{.*}} : tensor<2x4xf32> to tensor<2x4xf16>

// fp32 is the identity.
// F32-NOT: train.precision
// F32-NOT: train.cast
// F32: train.param @w : tensor<4x3xf32>

// The optimizer: an f32 master copy and f32 moments per bf16 parameter;
// gradients reduced in bf16 (the default) go to the update as they are.
// ADAM: train.param @w : tensor<4x3xbf16>
// ADAM-NEXT: train.state @w.master : tensor<4x3xf32> of @w master
// ADAM-NEXT: train.state @w.exp_avg : tensor<4x3xf32> of @w
// ADAM-NEXT: train.state @w.exp_avg_sq : tensor<4x3xf32> of @w
// ADAM: train.adam_update @w, %{{.*}} master(@w.master) states(@w.exp_avg, @w.exp_avg_sq) {{.*}} : tensor<4x3xbf16>
// ADAM: train.adam_update @b, %{{.*}} master(@b.master) states(@b.exp_avg, @b.exp_avg_sq) {{.*}} : tensor<3xbf16>

// reduce-dtype=fp32: each gradient is cast to f32 right where it is final
// (the matmul that computes it), not at the update.
// SGD32: train.state @w.master : tensor<4x3xf32> of @w master
// SGD32-NEXT: train.state @w.momentum_buffer : tensor<4x3xf32> of @w
// SGD32: %[[DW:.*]] = train.matmul %{{.*}}, %{{.*}} {transpose_a} : (tensor<2x4xbf16>, tensor<2x3xbf16>) -> tensor<4x3xbf16>
// SGD32-NEXT: %[[DW32:.*]] = train.cast %[[DW]] : tensor<4x3xbf16> to tensor<4x3xf32>
// SGD32: train.sgd_update @w, %[[DW32]] master(@w.master) momentum_buffer(@w.momentum_buffer) {{.*}} : tensor<4x3xf32>

// ZeRO stage 2 reduce-scatters the f32 gradient right after its cast and
// partitions the masters and moments.
// ZERO2: train.state @w.master : tensor<4x3xf32> of @w master {dist.partition = #dist.partition<@dp, 6>}
// ZERO2: %[[DW:.*]] = train.cast %{{.*}} : tensor<4x3xbf16> to tensor<4x3xf32>
// ZERO2-NEXT: %[[FLAT:.*]] = dist.pad_flat %[[DW]] : tensor<4x3xf32> -> tensor<12xf32>
// ZERO2-NEXT: dist.reduce_scatter mean %[[FLAT]] on @dp : tensor<12xf32> -> tensor<6xf32>
// ZERO2: train.adam_update @w, %{{.*}} master(@w.master) {{.*}} sharded} : tensor<6xf32>
// ZERO2-NEXT: dist.all_gather_param @w on @dp

train.param @w : tensor<4x3xf32> init(normal, 0.2)
train.param @b : tensor<3xf32> init(zeros)
train.buffer @scale : tensor<3xf32> init(ones)
func.func @loss(%x: tensor<2x4xf32>, %y: tensor<2x3xf32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4x3xf32>
  %b = train.param_read @b : tensor<3xf32>
  %h = train.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %hb = train.bias_add %h, %b : tensor<2x3xf32>, tensor<3xf32>
  %s = train.buffer_read @scale : tensor<3xf32>
  %hs = train.bias_add %hb, %s : tensor<2x3xf32>, tensor<3xf32>
  %d = train.sub %hs, %y : tensor<2x3xf32>
  %e = train.mul %d, %y : tensor<2x3xf32>
  %x2 = train.reduce sum %x [1] : tensor<2x4xf32> -> tensor<2xf32>
  %x3 = train.broadcast %x2 [1] : tensor<2xf32> -> tensor<2x3xf32>
  %f = train.add %e, %x3 : tensor<2x3xf32>
  %l = train.reduce mean %f [0, 1] : tensor<2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}
