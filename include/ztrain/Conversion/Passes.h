//===- Passes.h - ztrain conversion passes ----------------------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_CONVERSION_PASSES_H
#define ZTRAIN_CONVERSION_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace ztrain {
#define GEN_PASS_DECL
#include "ztrain/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "ztrain/Conversion/Passes.h.inc"
} // namespace ztrain

#endif // ZTRAIN_CONVERSION_PASSES_H
