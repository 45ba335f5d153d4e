//===- Passes.h - ZeRO passes -----------------------------------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_TRANSFORMS_PASSES_H
#define ZTRAIN_DIALECT_DIST_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "ztrain/Dialect/Dist/IR/DistDialect.h"

namespace ztrain::dist {
#define GEN_PASS_DECL
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace ztrain::dist

#endif // ZTRAIN_DIALECT_DIST_TRANSFORMS_PASSES_H
