//===- StepMemory.cpp - Where each tensor of a lowered step lives ---------===//
//
// Part of the ztrain project.
//
// Memory addressing for lower-to-runtime. Every tensor value of the step
// gets a pointer: parameters, states and inputs are the runtime's
// (ztrt_param / ztrt_state / ztrt_input); a gradient the optimizer consumes
// is written into its parameter's persistent gradient buffer (ztrt_grad);
// everything else has a slot in plan-memory's arenas (an offset into one
// persistent block per category) or, without a plan, its own allocation
// freed right after its last use. Which is which comes from
// dist::StepBuffers, the analysis zero-report prices, so what the lowering
// allocates is what the report predicted.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Conversion/TrainToRuntime/StepLowering.h"

#include "ztrt.h" // ztrt_category, ztrt_hyper_id

// ztrain::train::KernelArg::hyper's ids are the runtime's.
static_assert(int(ztrain::train::KernelArg::Beta1) == ZTRT_HYPER_BETA1 &&
              int(ztrain::train::KernelArg::Beta2) == ZTRT_HYPER_BETA2 &&
              int(ztrain::train::KernelArg::Eps) == ZTRT_HYPER_EPS &&
              int(ztrain::train::KernelArg::WeightDecay) == ZTRT_HYPER_WEIGHT_DECAY &&
              int(ztrain::train::KernelArg::Momentum) == ZTRT_HYPER_MOMENTUM &&
              int(ztrain::train::KernelArg::Dampening) == ZTRT_HYPER_DAMPENING,
              "ztrain::train::KernelArg::HyperParam and ztrt_hyper_id disagree");

using namespace mlir;
using namespace ztrain;
using namespace ztrain::train;

RuntimePattern::~RuntimePattern() = default;

StepLowering::StepLowering(ModuleOp module, func::FuncOp entry,
                           RuntimeCalls &rt, int64_t stage, int64_t gridSize)
    : rt(rt), stage(stage), gridSize(gridSize), module(module),
      stepBuffers(entry, stage), symbols(module),
      loss(entry.getBody().front().getTerminator()->getOperand(0)) {
  for (auto param : module.getOps<ParamOp>())
    paramIndex[param.getSymName()] = paramIndex.size();
  for (auto state : module.getOps<StateOp>())
    stateIndex[state.getSymName()] = stateIndex.size();
  for (auto buffer : module.getOps<BufferOp>())
    bufferIndex[buffer.getSymName()] = bufferIndex.size();

  // plan-memory's arenas: one block per category for the whole step, every
  // buffer at its planned offset, persistent across steps (ztrt_arena):
  // steady-state steps allocate nothing, and large arenas are not mapped
  // and faulted in every step. Without a plan, each buffer is allocated
  // and freed on its own.
  auto arenas = module->getAttrOfType<DictionaryAttr>(dist::kArenasAttr);
  if (!arenas)
    return;
  isPlanned = true;
  for (auto [index, arena] : llvm::enumerate(arenas)) {
    int64_t bytes = cast<IntegerAttr>(arena.getValue()).getInt();
    StringRef name = arena.getName().getValue();
    int32_t category = name == "activations" ? ZTRT_CAT_ACTIVATIONS
                       : name == "gathered_parameters" ? ZTRT_CAT_GATHERED
                       : name == "swap_buffers"        ? ZTRT_CAT_SWAP_BUFFERS
                       : name == "host_activations" ? ZTRT_CAT_HOST_ACTIVATIONS
                       : name == "host_gradients"   ? ZTRT_CAT_HOST_GRADIENTS
                       : name == "state_swap_buffers"
                           ? ZTRT_CAT_STATE_SWAP_BUFFERS
                                                    : ZTRT_CAT_OTHER;
    if (bytes > 0)
      arenaBase[name] =
          rt.call("arena", {rt.i64(index), rt.i64(bytes), rt.i32(category)});
  }
}

Value StepLowering::planned(Attribute attr, Operation *where) {
  auto slot = dyn_cast_or_null<dist::SlotAttr>(attr);
  if (!slot || !arenaBase.count(slot.getArena())) {
    where->emitOpError() << "has no place in the memory plan; run "
                            "plan-memory right before lower-to-runtime";
    planBroken = true;
    return rt.null();
  }
  return rt.offset(arenaBase[slot.getArena()], slot.getOffset());
}

Value StepLowering::slotOf(Operation *op, unsigned i) {
  auto list = op->getAttrOfType<ArrayAttr>(dist::kSlotsAttr);
  return planned(list && i < list.size() ? list[i] : Attribute(), op);
}

Value StepLowering::stagingOf(Operation *op, unsigned i) {
  auto list = op->getAttrOfType<ArrayAttr>(dist::kStagingAttr);
  return planned(list && i < list.size() ? list[i] : Attribute(), op);
}

Value StepLowering::alloc(Value v) {
  Value ptr;
  if (FlatSymbolRefAttr param = stepBuffers.gradientOf(v)) {
    ptr = rt.call("grad", {rt.i64(paramIndex.lookup(param.getValue()))});
  } else if (isPlanned) {
    auto r = cast<OpResult>(v);
    ptr = slotOf(r.getOwner(), r.getResultNumber());
  } else {
    return allocOwned(v, tensorBytes(v.getType()), ZTRT_CAT_ACTIVATIONS);
  }
  bind(v, ptr);
  return ptr;
}

Value StepLowering::allocOwned(Value v, int64_t bytes, int32_t category) {
  Value ptr = rt.call("alloc", {rt.i64(bytes), rt.i32(category)});
  bind(v, ptr);
  owned.insert(v);
  ++numBuffers;
  return ptr;
}

Value StepLowering::stagingBuffer(Operation *start, unsigned index,
                                  int64_t bytes) {
  if (isPlanned)
    return stagingOf(start, index);
  ++numBuffers;
  return rt.call("alloc", {rt.i64(bytes), rt.i32(ZTRT_CAT_OTHER)});
}

Value StepLowering::param(StringRef name) {
  auto swapped = swapBuffers.find(name);
  if (swapped != swapBuffers.end())
    return swapped->second;
  return rt.call("param", {rt.i64(paramIndex.lookup(name))});
}

Value StepLowering::buffer(StringRef name) {
  return rt.call("buffer", {rt.i64(bufferIndex.lookup(name))});
}

Value StepLowering::state(FlatSymbolRefAttr name, int64_t chunk) {
  if (!name)
    return rt.null();
  auto swapped = swapBuffers.find(swapKey(name.getValue(), chunk));
  if (swapped != swapBuffers.end())
    return swapped->second;
  return rt.call("state", {rt.i64(stateIndex.lookup(name.getValue()))});
}

Type StepLowering::paramElementType(StringRef name) {
  return symbols.lookup<ParamOp>(name).getTensorType().getElementType();
}

Value StepLowering::updatedParam(StringRef name, bool sharded, int64_t slice) {
  Value p = param(name);
  ParamOp op = paramOp(name);
  if (!sharded || gridSize == 1 ||
      storageOf(op, op.getType()).mode == dist::StateStorage::Shard)
    return p;
  return rt.offset(
      p, rt.mul(rt.shardRank(), rt.i64(slice * elementBytes(op.getType()))));
}

void StepLowering::finishOp(Operation &op) {
  // The loss is reported as soon as it exists: later ops update parameters
  // in place, and the loss may be (a view of) a parameter.
  if (reportLoss && llvm::is_contained(op.getResults(), loss))
    rt.call("set_loss", {get(loss)});

  // Results nobody reads die at once; operands die after their last use.
  unsigned here = stepBuffers.position(&op);
  auto release = [&](Value root) {
    if (owned.contains(root) && stepBuffers.lastUse(root) == here) {
      rt.call("free", {pointers[root]});
      owned.erase(root);
    }
  };
  for (Value r : op.getResults())
    release(r);
  // A one-tensor collective reads its operand until its wait.
  SmallVector<Value> operands(op.getOperands());
  if (auto wait = dyn_cast<dist::WaitOp>(op);
      wait && wait.getStart()->getNumOperands() == 1)
    llvm::append_range(operands, wait.getStart()->getOperands());
  for (Value operand : operands)
    release(stepBuffers.root(operand));
}

void StepLowering::branchAtBoundary(Location loc) {
  OpBuilder &b = rt.builder();
  Value last = rt.call("accumulation_boundary", {});
  Value isLast = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::ne, last,
                                      rt.i32(0));
  Region *region = b.getInsertionBlock()->getParent();
  Block *skip = new Block(), *rest = new Block();
  region->push_back(skip);
  region->push_back(rest);
  LLVM::CondBrOp::create(b, loc, isLast, rest, skip);
  // Unplanned buffers alive across the boundary are freed after their last
  // use in the rest; a micro-batch that returns here frees them now, in
  // allocation order.
  b.setInsertionPointToStart(skip);
  SmallVector<Value> live(owned.begin(), owned.end());
  llvm::sort(live, [&](Value x, Value y) {
    return stepBuffers.allocPosition(x) < stepBuffers.allocPosition(y);
  });
  for (Value v : live)
    rt.call("free", {pointers[v]});
  LLVM::ReturnOp::create(b, loc, ValueRange());
  b.setInsertionPointToStart(rest);
}

FailureOr<int32_t> ztrain::dtypeCode(Operation *where, Type elementType) {
  if (elementType.isF32())
    return ZTRT_F32;
  if (elementType.isBF16())
    return ZTRT_BF16;
  if (elementType.isF16())
    return ZTRT_F16;
  return where->emitOpError()
         << "computes in " << elementType
         << ", which the runtime does not store (its kernels take f32, "
            "bf16 and f16)";
}

FailureOr<RuntimeKernel> ztrain::typedKernel(Operation *where,
                                             StringRef kernel,
                                             Type elementType) {
  FailureOr<int32_t> code = dtypeCode(where, elementType);
  if (failed(code))
    return failure();
  int32_t dtype = *code;
  if (!RuntimeCalls::exists(kernel))
    return where->emitOpError()
           << "names the runtime kernel ztrt_" << kernel
           << ", which is not in the ABI table (ztrt_abi.def)";
  return RuntimeKernel{kernel.str(), dtype};
}

Value RuntimeKernel::call(RuntimeCalls &rt, ArrayRef<Value> args) const {
  SmallVector<Value> all{rt.i32(dtype)};
  all.append(args.begin(), args.end());
  return rt.call(name, all);
}

LogicalResult ztrain::emitKernelCall(Operation *op, const KernelCall &call,
                                     StepLowering &s) {
  FailureOr<RuntimeKernel> name =
      typedKernel(op, call.kernel, call.elementType);
  if (failed(name))
    return failure();
  RuntimeCalls &rt = s.rt;
  SmallVector<Value> args;
  for (const KernelArg &arg : call.args) {
    switch (arg.kind) {
    case KernelArg::Buffer: {
      auto result = dyn_cast<OpResult>(arg.value);
      args.push_back(result && result.getOwner() == op ? s.alloc(arg.value)
                                                       : s.get(arg.value));
      break;
    }
    case KernelArg::I64:
      args.push_back(rt.i64(arg.i));
      break;
    case KernelArg::I32:
      args.push_back(rt.i32(static_cast<int32_t>(arg.i)));
      break;
    case KernelArg::F64:
      args.push_back(rt.f64(arg.f));
      break;
    case KernelArg::LearningRate:
      args.push_back(rt.call("lr", {rt.f64(arg.f)}));
      break;
    case KernelArg::Hyper:
      args.push_back(
          rt.call("hyper", {rt.i32(static_cast<int32_t>(arg.i)), rt.f64(arg.f)}));
      break;
    case KernelArg::I64Array:
      args.push_back(rt.i64Array(arg.array));
      break;
    case KernelArg::DType: {
      FailureOr<int32_t> code = dtypeCode(op, arg.type);
      if (failed(code))
        return failure();
      args.push_back(rt.i32(*code));
      break;
    }
    }
  }
  name->call(rt, args);
  return success();
}
