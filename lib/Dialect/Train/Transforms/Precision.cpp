//===- Precision.cpp - train-precision ------------------------------------===//
//
// Part of the ztrain project.
//
// Mixed precision as a rewrite of the forward graph: 16-bit parameters and
// compute, casts where a value changes type, the policy recorded for
// train-optimizer (f32 master copies and moments, the reduction type).
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"
#include "ztrain/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include <cmath>

#define DEBUG_TYPE "train-precision"

namespace ztrain::train {
#define GEN_PASS_DEF_TRAINPRECISION
#include "ztrain/Dialect/Train/Transforms/Passes.h.inc"
} // namespace ztrain::train

using namespace mlir;
using namespace ztrain;
using namespace ztrain::train;

namespace {
struct TrainPrecisionPass
    : public train::impl::TrainPrecisionBase<TrainPrecisionPass> {
  using TrainPrecisionBase::TrainPrecisionBase;
  void runOnOperation() override;
  LogicalResult convertToLow(ModuleOp module, func::FuncOp entry, Type low);
};
} // namespace

/// f32, bf16 or f16 (the option's values exclude the plan search's auto).
static Type elementTypeOf(MLIRContext *ctx, Precision precision) {
  switch (precision) {
  case Precision::bf16:
    return BFloat16Type::get(ctx);
  case Precision::fp16:
    return Float16Type::get(ctx);
  default:
    return Float32Type::get(ctx);
  }
}

/// The reduction type: the parameters' (`low`) unless one is named.
static Type elementTypeOf(MLIRContext *ctx, ReduceDtype reduce, Type low) {
  switch (reduce) {
  case ReduceDtype::param:
    return low;
  case ReduceDtype::fp32:
    return Float32Type::get(ctx);
  case ReduceDtype::bf16:
    return BFloat16Type::get(ctx);
  case ReduceDtype::fp16:
    return Float16Type::get(ctx);
  }
  llvm_unreachable("unknown reduce type");
}

/// "fp32", "bf16", "fp16": the names of the options and of ztrain-compile.
static StringRef policyName(Type t) {
  return t.isF32() ? "fp32" : t.isBF16() ? "bf16" : "fp16";
}

static bool isFloatTensor(Type t) {
  auto tensor = dyn_cast<RankedTensorType>(t);
  return tensor && isa<FloatType>(tensor.getElementType());
}

static RankedTensorType withElementType(Type t, Type element) {
  return RankedTensorType::get(cast<RankedTensorType>(t).getShape(), element);
}

void TrainPrecisionPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = module.getContext();
  Type low = elementTypeOf(ctx, param);
  Type reduceType = elementTypeOf(ctx, reduce, low);
  // Loss scaling is fp16's: bf16 has fp32's exponent range.
  LossScalePolicy scaling;
  bool lossScaleGiven = initialScalePower != 16 || lossScaleWindow != 1000 ||
                        hysteresis != 2 || minLossScale != 1.0;
  if (!low.isF16() && lossScaleGiven) {
    module.emitError()
        << "train-precision: the loss-scale options (initial-scale-power, "
           "loss-scale-window, hysteresis, min-loss-scale) configure fp16's "
           "dynamic loss scaling; param="
        << stringify<Precision>(param) << " has no loss scaling";
    return signalPassFailure();
  }
  if (low.isF16()) {
    if (initialScalePower < 0 || initialScalePower > 127) {
      module.emitError() << "train-precision: initial-scale-power="
                         << static_cast<int64_t>(initialScalePower)
                         << " is not in [0, 127] (the scale 2^power must be "
                            "a finite f32)";
      return signalPassFailure();
    }
    scaling = {std::ldexp(1.0, static_cast<int>(initialScalePower)),
               lossScaleWindow, hysteresis, minLossScale};
    std::string error = checkLossScalePolicy(scaling);
    if (!error.empty()) {
      module.emitError() << "train-precision: " << error;
      return signalPassFailure();
    }
  }
  if (low.isF32()) {
    // An explicit reduction type is a mixed-precision choice: with fp32
    // parameters it could only restate the default, so it is refused as
    // the likely mistake it is (a forgotten precision).
    if (reduce != ReduceDtype::param) {
      module.emitError()
          << "train-precision: reduce=" << stringify<ReduceDtype>(reduce)
          << " needs 16-bit parameters (param=bf16 or fp16); with fp32 "
             "parameters gradients are reduced in fp32";
      return signalPassFailure();
    }
    return markAllAnalysesPreserved(); // fp32: nothing to do.
  }
  if (reduceType != low && !reduceType.isF32()) {
    module.emitError() << "train-precision: reduce="
                       << stringify<ReduceDtype>(reduce)
                       << " with param=" << stringify<Precision>(param)
                       << ": gradients are reduced in the parameters' type "
                          "or in fp32";
    return signalPassFailure();
  }
  if (auto done = module->getAttr(kPrecisionAttr)) {
    module.emitError() << "train-precision: the module already has a "
                          "precision policy: "
                       << done;
    return signalPassFailure();
  }
  func::FuncOp entry = getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  if (entry->hasAttr(kGradientsAttr) || entry->hasAttr(kStepAttr)) {
    entry.emitError() << "train-precision rewrites the forward graph: run it "
                         "before train-autodiff";
    return signalPassFailure();
  }
  if (!entry.getBody().hasOneBlock()) {
    entry.emitError() << "train-precision needs a single-block entry function";
    return signalPassFailure();
  }

  if (failed(convertToLow(module, entry, low)))
    return signalPassFailure();

  if (low.isF16())
    module->setAttr(kLossScaleAttr, lossScaleAttr(ctx, scaling));
  Builder b(ctx);
  module->setAttr(kPrecisionAttr,
                  b.getDictionaryAttr(
                      {b.getNamedAttr("param", TypeAttr::get(low)),
                       b.getNamedAttr("reduce", TypeAttr::get(reduceType))}));
}

/// The parameters and the entry function's compute in `low`: f32
/// parameters become `low`, each train op's float operands are cast to it
/// (one cast per value, before its first use) and its results retyped; the
/// loss leaves as f32.
LogicalResult TrainPrecisionPass::convertToLow(ModuleOp module,
                                               func::FuncOp entry, Type low) {
  // Parameters: f32 ones become 16-bit; a 16-bit one must already be `low`.
  for (auto p : module.getOps<ParamOp>()) {
    Type elem = p.getTensorType().getElementType();
    if (elem == low)
      continue;
    if (!elem.isF32()) {
      return p.emitError() << "parameter @" << p.getSymName() << " is " << elem
                           << " but the policy is " << policyName(low)
                           << ": declare it f32 (or " << policyName(low) << ")";
    }
    p.setType(withElementType(p.getType(), low));
  }

  Block &body = entry.getBody().front();
  SymbolTable symbols(module);
  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  // One cast per value and target type, placed before its first use.
  DenseMap<std::pair<Value, Type>, Value> casts;
  auto castTo = [&](Value v, Type element, Operation *before) -> Value {
    auto key = std::make_pair(v, element);
    if (Value done = casts.lookup(key))
      return done;
    b.setInsertionPoint(before);
    Value c = CastOp::create(b, v.getLoc(),
                             withElementType(v.getType(), element), v);
    ++numCasts;
    casts[key] = c;
    return c;
  };

  for (Operation &op : llvm::make_early_inc_range(body)) {
    if (isa<func::ReturnOp>(op)) {
      // The loss leaves the step as f32.
      OpOperand &loss = op.getOpOperand(0);
      Type elem = cast<RankedTensorType>(loss.get().getType()).getElementType();
      if (!elem.isF32())
        loss.set(castTo(loss.get(), Float32Type::get(ctx), &op));
      continue;
    }
    if (auto read = dyn_cast<ParamReadOp>(op)) {
      if (auto p = symbols.lookup<ParamOp>(read.getParam()))
        read.getResult().setType(p.getType());
      continue;
    }
    if (isa<BufferReadOp, CastOp>(op))
      continue; // buffers keep their type; a cast is already explicit
    bool hasFloat =
        llvm::any_of(op.getOperandTypes(), isFloatTensor) ||
        llvm::any_of(op.getResultTypes(), isFloatTensor);
    if (!hasFloat)
      continue;
    if (op.getDialect() != entry->getContext()->getLoadedDialect<TrainDialect>()) {
      return op.emitOpError()
             << "has floating-point tensors that train-precision "
                "cannot convert to "
             << policyName(low);
    }
    for (OpOperand &operand : op.getOpOperands()) {
      Type t = operand.get().getType();
      if (isFloatTensor(t) &&
          cast<RankedTensorType>(t).getElementType() != low)
        operand.set(castTo(operand.get(), low, &op));
    }
    // Cross-entropy's loss and attention's lse are f32 whatever the
    // element type of the rest of the op.
    for (OpResult result : op.getResults())
      if (isFloatTensor(result.getType()) && !isAlwaysF32(result))
        result.setType(withElementType(result.getType(), low));
  }
  return success();
}
