//===- Descriptor.cpp - The model descriptor the runtime's main reads -----===//
//
// Part of the ztrain project.
//
// Whitespace-separated text, one record per line, in index order:
//   ztrain-descriptor 1
//   grid N
//   param <name> <dtype> <rank> <dims...> init <kind> <scale> [store E full|shard] [space host|nvme]
//   grad <name> <elements> <dtype>
//   state <name> <dtype> <rank> <dims...> of <param> [master] [store E full|shard] [space host|nvme]
//   buffer <name> <dtype> <rank> <dims...> init <kind> <scale>
//   input <name> <dtype> <rank> <dims...> bound <B>
//   arena <name> <bytes>
//   optimizer <kind>
//   loss_scale init <S> window <W> hysteresis <H> min <M>   (fp16)
//   clip_grad_norm <M>                                       (--clip-grad-norm)
//   grad_accum <K>                                           (--grad-accum-steps)
//   host_step_buffer <bytes>   the pinned buffer host steps stage through
//   eval                                       (ztrain_eval: forward and loss)
//   logits logits <dtype> <rank> <dims...>     (ztrain_logits: the logits)
//   flops <F>                    matmul FLOPs of one call of ztrain_step, per rank
// (docs/runtime.md, runtime/include/ztrt.h). Parameters and states are f32,
// bf16 or f16 (mixed precision: a 16-bit parameter's f32 `master` state);
// a grad record names the type of the gradient buffer the parameter's
// optimizer update consumes. Names become checkpoint and data keys.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Conversion/TrainToRuntime/StepLowering.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace ztrain;
using namespace ztrain::train;

namespace {

/// The descriptor's name of a tensor's element type, or "" when the runtime
/// cannot hold it.
std::string dtypeName(Type t) {
  Type e = cast<RankedTensorType>(t).getElementType();
  if (e.isF32())
    return "f32";
  if (e.isBF16())
    return "bf16";
  if (e.isF16())
    return "f16";
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

/// The descriptor's optional `store <E> full|shard` suffix.
void appendStorage(llvm::raw_ostream &os, const dist::StateStorage &storage) {
  if (storage.mode == dist::StateStorage::PaddedFull)
    os << " store " << storage.elements << " full";
  else if (storage.mode == dist::StateStorage::Shard)
    os << " store " << storage.elements << " shard";
}

/// The upper bound of the values of an i32 input: the class count of a
/// cross-entropy or the vocabulary of an embedding it feeds (through
/// reshapes and slices: a model that shifts its labels). 0 when it feeds
/// neither.
int64_t inputBound(Value v) {
  auto shapeOf = [](Value x) {
    return cast<RankedTensorType>(x.getType()).getShape();
  };
  int64_t bound = 0;
  auto tighten = [&](int64_t b) { bound = bound ? std::min(bound, b) : b; };
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    for (OpOperand &use : cur.getUses()) {
      Operation *user = use.getOwner();
      if (isa<ReshapeOp, SliceOp>(user))
        work.push_back(user->getResult(0));
      else if (auto ce = dyn_cast<CrossEntropyOp>(user))
        tighten(shapeOf(ce.getLogits())[1]);
      else if (auto ceg = dyn_cast<CrossEntropyGradOp>(user))
        tighten(shapeOf(ceg.getLogits())[1]);
      else if (auto cew = dyn_cast<CrossEntropyWithGradOp>(user))
        tighten(shapeOf(cew.getLogits())[1]);
      else if (auto emb = dyn_cast<EmbeddingOp>(user))
        tighten(shapeOf(emb.getTable())[0]);
      else if (auto embg = dyn_cast<EmbeddingGradOp>(user))
        tighten(shapeOf(embg.getResult())[0]);
    }
  }
  return bound;
}

/// The label an i32 input may hold besides [0, bound): the ignore_index of
/// the cross-entropies it feeds (through reshapes and slices), when they all
/// have the same one and nothing else with a bound reads it (an embedding
/// reads every id).
std::optional<int64_t> inputIgnore(Value v) {
  std::optional<int64_t> ignore;
  bool ok = true, any = false;
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    for (OpOperand &use : cur.getUses()) {
      Operation *user = use.getOwner();
      if (isa<ReshapeOp, SliceOp>(user)) {
        work.push_back(user->getResult(0));
        continue;
      }
      std::optional<int64_t> k;
      if (auto ce = dyn_cast<CrossEntropyOp>(user))
        k = ce.getIgnoreIndex();
      else if (auto ceg = dyn_cast<CrossEntropyGradOp>(user))
        k = ceg.getIgnoreIndex();
      else if (auto cew = dyn_cast<CrossEntropyWithGradOp>(user))
        k = cew.getIgnoreIndex();
      else if (isa<EmbeddingOp, EmbeddingGradOp>(user))
        ok = false;
      else
        continue;
      if (isa<EmbeddingOp, EmbeddingGradOp>(user))
        continue;
      if (!k || (any && ignore != k))
        ok = false;
      ignore = k;
      any = true;
    }
  }
  return ok && any ? ignore : std::nullopt;
}

/// The descriptor cannot carry a name with whitespace in it (a quoted
/// symbol, a train.name string).
bool checkName(Operation *op, StringRef what, StringRef name) {
  if (ztrain::train::nameProblem(name).empty())
    return true;
  op->emitError() << what << " name '" << name
                  << "' must be non-empty and contain no whitespace or "
                     "control characters (it becomes a checkpoint / data "
                     "key)";
  return false;
}

/// The dtype of a parameter or state, or an error: the runtime holds f32,
/// bf16 and f16 model state (16-bit parameters with f32 masters and
/// moments under mixed precision).
FailureOr<std::string> stateDtype(Operation *op, StringRef what, Type type) {
  std::string dtype = dtypeName(type);
  if (dtype != "f32" && dtype != "bf16" && dtype != "f16")
    return op->emitError() << what << " has type " << type
                           << "; executables hold f32, bf16 or f16 model "
                              "state";
  return dtype;
}

} // namespace

/// Every name the descriptor records is a valid key: parameters, states,
/// buffers and inputs.
static LogicalResult checkNames(ModuleOp module, func::FuncOp entry) {
  bool namesOk = true;
  for (auto param : module.getOps<ParamOp>())
    namesOk &= checkName(param, "parameter", param.getSymName());
  for (auto state : module.getOps<StateOp>())
    namesOk &= checkName(state, "state", state.getSymName());
  for (auto buffer : module.getOps<BufferOp>())
    namesOk &= checkName(buffer, "buffer", buffer.getSymName());
  // Every descriptor name is a key of its own (data files, checkpoints): an
  // input may not share one with another input or a module symbol.
  llvm::StringSet<> taken;
  for (Operation &op : module.getOps())
    if (isa<ParamOp, StateOp, BufferOp>(op))
      taken.insert(cast<SymbolOpInterface>(op).getName());
  for (BlockArgument arg : entry.getArguments())
    if (auto name = entry.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                       kInputNameAttr)) {
      namesOk &= checkName(entry, "input", name.getValue());
      if (!taken.insert(name.getValue()).second) {
        entry.emitError() << "input #" << arg.getArgNumber() << " is named '"
                          << name.getValue()
                          << "', a name another input, a parameter, state "
                             "or buffer already has (names are data and checkpoint "
                             "keys)";
        namesOk = false;
      }
    }
  return success(namesOk);
}

/// The model state: each parameter (with its storage and placement), its
/// gradient buffer, each optimizer state and buffer.
static LogicalResult writeModelState(llvm::raw_ostream &os, ModuleOp module,
                                     func::FuncOp entry, int64_t stage,
                                     int64_t gridSize) {
  auto storageOf = [&](Operation *symbolOp, Type type) {
    return dist::getStateStorage(symbolOp, cast<RankedTensorType>(type),
                                 stage, gridSize);
  };
  for (auto param : module.getOps<ParamOp>()) {
    FailureOr<std::string> dtype =
        stateDtype(param, "parameter", param.getType());
    if (failed(dtype))
      return failure();
    os << "param " << param.getSymName() << ' ' << *dtype;
    appendShape(os, param.getType());
    os << " init " << stringifyInitKind(param.getInit()) << ' '
       << llvm::format("%.17g", param.getScaleAttr()
                                    ? param.getScaleAttr().getValueAsDouble()
                                    : 0.0);
    appendStorage(os, storageOf(param, param.getType()));
    if (auto space =
            param->getAttrOfType<dist::MemorySpaceAttr>(dist::kSpaceAttr);
        space && space.getValue() != dist::MemorySpace::device)
      os << " space " << dist::stringifyMemorySpace(space.getValue());
    if (param.getFrozen())
      os << " frozen";
    os << '\n';
  }
  // The gradient buffer's type is the one the update consumes: the
  // parameter's, or f32 when mixed precision reduces in f32.
  llvm::DenseMap<StringAttr, Type> gradTypes = gradientElementTypes(entry);
  for (auto param : module.getOps<ParamOp>()) {
    Type gradType = gradTypes.lookup(param.getSymNameAttr());
    if (!gradType)
      gradType = param.getTensorType().getElementType();
    std::string gradDtype =
        dtypeName(RankedTensorType::get({}, gradType));
    if (gradDtype.empty() || gradDtype == "i32")
      return param.emitError() << "gradient has type " << gradType
                               << "; executables hold f32, bf16 or f16 "
                                  "gradients";
    os << "grad " << param.getSymName() << ' '
       << dist::getGradientElements(param, stage, gridSize) << ' '
       << gradDtype << '\n';
  }
  for (auto state : module.getOps<StateOp>()) {
    FailureOr<std::string> dtype =
        stateDtype(state, "optimizer state", state.getType());
    if (failed(dtype))
      return failure();
    os << "state " << state.getSymName() << ' ' << *dtype;
    appendShape(os, state.getType());
    os << " of " << state.getParam();
    if (state.getMaster())
      os << " master";
    appendStorage(os, storageOf(state, state.getType()));
    if (auto space =
            state->getAttrOfType<dist::MemorySpaceAttr>(dist::kSpaceAttr);
        space && space.getValue() != dist::MemorySpace::device)
      os << " space " << dist::stringifyMemorySpace(space.getValue());
    os << '\n';
  }
  for (auto buffer : module.getOps<BufferOp>()) {
    // f32 or i32 (the verifier's rule), the whole tensor on every rank.
    os << "buffer " << buffer.getSymName() << ' ' << dtypeName(buffer.getType());
    appendShape(os, buffer.getType());
    os << " init " << stringifyInitKind(buffer.getInit()) << ' '
       << llvm::format("%.17g", buffer.getScaleAttr()
                                    ? buffer.getScaleAttr().getValueAsDouble()
                                    : 0.0)
       << '\n';
  }
  return success();
}

/// The step's inputs, in argument order.
static LogicalResult writeInputs(llvm::raw_ostream &os, func::FuncOp entry) {
  for (BlockArgument arg : entry.getArguments()) {
    auto name = entry.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                   kInputNameAttr);
    std::string dtype = isa<RankedTensorType>(arg.getType())
                            ? dtypeName(arg.getType())
                            : std::string();
    // Inputs are f32 or i32 (the runtime's data sources fill only those).
    if (dtype != "f32" && dtype != "i32")
      return entry.emitError()
             << "input #" << arg.getArgNumber() << " has type "
             << arg.getType()
             << "; inputs must be static tensors of f32 or i32";
    os << "input "
       << (name ? name.getValue().str()
                : ("arg" + Twine(arg.getArgNumber())).str())
       << ' ' << dtype;
    appendShape(os, arg.getType());
    os << " bound " << (dtype == "i32" ? inputBound(arg) : 0);
    if (std::optional<int64_t> ignore =
            dtype == "i32" ? inputIgnore(arg) : std::nullopt)
      os << " ignore " << *ignore;
    os << '\n';
  }
  return success();
}

/// What the step does beyond its tensors: arenas, optimizer, FLOPs, the
/// evaluation and logits functions, clipping, accumulation, the host step's
/// buffer, loss scaling.
static LogicalResult writeStepFacts(llvm::raw_ostream &os, ModuleOp module,
                                    func::FuncOp entry) {
  // plan-memory's arenas, in ztrt_arena's index order: with the records
  // above, every byte the step will allocate, which the runtime checks
  // against the memory it may use before allocating any.
  if (auto arenas = module->getAttrOfType<DictionaryAttr>(dist::kArenasAttr))
    for (NamedAttribute arena : arenas)
      os << "arena " << arena.getName().getValue() << ' '
         << cast<IntegerAttr>(arena.getValue()).getInt() << '\n';
  if (auto opt = module->getAttrOfType<StringAttr>(kOptimizerAttr))
    os << "optimizer " << opt.getValue() << '\n';
  // The arithmetic of one call of the step on one rank, as MFU counts it:
  // 2 M N K per matrix product (forward and backward are both in the IR;
  // elementwise work is left out). Model FLOPs, as Megatron's MFU counts
  // them: the products train-recompute repeats are not the model's work
  // (zero-report prices them apart).
  {
    int64_t flops = 0;
    entry.walk([&](Operation *op) {
      if (!op->hasAttr(kRecomputedAttr))
        flops += opFlops(op).model;
    });
    os << "flops " << flops << '\n';
  }
  // A forward-only evaluation function is lowered next to the step
  // (ztrain_eval).
  if (getEvalFunction(module))
    os << "eval\n";
  // Generated kernels (train.fused regions) run on the cpu backend only:
  // the runtime refuses another backend before the first step.
  {
    int64_t regions = 0;
    module.walk([&](FusedOp) { ++regions; });
    if (regions)
      os << "fused " << regions << '\n';
  }
  // The logits function's result (ztrain_logits, for sampling).
  if (func::FuncOp logits = getLogitsFunction(module)) {
    Type t = logits.getFunctionType().getResult(0);
    std::string dtype = dtypeName(t);
    if (dtype.empty() || dtype == "i32")
      return logits.emitError() << "logits of type " << t
                                << "; executables hold f32, bf16 or f16";
    os << "logits logits " << dtype;
    appendShape(os, t);
    os << '\n';
  }
  FailureOr<std::optional<LossScalePolicy>> scaling = getLossScalePolicy(module);
  if (failed(scaling))
    return failure();
  std::optional<double> clipNorm;
  entry.walk([&](ClipGradNormOp clip) {
    clipNorm = clip.getMaxNorm().convertToDouble();
  });
  if (clipNorm)
    os << "clip_grad_norm " << llvm::format("%.17g", *clipNorm) << '\n';
  // Gradient accumulation: the step has a boundary; K is the default
  // number of micro-batches (the module's attribute, 1 when absent).
  if (getAccumulationBoundary(entry)) {
    int64_t k = 1;
    if (auto attr = module->getAttrOfType<IntegerAttr>(kGradAccumAttr))
      k = attr.getInt();
    if (k < 1)
      return module.emitError() << kGradAccumAttr << " must be >= 1, got "
                                << k;
    os << "grad_accum " << k << '\n';
  }
  // ZeRO-Offload's (and ZeRO-Infinity's) CPU step on a device backend:
  // the pinned buffer the host steps stage their gradients and parameters
  // through (zero-report's device_backend.host_step_buffers).
  if (int64_t bytes = dist::getHostStepBufferBytes(entry))
    os << "host_step_buffer " << bytes << '\n';
  if (*scaling)
    os << "loss_scale init " << llvm::format("%.17g", (*scaling)->init)
       << " window " << (*scaling)->window << " hysteresis "
       << (*scaling)->hysteresis << " min "
       << llvm::format("%.17g", (*scaling)->min) << '\n';
  return success();
}

FailureOr<std::string> ztrain::buildDescriptor(ModuleOp module,
                                               func::FuncOp entry,
                                               int64_t stage,
                                               const dist::MeshLayout &mesh) {
  if (failed(checkNames(module, entry)))
    return failure();
  std::string descriptor;
  llvm::raw_string_ostream os(descriptor);
  os << "ztrain-descriptor 1\n";
  os << "grid " << mesh.world << '\n';
  // Hybrid sharding: shard groups x replicas, and the node size the plan's
  // links were priced with (the runtime's axes; docs/scale-out.md).
  // (hpZ: the groups of its backward gathers, the states over every rank.)
  if (mesh.replicateGrid || mesh.secondary)
    os << "mesh " << mesh.shard << ' ' << mesh.replicate << ' '
       << mesh.ranksPerNode << (mesh.secondary ? " secondary" : "") << '\n';
  const int64_t gridSize = mesh.secondary ? mesh.world : mesh.shard;
  if (failed(writeModelState(os, module, entry, stage, gridSize)) ||
      failed(writeInputs(os, entry)) ||
      failed(writeStepFacts(os, module, entry)))
    return failure();
  return descriptor;
}

int64_t ztrain::plannedStepBytes(ModuleOp module, func::FuncOp entry,
                                 int64_t stage, int64_t gridSize) {
  auto storageBytes = [&](Operation *symbolOp, Type type) {
    auto tensor = cast<RankedTensorType>(type);
    return dist::getStateStorage(symbolOp, tensor, stage, gridSize).elements *
           elementBytes(tensor);
  };
  // Gradients in the type the update consumes (f32 when mixed precision
  // reduces in f32), as the descriptor's grad records say.
  llvm::DenseMap<StringAttr, Type> gradTypes = gradientElementTypes(entry);
  int64_t total = 0;
  for (auto param : module.getOps<ParamOp>()) {
    total += storageBytes(param, param.getType());
    Type gradType = gradTypes.lookup(param.getSymNameAttr());
    int64_t gradBytes = gradType ? elementBytes(gradType)
                                 : elementBytes(param.getTensorType());
    total += dist::getGradientElements(param, stage, gridSize) * gradBytes;
  }
  for (auto state : module.getOps<StateOp>())
    total += storageBytes(state, state.getType());
  for (auto buffer : module.getOps<BufferOp>())
    total += tensorBytes(buffer.getType());
  for (Type t : entry.getArgumentTypes())
    if (isa<RankedTensorType>(t))
      total += tensorBytes(t);
  if (auto arenas = module->getAttrOfType<DictionaryAttr>(dist::kArenasAttr))
    for (NamedAttribute arena : arenas)
      total += cast<IntegerAttr>(arena.getValue()).getInt();
  return total;
}
