//===- Passes.td - train dialect passes --------------------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_TRAIN_TRANSFORMS_PASSES_TD
#define ZTRAIN_DIALECT_TRAIN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def TrainPrecision : Pass<"train-precision", "::mlir::ModuleOp"> {
  let summary = "Mixed precision: 16-bit parameters and compute, f32 loss";
  let description = [{
    Rewrites the forward graph (before `train-autodiff`) to the precision
    policy `param` (FSDP2's `param_dtype`): every f32 parameter becomes a
    `param` tensor, every floating-point value the entry function computes
    is computed and stored in `param`, and `train.cast`s are placed where a
    value changes type: f32 inputs and buffers at their first 16-bit use, a
    16-bit loss before it is returned (the loss stays f32; cross-entropy
    widens its logits itself). Kernels compute in f32 and round once when
    they store, so a 16-bit op is its f32 op on the same inputs, rounded.

    The policy is recorded on the module as `train.precision`;
    `train-optimizer` then gives each 16-bit parameter an f32 master copy
    (`train.state ... master`) and f32 moments, and reduces gradients in
    `reduce` (FSDP2's `reduce_dtype`; default: the parameters' type) by
    casting them to f32 as soon as they are final when `reduce=fp32`.
    ZeRO partitions the f32 masters and moments (stage 1), the gradients
    in `reduce` (stage 2) and the 16-bit parameters (stage 3): ZeRO's
    2 + 2 + 12 bytes per parameter with Adam.

    `param=fp16` also records a dynamic loss scaling policy,
    `train.loss_scale = {init, window, hysteresis, min}` (DeepSpeed's
    `initial_scale_power`, `loss_scale_window`, `hysteresis` and
    `min_loss_scale`; defaults 2^16, 1000, 2, 1): `train-autodiff` seeds the
    backward pass with `train.loss_scale`, `train-optimizer` checks the
    gradients (`train.found_nonfinite`) and hands the result to
    `train.update_loss_scale` before the updates, which skip the step on
    overflow and otherwise divide the gradients by the scale. The loss-scale
    options with other precisions are an error (bf16 has fp32's range and
    needs no scaling).

    `param=fp32` (the default) leaves the module as it is.

    Before:
    ```mlir
    train.param @w : tensor<3x4xf32> init(normal, 1.000000e-01)
    func.func @loss(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32>
        attributes {train.entry} {
      %w = train.param_read @w : tensor<3x4xf32>
      %z = train.matmul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
      %l = train.cross_entropy %z, %y : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
      return %l : tensor<f32>
    }
    ```
    After `train-precision{param=bf16}`:
    ```mlir
    train.param @w : tensor<3x4xbf16> init(normal, 1.000000e-01)
    func.func @loss(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32>
        attributes {train.entry} {
      %w = train.param_read @w : tensor<3x4xbf16>
      %xb = train.cast %x : tensor<2x3xf32> to tensor<2x3xbf16>
      %z = train.matmul %xb, %w : (tensor<2x3xbf16>, tensor<3x4xbf16>) -> tensor<2x4xbf16>
      %l = train.cross_entropy %z, %y : (tensor<2x4xbf16>, tensor<2xi32>) -> tensor<f32>
      return %l : tensor<f32>
    }
    ```
  }];
  let dependentDialects = ["::ztrain::train::TrainDialect"];
  let options = [
    Option<"param", "param", "::ztrain::Precision",
           "::ztrain::Precision::fp32",
           "Parameter and compute type: fp32, bf16 or fp16",
           [{::ztrain::optionValues<::ztrain::Precision>()}]>,
    Option<"reduce", "reduce", "::ztrain::ReduceDtype",
           "::ztrain::ReduceDtype::param",
           "Gradient reduction type: fp32, or the parameters' type "
           "(the default); only with bf16 or fp16 parameters",
           [{::ztrain::optionValues<::ztrain::ReduceDtype>()}]>,
    Option<"initialScalePower", "initial-scale-power", "int64_t", "16",
           "fp16 dynamic loss scaling: the initial scale is 2^this (0-127)">,
    Option<"lossScaleWindow", "loss-scale-window", "int64_t", "1000",
           "fp16 dynamic loss scaling: consecutive clean steps before the "
           "scale doubles">,
    Option<"hysteresis", "hysteresis", "int64_t", "2",
           "fp16 dynamic loss scaling: overflows tolerated before the scale "
           "halves">,
    Option<"minLossScale", "min-loss-scale", "double", "1.0",
           "fp16 dynamic loss scaling: the smallest scale (an overflow at "
           "it ends the run)">
  ];
  let statistics = [
    Statistic<"numCasts", "casts", "train.cast ops placed">
  ];
}

def TrainEvalEntry : Pass<"train-eval-entry", "::mlir::ModuleOp"> {
  let summary = "A forward-only copy of the entry function for evaluation";
  let description = [{
    Copies the entry function (after `train-precision`, before
    `train-autodiff`) into `@<entry>_eval`, marked `train.eval`: the
    forward pass and the loss in evaluation mode (`train.dropout` is the
    identity), no gradients, no update. The executable runs it on
    `--eval-data` (`ztrain_eval`); ZeRO stage 3 gathers its parameters,
    `plan-memory` plans it into the step's arenas (the two never run at
    once), so evaluation needs no memory of its own beyond the step's.

    ```mlir
    func.func @loss(%x: ...) -> tensor<f32> attributes {train.entry} {...}
    func.func @loss_eval(%x: ...) -> tensor<f32> attributes {train.eval} {...}
    ```
  }];
  let dependentDialects = ["::ztrain::train::TrainDialect"];
}

def TrainAutodiff : Pass<"train-autodiff", "::mlir::ModuleOp"> {
  let summary = "Reverse-mode differentiation of the loss w.r.t. every parameter";
  let description = [{
    Rewrites the entry function (`func.func` with the `train.entry`
    attribute), a single-block function returning a scalar loss, so that
    it returns the loss followed by the gradient of the loss with respect
    to every `train.param` of the module that is not `frozen`, in
    declaration order. The function gets a `train.gradients` attribute
    listing those parameters. Parameters that do not influence the loss get
    a zero gradient (and a warning). A frozen parameter's reads are
    constants of the step, as buffer reads are: no adjoint flows into them
    and nothing is computed for them.

    The adjoint of each value is accumulated with `train.add` over its
    uses; the adjoint of every `train.param_read` of the same parameter is
    summed (tied weights). Each op contributes its backward ops through
    `GradientOpInterface`. Adjoints nothing uses (those of the inputs) are
    removed again.

    Before:
    ```mlir
    func.func @loss(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> tensor<f32>
        attributes {train.entry} {
      %w = train.param_read @w : tensor<2x3xf32>
      %l = train.matmul %x, %w {transpose_b} : (tensor<4x3xf32>, tensor<2x3xf32>) -> tensor<4x2xf32>
      %loss = train.cross_entropy %l, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
      return %loss : tensor<f32>
    }
    ```
    After:
    ```mlir
    func.func @loss(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> (tensor<f32>, tensor<2x3xf32>)
        attributes {train.entry, train.gradients = [@w]} {
      %w = train.param_read @w : tensor<2x3xf32>
      %l = train.matmul %x, %w {transpose_b} : ...
      %loss = train.cross_entropy %l, %y : ...
      %one = train.fill {value = 1.000000e+00 : f64} : tensor<f32>
      %dl = train.cross_entropy_grad %one, %l, %y : ...
      %dw = train.matmul %dl, %x {transpose_a} : (tensor<4x2xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
      return %loss, %dw : tensor<f32>, tensor<2x3xf32>
    }
    ```
  }];
  let dependentDialects = ["::ztrain::train::TrainDialect"];
  let statistics = [
    Statistic<"numBackwardOps", "backward-ops", "Ops created for the backward pass">
  ];
}

def TrainFuseLoss : Pass<"train-fuse-loss", "::mlir::ModuleOp"> {
  let summary = "The cross-entropy loss and its adjoint in one kernel";
  let description = [{
    Runs after `train-autodiff` (and `train-recompute`), before
    `train-optimizer`. A `train.cross_entropy` and the
    `train.cross_entropy_grad` of the same logits and labels become one
    `train.cross_entropy_with_grad` at the adjoint's place (the first op of
    the backward pass), which reads the logits once and computes each row's
    log-sum-exp once: the same expressions in the same order, so the loss
    and the adjoint are bitwise the two ops'. Nothing reads the loss
    before the adjoint's place in a step (the return does), so moving it
    there changes no value; a pair whose loss is read earlier, or whose
    logits differ, is left as it is.

    ```mlir
    // before
    %loss = train.cross_entropy %logits, %y : (tensor<32x10xf32>, tensor<32xi32>) -> tensor<f32>
    %seed = train.fill {value = 1.000000e+00 : f64} : tensor<f32>
    %dlogits = train.cross_entropy_grad %seed, %logits, %y
        : (tensor<f32>, tensor<32x10xf32>, tensor<32xi32>) -> tensor<32x10xf32>
    // after
    %seed = train.fill {value = 1.000000e+00 : f64} : tensor<f32>
    %loss, %dlogits = train.cross_entropy_with_grad %logits, %y, %seed : tensor<32x10xf32>, tensor<32xi32>
    ```
  }];
  let dependentDialects = ["::ztrain::train::TrainDialect"];
}

def TrainFuseElementwise : Pass<"train-fuse-elementwise", "::mlir::ModuleOp"> {
  let summary = "Chains of elementwise ops as train.fused regions (one "
                "generated kernel each)";
  let description = [{
    Runs first in `ztrain-to-llvm` with `ztrain-compile --fuse=elementwise`,
    before `plan-memory`, on the step and the forward functions. A
    producer-consumer chain of fusible ops (`FusibleOpInterface`: the
    elementwise ops, their gradients, `scale`, `neg`, `bias_add`, `cast`)
    on f32 or bf16 tensors of one shape becomes one `train.fused` region at
    its last op's place; `lower-to-runtime` generates its loop. A value
    that only the chain reads is no longer a buffer: plan-memory does not
    see it, and the step's activation memory shrinks by it.

    A chain never spans a barrier: a `dist` op (collectives, parameter
    gathers and releases, offload and NVMe transfers) or an op with side
    effects (optimizer updates, gradient accumulation, loss scaling). It
    never mixes recomputed ops (`train.recomputed`) with others, keeps
    every outside reader of its values after its place, and has at most 16
    inputs and results and 64 ops. Single ops keep their runtime kernel.

    ```mlir
    // before
    %0 = train.bias_add %x, %b : tensor<8x64x256xf32>, tensor<256xf32>
    %1 = train.add %r, %0 : tensor<8x64x256xf32>
    // after
    %1 = train.fused (%x, %b, %r) : (tensor<8x64x256xf32>, tensor<256xf32>,
        tensor<8x64x256xf32>) -> tensor<8x64x256xf32> {
    ^bb0(%a: tensor<8x64x256xf32>, %c: tensor<256xf32>, %d: tensor<8x64x256xf32>):
      %2 = train.bias_add %a, %c : tensor<8x64x256xf32>, tensor<256xf32>
      %3 = train.add %d, %2 : tensor<8x64x256xf32>
      train.yield %3 : tensor<8x64x256xf32>
    }
    ```
  }];
  let dependentDialects = ["::ztrain::train::TrainDialect"];
  let statistics = [
    Statistic<"numRegions", "regions", "train.fused regions made">
  ];
}

def TrainRecompute : Pass<"train-recompute", "::mlir::ModuleOp"> {
  let summary = "Activation checkpointing: recompute forward values in the "
                "backward pass instead of keeping them (ZeRO-R)";
  let description = [{
    Runs between `train-autodiff` and `train-optimizer`. The forward pass is
    cut into segments at checkpoint boundaries: the forward ops marked
    `train.checkpoint` (the Python builders mark each transformer block's
    output; any forward op with one tensor result can carry the mark), or,
    when the model carries no mark, the residual stream found from the
    graph (a value that is the only live activation right after its op and
    that two forward ops read: each attention and MLP sub-block's input in
    a pre-norm transformer; the boundaries before sub-blocks without
    attention are dropped when others have it, so that segments are whole
    blocks). The ops after the last boundary (the loss head) are not
    recomputed: the backward pass starts with them.

    Within a segment the backward pass keeps, by `policy`:

    * `full`: only the segment's boundary (and values read across
      segments); the rest of the segment is recomputed in the backward
      pass (Megatron's full recompute, torch.utils.checkpoint per block);
    * `selective`: also the linear layers' products (matmuls with a
      parameter operand); the attention core (scores, softmax, its dropout,
      the product with V), norms and elementwise work are recomputed
      (Korthikanti et al.'s selective recompute);
    * `none`: nothing changes.

    The recomputation is the needed forward ops cloned, with their
    attributes, right before the first backward op of their segment that
    reads one of them, and marked `train.recomputed`; the backward ops read
    the clones, so the originals die in the forward pass. The same ops on
    the same operands give the same bits (dropout's mask is a function of
    seed, stream, step and element index), so the step computes the same
    weights as without recomputation, bitwise, and `plan-memory`'s
    liveness turns the shorter lifetimes into a smaller activation arena.
    The module records the policy in `train.recompute`; zero-report prices
    the recomputed FLOPs.

    A mark on an op outside the forward pass, on a value computed from
    parameters alone, or on a value no later forward op reads is an error;
    so is a policy that finds nothing to recompute.

    ```mlir
    %r = train.add %x, %y {train.checkpoint} : tensor<8x64x64xf32>
    ...
    // backward of the segment ending at %r, after train-recompute{policy=full}:
    %ln = train.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64, train.recomputed} : ...
    ```
  }];
  let dependentDialects = ["::ztrain::train::TrainDialect"];
  let options = [
    Option<"policy", "policy", "::ztrain::RecomputePolicy",
           "::ztrain::RecomputePolicy::none",
           "What the backward pass keeps: none (everything it reads), full "
           "(each segment's boundary only) or selective (also the linear "
           "layers' products)",
           [{::ztrain::optionValues<::ztrain::RecomputePolicy>()}]>
  ];
  let statistics = [
    Statistic<"numRecomputedOps", "recomputed-ops",
              "Forward ops repeated in the backward pass">,
    Statistic<"numSegments", "segments", "Recomputed segments">
  ];
}

def TrainTileLoss : Pass<"train-tile-loss", "::mlir::ModuleOp"> {
  let summary = "The vocabulary projection and its cross-entropy in tiles of "
                "token rows: the logits never exist whole";
  let description = [{
    Runs after `train-fuse-loss`, before `train-optimizer` (ztrain-compile
    `--loss-tile-bytes`, `ztrain-training{loss-tile-bytes=N}`). A loss
    `train.cross_entropy_with_grad` whose logits are one projection
    `x W^T` (a `train.matmul` with `transpose_b`, through reshapes nothing
    else reads) and whose adjoint feeds exactly `dx = g W` and
    `dW = g^T x` becomes a sequence of tiles of rows, each at most
    `max-tile-bytes` of logits: the tile's logits, its share of the loss
    and its rows of the adjoint (`first_row`), its rows of dx and its term
    of dW. The [rows, vocabulary] logits and their adjoint exist one tile at
    a time; the projection moves from the forward pass to the loss's place
    (nothing reads the logits earlier). A forward-only loss (the
    evaluation function) gets the forward half of the same tiles. The
    sampling function (`train.logits`, which returns the whole logits) is
    removed when a loss is tiled: it would size the arenas the tiles shrink
    (the executable's `--sample` then refuses, saying so). A module with no
    such loss gets a warning.

    dW is the first tile's product (f32; a zero fill for bf16 / f16)
    plus one `train.matmul_acc` per further tile, each accumulating its
    product in f32 in place: one [V, C] buffer (none when the sum is the
    parameter's gradient buffer), rounded once to a bf16 gradient.

    Numbers: each tile's logits, adjoint rows and dx rows are the untiled
    ops' rows (the same kernels on fewer rows); dW is a sum over tiles and
    the loss a sum of the tiles' shares, so those two differ from the
    untiled values by rounding (docs/tiling.md).

    ```mlir
    // before (rows 512, vocabulary 32000)
    %logits = train.matmul %x, %w {transpose_b} : (tensor<512x64xf32>, tensor<32000x64xf32>) -> tensor<512x32000xf32>
    %loss, %g = train.cross_entropy_with_grad %logits, %y, %seed : tensor<512x32000xf32>, tensor<512xi32>
    %dx = train.matmul %g, %w : (tensor<512x32000xf32>, tensor<32000x64xf32>) -> tensor<512x64xf32>
    %dw = train.matmul %g, %x {transpose_a} : (tensor<512x32000xf32>, tensor<512x64xf32>) -> tensor<32000x64xf32>
    // after, max-tile-bytes=16777216: two tiles of 256 rows
    %x0 = train.slice %x {dim = 0 : i64, start = 0 : i64} : tensor<512x64xf32> -> tensor<256x64xf32>
    %l0 = train.matmul %x0, %w {transpose_b} : ...
    %s0, %g0 = train.cross_entropy_with_grad %l0, %y, %seed {first_row = 0 : i64} : ...
    ...
    ```
  }];
  let options = [
    Option<"maxTileBytes", "max-tile-bytes", "int64_t", "0",
           "Largest tile of logits in bytes (0: no tiling); at most 64 "
           "tiles">
  ];
  let statistics = [
    Statistic<"numTiled", "tiled-losses", "Losses split into tiles">,
    Statistic<"numTiles", "tiles", "Tiles made">
  ];
  let dependentDialects = ["::ztrain::train::TrainDialect"];
}

def TrainOptimizer : Pass<"train-optimizer", "::mlir::ModuleOp"> {
  let summary = "Adds the optimizer update: a complete training step";
  let description = [{
    Consumes the gradients that `train-autodiff` returns from the entry
    function and replaces them by in-place update ops, declaring the
    optimizer states each update needs as `train.state` symbols. The entry
    function then returns only the loss and carries `train.step`.

    `kind=sgd` follows `torch.optim.SGD` (a `momentum_buffer` state when
    momentum is non-zero), `kind=adam` `torch.optim.Adam` and `kind=adamw`
    `torch.optim.AdamW` (states `exp_avg` and `exp_avg_sq`).

    `clip-grad-norm=C` clips by the global norm: a chain of
    `train.grad_sq_norm` over the gradients the updates consume and one
    `train.clip_grad_norm` before the first update (after
    `train.update_loss_scale` when the step is loss-scaled), which makes the
    updates read every gradient times `C / (norm + 1e-6)` when the norm
    exceeds C.

    Weight decay skips the no-decay group (`no-decay=1d`, the default:
    parameters of rank < 2, that is biases, norm gains and other vectors, as
    nanoGPT and Hugging Face's trainers group them; `no-decay=none`: every
    parameter decays): their updates carry `no_decay` and weight decay 0.
    The hyper-parameters written on the updates are defaults: the
    executable's `--lr`, `--beta1`, `--beta2`, `--eps`, `--weight-decay`,
    `--momentum` and `--dampening` replace them at run time.

    `grad-accum-steps=K` (K > 1) accumulates gradients over K micro-batches
    per optimizer step, as DeepSpeed's `gradient_accumulation_steps`: each
    final gradient goes into its parameter's accumulator
    (`train.accumulate_grad`, right where it is final) and one
    `train.accumulation_boundary` separates what runs for every micro-batch
    from the overflow check, clipping and updates, which run once per
    optimizer step on the sum divided by K. The module records K in
    `train.grad_accum_steps` (the executable's default number of
    micro-batches).

    Before (after train-autodiff):
    ```mlir
    func.func @loss(...) -> (tensor<f32>, tensor<2x3xf32>)
        attributes {train.entry, train.gradients = [@w]} {
      ...
      return %loss, %dw : tensor<f32>, tensor<2x3xf32>
    }
    ```
    After (`train-optimizer{kind=adamw lr=0.001}`):
    ```mlir
    train.state @w.exp_avg : tensor<2x3xf32> of @w
    train.state @w.exp_avg_sq : tensor<2x3xf32> of @w
    func.func @loss(...) -> tensor<f32> attributes {train.entry, train.step} {
      ...
      train.adam_update @w, %dw states(@w.exp_avg, @w.exp_avg_sq) {decoupled, lr = ...} : tensor<2x3xf32>
      return %loss : tensor<f32>
    }
    ```
  }];
  let dependentDialects = ["::ztrain::train::TrainDialect"];
  let options = [
    Option<"kind", "kind", "::ztrain::OptimizerKind",
           "::ztrain::OptimizerKind::adamw", "Optimizer: sgd, adam or adamw",
           [{::ztrain::optionValues<::ztrain::OptimizerKind>()}]>,
    Option<"lr", "lr", "double", "1e-3", "Learning rate">,
    Option<"beta1", "beta1", "double", "0.9", "Adam beta1">,
    Option<"beta2", "beta2", "double", "0.999", "Adam beta2">,
    Option<"eps", "eps", "double", "1e-8", "Adam epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.0",
           "Weight decay (decoupled for adamw, L2 for sgd and adam)">,
    Option<"momentum", "momentum", "double", "0.0", "SGD momentum">,
    Option<"dampening", "dampening", "double", "0.0", "SGD dampening">,
    Option<"nesterov", "nesterov", "bool", "false", "SGD Nesterov momentum">,
    Option<"clipGradNorm", "clip-grad-norm", "double", "0.0",
           "Clip the gradients to this global norm before the update "
           "(torch.nn.utils.clip_grad_norm_; 0: no clipping)">,
    Option<"noDecay", "no-decay", "::ztrain::NoDecay",
           "::ztrain::NoDecay::oneD",
           "Which parameters weight decay skips: 1d (biases, norms and "
           "every parameter of rank < 2, the nanoGPT / Hugging Face "
           "convention) or none (every parameter decays, one "
           "torch.optim group)",
           [{::ztrain::optionValues<::ztrain::NoDecay>()}]>,
    Option<"gradAccumSteps", "grad-accum-steps", "int64_t", "1",
           "Micro-batches per optimizer step (gradient accumulation; 1: "
           "none)">
  ];
}

#endif // ZTRAIN_DIALECT_TRAIN_TRANSFORMS_PASSES_TD
