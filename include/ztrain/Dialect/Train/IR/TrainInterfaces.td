//===- TrainInterfaces.td - train dialect interfaces -------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_TRAIN_TRAININTERFACES_TD
#define ZTRAIN_DIALECT_TRAIN_TRAININTERFACES_TD

include "mlir/IR/OpBase.td"

def Train_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::ztrain::train";
  let description = [{
    An op that `train-autodiff` can differentiate. Given the adjoints of the
    op's results (a null Value where a result does not influence the loss),
    `buildGradients` creates ops at the builder's insertion point that
    compute the adjoint of every operand and returns them in operand order;
    operands that are not differentiable (integer labels, token ids) get a
    null Value. The op's own operands and results may be used freely: the
    backward pass runs after the whole forward pass.
  }];
  let methods = [
    InterfaceMethod<
      "Builds the adjoints of the operands from the adjoints of the results.",
      "::llvm::SmallVector<::mlir::Value>", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads)>
  ];
}

#endif // ZTRAIN_DIALECT_TRAIN_TRAININTERFACES_TD
