//===- LowerToRuntime.cpp - lower-to-runtime ------------------------------===//
//
// Part of the ztrain project.
//
// Lowers a complete training step to ztrain_step(ctx), a straight-line
// sequence of ztrt_* runtime calls on opaque buffer pointers, and embeds the
// descriptor the runtime's main() reads. This file only checks the step,
// collects the patterns and walks the ops in order; the lowering itself is
// in the patterns (TrainPatterns.cpp, DistToRuntime/DistPatterns.cpp), the
// addressing in StepMemory.cpp, the ABI in RuntimeCalls.cpp and the
// descriptor in Descriptor.cpp (see StepLowering.h).
//
//===----------------------------------------------------------------------===//

#include "ztrain/Conversion/DistToRuntime/DistToRuntime.h"
#include "ztrain/Conversion/Passes.h"
#include "ztrain/Conversion/TrainToRuntime/StepLowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#define DEBUG_TYPE "lower-to-runtime"

namespace ztrain {
#define GEN_PASS_DEF_LOWERTORUNTIME
#include "ztrain/Conversion/Passes.h.inc"
} // namespace ztrain

using namespace mlir;
using namespace ztrain;
using namespace ztrain::train;

namespace {

/// The patterns by the op they lower; interface patterns are tried in
/// order for the ops no op pattern names.
class PatternSet {
public:
  PatternSet() {
    populateTrainToRuntimePatterns(all);
    populateDistToRuntimePatterns(all);
    for (const auto &p : all) {
      if (std::optional<TypeID> kind = p->rootKind())
        byOp[*kind] = p.get();
      else
        byInterface.push_back(p.get());
    }
  }
  const RuntimePattern *lookup(Operation *op) const {
    std::optional<RegisteredOperationName> name =
        op->getName().getRegisteredInfo();
    if (name)
      if (const RuntimePattern *p = byOp.lookup(name->getTypeID()))
        return p;
    for (const RuntimePattern *p : byInterface)
      if (p->matches(op))
        return p;
    return nullptr;
  }

private:
  RuntimePatternList all;
  DenseMap<TypeID, const RuntimePattern *> byOp;
  SmallVector<const RuntimePattern *> byInterface;
};

struct LowerToRuntimePass
    : public ztrain::impl::LowerToRuntimeBase<LowerToRuntimePass> {
  using LowerToRuntimeBase::LowerToRuntimeBase;
  void runOnOperation() override;
  LogicalResult lowerStep(func::FuncOp entry, const std::string &descriptor);
  /// Lowers `fn` into `name`(ctx), a function of runtime calls, and erases
  /// `fn`.
  LogicalResult lowerFunction(func::FuncOp fn, StringRef name);

  int64_t stage = 0;
  int64_t gridSize = 1;
  /// The ranks and their groups (every rank one group without a mesh).
  dist::MeshLayout mesh;
  /// This run's generated kernels (runOnOperation's).
  FusedKernels *fusedKernels = nullptr;
};

} // namespace

void LowerToRuntimePass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp entry = getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  if (!entry->hasAttr(kStepAttr)) {
    entry.emitError() << "@" << entry.getSymName()
                      << " is not a training step yet: run train-autodiff "
                         "and train-optimizer (the ztrain-training pipeline) "
                         "first";
    return signalPassFailure();
  }

  // A partitioned step runs on gridSize ranks; the runtime checks the
  // launch matches.
  if (auto zero = module->getAttrOfType<dist::ZeroAttr>(dist::kZeroAttr)) {
    stage = zero.getStage();
    SymbolTableCollection symbols;
    FailureOr<int64_t> n = dist::getGridSize(module, zero.getGrid(), symbols);
    if (failed(n))
      return signalPassFailure();
    gridSize = *n;
    FailureOr<dist::MeshLayout> layout = dist::getMeshLayout(module, symbols);
    if (failed(layout))
      return signalPassFailure();
    mesh = *layout;
    // Without its collectives a partitioned step would silently train N
    // diverging replicas.
    WalkResult missing = entry.walk([&](OptimizerUpdateOpInterface update) {
      // Stages 2 and 3 accumulate reduced gradients.
      Value grad = update.getGradient();
      if (auto acc = grad.getDefiningOp<AccumulateGradOp>())
        grad = acc.getInput();
      if (gridSize > 1 &&
          !isa_and_nonnull<dist::CollectiveOpInterface, dist::WaitOp>(
              grad.getDefiningOp())) {
        update->emitError() << "the gradient of this update is not "
                               "synchronized over the grid: run "
                               "zero-insert-collectives first";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (missing.wasInterrupted())
      return signalPassFailure();
  }

  FailureOr<std::string> descriptor =
      buildDescriptor(module, entry, stage, mesh);
  if (failed(descriptor))
    return signalPassFailure();
  const int64_t planned = plannedStepBytes(module, entry, stage, gridSize);
  func::FuncOp eval = getEvalFunction(module);
  func::FuncOp logits = getLogitsFunction(module);
  FusedKernels kernels(module);
  fusedKernels = &kernels;
  if (failed(lowerStep(entry, *descriptor)))
    return signalPassFailure();
  // The evaluation and the logits (forward only), into the same arenas.
  if (eval && failed(lowerFunction(eval, "ztrain_eval")))
    return signalPassFailure();
  if (logits && failed(lowerFunction(logits, "ztrain_logits")))
    return signalPassFailure();
  numFusedKernels += fusedKernels->size();
  // What one rank will allocate, for tools (ztrain-compile --device-memory).
  module->setAttr("ztrain.planned_bytes",
                  IntegerAttr::get(IntegerType::get(module.getContext(), 64),
                                   planned));

  // The declarations and the grid now live in the descriptor.
  for (Operation &op : llvm::make_early_inc_range(module.getOps()))
    if (isa<ParamOp, StateOp, BufferOp, shard::GridOp>(op))
      op.erase();
  module->removeAttr(kOptimizerAttr);
  module->removeAttr(kGradAccumAttr);
  module->removeAttr(dist::kZeroAttr);
  module->removeAttr(dist::kMeshAttr);
  module->removeAttr(dist::kHpzAttr);
  module->removeAttr(dist::kArenasAttr);
  module->removeAttr("dist.max_live_bytes");
}

LogicalResult LowerToRuntimePass::lowerStep(func::FuncOp entry,
                                            const std::string &descriptor) {
  ModuleOp module = getOperation();
  MLIRContext *mctx = module.getContext();
  OpBuilder b(mctx);

  if (module.lookupSymbol("ztrain_step") ||
      module.lookupSymbol("ztrain_eval") ||
      module.lookupSymbol("ztrain_logits") ||
      module.lookupSymbol("ztrain_descriptor")) {
    module.emitError() << "the symbols ztrain_step, ztrain_eval and "
                          "ztrain_descriptor are reserved for the lowered "
                          "step";
    return failure();
  }

  b.setInsertionPointToEnd(module.getBody());
  std::string withNul = descriptor + '\0';
  auto strTy =
      LLVM::LLVMArrayType::get(IntegerType::get(mctx, 8), withNul.size());
  LLVM::GlobalOp::create(b, entry.getLoc(), strTy, /*isConstant=*/true,
                         LLVM::Linkage::External, "ztrain_descriptor",
                         b.getStringAttr(withNul));
  return lowerFunction(entry, "ztrain_step");
}

LogicalResult LowerToRuntimePass::lowerFunction(func::FuncOp entry,
                                                StringRef name) {
  ModuleOp module = getOperation();
  MLIRContext *mctx = module.getContext();
  auto ptrTy = LLVM::LLVMPointerType::get(mctx);
  OpBuilder b(mctx);
  b.setInsertionPointToEnd(module.getBody());
  auto step = LLVM::LLVMFuncOp::create(
      b, entry.getLoc(), name,
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(mctx), {ptrTy}));
  Block *block = step.addEntryBlock(b);
  b.setInsertionPointToStart(block);
  RuntimeCalls rt(module, b, step.getArgument(0));
  if (name != "ztrain_step")
    rt.arrayPrefix = ("__" + name + "_i64_").str();
  StepLowering s(module, entry, rt, stage, gridSize);
  s.mesh = mesh;
  if (mesh.replicateGrid)
    rt.shardGroup = mesh.shard;
  s.fusedKernels = fusedKernels;

  Block &body = entry.getBody().front();
  for (BlockArgument arg : entry.getArguments())
    s.bind(arg, rt.call("input", {rt.i64(arg.getArgNumber())}));
  // The loss is reported as soon as it exists (here: it is an input); the
  // logits function hands its result over at the end instead.
  const bool output = entry->hasAttr(kLogitsAttr);
  if (output)
    s.reportLoss = false;
  Value loss = body.getTerminator()->getOperand(0);
  if (!output && isa<BlockArgument>(loss))
    rt.call("set_loss", {s.get(loss)});

  static const PatternSet patterns;
  for (Operation &op : body) {
    rt.loc = op.getLoc();
    const RuntimePattern *pattern = patterns.lookup(&op);
    if (!pattern)
      return op.emitOpError() << "cannot be lowered to the ztrain runtime";
    if (failed(pattern->lower(&op, s)))
      return failure();
    s.finishOp(op);
  }
  if (!s.planOk())
    return failure();
  if (output) {
    FailureOr<int32_t> code =
        dtypeCode(entry, cast<RankedTensorType>(loss.getType()).getElementType());
    if (failed(code))
      return failure();
    rt.call("set_output", {rt.i32(*code), s.get(loss), rt.i64(numElements(loss))});
  }
  LLVM::ReturnOp::create(b, entry.getLoc(), ValueRange());
  numCalls += rt.calls;
  numBuffers += s.numBuffers;
  entry.erase();
  return success();
}
