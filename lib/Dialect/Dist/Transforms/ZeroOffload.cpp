//===- ZeroOffload.cpp - zero-offload -------------------------------------===//
//
// Part of the ztrain project.
//
// Places optimizer states in host memory or on NVMe (#dist.space) and, for
// NVMe, schedules the swap transfers around each optimizer update: a
// static version of ZeRO-Infinity's optimizer swapper, written into the IR
// so that plan-memory sizes its buffers and zero-report prices its bytes.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "zero-offload"

namespace ztrain::dist {
#define GEN_PASS_DEF_ZEROOFFLOAD
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace ztrain::dist

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

namespace {
struct ZeroOffloadPass : public dist::impl::ZeroOffloadBase<ZeroOffloadPass> {
  using ZeroOffloadBase::ZeroOffloadBase;
  void runOnOperation() override;
};

/// An optimizer update and the nvme states it reads and writes.
struct Update {
  Operation *op;
  SmallVector<FlatSymbolRefAttr> states;
  SmallVector<Value> inTokens, outTokens;
};
} // namespace

void ZeroOffloadPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (optimizer != "none" && optimizer != "cpu" && optimizer != "nvme") {
    module.emitError() << "zero-offload: unknown optimizer placement '"
                       << optimizer << "' (expected none, cpu or nvme)";
    return signalPassFailure();
  }
  if (param != "none") {
    if (param != "cpu" && param != "nvme")
      module.emitError() << "zero-offload: unknown parameter placement '"
                         << param << "' (expected none, cpu or nvme)";
    else
      module.emitError()
          << "zero-offload: param=" << param
          << " (parameter offload, ZeRO-Infinity at stage 3) is not "
             "implemented yet; optimizer=cpu|nvme is";
    return signalPassFailure();
  }
  if (bufferCount < 1 || bufferCount > 16) {
    module.emitError() << "zero-offload: buffer-count="
                       << static_cast<int64_t>(bufferCount)
                       << " is out of range (1-16)";
    return signalPassFailure();
  }
  if (optimizer == "none")
    return markAllAnalysesPreserved();

  func::FuncOp entry = train::getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  auto states = llvm::to_vector(module.getOps<train::StateOp>());
  if (states.empty()) {
    module.emitError() << "zero-offload: optimizer=" << optimizer
                       << ", but the step has no optimizer states to place "
                          "(SGD without momentum keeps none)";
    return signalPassFailure();
  }
  for (train::StateOp state : states)
    if (state->hasAttr(kSpaceAttr)) {
      state.emitOpError() << "is already placed (dist.space): zero-offload "
                             "runs once";
      return signalPassFailure();
    }
  MLIRContext *ctx = &getContext();
  MemorySpace space =
      optimizer == "cpu" ? MemorySpace::host : MemorySpace::nvme;
  for (train::StateOp state : states)
    state->setAttr(kSpaceAttr, MemorySpaceAttr::get(ctx, space));
  if (space != MemorySpace::nvme)
    return;

  if (!entry.getBody().hasOneBlock()) {
    entry.emitError() << "zero-offload needs a single-block step";
    return signalPassFailure();
  }
  Block &body = entry.getBody().front();
  std::vector<Update> updates;
  Operation *boundary = nullptr;
  for (Operation &op : body) {
    if (isa<train::AccumulationBoundaryOp>(op))
      boundary = &op;
    auto update = dyn_cast<train::OptimizerUpdateOpInterface>(op);
    if (!update)
      continue;
    Update u{&op, {}, {}, {}};
    for (FlatSymbolRefAttr s : update.getUpdatedStates())
      if (s)
        u.states.push_back(s);
    if (!u.states.empty())
      updates.push_back(std::move(u));
  }
  if (boundary)
    for (const Update &u : updates)
      if (u.op->isBeforeInBlock(boundary)) {
        u.op->emitOpError() << "runs before the accumulation boundary: "
                               "zero-offload cannot swap its states";
        return signalPassFailure();
      }

  // The swaps, in the order they are issued (see the pass description):
  // out(k) right after update k; before update k-1 (for k >= 1, or before
  // update k itself with one buffer), the wait of out(k - D) and in(k); the
  // first update's reads at the start of the step (after the accumulation
  // boundary: they belong to the optimizer step, not to every
  // micro-batch); the waits of in(k) right before update k; the remaining
  // write-backs' waits before the return.
  OpBuilder b(ctx);
  const int64_t D = static_cast<int64_t>(bufferCount);
  Location loc = entry.getLoc();
  for (Update &u : updates) {
    b.setInsertionPointAfter(u.op);
    for (FlatSymbolRefAttr s : u.states)
      u.outTokens.push_back(
          SwapOutStartOp::create(b, u.op->getLoc(), s).getToken());
  }
  auto waitAll = [&](ArrayRef<Value> tokens, Location at) {
    for (Value t : tokens)
      WaitOp::create(b, at, TypeRange{}, t);
  };
  for (auto [k, u] : llvm::enumerate(updates)) {
    int64_t ki = static_cast<int64_t>(k);
    if (ki == 0) {
      if (boundary)
        b.setInsertionPointAfter(boundary);
      else
        b.setInsertionPointToStart(&body);
    } else {
      b.setInsertionPoint(D >= 2 ? updates[k - 1].op : u.op);
    }
    if (ki - D >= 0)
      waitAll(updates[ki - D].outTokens, u.op->getLoc());
    for (FlatSymbolRefAttr s : u.states)
      u.inTokens.push_back(
          SwapInStartOp::create(b, u.op->getLoc(), s).getToken());
    numSwaps += 2 * u.states.size();
  }
  for (Update &u : updates) {
    b.setInsertionPoint(u.op);
    waitAll(u.inTokens, u.op->getLoc());
  }
  b.setInsertionPoint(body.getTerminator());
  int64_t n = static_cast<int64_t>(updates.size());
  for (int64_t k = std::max<int64_t>(0, n - D); k < n; ++k)
    waitAll(updates[k].outTokens, loc);
}
