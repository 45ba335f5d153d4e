//===- InitAll.h - Register everything ztrain provides ----------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//
//
// The one registration hub used by every tool: ztrain's dialects, passes
// and pipelines, plus the upstream dialects and passes the pipelines use.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_INITALL_H
#define ZTRAIN_INITALL_H

#include "mlir/IR/DialectRegistry.h"

namespace ztrain {
void registerAllDialects(mlir::DialectRegistry &registry);
void registerAllPasses();
} // namespace ztrain

#endif // ZTRAIN_INITALL_H
