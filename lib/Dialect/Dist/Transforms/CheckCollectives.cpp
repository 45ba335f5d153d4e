//===- CheckCollectives.cpp - check-collectives ---------------------------===//
//
// Part of the ztrain project.
//
// Every rank runs the same step; it issues the same collectives in the same
// order exactly when no collective is under control flow that could go
// differently on different ranks, every started collective is waited once
// before the step ends, and no call hides collectives. This pass proves
// that or points at the op that breaks it.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/Interfaces/CallInterfaces.h"

#define DEBUG_TYPE "check-collectives"

namespace ztrain::dist {
#define GEN_PASS_DEF_CHECKCOLLECTIVES
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace ztrain::dist

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

namespace {
struct CheckCollectivesPass
    : public dist::impl::CheckCollectivesBase<CheckCollectivesPass> {
  using CheckCollectivesBase::CheckCollectivesBase;
  void runOnOperation() override;
};

bool isCommunication(Operation *op) {
  return isa<CollectiveOpInterface, WaitOp>(op);
}
} // namespace

void CheckCollectivesPass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp entry = train::getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  bool ok = true;
  Block *top = &entry.getBody().front();

  entry.walk([&](Operation *op) {
    if (isCommunication(op) && op->getBlock() != top) {
      Operation *region = op->getParentOp();
      while (region->getParentOp() != entry)
        region = region->getParentOp();
      InFlightDiagnostic diag =
          op->emitOpError()
          << "is inside a region: whether and how often it runs could "
             "differ between ranks, which would then issue different "
             "collectives (deadlock); collectives must be in the step's "
             "top-level block";
      diag.attachNote(region->getLoc())
          << "inside this '" << region->getName() << "'";
      ok = false;
    }
    if (auto call = dyn_cast<CallOpInterface>(op)) {
      op->emitOpError() << "calls another function: collectives it might "
                           "issue cannot be checked (ztrain steps are one "
                           "function)";
      ok = false;
    }
  });
  if (!ok)
    return signalPassFailure();

  // Starts are waited once, in order of the block, before the step ends
  // (the op verifiers already guarantee one wait in the same block).
  DenseSet<Operation *> open;
  for (Operation &op : *top) {
    if (isa<GatherParamStartOp, ReduceScatterStartOp, AllReduceStartOp,
            AllGatherParamStartOp>(op))
      open.insert(&op);
    if (auto wait = dyn_cast<WaitOp>(op))
      open.erase(wait.getStart());
  }
  for (Operation &op : *top)
    if (open.contains(&op)) {
      op.emitOpError() << "is never waited before the step ends";
      ok = false;
    }
  if (!ok)
    return signalPassFailure();
  markAllAnalysesPreserved();
}
