//===- FinalizeLLVM.cpp - The lowered module, all LLVM dialect ------------===//
//
// Part of the ztrain project. See FinalizeLLVM in Conversion/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Conversion/Passes.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Pass/PassManager.h"

namespace ztrain {
#define GEN_PASS_DEF_FINALIZELLVM
#include "ztrain/Conversion/Passes.h.inc"
} // namespace ztrain

using namespace mlir;

namespace {

struct FinalizeLLVMPass
    : public ztrain::impl::FinalizeLLVMBase<FinalizeLLVMPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<arith::ConstantOp> constants;
    bool other = false;
    module.getBody()->walk([&](Operation *op) {
      if (auto c = dyn_cast<arith::ConstantOp>(op))
        constants.push_back(c);
      else if (!isa<LLVM::LLVMDialect>(op->getDialect()))
        other = true;
    });
    if (other) {
      OpPassManager pm(ModuleOp::getOperationName());
      pm.addPass(createArithToLLVMConversionPass());
      pm.addPass(createConvertFuncToLLVMPass());
      pm.addPass(createReconcileUnrealizedCastsPass());
      if (failed(runPipeline(pm, module)))
        signalPassFailure();
      return;
    }
    for (arith::ConstantOp c : constants) {
      OpBuilder b(c);
      auto value = cast<TypedAttr>(c.getValue());
      Value llvmConstant =
          LLVM::ConstantOp::create(b, c.getLoc(), value.getType(), value);
      c.replaceAllUsesWith(llvmConstant);
      c.erase();
    }
    numConstants += constants.size();
  }
};

} // namespace
