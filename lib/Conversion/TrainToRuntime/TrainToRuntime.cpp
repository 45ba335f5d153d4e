//===- TrainToRuntime.cpp - lower-to-runtime ------------------------------===//
//
// Part of the ztrain project.
//
// Lowers a complete training step to a straight-line sequence of ztrt_*
// runtime calls on opaque buffer pointers, and embeds the descriptor the
// runtime's main() reads. The runtime functions are declared from the one
// ABI table the runtime header is generated from (ztrt_abi.def), so the
// compiler and runtime cannot disagree on a signature silently: a call
// that does not match its declaration fails the func.call verifier.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Conversion/Passes.h"
#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/IR/StepBuffers.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include "ztrt.h" // ztrt_category

#define DEBUG_TYPE "lower-to-runtime"

namespace ztrain {
#define GEN_PASS_DEF_LOWERTORUNTIME
#include "ztrain/Conversion/Passes.h.inc"
} // namespace ztrain

using namespace mlir;
using namespace ztrain;
using namespace ztrain::train;

namespace {

//===----------------------------------------------------------------------===//
// The ABI table
//===----------------------------------------------------------------------===//

enum class AbiType { kPtr, kI32, kI64, kF64, kVoid };

struct AbiFunction {
  const char *name;
  AbiType result;
  SmallVector<AbiType, 12> args;
};

const AbiFunction kAbiFunctions[] = {
#define CTX AbiType::kPtr
#define PTR AbiType::kPtr
#define CPTR AbiType::kPtr
#define I32 AbiType::kI32
#define I64 AbiType::kI64
#define F64 AbiType::kF64
#define VOID AbiType::kVoid
#define ZTRT_FN(name, ret, ...) {"ztrt_" #name, ret, {__VA_ARGS__}},
#include "ztrt_abi.def"
#undef ZTRT_FN
#undef CTX
#undef PTR
#undef CPTR
#undef I32
#undef I64
#undef F64
#undef VOID
};

Type abiToMlir(MLIRContext *ctx, AbiType t) {
  switch (t) {
  case AbiType::kPtr:
    return LLVM::LLVMPointerType::get(ctx);
  case AbiType::kI32:
    return IntegerType::get(ctx, 32);
  case AbiType::kI64:
    return IntegerType::get(ctx, 64);
  case AbiType::kF64:
    return Float64Type::get(ctx);
  case AbiType::kVoid:
    return Type();
  }
  llvm_unreachable("unknown ABI type");
}

//===----------------------------------------------------------------------===//
// Emitter
//===----------------------------------------------------------------------===//

/// Builds the body of ztrain_step: runtime calls, constants and buffer
/// management.
class StepEmitter {
public:
  StepEmitter(ModuleOp module, OpBuilder &b, Value ctx)
      : loc(UnknownLoc::get(b.getContext())), module(module), b(b), ctx(ctx) {}

  Value i64(int64_t v) { return constant(b.getI64IntegerAttr(v)); }
  Value i32(int32_t v) { return constant(b.getI32IntegerAttr(v)); }
  Value f64(double v) { return constant(b.getF64FloatAttr(v)); }
  Value null() {
    return LLVM::ZeroOp::create(b, loc, LLVM::LLVMPointerType::get(
                                            b.getContext()));
  }

  /// `base` advanced by `bytes` (an i64 value).
  Value offset(Value base, Value bytes) {
    auto ptrTy = LLVM::LLVMPointerType::get(b.getContext());
    return LLVM::GEPOp::create(b, loc, ptrTy, b.getI8Type(), base,
                               ValueRange{bytes});
  }

  /// This process's rank (one ztrt_rank call per step, at its top).
  Value rank() {
    if (!rankValue) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ctx.getParentBlock());
      rankValue = call("rank", {});
    }
    return rankValue;
  }

  /// Calls ztrt_<name>(ctx, args...) and returns its result (or null).
  Value call(StringRef name, ArrayRef<Value> args) {
    func::FuncOp callee = declare(("ztrt_" + name).str());
    SmallVector<Value> all{ctx};
    all.append(args.begin(), args.end());
    ++calls;
    auto op = func::CallOp::create(b, loc, callee, all);
    return op.getNumResults() ? op.getResult(0) : Value();
  }

  /// A constant int64 array global (shapes, permutations, masks) and a
  /// pointer to it; identical arrays share one global.
  Value i64Array(ArrayRef<int64_t> values) {
    std::string key;
    llvm::raw_string_ostream os(key);
    llvm::interleave(values, os, "_");
    auto it = arrays.find(key);
    LLVM::GlobalOp global;
    if (it != arrays.end()) {
      global = it->second;
    } else {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(module.getBody());
      auto arrayTy =
          LLVM::LLVMArrayType::get(b.getI64Type(), values.size());
      auto data = DenseIntElementsAttr::get(
          RankedTensorType::get({(int64_t)values.size()}, b.getI64Type()),
          values);
      global = LLVM::GlobalOp::create(
          b, loc, arrayTy, /*isConstant=*/true, LLVM::Linkage::Internal,
          ("__ztrt_i64_" + Twine(arrays.size())).str(), data);
      arrays[key] = global;
    }
    return LLVM::AddressOfOp::create(b, loc, global);
  }

  Location loc;
  unsigned calls = 0;

private:
  /// One arith.constant per distinct value, at the top of the step, so the
  /// lowered IR reads as a list of calls.
  Value constant(TypedAttr value) {
    Value &slot = constants[value];
    if (!slot) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ctx.getParentBlock());
      slot = arith::ConstantOp::create(b, loc, value);
    }
    return slot;
  }

  func::FuncOp declare(const std::string &name) {
    if (auto fn = module.lookupSymbol<func::FuncOp>(name))
      return fn;
    const AbiFunction *abi = nullptr;
    for (const AbiFunction &f : kAbiFunctions)
      if (name == f.name)
        abi = &f;
    if (!abi)
      llvm::report_fatal_error(("ztrt function not in ztrt_abi.def: " + name)
                                   .c_str());
    MLIRContext *mctx = b.getContext();
    SmallVector<Type> args, results;
    for (AbiType t : abi->args)
      args.push_back(abiToMlir(mctx, t));
    if (abi->result != AbiType::kVoid)
      results.push_back(abiToMlir(mctx, abi->result));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(module.getBody());
    auto fn = func::FuncOp::create(b, loc, name,
                                   b.getFunctionType(args, results));
    fn.setPrivate();
    return fn;
  }

  ModuleOp module;
  OpBuilder &b;
  Value ctx;
  std::map<std::string, LLVM::GlobalOp> arrays;
  DenseMap<Attribute, Value> constants;
  Value rankValue;
};

int64_t numElements(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}
ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}
/// rows x cols with cols the last dimension (1 for a 0-d tensor).
std::pair<int64_t, int64_t> rowsCols(Value v) {
  ArrayRef<int64_t> s = shapeOf(v);
  int64_t cols = s.empty() ? 1 : s.back();
  return {numElements(v) / cols, cols};
}
SmallVector<int64_t> dimMask(int64_t rank, ArrayRef<int64_t> dims) {
  SmallVector<int64_t> mask(rank, 0);
  for (int64_t d : dims)
    mask[d] = 1;
  return mask;
}

std::string dtypeName(Type t) {
  Type e = cast<RankedTensorType>(t).getElementType();
  if (e.isF32())
    return "f32";
  if (e.isInteger(32))
    return "i32";
  return "";
}

void appendShape(llvm::raw_ostream &os, Type t) {
  ArrayRef<int64_t> s = cast<RankedTensorType>(t).getShape();
  os << ' ' << s.size();
  for (int64_t d : s)
    os << ' ' << d;
}

/// The upper bound of the values of an i32 input: the class count of a
/// cross-entropy or the vocabulary of an embedding it feeds (through
/// reshapes). 0 when it feeds neither.
int64_t inputBound(Value v) {
  int64_t bound = 0;
  auto tighten = [&](int64_t b) { bound = bound ? std::min(bound, b) : b; };
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    for (OpOperand &use : cur.getUses()) {
      Operation *user = use.getOwner();
      if (auto r = dyn_cast<ReshapeOp>(user))
        work.push_back(r.getResult());
      else if (auto ce = dyn_cast<CrossEntropyOp>(user))
        tighten(shapeOf(ce.getLogits())[1]);
      else if (auto ceg = dyn_cast<CrossEntropyGradOp>(user))
        tighten(shapeOf(ceg.getLogits())[1]);
      else if (auto emb = dyn_cast<EmbeddingOp>(user))
        tighten(shapeOf(emb.getTable())[0]);
      else if (auto embg = dyn_cast<EmbeddingGradOp>(user))
        tighten(shapeOf(embg.getResult())[0]);
    }
  }
  return bound;
}

struct LowerToRuntimePass
    : public ztrain::impl::LowerToRuntimeBase<LowerToRuntimePass> {
  using LowerToRuntimeBase::LowerToRuntimeBase;
  void runOnOperation() override;
  LogicalResult lowerStep(func::FuncOp entry, const std::string &descriptor);

  using Storage = dist::StateStorage;
  Storage storageOf(Operation *symbolOp, Type type) {
    return dist::getStateStorage(symbolOp, cast<RankedTensorType>(type),
                                 stage, gridSize);
  }

  int64_t stage = 0;
  int64_t gridSize = 1;
};

} // namespace

/// The descriptor's optional `store <E> full|shard` suffix.
template <typename StorageT>
static void appendStorage(llvm::raw_ostream &os, const StorageT &storage) {
  if (storage.mode == StorageT::PaddedFull)
    os << " store " << storage.elements << " full";
  else if (storage.mode == StorageT::Shard)
    os << " store " << storage.elements << " shard";
}

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
    // Without its collectives a partitioned step would silently train N
    // diverging replicas.
    WalkResult missing = entry.walk([&](Operation *op) {
      if (gridSize > 1 && isa<SGDUpdateOp, AdamUpdateOp>(op) &&
          !isa_and_nonnull<dist::CollectiveOpInterface, dist::WaitOp>(
              op->getOperand(0).getDefiningOp())) {
        op->emitError() << "the gradient of this update is not "
                           "synchronized over the grid: run "
                           "zero-insert-collectives first";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (missing.wasInterrupted())
      return signalPassFailure();
  }

  // The descriptor is whitespace-separated text: a name with whitespace in
  // it (a quoted symbol, a train.name string) cannot be written into it.
  auto checkName = [](Operation *op, StringRef what, StringRef name) {
    if (!name.empty() &&
        llvm::none_of(name, [](char c) { return c <= ' ' || c == 127; }))
      return true;
    op->emitError() << what << " name '" << name
                    << "' must be non-empty and contain no whitespace or "
                       "control characters (it becomes a checkpoint / data "
                       "key)";
    return false;
  };
  bool namesOk = true;
  for (auto param : module.getOps<ParamOp>())
    namesOk &= checkName(param, "parameter", param.getSymName());
  for (auto state : module.getOps<StateOp>())
    namesOk &= checkName(state, "state", state.getSymName());
  for (BlockArgument arg : entry.getArguments())
    if (auto name = entry.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                       kInputNameAttr))
      namesOk &= checkName(entry, "input", name.getValue());
  if (!namesOk)
    return signalPassFailure();

  // The descriptor: parameters, states and inputs in index order.
  std::string descriptor;
  llvm::raw_string_ostream os(descriptor);
  os << "ztrain-descriptor 1\n";
  os << "grid " << gridSize << '\n';
  for (auto param : module.getOps<ParamOp>()) {
    os << "param " << param.getSymName() << ' ' << dtypeName(param.getType());
    appendShape(os, param.getType());
    os << " init " << stringifyInitKind(param.getInit()) << ' '
       << llvm::format("%.17g", param.getScaleAttr()
                                    ? param.getScaleAttr().getValueAsDouble()
                                    : 0.0);
    appendStorage(os, storageOf(param, param.getType()));
    os << '\n';
  }
  for (auto param : module.getOps<ParamOp>())
    os << "grad " << param.getSymName() << ' '
       << dist::getGradientElements(param, stage, gridSize) << '\n';
  for (auto state : module.getOps<StateOp>()) {
    os << "state " << state.getSymName() << ' ' << dtypeName(state.getType());
    appendShape(os, state.getType());
    os << " of " << state.getParam();
    appendStorage(os, storageOf(state, state.getType()));
    os << '\n';
  }
  for (BlockArgument arg : entry.getArguments()) {
    auto name = entry.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                   kInputNameAttr);
    std::string dtype = isa<RankedTensorType>(arg.getType())
                            ? dtypeName(arg.getType())
                            : std::string();
    if (dtype.empty()) {
      entry.emitError() << "input #" << arg.getArgNumber() << " has type "
                        << arg.getType()
                        << "; inputs must be static tensors of f32 or i32";
      return signalPassFailure();
    }
    os << "input "
       << (name ? name.getValue().str()
                : ("arg" + Twine(arg.getArgNumber())).str())
       << ' ' << dtype;
    appendShape(os, arg.getType());
    os << " bound " << (dtype == "i32" ? inputBound(arg) : 0) << '\n';
  }
  if (auto opt = module->getAttrOfType<StringAttr>(kOptimizerAttr))
    os << "optimizer " << opt.getValue() << '\n';

  if (failed(lowerStep(entry, descriptor)))
    return signalPassFailure();

  // The declarations and the grid now live in the descriptor.
  for (Operation &op : llvm::make_early_inc_range(module.getOps()))
    if (isa<ParamOp, StateOp, shard::GridOp>(op))
      op.erase();
  module->removeAttr(kOptimizerAttr);
  module->removeAttr(dist::kZeroAttr);
  module->removeAttr(dist::kArenasAttr);
  module->removeAttr("dist.max_live_bytes");
}

LogicalResult LowerToRuntimePass::lowerStep(func::FuncOp entry,
                                            const std::string &descriptor) {
  ModuleOp module = getOperation();
  MLIRContext *mctx = module.getContext();
  auto ptrTy = LLVM::LLVMPointerType::get(mctx);
  OpBuilder b(mctx);

  // Indices of parameters and states in descriptor order.
  llvm::StringMap<int64_t> paramIndex, stateIndex;
  for (auto param : module.getOps<ParamOp>())
    paramIndex[param.getSymName()] = paramIndex.size();
  for (auto state : module.getOps<StateOp>())
    stateIndex[state.getSymName()] = stateIndex.size();

  if (module.lookupSymbol("ztrain_step") ||
      module.lookupSymbol("ztrain_descriptor")) {
    module.emitError() << "the symbols ztrain_step and ztrain_descriptor are "
                          "reserved for the lowered step";
    return failure();
  }

  b.setInsertionPointToEnd(module.getBody());
  std::string withNul = descriptor + '\0';
  auto strTy =
      LLVM::LLVMArrayType::get(IntegerType::get(mctx, 8), withNul.size());
  LLVM::GlobalOp::create(b, entry.getLoc(), strTy, /*isConstant=*/true,
                         LLVM::Linkage::External, "ztrain_descriptor",
                         b.getStringAttr(withNul));

  auto step = func::FuncOp::create(b, entry.getLoc(), "ztrain_step",
                                   b.getFunctionType({ptrTy}, {}));
  Block *block = step.addEntryBlock();
  b.setInsertionPointToStart(block);
  StepEmitter e(module, b, step.getArgument(0));

  // Aliases, persistent gradient buffers and last uses: the same analysis
  // zero-report predicts memory with.
  Block &body = entry.getBody().front();
  dist::StepBuffers buffers(entry, stage);
  auto rootOf = [&](Value v) { return buffers.root(v); };
  Value loss = body.getTerminator()->getOperand(0);

  DenseMap<Value, Value> buffer; // tensor value -> !llvm.ptr
  DenseSet<Value> owned;         // roots allocated by this step
  // Collectives in flight: the runtime's handle and a bucket's packed
  // buffers (in, and out for a reduce-scatter) with each tensor's offset.
  struct Pending {
    Value handle, in, out;
    SmallVector<int64_t> offsets;
  };
  DenseMap<Value, Pending> pending;
  auto get = [&](Value v) { return buffer.lookup(v); };
  SymbolTable symbolTable(module);
  auto paramOp = [&](StringRef name) {
    return symbolTable.lookup<ParamOp>(name);
  };
  // The storage a (possibly sharded) update writes: the whole parameter, its
  // shard when it rests partitioned, or this rank's slice of its padded
  // replicated storage.
  auto updatedParam = [&](StringRef name, bool sharded, int64_t slice) {
    Value p = e.call("param", {e.i64(paramIndex.lookup(name))});
    ParamOp param = paramOp(name);
    if (!sharded || gridSize == 1 ||
        storageOf(param, param.getType()).mode == Storage::Shard)
      return p;
    return e.offset(p, arith::MulIOp::create(b, e.loc, e.rank(),
                                             e.i64(slice * 4)));
  };
  // plan-memory's arenas: one block per category for the whole step, every
  // buffer at its planned offset. Without a plan, each buffer is allocated
  // and freed on its own.
  llvm::StringMap<Value> arenaBase;
  bool planned = false;
  if (auto arenas = module->getAttrOfType<DictionaryAttr>(dist::kArenasAttr)) {
    planned = true;
    // Persistent across steps (ztrt_arena): steady-state steps allocate
    // nothing, and large arenas are not mapped and faulted in every step.
    for (auto [index, arena] : llvm::enumerate(arenas)) {
      int64_t bytes = cast<IntegerAttr>(arena.getValue()).getInt();
      StringRef name = arena.getName().getValue();
      int32_t category = name == "activations" ? ZTRT_CAT_ACTIVATIONS
                         : name == "gathered_parameters" ? ZTRT_CAT_GATHERED
                                                         : ZTRT_CAT_OTHER;
      if (bytes > 0)
        arenaBase[name] = e.call("arena", {e.i64(index), e.i64(bytes),
                                           e.i32(category)});
    }
  }
  bool planBroken = false;
  auto planned_ptr = [&](Attribute attr, Operation *where) -> Value {
    auto slot = dyn_cast_or_null<dist::SlotAttr>(attr);
    if (!slot || !arenaBase.count(slot.getArena())) {
      where->emitOpError() << "has no place in the memory plan; run "
                              "plan-memory right before lower-to-runtime";
      planBroken = true;
      return e.null();
    }
    return e.offset(arenaBase[slot.getArena()], e.i64(slot.getOffset()));
  };
  // The planned buffer of result `i` of `op`, or of staging buffer `i` of a
  // bucket's start op.
  auto slotOf = [&](Operation *op, unsigned i) {
    auto list = op->getAttrOfType<ArrayAttr>(dist::kSlotsAttr);
    return planned_ptr(list && i < list.size() ? list[i] : Attribute(), op);
  };
  auto stagingOf = [&](Operation *op, unsigned i) {
    auto list = op->getAttrOfType<ArrayAttr>(dist::kStagingAttr);
    return planned_ptr(list && i < list.size() ? list[i] : Attribute(), op);
  };
  auto alloc = [&](Value v) {
    if (FlatSymbolRefAttr param = buffers.gradientOf(v)) {
      Value ptr = e.call("grad", {e.i64(paramIndex.lookup(param.getValue()))});
      buffer[v] = ptr;
      return ptr;
    }
    if (planned) {
      auto r = cast<OpResult>(v);
      Value ptr = slotOf(r.getOwner(), r.getResultNumber());
      buffer[v] = ptr;
      return ptr;
    }
    Value ptr = e.call("alloc", {e.i64(numElements(v) * 4),
                                 e.i32(ZTRT_CAT_ACTIVATIONS)});
    buffer[v] = ptr;
    owned.insert(v);
    ++numBuffers;
    return ptr;
  };

  // A bucket's packed buffer `index` (its planned staging slot on `start`, or
  // a fresh allocation freed at the wait).
  auto stagingBuffer = [&](Operation *start, unsigned index, int64_t bytes) {
    if (planned)
      return stagingOf(start, index);
    ++numBuffers;
    return e.call("alloc", {e.i64(bytes), e.i32(ZTRT_CAT_OTHER)});
  };
  // Where each of `values` starts in a packed buffer (elements), and the
  // buffer's total elements.
  auto packedOffsets = [&](ValueRange values) {
    SmallVector<int64_t> offsets;
    int64_t total = 0;
    for (Value v : values) {
      offsets.push_back(total);
      total += numElements(v);
    }
    return std::make_pair(offsets, total);
  };
  auto requireF32 = [](Operation *op, Value v) -> LogicalResult {
    if (cast<RankedTensorType>(v.getType()).getElementType().isF32())
      return success();
    return op->emitOpError() << "only f32 collectives run on the runtime";
  };

  // A gather of a parameter partitioned at rest (or of its tile j of T):
  // this rank's shard (chunk), the buffer of N of them that `result` lives
  // in (its planned slot on `slotOwner`, or a fresh allocation), and the
  // elements each rank sends.
  struct Gather {
    Value shard, full;
    int64_t count;
  };
  auto gatherParam = [&](StringRef name, std::optional<int64_t> tile,
                         std::optional<int64_t> tiles, Value result,
                         Operation *slotOwner) {
    ParamOp param = paramOp(name);
    int64_t count = storageOf(param, param.getType()).elements;
    Value shard = e.call("param", {e.i64(paramIndex.lookup(name))});
    if (tiles) {
      count /= *tiles;
      shard = e.offset(shard, e.i64(*tile * count * 4));
    }
    Value full;
    if (planned) {
      full = slotOf(slotOwner, 0);
    } else {
      full = e.call("alloc", {e.i64(count * gridSize * 4),
                              e.i32(ZTRT_CAT_GATHERED)});
      owned.insert(result);
      ++numBuffers;
    }
    buffer[result] = full;
    return Gather{shard, full, count};
  };
  // Stages 1-2: this rank's updated slice of a replicated parameter, to be
  // all-gathered in place into the parameter's storage.
  auto paramSlice = [&](StringRef name) {
    ParamOp param = paramOp(name);
    int64_t count = storageOf(param, param.getType()).elements / gridSize;
    Value p = e.call("param", {e.i64(paramIndex.lookup(name))});
    Value mine = e.offset(
        p, arith::MulIOp::create(b, e.loc, e.rank(), e.i64(count * 4)));
    return Gather{mine, p, count};
  };

  for (BlockArgument arg : entry.getArguments())
    buffer[arg] = e.call("input", {e.i64(arg.getArgNumber())});
  // The loss is reported as soon as it exists: later ops update parameters
  // in place, and the loss may be (a view of) a parameter.
  if (isa<BlockArgument>(loss))
    e.call("set_loss", {get(loss)});

  for (Operation &op : body) {
    e.loc = op.getLoc();
    LogicalResult status =
        llvm::TypeSwitch<Operation *, LogicalResult>(&op)
            .Case([&](ParamReadOp o) -> LogicalResult {
              if (gridSize > 1 && paramOp(o.getParam())->hasAttr(
                                      dist::kPartitionAttr))
                return o.emitOpError()
                       << "reads a parameter partitioned at rest; run "
                          "zero-insert-collectives (it gathers it)";
              buffer[o.getResult()] =
                  e.call("param", {e.i64(paramIndex.lookup(o.getParam()))});
              return success();
            })
            .Case([&](FillOp o) {
              e.call("fill_f32", {alloc(o.getResult()),
                                  e.i64(numElements(o.getResult())),
                                  e.f64(o.getValue().convertToDouble())});
              return success();
            })
            .Case<AddOp, SubOp, MulOp>([&](auto o) {
              StringRef fn = isa<AddOp>(o)   ? "add_f32"
                             : isa<SubOp>(o) ? "sub_f32"
                                             : "mul_f32";
              Value a = get(o.getLhs()), c = get(o.getRhs());
              e.call(fn, {a, c, alloc(o.getResult()),
                          e.i64(numElements(o.getResult()))});
              return success();
            })
            .Case([&](ScaleOp o) {
              Value x = get(o.getInput());
              e.call("scale_f32", {x, alloc(o.getResult()),
                                   e.i64(numElements(o.getResult())),
                                   e.f64(o.getFactor().convertToDouble())});
              return success();
            })
            .Case([&](BiasAddOp o) {
              auto [rows, cols] = rowsCols(o.getInput());
              Value x = get(o.getInput()), bias = get(o.getBias());
              e.call("bias_add_f32", {x, bias, alloc(o.getResult()),
                                      e.i64(rows), e.i64(cols)});
              return success();
            })
            .Case<ReluOp, GeluOp>([&](auto o) {
              Value x = get(o.getInput());
              e.call(isa<ReluOp>(o) ? "relu_f32" : "gelu_f32",
                     {x, alloc(o.getResult()),
                      e.i64(numElements(o.getResult()))});
              return success();
            })
            .Case<ReluGradOp, GeluGradOp>([&](auto o) {
              Value dy = get(o.getGrad()), x = get(o.getInput());
              e.call(isa<ReluGradOp>(o) ? "relu_grad_f32" : "gelu_grad_f32",
                     {dy, x, alloc(o.getResult()),
                      e.i64(numElements(o.getResult()))});
              return success();
            })
            .Case([&](MatmulOp o) {
              ArrayRef<int64_t> a = shapeOf(o.getLhs()),
                                bs = shapeOf(o.getRhs()),
                                c = shapeOf(o.getResult());
              int64_t rank = a.size();
              int64_t batch = 1;
              for (int64_t d : a.drop_back(2))
                batch *= d;
              int64_t m = c[rank - 2], n = c[rank - 1];
              int64_t k = o.getTransposeA() ? a[rank - 2] : a[rank - 1];
              int64_t strideA = m * k, strideB = k * n, strideC = m * n;
              if (bs.size() == 2 && rank > 2) {
                strideB = 0;
                if (!o.getTransposeA()) {
                  // Rows of every batch element are contiguous: one GEMM.
                  m *= batch;
                  batch = 1;
                  strideA = m * k;
                  strideC = m * n;
                }
              }
              Value x = get(o.getLhs()), y = get(o.getRhs());
              e.call("matmul_f32",
                     {x, y, alloc(o.getResult()), e.i64(batch), e.i64(m),
                      e.i64(n), e.i64(k), e.i32(o.getTransposeA()),
                      e.i32(o.getTransposeB()), e.i64(strideA),
                      e.i64(strideB), e.i64(strideC)});
              return success();
            })
            .Case([&](LayerNormOp o) {
              auto [rows, cols] = rowsCols(o.getInput());
              Value x = get(o.getInput()), g = get(o.getGamma()),
                    bt = get(o.getBeta());
              e.call("layer_norm_f32",
                     {x, g, bt, alloc(o.getResult()), e.i64(rows),
                      e.i64(cols), e.f64(o.getEpsilon().convertToDouble())});
              return success();
            })
            .Case([&](LayerNormGradOp o) {
              auto [rows, cols] = rowsCols(o.getInput());
              Value dy = get(o.getGrad()), x = get(o.getInput()),
                    g = get(o.getGamma());
              Value dx = alloc(o.getInputGrad());
              Value dg = alloc(o.getGammaGrad());
              Value db = alloc(o.getBetaGrad());
              e.call("layer_norm_grad_f32",
                     {dy, x, g, dx, dg, db, e.i64(rows), e.i64(cols),
                      e.f64(o.getEpsilon().convertToDouble())});
              return success();
            })
            .Case([&](SoftmaxOp o) {
              auto [rows, cols] = rowsCols(o.getInput());
              Value x = get(o.getInput());
              e.call("softmax_f32", {x, alloc(o.getResult()), e.i64(rows),
                                     e.i64(cols), e.i32(o.getCausal())});
              return success();
            })
            .Case([&](SoftmaxGradOp o) {
              auto [rows, cols] = rowsCols(o.getOutput());
              Value dy = get(o.getGrad()), y = get(o.getOutput());
              e.call("softmax_grad_f32", {dy, y, alloc(o.getResult()),
                                          e.i64(rows), e.i64(cols)});
              return success();
            })
            .Case([&](ReshapeOp o) {
              if (!buffers.gradientOf(o.getResult())) {
                buffer[o.getResult()] = get(o.getInput());
                return success();
              }
              Value x = get(o.getInput());
              e.call("copy", {x, alloc(o.getResult()),
                              e.i64(numElements(o.getResult()) * 4)});
              return success();
            })
            .Case([&](TransposeOp o) {
              ArrayRef<int64_t> s = shapeOf(o.getInput());
              Value x = get(o.getInput());
              e.call("transpose_f32",
                     {x, alloc(o.getResult()), e.i64(s.size()),
                      e.i64Array(s), e.i64Array(o.getPermutation())});
              return success();
            })
            .Case([&](ReduceOp o) {
              ArrayRef<int64_t> s = shapeOf(o.getInput());
              Value x = get(o.getInput());
              e.call("reduce_f32",
                     {x, alloc(o.getResult()), e.i64(s.size()),
                      e.i64Array(s), e.i64Array(dimMask(s.size(), o.getDims())),
                      e.i32(o.getKind() == ReduceKind::mean)});
              return success();
            })
            .Case([&](BroadcastOp o) {
              ArrayRef<int64_t> s = shapeOf(o.getResult());
              Value x = get(o.getInput());
              e.call("broadcast_f32",
                     {x, alloc(o.getResult()), e.i64(s.size()),
                      e.i64Array(s), e.i64Array(dimMask(s.size(), o.getDims())),
                      e.f64(1.0)});
              return success();
            })
            .Case([&](CrossEntropyOp o) {
              auto [rows, classes] = rowsCols(o.getLogits());
              Value l = get(o.getLogits()), y = get(o.getLabels());
              e.call("cross_entropy_f32", {l, y, alloc(o.getResult()),
                                           e.i64(rows), e.i64(classes)});
              return success();
            })
            .Case([&](CrossEntropyGradOp o) {
              auto [rows, classes] = rowsCols(o.getLogits());
              Value d = get(o.getGrad()), l = get(o.getLogits()),
                    y = get(o.getLabels());
              e.call("cross_entropy_grad_f32",
                     {d, l, y, alloc(o.getResult()), e.i64(rows),
                      e.i64(classes)});
              return success();
            })
            .Case([&](EmbeddingOp o) {
              ArrayRef<int64_t> t = shapeOf(o.getTable());
              Value tbl = get(o.getTable()), ids = get(o.getIds());
              e.call("embedding_f32",
                     {tbl, ids, alloc(o.getResult()),
                      e.i64(numElements(o.getIds())), e.i64(t[0]),
                      e.i64(t[1])});
              return success();
            })
            .Case([&](EmbeddingGradOp o) {
              ArrayRef<int64_t> t = shapeOf(o.getResult());
              Value dy = get(o.getGrad()), ids = get(o.getIds());
              e.call("embedding_grad_f32",
                     {dy, ids, alloc(o.getResult()),
                      e.i64(numElements(o.getIds())), e.i64(t[0]),
                      e.i64(t[1])});
              return success();
            })
            .Case([&](SGDUpdateOp o) {
              Value p = updatedParam(o.getParam(), o.getSharded(),
                                     numElements(o.getGrad()));
              Value buf = o.getMomentumBuffer()
                              ? e.call("state", {e.i64(stateIndex.lookup(
                                                    *o.getMomentumBuffer()))})
                              : e.null();
              e.call("sgd_update_f32",
                     {p, get(o.getGrad()), buf,
                      e.i64(numElements(o.getGrad())),
                      e.f64(o.getLr().convertToDouble()),
                      e.f64(o.getMomentum().convertToDouble()),
                      e.f64(o.getDampening().convertToDouble()),
                      e.f64(o.getWeightDecay().convertToDouble()),
                      e.i32(o.getNesterov())});
              return success();
            })
            .Case([&](AdamUpdateOp o) {
              Value p = updatedParam(o.getParam(), o.getSharded(),
                                     numElements(o.getGrad()));
              Value m = e.call("state",
                               {e.i64(stateIndex.lookup(o.getExpAvg()))});
              Value v = e.call("state",
                               {e.i64(stateIndex.lookup(o.getExpAvgSq()))});
              e.call("adam_update_f32",
                     {p, get(o.getGrad()), m, v,
                      e.i64(numElements(o.getGrad())),
                      e.f64(o.getLr().convertToDouble()),
                      e.f64(o.getBeta1().convertToDouble()),
                      e.f64(o.getBeta2().convertToDouble()),
                      e.f64(o.getEpsilon().convertToDouble()),
                      e.f64(o.getWeightDecay().convertToDouble()),
                      e.i32(o.getDecoupled())});
              return success();
            })
            .Case([&](dist::AllReduceOp o) -> LogicalResult {
              if (failed(requireF32(o, o.getInput())))
                return failure();
              // In place (the result takes the operand's buffer) unless the
              // operand is still needed.
              Value x = get(o.getInput());
              Value out = x;
              if (buffers.isAlias(o.getResult()))
                buffer[o.getResult()] = x;
              else
                out = alloc(o.getResult());
              e.call("all_reduce_f32",
                     {x, out, e.i64(numElements(o.getResult())),
                      e.i32(o.getReduction() == dist::Reduction::mean)});
              return success();
            })
            .Case([&](dist::PadFlatOp o) {
              int64_t n = numElements(o.getInput());
              int64_t total = numElements(o.getResult());
              Value x = get(o.getInput()), out = alloc(o.getResult());
              e.call("copy", {x, out, e.i64(n * 4)});
              if (total > n)
                e.call("fill_f32", {e.offset(out, e.i64(n * 4)),
                                    e.i64(total - n), e.f64(0.0)});
              return success();
            })
            .Case([&](dist::ReduceScatterOp o) {
              Value x = get(o.getInput());
              e.call("reduce_scatter_f32",
                     {x, alloc(o.getResult()),
                      e.i64(numElements(o.getResult())),
                      e.i32(o.getReduction() == dist::Reduction::mean)});
              return success();
            })
            .Case([&](dist::AllGatherOp o) {
              Value x = get(o.getInput());
              e.call("all_gather_f32", {x, alloc(o.getResult()),
                                        e.i64(numElements(o.getInput()))});
              return success();
            })
            .Case([&](dist::GatherParamOp o) {
              // The gathered copy is a communication buffer of N padded
              // slices; the tensor is its first elements.
              Gather g = gatherParam(o.getParam(), o.getTile(), o.getTiles(),
                                     o.getResult(), o);
              e.call("all_gather_f32", {g.shard, g.full, e.i64(g.count)});
              return success();
            })
            .Case([&](dist::AllGatherParamOp o) {
              Gather g = paramSlice(o.getParam());
              e.call("all_gather_f32", {g.shard, g.full, e.i64(g.count)});
              return success();
            })
            .Case([&](dist::GatherParamStartOp o) {
              // The full copy is allocated now and filled while the ops up
              // to the wait compute (see dist.gather_param).
              auto wait = cast<dist::WaitOp>(*o.getToken().getUsers().begin());
              Gather g = gatherParam(o.getParam(), o.getTile(), o.getTiles(),
                                     wait.getResult(0), wait);
              pending[o.getToken()] = {
                  e.call("all_gather_start_f32",
                         {g.shard, g.full, e.i64(g.count)}),
                  {}, {}, {}};
              return success();
            })
            .Case([&](dist::AllGatherParamStartOp o) {
              Gather g = paramSlice(o.getParam());
              pending[o.getToken()] = {
                  e.call("all_gather_start_f32",
                         {g.shard, g.full, e.i64(g.count)}),
                  {}, {}, {}};
              return success();
            })
            .Case([&](dist::ReduceScatterStartOp o) -> LogicalResult {
              if (failed(requireF32(o, o.getInputs()[0])))
                return failure();
              auto wait = cast<dist::WaitOp>(*o.getToken().getUsers().begin());
              Value mean = e.i32(o.getReduction() == dist::Reduction::mean);
              if (o.getInputs().size() == 1) {
                // One tensor: straight into the result's buffer.
                Value out = alloc(wait.getResult(0));
                pending[o.getToken()] = {
                    e.call("reduce_scatter_start_f32",
                           {get(o.getInputs()[0]), out,
                            e.i64(numElements(wait.getResult(0))), mean}),
                    {}, {}, {}};
                return success();
              }
              // A bucket: chunk r of every tensor side by side in row r, so
              // that one reduce-scatter leaves each rank its chunks.
              auto [offsets, total] = packedOffsets(wait.getResults());
              Value in = stagingBuffer(o, 0, total * gridSize * 4);
              Value out = stagingBuffer(o, 1, total * 4);
              for (auto [x, r, off] :
                   llvm::zip(o.getInputs(), wait.getResults(), offsets)) {
                int64_t chunk = numElements(r) * 4;
                e.call("copy_2d", {get(x), e.offset(in, e.i64(off * 4)),
                                   e.i64(gridSize), e.i64(chunk), e.i64(chunk),
                                   e.i64(total * 4)});
              }
              pending[o.getToken()] = {
                  e.call("reduce_scatter_start_f32",
                         {in, out, e.i64(total), mean}),
                  in, out, offsets};
              return success();
            })
            .Case([&](dist::AllReduceStartOp o) -> LogicalResult {
              if (failed(requireF32(o, o.getInputs()[0])))
                return failure();
              auto wait = cast<dist::WaitOp>(*o.getToken().getUsers().begin());
              Value mean = e.i32(o.getReduction() == dist::Reduction::mean);
              if (o.getInputs().size() == 1) {
                // In place when nothing else reads the operand.
                Value x = get(o.getInputs()[0]);
                Value out = buffers.isAlias(wait.getResult(0))
                                ? x
                                : alloc(wait.getResult(0));
                buffer[wait.getResult(0)] = out;
                pending[o.getToken()] = {
                    e.call("all_reduce_start_f32",
                           {x, out, e.i64(numElements(wait.getResult(0))),
                            mean}),
                    {}, {}, {}};
                return success();
              }
              // A bucket: the tensors concatenated, reduced in place.
              auto [offsets, total] = packedOffsets(o.getInputs());
              Value packed = stagingBuffer(o, 0, total * 4);
              for (auto [x, off] : llvm::zip(o.getInputs(), offsets))
                e.call("copy", {get(x), e.offset(packed, e.i64(off * 4)),
                                e.i64(numElements(x) * 4)});
              pending[o.getToken()] = {
                  e.call("all_reduce_start_f32",
                         {packed, packed, e.i64(total), mean}),
                  packed, Value(), offsets};
              return success();
            })
            .Case([&](dist::WaitOp o) {
              Pending p = pending.lookup(o.getToken());
              e.call("wait", {p.handle});
              Operation *start = o.getStart();
              if (!p.in)
                return success();
              // Unpack the bucket into each result's buffer: in place into
              // the operand (all-reduce) when the result aliases it.
              Value packed = isa<dist::ReduceScatterStartOp>(start) ? p.out
                                                                   : p.in;
              for (auto [i, r] : llvm::enumerate(o.getResults())) {
                Value dst = buffers.isAlias(r) ? get(start->getOperand(i))
                                               : alloc(r);
                buffer[r] = dst;
                e.call("copy", {e.offset(packed, e.i64(p.offsets[i] * 4)),
                                dst, e.i64(numElements(r) * 4)});
              }
              if (!planned) {
                e.call("free", {p.in});
                if (p.out)
                  e.call("free", {p.out});
              }
              return success();
            })
            .Case<dist::AssembleTilesOp, dist::ExtractTileOp>(
                [&](auto o) {
                  // Row blocks of R / (N T) features move between the
                  // tile's rank order and the parameter's order.
                  constexpr bool assemble =
                      std::is_same_v<decltype(o), dist::AssembleTilesOp>;
                  Value whole = assemble ? o.getResult() : o->getOperand(0);
                  auto [rows, features] = rowsCols(whole);
                  int64_t tiles, first;
                  if constexpr (assemble) {
                    tiles = o.getInputs().size();
                    first = 0;
                  } else {
                    tiles = o.getTiles();
                    first = o.getTile();
                  }
                  int64_t block = features / (gridSize * tiles);
                  int64_t tileWidth = features / tiles;
                  Value wholePtr = assemble ? alloc(o.getResult())
                                            : get(o->getOperand(0));
                  Value tilePtr = assemble ? Value() : alloc(o.getResult());
                  int64_t count = assemble ? tiles : 1;
                  for (int64_t k = 0; k < count; ++k) {
                    int64_t j = first + k;
                    Value t = assemble ? get(o->getOperand(k)) : tilePtr;
                    for (int64_t r = 0; r < gridSize; ++r) {
                      Value inTile = e.offset(t, e.i64(r * block * 4));
                      Value inWhole = e.offset(
                          wholePtr,
                          e.i64((r * (features / gridSize) + j * block) * 4));
                      Value src = assemble ? inTile : inWhole;
                      Value dst = assemble ? inWhole : inTile;
                      e.call("copy_2d",
                             {src, dst, e.i64(rows), e.i64(block * 4),
                              e.i64((assemble ? tileWidth : features) * 4),
                              e.i64((assemble ? features : tileWidth) * 4)});
                    }
                  }
                  return success();
                })
            .Case([&](dist::ReleaseOp) {
              // The gathered copy's last use: freed below.
              return success();
            })
            .Case([&](func::ReturnOp) { return success(); })
            .Default([&](Operation *other) {
              return other->emitOpError()
                     << "cannot be lowered to the ztrain runtime";
            });
    if (failed(status))
      return failure();

    if (llvm::is_contained(op.getResults(), loss))
      e.call("set_loss", {get(loss)});

    // Results nobody reads die at once; operands die after their last use.
    unsigned here = buffers.position(&op);
    for (Value r : op.getResults())
      if (owned.contains(r) && buffers.lastUse(r) == here) {
        e.call("free", {buffer[r]});
        owned.erase(r);
      }
    // A collective reads its operands until its wait.
    SmallVector<Value> operands(op.getOperands());
    if (auto wait = dyn_cast<dist::WaitOp>(op);
        wait && wait.getStart()->getNumOperands() == 1)
      llvm::append_range(operands, wait.getStart()->getOperands());
    for (Value operand : operands) {
      Value r = rootOf(operand);
      if (owned.contains(r) && buffers.lastUse(r) == here) {
        e.call("free", {buffer[r]});
        owned.erase(r);
      }
    }
  }
  if (planBroken)
    return failure();
  func::ReturnOp::create(b, entry.getLoc());
  numCalls += e.calls;
  entry.erase();
  return success();
}
