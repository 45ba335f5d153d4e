// RUN: ztrain-opt %s | ztrain-opt | FileCheck %s
// RUN: ztrain-opt %s --mlir-print-op-generic | ztrain-opt | FileCheck %s

// CHECK: module attributes {dist.zero = #dist.zero<stage = 3, grid = @dp>}
module attributes {dist.zero = #dist.zero<stage = 3, grid = @dp>} {
  // CHECK: shard.grid @dp(shape = 4)
  shard.grid @dp(shape = 4)
  // CHECK: train.param @w : tensor<10x3xf32> init(zeros) {dist.partition = #dist.partition<@dp, 8>}
  train.param @w : tensor<10x3xf32> init(zeros) {dist.partition = #dist.partition<@dp, 8>}

  // CHECK-LABEL: func.func @collectives
  func.func @collectives(%x: tensor<32xf32>, %s: tensor<8x3xf32>) {
    // CHECK: dist.all_reduce mean %{{.*}} on @dp : tensor<32xf32>
    %0 = dist.all_reduce mean %x on @dp : tensor<32xf32>
    // CHECK: dist.all_reduce sum %{{.*}} on @dp : tensor<32xf32>
    %1 = dist.all_reduce sum %x on @dp : tensor<32xf32>
    // CHECK: dist.reduce_scatter mean %{{.*}} on @dp : tensor<32xf32> -> tensor<8xf32>
    %2 = dist.reduce_scatter mean %x on @dp : tensor<32xf32> -> tensor<8xf32>
    // CHECK: dist.all_gather %{{.*}} on @dp : tensor<8x3xf32> -> tensor<32x3xf32>
    %3 = dist.all_gather %s on @dp : tensor<8x3xf32> -> tensor<32x3xf32>
    // CHECK: dist.broadcast %{{.*}} on @dp root 3 : tensor<32xf32>
    %4 = dist.broadcast %x on @dp root 3 : tensor<32xf32>
    return
  }

  // CHECK-LABEL: func.func @async
  func.func @async(%x: tensor<32xf32>, %y: tensor<8xf32>, %m: tensor<3x2xf32>) {
    // CHECK: %[[T:.*]] = dist.gather_param_start @w on @dp
    %t = dist.gather_param_start @w on @dp
    // CHECK: %[[W:.*]] = dist.wait %[[T]] : tensor<10x3xf32>
    %w = dist.wait %t : tensor<10x3xf32>
    // CHECK: dist.release %[[W]] : tensor<10x3xf32>
    dist.release %w : tensor<10x3xf32>
    // CHECK: %[[R:.*]] = dist.reduce_scatter_start mean %{{.*}}, %{{.*}} on @dp : tensor<32xf32>, tensor<8xf32>
    %r = dist.reduce_scatter_start mean %x, %y on @dp : tensor<32xf32>, tensor<8xf32>
    // CHECK: dist.wait %[[R]] : tensor<8xf32>, tensor<2xf32>
    %a, %b = dist.wait %r : tensor<8xf32>, tensor<2xf32>
    // CHECK: %[[A:.*]] = dist.all_reduce_start sum %{{.*}}, %{{.*}} on @dp : tensor<32xf32>, tensor<3x2xf32>
    %s = dist.all_reduce_start sum %x, %m on @dp : tensor<32xf32>, tensor<3x2xf32>
    // CHECK: dist.wait %[[A]] : tensor<32xf32>, tensor<3x2xf32>
    %c, %d = dist.wait %s : tensor<32xf32>, tensor<3x2xf32>
    return
  }
}

// Pa+cpu: an activation to host memory and back (zero-offload{activations=cpu}).
// CHECK-LABEL: func.func @pa_cpu
// CHECK: %[[O:.*]] = dist.offload_activation_start %arg0 : tensor<4xf32>
// CHECK: dist.wait %[[O]]
// CHECK: %[[R:.*]] = dist.reload_activation_start %arg0 : tensor<4xf32>
// CHECK: dist.wait %[[R]] : tensor<4xf32>
func.func @pa_cpu(%x: tensor<4xf32>) -> tensor<4xf32> {
  %o = dist.offload_activation_start %x : tensor<4xf32>
  dist.wait %o
  %r = dist.reload_activation_start %x : tensor<4xf32>
  %y = dist.wait %r : tensor<4xf32>
  return %y : tensor<4xf32>
}

// An asynchronous host-stepped update (zero-offload, optimizer=cpu): the
// gradient's host copy, the update, and its completion before the
// parameter's next reader.
// CHECK-LABEL: func.func @async_update
// CHECK: %[[T:.*]] = dist.offload_activation_start %arg0 : tensor<4xf32>
// CHECK: %[[G:.*]] = dist.wait %[[T]] : tensor<4xf32>
// CHECK: train.sgd_update @v, %[[G]] {dist.async_update, dist.host_gradient
// CHECK: dist.update_wait @v, %[[G]] : tensor<4xf32>
train.param @v : tensor<4xf32> init(zeros)
func.func @async_update(%g: tensor<4xf32>) {
  %t = dist.offload_activation_start %g : tensor<4xf32>
  %h = dist.wait %t : tensor<4xf32>
  train.sgd_update @v, %h {lr = 0.1 : f64, dist.host_gradient, dist.async_update} : tensor<4xf32>
  dist.update_wait @v, %h : tensor<4xf32>
  return
}

// nvme states in chunks (zero-offload, sub-group-size): each chunk's host
// step is asynchronous; the next chunk's swap-in, and the previous chunk's
// write-back after its wait, may run while it steps (other chunks of the
// same states); its own write-back follows its wait.
// CHECK-LABEL: func.func @async_chunks
// CHECK: train.adam_update @u, %arg0 states(@u.m, @u.v) {{.*}}dist.async_update, dist.chunk = array<i64: 0, 2>
// CHECK-NEXT: dist.swap_in_start @u.m chunk 1 of 2
// CHECK: dist.update_wait @u, %arg0
// CHECK: train.adam_update @u, %arg0 states(@u.m, @u.v) {{.*}}dist.async_update, dist.chunk = array<i64: 1, 2>
// CHECK-NEXT: dist.swap_out_start @u.m chunk 0 of 2
// CHECK-NEXT: dist.swap_out_start @u.v chunk 0 of 2
// CHECK-NEXT: dist.update_wait @u, %arg0
train.param @u : tensor<8192xf32> init(zeros)
train.state @u.m : tensor<8192xf32> of @u {dist.space = #dist.space<nvme>}
train.state @u.v : tensor<8192xf32> of @u {dist.space = #dist.space<nvme>}
func.func @async_chunks(%g: tensor<8192xf32>) {
  %0 = dist.swap_in_start @u.m chunk 0 of 2
  %1 = dist.swap_in_start @u.v chunk 0 of 2
  dist.wait %0
  dist.wait %1
  train.adam_update @u, %g states(@u.m, @u.v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, dist.chunk = array<i64: 0, 2>, dist.async_update} : tensor<8192xf32>
  %2 = dist.swap_in_start @u.m chunk 1 of 2
  %3 = dist.swap_in_start @u.v chunk 1 of 2
  dist.update_wait @u, %g : tensor<8192xf32>
  dist.wait %2
  dist.wait %3
  train.adam_update @u, %g states(@u.m, @u.v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, dist.chunk = array<i64: 1, 2>, dist.async_update} : tensor<8192xf32>
  %4 = dist.swap_out_start @u.m chunk 0 of 2
  %5 = dist.swap_out_start @u.v chunk 0 of 2
  dist.update_wait @u, %g : tensor<8192xf32>
  %6 = dist.swap_out_start @u.m chunk 1 of 2
  %7 = dist.swap_out_start @u.v chunk 1 of 2
  dist.wait %4
  dist.wait %5
  dist.wait %6
  dist.wait %7
  return
}
