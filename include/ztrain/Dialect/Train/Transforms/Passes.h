//===- Passes.h - train dialect passes --------------------------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_TRAIN_TRANSFORMS_PASSES_H
#define ZTRAIN_DIALECT_TRAIN_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "ztrain/Dialect/Train/IR/TrainDialect.h"
#include "ztrain/OptionEnums.h"

namespace ztrain::train {
#define GEN_PASS_DECL
#include "ztrain/Dialect/Train/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "ztrain/Dialect/Train/Transforms/Passes.h.inc"
} // namespace ztrain::train

#endif // ZTRAIN_DIALECT_TRAIN_TRANSFORMS_PASSES_H
