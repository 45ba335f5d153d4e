//===- ZeroInsertCollectives.cpp - zero-insert-collectives ----------------===//
//
// Part of the ztrain project.
//
// Makes a partitioned step compute, on every rank, the update single-process
// training on the global batch computes, with the minimal collectives.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "zero-insert-collectives"

namespace ztrain::dist {
#define GEN_PASS_DEF_ZEROINSERTCOLLECTIVES
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace ztrain::dist

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

namespace {
struct ZeroInsertCollectivesPass
    : public dist::impl::ZeroInsertCollectivesBase<ZeroInsertCollectivesPass> {
  using ZeroInsertCollectivesBase::ZeroInsertCollectivesBase;
  void runOnOperation() override;
};
} // namespace

void ZeroInsertCollectivesPass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp entry = train::getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr);
  if (!zero) {
    entry.emitError() << "the step is not partitioned: run zero-partition "
                         "first";
    return signalPassFailure();
  }
  SymbolTableCollection symbols;
  FailureOr<int64_t> n = getGridSize(module, zero.getGrid(), symbols);
  if (failed(n))
    return signalPassFailure();
  if (zero.getStage() != 0) {
    entry.emitError() << "zero-insert-collectives: ZeRO stage "
                      << zero.getStage()
                      << " is not implemented yet (stage 0 is)";
    return signalPassFailure();
  }
  bool already = false;
  entry.walk([&](CollectiveOpInterface) { already = true; });
  if (already) {
    entry.emitError() << "the step already has collectives";
    return signalPassFailure();
  }
  if (*n == 1)
    return;

  OpBuilder b(module.getContext());
  entry.walk([&](Operation *op) {
    if (!isa<train::SGDUpdateOp, train::AdamUpdateOp>(op))
      return;
    // Operand 0 of both update ops is the gradient.
    Value grad = op->getOperand(0);
    b.setInsertionPoint(op);
    Value avg = AllReduceOp::create(b, op->getLoc(), grad.getType(),
                                    ReductionAttr::get(b.getContext(), Reduction::mean),
                                    grad, zero.getGrid());
    op->setOperand(0, avg);
    ++numCollectives;
  });
}
