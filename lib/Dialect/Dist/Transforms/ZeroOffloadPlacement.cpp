//===- ZeroOffloadPlacement.cpp - zero-offload: placement -----------------===//
//
// Part of the ztrain project.
//
// zero-offload's placement: which parameters and optimizer states live in
// host memory or on nvme (#dist.space), whole tensors until the requested
// fraction of the bytes is placed.
//
//===----------------------------------------------------------------------===//

#include "ZeroOffload.h"

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "zero-offload"

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;
using namespace ztrain::dist::offload;

/// cpu on one rank: stage 3 gathers nothing there, so the step's ops
/// would read the host shards in place, each kernel over the host link
/// as often as it touches its operand (a GEMM re-reads tiles). Each op
/// that reads a parameter gets a gather of one rank instead (a copy into
/// the gathered-parameter buffers, as the gathers of N > 1 ranks are):
/// the host link carries each parameter once per use, priced by
/// zero-report, as DeepSpeed fetches offloaded parameters before use.
static void gatherHostParameters(ModuleOp module, ZeroAttr zero,
                                 const llvm::DenseSet<StringAttr> &placed) {
  for (auto fn : module.getOps<func::FuncOp>()) {
    OpBuilder b(module.getContext());
    for (auto read :
         llvm::to_vector(fn.getBody().getOps<train::ParamReadOp>())) {
      if (!placed.contains(read.getParamAttr().getAttr()))
        continue;
      SmallVector<Operation *> users;
      for (Operation *user : read.getResult().getUsers())
        if (!llvm::is_contained(users, user))
          users.push_back(user);
      for (Operation *user : users) {
        b.setInsertionPoint(user);
        Value full = GatherParamOp::create(b, read.getLoc(), read.getType(),
                                           read.getParamAttr(), IntegerAttr(),
                                           IntegerAttr(), zero.getGrid());
        user->replaceUsesOfWith(read.getResult(), full);
      }
      read.erase();
    }
  }
}

LogicalResult offload::placeParameters(ModuleOp module, ZeroAttr zero,
                                       MemorySpace space, double paramRatio,
                                       llvm::DenseSet<StringAttr> &onNvme) {
  MLIRContext *ctx = module.getContext();
  auto params = llvm::to_vector(module.getOps<train::ParamOp>());
  for (train::ParamOp p : params)
    if (p->hasAttr(kSpaceAttr))
      return p.emitOpError() << "is already placed (dist.space): zero-offload "
                                "runs once";
  // Partial offload: whole parameters, in declaration order, until
  // `param-ratio` of their shards' bytes are placed (at least one).
  llvm::DenseSet<StringAttr> placedParams;
  {
    SymbolTableCollection symbols;
    FailureOr<int64_t> n = getGridSize(module, zero.getGrid(), symbols);
    if (failed(n))
      return failure();
    auto bytesOf = [&](train::ParamOp p) {
      return getStateStorage(p, p.getTensorType(), zero.getStage(), *n)
                 .elements *
             elementBytes(p.getType());
    };
    int64_t total = 0, placed = 0;
    for (train::ParamOp p : params)
      total += bytesOf(p);
    for (train::ParamOp p : params) {
      if (!placedParams.empty() &&
          placed >= paramRatio * static_cast<double>(total))
        break;
      placedParams.insert(p.getSymNameAttr());
      placed += bytesOf(p);
    }
  }
  for (train::ParamOp p : params) {
    if (!placedParams.contains(p.getSymNameAttr()))
      continue;
    p->setAttr(kSpaceAttr, MemorySpaceAttr::get(ctx, space));
    if (space == MemorySpace::nvme)
      onNvme.insert(p.getSymNameAttr());
  }
  if (space == MemorySpace::host)
    gatherHostParameters(module, zero, placedParams);
  return success();
}

LogicalResult
offload::placeOptimizerStates(ModuleOp module, func::FuncOp entry,
                              MemorySpace space, double ratio,
                              llvm::DenseSet<StringAttr> &onNvme) {
  MLIRContext *ctx = module.getContext();
  auto states = llvm::to_vector(module.getOps<train::StateOp>());
  for (train::StateOp state : states)
    if (state->hasAttr(kSpaceAttr))
      return state.emitOpError()
             << "is already placed (dist.space): zero-offload "
                "runs once";
  // Partial offload: the states of whole updates, in step order, until
  // `ratio` of the states' bytes are placed (at least one update's).
  llvm::DenseSet<StringAttr> chosen;
  if (ratio < 1.0) {
    auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr);
    int64_t stage = zero ? zero.getStage() : 0, n = 1;
    if (zero) {
      SymbolTableCollection symbols;
      FailureOr<int64_t> size = getGridSize(module, zero.getGrid(), symbols);
      if (failed(size))
        return failure();
      n = *size;
    }
    auto bytesOf = [&](train::StateOp state) {
      auto type = cast<RankedTensorType>(state.getType());
      return getStateStorage(state, type, stage, n).elements *
             elementBytes(type);
    };
    int64_t total = 0, placed = 0;
    for (train::StateOp state : states)
      total += bytesOf(state);
    SymbolTable table(module);
    entry.walk([&](train::OptimizerUpdateOpInterface update) {
      if (!chosen.empty() && placed >= ratio * static_cast<double>(total))
        return;
      for (FlatSymbolRefAttr s : update.getUpdatedStates())
        if (s && chosen.insert(s.getAttr()).second)
          placed += bytesOf(table.lookup<train::StateOp>(s.getValue()));
    });
  }
  for (train::StateOp state : states) {
    if (ratio < 1.0 && !chosen.contains(state.getSymNameAttr()))
      continue;
    state->setAttr(kSpaceAttr, MemorySpaceAttr::get(ctx, space));
    if (space == MemorySpace::nvme)
      onNvme.insert(state.getSymNameAttr());
  }
  return success();
}
