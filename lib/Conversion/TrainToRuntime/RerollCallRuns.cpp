//===- RerollCallRuns.cpp - Loops for runs of like runtime calls ----------===//
//
// Part of the ztrain project. See RerollCallRuns in Conversion/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Conversion/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"

#include "llvm/ADT/SetVector.h"

#include <vector>

namespace ztrain {
#define GEN_PASS_DEF_REROLLCALLRUNS
#include "ztrain/Conversion/Passes.h.inc"
} // namespace ztrain

using namespace mlir;

namespace {

/// How one argument of a call is made: the same value on every call of a
/// run, a byte address `base + offset` (an `llvm.getelementptr` with one
/// constant index), or an integer constant. The last two carry a number
/// that may differ from call to call.
struct Arg {
  enum Kind : uint8_t { Same, Address, Int } kind = Same;
  Value value;        // Same: the value; Address: the base
  Type type;          // Address: the element type; Int: the integer type
  unsigned flags = 0; // Address: the GEP's no-wrap flags
  bool operator==(const Arg &o) const {
    return kind == o.kind && value == o.value && type == o.type &&
           flags == o.flags;
  }
};

Arg classify(Value v, int64_t &number) {
  number = 0;
  if (auto gep = v.getDefiningOp<LLVM::GEPOp>()) {
    auto indices = gep.getIndices();
    if (indices.size() == 1 && isa<LLVM::LLVMPointerType>(gep.getType()) &&
        isa<LLVM::LLVMPointerType>(gep.getBase().getType())) {
      APInt offset;
      bool constant = false;
      if (auto attr = dyn_cast<IntegerAttr>(indices[0])) {
        offset = attr.getValue();
        constant = true;
      } else if (auto index = dyn_cast<Value>(indices[0])) {
        constant = matchPattern(index, m_ConstantInt(&offset));
      }
      if (constant && offset.getBitWidth() <= 64) {
        number = offset.getSExtValue();
        return {Arg::Address, gep.getBase(), gep.getElemType(),
                unsigned(gep.getNoWrapFlags())};
      }
    }
  }
  APInt value;
  if (isa<IntegerType>(v.getType()) &&
      v.getType().getIntOrFloatBitWidth() <= 64 &&
      matchPattern(v, m_ConstantInt(&value))) {
    number = value.getSExtValue();
    return {Arg::Int, Value(), v.getType()};
  }
  return {Arg::Same, v, Type()};
}

/// A call that may join a run: direct, no regions, no result used.
bool isCandidate(Operation *op) {
  auto call = dyn_cast<LLVM::CallOp>(op);
  return call && call.getCalleeAttr() && op->getNumRegions() == 0 &&
         llvm::all_of(op->getResults(), [](Value r) { return r.use_empty(); });
}

/// Operations a run may step over: they compute addresses and constants,
/// touch no memory and call nothing.
bool isAddressOrConstant(Operation *op) {
  return isa<LLVM::GEPOp, LLVM::ConstantOp>(op);
}

/// One call's shape (callee and how each argument is made) and its numbers.
struct Shape {
  StringRef callee;
  SmallVector<Arg, 8> args;
  bool operator==(const Shape &o) const {
    return callee == o.callee && args == o.args;
  }
};

Shape shapeOf(LLVM::CallOp call, SmallVectorImpl<int64_t> &numbers) {
  Shape shape{call.getCalleeAttr().getValue(), {}};
  numbers.clear();
  for (Value operand : call->getOperands()) {
    int64_t number;
    shape.args.push_back(classify(operand, number));
    numbers.push_back(number);
  }
  return shape;
}

struct RerollCallRunsPass
    : public ztrain::impl::RerollCallRunsBase<RerollCallRunsPass> {
  using Base::Base;

  void runOnOperation() override {
    if (minTrips < 2) {
      getOperation().emitError()
          << "reroll-call-runs: min-trips must be at least 2, not "
          << int64_t(minTrips);
      return signalPassFailure();
    }
    SmallVector<LLVM::LLVMFuncOp> functions(
        getOperation().getOps<LLVM::LLVMFuncOp>());
    for (LLVM::LLVMFuncOp fn : functions)
      if (!fn.isExternal())
        rerollFunction(fn);
  }

  /// A candidate call of a block, its shape and its numbers.
  struct Candidate {
    LLVM::CallOp call;
    Shape shape;
    SmallVector<int64_t, 8> numbers;
  };

  void rerollFunction(LLVM::LLVMFuncOp fn) {
    unsigned index = 0;
    for (Block &block : fn.getBody()) {
      // The segments of a block: consecutive candidate calls (addresses
      // and constants in between are stepped over; anything else ends the
      // segment). Each segment is searched for runs.
      std::vector<Candidate> segment;
      for (Operation &op : llvm::make_early_inc_range(block)) {
        if (isAddressOrConstant(&op))
          continue;
        if (!isCandidate(&op)) {
          rerollSegment(fn, segment, index);
          segment.clear();
          continue;
        }
        Candidate c{cast<LLVM::CallOp>(op), {}, {}};
        c.shape = shapeOf(c.call, c.numbers);
        segment.push_back(std::move(c));
      }
      rerollSegment(fn, segment, index);
    }
  }

  /// Finds the runs of `segment`, left to right: at each call, the period
  /// P <= max-period whose repetitions (the shapes of P consecutive calls,
  /// again and again) cover the most calls, if they repeat at least
  /// min-trips times; ties go to the shorter period.
  void rerollSegment(LLVM::LLVMFuncOp fn, ArrayRef<Candidate> segment,
                     unsigned &index) {
    size_t n = segment.size(), trips = size_t(minTrips);
    for (size_t i = 0; i + trips <= n;) {
      size_t bestPeriod = 0, bestTrips = 0;
      for (size_t period = 1;
           period <= size_t(maxPeriod) && i + period * trips <= n; ++period) {
        size_t k = 1;
        while (i + (k + 1) * period <= n &&
               llvm::all_of(llvm::seq<size_t>(0, period), [&](size_t q) {
                 return segment[i + k * period + q].shape ==
                        segment[i + q].shape;
               }))
          ++k;
        if (k >= trips && k * period > bestTrips * bestPeriod) {
          bestPeriod = period;
          bestTrips = k;
        }
      }
      if (!bestPeriod) {
        ++i;
        continue;
      }
      reroll(fn, segment.slice(i, bestPeriod * bestTrips), bestPeriod,
             index++);
      i += bestPeriod * bestTrips;
    }
  }

  /// Replaces `run` (trips of `period` calls, the shapes of each trip's
  /// calls the same) by a call of `<fn>.loop<index>`, a loop that makes
  /// the same calls in the same order, reading the numbers that change from
  /// the constant table `<fn>.table<index>` (a row per trip).
  void reroll(LLVM::LLVMFuncOp fn, ArrayRef<Candidate> run, size_t period,
              unsigned index) {
    MLIRContext *ctx = fn.getContext();
    size_t trips = run.size() / period;
    // A trip's arguments, numbered across its calls: call q's argument a
    // is slot firstSlot[q] + a.
    SmallVector<size_t> firstSlot;
    size_t width = 0;
    for (size_t q = 0; q < period; ++q) {
      firstSlot.push_back(width);
      width += run[q].shape.args.size();
    }
    auto argOf = [&](size_t q, size_t a) -> const Arg & {
      return run[q].shape.args[a];
    };
    auto numberAt = [&](size_t trip, size_t q, size_t a) {
      return run[trip * period + q].numbers[a];
    };
    // Arguments whose number changes become columns of the table; the
    // others are passed (addresses: the first call's) or rebuilt
    // (integers) as they are.
    SmallVector<int64_t> columnOf(width, -1);
    int64_t columns = 0;
    for (size_t q = 0; q < period; ++q)
      for (size_t a = 0; a < run[q].shape.args.size(); ++a) {
        if (argOf(q, a).kind == Arg::Same)
          continue;
        for (size_t t = 1; t < trips; ++t)
          if (numberAt(t, q, a) != numberAt(0, q, a)) {
            columnOf[firstSlot[q] + a] = columns++;
            break;
          }
      }
    llvm::SetVector<Value> inputs;
    for (size_t q = 0; q < period; ++q)
      for (size_t a = 0; a < run[q].shape.args.size(); ++a) {
        const Arg &arg = argOf(q, a);
        bool changes = columnOf[firstSlot[q] + a] >= 0;
        if (arg.kind == Arg::Same || (arg.kind == Arg::Address && !changes))
          inputs.insert(run[q].call->getOperand(a));
        else if (arg.kind == Arg::Address)
          inputs.insert(arg.value);
      }

    Location loc = run.front().call->getLoc();
    auto i64 = IntegerType::get(ctx, 64);
    auto ptr = LLVM::LLVMPointerType::get(ctx);
    std::string name = (fn.getName() + ".loop" + Twine(index)).str();
    OpBuilder module(fn);
    LLVM::GlobalOp table;
    if (columns > 0) {
      std::vector<int64_t> data;
      data.reserve(trips * columns);
      for (size_t t = 0; t < trips; ++t)
        for (size_t q = 0; q < period; ++q)
          for (size_t a = 0; a < run[q].shape.args.size(); ++a)
            if (columnOf[firstSlot[q] + a] >= 0)
              data.push_back(numberAt(t, q, a));
      auto type = RankedTensorType::get({int64_t(data.size())}, i64);
      table = LLVM::GlobalOp::create(
          module, loc, LLVM::LLVMArrayType::get(i64, data.size()),
          /*isConstant=*/true, LLVM::Linkage::Internal,
          (fn.getName() + ".table" + Twine(index)).str(),
          DenseElementsAttr::get(type, ArrayRef<int64_t>(data)),
          /*alignment=*/8);
    }
    SmallVector<Type> inputTypes;
    for (Value v : inputs)
      inputTypes.push_back(v.getType());
    auto loop = LLVM::LLVMFuncOp::create(
        module, loc, name,
        LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), inputTypes),
        LLVM::Linkage::Internal);
    Block *entry = loop.addEntryBlock(module);
    Block *body = new Block(), *exit = new Block();
    loop.getBody().push_back(body);
    loop.getBody().push_back(exit);
    Value trip = body->addArgument(i64, loc);

    // Constants and the table's address in the entry block, the loop in
    // `body`.
    OpBuilder head = OpBuilder::atBlockEnd(entry);
    auto constant = [&](Type type, int64_t v) -> Value {
      return LLVM::ConstantOp::create(head, loc, type,
                                      head.getIntegerAttr(type, v));
    };
    Value base = table ? LLVM::AddressOfOp::create(head, loc, table).getResult()
                       : Value();
    OpBuilder b = OpBuilder::atBlockEnd(body);
    Value row = columns > 0
                    ? LLVM::MulOp::create(b, loc, trip, constant(i64, columns))
                          .getResult()
                    : Value();
    for (size_t q = 0; q < period; ++q) {
      Operation *first = run[q].call;
      SmallVector<Value> operands;
      for (size_t a = 0; a < run[q].shape.args.size(); ++a) {
        const Arg &arg = argOf(q, a);
        Value given = first->getOperand(a);
        int64_t column = columnOf[firstSlot[q] + a];
        if (arg.kind == Arg::Same || (arg.kind == Arg::Address && column < 0)) {
          operands.push_back(entry->getArgument(indexOf(inputs, given)));
          continue;
        }
        if (column < 0) { // an integer that does not change
          operands.push_back(constant(arg.type, numberAt(0, q, a)));
          continue;
        }
        Value at = LLVM::AddOp::create(b, loc, row, constant(i64, column));
        Value slot =
            LLVM::GEPOp::create(b, loc, ptr, i64, base, ValueRange{at});
        Value number = LLVM::LoadOp::create(b, loc, i64, slot);
        if (arg.kind == Arg::Address) {
          Value from = entry->getArgument(indexOf(inputs, arg.value));
          operands.push_back(LLVM::GEPOp::create(
              b, loc, given.getType(), arg.type, from, ValueRange{number},
              LLVM::GEPNoWrapFlags(arg.flags)));
        } else if (arg.type == i64) {
          operands.push_back(number);
        } else {
          operands.push_back(LLVM::TruncOp::create(b, loc, arg.type, number));
        }
      }
      Operation *call = b.clone(*first);
      call->setOperands(operands);
    }
    Value next = LLVM::AddOp::create(b, loc, trip, constant(i64, 1));
    Value more = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::slt, next,
                                      constant(i64, int64_t(trips)));
    LLVM::CondBrOp::create(b, loc, more, body, ValueRange{next}, exit,
                           ValueRange{});
    LLVM::BrOp::create(head, loc, ValueRange{constant(i64, 0)}, body);
    b.setInsertionPointToEnd(exit);
    LLVM::ReturnOp::create(b, loc, ValueRange{});

    replaceRun(run, loop, inputs.getArrayRef());
  }

  /// Calls `loop` with `inputs` in `run`'s place and erases the run's calls
  /// and the addresses and constants only they used.
  void replaceRun(ArrayRef<Candidate> run, LLVM::LLVMFuncOp loop,
                  ArrayRef<Value> inputs) {
    // The loop runs where the last call of the run was: every value it
    // takes is defined by then, and between the calls there were only
    // addresses and constants.
    OpBuilder at(run.back().call);
    LLVM::CallOp::create(at, run.front().call->getLoc(), loop, inputs);
    std::vector<Operation *> work;
    for (const Candidate &c : run) {
      for (Value operand : c.call->getOperands())
        if (Operation *def = operand.getDefiningOp())
          work.push_back(def);
      c.call->erase();
    }
    DenseSet<Operation *> erased;
    while (!work.empty()) {
      Operation *op = work.back();
      work.pop_back();
      if (erased.contains(op) || !isAddressOrConstant(op) || !op->use_empty())
        continue;
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp())
          work.push_back(def);
      erased.insert(op);
      op->erase();
    }
    ++numLoops;
    numCalls += run.size();
  }

  static unsigned indexOf(const llvm::SetVector<Value> &set, Value v) {
    return unsigned(llvm::find(set, v) - set.begin());
  }
};

} // namespace
