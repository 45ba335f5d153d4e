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
