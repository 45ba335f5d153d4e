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
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "ztrain/Dialect/Train/IR/TrainDialect.h"

#include "ztrain/Dialect/Train/IR/TrainEnums.h.inc"

#include "ztrain/Dialect/Train/IR/TrainInterfaces.h.inc"

#define GET_OP_CLASSES
#include "ztrain/Dialect/Train/IR/TrainOps.h.inc"

namespace ztrain::train {
/// Returns the entry function of `module` (the func.func with
/// `train.entry`), or null after emitting an error at the module when
/// there is none or more than one.
mlir::func::FuncOp getEntryFunction(mlir::ModuleOp module);
} // namespace ztrain::train

#endif // ZTRAIN_DIALECT_TRAIN_IR_TRAINOPS_H
