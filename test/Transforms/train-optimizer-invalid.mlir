// RUN: ztrain-opt %s --split-input-file --train-autodiff --train-optimizer --verify-diagnostics
// RUN: not ztrain-opt %s --split-input-file --train-autodiff --train-optimizer=kind=lamb 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not ztrain-opt %s --split-input-file --train-autodiff --train-optimizer="kind=adam beta1=1.5" 2>&1 | FileCheck %s --check-prefix=HYPER
// RUN: not ztrain-opt %s --split-input-file --train-optimizer 2>&1 | FileCheck %s --check-prefix=NOGRAD

// KIND: for the --kind option: Cannot find option named 'lamb'!
// HYPER: :[[@LINE+6]]:1: error: invalid adam hyperparameter: beta1 must be in [0, 1), got 1.500000e+00
// NOGRAD: error: @f returns no gradients: run train-autodiff first

// expected-error @+2 {{@w.exp_avg is the name of @w's optimizer state (exp_avg): rename it}}
train.param @w : tensor<4xf32> init(ones)
train.param @w.exp_avg : tensor<4xf32> init(ones)
func.func @f(%r: tensor<4xf32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4xf32>
  %v = train.param_read @w.exp_avg : tensor<4xf32>
  %a = train.add %w, %v : tensor<4xf32>
  %m = train.mul %a, %r : tensor<4xf32>
  %loss = train.reduce sum %m [0] : tensor<4xf32> -> tensor<f32>
  return %loss : tensor<f32>
}
