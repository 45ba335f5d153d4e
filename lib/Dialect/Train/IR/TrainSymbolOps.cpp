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
  if (!getTensorType().getElementType().isF32())
    return emitOpError() << "element type must be f32, got "
                         << getTensorType().getElementType();
  if (std::string problem = shapeProblem(getTensorType()); !problem.empty())
    return emitOpError() << "type " << problem;
  if (getInit() == InitKind::causal)
    return emitOpError() << "initializer 'causal' is for buffers "
                            "(train.buffer), not parameters";
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

LogicalResult
StateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifySymbol<ParamOp>(*this, symbolTable, getParamAttr(), getType(),
                               "parameter");
}

LogicalResult
ParamReadOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifySymbol<ParamOp>(*this, symbolTable, getParamAttr(),
                               getResult().getType(), "parameter");
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

/// Checks that `state` is a train.state of `param` with the parameter's type.
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
  return success();
}

/// The parameter an update names, with its gradient's type checked: the
/// parameter's own type, or a 1-D slice when the update is sharded. Returns
/// the parameter's declared type (the states' type).
static FailureOr<Type> verifyUpdateGrad(Operation *op,
                                        SymbolTableCollection &symbolTable,
                                        FlatSymbolRefAttr param, Value grad,
                                        bool sharded) {
  auto p = verifySymbol<ParamOp>(op, symbolTable, param,
                                 sharded ? Type() : grad.getType(),
                                 "parameter");
  if (failed(p))
    return failure();
  Type gradElement = cast<RankedTensorType>(grad.getType()).getElementType();
  Type paramElement = cast<RankedTensorType>(p->getType()).getElementType();
  if (gradElement != paramElement)
    return op->emitOpError() << "gradient element type " << gradElement
                             << " differs from parameter " << param
                             << "'s element type " << paramElement;
  if (sharded && cast<RankedTensorType>(grad.getType()).getRank() != 1)
    return op->emitOpError() << "a sharded update takes a one-dimensional "
                                "gradient slice, got "
                             << grad.getType();
  return p->getType();
}

LogicalResult
SGDUpdateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<Type> type = verifyUpdateGrad(*this, symbolTable, getParamAttr(),
                                          getGrad(), getSharded());
  if (failed(type))
    return failure();
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
  FailureOr<Type> type = verifyUpdateGrad(*this, symbolTable, getParamAttr(),
                                          getGrad(), getSharded());
  if (failed(type))
    return failure();
  if (failed(verifyState(*this, symbolTable, getExpAvgAttr(), getParamAttr(),
                         *type)) ||
      failed(verifyState(*this, symbolTable, getExpAvgSqAttr(),
                         getParamAttr(), *type)))
    return failure();
  return success();
}
