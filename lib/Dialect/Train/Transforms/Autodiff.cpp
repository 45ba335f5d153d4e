//===- Autodiff.cpp - train-autodiff --------------------------------------===//
//
// Part of the ztrain project.
//
// Reverse-mode differentiation of the entry function's loss with respect to
// every parameter that is not frozen. The entry function is straight-line
// code, so the backward pass is the forward ops visited in reverse, each
// contributing the adjoints of its operands through GradientOpInterface.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"
#include "ztrain/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/MapVector.h"

#define DEBUG_TYPE "train-autodiff"

namespace ztrain::train {
#define GEN_PASS_DEF_TRAINAUTODIFF
#include "ztrain/Dialect/Train/Transforms/Passes.h.inc"
} // namespace ztrain::train

using namespace mlir;
using namespace ztrain::train;

namespace {
struct TrainAutodiffPass
    : public ztrain::train::impl::TrainAutodiffBase<TrainAutodiffPass> {
  using TrainAutodiffBase::TrainAutodiffBase;
  void runOnOperation() override;
};
} // namespace

/// Adds `grad` to the adjoint accumulated so far in `slot`.
static void accumulate(OpBuilder &b, Location loc, Value &slot, Value grad) {
  slot = slot ? Value(AddOp::create(b, loc, slot.getType(), slot, grad))
              : grad;
}

void TrainAutodiffPass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp entry = getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  if (entry->hasAttr(kGradientsAttr) || entry->hasAttr(kStepAttr)) {
    entry.emitError() << "@" << entry.getSymName()
                      << " is already differentiated";
    return signalPassFailure();
  }
  if (!entry.getBody().hasOneBlock()) {
    entry.emitError() << "train-autodiff needs a single-block entry function";
    return signalPassFailure();
  }
  auto resultTypes = entry.getFunctionType().getResults();
  auto lossType = resultTypes.size() == 1
                      ? dyn_cast<RankedTensorType>(resultTypes[0])
                      : RankedTensorType();
  if (!lossType || lossType.getRank() != 0 ||
      !lossType.getElementType().isF32()) {
    entry.emitError() << "the entry function must return exactly one "
                         "tensor<f32> (the loss), got "
                      << entry.getFunctionType();
    return signalPassFailure();
  }

  Block &body = entry.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ret);
  DenseMap<Value, Value> adjoint;
  llvm::MapVector<StringAttr, Value> paramGrads;
  unsigned opsBefore = body.getOperations().size();

  // The seed: 1, or the dynamic loss scale (fp16), so that every gradient
  // comes out multiplied by it.
  Value loss = ret.getOperand(0);
  if (module->hasAttr(kLossScaleAttr))
    adjoint[loss] = LossScaleOp::create(b, ret.getLoc(), lossType);
  else
    adjoint[loss] =
        FillOp::create(b, ret.getLoc(), lossType, b.getF64FloatAttr(1.0));

  // Two dropouts of the model with one stream drop the same elements of
  // same-shaped inputs (their masks are a function of the stream): legal,
  // and what the backward pass and recomputation do on purpose, but in a
  // model most likely a copied stream number.
  llvm::DenseMap<int64_t, DropoutOp> streams;
  for (auto dropout : body.getOps<DropoutOp>()) {
    auto [it, inserted] = streams.try_emplace(dropout.getStream(), dropout);
    if (inserted)
      continue;
    InFlightDiagnostic diag = dropout.emitWarning()
                              << "shares stream " << dropout.getStream()
                              << " with an earlier train.dropout";
    if (auto where = dyn_cast<FileLineColLoc>(it->second.getLoc()))
      diag << " (line " << where.getLine() << ")";
    diag << ": both drop the same elements of same-shaped inputs (give "
            "each dropout its own stream)";
  }

  // The values a parameter influences: only the ops that produce them are
  // on a path from the parameters to the loss and need a gradient rule.
  // The adjoints of the others (inputs, constants such as train.fill,
  // buffers, what is computed from those alone) would be dropped anyway.
  // A frozen parameter is a constant of the step here, as a buffer is.
  SymbolTable symbols(module);
  auto isTrained = [&](ParamReadOp read) {
    auto param = symbols.lookup<ParamOp>(read.getParam());
    return !param || !param.getFrozen();
  };
  SmallVector<Operation *> forward;
  DenseSet<Value> varies;
  // An op of another dialect counts as influenced (it might read a
  // parameter behind a call): on the loss's path it still needs a rule.
  for (Operation &op : body.without_terminator()) {
    forward.push_back(&op);
    auto read = dyn_cast<ParamReadOp>(op);
    if ((read && isTrained(read)) || !isa<TrainDialect>(op.getDialect()) ||
        llvm::any_of(op.getOperands(),
                     [&](Value v) { return varies.contains(v); }))
      varies.insert(op.getResults().begin(), op.getResults().end());
  }
  for (Operation *op : llvm::reverse(forward)) {
    if (!llvm::any_of(op->getResults(),
                      [&](Value r) { return varies.contains(r); }))
      continue;
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value r : op->getResults()) {
      resultGrads.push_back(adjoint.lookup(r));
      any |= (bool)resultGrads.back();
    }
    if (!any)
      continue;
    if (auto read = dyn_cast<ParamReadOp>(op)) {
      accumulate(b, read.getLoc(), paramGrads[read.getParamAttr().getAttr()],
                 resultGrads[0]);
      continue;
    }
    auto iface = dyn_cast<GradientOpInterface>(op);
    if (!iface) {
      op->emitOpError() << "is on the path from the parameters to the loss "
                           "but has no gradient rule";
      return signalPassFailure();
    }
    SmallVector<Value> operandGrads = iface.buildGradients(b, resultGrads);
    // A rule that cannot differentiate this use of its op has said why.
    if (operandGrads.size() != op->getNumOperands())
      return signalPassFailure();
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads))
      if (grad)
        accumulate(b, op->getLoc(), adjoint[operand], grad);
  }

  // Return the loss followed by one gradient per trained parameter, in
  // declaration order; a parameter the loss does not depend on gets zeros.
  SmallVector<Value> results{loss};
  SmallVector<Attribute> params;
  for (auto param : module.getOps<ParamOp>()) {
    if (param.getFrozen())
      continue;
    Value grad = paramGrads.lookup(param.getSymNameAttr());
    if (!grad) {
      param.emitWarning() << "the loss does not depend on @"
                          << param.getSymName() << "; its gradient is zero";
      grad = FillOp::create(b, param.getLoc(), param.getTensorType(),
                            b.getF64FloatAttr(0.0));
    }
    results.push_back(grad);
    params.push_back(FlatSymbolRefAttr::get(param.getSymNameAttr()));
  }
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();

  // Gradient rules build the adjoints of all operands; those of inputs and
  // of other values no parameter influences are never used. Every train
  // compute op is pure, so dropping unused ones is safe.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
    if (isOpTriviallyDead(&op))
      op.erase();
  SmallVector<Type> types;
  for (Value v : results)
    types.push_back(v.getType());
  entry.setFunctionType(
      b.getFunctionType(entry.getFunctionType().getInputs(), types));
  entry->setAttr(kGradientsAttr, b.getArrayAttr(params));
  numBackwardOps += body.getOperations().size() - opsBefore;
}
