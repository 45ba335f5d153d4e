//===- DistOffloadOps.cpp - The dist memory-space ops ---------------------===//
//
// Part of the ztrain project.
//
// The verifiers of the ops that move tensors between memory spaces
// (activations to host memory and back, nvme swaps and their chunks) and
// of the asynchronous host steps, with the host-step queries the passes
// and the lowering share.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

LogicalResult ReloadActivationStartOp::verify() {
  for (Operation *user : getInput().getUsers()) {
    auto offload = dyn_cast<OffloadActivationStartOp>(user);
    if (!offload || offload->getBlock() != (*this)->getBlock() ||
        !offload->isBeforeInBlock(*this))
      continue;
    for (Operation *waiter : offload.getToken().getUsers())
      if (waiter->getBlock() == (*this)->getBlock() &&
          waiter->isBeforeInBlock(*this))
        return success();
    return emitOpError() << "reloads an activation whose copy to host "
                            "memory is not waited for before it";
  }
  return emitOpError() << "reloads a value no earlier "
                          "dist.offload_activation_start copied to host "
                          "memory";
}

Value ztrain::dist::spilledGradient(OffloadActivationStartOp op) {
  for (Operation *user : op.getToken().getUsers())
    if (auto wait = dyn_cast<WaitOp>(user))
      return wait.getNumResults() == 1 ? wait.getResult(0) : Value();
  return Value();
}

std::optional<HostStep>
ztrain::dist::getHostStep(SymbolTableCollection &symbols, Operation *op) {
  auto update = dyn_cast<train::OptimizerUpdateOpInterface>(op);
  if (!update)
    return std::nullopt;
  auto module = op->getParentOfType<ModuleOp>();
  auto placed = [&](Operation *symbol, MemorySpace space) {
    auto attr =
        symbol ? symbol->getAttrOfType<MemorySpaceAttr>(kSpaceAttr) : nullptr;
    return attr && attr.getValue() == space;
  };
  SmallVector<FlatSymbolRefAttr> states = update.getUpdatedStates();
  Operation *first =
      !states.empty() && states.front()
          ? symbols.lookupNearestSymbolFrom(module, states.front())
          : nullptr;
  if (!placed(first, MemorySpace::host) && !placed(first, MemorySpace::nvme))
    return std::nullopt;
  HostStep step;
  step.elements =
      cast<ShapedType>(update.getGradient().getType()).getNumElements();
  if (auto c = op->getAttrOfType<DenseI64ArrayAttr>(kChunkAttr))
    step.elements = chunkSize(step.elements, c[0], c[1]);
  if (!op->hasAttr(kHostGradientAttr))
    step.gradBytes =
        step.elements * elementBytes(update.getGradient().getType());
  auto param = symbols.lookupNearestSymbolFrom<train::ParamOp>(
      module, update.getUpdatedParam());
  if (param && !placed(param, MemorySpace::host))
    step.paramBytes = step.elements * elementBytes(param.getType());
  if (auto sgd = dyn_cast<train::SGDUpdateOp>(op))
    step.master = static_cast<bool>(sgd.getMasterAttr());
  else if (auto adam = dyn_cast<train::AdamUpdateOp>(op))
    step.master = static_cast<bool>(adam.getMasterAttr());
  return step;
}

int64_t ztrain::dist::getHostStepBufferBytes(Operation *fn) {
  SymbolTableCollection symbols;
  int64_t bytes = 0;
  fn->walk([&](train::OptimizerUpdateOpInterface update) {
    if (std::optional<HostStep> step = getHostStep(symbols, update))
      bytes = std::max(bytes, step->bufferBytes());
  });
  return bytes;
}
/// A swap names a train.state or train.param that lives on nvme.
static LogicalResult verifySwappedState(Operation *op, FlatSymbolRefAttr name,
                                        SymbolTableCollection &symbols) {
  Operation *target = symbols.lookupNearestSymbolFrom(op, name);
  if (!isa_and_nonnull<train::StateOp, train::ParamOp>(target))
    return op->emitOpError()
           << "names " << name << ", which is not a train.state or train.param";
  auto space = target->getAttrOfType<MemorySpaceAttr>(kSpaceAttr);
  if (!space || space.getValue() != MemorySpace::nvme)
    return op->emitOpError() << "swaps " << name
                             << ", which does not live on nvme (its "
                                "dist.space is "
                             << (space ? stringifyMemorySpace(space.getValue())
                                       : StringRef("device"))
                             << ")";
  return success();
}

/// `chunk c of C`: both or neither, 0 <= c < C, C >= 2.
static LogicalResult verifyChunk(Operation *op, std::optional<int64_t> chunk,
                                 std::optional<int64_t> chunks) {
  if (chunk.has_value() != chunks.has_value())
    return op->emitOpError() << "needs both `chunk` and `chunks` or neither";
  if (chunk && (*chunks < 2 || *chunk < 0 || *chunk >= *chunks))
    return op->emitOpError() << "chunk " << *chunk << " of " << *chunks
                             << " is out of range (0 <= chunk < chunks, "
                                "chunks >= 2)";
  return success();
}

/// A chunk holds elements of the tensor's per-rank storage (chunkSize > 0):
/// `chunk 3 of 4` of 4096 elements would start past its end.
static LogicalResult verifyChunkFits(Operation *op, FlatSymbolRefAttr name,
                                     std::optional<int64_t> chunk,
                                     std::optional<int64_t> chunks,
                                     SymbolTableCollection &symbols) {
  if (!chunk)
    return success();
  Operation *target = symbols.lookupNearestSymbolFrom(op, name);
  auto type = cast<RankedTensorType>(
      isa<train::StateOp>(target) ? cast<train::StateOp>(target).getType()
                                  : cast<train::ParamOp>(target).getType());
  int64_t stage = 0, gridSize = 1;
  auto module = op->getParentOfType<ModuleOp>();
  if (auto zero =
          module ? module->getAttrOfType<ZeroAttr>(kZeroAttr) : ZeroAttr()) {
    stage = zero.getStage();
    FailureOr<int64_t> n = getGridSize(op, zero.getGrid(), symbols);
    if (failed(n))
      return failure();
    gridSize = *n;
  }
  const int64_t n = getStateStorage(target, type, stage, gridSize).elements;
  if (chunkSize(n, *chunk, *chunks) <= 0)
    return op->emitOpError()
           << "chunk " << *chunk << " of " << *chunks << " of " << name
           << " holds nothing: its " << n << " elements per rank fill "
           << (n + chunkElements(n, *chunks) - 1) / chunkElements(n, *chunks)
           << " chunk(s) of " << chunkElements(n, *chunks);
  return success();
}

LogicalResult SwapInStartOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (failed(verifyChunk(*this, getChunk(), getChunks())) ||
      failed(verifySwappedState(*this, getStateAttr(), symbols)))
    return failure();
  return verifyChunkFits(*this, getStateAttr(), getChunk(), getChunks(),
                         symbols);
}

LogicalResult SwapOutStartOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (failed(verifyChunk(*this, getChunk(), getChunks())) ||
      failed(verifySwappedState(*this, getStateAttr(), symbols)))
    return failure();
  return verifyChunkFits(*this, getStateAttr(), getChunk(), getChunks(),
                         symbols);
}

LogicalResult SwapReleaseOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifySwappedState(*this, getStateAttr(), symbols);
}

LogicalResult UpdateWaitOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (!symbols.lookupNearestSymbolFrom<train::ParamOp>(*this, getParamAttr()))
    return emitOpError() << "references " << getParamAttr()
                         << ", which is not a train.param";
  return success();
}

LogicalResult UpdateWaitOp::verify() {
  // (A name that is not a parameter: verifySymbolUses says so.)
  if (!SymbolTable::lookupNearestSymbolFrom<train::ParamOp>(*this,
                                                            getParamAttr()))
    return success();
  // The asynchronous update it completes: before it in the block, of the
  // same parameter, reading the same gradient.
  for (Operation *prev = (*this)->getPrevNode(); prev;
       prev = prev->getPrevNode()) {
    auto update = dyn_cast<train::OptimizerUpdateOpInterface>(prev);
    if (!update || update.getUpdatedParam() != getParamAttr() ||
        update.getGradient() != getGradient())
      continue;
    if (!prev->hasAttr(kAsyncUpdateAttr))
      return emitOpError() << "completes the update of " << getParamAttr()
                           << ", which is not asynchronous ('"
                           << kAsyncUpdateAttr << "')";
    return success();
  }
  return emitOpError() << "follows no update of " << getParamAttr()
                       << " that reads this gradient";
}
