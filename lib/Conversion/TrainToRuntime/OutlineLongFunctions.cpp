//===- OutlineLongFunctions.cpp - Bounded functions for code generation ---===//
//
// Part of the ztrain project. See OutlineLongFunctions in
// Conversion/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Conversion/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/IRMapping.h"

#include "llvm/ADT/SetVector.h"

#include <functional>
#include <vector>

namespace ztrain {
#define GEN_PASS_DEF_OUTLINELONGFUNCTIONS
#include "ztrain/Conversion/Passes.h.inc"
} // namespace ztrain

using namespace mlir;

namespace {

/// Constants and addresses of globals: each part makes its own copy rather
/// than taking them as arguments.
bool isRematerializable(Operation *op) {
  return op->getNumOperands() == 0 && op->getNumRegions() == 0 &&
         (op->hasTrait<OpTrait::ConstantLike>() ||
          isa<LLVM::AddressOfOp, LLVM::ZeroOp, LLVM::UndefOp, LLVM::PoisonOp>(
              op));
}

struct OutlineLongFunctionsPass
    : public ztrain::impl::OutlineLongFunctionsBase<OutlineLongFunctionsPass> {
  using Base::Base;

  void runOnOperation() override {
    if (maxOps < 2) {
      getOperation().emitError()
          << "outline-long-functions: max-ops must be at least 2, not "
          << int64_t(maxOps);
      return signalPassFailure();
    }
    SmallVector<LLVM::LLVMFuncOp> functions;
    for (auto fn : getOperation().getOps<LLVM::LLVMFuncOp>()) {
      size_t size = 0;
      for (Block &block : fn.getBody())
        size += block.getOperations().size();
      if (size > 4 * size_t(maxOps))
        functions.push_back(fn);
    }
    for (LLVM::LLVMFuncOp fn : functions)
      outlineFunction(fn);
  }

  void outlineFunction(LLVM::LLVMFuncOp fn) {
    // The runs: consecutive ops of a block, constants aside, cut at
    // terminators, ops with regions and stack allocations.
    std::vector<SmallVector<Operation *>> runs(1);
    auto cut = [&] {
      if (runs.back().size() < 2)
        runs.back().clear();
      else
        runs.emplace_back();
    };
    for (Block &block : fn.getBody()) {
      for (Operation &op : block) {
        if (isRematerializable(&op))
          continue; // stays in place; parts copy it
        // A stack allocation (ztrt_fused's pointer array) lives in this
        // function's frame: in a part it would die when the part returns.
        if (op.hasTrait<OpTrait::IsTerminator>() || op.getNumRegions() != 0 ||
            isa<LLVM::AllocaOp>(op)) {
          cut();
          continue;
        }
        runs.back().push_back(&op);
        if (runs.back().size() == size_t(maxOps))
          cut();
      }
      cut();
    }
    runs.pop_back(); // (empty)
    localizeAddresses(fn, runs);
    Operation *last = fn; // the parts follow `fn`, in order
    for (auto [index, run] : llvm::enumerate(runs))
      last = outlineRun(fn, last, run, index);
    // Constants whose every user moved into parts.
    for (Block &block : fn.getBody())
      for (Operation &op : llvm::make_early_inc_range(block))
        if (isRematerializable(&op) && op.use_empty())
          op.erase();
  }

  /// Buffers are addresses into an arena (`llvm.getelementptr %arena[off]`,
  /// constant offsets, as attributes or constant operands). Passing each across
  /// parts would make a wide layer's thousands of live buffers thousands of
  /// arguments and results; instead each run computes the addresses it uses
  /// from their base (one value for all), and an address computed for another
  /// run is dropped.
  void localizeAddresses(LLVM::LLVMFuncOp fn,
                         std::vector<SmallVector<Operation *>> &runs) {
    auto isAddress = [](Operation *op) {
      auto gep = dyn_cast_or_null<LLVM::GEPOp>(op);
      return gep && llvm::all_of(gep.getDynamicIndices(), [](Value index) {
               Operation *def = index.getDefiningOp();
               return def && isRematerializable(def);
             });
    };
    DenseMap<Operation *, size_t> runOf; // of the addresses
    for (auto [r, run] : llvm::enumerate(runs))
      for (Operation *op : run)
        if (isa<LLVM::GEPOp>(op))
          runOf[op] = r;
    for (auto [r, run] : llvm::enumerate(runs)) {
      DenseMap<Operation *, Operation *> local;
      SmallVector<Operation *> ops;
      std::function<Value(Value, Operation *)> localize =
          [&](Value v, Operation *before) -> Value {
        Operation *def = v.getDefiningOp();
        if (!isAddress(def))
          return v;
        auto it = runOf.find(def);
        if (it != runOf.end() && it->second == r)
          return v;
        Operation *&copy = local[def];
        if (!copy) {
          OpBuilder b(before);
          copy = b.clone(*def);
          Operation *made = copy; // (the map may grow in the recursion)
          made->setOperand(0, localize(made->getOperand(0), made));
          ops.push_back(made);
          return made->getResult(0);
        }
        return copy->getResult(0);
      };
      for (Operation *op : run) {
        for (OpOperand &use : op->getOpOperands())
          use.set(localize(use.get(), op));
        ops.push_back(op);
      }
      run = std::move(ops);
    }
    // The addresses no longer used (latest first: an address of an
    // address), and out of their runs.
    DenseSet<Operation *> dropped;
    SmallVector<Operation *> addresses;
    fn.walk([&](Operation *op) {
      if (isAddress(op))
        addresses.push_back(op);
    });
    for (Operation *op : llvm::reverse(addresses))
      if (op->use_empty()) {
        dropped.insert(op);
        op->erase();
      }
    if (!dropped.empty())
      for (SmallVector<Operation *> &run : runs)
        llvm::erase_if(run,
                       [&](Operation *op) { return dropped.contains(op); });
  }

  /// Moves `run` (consecutive operations of one block, constants aside)
  /// into `<fn>.part<index>`, placed after `after`, and calls it before the
  /// operation that followed the run. Returns the new function.
  Operation *outlineRun(LLVM::LLVMFuncOp fn, Operation *after,
                        ArrayRef<Operation *> run, unsigned index) {
    MLIRContext *ctx = fn.getContext();
    llvm::DenseSet<Operation *> inRun(run.begin(), run.end());
    llvm::SetVector<Value> inputs;
    SmallVector<Value> outputs;
    for (Operation *op : run) {
      for (Value operand : op->getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (!def || (!inRun.contains(def) && !isRematerializable(def)))
          inputs.insert(operand);
      }
      for (Value result : op->getResults())
        if (llvm::any_of(result.getUsers(), [&](Operation *user) {
              return !inRun.contains(user);
            }))
          outputs.push_back(result);
    }

    SmallVector<Type> inputTypes, outputTypes;
    for (Value v : inputs)
      inputTypes.push_back(v.getType());
    for (Value v : outputs)
      outputTypes.push_back(v.getType());
    Type resultType = outputs.empty() ? LLVM::LLVMVoidType::get(ctx)
                      : outputs.size() == 1
                          ? outputTypes.front()
                          : LLVM::LLVMStructType::getLiteral(ctx, outputTypes);
    Location loc = run.front()->getLoc();
    OpBuilder moduleBuilder(fn);
    moduleBuilder.setInsertionPointAfter(after);
    auto part = LLVM::LLVMFuncOp::create(
        moduleBuilder, fn.getLoc(),
        (fn.getName() + ".part" + Twine(index)).str(),
        LLVM::LLVMFunctionType::get(resultType, inputTypes),
        LLVM::Linkage::Internal);
    Block *body = part.addEntryBlock(moduleBuilder);

    // The call goes where the run was.
    OpBuilder caller(run.back()->getBlock(),
                     std::next(run.back()->getIterator()));
    auto call = LLVM::CallOp::create(caller, loc, part, inputs.getArrayRef());

    IRMapping argOf;
    for (auto [input, arg] : llvm::zip(inputs, body->getArguments()))
      argOf.map(input, arg);
    OpBuilder inPart = OpBuilder::atBlockEnd(body);
    OpBuilder atStart(ctx);
    Operation *lastCopy = nullptr;
    DenseMap<Operation *, Operation *> copies; // constants cloned here
    for (Operation *op : run) {
      op->moveBefore(body, body->end());
      for (OpOperand &use : op->getOpOperands()) {
        if (Value arg = argOf.lookupOrNull(use.get())) {
          use.set(arg);
          continue;
        }
        Operation *def = use.get().getDefiningOp();
        if (!def || inRun.contains(def) || !isRematerializable(def))
          continue;
        Operation *&copy = copies[def];
        if (!copy) { // at the start, in the order first used
          if (lastCopy)
            atStart.setInsertionPointAfter(lastCopy);
          else
            atStart.setInsertionPointToStart(body);
          copy = lastCopy = atStart.clone(*def);
        }
        use.set(copy->getResult(cast<OpResult>(use.get()).getResultNumber()));
      }
    }

    // Results: returned (as a struct when several), read back after the
    // call by the operations that stayed.
    if (outputs.empty()) {
      LLVM::ReturnOp::create(inPart, loc, ValueRange());
    } else if (outputs.size() == 1) {
      LLVM::ReturnOp::create(inPart, loc, outputs.front());
    } else {
      Value packed = LLVM::PoisonOp::create(inPart, loc, resultType);
      for (auto [i, v] : llvm::enumerate(outputs))
        packed = LLVM::InsertValueOp::create(inPart, loc, packed, v,
                                             ArrayRef<int64_t>{int64_t(i)});
      LLVM::ReturnOp::create(inPart, loc, packed);
    }
    for (auto [i, output] : llvm::enumerate(outputs)) {
      Value value = call.getResult();
      if (outputs.size() > 1)
        value = LLVM::ExtractValueOp::create(caller, loc, call.getResult(),
                                             ArrayRef<int64_t>{int64_t(i)});
      output.replaceUsesWithIf(value, [&](OpOperand &use) {
        return use.getOwner()->getParentOp() != part;
      });
    }
    ++numParts;
    return part;
  }
};

} // namespace
