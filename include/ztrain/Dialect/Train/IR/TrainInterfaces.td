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
    backward pass runs after the whole forward pass. A rule that cannot
    differentiate this use of the op (attention's lse read by the loss)
    emits an error on the op and returns no values: the pass fails.
  }];
  let methods = [
    InterfaceMethod<
      "Builds the adjoints of the operands from the adjoints of the results.",
      "::llvm::SmallVector<::mlir::Value>", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads)>
  ];
}


def Train_RuntimeKernelOpInterface : OpInterface<"RuntimeKernelOpInterface"> {
  let cppNamespace = "::ztrain::train";
  let description = [{
    A compute op that runs as one call of a runtime kernel. The op describes
    the call (the kernel's ABI name, the element type it computes in, its
    tensors and scalars in ABI order) and `lower-to-runtime` emits it: the
    lowering has no case per compute op. See `KernelCall.h`.
  }];
  let methods = [
    InterfaceMethod<
      "The runtime kernel call that computes this op's results.",
      "::ztrain::train::KernelCall", "getKernelCall", (ins)>
  ];
}

def Train_FusibleOpInterface : OpInterface<"FusibleOpInterface"> {
  let cppNamespace = "::ztrain::train";
  let description = [{
    An elementwise op that `train-fuse-elementwise` may put in a
    `train.fused` region, and whose per-element arithmetic the fused-kernel
    generator emits from the op's own rule (`let element` in TrainOps.td):
    declaring an op fusible is the whole change a new fusible op needs.

    The rule receives one f32 value per operand (a scalar or a vector of
    lanes; the builder hides which) and returns the f32 result before its
    rounding to the result's element type, computed with the same float
    operations in the same order as the op's runtime kernel
    (`ElementBuilder.h` says what that requires).
  }];
  let methods = [
    InterfaceMethod<[{
      Emits the op's arithmetic for one element of each operand (`x`, in
      operand order) and returns the result's.
    }], "::mlir::Value", "emitElement",
      (ins "::ztrain::train::ElementBuilder &":$e, "::mlir::ValueRange":$x)>,
    InterfaceMethod<[{
      Whether operand `index` is a vector along the result's last dimension
      (a bias: element `[..., j]` reads its element `j`) rather than a
      tensor of the result's shape.
    }], "bool", "isLastDimOperand", (ins "unsigned":$index), [{}],
      /*defaultImplementation=*/[{ return false; }]>
  ];
}

def Train_OptimizerUpdateOpInterface : OpInterface<"OptimizerUpdateOpInterface"> {
  let cppNamespace = "::ztrain::train";
  let description = [{
    An in-place optimizer update of one parameter: it reads the parameter's
    gradient (an SSA value), and updates the parameter and its optimizer
    states (module-level symbols) in place. ZeRO partitioning, collective
    insertion, the buffer analysis and the lowering ask this interface, not
    a list of update ops. With `sharded`, the gradient is this rank's slice
    of the flattened, zero-padded gradient and the update touches the same
    slice of the parameter and of its states.
  }];
  let methods = [
    InterfaceMethod<"The updated parameter.",
      "::mlir::FlatSymbolRefAttr", "getUpdatedParam", (ins),
      [{ return $_op.getParamAttr(); }]>,
    InterfaceMethod<"The gradient.",
      "::mlir::Value", "getGradient", (ins),
      [{ return $_op.getGrad(); }]>,
    InterfaceMethod<"The gradient operand.",
      "::mlir::OpOperand &", "getGradientOperand", (ins),
      [{ return $_op.getGradMutable(); }]>,
    InterfaceMethod<[{
      The optimizer states the update reads and writes, in the order its
      runtime kernel takes them; a null entry is an optional state that is
      absent (SGD without momentum).
    }], "::llvm::SmallVector<::mlir::FlatSymbolRefAttr>", "getUpdatedStates",
      (ins)>,
    InterfaceMethod<"Whether the update works on a ZeRO slice.",
      "bool", "isSharded", (ins), [{ return $_op.getSharded(); }]>,
    InterfaceMethod<"Makes the update work on a ZeRO slice.",
      "void", "setShardedUpdate", (ins),
      [{ $_op.setSharded(true); }]>,
    InterfaceMethod<[{
      The runtime kernel (ABI name without `ztrt_` or a type suffix) and the
      scalar arguments that follow the parameter, gradient, states and
      element count in its ABI signature (hyper-parameters).
      `paramElementType` is the updated parameter's element type (the caller
      resolves the symbol through its own symbol table: a lookup from the op
      would scan the module once per update).
    }], "::ztrain::train::KernelCall", "getUpdateKernel",
      (ins "::mlir::Type":$paramElementType)>
  ];
}

#endif // ZTRAIN_DIALECT_TRAIN_TRAININTERFACES_TD
