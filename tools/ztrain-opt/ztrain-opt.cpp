//===- ztrain-opt.cpp - ztrain's mlir-opt ---------------------------------===//
//
// Part of the ztrain project.
//
// Runs any ztrain pass or named pipeline alone, with mlir-opt conventions.
//
//===----------------------------------------------------------------------===//

#include "ztrain/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  ztrain::registerAllDialects(registry);
  ztrain::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "ztrain optimizer driver\n", registry));
}
