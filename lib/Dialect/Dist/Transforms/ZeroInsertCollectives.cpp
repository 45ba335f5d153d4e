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
#include "llvm/ADT/MapVector.h"

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

/// The first op that consumes `update`'s gradient as the optimizer sees
/// it: the update, or an earlier overflow check of loss scaling
/// (train.found_nonfinite, placed before every update).
static Operation *firstConsumer(train::OptimizerUpdateOpInterface update) {
  Operation *first = update;
  for (Operation *user : update.getGradient().getUsers())
    if (isa<train::FoundNonfiniteOp, train::GradSqNormOp>(user) &&
        user->getBlock() == first->getBlock() && user->isBeforeInBlock(first))
      first = user;
  return first;
}

/// Points the update and the overflow checks of its gradient at `reduced`.
static void useReduced(train::OptimizerUpdateOpInterface update,
                       Value reduced) {
  Value grad = update.getGradient();
  grad.replaceUsesWithIf(reduced, [&](OpOperand &use) {
    return isa<train::FoundNonfiniteOp, train::GradSqNormOp>(use.getOwner());
  });
  update.getGradientOperand().set(reduced);
}

/// Stage 0: average each gradient right before its update (or its overflow
/// check).
static void insertAllReduces(func::FuncOp entry, FlatSymbolRefAttr grid,
                             int64_t &count) {
  OpBuilder b(entry.getContext());
  entry.walk([&](train::OptimizerUpdateOpInterface update) {
    Value grad = update.getGradient();
    b.setInsertionPoint(firstConsumer(update));
    Value avg = AllReduceOp::create(
        b, update->getLoc(), grad.getType(),
        ReductionAttr::get(b.getContext(), Reduction::mean), grad, grid);
    useReduced(update, avg);
    ++count;
  });
}

/// Hybrid sharding: `slice` averaged over the replicate grid, right before
/// `update` (or its overflow check) reads it; `slice` itself without one.
static Value averageReplicas(OpBuilder &b,
                             train::OptimizerUpdateOpInterface update,
                             Value slice, FlatSymbolRefAttr replicate,
                             int64_t &count) {
  if (!replicate)
    return slice;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(firstConsumer(update));
  ++count;
  return AllReduceOp::create(
      b, update->getLoc(), slice.getType(),
      ReductionAttr::get(b.getContext(), Reduction::mean), slice, replicate);
}

/// Stages 1-3: each update's gradient is reduce-scattered into this rank's
/// shard (accumulated before or after, as DeepSpeed), the update is sharded
/// and, below stage 3, its parameter all-gathered after it.
///
/// Hybrid sharding (`replicate`, the #dist.mesh's replicate grid, non-null):
/// the shard a rank reduce-scattered inside its shard group is then
/// averaged across the replicate group with one `dist.all_reduce mean` of
/// the shard, right before the update consumes it (after the accumulation
/// boundary, so once per optimizer step: the slow inter-node link carries
/// each gradient shard once). overlap-schedule starts it as soon as the
/// shard's reduce-scatter has been waited.
static void reduceScatterGradients(func::FuncOp entry, int64_t stage, int64_t n,
                                   FlatSymbolRefAttr grid,
                                   FlatSymbolRefAttr replicate,
                                   int64_t &count) {
  MLIRContext *ctx = entry.getContext();
  OpBuilder b(ctx);
  auto meanAttr = ReductionAttr::get(ctx, Reduction::mean);
  SmallVector<train::OptimizerUpdateOpInterface> updates;
  entry.walk([&](train::OptimizerUpdateOpInterface update) {
    updates.push_back(update);
  });
  for (train::OptimizerUpdateOpInterface update : updates) {
    Value grad = update.getGradient();
    auto type = cast<RankedTensorType>(grad.getType());
    int64_t shard = (type.getNumElements() + n - 1) / n;
    Location loc = update->getLoc();
    auto flatType = RankedTensorType::get({shard * n}, type.getElementType());
    auto shardType = RankedTensorType::get({shard}, type.getElementType());
    // Gradient accumulation, as DeepSpeed: stage 1 accumulates the full
    // (flat, padded) gradient and reduce-scatters the sum once per
    // optimizer step, after the boundary; stages 2 and 3 reduce-scatter
    // every micro-batch's gradient at once and accumulate this rank's
    // shard.
    if (auto acc = grad.getDefiningOp<train::AccumulateGradOp>()) {
      Value micro = acc.getInput();
      Value slice;
      if (stage == 1) {
        b.setInsertionPoint(acc);
        Value flat = PadFlatOp::create(b, loc, flatType, micro);
        auto summed = train::AccumulateGradOp::create(
            b, acc.getLoc(), acc.getParamAttr(), flat);
        b.setInsertionPoint(firstConsumer(update));
        slice = ReduceScatterOp::create(b, loc, shardType, meanAttr, summed,
                                        grid);
      } else {
        b.setInsertionPoint(acc);
        Value flat = PadFlatOp::create(b, loc, flatType, micro);
        Value reduced =
            ReduceScatterOp::create(b, loc, shardType, meanAttr, flat, grid);
        slice = train::AccumulateGradOp::create(b, acc.getLoc(),
                                                acc.getParamAttr(), reduced);
      }
      slice = averageReplicas(b, update, slice, replicate, count);
      useReduced(update, slice);
      acc.erase();
    } else {
      // Stage 1 keeps full gradients until the optimizer runs; stages 2
      // and 3 reduce-scatter each gradient as soon as it is final, so only
      // its shard outlives the backward pass. Either way the gradient goes
      // into its flat, padded buffer as soon as it is final: the flat
      // buffer is the gradient's storage, and the tensor the backward pass
      // produced dies there (at stage 1 it used to live beside its flat
      // copy until the optimizer ran: every gradient twice, zero-report's
      // stage-1 activation peak one full set of gradients above stage 0's).
      if (grad.getDefiningOp())
        b.setInsertionPointAfter(grad.getDefiningOp());
      else // an argument: final from the start
        b.setInsertionPointToStart(grad.getParentBlock());
      Value flat = PadFlatOp::create(b, loc, flatType, grad);
      if (stage == 1)
        b.setInsertionPoint(firstConsumer(update));
      Value slice =
          ReduceScatterOp::create(b, loc, shardType, meanAttr, flat, grid);
      slice = averageReplicas(b, update, slice, replicate, count);
      useReduced(update, slice);
    }
    update.setShardedUpdate();
    ++count;
    if (stage < 3) {
      // Parameters stay replicated: every rank needs every updated slice.
      b.setInsertionPointAfter(update);
      AllGatherParamOp::create(b, loc, update.getUpdatedParam(), grid);
      ++count;
    }
  }
}

/// The step's scalar checks read each rank's shards only: the loss-scaling
/// overflow flag and the clipping sum of squares are summed over the ranks
/// before their op uses them.
static void sumChecksOverRanks(func::FuncOp entry, FlatSymbolRefAttr grid,
                               int64_t &count) {
  MLIRContext *ctx = entry.getContext();
  OpBuilder b(ctx);
  // The step's scalar checks read each rank's shards only: the loss-scaling
  // overflow flag and the clipping sum of squares are summed over the ranks
  // before their op uses them, so every rank skips and clips alike. (Stage
  // 0 sums nothing: every rank checks the same averaged gradients, bitwise
  // equal on every rank.)
  auto sumOverRanks = [&](Operation *user, OpOperand &scalar) {
    b.setInsertionPoint(user);
    scalar.set(AllReduceOp::create(b, user->getLoc(), scalar.get().getType(),
                                   ReductionAttr::get(ctx, Reduction::sum),
                                   scalar.get(), grid));
    ++count;
  };
  entry.walk([&](train::UpdateLossScaleOp op) {
    sumOverRanks(op, op.getFoundMutable());
  });
  entry.walk([&](train::ClipGradNormOp op) {
    sumOverRanks(op, op.getSumSqMutable());
  });
}

/// Stage 3: each parameter's forward and backward uses get a gather each.
///
/// ZeRO++'s hpZ (`hpz`, the #dist.hpz grid of H ranks, non-null): right
/// after its forward gather each rank keeps its shard of the parameter over
/// the group (`dist.pad_flat` + `dist.slice_shard`: ceil(n / H) elements,
/// an activation until the backward pass), and the backward gather is a
/// `dist.all_gather` of those shards on the group, sliced to the
/// parameter's elements and reshaped: the same bits, gathered inside the
/// node.
static Value gatherSecondary(OpBuilder &b, Location loc, Value secondary,
                             RankedTensorType type, FlatSymbolRefAttr hpz,
                             int64_t h) {
  auto flatType = cast<RankedTensorType>(secondary.getType());
  auto allType = RankedTensorType::get({flatType.getNumElements() * h},
                                       flatType.getElementType());
  Value all = AllGatherOp::create(b, loc, allType, secondary, hpz);
  int64_t n = type.getNumElements();
  if (allType.getNumElements() != n)
    all = train::SliceOp::create(
        b, loc, RankedTensorType::get({n}, flatType.getElementType()), all,
        b.getI64IntegerAttr(0), b.getI64IntegerAttr(0));
  if (all.getType() != type)
    all = train::ReshapeOp::create(b, loc, type, all);
  return all;
}

static void gatherStage3Parameters(func::FuncOp entry, FlatSymbolRefAttr grid,
                                   FlatSymbolRefAttr hpz, int64_t h,
                                   int64_t &count) {
  OpBuilder b(entry.getContext());
  // Stage 3: parameters rest partitioned. The forward uses of a parameter
  // (of all its reads: tied weights are read twice) share one gather placed
  // at the first read; the backward uses share a second one, placed
  // before the first backward use, so that the gathered copy can be
  // released in between (the point of stage 3). At most two gathers per
  // parameter: 3 Psi (N-1)/N per step with the reduce-scatter.
  Block &body = entry.getBody().front();
  Operation *lossOp = body.getTerminator()->getOperand(0).getDefiningOp();
  DenseMap<Operation *, unsigned> position;
  for (auto [i, op] : llvm::enumerate(body))
    position[&op] = i;
  unsigned boundary = lossOp ? position[lossOp] : 0;
  llvm::MapVector<StringAttr, SmallVector<train::ParamReadOp>> readsOf;
  for (auto read : body.getOps<train::ParamReadOp>())
    readsOf[read.getParamAttr().getAttr()].push_back(read);
  auto isBackward = [&](OpOperand &use) {
    // Returning a parameter as the loss is a forward use: the loss is the
    // value before the update.
    return position[use.getOwner()] > boundary &&
           !use.getOwner()->hasTrait<OpTrait::IsTerminator>();
  };
  for (auto &[name, reads] : readsOf) {
    // Backward uses reached through a forward reshape of the parameter get a
    // reshape of the backward gather, so that the forward copy is not kept
    // alive through the backward pass.
    SmallVector<OpOperand *> forwardUses, backwardUses;
    SmallVector<std::pair<train::ReshapeOp, SmallVector<OpOperand *>>>
        reshapedBackwardUses;
    for (train::ParamReadOp read : reads)
      for (OpOperand &use : read.getResult().getUses()) {
        if (isBackward(use)) {
          backwardUses.push_back(&use);
          continue;
        }
        forwardUses.push_back(&use);
        if (auto reshape = dyn_cast<train::ReshapeOp>(use.getOwner())) {
          SmallVector<OpOperand *> later;
          for (OpOperand &reshapeUse : reshape.getResult().getUses())
            if (isBackward(reshapeUse))
              later.push_back(&reshapeUse);
          if (!later.empty())
            reshapedBackwardUses.push_back({reshape, later});
        }
      }
    auto gatherAt = [&](Operation *before) {
      b.setInsertionPoint(before);
      ++count;
      return GatherParamOp::create(b, reads.front().getLoc(),
                                   reads.front().getType(),
                                   reads.front().getParamAttr(), IntegerAttr(),
                                   IntegerAttr(), grid);
    };
    // The forward gather goes where the first read was.
    Value secondary;
    if (!forwardUses.empty()) {
      Value full = gatherAt(reads.front());
      for (OpOperand *use : forwardUses)
        use->set(full);
      bool backward = !backwardUses.empty() || !reshapedBackwardUses.empty();
      if (hpz && backward) {
        auto type = cast<RankedTensorType>(full.getType());
        int64_t chunk = (type.getNumElements() + h - 1) / h;
        Location loc = reads.front().getLoc();
        b.setInsertionPointAfter(full.getDefiningOp());
        Value flat = PadFlatOp::create(
            b, loc, RankedTensorType::get({chunk * h}, type.getElementType()),
            full);
        secondary = SliceShardOp::create(
            b, loc, RankedTensorType::get({chunk}, type.getElementType()), flat,
            hpz);
      }
    }
    // The backward one right before the first backward use, direct or
    // through a reshape.
    Operation *first = nullptr;
    auto consider = [&](OpOperand *use) {
      if (!first || position[use->getOwner()] < position[first])
        first = use->getOwner();
    };
    llvm::for_each(backwardUses, consider);
    for (auto &[reshape, uses] : reshapedBackwardUses)
      llvm::for_each(uses, consider);
    if (first) {
      Value full;
      if (secondary) {
        b.setInsertionPoint(first);
        ++count;
        full = gatherSecondary(b, reads.front().getLoc(), secondary,
                               cast<RankedTensorType>(reads.front().getType()),
                               hpz, h);
      } else {
        full = gatherAt(first);
      }
      for (OpOperand *use : backwardUses)
        use->set(full);
      for (auto &[reshape, uses] : reshapedBackwardUses) {
        Value again = train::ReshapeOp::create(
            b, reshape.getLoc(), reshape.getResult().getType(), full);
        for (OpOperand *use : uses)
          use->set(again);
      }
    }
    for (train::ParamReadOp read : reads)
      read.erase();
  }
}

/// Stages 1-3: each rank updates one slice of every parameter.
static LogicalResult insertShardedUpdates(func::FuncOp entry, int64_t stage,
                                          int64_t n, FlatSymbolRefAttr grid,
                                          FlatSymbolRefAttr replicate,
                                          FlatSymbolRefAttr hpz, int64_t h,
                                          int64_t &count) {
  reduceScatterGradients(entry, stage, n, grid, replicate, count);
  sumChecksOverRanks(entry, grid, count);
  if (stage >= 3)
    gatherStage3Parameters(entry, grid, hpz, h, count);
  return success();
}

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
  bool already = false;
  entry.walk([&](CollectiveOpInterface) { already = true; });
  if (already) {
    entry.emitError() << "the step already has collectives";
    return signalPassFailure();
  }
  if (!entry.getBody().hasOneBlock()) {
    entry.emitError() << "zero-insert-collectives needs a single-block step";
    return signalPassFailure();
  }
  // Hybrid sharding's replicate grid (null when the states are not
  // replicated across shard groups).
  FlatSymbolRefAttr replicate;
  if (auto mesh = module->getAttrOfType<MeshAttr>(kMeshAttr)) {
    FailureOr<int64_t> r = getGridSize(module, mesh.getReplicate(), symbols);
    if (failed(r))
      return signalPassFailure();
    if (*r > 1)
      replicate = mesh.getReplicate();
  }
  // ZeRO++'s hpZ: the group its backward gathers run in.
  FlatSymbolRefAttr hpz;
  int64_t h = 1;
  if (auto attr = module->getAttrOfType<HpzAttr>(kHpzAttr)) {
    FailureOr<int64_t> size = getGridSize(module, attr.getGrid(), symbols);
    if (failed(size))
      return signalPassFailure();
    hpz = attr.getGrid();
    h = *size;
  }
  if (*n == 1 && !replicate)
    return;
  int64_t count = 0;
  if (zero.getStage() == 0)
    insertAllReduces(entry, zero.getGrid(), count);
  else if (failed(insertShardedUpdates(entry, zero.getStage(), *n,
                                       zero.getGrid(), replicate, hpz, h,
                                       count)))
    return signalPassFailure();
  // The evaluation function (forward only) reads parameters partitioned at
  // rest at stage 3: one gather per parameter, at its first read.
  for (func::FuncOp eval : train::getForwardFunctions(module)) {
    if (zero.getStage() != 3)
      break;
    OpBuilder b(module.getContext());
    llvm::MapVector<StringAttr, SmallVector<train::ParamReadOp>> readsOf;
    eval.walk([&](train::ParamReadOp read) {
      readsOf[read.getParamAttr().getAttr()].push_back(read);
    });
    for (auto &[name, reads] : readsOf) {
      b.setInsertionPoint(reads.front());
      Value full = GatherParamOp::create(
          b, reads.front().getLoc(), reads.front().getType(),
          reads.front().getParamAttr(), IntegerAttr(), IntegerAttr(),
          zero.getGrid());
      ++count;
      for (train::ParamReadOp read : reads) {
        read.getResult().replaceAllUsesWith(full);
        read.erase();
      }
    }
  }
  numCollectives += count;
}
