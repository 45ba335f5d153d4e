//===- TrainPatterns.cpp - train ops to runtime calls ---------------------===//
//
// Part of the ztrain project.
//
// Compute ops lower through the kernel call they describe
// (RuntimeKernelOpInterface): no case per op here. What is left are the ops
// whose lowering is about memory, not a kernel: parameter reads and
// reshapes (views), and optimizer updates, which address the parameter's
// and its states' storage under the ZeRO plan
// (OptimizerUpdateOpInterface).
//
//===----------------------------------------------------------------------===//

#include "ztrain/Conversion/TrainToRuntime/StepLowering.h"

using namespace mlir;
using namespace ztrain;
using namespace ztrain::train;

namespace {

/// Any op that describes its runtime kernel call.
struct KernelPattern : RuntimePattern {
  bool matches(Operation *op) const override {
    return isa<RuntimeKernelOpInterface>(op);
  }
  LogicalResult lower(Operation *op, StepLowering &s) const override {
    return emitKernelCall(op,
                          cast<RuntimeKernelOpInterface>(op).getKernelCall(),
                          s);
  }
};

struct ParamReadPattern : OpRuntimePattern<ParamReadOp> {
  LogicalResult lower(ParamReadOp op, StepLowering &s) const override {
    if (s.gridSize > 1 &&
        s.paramOp(op.getParam())->hasAttr(dist::kPartitionAttr))
      return op.emitOpError() << "reads a parameter partitioned at rest; run "
                                 "zero-insert-collectives (it gathers it)";
    s.bind(op.getResult(), s.param(op.getParam()));
    return success();
  }
};

/// A view of its operand, unless its result must land in a gradient
/// buffer: then a copy.
struct ReshapePattern : OpRuntimePattern<ReshapeOp> {
  LogicalResult lower(ReshapeOp op, StepLowering &s) const override {
    if (!s.buffers().gradientOf(op.getResult())) {
      s.bind(op.getResult(), s.get(op.getInput()));
      return success();
    }
    Value x = s.get(op.getInput());
    s.rt.call("copy", {x, s.alloc(op.getResult()),
                       s.rt.i64(tensorBytes(op.getType()))});
    return success();
  }
};

/// ztrt_<kernel>(param, grad, states..., n, hyper-parameters...): the
/// parameter (or this rank's slice of it) and its states are updated in
/// place.
struct UpdatePattern : RuntimePattern {
  bool matches(Operation *op) const override {
    return isa<OptimizerUpdateOpInterface>(op);
  }
  LogicalResult lower(Operation *op, StepLowering &s) const override {
    auto update = cast<OptimizerUpdateOpInterface>(op);
    KernelCall kernel = update.getUpdateKernel();
    FailureOr<RuntimeKernel> name =
        typedKernel(op, kernel.kernel, kernel.elementType);
    if (failed(name))
      return failure();
    Value grad = update.getGradient();
    int64_t n = numElements(grad);
    SmallVector<Value> args{
        s.updatedParam(update.getUpdatedParam().getValue(),
                       update.isSharded(), n),
        s.get(grad)};
    for (FlatSymbolRefAttr state : update.getUpdatedStates())
      args.push_back(s.state(state));
    args.push_back(s.rt.i64(n));
    for (const KernelArg &hyper : kernel.args)
      args.push_back(hyper.kind == KernelArg::F64
                         ? s.rt.f64(hyper.f)
                         : s.rt.i32(static_cast<int32_t>(hyper.i)));
    name->call(s.rt, args);
    return success();
  }
};

struct ReturnPattern : OpRuntimePattern<func::ReturnOp> {
  LogicalResult lower(func::ReturnOp, StepLowering &) const override {
    return success();
  }
};

} // namespace

void ztrain::populateTrainToRuntimePatterns(RuntimePatternList &patterns) {
  patterns.push_back(std::make_unique<KernelPattern>());
  patterns.push_back(std::make_unique<ParamReadPattern>());
  patterns.push_back(std::make_unique<ReshapePattern>());
  patterns.push_back(std::make_unique<UpdatePattern>());
  patterns.push_back(std::make_unique<ReturnPattern>());
}
