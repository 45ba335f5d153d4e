//===- TrainStep.cpp - The step as a whole --------------------------------===//
//
// Part of the ztrain project.
//
// What belongs to the step rather than to one computation: its functions
// (entry, eval, logits), the loss-scale policy and the ops that end the
// gradient half (train.update_loss_scale, train.clip_grad_norm), gradient
// accumulation, and the FLOPs the cost model counts. The compute ops'
// verifiers are in TrainOps.cpp.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cmath>
#include <cstdio>

using namespace mlir;
using namespace ztrain::train;

//===----------------------------------------------------------------------===//
// The step's functions
//===----------------------------------------------------------------------===//

func::FuncOp ztrain::train::getEntryFunction(ModuleOp module) {
  func::FuncOp entry;
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (!fn->hasAttr(kEntryAttr))
      continue;
    if (entry) {
      fn.emitError() << "more than one function is marked '" << kEntryAttr
                     << "' (the first is @" << entry.getSymName() << ")";
      return nullptr;
    }
    entry = fn;
  }
  if (!entry)
    module.emitError() << "no function is marked '" << kEntryAttr
                       << "': mark the function that returns the loss";
  return entry;
}

func::FuncOp ztrain::train::getEvalFunction(ModuleOp module) {
  for (auto fn : module.getOps<func::FuncOp>())
    if (fn->hasAttr(kEvalAttr))
      return fn;
  return nullptr;
}

func::FuncOp ztrain::train::getLogitsFunction(ModuleOp module) {
  for (auto fn : module.getOps<func::FuncOp>())
    if (fn->hasAttr(kLogitsAttr))
      return fn;
  return nullptr;
}

llvm::SmallVector<func::FuncOp, 2>
ztrain::train::getForwardFunctions(ModuleOp module) {
  llvm::SmallVector<func::FuncOp, 2> out;
  for (auto fn : module.getOps<func::FuncOp>())
    if (fn->hasAttr(kEvalAttr) || fn->hasAttr(kLogitsAttr))
      out.push_back(fn);
  return out;
}

llvm::DenseMap<StringAttr, Type>
ztrain::train::gradientElementTypes(func::FuncOp entry) {
  llvm::DenseMap<StringAttr, Type> types;
  entry.walk([&](OptimizerUpdateOpInterface update) {
    types[update.getUpdatedParam().getAttr()] =
        cast<RankedTensorType>(update.getGradient().getType()).getElementType();
  });
  return types;
}

std::string ztrain::train::checkLossScalePolicy(const LossScalePolicy &p) {
  auto g = [](double v) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", v);
    return std::string(text);
  };
  // The scale seeds an f32 backward pass: it must be a finite f32.
  if (!(p.init >= 1.0) || !(p.init <= 0x1p127))
    return "the initial loss scale " + g(p.init) + " is not in [1, 2^127]";
  if (!(p.min > 0.0) || !(p.min <= p.init))
    return "the minimum loss scale " + g(p.min) +
           " is not in (0, initial scale " + g(p.init) + "]";
  if (p.window < 1)
    return "the loss scale window " + std::to_string(p.window) + " is not >= 1";
  if (p.hysteresis < 1)
    return "the loss scale hysteresis " + std::to_string(p.hysteresis) +
           " is not >= 1";
  return "";
}

DictionaryAttr ztrain::train::lossScaleAttr(MLIRContext *ctx,
                                            const LossScalePolicy &p) {
  Builder b(ctx);
  return b.getDictionaryAttr(
      {b.getNamedAttr("init", b.getF64FloatAttr(p.init)),
       b.getNamedAttr("window", b.getI64IntegerAttr(p.window)),
       b.getNamedAttr("hysteresis", b.getI64IntegerAttr(p.hysteresis)),
       b.getNamedAttr("min", b.getF64FloatAttr(p.min))});
}

FailureOr<std::optional<LossScalePolicy>>
ztrain::train::getLossScalePolicy(ModuleOp module) {
  Attribute attr = module->getAttr(kLossScaleAttr);
  if (!attr)
    return std::optional<LossScalePolicy>();
  auto dict = dyn_cast<DictionaryAttr>(attr);
  auto init = dict ? dict.getAs<FloatAttr>("init") : FloatAttr();
  auto window = dict ? dict.getAs<IntegerAttr>("window") : IntegerAttr();
  auto hysteresis =
      dict ? dict.getAs<IntegerAttr>("hysteresis") : IntegerAttr();
  auto min = dict ? dict.getAs<FloatAttr>("min") : FloatAttr();
  if (!init || !window || !hysteresis || !min || dict.size() != 4) {
    module.emitError() << "malformed " << kLossScaleAttr << ": " << attr
                       << " (expected {init = <float>, window = <int>, "
                          "hysteresis = <int>, min = <float>})";
    return failure();
  }
  LossScalePolicy p{init.getValueAsDouble(), window.getInt(),
                    hysteresis.getInt(), min.getValueAsDouble()};
  std::string error = checkLossScalePolicy(p);
  if (!error.empty()) {
    module.emitError() << kLossScaleAttr << ": " << error;
    return failure();
  }
  return std::optional<LossScalePolicy>(p);
}

//===----------------------------------------------------------------------===//
// Dynamic loss scaling
//===----------------------------------------------------------------------===//

/// The step ops that end the gradient half of a step (the loss-scale check,
/// the clipping norm): `self` appears once in its function and precedes
/// every optimizer update; `after(op)` may refuse an op that follows it.
static LogicalResult
verifyOnceBeforeUpdates(Operation *self,
                        llvm::function_ref<LogicalResult(Operation *)> after) {
  auto func = self->getParentOfType<func::FuncOp>();
  if (!func)
    return success();
  bool seenSelf = false;
  WalkResult r = func.walk([&](Operation *op) {
    if (op == self) {
      seenSelf = true;
      return WalkResult::advance();
    }
    if (op->getName() == self->getName()) {
      self->emitOpError() << "appears twice in @" << func.getSymName();
      return WalkResult::interrupt();
    }
    if (!seenSelf && isa<OptimizerUpdateOpInterface>(op)) {
      InFlightDiagnostic d = self->emitOpError()
                             << "follows an optimizer update; it must "
                                "precede every update of the step";
      d.attachNote(op->getLoc()) << "the update";
      return WalkResult::interrupt();
    }
    if (seenSelf && failed(after(op)))
      return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return failure(r.wasInterrupted());
}

LogicalResult UpdateLossScaleOp::verify() {
  auto module = (*this)->getParentOfType<ModuleOp>();
  if (!module || !module->hasAttr(kLossScaleAttr))
    return emitOpError() << "needs a module with a " << kLossScaleAttr
                         << " policy (train-precision{param=fp16})";
  return verifyOnceBeforeUpdates(getOperation(),
                                 [](Operation *) { return success(); });
}

LogicalResult ClipGradNormOp::verify() {
  double maxNorm = getMaxNorm().convertToDouble();
  if (!(maxNorm > 0.0) || !std::isfinite(maxNorm))
    return emitOpError() << "max_norm must be finite and positive, got "
                         << maxNorm;
  return verifyOnceBeforeUpdates(
      getOperation(), [&](Operation *op) -> LogicalResult {
        if (!isa<UpdateLossScaleOp>(op))
          return success();
        return emitOpError()
               << "precedes train.update_loss_scale; the norm of a "
                  "loss-scaled step is known once the scale is";
      });
}

//===----------------------------------------------------------------------===//
// Gradient accumulation
//===----------------------------------------------------------------------===//

AccumulationBoundaryOp
ztrain::train::getAccumulationBoundary(func::FuncOp entry) {
  AccumulationBoundaryOp found;
  entry.walk([&](AccumulationBoundaryOp op) {
    found = op;
    return WalkResult::interrupt();
  });
  return found;
}

// Through the symbol-use verifier's shared, hashed tables: a linear lookup
// per op is quadratic in the number of parameters.
LogicalResult
AccumulateGradOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (!symbolTable.lookupNearestSymbolFrom<ParamOp>(getOperation(),
                                                    getParamAttr()))
    return emitOpError() << "accumulates the gradient of " << getParamAttr()
                         << ", which is not a train.param";
  return success();
}

LogicalResult AccumulationBoundaryOp::verify() {
  auto func = (*this)->getParentOfType<func::FuncOp>();
  if (!func)
    return success();
  bool seenSelf = false;
  WalkResult r = func.walk([&](Operation *op) {
    if (op == getOperation()) {
      seenSelf = true;
      return WalkResult::advance();
    }
    if (isa<AccumulationBoundaryOp>(op)) {
      emitOpError() << "appears twice in @" << func.getSymName();
      return WalkResult::interrupt();
    }
    if (!seenSelf && isa<OptimizerUpdateOpInterface>(op)) {
      InFlightDiagnostic d = emitOpError()
                             << "follows an optimizer update; the updates "
                                "run after the last micro-batch";
      d.attachNote(op->getLoc()) << "the update";
      return WalkResult::interrupt();
    }
    if (seenSelf && isa<AccumulateGradOp>(op)) {
      InFlightDiagnostic d = emitOpError()
                             << "precedes a train.accumulate_grad; every "
                                "micro-batch's gradient is accumulated before "
                                "it";
      d.attachNote(op->getLoc()) << "the accumulation";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(r.wasInterrupted());
}

//===----------------------------------------------------------------------===//
// FLOPs
//===----------------------------------------------------------------------===//

int64_t ztrain::train::matmulFlops(MatmulOp op) {
  auto a = cast<RankedTensorType>(op.getLhs().getType());
  auto c = cast<RankedTensorType>(op.getResult().getType());
  int64_t k = a.getDimSize(a.getRank() - (op.getTransposeA() ? 2 : 1));
  return 2 * c.getNumElements() * k;
}

/// heads x Tq x Tk x D: one [Tq, Tk] x D product of an attention.
static int64_t attentionProduct(Value q, Value k) {
  auto qt = cast<RankedTensorType>(q.getType());
  auto kt = cast<RankedTensorType>(k.getType());
  return qt.getNumElements() * kt.getDimSize(kt.getRank() - 2);
}

OpFlops ztrain::train::opFlops(Operation *op) {
  if (auto mm = dyn_cast<MatmulOp>(op))
    return {matmulFlops(mm), 0};
  if (auto mm = dyn_cast<MatmulAccOp>(op)) {
    auto a = cast<RankedTensorType>(mm.getLhs().getType());
    int64_t k = a.getDimSize(mm.getTransposeA() ? 0 : 1);
    return {2 * mm.getType().getNumElements() * k, 0};
  }
  if (auto a = dyn_cast<AttentionOp>(op))
    return {4 * attentionProduct(a.getQuery(), a.getKey()), 0};
  if (auto g = dyn_cast<AttentionGradOp>(op)) {
    int64_t product = 2 * attentionProduct(g.getQuery(), g.getKey());
    return {4 * product, product};
  }
  return {};
}
