//===- FusedKernels.cpp - generated kernels of train.fused regions --------===//
//
// Part of the ztrain project.
//
// A train.fused region becomes a function
//
//   void ztrain_fused.N(void *const *args, int64_t begin, int64_t end)
//
// that computes items [begin, end) of the region (an item is an element,
// or a row of the last dimension when a member reads a bias), called
// through ztrt_fused, which spreads the items over the runtime's threads.
// The body is built from scf loops, arith, math and vector ops and llvm
// loads and stores, and converted to the LLVM dialect here with MLIR's own
// conversion patterns, function by function (finalize-llvm's module-wide
// conversion would walk the whole step). Two copies are generated: the
// baseline (vector<4xf32>, SSE2) and, for CPUs with AVX-512 (the runtime
// decides, as for its own kernels), vector<16xf32> with the AVX-512
// features, each followed by a scalar loop for the remainder.
//
// Each element: load every input (widened to f32 exactly), apply every
// member's rule (FusibleOpInterface::emitElement) in order, round each
// member's result to its element type as a store would, store the yielded
// values. Every lane of every width performs the same IEEE operations, so
// the width, the remainder loop and the thread split never change a bit.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Conversion/TrainToRuntime/StepLowering.h"
#include "ztrain/Dialect/Train/IR/ElementBuilder.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVM.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace ztrain;
using namespace ztrain::train;

namespace {
/// The baseline's lanes (128-bit SSE2) and AVX-512's (512-bit).
constexpr unsigned kBaselineLanes = 4;
constexpr unsigned kWideLanes = 16;
constexpr const char *kWideFeatures = "+avx512f,+avx512vl,+avx512bw,+avx512dq";

int64_t elementsOf(Type t) {
  return cast<RankedTensorType>(t).getNumElements();
}

/// The structure of a region: identical regions (every layer's) share a
/// kernel. Ops, their inherent attributes, where each operand comes from
/// and the types.
std::string regionKey(FusedOp op) {
  std::string key;
  llvm::raw_string_ostream os(key);
  Block &body = op.getBody().front();
  DenseMap<Value, unsigned> number;
  for (BlockArgument arg : body.getArguments()) {
    number[arg] = number.size();
    os << arg.getType() << ';';
  }
  for (Operation &inner : body) {
    os << '|' << inner.getName();
    if (Attribute props = inner.getPropertiesAsAttribute())
      os << props;
    for (Value v : inner.getOperands())
      os << ' ' << number.lookup(v);
    for (Value r : inner.getResults()) {
      number[r] = number.size();
      os << ':' << r.getType();
    }
  }
  return key;
}

/// "fused:bias_add+gelu": the trace's name of the kernel.
std::string traceName(FusedOp op) {
  std::string name = "fused:";
  for (Operation &inner : op.getBody().front().without_terminator()) {
    if (name.size() > 6)
      name += '+';
    name += inner.getName().stripDialect().str();
  }
  return name;
}

/// Emits one kernel function's body.
class KernelBuilder {
public:
  KernelBuilder(FusedOp op, LLVM::LLVMFuncOp fn, unsigned lanes,
                ElementBuilder::LibCall libCall)
      : op(op), fn(fn), lanes(lanes), libCall(std::move(libCall)) {}
  void build();

private:
  /// The region at one position: `index` the element, `column` its
  /// position in the last dimension; `width` lanes (0: scalar).
  void emitElements(OpBuilder &b, unsigned width, Value index, Value column);
  /// A loop over [lb, ub) calling emitElements at `lanes` then 1 lane.
  void emitRange(OpBuilder &b, Value lb, Value ub, Value rowBase, bool columns);

  FusedOp op;
  LLVM::LLVMFuncOp fn;
  unsigned lanes;
  ElementBuilder::LibCall libCall;
  SmallVector<Value> pointers; // inputs, then results
  SmallVector<bool> byColumn;  // per input: a last-dimension operand
};

Type storageType(OpBuilder &b, Type elementType, unsigned width) {
  Type scalar = elementType.isBF16() ? Type(b.getI16Type()) : b.getF32Type();
  return width ? Type(VectorType::get({width}, scalar)) : scalar;
}

void KernelBuilder::emitElements(OpBuilder &b, unsigned width, Value index,
                                 Value column) {
  Location loc = fn.getLoc();
  ElementBuilder e(b, loc, width, libCall);
  auto ptrTy = LLVM::LLVMPointerType::get(b.getContext());
  Block &body = op.getBody().front();
  auto address = [&](Value base, Type elementType, Value at) {
    Type scalar = elementType.isBF16() ? Type(b.getI16Type()) : b.getF32Type();
    return LLVM::GEPOp::create(b, loc, ptrTy, scalar, base, ValueRange{at});
  };
  // Unaligned: ZeRO slices and views start anywhere.
  auto alignment = [](Type elementType) {
    return elementType.isBF16() ? 2 : 4;
  };

  DenseMap<Value, Value> value;
  for (auto [i, arg] : llvm::enumerate(body.getArguments())) {
    Type elementType = getElementTypeOrSelf(arg.getType());
    Value p = address(pointers[i], elementType, byColumn[i] ? column : index);
    Value loaded = LLVM::LoadOp::create(
        b, loc, storageType(b, elementType, width), p, alignment(elementType));
    if (elementType.isBF16())
      loaded =
          e.fromBf16Bits(arith::ExtUIOp::create(b, loc, e.intType(), loaded));
    value[arg] = loaded;
  }
  for (Operation &inner : body.without_terminator()) {
    SmallVector<Value> x;
    for (Value v : inner.getOperands())
      x.push_back(value.lookup(v));
    Value r = cast<FusibleOpInterface>(inner).emitElement(e, x);
    Value result = inner.getResult(0);
    value[result] = e.roundTo(getElementTypeOrSelf(result.getType()), r);
  }
  unsigned inputs = body.getNumArguments();
  for (auto [i, v] : llvm::enumerate(op.getYield().getValues())) {
    Type elementType = getElementTypeOrSelf(v.getType());
    Value stored = value.lookup(v);
    if (elementType.isBF16())
      stored = arith::TruncIOp::create(
          b, loc, storageType(b, elementType, width), e.bf16Bits(stored));
    LLVM::StoreOp::create(b, loc, stored,
                          address(pointers[inputs + i], elementType, index),
                          alignment(elementType));
  }
}

void KernelBuilder::emitRange(OpBuilder &b, Value lb, Value ub, Value rowBase,
                              bool columns) {
  Location loc = fn.getLoc();
  auto constant = [&](int64_t v) -> Value {
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
  };
  // [lb, vectorEnd) in steps of `lanes`, then the rest one by one.
  Value count = arith::SubIOp::create(b, loc, ub, lb);
  Value whole = arith::MulIOp::create(
      b, loc, arith::DivUIOp::create(b, loc, count, constant(lanes)),
      constant(lanes));
  Value vectorEnd = arith::AddIOp::create(b, loc, lb, whole);
  auto loop = [&](Value from, Value to, unsigned width) {
    scf::ForOp::create(
        b, loc, from, to, constant(width ? width : 1), ValueRange{},
        [&](OpBuilder &nb, Location, Value iv, ValueRange) {
          Value index =
              columns ? Value(arith::AddIOp::create(nb, loc, rowBase, iv)) : iv;
          emitElements(nb, width, index, columns ? iv : index);
          scf::YieldOp::create(nb, loc);
        });
  };
  loop(lb, vectorEnd, lanes);
  loop(vectorEnd, ub, 0);
}

void KernelBuilder::build() {
  OpBuilder b(fn.getContext());
  Block *entry = fn.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  Location loc = fn.getLoc();
  auto ptrTy = LLVM::LLVMPointerType::get(b.getContext());
  Value args = entry->getArgument(0), begin = entry->getArgument(1),
        end = entry->getArgument(2);
  Block &body = op.getBody().front();
  unsigned total = body.getNumArguments() + op.getNumResults();
  for (unsigned i = 0; i < total; ++i) {
    Value slot = LLVM::GEPOp::create(b, loc, ptrTy, ptrTy, args,
                                     ArrayRef<LLVM::GEPArg>{int32_t(i)});
    pointers.push_back(LLVM::LoadOp::create(b, loc, ptrTy, slot));
  }
  // An input is read by column when a member reads it as a bias.
  byColumn.assign(body.getNumArguments(), false);
  for (Operation &inner : body.without_terminator())
    for (OpOperand &use : inner.getOpOperands())
      if (auto arg = dyn_cast<BlockArgument>(use.get()))
        if (cast<FusibleOpInterface>(inner).isLastDimOperand(
                use.getOperandNumber()))
          byColumn[arg.getArgNumber()] = true;
  if (!llvm::is_contained(byColumn, true)) {
    emitRange(b, begin, end, Value(), /*columns=*/false);
  } else {
    // Items are rows: every column of each.
    int64_t cols = op.getIterationShape().back();
    auto constant = [&](int64_t v) -> Value {
      return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
    };
    scf::ForOp::create(
        b, loc, begin, end, constant(1), ValueRange{},
        [&](OpBuilder &nb, Location, Value row, ValueRange) {
          Value rowBase = arith::MulIOp::create(
              nb, loc, row,
              arith::ConstantOp::create(nb, loc, nb.getI64IntegerAttr(cols)));
          emitRange(
              nb, arith::ConstantOp::create(nb, loc, nb.getI64IntegerAttr(0)),
              arith::ConstantOp::create(nb, loc, nb.getI64IntegerAttr(cols)),
              rowBase, /*columns=*/true);
          scf::YieldOp::create(nb, loc);
        });
  }
  LLVM::ReturnOp::create(b, loc, ValueRange{});
}
} // namespace

FusedKernels::FusedKernels(ModuleOp module) : module(module) {}

LLVM::LLVMFuncOp FusedKernels::libm(StringRef name) {
  LLVM::LLVMFuncOp &fn = libmFunctions[name];
  if (fn)
    return fn;
  if ((fn = module.lookupSymbol<LLVM::LLVMFuncOp>(name)))
    return fn;
  OpBuilder b(module.getContext());
  b.setInsertionPointToEnd(module.getBody());
  Type f32 = b.getF32Type();
  return fn = LLVM::LLVMFuncOp::create(b, module.getLoc(), name,
                                       LLVM::LLVMFunctionType::get(f32, {f32}));
}

FailureOr<LLVM::LLVMFuncOp> FusedKernels::generate(FusedOp op,
                                                   const std::string &name,
                                                   unsigned lanes,
                                                   StringRef features) {
  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  b.setInsertionPointToEnd(module.getBody());
  auto ptrTy = LLVM::LLVMPointerType::get(ctx);
  Type i64 = b.getI64Type();
  auto fn = LLVM::LLVMFuncOp::create(
      b, op.getLoc(), name,
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx),
                                  {ptrTy, i64, i64}),
      LLVM::Linkage::Internal);
  if (!features.empty())
    fn.setTargetFeaturesAttr(LLVM::TargetFeaturesAttr::get(ctx, features));
  // The C library's expf / erff: one call per lane.
  ElementBuilder::LibCall call = [this](OpBuilder &cb, Location loc,
                                        StringRef callee, Value x) -> Value {
    return LLVM::CallOp::create(cb, loc, libm(callee), ValueRange{x})
        .getResult();
  };
  KernelBuilder(op, fn, lanes, call).build();

  // MLIR's conversions to the LLVM dialect, on this function only.
  LLVMTypeConverter converter(ctx);
  RewritePatternSet patterns(ctx);
  populateSCFToControlFlowConversionPatterns(patterns);
  arith::populateArithToLLVMConversionPatterns(converter, patterns);
  populateMathToLLVMConversionPatterns(converter, patterns);
  cf::populateControlFlowToLLVMConversionPatterns(converter, patterns);
  populateVectorToLLVMConversionPatterns(converter, patterns);
  LLVMConversionTarget target(*ctx);
  target.addIllegalDialect<scf::SCFDialect, arith::ArithDialect,
                           math::MathDialect, cf::ControlFlowDialect,
                           vector::VectorDialect>();
  if (failed(applyPartialConversion(fn.getOperation(), target,
                                    std::move(patterns))))
    return op.emitOpError() << "its generated kernel did not convert to the "
                               "LLVM dialect";
  return fn;
}

FailureOr<FusedKernels::Kernel> FusedKernels::get(FusedOp op) {
  std::string key = regionKey(op);
  auto it = kernels.find(key);
  if (it != kernels.end())
    return it->second;
  std::string base = "ztrain_fused." + std::to_string(kernels.size());
  Kernel k;
  FailureOr<LLVM::LLVMFuncOp> fn = generate(op, base, kBaselineLanes, "");
  if (failed(fn))
    return failure();
  FailureOr<LLVM::LLVMFuncOp> wide =
      generate(op, base + ".avx512", kWideLanes, kWideFeatures);
  if (failed(wide))
    return failure();
  k.fn = *fn;
  k.wide = *wide;
  // The trace's name, NUL-terminated.
  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  b.setInsertionPointToStart(module.getBody());
  std::string text = traceName(op);
  text.push_back('\0');
  k.name = LLVM::GlobalOp::create(
      b, op.getLoc(), LLVM::LLVMArrayType::get(b.getI8Type(), text.size()),
      /*isConstant=*/true, LLVM::Linkage::Internal, base + ".name",
      b.getStringAttr(text));
  return kernels[key] = k;
}

/// The items a region's kernel runs over: elements, or rows when a member
/// reads a bias (each item then `itemElements` long).
std::pair<int64_t, int64_t> ztrain::fusedItems(FusedOp op) {
  int64_t elements = elementsOf(op.getResult(0).getType());
  for (Operation &inner : op.getBody().front().without_terminator())
    for (OpOperand &use : inner.getOpOperands())
      if (cast<FusibleOpInterface>(inner).isLastDimOperand(
              use.getOperandNumber())) {
        int64_t cols = op.getIterationShape().back();
        return {elements / cols, cols};
      }
  return {elements, 1};
}
