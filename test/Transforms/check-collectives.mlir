// RUN: ztrain-opt %s -split-input-file -verify-diagnostics --check-collectives
// RUN: not ztrain-opt %s -split-input-file --check-collectives 2>&1 | FileCheck %s --check-prefix=LOC

// A collective under rank-dependent control flow: ranks would issue
// different collectives (a deadlock, or buffers silently mixed up).
// LOC: check-collectives.mlir:[[@LINE+9]]:{{[0-9]+}}: error: 'dist.all_reduce' op is inside a region
shard.grid @dp(shape = 2)
func.func @loss(%x: tensor<4xf32>) -> tensor<4xf32> attributes {train.entry} {
  %rank = shard.process_linear_index on @dp : index
  %c0 = arith.constant 0 : index
  %first = arith.cmpi eq, %rank, %c0 : index
  // expected-note @+1 {{inside this 'scf.if'}}
  %r = scf.if %first -> tensor<4xf32> {
    // expected-error @+1 {{'dist.all_reduce' op is inside a region: whether and how often it runs could differ between ranks, which would then issue different collectives (deadlock); collectives must be in the step's top-level block}}
    %s = dist.all_reduce sum %x on @dp : tensor<4xf32>
    scf.yield %s : tensor<4xf32>
  } else {
    scf.yield %x : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// A start/wait pair inside a loop: the trip count could differ by rank.
shard.grid @dp(shape = 2)
func.func @loss(%x: tensor<4xf32>, %n: index) -> tensor<4xf32> attributes {train.entry} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-note @+1 {{inside this 'scf.for'}}
  scf.for %i = %c0 to %n step %c1 {
    // expected-error @+1 {{'dist.all_reduce_start' op is inside a region}}
    %t = dist.all_reduce_start sum %x on @dp : tensor<4xf32>
    // expected-error @+1 {{'dist.wait' op is inside a region}}
    %r = dist.wait %t : tensor<4xf32>
  }
  return %x : tensor<4xf32>
}

// -----

// Collectives a callee might issue cannot be checked.
func.func private @helper(%x: tensor<4xf32>) -> tensor<4xf32>
func.func @loss(%x: tensor<4xf32>) -> tensor<4xf32> attributes {train.entry} {
  // expected-error @+1 {{calls another function: collectives it might issue cannot be checked}}
  %r = func.call @helper(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// A straight-line schedule passes, and the pass changes nothing.
shard.grid @dp(shape = 2)
func.func @loss(%x: tensor<4xf32>) -> tensor<4xf32> attributes {train.entry} {
  %t = dist.all_reduce_start sum %x on @dp : tensor<4xf32>
  %r = dist.wait %t : tensor<4xf32>
  return %r : tensor<4xf32>
}
