//===- InitAll.cpp - Register everything ztrain provides ------------------===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#include "ztrain/InitAll.h"
#include "ztrain/Conversion/Passes.h"
#include "ztrain/Dialect/Dist/IR/DistDialect.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainDialect.h"
#include "ztrain/Dialect/Train/Transforms/Passes.h"
#include "ztrain/Pipelines.h"
#include "ztrain/Transforms/Passes.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Transforms/Passes.h"

void ztrain::registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<train::TrainDialect, dist::DistDialect,
                  mlir::shard::ShardDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::LLVM::LLVMDialect,
                  mlir::scf::SCFDialect>();
  mlir::arith::registerConvertArithToLLVMInterface(registry);
  mlir::registerConvertFuncToLLVMInterface(registry);
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
}

void ztrain::registerAllPasses() {
  train::registerTrainPasses();
  dist::registerDistPasses();
  registerConversionPasses();
  registerPipelines();
  registerZTrainPasses();
  // The upstream passes our pipelines use, so that every stage can be
  // reproduced with ztrain-opt alone.
  mlir::registerCSEPass();
  mlir::registerCanonicalizerPass();
  mlir::registerArithToLLVMConversionPass();
  mlir::registerConvertFuncToLLVMPass();
  mlir::registerReconcileUnrealizedCastsPass();
}
