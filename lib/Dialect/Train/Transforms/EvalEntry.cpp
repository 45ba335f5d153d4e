//===- EvalEntry.cpp - train-eval-entry -----------------------------------===//
//
// Part of the ztrain project.
//
// The forward pass and loss of the entry function, copied before autodiff
// into a function the executable runs to evaluate (no gradients, no update,
// dropout off).
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"
#include "ztrain/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define DEBUG_TYPE "train-eval-entry"

namespace ztrain::train {
#define GEN_PASS_DEF_TRAINEVALENTRY
#include "ztrain/Dialect/Train/Transforms/Passes.h.inc"
} // namespace ztrain::train

using namespace mlir;
using namespace ztrain::train;

namespace {
struct TrainEvalEntryPass
    : public ztrain::train::impl::TrainEvalEntryBase<TrainEvalEntryPass> {
  using TrainEvalEntryBase::TrainEvalEntryBase;
  void runOnOperation() override;
};
} // namespace

void TrainEvalEntryPass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp entry = getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  if (entry->hasAttr(kGradientsAttr) || entry->hasAttr(kStepAttr)) {
    entry.emitError() << "train-eval-entry copies the forward pass, but @"
                      << entry.getSymName()
                      << " is already differentiated: run it before "
                         "train-autodiff, and the training pipeline once";
    return signalPassFailure();
  }
  if (func::FuncOp existing = getEvalFunction(module)) {
    existing.emitError() << "the module already has an evaluation function";
    return signalPassFailure();
  }
  std::string name = (entry.getSymName() + "_eval").str();
  if (SymbolTable::lookupSymbolIn(module, name)) {
    entry.emitError() << "cannot add the evaluation function @" << name
                      << ": the name is taken";
    return signalPassFailure();
  }
  func::FuncOp eval = entry.clone();
  eval.setSymName(name);
  eval->removeAttr(kEntryAttr);
  eval->setAttr(kEvalAttr, UnitAttr::get(&getContext()));
  // Evaluation mode: dropout keeps every element.
  eval.walk([](DropoutOp dropout) {
    dropout.getResult().replaceAllUsesWith(dropout.getInput());
    dropout.erase();
  });
  module.getBody()->push_back(eval);

  // A language model's loss is a cross-entropy of its logits (possibly
  // reshaped or widened on the way): the logits function returns them,
  // for sampling. Other losses get none.
  auto lossCrossEntropy = [](func::FuncOp fn) -> CrossEntropyOp {
    Value loss = fn.getBody().front().getTerminator()->getOperand(0);
    while (auto cast = loss.getDefiningOp<CastOp>())
      loss = cast.getInput();
    return loss.getDefiningOp<CrossEntropyOp>();
  };
  std::string logitsName = (entry.getSymName() + "_logits").str();
  if (!lossCrossEntropy(eval) || SymbolTable::lookupSymbolIn(module, logitsName))
    return;
  func::FuncOp logits = eval.clone();
  logits.setSymName(logitsName);
  logits->removeAttr(kEvalAttr);
  logits->setAttr(kLogitsAttr, UnitAttr::get(&getContext()));
  CrossEntropyOp clonedCe = lossCrossEntropy(logits);
  Value out = clonedCe.getLogits();
  auto oldRet =
      cast<func::ReturnOp>(logits.getBody().front().getTerminator());
  OpBuilder b(oldRet);
  func::ReturnOp::create(b, oldRet.getLoc(), out);
  oldRet.erase();
  logits.setFunctionType(b.getFunctionType(
      logits.getFunctionType().getInputs(), {out.getType()}));
  // What only fed the loss goes (the cross-entropy, the targets' reshape).
  bool erased = true;
  while (erased) {
    erased = false;
    for (Operation &op : llvm::make_early_inc_range(
             llvm::reverse(logits.getBody().front().getOperations())))
      if (isOpTriviallyDead(&op)) {
        op.erase();
        erased = true;
      }
  }
  module.getBody()->push_back(logits);
}
