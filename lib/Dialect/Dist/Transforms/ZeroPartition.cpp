//===- ZeroPartition.cpp - zero-partition ---------------------------------===//
//
// Part of the ztrain project.
//
// Decides, per ZeRO stage, which module-level states are partitioned over
// the data-parallel grid, and records it in the IR.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "zero-partition"

namespace ztrain::dist {
#define GEN_PASS_DEF_ZEROPARTITION
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace ztrain::dist

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

namespace {
struct ZeroPartitionPass
    : public dist::impl::ZeroPartitionBase<ZeroPartitionPass> {
  using ZeroPartitionBase::ZeroPartitionBase;
  void runOnOperation() override;
};
} // namespace

void ZeroPartitionPass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp entry = train::getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  int64_t stage = this->stage, dp = this->dp;
  if (stage < 0 || stage > 3) {
    entry.emitError() << "unknown ZeRO stage " << stage
                      << " (expected 0, 1, 2 or 3)";
    return signalPassFailure();
  }
  if (dp < 1) {
    entry.emitError() << "dp must be >= 1, got " << dp;
    return signalPassFailure();
  }
  if (auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr)) {
    entry.emitError() << "the module is already partitioned: " << zero;
    return signalPassFailure();
  }
  if (!entry->hasAttr(train::kStepAttr)) {
    entry.emitError() << "zero-partition runs on a complete training step: "
                         "run train-autodiff and train-optimizer first";
    return signalPassFailure();
  }

  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  StringRef gridName = "dp";
  if (Operation *existing = SymbolTable::lookupSymbolIn(module, gridName)) {
    auto grid = dyn_cast<shard::GridOp>(existing);
    if (!grid || grid.getShape() != ArrayRef<int64_t>{dp}) {
      existing->emitError() << "@" << gridName
                            << " is taken by something other than "
                               "shard.grid @dp(shape = "
                            << dp << ")";
      return signalPassFailure();
    }
  } else {
    b.setInsertionPointToStart(module.getBody());
    shard::GridOp::create(b, module.getLoc(), b.getStringAttr(gridName),
                          b.getDenseI64ArrayAttr({dp}));
  }
  auto gridRef = FlatSymbolRefAttr::get(ctx, gridName);
  module->setAttr(kZeroAttr, ZeroAttr::get(ctx, stage, gridRef));

  auto partition = [&](Operation *op, Type type) {
    int64_t elements = cast<RankedTensorType>(type).getNumElements();
    op->setAttr(kPartitionAttr,
                PartitionAttr::get(ctx, gridRef, (elements + dp - 1) / dp));
  };
  if (stage >= 1)
    for (auto state : module.getOps<train::StateOp>())
      partition(state, state.getType());
  if (stage >= 3)
    for (auto param : module.getOps<train::ParamOp>())
      partition(param, param.getType());
}
