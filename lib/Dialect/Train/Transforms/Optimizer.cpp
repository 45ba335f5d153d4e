//===- Optimizer.cpp - train-optimizer ------------------------------------===//
//
// Part of the ztrain project.
//
// Turns the gradients returned by train-autodiff into in-place optimizer
// updates, declaring the optimizer states they need.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"
#include "ztrain/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>
#include "llvm/Support/FormatVariadic.h"

#define DEBUG_TYPE "train-optimizer"

namespace ztrain::train {
#define GEN_PASS_DEF_TRAINOPTIMIZER
#include "ztrain/Dialect/Train/Transforms/Passes.h.inc"
} // namespace ztrain::train

using namespace mlir;
using namespace ztrain;
using namespace ztrain::train;

namespace {
/// Declares `<param>.<suffix>` right after the parameter (or its previous
/// state) so that a module reads parameter by parameter. `type` is the
/// parameter's, or its f32 form for the master and moments of a 16-bit
/// parameter.
struct StateDeclarer {
  SymbolTable &symbols;
  OpBuilder declBuilder;

  FailureOr<FlatSymbolRefAttr> declare(ParamOp param, StringRef suffix,
                                       Type stateType, bool declareMaster,
                                       Operation *&after) {
    std::string name = (param.getSymName() + "." + suffix).str();
    if (Operation *taken = symbols.lookup(name)) {
      // At the declaration that takes the name; the parameter in a note.
      taken->emitError() << "@" << name << " is the name of @"
                         << param.getSymName() << "'s optimizer state ("
                         << suffix << "): rename it";
      return failure();
    }
    declBuilder.setInsertionPointAfter(after);
    auto state = StateOp::create(
        declBuilder, param.getLoc(), declBuilder.getStringAttr(name),
        TypeAttr::get(stateType),
        FlatSymbolRefAttr::get(param.getSymNameAttr()),
        declareMaster ? declBuilder.getUnitAttr() : UnitAttr());
    symbols.insert(state);
    after = state;
    return FlatSymbolRefAttr::get(state.getSymNameAttr());
  }
};

struct TrainOptimizerPass
    : public ztrain::train::impl::TrainOptimizerBase<TrainOptimizerPass> {
  using TrainOptimizerBase::TrainOptimizerBase;
  void runOnOperation() override;
  LogicalResult checkOptions(func::FuncOp entry);
  LogicalResult addUpdate(ParamOp param, FlatSymbolRefAttr ref, Value grad,
                          Type reduceType, bool lossScaled, OpBuilder &b,
                          StateDeclarer &states);
  void closeGradientHalf(func::FuncOp entry, func::ReturnOp ret,
                         bool lossScaled);
  void finishStep(ModuleOp module, func::FuncOp entry, func::ReturnOp ret,
                  OpBuilder &b);
};
} // namespace

void TrainOptimizerPass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp entry = getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  auto gradsOf = entry->getAttrOfType<ArrayAttr>(kGradientsAttr);
  if (!gradsOf) {
    entry.emitError() << "@" << entry.getSymName()
                      << " returns no gradients: run train-autodiff first";
    return signalPassFailure();
  }
  if (failed(checkOptions(entry)))
    return signalPassFailure();

  SymbolTable symbols(module);
  auto ret = cast<func::ReturnOp>(entry.getBody().front().getTerminator());
  OpBuilder b(ret);

  // Mixed precision (train-precision): 16-bit parameters get an f32 master
  // copy and f32 moments; gradients are reduced in `reduce`.
  Type reduceType;
  if (auto policy = module->getAttrOfType<DictionaryAttr>(kPrecisionAttr)) {
    auto reduce = policy.getAs<TypeAttr>("reduce");
    if (!reduce) {
      module.emitError() << "malformed " << kPrecisionAttr << ": " << policy
                         << " (expected {param = <type>, reduce = <type>})";
      return signalPassFailure();
    }
    reduceType = reduce.getValue();
  }

  FailureOr<std::optional<LossScalePolicy>> scalePolicy =
      getLossScalePolicy(module);
  if (failed(scalePolicy))
    return signalPassFailure();
  const bool lossScaled = scalePolicy->has_value();

  StateDeclarer states{symbols, OpBuilder(module.getContext())};
  for (auto [i, attr] : llvm::enumerate(gradsOf)) {
    auto ref = cast<FlatSymbolRefAttr>(attr);
    auto param = symbols.lookup<ParamOp>(ref.getValue());
    if (!param) {
      entry.emitError() << "gradient of undeclared parameter " << ref;
      return signalPassFailure();
    }
    if (failed(addUpdate(param, ref, ret.getOperand(i + 1), reduceType,
                         lossScaled, b, states)))
      return signalPassFailure();
  }

  closeGradientHalf(entry, ret, lossScaled);
  finishStep(module, entry, ret, b);
}

/// The options, checked before anything changes: every test is written so
/// that NaN fails it.
LogicalResult TrainOptimizerPass::checkOptions(func::FuncOp entry) {
  const bool isSgd = kind == OptimizerKind::sgd;
  auto invalid = [&](StringRef what, double value) -> LogicalResult {
    return entry.emitError()
           << "invalid " << stringify<OptimizerKind>(kind)
           << " hyperparameter: " << what << ", got " << value;
  };
  // Every test is written so that NaN fails it (a comparison with NaN is
  // false), and infinities are refused where a finite value is needed.
  auto finite = [](double v) { return std::isfinite(v); };
  if (!(lr >= 0.0) || !finite(lr))
    return invalid("lr must be finite and >= 0", lr);
  if (!(weightDecay >= 0.0) || !finite(weightDecay))
    return invalid("weight-decay must be finite and >= 0", weightDecay);
  if (isSgd && (!(momentum >= 0.0) || !finite(momentum)))
    return invalid("momentum must be finite and >= 0", momentum);
  if (isSgd && !(dampening >= 0.0 && dampening <= 1.0))
    return invalid("dampening must be in [0, 1]", dampening);
  if (isSgd && nesterov && (momentum <= 0.0 || dampening != 0.0))
    return invalid("nesterov needs momentum > 0 and dampening 0; momentum",
                   momentum);
  if (!isSgd && !(beta1 >= 0.0 && beta1 < 1.0))
    return invalid("beta1 must be in [0, 1)", beta1);
  if (!isSgd && !(beta2 >= 0.0 && beta2 < 1.0))
    return invalid("beta2 must be in [0, 1)", beta2);
  if (!isSgd && (!(eps > 0.0) || !finite(eps)))
    return invalid("eps must be finite and positive", eps);
  if (!(clipGradNorm >= 0.0) || !finite(clipGradNorm))
    return invalid("clip-grad-norm must be finite and >= 0 (0: no clipping)",
                   clipGradNorm);
  if (gradAccumSteps < 1 || gradAccumSteps > (int64_t(1) << 30))
    return entry.emitError() << "grad-accum-steps must be in [1, 2^30], got "
                             << static_cast<int64_t>(gradAccumSteps);
  return success();
}

/// The update of one parameter from its gradient `grad`: its states (an
/// f32 master for a 16-bit parameter), the cast to the reduce type, the
/// accumulation, then train.sgd_update or train.adam_update before `b`.
LogicalResult TrainOptimizerPass::addUpdate(ParamOp param,
                                            FlatSymbolRefAttr ref, Value grad,
                                            Type reduceType, bool lossScaled,
                                            OpBuilder &b,
                                            StateDeclarer &states) {
  Operation *after = param;
  Type paramElement = param.getTensorType().getElementType();
  bool mixed = reduceType && !paramElement.isF32();
  if (lossScaled && !mixed)
    return param.emitError() << "the module scales its loss (" << kLossScaleAttr
                             << ") but parameter @" << param.getSymName()
                             << " has no 16-bit mixed-precision policy; loss "
                                "scaling unscales in the f32 master update";
  Type stateType = param.getType();
  FlatSymbolRefAttr master;
  if (mixed) {
    stateType =
        RankedTensorType::get(param.getTensorType().getShape(), b.getF32Type());
    auto st = states.declare(param, "master", stateType, true, after);
    if (failed(st))
      return failure();
    master = *st;
    // Reduced in f32: cast as soon as the gradient is final, so that the
    // 16-bit gradient dies there and ZeRO reduces (stage 2 and 3:
    // reduce-scatters) the f32 one right away.
    if (reduceType.isF32()) {
      OpBuilder castBuilder(getOperation().getContext());
      castBuilder.setInsertionPointAfterValue(grad);
      grad =
          CastOp::create(castBuilder, grad.getLoc(),
                         RankedTensorType::get(param.getTensorType().getShape(),
                                               castBuilder.getF32Type()),
                         grad);
    }
  }
  if (gradAccumSteps > 1) {
    // Summed where it is final, so that the micro-batch's gradient dies
    // there.
    OpBuilder accBuilder(getOperation().getContext());
    if (Operation *def = grad.getDefiningOp())
      accBuilder.setInsertionPointAfter(def);
    else
      accBuilder.setInsertionPointToStart(b.getInsertionBlock()); // entry
    grad = AccumulateGradOp::create(accBuilder, grad.getLoc(), ref, grad);
  }
  // The no-decay group: biases, norms and other vectors.
  const bool exempt =
      noDecay == NoDecay::oneD && param.getTensorType().getRank() < 2;
  const double decay = exempt ? 0.0 : weightDecay;
  if (kind == OptimizerKind::sgd) {
    FlatSymbolRefAttr buffer;
    if (momentum != 0.0) {
      auto st =
          states.declare(param, "momentum_buffer", stateType, false, after);
      if (failed(st))
        return failure();
      buffer = *st;
    }
    auto op = SGDUpdateOp::create(
        b, param.getLoc(), ref, grad, master, buffer, b.getF64FloatAttr(lr),
        b.getF64FloatAttr(momentum), b.getF64FloatAttr(dampening),
        b.getF64FloatAttr(decay), UnitAttr(), UnitAttr(), UnitAttr());
    op.setNesterov(nesterov);
    op.setNoDecay(exempt);
  } else {
    auto m = states.declare(param, "exp_avg", stateType, false, after);
    if (failed(m))
      return failure();
    auto v = states.declare(param, "exp_avg_sq", stateType, false, after);
    if (failed(v))
      return failure();
    auto op = AdamUpdateOp::create(
        b, param.getLoc(), ref, grad, master, *m, *v, b.getF64FloatAttr(lr),
        b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2),
        b.getF64FloatAttr(eps), b.getF64FloatAttr(decay), UnitAttr(),
        UnitAttr(), UnitAttr());
    op.setDecoupled(kind == OptimizerKind::adamw);
    op.setNoDecay(exempt);
  }
  return success();
}

/// Before the first update: the accumulation boundary and the checks that
/// close the gradient half of the step.
void TrainOptimizerPass::closeGradientHalf(func::FuncOp entry,
                                           func::ReturnOp ret,
                                           bool lossScaled) {
  ModuleOp module = getOperation();
  // The checks that close the gradient half of the step, placed before the
  // first update in this order: each is a chain over the gradients the
  // updates consume, started at 0 (`Chain` builds one link) and handed to
  // its op. Dynamic loss scaling (fp16): the overflow flag. Clipping: the
  // sum of squares for the global norm.
  SmallVector<OptimizerUpdateOpInterface> updates;
  entry.walk([&](OptimizerUpdateOpInterface u) { updates.push_back(u); });
  // Gradient accumulation: what follows runs once per optimizer step.
  if (!updates.empty() && gradAccumSteps > 1) {
    OpBuilder at(updates.front());
    AccumulationBoundaryOp::create(at, ret.getLoc());
    module->setAttr(kGradAccumAttr, at.getI64IntegerAttr(gradAccumSteps));
  }
  // The chains visit the gradients in the order the backward pass makes
  // them (a gradient without a defining op first), so that a later pass can
  // move each link up to its gradient (zero-offload does, to free spilled
  // gradients' device copies) without changing the sum.
  SmallVector<OptimizerUpdateOpInterface> byGradient(updates);
  {
    llvm::DenseMap<Operation *, unsigned> pos;
    for (auto [i, op] : llvm::enumerate(entry.getBody().front()))
      pos[&op] = i + 1;
    auto made = [&](OptimizerUpdateOpInterface u) -> unsigned {
      Operation *def = u.getGradient().getDefiningOp();
      return def ? pos.lookup(def) : 0;
    };
    llvm::stable_sort(byGradient, [&](auto a, auto b) {
      return made(a) < made(b);
    });
  }
  auto chainBeforeUpdates =
      [&](llvm::function_ref<Value(OpBuilder &, Location, Type, Value, Value)>
              link) -> Value {
    OpBuilder at(updates.front());
    auto scalar = RankedTensorType::get({}, at.getF32Type());
    Value acc = FillOp::create(at, ret.getLoc(), scalar,
                               at.getF64FloatAttr(0.0));
    for (OptimizerUpdateOpInterface u : byGradient)
      acc = link(at, u->getLoc(), scalar, u.getGradient(), acc);
    return acc;
  };
  if (!updates.empty() && lossScaled) {
    Value found = chainBeforeUpdates(
        [](OpBuilder &at, Location loc, Type t, Value g, Value acc) -> Value {
          return FoundNonfiniteOp::create(at, loc, t, g, acc);
        });
    OpBuilder at(updates.front());
    UpdateLossScaleOp::create(at, ret.getLoc(), found);
  }
  if (!updates.empty() && clipGradNorm > 0.0) {
    Value sum = chainBeforeUpdates(
        [](OpBuilder &at, Location loc, Type t, Value g, Value acc) -> Value {
          return GradSqNormOp::create(at, loc, t, g, acc);
        });
    OpBuilder at(updates.front());
    ClipGradNormOp::create(at, ret.getLoc(), sum,
                           at.getF64FloatAttr(clipGradNorm));
  }
}

/// The step returns the loss alone and says which optimizer it runs.
void TrainOptimizerPass::finishStep(ModuleOp module, func::FuncOp entry,
                                    func::ReturnOp ret, OpBuilder &b) {
  Value loss = ret.getOperand(0);
  func::ReturnOp::create(b, ret.getLoc(), loss);
  ret.erase();
  entry.setFunctionType(b.getFunctionType(
      entry.getFunctionType().getInputs(), {loss.getType()}));
  entry->removeAttr(kGradientsAttr);
  entry->setAttr(kStepAttr, b.getUnitAttr());
  std::string summary =
      kind == OptimizerKind::sgd
          ? llvm::formatv("sgd lr={0} momentum={1} dampening={2} "
                          "weight_decay={3} nesterov={4} no_decay={5}",
                          lr, momentum, dampening, weightDecay, (int)nesterov,
                          stringify<NoDecay>(noDecay))
                .str()
          : llvm::formatv("{0} lr={1} beta1={2} beta2={3} eps={4} "
                          "weight_decay={5} no_decay={6}",
                          stringify<OptimizerKind>(kind), lr, beta1, beta2, eps,
                          weightDecay, stringify<NoDecay>(noDecay))
                .str();
  module->setAttr(kOptimizerAttr, b.getStringAttr(summary));
}
