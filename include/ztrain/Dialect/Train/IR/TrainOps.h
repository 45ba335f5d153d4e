//===- TrainOps.h - train dialect operations --------------------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_TRAIN_IR_TRAINOPS_H
#define ZTRAIN_DIALECT_TRAIN_IR_TRAINOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "ztrain/Dialect/Train/IR/ElementType.h"
#include "ztrain/Dialect/Train/IR/KernelCall.h"
#include "ztrain/Dialect/Train/IR/TrainDialect.h"

#include "ztrain/Dialect/Train/IR/TrainEnums.h.inc"

namespace ztrain::train {
class ElementBuilder; // ElementBuilder.h: FusibleOpInterface's rules
} // namespace ztrain::train

#include "ztrain/Dialect/Train/IR/TrainInterfaces.h.inc"

namespace ztrain::train {
/// Positive dimensions, and element and byte counts that fit in int64, for
/// every tensor operand and result of `op`.
mlir::LogicalResult verifyTensorShapes(mlir::Operation *op);
/// One element type for the floating-point tensors of `op`; the 0-d f32
/// loss of cross_entropy (and its adjoint seed) are exempt.
mlir::LogicalResult verifySameFloatElementType(mlir::Operation *op);
/// True for a value that is f32 whatever its op's element type (a
/// cross-entropy loss, attention's lse): train-precision leaves its type.
bool isAlwaysF32(mlir::Value v);
/// What is wrong with a tensor type's shape (a zero-size dimension, a byte
/// size that overflows int64), or "" when nothing is.
std::string shapeProblem(mlir::RankedTensorType type);

/// What is wrong with the name of a parameter, state, buffer or input (it
/// becomes a key of data files and checkpoints): "" when nothing is, else
/// "must be non-empty and contain no whitespace or control characters".
std::string nameProblem(llvm::StringRef name);

/// The element count of a static shape, or nullopt when it overflows
/// int64 (also counting `elementBytes` bytes per element).
std::optional<int64_t> checkedElementCount(llvm::ArrayRef<int64_t> shape,
                                           int64_t elementBytes = 1);

template <typename ConcreteType>
class ValidTensorShapes
    : public mlir::OpTrait::TraitBase<ConcreteType, ValidTensorShapes> {
public:
  static mlir::LogicalResult verifyTrait(mlir::Operation *op) {
    return verifyTensorShapes(op);
  }
};

/// An error at `op` for each attribute that is neither one of its op's
/// own nor a dialect attribute (a name with a dot), naming the op's own
/// (and the nearest, when one is a likely misspelling).
mlir::LogicalResult verifyKnownAttributes(mlir::Operation *op);

template <typename ConcreteType>
class KnownAttributes
    : public mlir::OpTrait::TraitBase<ConcreteType, KnownAttributes> {
public:
  static mlir::LogicalResult verifyTrait(mlir::Operation *op) {
    return verifyKnownAttributes(op);
  }
};

template <typename ConcreteType>
class SameFloatElementType
    : public mlir::OpTrait::TraitBase<ConcreteType, SameFloatElementType> {
public:
  static mlir::LogicalResult verifyTrait(mlir::Operation *op) {
    return verifySameFloatElementType(op);
  }
};
} // namespace ztrain::train

#define GET_OP_CLASSES
#include "ztrain/Dialect/Train/IR/TrainOps.h.inc"

/// Helpers of the gradient rules (TrainOps.td's `let gradient` bodies and
/// TrainGradients.cpp).
namespace ztrain::train::grad {
/// `x * factor` as a train.scale.
mlir::Value scaleBy(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                    double factor);
/// The dims [0, n).
llvm::SmallVector<int64_t> leadingDims(int64_t n);
} // namespace ztrain::train::grad

namespace ztrain::train {
/// Returns the entry function of `module` (the func.func with
/// `train.entry`), or null after emitting an error at the module when
/// there is none or more than one.
mlir::func::FuncOp getEntryFunction(mlir::ModuleOp module);

/// The element type of each parameter's gradient as its optimizer update
/// consumes it (the type of its persistent gradient buffer): the
/// parameter's own, or f32 when mixed precision reduces in f32. Parameters
/// without an update (before train-optimizer) are absent.
llvm::DenseMap<mlir::StringAttr, mlir::Type>
gradientElementTypes(mlir::func::FuncOp entry);

/// The forward-only evaluation function (`train.eval`), or null when the
/// module has none.
mlir::func::FuncOp getEvalFunction(mlir::ModuleOp module);
/// The forward function that returns the logits (`train.logits`), or null.
mlir::func::FuncOp getLogitsFunction(mlir::ModuleOp module);
/// The forward-only functions compiled next to the step: evaluation and
/// logits, those that exist.
llvm::SmallVector<mlir::func::FuncOp, 2>
getForwardFunctions(mlir::ModuleOp module);

/// The arithmetic of one matrix product as MFU counts it: 2 M N K (times
/// its batch).
int64_t matmulFlops(MatmulOp op);

/// The matrix-product arithmetic of a compute op: `model`, as MFU counts
/// the model's work (a matmul's 2 M N K; attention's products as the
/// composed form counts them, 4 heads Tq Tk D forward, 8 backward), and
/// `recomputed`, products the op's kernel repeats that are not the model's
/// work (attention's backward recomputes q k^T: 2 heads Tq Tk D). Both 0
/// for ops that are no matrix product.
struct OpFlops {
  int64_t model = 0, recomputed = 0;
  explicit operator bool() const { return model || recomputed; }
};
OpFlops opFlops(mlir::Operation *op);

/// The step's train.accumulation_boundary, or null when it accumulates no
/// gradients.
AccumulationBoundaryOp getAccumulationBoundary(mlir::func::FuncOp entry);

/// The dynamic loss scaling policy of a module (`train.loss_scale`).
struct LossScalePolicy {
  double init = 65536.0;
  int64_t window = 1000;
  int64_t hysteresis = 2;
  double min = 1.0;
};
/// The policy, std::nullopt when the module has none, or failure (after an
/// error at the module) when the attribute is malformed or out of range.
mlir::FailureOr<std::optional<LossScalePolicy>>
getLossScalePolicy(mlir::ModuleOp module);
/// The attribute that records `policy`.
mlir::DictionaryAttr lossScaleAttr(mlir::MLIRContext *ctx,
                                   const LossScalePolicy &policy);
/// The error, if any, in a policy's numbers (empty when valid).
std::string checkLossScalePolicy(const LossScalePolicy &policy);
} // namespace ztrain::train

#endif // ZTRAIN_DIALECT_TRAIN_IR_TRAINOPS_H
