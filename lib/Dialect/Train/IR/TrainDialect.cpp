//===- TrainDialect.cpp - The train dialect -------------------------------===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainDialect.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace ztrain::train;

#include "ztrain/Dialect/Train/IR/TrainDialect.cpp.inc"
#include "ztrain/Dialect/Train/IR/TrainEnums.cpp.inc"
#include "ztrain/Dialect/Train/IR/TrainInterfaces.cpp.inc"

void TrainDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ztrain/Dialect/Train/IR/TrainOps.cpp.inc"
      >();
}

/// The train dialect's attributes on operations (TrainDialect.h).
static constexpr llvm::StringLiteral kOperationAttrs[] = {
    kEntryAttr,      kGradientsAttr, kStepAttr,       kOptimizerAttr,
    kPrecisionAttr,  kLossScaleAttr, kEvalAttr,       kLogitsAttr,
    kCheckpointAttr, kRecomputedAttr, kRecomputeAttr, kGradAccumAttr};

/// `attr`'s name is not one of `known`: an error naming them (and the
/// nearest, when it is a likely misspelling).
template <size_t N>
static InFlightDiagnostic
unknownAttribute(InFlightDiagnostic diag, StringRef name,
                 const llvm::StringLiteral (&known)[N]) {
  diag << "unknown train dialect attribute '" << name << "'";
  StringRef best;
  unsigned bestDistance = 4;
  for (StringRef k : known)
    if (unsigned d = name.edit_distance(k, true, bestDistance);
        d < bestDistance) {
      bestDistance = d;
      best = k;
    }
  if (!best.empty())
    diag << " (did you mean '" << best << "'?)";
  diag << "; the train dialect's attributes here: ";
  llvm::interleaveComma(known, diag, [&](StringRef k) { diag << k; });
  return diag;
}

LogicalResult TrainDialect::verifyRegionArgAttribute(Operation *op,
                                                    unsigned /*region*/,
                                                    unsigned argIndex,
                                                    NamedAttribute attr) {
  static constexpr llvm::StringLiteral kArgAttrs[] = {kInputNameAttr};
  if (attr.getName() != kInputNameAttr)
    return unknownAttribute(op->emitOpError()
                                << "argument #" << argIndex << ": ",
                            attr.getName().getValue(), kArgAttrs);
  auto name = dyn_cast<StringAttr>(attr.getValue());
  if (!name)
    return op->emitOpError() << "argument #" << argIndex << ": '"
                             << kInputNameAttr << "' is a string (the input's "
                                                  "name in data files)";
  if (std::string problem = nameProblem(name.getValue()); !problem.empty())
    return op->emitOpError() << "argument #" << argIndex << ": input name '"
                             << name.getValue() << "' " << problem;
  return success();
}

LogicalResult TrainDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (!llvm::is_contained(kOperationAttrs, attr.getName().getValue()))
    return unknownAttribute(op->emitOpError(), attr.getName().getValue(),
                            kOperationAttrs);
  if (attr.getName() == kCheckpointAttr || attr.getName() == kRecomputedAttr) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitOpError() << "'" << attr.getName().getValue()
                               << "' is a unit attribute (it takes no value)";
    // A checkpoint marks a value (the op's one result); a recomputed op
    // may have several (train.attention's output and lse).
    bool checkpoint = attr.getName() == kCheckpointAttr;
    bool tensors = op->getNumResults() >= 1 &&
                   llvm::all_of(op->getResultTypes(), [](Type t) {
                     return isa<RankedTensorType>(t);
                   });
    if (!tensors || (checkpoint && op->getNumResults() != 1) ||
        isa<ModuleOp, func::FuncOp>(op))
      return op->emitOpError()
             << "'" << attr.getName().getValue() << "' marks an op with "
             << (checkpoint ? "exactly one tensor result"
                            : "tensor results only");
    return success();
  }
  if (attr.getName() == kEntryAttr || attr.getName() == kEvalAttr) {
    // The entry (and eval) function is the model: a declaration has no
    // forward pass to differentiate (every pass would find nothing to read).
    auto func = dyn_cast<func::FuncOp>(op);
    if (!func)
      return op->emitOpError() << "'" << attr.getName().getValue()
                               << "' marks a func.func";
    if (func.isDeclaration())
      return op->emitOpError()
             << "'" << attr.getName().getValue() << "' function @"
             << func.getSymName()
             << " is a declaration: the entry function needs a body (the "
                "model's forward pass, returning the loss)";
    // Every input name is a key of its own (data files, checkpoints): not
    // another input's, nor a parameter's, state's or buffer's.
    llvm::StringSet<> taken;
    if (auto module = func->getParentOfType<ModuleOp>())
      for (Operation &other : module.getOps())
        if (isa<ParamOp, StateOp, BufferOp>(other))
          taken.insert(cast<SymbolOpInterface>(other).getName());
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (auto name = func.getArgAttrOfType<StringAttr>(i, kInputNameAttr))
        if (!taken.insert(name.getValue()).second)
          return op->emitOpError()
                 << "input #" << i << " is named '" << name.getValue()
                 << "', a name another input, a parameter, state or buffer "
                    "already has (names are data and checkpoint keys)";
    return success();
  }
  if (attr.getName() == kRecomputeAttr) {
    auto policy = dyn_cast<StringAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !policy ||
        (policy.getValue() != "full" && policy.getValue() != "selective"))
      return op->emitOpError()
             << "'" << kRecomputeAttr
             << "' is a module attribute, \"full\" or \"selective\"";
    return success();
  }
  if (attr.getName() != kLossScaleAttr)
    return success();
  auto module = dyn_cast<ModuleOp>(op);
  if (!module)
    return op->emitOpError() << kLossScaleAttr << " belongs on a module";
  // Emits the located error itself.
  return failure(failed(getLossScalePolicy(module)));
}
