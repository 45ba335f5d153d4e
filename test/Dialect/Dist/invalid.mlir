// RUN: ztrain-opt %s -split-input-file -verify-diagnostics

shard.grid @dp(shape = 4)
func.func @f(%x: tensor<1024xf32>) {
  // expected-error @+1 {{'dist.all_gather' op result dim 0 (1024) must be operand dim 0 (1024) x grid size (4)}}
  %0 = dist.all_gather %x on @dp : tensor<1024xf32> -> tensor<1024xf32>
  return
}

// -----

shard.grid @dp(shape = 8)
func.func @f(%x: tensor<1024xf32>) {
  // expected-error @+1 {{'dist.reduce_scatter' op operand dim 0 (1024) must be result dim 0 (256) x grid size (8)}}
  %0 = dist.reduce_scatter sum %x on @dp : tensor<1024xf32> -> tensor<256xf32>
  return
}

// -----

shard.grid @dp(shape = 2)
func.func @f(%x: tensor<4x3xf32>) {
  // expected-error @+1 {{dims after dim 0 must be equal}}
  %0 = dist.all_gather %x on @dp : tensor<4x3xf32> -> tensor<8x4xf32>
  return
}

// -----

shard.grid @dp(shape = 2)
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{element type changes from 'f32' to 'i32'}}
  %0 = dist.all_gather %x on @dp : tensor<4xf32> -> tensor<8xi32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{references undeclared grid @dp (declare it with shard.grid)}}
  %0 = dist.all_reduce sum %x on @dp : tensor<4xf32>
  return
}

// -----

shard.grid @g2(shape = 2x2)
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{grid @g2 must be one-dimensional with a static size, e.g. shard.grid @dp(shape = 4)}}
  %0 = dist.all_reduce sum %x on @g2 : tensor<4xf32>
  return
}

// -----

shard.grid @dp(shape = 4)
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{root 4 is not a rank of grid @dp (size 4)}}
  %0 = dist.broadcast %x on @dp root 4 : tensor<4xf32>
  return
}

// -----

shard.grid @dp(shape = 4)
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{enum values for attribute 'reduction' [sum, mean]}}
  %0 = dist.all_reduce max %x on @dp : tensor<4xf32>
  return
}

// -----

shard.grid @dp(shape = 4)
func.func @f(%x: tensor<32xf32>) {
  // expected-error @+1 {{token must have exactly one use, a dist.wait (every started collective is waited once)}}
  %t = dist.all_reduce_start sum %x on @dp : tensor<32xf32>
  return
}

// -----

shard.grid @dp(shape = 4)
func.func @f(%x: tensor<32xf32>) {
  // expected-error @+1 {{token must have exactly one use}}
  %t = dist.all_reduce_start sum %x on @dp : tensor<32xf32>
  %a = dist.wait %t : tensor<32xf32>
  %b = dist.wait %t : tensor<32xf32>
  return
}

// -----

shard.grid @dp(shape = 4)
func.func @f(%x: tensor<30xf32>) {
  // expected-error @+1 {{operand of 30 elements does not split into 4 equal chunks (grid @dp)}}
  %t = dist.reduce_scatter_start sum %x on @dp : tensor<30xf32>
  %a = dist.wait %t : tensor<7xf32>
  return
}

// -----

shard.grid @dp(shape = 4)
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{operands must be flat (one-dimensional), got 'tensor<4x8xf32>'}}
  %t = dist.reduce_scatter_start sum %x on @dp : tensor<4x8xf32>
  %a = dist.wait %t : tensor<8xf32>
  return
}

// -----

shard.grid @dp(shape = 4)
func.func @f(%x: tensor<32xf32>) {
  // expected-note @+1 {{started here}}
  %t = dist.reduce_scatter_start sum %x on @dp : tensor<32xf32>
  // expected-error @+1 {{'dist.wait' op yields ('tensor<32xf32>') but its dist.reduce_scatter_start produces ('tensor<8xf32>')}}
  %a = dist.wait %t : tensor<32xf32>
  return
}

// -----

shard.grid @dp(shape = 4)
func.func @f(%x: tensor<32xf32>, %y: tensor<8xi32>) {
  // expected-error @+1 {{mixes element types 'f32' and 'i32' in one bucket}}
  %t = dist.all_reduce_start sum %x, %y on @dp : tensor<32xf32>, tensor<8xi32>
  %a, %b = dist.wait %t : tensor<32xf32>, tensor<8xi32>
  return
}

// -----

shard.grid @dp(shape = 4)
train.param @w : tensor<10x3xf32> init(zeros)
func.func @f() {
  // expected-error @+1 {{parameter @w is not partitioned over @dp}}
  %t = dist.gather_param_start @w on @dp
  %w = dist.wait %t : tensor<10x3xf32>
  return
}

// -----

func.func @f(%t: !dist.token) {
  // expected-error @+1 {{token must come from a dist.*_start op}}
  %w = dist.wait %t : tensor<10x3xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{releases a value that is not a gathered parameter}}
  dist.release %x : tensor<4xf32>
  return
}

// -----

shard.grid @dp(shape = 4)
train.param @w : tensor<10x3xf32> init(zeros) {dist.partition = #dist.partition<@dp, 8>}
func.func @f(%x: tensor<2x10xf32>) -> tensor<2x3xf32> {
  %t = dist.gather_param_start @w on @dp
  %w = dist.wait %t : tensor<10x3xf32>
  %r = train.reshape %w : tensor<10x3xf32> -> tensor<30xf32>
  // expected-error @+1 {{frees a gathered parameter that is used afterwards}}
  dist.release %w : tensor<10x3xf32>
  // expected-note @+1 {{used here}}
  %v = train.reshape %r : tensor<30xf32> -> tensor<10x3xf32>
  %y = train.matmul %x, %v : (tensor<2x10xf32>, tensor<10x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

shard.grid @dp(shape = 2)
train.param @w : tensor<12x4xf32> init(zeros) {dist.partition = #dist.partition<@dp, 24>}
func.func @f() {
  // expected-error @+1 {{parameter w of type 'tensor<12x4xf32>' has no 4 tiles over 2 ranks: dim 0 must be divisible by 8}}
  %w = dist.gather_param @w tile 0 of 4 on @dp : tensor<3x4xf32>
  return
}

// -----

shard.grid @dp(shape = 2)
train.param @w : tensor<12x4xf32> init(zeros) {dist.partition = #dist.partition<@dp, 24>}
func.func @f() {
  // expected-error @+1 {{tile 3 of 3 is not a tile (0 <= tile < tiles)}}
  %w = dist.gather_param @w tile 3 of 3 on @dp : tensor<4x4xf32>
  return
}

// -----

shard.grid @dp(shape = 2)
train.param @w : tensor<12x4xf32> init(zeros) {dist.partition = #dist.partition<@dp, 24>}
func.func @f() {
  // expected-error @+1 {{result type 'tensor<6x4xf32>' does not match parameter @w tile, expected 'tensor<4x4xf32>'}}
  %w = dist.gather_param @w tile 1 of 3 on @dp : tensor<6x4xf32>
  return
}

// -----

shard.grid @dp(shape = 2)
func.func @f(%a: tensor<8x5xf32>, %b: tensor<8x5xf32>) {
  // expected-error @+1 {{the whole's last dimension must be 2 x the tile's and divisible by 4 (grid size x tiles)}}
  %y = dist.assemble_tiles %a, %b on @dp : tensor<8x5xf32>, tensor<8x5xf32> -> tensor<8x10xf32>
  return
}

// -----

shard.grid @dp(shape = 2)
func.func @f(%a: tensor<8x16xf32>) {
  // expected-error @+1 {{tile 2 of 2 is not a tile (0 <= tile < tiles)}}
  %y = dist.extract_tile %a tile 2 of 2 on @dp : tensor<8x16xf32> -> tensor<8x8xf32>
  return
}

// -----

// expected-error @+1 {{ZeRO stage must be 0, 1, 2 or 3, got 9}}
module attributes {dist.zero = #dist.zero<stage = 9, grid = @g>} {}

// -----

// A mesh relates the grid states are partitioned over (the #dist.zero's)
// to the grid that replicates them.
// expected-error @+1 {{'dist.mesh' needs a #dist.zero over its shard grid @s}}
module attributes {dist.mesh = #dist.mesh<shard = @s, replicate = @r, ranks_per_node = 2>} {
  shard.grid @s(shape = 2)
  shard.grid @r(shape = 2)
}

// -----

// expected-error @+1 {{references undeclared grid @r}}
module attributes {dist.zero = #dist.zero<stage = 2, grid = @s>, dist.mesh = #dist.mesh<shard = @s, replicate = @r, ranks_per_node = 2>} {
  shard.grid @s(shape = 2)
}

// -----

// Every rank must see the same split of its groups across nodes.
// expected-error @+1 {{mesh of 4 x 2 ranks with 3 ranks per node: the node size must divide the 8 ranks}}
module attributes {dist.zero = #dist.zero<stage = 2, grid = @s>, dist.mesh = #dist.mesh<shard = @s, replicate = @r, ranks_per_node = 3>} {
  shard.grid @s(shape = 4)
  shard.grid @r(shape = 2)
}

// -----

// expected-error @+1 {{ranks_per_node must be >= 1, got 0}}
module attributes {dist.mesh = #dist.mesh<shard = @s, replicate = @r, ranks_per_node = 0>} {}

// -----

// expected-error @+1 {{a mesh's shard and replicate grids must differ}}
module attributes {dist.mesh = #dist.mesh<shard = @s, replicate = @s, ranks_per_node = 1>} {}

// -----

train.param @w : tensor<4xf32> init(zeros)
train.state @w.exp_avg : tensor<4xf32> of @w
func.func @f() {
  // expected-error @+1 {{'dist.swap_in_start' op swaps @w.exp_avg, which does not live on nvme (its dist.space is device)}}
  %t = dist.swap_in_start @w.exp_avg
  dist.wait %t
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
train.state @w.exp_avg : tensor<4xf32> of @w {dist.space = #dist.space<host>}
func.func @f() {
  // expected-error @+1 {{'dist.swap_out_start' op swaps @w.exp_avg, which does not live on nvme (its dist.space is host)}}
  %t = dist.swap_out_start @w.exp_avg
  dist.wait %t
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
func.func @f() {
  // expected-error @+1 {{'dist.swap_in_start' op names @g, which is not a train.state or train.param}}
  %u = dist.swap_in_start @g
  dist.wait %u
  return
}
func.func @g() {
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
func.func @f() {
  // expected-error @+1 {{'dist.swap_in_start' op swaps @w, which does not live on nvme (its dist.space is device)}}
  %t = dist.swap_in_start @w
  dist.wait %t
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
train.state @w.exp_avg : tensor<4xf32> of @w {dist.space = #dist.space<nvme>}
func.func @f() {
  // expected-error @+1 {{'dist.swap_in_start' op chunk 3 of 3 is out of range (0 <= chunk < chunks, chunks >= 2)}}
  %t = dist.swap_in_start @w.exp_avg chunk 3 of 3
  dist.wait %t
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
train.state @w.exp_avg : tensor<4xf32> of @w {dist.space = #dist.space<nvme>}
func.func @f() {
  // expected-error @+1 {{'dist.swap_out_start' op needs both `chunk` and `chunks` or neither}}
  %t = dist.swap_out_start @w.exp_avg {chunk = 1 : i64}
  dist.wait %t
  return
}

// -----

train.param @w : tensor<4096xf32> init(zeros)
train.state @w.exp_avg : tensor<4096xf32> of @w {dist.space = #dist.space<nvme>}
func.func @f() {
  // expected-error @+1 {{'dist.swap_in_start' op chunk 3 of 4 of @w.exp_avg holds nothing: its 4096 elements per rank fill 2 chunk(s) of 2048}}
  %t = dist.swap_in_start @w.exp_avg chunk 3 of 4
  dist.wait %t
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
train.state @w.exp_avg : tensor<4xf32> of @w {dist.space = #dist.space<nvme>}
func.func @f() {
  %t = dist.swap_in_start @w.exp_avg
  // expected-error @+1 {{'dist.wait' op completes a swap transfer, which yields nothing}}
  %v = dist.wait %t : tensor<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'func.func' op 'dist.space' is only placed on train.state and train.param}}
  func.func @g() attributes {dist.space = #dist.space<nvme>} {
    return
  }
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
// expected-error @+1 {{'train.state' op 'dist.space' must be a #dist.space (device, host or nvme), got "nvme"}}
train.state @w.exp_avg : tensor<4xf32> of @w {dist.space = "nvme"}

// -----

train.param @w : tensor<4xf32> init(zeros)
// expected-error @+2 {{expected ::ztrain::dist::MemorySpace to be one of: device, host, nvme}}
// expected-error @+1 {{failed to parse Dist_MemorySpaceAttr parameter 'value'}}
train.state @w.exp_avg : tensor<4xf32> of @w {dist.space = #dist.space<ssd>}

// -----

train.param @w : tensor<4xf32> init(zeros)
// expected-error @+1 {{'train.state' op 'dist.transient_gradient' is a unit attribute of train.param}}
train.state @w.exp_avg : tensor<4xf32> of @w {dist.transient_gradient}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dist.reload_activation_start' op reloads a value no earlier dist.offload_activation_start copied to host memory}}
  %r = dist.reload_activation_start %x : tensor<4xf32>
  %y = dist.wait %r : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %o = dist.offload_activation_start %x : tensor<4xf32>
  // expected-error @+1 {{'dist.reload_activation_start' op reloads an activation whose copy to host memory is not waited for before it}}
  %r = dist.reload_activation_start %x : tensor<4xf32>
  dist.wait %o
  %y = dist.wait %r : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4xf32>) {
  %o = dist.offload_activation_start %x : tensor<4xf32>
  // expected-error @+1 {{'dist.wait' op completes a copy to host memory: it yields nothing (an activation's), or the host copy of a gradient, of type 'tensor<4xf32>'}}
  %y = dist.wait %o : tensor<2xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %o = dist.offload_activation_start %x : tensor<4xf32>
  // expected-error @+1 {{'dist.wait' op yields a gradient's host copy, which only an optimizer update marked 'dist.host_gradient' (and its dist.update_wait) may read}}
  %y = dist.wait %o : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

train.param @w : tensor<4xf32> init(zeros)
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'train.relu' op 'dist.host_gradient' is a unit attribute of optimizer updates}}
  %y = train.relu %x {dist.host_gradient} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<2xf32> {
  %o = dist.offload_activation_start %x : tensor<4xf32>
  dist.wait %o
  %r = dist.reload_activation_start %x : tensor<4xf32>
  // expected-error @+1 {{'dist.wait' op must yield the reloaded activation, of type 'tensor<4xf32>'}}
  %y = dist.wait %r : tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

train.param @w : tensor<4xf32> init(zeros)
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'dist.update_wait' op follows no update of @w that reads this gradient}}
  dist.update_wait @w, %g : tensor<4xf32>
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
train.state @m : tensor<4xf32> of @w
train.state @v : tensor<4xf32> of @w
func.func @f(%g: tensor<4xf32>) {
  train.adam_update @w, %g states(@m, @v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, dist.host_gradient} : tensor<4xf32>
  // expected-error @+1 {{'dist.update_wait' op completes the update of @w, which is not asynchronous ('dist.async_update')}}
  dist.update_wait @w, %g : tensor<4xf32>
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
train.state @m : tensor<4xf32> of @w
train.state @v : tensor<4xf32> of @w
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'train.adam_update' op is asynchronous ('dist.async_update') but no dist.update_wait of @w and its gradient follows it}}
  train.adam_update @w, %g states(@m, @v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, dist.host_gradient, dist.async_update} : tensor<4xf32>
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
train.state @m : tensor<4xf32> of @w
train.state @v : tensor<4xf32> of @w
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'train.adam_update' op 'dist.async_update' is a unit attribute of optimizer updates that run on the host: that read a spilled gradient ('dist.host_gradient') or whose states are in host memory or on nvme}}
  train.adam_update @w, %g states(@m, @v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, dist.async_update} : tensor<4xf32>
  dist.update_wait @w, %g : tensor<4xf32>
  return
}

// -----

// States placed on the device: the update runs there, it cannot be a host
// step.
train.param @w : tensor<4xf32> init(zeros)
train.state @m : tensor<4xf32> of @w {dist.space = #dist.space<device>}
train.state @v : tensor<4xf32> of @w {dist.space = #dist.space<device>}
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'train.adam_update' op 'dist.async_update' is a unit attribute of optimizer updates that run on the host}}
  train.adam_update @w, %g states(@m, @v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, dist.async_update} : tensor<4xf32>
  dist.update_wait @w, %g : tensor<4xf32>
  return
}

// -----

// A parameter on nvme (stage 3): the host step writes its swap buffer
// until its wait; its write-back must follow it.
train.param @w : tensor<4xf32> init(zeros) {dist.space = #dist.space<nvme>}
train.state @m : tensor<4xf32> of @w {dist.space = #dist.space<host>}
func.func @f(%g: tensor<4xf32>) {
  %0 = dist.swap_in_start @w
  dist.wait %0
  // expected-error @+1 {{'train.sgd_update' op is asynchronous ('dist.async_update') but 'dist.swap_out_start' of its parameter @w comes before its dist.update_wait}}
  train.sgd_update @w, %g momentum_buffer(@m) {lr = 1.0e-1 : f64, momentum = 0.9 : f64, dist.async_update} : tensor<4xf32>
  %1 = dist.swap_out_start @w
  dist.update_wait @w, %g : tensor<4xf32>
  dist.wait %1
  return
}

// -----

// nvme states: the host step writes them until its wait; their write-back
// must follow it.
train.param @w : tensor<4xf32> init(zeros)
train.state @m : tensor<4xf32> of @w {dist.space = #dist.space<nvme>}
train.state @v : tensor<4xf32> of @w {dist.space = #dist.space<nvme>}
func.func @f(%g: tensor<4xf32>) {
  %0 = dist.swap_in_start @m
  %1 = dist.swap_in_start @v
  dist.wait %0
  dist.wait %1
  // expected-error @+1 {{'train.adam_update' op is asynchronous ('dist.async_update') but 'dist.swap_out_start' of its state @v comes before its dist.update_wait}}
  train.adam_update @w, %g states(@m, @v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, dist.async_update} : tensor<4xf32>
  %2 = dist.swap_out_start @v
  dist.update_wait @w, %g : tensor<4xf32>
  %3 = dist.swap_out_start @m
  dist.wait %2
  dist.wait %3
  return
}

// -----

train.param @w : tensor<4xf32> init(zeros)
train.state @m : tensor<4xf32> of @w
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'dist.update_wait' op references @m, which is not a train.param}}
  dist.update_wait @m, %g : tensor<4xf32>
  return
}

// -----

// The host step owns the parameter until its wait: a read of it between
// would race the upload.
train.param @w : tensor<4xf32> init(zeros)
train.state @m : tensor<4xf32> of @w {dist.space = #dist.space<host>}
train.state @v : tensor<4xf32> of @w {dist.space = #dist.space<host>}
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'train.adam_update' op is asynchronous ('dist.async_update') but 'train.param_read' of its parameter @w comes before its dist.update_wait}}
  train.adam_update @w, %g states(@m, @v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, dist.async_update} : tensor<4xf32>
  %r = train.param_read @w : tensor<4xf32>
  dist.update_wait @w, %g : tensor<4xf32>
  return
}

// -----

// ...and its states' swap buffers: a swap-in into one between would
// overwrite what the host step writes.
train.param @w : tensor<4xf32> init(zeros)
train.state @m : tensor<4xf32> of @w {dist.space = #dist.space<nvme>}
train.state @v : tensor<4xf32> of @w {dist.space = #dist.space<nvme>}
func.func @f(%g: tensor<4xf32>) {
  %0 = dist.swap_in_start @m
  %1 = dist.swap_in_start @v
  dist.wait %0
  dist.wait %1
  // expected-error @+1 {{'train.adam_update' op is asynchronous ('dist.async_update') but 'dist.swap_in_start' of its state @m comes before its dist.update_wait}}
  train.adam_update @w, %g states(@m, @v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, dist.async_update} : tensor<4xf32>
  %2 = dist.swap_in_start @m
  dist.update_wait @w, %g : tensor<4xf32>
  %3 = dist.swap_out_start @m
  %4 = dist.swap_out_start @v
  dist.wait %2
  dist.wait %3
  dist.wait %4
  return
}

// -----

// Two chunks of one parameter in flight: the runtime keeps one host step
// per parameter; each chunk's wait comes before the next chunk's update.
train.param @u : tensor<8192xf32> init(zeros)
train.state @u.m : tensor<8192xf32> of @u {dist.space = #dist.space<nvme>}
train.state @u.v : tensor<8192xf32> of @u {dist.space = #dist.space<nvme>}
func.func @f(%g: tensor<8192xf32>) {
  %0 = dist.swap_in_start @u.m chunk 0 of 2
  %1 = dist.swap_in_start @u.v chunk 0 of 2
  %2 = dist.swap_in_start @u.m chunk 1 of 2
  %3 = dist.swap_in_start @u.v chunk 1 of 2
  dist.wait %0
  dist.wait %1
  dist.wait %2
  dist.wait %3
  // expected-error @+1 {{'train.adam_update' op is asynchronous ('dist.async_update') but 'train.adam_update' of its parameter @u comes before its dist.update_wait}}
  train.adam_update @u, %g states(@u.m, @u.v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, dist.chunk = array<i64: 0, 2>, dist.async_update} : tensor<8192xf32>
  train.adam_update @u, %g states(@u.m, @u.v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, dist.chunk = array<i64: 1, 2>, dist.async_update} : tensor<8192xf32>
  dist.update_wait @u, %g : tensor<8192xf32>
  dist.update_wait @u, %g : tensor<8192xf32>
  %4 = dist.swap_out_start @u.m chunk 0 of 2
  %5 = dist.swap_out_start @u.v chunk 0 of 2
  %6 = dist.swap_out_start @u.m chunk 1 of 2
  %7 = dist.swap_out_start @u.v chunk 1 of 2
  dist.wait %4
  dist.wait %5
  dist.wait %6
  dist.wait %7
  return
}

// -----

// A shard size that disagrees with the grid (ztrain-opt passed it, the
// executable could not be built): 30 elements over 4 ranks are shards of 8.
shard.grid @dp(shape = 4)
// expected-error @+1 {{'train.param' op is partitioned in shards of 15 elements over @dp, but its 30 elements over 4 ranks make shards of 8 (ceil(elements / ranks))}}
train.param @w : tensor<10x3xf32> init(zeros) {dist.partition = #dist.partition<@dp, 15>}

// -----

shard.grid @dp(shape = 2)
// expected-error @+1 {{'train.buffer' op 'dist.partition' is only placed on train.param and train.state}}
train.buffer @b : tensor<4xf32> init(zeros) {dist.partition = #dist.partition<@dp, 2>}

// -----

// expected-error @+1 {{'train.param' op references undeclared grid @nogrid (declare it with shard.grid)}}
train.param @w : tensor<4xf32> init(zeros) {dist.partition = #dist.partition<@nogrid, 2>}

// -----

shard.grid @g(shape = 2)
func.func @slice_shard_sizes(%x: tensor<10xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{operand and result must be one-dimensional tensors of one element type, the operand 2 x the result's elements}}
  %0 = dist.slice_shard %x on @g : tensor<10xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// hpZ's secondary partition is a stage-3 plan's.
// expected-error @+1 {{'dist.hpz' is a #dist.hpz<grid = @g, ranks_per_node = K> (K >= 1) of a module partitioned at stage 3 without a #dist.mesh}}
module attributes {dist.zero = #dist.zero<stage = 2, grid = @dp>, dist.hpz = #dist.hpz<grid = @h, ranks_per_node = 2>} {
  shard.grid @dp(shape = 4)
  shard.grid @h(shape = 2)
}

// -----

// expected-error @+1 {{hpZ group of 3 ranks does not divide the 4 ranks of @dp}}
module attributes {dist.zero = #dist.zero<stage = 3, grid = @dp>, dist.hpz = #dist.hpz<grid = @h, ranks_per_node = 3>} {
  shard.grid @dp(shape = 4)
  shard.grid @h(shape = 3)
}
