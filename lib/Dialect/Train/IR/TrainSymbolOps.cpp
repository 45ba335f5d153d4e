//===- TrainSymbolOps.cpp - The module-level state ops' verifiers ---------===//
//
// Part of the ztrain project.
//
// train.param, train.state, train.buffer, the ops that read them and the
// optimizer updates that name them: the verifiers that resolve symbols
// (the rest are in TrainOps.cpp).
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace ztrain::train;

/// Looks up `ref` from `op` and checks that it names an `OpT` whose declared
/// tensor type is `expected` (when given). `role` names the reference in
/// messages ("parameter", "optimizer state").
template <typename OpT>
static FailureOr<OpT> verifySymbol(Operation *op,
                                   SymbolTableCollection &symbolTable,
                                   FlatSymbolRefAttr ref, Type expected,
                                   StringRef role) {
  Operation *target = symbolTable.lookupNearestSymbolFrom(op, ref);
  if (!target)
    return op->emitOpError() << "references undeclared " << role << " " << ref;
  auto typed = dyn_cast<OpT>(target);
  if (!typed)
    return op->emitOpError()
           << ref << " is a '" << target->getName() << "', not a " << role;
  if (expected && typed.getType() != expected)
    return op->emitOpError()
           << "type " << expected << " does not match " << role << " " << ref
           << " declared as " << typed.getType();
  return typed;
}

//===----------------------------------------------------------------------===//
// ParamOp, StateOp, ParamReadOp
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  if (std::string problem = nameProblem(getSymName()); !problem.empty())
    return emitOpError() << "name '" << getSymName() << "' " << problem;
  Type elem = getTensorType().getElementType();
  if (!elem.isF32() && !elem.isBF16() && !elem.isF16())
    return emitOpError() << "element type must be f32, bf16 or f16, got "
                         << elem;
  if (std::string problem = shapeProblem(getTensorType()); !problem.empty())
    return emitOpError() << "type " << problem;
  if (getInit() == InitKind::causal || getInit() == InitKind::external)
    return emitOpError() << "initializer '" << stringifyInitKind(getInit())
                         << "' is for buffers (train.buffer), not parameters";
  bool needsScale =
      getInit() == InitKind::normal || getInit() == InitKind::uniform;
  std::optional<double> scale;
  if (getScaleAttr())
    scale = getScaleAttr().getValueAsDouble();
  if (needsScale && (!scale || !(*scale > 0.0) || std::isinf(*scale))) {
    auto diag = emitOpError()
                << "initializer '" << stringifyInitKind(getInit())
                << "' needs a positive scale (finite), e.g. init("
                << stringifyInitKind(getInit()) << ", 0.02)";
    if (scale)
      diag << "; got " << *scale;
    return diag;
  }
  if (!needsScale && scale)
    return emitOpError() << "initializer '" << stringifyInitKind(getInit())
                         << "' takes no scale";
  return success();
}

LogicalResult BufferOp::verify() {
  if (std::string problem = nameProblem(getSymName()); !problem.empty())
    return emitOpError() << "name '" << getSymName() << "' " << problem;
  Type elem = getTensorType().getElementType();
  if (!elem.isF32() && !elem.isInteger(32))
    return emitOpError() << "element type must be f32 or i32, got " << elem;
  if (std::string problem = shapeProblem(getTensorType()); !problem.empty())
    return emitOpError() << "type " << problem;
  InitKind init = getInit();
  bool needsScale = init == InitKind::normal || init == InitKind::uniform;
  std::optional<double> scale;
  if (getScaleAttr())
    scale = getScaleAttr().getValueAsDouble();
  if (needsScale && !elem.isF32())
    return emitOpError() << "initializer '" << stringifyInitKind(init)
                         << "' needs an f32 buffer, got " << elem;
  if (needsScale && (!scale || !(*scale > 0.0) || std::isinf(*scale))) {
    auto diag = emitOpError() << "initializer '" << stringifyInitKind(init)
                              << "' needs a positive scale (finite), e.g. init("
                              << stringifyInitKind(init) << ", 0.02)";
    if (scale)
      diag << "; got " << *scale;
    return diag;
  }
  if (!needsScale && scale)
    return emitOpError() << "initializer '" << stringifyInitKind(init)
                         << "' takes no scale";
  if (init == InitKind::causal && getTensorType().getRank() < 2)
    return emitOpError() << "initializer 'causal' needs rank >= 2, got "
                         << getTensorType();
  return success();
}

LogicalResult
BufferReadOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifySymbol<BufferOp>(*this, symbolTable, getBufferAttr(),
                                getResult().getType(), "buffer");
}

/// Whether `type` is a bf16 or f16 tensor: a parameter that may have an f32
/// master copy and f32 optimizer states.
static bool isLowPrecision(Type type) {
  Type elem = cast<RankedTensorType>(type).getElementType();
  return elem.isBF16() || elem.isF16();
}

/// `type` with an f32 element type.
static RankedTensorType asF32(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return RankedTensorType::get(tensor.getShape(),
                               Float32Type::get(type.getContext()));
}

LogicalResult
StateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param = verifySymbol<ParamOp>(*this, symbolTable, getParamAttr(),
                                     Type(), "parameter");
  if (failed(param))
    return failure();
  if (param->getFrozen())
    return emitOpError() << "is a state of " << getParamAttr()
                         << ", which is frozen (not trained: no optimizer "
                            "state)";
  Type paramType = param->getType();
  bool low = isLowPrecision(paramType);
  if (getMaster() && !low)
    return emitOpError() << "is a master copy of " << getParamAttr()
                         << ", which is " << paramType
                         << "; master copies are for bf16 and f16 "
                            "parameters";
  if (getMaster() && getType() != asF32(paramType))
    return emitOpError() << "master copy of " << getParamAttr()
                         << " must be " << asF32(paramType) << ", got "
                         << getType();
  if (getType() != paramType && !(low && getType() == asF32(paramType)))
    return emitOpError() << "type " << getType() << " does not match parameter "
                         << getParamAttr() << " declared as " << paramType
                         << (low ? " (or its f32 form)" : "");
  return success();
}

LogicalResult
ParamReadOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifySymbol<ParamOp>(*this, symbolTable, getParamAttr(),
                               getResult().getType(), "parameter");
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

/// Checks that `state` is a train.state of `param` of type `type` (the
/// parameter's, or its master copy's with a master), and not the master.
static LogicalResult verifyState(Operation *op,
                                 SymbolTableCollection &symbolTable,
                                 FlatSymbolRefAttr state,
                                 FlatSymbolRefAttr param, Type type) {
  auto st =
      verifySymbol<StateOp>(op, symbolTable, state, type, "optimizer state");
  if (failed(st))
    return failure();
  if (st->getParamAttr() != param)
    return op->emitOpError() << "state " << state << " belongs to "
                             << st->getParamAttr() << ", not " << param;
  if (st->getMaster())
    return op->emitOpError() << "state " << state
                             << " is a master copy, not a moment";
  return success();
}

/// The parameter an update names, with its gradient's type checked: the
/// parameter's shape (or a 1-D slice when the update is sharded) and its
/// element type, or f32 when the update has a master copy (which is checked
/// too). Returns the type of the update's states: the parameter's, or the
/// master's f32 type.
static FailureOr<Type> verifyUpdateGrad(Operation *op,
                                        SymbolTableCollection &symbolTable,
                                        FlatSymbolRefAttr param, Value grad,
                                        FlatSymbolRefAttr master,
                                        bool sharded) {
  auto p = verifySymbol<ParamOp>(op, symbolTable, param, Type(), "parameter");
  if (failed(p))
    return failure();
  if (p->getFrozen())
    return op->emitOpError()
           << "updates " << param << ", which is frozen (not trained)";
  auto gradType = cast<RankedTensorType>(grad.getType());
  auto paramType = p->getTensorType();
  if (!sharded && gradType.getShape() != paramType.getShape())
    return op->emitOpError() << "type " << grad.getType()
                             << " does not match parameter " << param
                             << " declared as " << paramType;
  Type gradElement = gradType.getElementType();
  Type paramElement = paramType.getElementType();
  if (gradElement != paramElement && !(master && gradElement.isF32()))
    return op->emitOpError() << "gradient element type " << gradElement
                             << " differs from parameter " << param
                             << "'s element type " << paramElement
                             << (master ? " (and is not f32)" : "");
  if (sharded && gradType.getRank() != 1)
    return op->emitOpError() << "a sharded update takes a one-dimensional "
                                "gradient slice, got "
                             << grad.getType();
  if (!master)
    return Type(paramType);
  auto st = verifySymbol<StateOp>(op, symbolTable, master, Type(),
                                  "optimizer state");
  if (failed(st))
    return failure();
  if (st->getParamAttr() != param || !st->getMaster())
    return op->emitOpError() << "master " << master
                             << " is not the master copy of " << param;
  return st->getType();
}

LogicalResult
SGDUpdateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<Type> type =
      verifyUpdateGrad(*this, symbolTable, getParamAttr(), getGrad(),
                       getMasterAttr(), getSharded());
  if (failed(type))
    return failure();
  if (getNoDecay() && getWeightDecay().convertToDouble() != 0.0)
    return emitOpError() << "is in the no-decay group but has weight_decay "
                         << getWeightDecay().convertToDouble();
  bool hasMomentum = getMomentum().convertToDouble() != 0.0;
  if (hasMomentum != (bool)getMomentumBufferAttr())
    return emitOpError() << (hasMomentum ? "momentum needs a momentum_buffer"
                                         : "momentum_buffer given but "
                                           "momentum is 0");
  if (getMomentumBufferAttr())
    return verifyState(*this, symbolTable, getMomentumBufferAttr(),
                       getParamAttr(), *type);
  return success();
}

LogicalResult
AdamUpdateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<Type> type =
      verifyUpdateGrad(*this, symbolTable, getParamAttr(), getGrad(),
                       getMasterAttr(), getSharded());
  if (failed(type))
    return failure();
  if (getNoDecay() && getWeightDecay().convertToDouble() != 0.0)
    return emitOpError() << "is in the no-decay group but has weight_decay "
                         << getWeightDecay().convertToDouble();
  if (failed(verifyState(*this, symbolTable, getExpAvgAttr(), getParamAttr(),
                         *type)) ||
      failed(verifyState(*this, symbolTable, getExpAvgSqAttr(),
                         getParamAttr(), *type)))
    return failure();
  return success();
}
