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

  // The mesh: dp = shard x replicate, shard groups of consecutive ranks.
  int64_t replicate = dpReplicate, shard = dpShard, node = ranksPerNode;
  if (replicate < 1 || shard < 0 || node < 0) {
    entry.emitError() << "dp-replicate must be >= 1 and dp-shard, "
                         "ranks-per-node >= 0";
    return signalPassFailure();
  }
  if (shard == 0) {
    if (dp % replicate != 0) {
      entry.emitError() << "dp-replicate " << replicate
                        << " does not divide the " << dp << " ranks (dp)";
      return signalPassFailure();
    }
    shard = dp / replicate;
  } else if (replicate == 1 && shard != dp) {
    // dp and dp-shard: the replicas are what is left (MiCS's shard size).
    if (dp % shard != 0) {
      entry.emitError() << "dp-shard " << shard << " does not divide the " << dp
                        << " ranks (dp)";
      return signalPassFailure();
    }
    replicate = dp / shard;
  } else if (shard * replicate != dp) {
    entry.emitError() << "dp-shard " << shard << " x dp-replicate " << replicate
                      << " is " << shard * replicate << " ranks, but dp is "
                      << dp;
    return signalPassFailure();
  }
  if (replicate > 1 && stage == 0) {
    entry.emitError() << "hybrid sharding (dp-replicate " << replicate
                      << ") needs ZeRO stage 1, 2 or 3: stage 0 "
                         "partitions nothing";
    return signalPassFailure();
  }
  if (replicate > 1 && shard < 2) {
    entry.emitError() << "hybrid sharding needs shard groups of 2 or more "
                         "ranks (dp-shard 1 partitions nothing: that is "
                         "stage 0 over all "
                      << dp << " ranks)";
    return signalPassFailure();
  }
  int64_t hpz = hpzPartitionSize;
  if (hpz != 1) {
    if (hpz < 1 || stage != 3 || replicate > 1 || dp % hpz != 0 || hpz >= dp) {
      entry.emitError()
          << "hpz-partition-size " << hpz
          << ": ZeRO++'s secondary partition needs stage 3 without "
             "dp-replicate, and a group of 2 or more ranks that divides "
             "and is smaller than the "
          << dp << " ranks (got stage " << stage << ", dp-replicate "
          << replicate << ")";
      return signalPassFailure();
    }
    if (node == 0)
      node = hpz;
    if (dp % node != 0 || (hpz % node != 0 && node % hpz != 0)) {
      entry.emitError() << "ranks-per-node " << node << " must divide the "
                        << dp << " ranks and divide or be a multiple of the "
                        << "hpZ group's " << hpz << " ranks";
      return signalPassFailure();
    }
  }
  bool meshed = hpz == 1 && (replicate > 1 || node > 0);
  if (node == 0)
    node = replicate > 1 ? shard : dp;
  if (dp % node != 0 || (shard % node != 0 && node % shard != 0)) {
    entry.emitError() << "ranks-per-node " << node << " must divide the " << dp
                      << " ranks and divide or be a multiple of the "
                      << "shard group's " << shard << " ranks";
    return signalPassFailure();
  }

  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  b.setInsertionPointToStart(module.getBody());
  auto declareGrid = [&](StringRef name, int64_t size) -> FlatSymbolRefAttr {
    if (Operation *existing = SymbolTable::lookupSymbolIn(module, name)) {
      auto grid = dyn_cast<shard::GridOp>(existing);
      if (!grid || grid.getShape() != ArrayRef<int64_t>{size}) {
        existing->emitError()
            << "@" << name << " is taken by something other than shard.grid @"
            << name << "(shape = " << size << ")";
        return nullptr;
      }
    } else {
      shard::GridOp::create(b, module.getLoc(), b.getStringAttr(name),
                            b.getDenseI64ArrayAttr({size}));
    }
    return FlatSymbolRefAttr::get(ctx, name);
  };
  FlatSymbolRefAttr gridRef = declareGrid("dp", dp);
  if (!gridRef)
    return signalPassFailure();
  if (replicate > 1) {
    gridRef = declareGrid("dp_shard", shard);
    if (!gridRef)
      return signalPassFailure();
  }
  module->setAttr(kZeroAttr, ZeroAttr::get(ctx, stage, gridRef));
  if (meshed) {
    FlatSymbolRefAttr replicateRef = declareGrid("dp_replicate", replicate);
    if (!replicateRef)
      return signalPassFailure();
    module->setAttr(kMeshAttr, MeshAttr::get(ctx, gridRef, replicateRef, node));
  }
  if (hpz != 1) {
    FlatSymbolRefAttr hpzRef = declareGrid("dp_hpz", hpz);
    if (!hpzRef)
      return signalPassFailure();
    module->setAttr(kHpzAttr, HpzAttr::get(ctx, hpzRef, node));
  }
  dp = shard; // states are partitioned over the shard group

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
