//===- TrainDialect.cpp - The train dialect -------------------------------===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainDialect.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace ztrain::train;

#include "ztrain/Dialect/Train/IR/TrainDialect.cpp.inc"
#include "ztrain/Dialect/Train/IR/TrainEnums.cpp.inc"
#include "ztrain/Dialect/Train/IR/TrainInterfaces.cpp.inc"

void TrainDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ztrain/Dialect/Train/IR/TrainOps.cpp.inc"
      >();
}

LogicalResult TrainDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (attr.getName() != kLossScaleAttr)
    return success();
  auto module = dyn_cast<ModuleOp>(op);
  if (!module)
    return op->emitOpError() << kLossScaleAttr << " belongs on a module";
  // Emits the located error itself.
  return failure(failed(getLossScalePolicy(module)));
}
