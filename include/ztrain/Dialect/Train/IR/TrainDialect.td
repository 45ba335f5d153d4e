//===- TrainDialect.td - The train dialect -----------------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_TRAIN_TRAINDIALECT_TD
#define ZTRAIN_DIALECT_TRAIN_TRAINDIALECT_TD

include "mlir/IR/OpBase.td"

def Train_Dialect : Dialect {
  let name = "train";
  let cppNamespace = "::ztrain::train";
  let summary = "Training graphs: parameters, forward ops, gradients, updates";
  let description = [{
    The `train` dialect describes one training step of a model. Parameters
    and optimizer states are module-level symbols (`train.param`,
    `train.state`) with a shape, element type and initializer. The forward
    pass and loss live in a `func.func` marked `train.entry`, whose
    arguments are the step's inputs (a batch) and whose single result is the
    scalar loss; it reads parameters with `train.param_read`.

    Compute ops have value semantics on statically shaped ranked tensors.
    Each differentiable op implements `TrainGradientOpInterface`, which
    `train-autodiff` uses to build the backward pass from `*_grad` ops of
    this same dialect. `train-optimizer` then adds optimizer states and
    in-place update ops (`train.sgd_update`, `train.adam_update`), which
    turns the entry function into a complete training step.
  }];
  // train.loss_scale on a module: a well-formed dynamic loss-scaling policy.
  // Unknown `train.*` attributes, on ops and on the entry's arguments, are
  // errors (a misspelt name would otherwise be ignored).
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
}

#endif // ZTRAIN_DIALECT_TRAIN_TRAINDIALECT_TD
