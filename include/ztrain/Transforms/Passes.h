//===- Passes.h - ztrain passes over whole compilations --------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_TRANSFORMS_PASSES_H
#define ZTRAIN_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "ztrain/OptionEnums.h"

namespace ztrain {
#define GEN_PASS_DECL
#include "ztrain/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "ztrain/Transforms/Passes.h.inc"
} // namespace ztrain

#endif // ZTRAIN_TRANSFORMS_PASSES_H
