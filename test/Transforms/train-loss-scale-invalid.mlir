// The loss-scaling ops and policy refuse what the runtime could not run.
// RUN: ztrain-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{'train.update_loss_scale' op needs a module with a train.loss_scale policy (train-precision{param=fp16})}}
"train.update_loss_scale"(%f) : (tensor<f32>) -> ()
%f = train.fill {value = 0.0 : f64} : tensor<f32>

// -----

module attributes {train.loss_scale = {init = 65536.0 : f64, window = 1000 : i64, hysteresis = 2 : i64, min = 1.0 : f64}} {
train.param @w : tensor<3xf16> init(zeros)
train.state @w.master : tensor<3xf32> of @w master
train.state @w.m : tensor<3xf32> of @w
train.state @w.v : tensor<3xf32> of @w
func.func @step(%g: tensor<3xf16>) -> tensor<f32> attributes {train.entry, train.step} {
  %f0 = train.fill {value = 0.0 : f64} : tensor<f32>
  %f1 = train.found_nonfinite %g, %f0 : tensor<3xf16>
  // expected-note @+1 {{the update}}
  train.adam_update @w, %g master(@w.master) states(@w.m, @w.v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64} : tensor<3xf16>
  // expected-error @+1 {{follows an optimizer update; it must precede every update of the step}}
  train.update_loss_scale %f1 : tensor<f32>
  return %f0 : tensor<f32>
}
}

// -----

module attributes {train.loss_scale = {init = 65536.0 : f64, window = 1000 : i64, hysteresis = 2 : i64, min = 1.0 : f64}} {
func.func @step() -> tensor<f32> attributes {train.entry} {
  %f0 = train.fill {value = 0.0 : f64} : tensor<f32>
  // expected-error @+1 {{appears twice in @step}}
  train.update_loss_scale %f0 : tensor<f32>
  train.update_loss_scale %f0 : tensor<f32>
  return %f0 : tensor<f32>
}
}

// -----

func.func @flag(%x: tensor<4xf16>, %f: tensor<2xf32>) -> tensor<f32> {
  // expected-error @+1 {{operand #1 must be 0D tensor of 32-bit float values}}
  %r = "train.found_nonfinite"(%x, %f) : (tensor<4xf16>, tensor<2xf32>) -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// expected-error @+1 {{malformed train.loss_scale: {init = 6.553600e+04 : f64} (expected {init = <float>, window = <int>, hysteresis = <int>, min = <float>})}}
module attributes {train.loss_scale = {init = 65536.0 : f64}} {
}

// -----

// expected-error @+1 {{train.loss_scale: the minimum loss scale 4 is not in (0, initial scale 2]}}
module attributes {train.loss_scale = {init = 2.0 : f64, window = 1000 : i64, hysteresis = 2 : i64, min = 4.0 : f64}} {
}

// -----

func.func @f() attributes {train.loss_scale = {init = 2.0 : f64, window = 1000 : i64, hysteresis = 2 : i64, min = 1.0 : f64}} {
  // expected-error @-1 {{'func.func' op train.loss_scale belongs on a module}}
  return
}

// -----

train.param @w : tensor<3xf32> init(zeros)
train.state @w.m : tensor<3xf32> of @w
train.state @w.v : tensor<3xf32> of @w
func.func @step(%g: tensor<3xf32>) -> tensor<f32> attributes {train.entry, train.step} {
  %s0 = train.fill {value = 0.0 : f64} : tensor<f32>
  %s1 = train.grad_sq_norm %g, %s0 : tensor<3xf32>
  // expected-note @+1 {{the update}}
  train.adam_update @w, %g states(@w.m, @w.v) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64} : tensor<3xf32>
  // expected-error @+1 {{follows an optimizer update; it must precede every update of the step}}
  train.clip_grad_norm %s1 {max_norm = 1.0 : f64} : tensor<f32>
  return %s0 : tensor<f32>
}

// -----

func.func @step(%s: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{max_norm must be finite and positive, got 0}}
  train.clip_grad_norm %s {max_norm = 0.0 : f64} : tensor<f32>
  return %s : tensor<f32>
}

// -----

func.func @step(%s: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{appears twice in @step}}
  train.clip_grad_norm %s {max_norm = 1.0 : f64} : tensor<f32>
  train.clip_grad_norm %s {max_norm = 1.0 : f64} : tensor<f32>
  return %s : tensor<f32>
}

// -----

module attributes {train.loss_scale = {init = 65536.0 : f64, window = 1000 : i64, hysteresis = 2 : i64, min = 1.0 : f64}} {
func.func @step(%s: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{precedes train.update_loss_scale; the norm of a loss-scaled step is known once the scale is}}
  train.clip_grad_norm %s {max_norm = 1.0 : f64} : tensor<f32>
  train.update_loss_scale %s : tensor<f32>
  return %s : tensor<f32>
}
}
