//===- RuntimeCalls.cpp - ztrt_* calls declared from the ABI table --------===//
//
// Part of the ztrain project.
//
// The runtime functions are declared from the one ABI table the runtime
// header is generated from (ztrt_abi.def), so the compiler and runtime
// cannot disagree on a signature silently: a call that does not match its
// declaration fails the llvm.call verifier. The calls are built in the
// LLVM dialect directly (llvm.func, llvm.call): a step has a call per
// kernel, hundreds of thousands in a large model, and converting them from
// func afterwards cost a fifth of the compile time (docs/benchmarks.md,
// "Compile time"). The constants stay arith.constant (named by value in
// the lowered IR: %c48_i64), uniqued at the top of the step, and
// finalize-llvm turns those few into llvm.mlir.constant.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Conversion/TrainToRuntime/StepLowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"


using namespace mlir;
using namespace ztrain;

namespace {

enum class AbiType { kPtr, kI32, kI64, kF64, kVoid };

struct AbiFunction {
  const char *name;
  AbiType result;
  SmallVector<AbiType, 12> args;
};

const AbiFunction kAbiFunctions[] = {
#define CTX AbiType::kPtr
#define DTYPE AbiType::kI32
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
#undef DTYPE
#undef PTR
#undef CPTR
#undef I32
#undef I64
#undef F64
#undef VOID
};

const AbiFunction *lookupAbi(StringRef name) {
  for (const AbiFunction &f : kAbiFunctions)
    if (name == f.name)
      return &f;
  return nullptr;
}

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

} // namespace

RuntimeCalls::RuntimeCalls(ModuleOp module, OpBuilder &b, Value ctx)
    : loc(UnknownLoc::get(b.getContext())), module(module), b(b), ctx(ctx) {}

Value RuntimeCalls::i64(int64_t v) { return constant(b.getI64IntegerAttr(v)); }
Value RuntimeCalls::i32(int32_t v) { return constant(b.getI32IntegerAttr(v)); }
Value RuntimeCalls::f64(double v) { return constant(b.getF64FloatAttr(v)); }

Value RuntimeCalls::null() {
  return LLVM::ZeroOp::create(b, loc,
                              LLVM::LLVMPointerType::get(b.getContext()));
}

Value RuntimeCalls::offset(Value base, Value bytes) {
  auto ptrTy = LLVM::LLVMPointerType::get(b.getContext());
  return LLVM::GEPOp::create(b, loc, ptrTy, b.getI8Type(), base,
                             ValueRange{bytes});
}

Value RuntimeCalls::mul(Value a, Value c) {
  return LLVM::MulOp::create(b, loc, a, c);
}

Value RuntimeCalls::rank() {
  if (!rankValue) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ctx.getParentBlock());
    rankValue = call("rank", {});
  }
  return rankValue;
}

Value RuntimeCalls::shardRank() {
  Value r = rank();
  if (shardGroup <= 0)
    return r;
  return LLVM::SRemOp::create(b, loc, r, i64(shardGroup));
}

Value RuntimeCalls::groupRank(int64_t g) {
  return LLVM::SRemOp::create(b, loc, rank(), i64(g));
}

bool RuntimeCalls::exists(StringRef name) {
  return lookupAbi(("ztrt_" + name).str()) != nullptr;
}

Value RuntimeCalls::call(StringRef name, ArrayRef<Value> args) {
  LLVM::LLVMFuncOp callee = declare(("ztrt_" + name).str());
  SmallVector<Value> all{ctx};
  all.append(args.begin(), args.end());
  ++calls;
  auto op = LLVM::CallOp::create(b, loc, callee, all);
  return op.getNumResults() ? op.getResult() : Value();
}

Value RuntimeCalls::i64Array(ArrayRef<int64_t> values) {
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
    auto arrayTy = LLVM::LLVMArrayType::get(b.getI64Type(), values.size());
    auto data = DenseIntElementsAttr::get(
        RankedTensorType::get({(int64_t)values.size()}, b.getI64Type()),
        values);
    global = LLVM::GlobalOp::create(
        b, loc, arrayTy, /*isConstant=*/true, LLVM::Linkage::Internal,
        (arrayPrefix + Twine(arrays.size())).str(), data);
    arrays[key] = global;
  }
  return LLVM::AddressOfOp::create(b, loc, global);
}

Value RuntimeCalls::constant(TypedAttr value) {
  // One arith.constant per distinct value, at the top of the step, so the
  // lowered IR reads as a list of calls.
  Value &slot = constants[value];
  if (!slot) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ctx.getParentBlock());
    slot = arith::ConstantOp::create(b, loc, value);
  }
  return slot;
}

LLVM::LLVMFuncOp RuntimeCalls::declare(const std::string &name) {
  // A module holds a symbol per parameter and state: looking each call's
  // callee up in it would make lowering quadratic in the model's size.
  LLVM::LLVMFuncOp &known = declared[name];
  if (known)
    return known;
  if (auto fn = module.lookupSymbol<LLVM::LLVMFuncOp>(name))
    return known = fn;
  const AbiFunction *abi = lookupAbi(name);
  if (!abi)
    llvm::report_fatal_error(
        ("ztrt function not in ztrt_abi.def: " + name).c_str());
  MLIRContext *mctx = b.getContext();
  SmallVector<Type> args;
  for (AbiType t : abi->args)
    args.push_back(abiToMlir(mctx, t));
  Type result = abi->result == AbiType::kVoid
                    ? LLVM::LLVMVoidType::get(mctx)
                    : abiToMlir(mctx, abi->result);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  auto fn = LLVM::LLVMFuncOp::create(
      b, loc, name, LLVM::LLVMFunctionType::get(result, args));
  return known = fn;
}
