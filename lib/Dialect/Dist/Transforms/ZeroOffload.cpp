//===- ZeroOffload.cpp - zero-offload -------------------------------------===//
//
// Part of the ztrain project.
//
// Places optimizer states in host memory or on NVMe (#dist.space) and, for
// NVMe, schedules the swap transfers around each optimizer update: a
// static version of ZeRO-Infinity's optimizer swapper, written into the IR
// so that plan-memory sizes its buffers and zero-report prices its bytes.
// This file is the pass: its options and the order of the parts, which
// ZeroOffload.h maps.
//
//===----------------------------------------------------------------------===//

#include "ZeroOffload.h"

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include <cstdio>

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
} // namespace

void ZeroOffloadPass::runOnOperation() {
  ModuleOp module = getOperation();
  // The fractions of the states' and the parameters' bytes placed.
  for (auto [name, value] : {std::pair<const char *, double>{"ratio", ratio},
                             {"param-ratio", paramRatio}})
    if (!(value > 0.0 && value <= 1.0)) {
      char shown[32];
      std::snprintf(shown, sizeof(shown), "%g", value);
      module.emitError() << "zero-offload: " << name << "=" << shown
                         << " is out of range (0, 1]";
      return signalPassFailure();
    }
  if (subGroupSize < 0) {
    module.emitError() << "zero-offload: sub-group-size="
                       << static_cast<int64_t>(subGroupSize)
                       << " must be >= 0 (elements; 0: whole states)";
    return signalPassFailure();
  }
  if (bufferCount < 1 || bufferCount > 16) {
    module.emitError() << "zero-offload: buffer-count="
                       << static_cast<int64_t>(bufferCount)
                       << " is out of range (1-16)";
    return signalPassFailure();
  }
  if (optimizer == OffloadPlacement::none && param == OffloadPlacement::none &&
      activations == ActivationPlacement::none)
    return markAllAnalysesPreserved();

  func::FuncOp entry = train::getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  offload::Statistics stats{numSwaps,
                            numHoisted,
                            numChunkedUpdates,
                            numOffloadedActivations,
                            numSpilledGradients,
                            numHoistedChecks,
                            numAsyncUpdates};
  if (activations == ActivationPlacement::cpu &&
      failed(offload::offloadActivations(entry, stats)))
    return signalPassFailure();
  if (optimizer == OffloadPlacement::none && param == OffloadPlacement::none)
    return;
  llvm::DenseSet<StringAttr> onNvme;
  if (param != OffloadPlacement::none) {
    auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr);
    if (!zero || zero.getStage() != 3) {
      module.emitError()
          << "zero-offload: param=" << stringify<OffloadPlacement>(param)
          << " needs ZeRO stage 3 (parameters "
             "partitioned at rest and gathered for use), as DeepSpeed's "
             "offload_param; this step is at stage "
          << (zero ? zero.getStage() : 0);
      return signalPassFailure();
    }
    // cpu: the shards live in host memory and every reader (the gathers,
    // the update) reaches them there; nothing is scheduled.
    MemorySpace space =
        param == OffloadPlacement::cpu ? MemorySpace::host : MemorySpace::nvme;
    if (failed(
            offload::placeParameters(module, zero, space, paramRatio, onNvme)))
      return signalPassFailure();
  }
  if (optimizer != OffloadPlacement::none) {
    auto states = llvm::to_vector(module.getOps<train::StateOp>());
    if (states.empty()) {
      module.emitError() << "zero-offload: optimizer="
                         << stringify<OffloadPlacement>(optimizer)
                         << ", but the step has no optimizer states to place "
                            "(SGD without momentum keeps none)";
      return signalPassFailure();
    }
    MemorySpace space = optimizer == OffloadPlacement::cpu ? MemorySpace::host
                                                           : MemorySpace::nvme;
    if (failed(
            offload::placeOptimizerStates(module, entry, space, ratio, onNvme)))
      return signalPassFailure();
    if (space == MemorySpace::host) {
      offload::spillGradients(entry, stats);
      // The host-stepped updates move into the backward pass too, each
      // right after its spill's wait, and run asynchronously until their
      // parameter's next reader.
      offload::hoistUpdates(
          entry, [](Operation *op) { return op->hasAttr(kHostGradientAttr); },
          stats);
      offload::completeAsyncUpdates(entry, stats);
    }
  }
  if (onNvme.empty())
    return;

  SmallVector<func::FuncOp> fns{entry};
  llvm::append_range(fns, train::getForwardFunctions(module));
  for (func::FuncOp fn : fns)
    if (failed(offload::scheduleSwaps(fn, onNvme, bufferCount, subGroupSize,
                                      stats)))
      return signalPassFailure();
}
