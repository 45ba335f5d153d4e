//===- FuseLoss.cpp - train-fuse-loss -------------------------------------===//
//
// Part of the ztrain project.
//
// The loss and the first op of the backward pass in one kernel: a
// train.cross_entropy whose adjoint train.cross_entropy_grad reads the same
// logits and labels becomes one train.cross_entropy_with_grad at the
// adjoint's place, so the logits are read once for both and each row's
// log-sum-exp is computed once instead of twice.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"
#include "ztrain/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "train-fuse-loss"

namespace ztrain::train {
#define GEN_PASS_DEF_TRAINFUSELOSS
#include "ztrain/Dialect/Train/Transforms/Passes.h.inc"
} // namespace ztrain::train

using namespace mlir;
using namespace ztrain::train;

namespace {
struct TrainFuseLossPass
    : public ztrain::train::impl::TrainFuseLossBase<TrainFuseLossPass> {
  using TrainFuseLossBase::TrainFuseLossBase;
  void runOnOperation() override;
};
} // namespace

void TrainFuseLossPass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp entry = getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  SmallVector<CrossEntropyGradOp> grads;
  entry.walk([&](CrossEntropyGradOp g) { grads.push_back(g); });
  for (CrossEntropyGradOp grad : grads) {
    // The forward op of the same logits and labels, before the adjoint,
    // whose loss nothing reads before the adjoint's place (the loss moves
    // there).
    CrossEntropyOp loss;
    for (Operation *user : grad.getLogits().getUsers())
      if (auto ce = dyn_cast<CrossEntropyOp>(user))
        if (ce.getLabels() == grad.getLabels() &&
            ce.getIgnoreIndexAttr() == grad.getIgnoreIndexAttr() &&
            !ce.getFirstRow() && ce->getBlock() == grad->getBlock() &&
            ce->isBeforeInBlock(grad))
          loss = ce;
    if (!loss || llvm::any_of(loss.getResult().getUsers(), [&](Operation *u) {
          return u->getBlock() != grad->getBlock() || u->isBeforeInBlock(grad);
        }))
      continue;
    OpBuilder b(grad);
    auto fused = CrossEntropyWithGradOp::create(
        b, grad.getLoc(), loss.getResult().getType(), grad.getType(),
        grad.getLogits(), grad.getLabels(), grad.getGrad(),
        grad.getIgnoreIndexAttr(), /*first_row=*/nullptr);
    loss.getResult().replaceAllUsesWith(fused.getResult());
    grad.getResult().replaceAllUsesWith(fused.getLogitsGrad());
    grad.erase();
    loss.erase();
  }
}
