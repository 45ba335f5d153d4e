//===- StepBuffers.cpp - Buffers of a straight-line training step ---------===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/StepBuffers.h"
#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

StepBuffers::StepBuffers(func::FuncOp entry, int64_t stage)
    : body(&entry.getBody().front()) {
  Block &body = *this->body;
  for (auto [i, op] : llvm::enumerate(body))
    positions[&op] = i;

  // Gradient accumulation: the accumulator is the persistent buffer (the
  // micro-batch's gradient, its operand, is a temporary).
  for (auto acc : body.getOps<train::AccumulateGradOp>())
    gradients[acc.getResult()] = acc.getParamAttr();
  // Hashed symbol lookups (a linear scan per update is quadratic in the
  // number of parameters).
  SymbolTableCollection symbols;
  for (Operation &op : body) {
    auto update = dyn_cast<train::OptimizerUpdateOpInterface>(op);
    if (!update)
      continue;
    Value g = update.getGradient();
    // A gradient spilled for a host step: the update reads its host copy,
    // which is no gradient buffer (the device gradient is the spill's
    // input: an accumulator, or a transient temporary).
    if (auto wait = g.getDefiningOp<WaitOp>();
        wait && isa<OffloadActivationStartOp>(wait.getStart()))
      continue;
    if (auto ar = g.getDefiningOp<AllReduceOp>())
      g = ar.getInput();
    else if (auto rs = g.getDefiningOp<ReduceScatterOp>(); rs && stage == 1)
      g = rs.getInput();
    else if (auto wait = g.getDefiningOp<WaitOp>()) {
      // Of a bucket, the gradient's own operand.
      Operation *start = wait.getStart();
      unsigned i = cast<OpResult>(g).getResultNumber();
      if (isa<AllReduceStartOp>(start) ||
          (isa<ReduceScatterStartOp>(start) && stage == 1))
        g = start->getOperand(i);
    }
    // A transient gradient (zero-offload) stays an arena buffer.
    Operation *param =
        symbols.lookupNearestSymbolFrom(&op, update.getUpdatedParam());
    if (param && param->hasAttr(kTransientGradientAttr))
      continue;
    // (Its update's dist.update_wait reads it too: not another reader.)
    auto readers = llvm::count_if(g.getUses(), [](OpOperand &use) {
      return !isa<UpdateWaitOp>(use.getOwner());
    });
    if (readers == 1 && !isa<BlockArgument>(g))
      gradients[g] = update.getUpdatedParam();
  }

  for (Operation &op : body) {
    // A reshape aliases its operand, unless its result must land in a
    // gradient buffer (then it copies); an all-reduce whose operand has no
    // other use runs in place.
    if (auto r = dyn_cast<train::ReshapeOp>(op);
        r && !gradients.count(r.getResult()))
      roots[r.getResult()] = root(r.getInput());
    if (auto ar = dyn_cast<AllReduceOp>(op); ar && ar.getInput().hasOneUse())
      roots[ar.getResult()] = root(ar.getInput());
    // An accumulating product adds to its accumulator in place when nothing
    // else reads it and its buffer is a kernel's fresh result (not a
    // parameter, a buffer or another parameter's gradient): a chain of them
    // is one buffer. When the chain ends in a gradient, the chain's first
    // value is put in that gradient buffer.
    if (auto mm = dyn_cast<train::MatmulAccOp>(op);
        mm && mm.getAcc().hasOneUse()) {
      Value acc = root(mm.getAcc());
      Operation *def = acc.getDefiningOp();
      if (def && isa<train::MatmulOp, train::MatmulAccOp, train::FillOp>(def) &&
          !filledBy.count(acc) &&
          (!gradients.count(acc) ||
           gradients.lookup(acc) == gradients.lookup(mm.getResult()))) {
        roots[mm.getResult()] = acc;
        if (FlatSymbolRefAttr param = gradients.lookup(mm.getResult()))
          gradients[acc] = param;
      }
    }
    if (auto wait = dyn_cast<WaitOp>(op)) {
      Operation *start = wait.getStart();
      // A bucketed all-reduce reduces each tensor in place when nothing
      // else reads it; other waits yield fresh buffers, filled directly by
      // a gather or a one-tensor reduce-scatter.
      if (isa<AllReduceStartOp>(start)) {
        for (auto [in, out] :
             llvm::zip(start->getOperands(), wait.getResults()))
          if (in.hasOneUse())
            roots[out] = root(in);
      } else if (isa<GatherParamStartOp, ReloadActivationStartOp>(start) ||
                 (isa<ReduceScatterStartOp>(start) &&
                  start->getNumOperands() == 1)) {
        filledBy[wait.getResult(0)] = start;
      }
      // A one-tensor collective reads its operand until it completes (a
      // bucket's operands are copied into the packed buffer at the start).
      // (A reload's operand names the host copy, not a device read.)
      for (Value operand : start->getNumOperands() == 1 &&
                                   !isa<ReloadActivationStartOp>(start)
                               ? start->getOperands()
                               : OperandRange(start->getOperands().end(),
                                              start->getOperands().end())) {
        unsigned &last = lastUses[root(operand)];
        last = std::max(last, positions[&op]);
      }
    }
    if (isa<ReloadActivationStartOp>(op))
      continue;
    for (Value operand : op.getOperands()) {
      unsigned &last = lastUses[root(operand)];
      last = std::max(last, positions[&op]);
    }
  }
}

unsigned StepBuffers::allocPosition(Value rootValue) const {
  if (Operation *start = filledBy.lookup(rootValue))
    return positions.lookup(start);
  Operation *def = rootValue.getDefiningOp();
  return def ? positions.lookup(def) : 0;
}

unsigned StepBuffers::lastUse(Value rootValue) const {
  auto it = lastUses.find(rootValue);
  if (it != lastUses.end())
    return it->second;
  Operation *def = rootValue.getDefiningOp();
  return def ? positions.lookup(def) : 0;
}

static int64_t bytesOf(Type type) { return tensorBytes(type); }

int64_t ztrain::dist::swapBufferBytes(SymbolTableCollection &symbols,
                                      Operation *from, FlatSymbolRefAttr name,
                                      int64_t stage, int64_t gridSize) {
  Operation *symbol = symbols.lookupNearestSymbolFrom(from, name);
  Type type;
  if (auto state = dyn_cast_or_null<train::StateOp>(symbol))
    type = state.getType();
  else if (auto param = dyn_cast_or_null<train::ParamOp>(symbol))
    type = param.getType();
  else
    return 0;
  auto tensor = cast<RankedTensorType>(type);
  int64_t elements = getStateStorage(symbol, tensor, stage, gridSize).elements;
  // A chunk of it (sub-group-size): that chunk's elements.
  auto chunk = from->getAttrOfType<IntegerAttr>("chunk");
  auto chunks = from->getAttrOfType<IntegerAttr>("chunks");
  if (chunk && chunks)
    elements = chunkSize(elements, chunk.getInt(), chunks.getInt());
  return swapBytes(elements * elementBytes(tensor));
}

std::vector<StepBuffers::Buffer> StepBuffers::list(int64_t gridSize) const {
  std::vector<Buffer> out;
  // Swap buffers: a state's swap-in start to the wait of its swap-out. The
  // buffer holds the state's per-rank storage, rounded up to whole 4096-byte
  // blocks (O_DIRECT).
  // Keyed by the tensor and its chunk (-1: whole).
  llvm::DenseMap<std::pair<Attribute, int64_t>, std::pair<Operation *, int64_t>>
      swappedIn;
  auto chunkOf = [](Operation *op) -> int64_t {
    auto chunk = op->getAttrOfType<IntegerAttr>("chunk");
    return chunk ? chunk.getInt() : -1;
  };
  // Hashed lookups: a linear one per op is quadratic in a deep model.
  SymbolTableCollection symbols;
  auto module = body->getParentOp()->getParentOfType<ModuleOp>();
  int64_t stage = 0;
  if (auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr))
    stage = zero.getStage();
  // Host copies of offloaded activations: from the offload's start to the
  // reload's wait (or the offload's own wait when nothing reloads it).
  llvm::DenseMap<Value, Operation *> offloaded;
  for (Operation &op : *body) {
    if (auto off = dyn_cast<OffloadActivationStartOp>(op))
      offloaded[off.getInput()] = &op;
    auto wait = dyn_cast<WaitOp>(op);
    if (!wait)
      continue;
    Value of;
    if (auto reload = dyn_cast<ReloadActivationStartOp>(wait.getStart()))
      of = reload.getInput();
    if (auto off = dyn_cast<OffloadActivationStartOp>(wait.getStart());
        off && !llvm::any_of(off.getInput().getUsers(), [](Operation *u) {
          return isa<ReloadActivationStartOp>(u);
        }))
      of = off.getInput();
    if (!of)
      continue;
    auto it = offloaded.find(of);
    if (it == offloaded.end())
      continue;
    // A spilled gradient's copy (the wait's result) lives until the
    // update that reads it.
    Buffer::Kind kind = Buffer::HostActivation;
    unsigned to = positions.lookup(&op);
    if (wait.getNumResults() == 1 &&
        isa<OffloadActivationStartOp>(wait.getStart())) {
      kind = Buffer::HostGradient;
      to = std::max(to, lastUse(wait.getResult(0)));
    }
    out.push_back({kind, bytesOf(of.getType()), positions.lookup(it->second),
                   to, it->second, 0});
    offloaded.erase(it);
  }
  for (Operation &op : *body) {
    if (auto in = dyn_cast<SwapInStartOp>(op)) {
      swappedIn[{in.getStateAttr(), chunkOf(&op)}] = {
          &op,
          swapBufferBytes(symbols, &op, in.getStateAttr(), stage, gridSize)};
    }
    // A swap buffer ends at its write-back's wait, or at its release.
    FlatSymbolRefAttr ended;
    int64_t endedChunk = -1;
    if (auto wait = dyn_cast<WaitOp>(op))
      if (auto outStart = dyn_cast<SwapOutStartOp>(wait.getStart())) {
        ended = outStart.getStateAttr();
        endedChunk = chunkOf(outStart);
      }
    if (auto release = dyn_cast<SwapReleaseOp>(op))
      ended = release.getStateAttr();
    if (ended) {
      auto it = swappedIn.find({ended, endedChunk});
      if (it != swappedIn.end()) {
        const bool state = static_cast<bool>(
            symbols.lookupNearestSymbolFrom<train::StateOp>(module, ended));
        out.push_back({state ? Buffer::StateSwap : Buffer::Swap,
                       it->second.second,
                       positions.lookup(it->second.first),
                       positions.lookup(&op), it->second.first, 0});
        swappedIn.erase(it);
      }
    }
  }
  for (Operation &op : *body) {
    if (isa<train::ParamReadOp, train::BufferReadOp>(op))
      continue;
    // A spilled gradient's host copy is listed above (host memory).
    if (auto wait = dyn_cast<WaitOp>(op);
        wait && isa<OffloadActivationStartOp>(wait.getStart()))
      continue;
    for (OpResult r : op.getResults()) {
      auto type = dyn_cast<RankedTensorType>(r.getType());
      if (!type || isAlias(r) || gradientOf(r))
        continue;
      bool gathered = isa<GatherParamOp>(op) ||
                      isa_and_nonnull<GatherParamStartOp>(filledByStart(r));
      int64_t bytes = bytesOf(type);
      if (gathered) // N padded shards (a tile divides evenly: no padding)
        bytes = (type.getNumElements() + gridSize - 1) / gridSize * gridSize *
                elementBytes(type);
      out.push_back({gathered ? Buffer::Gathered : Buffer::Activation, bytes,
                     allocPosition(r), lastUse(r), &op, r.getResultNumber()});
    }
    // A bucket of several tensors travels packed, from its start to its
    // wait: a reduce-scatter's N chunks in, one chunk out; an all-reduce's
    // concatenation reduced in place.
    auto wait = dyn_cast<WaitOp>(op);
    if (!wait || wait.getStart()->getNumOperands() < 2)
      continue;
    Operation *start = wait.getStart();
    unsigned from = positions.lookup(start), to = positions.lookup(&op);
    int64_t in = 0, reduced = 0;
    for (Value v : start->getOperands())
      in += bytesOf(v.getType());
    out.push_back({Buffer::Staging, in, from, to, start, 0});
    if (isa<ReduceScatterStartOp>(start)) {
      for (Value v : wait.getResults())
        reduced += bytesOf(v.getType());
      out.push_back({Buffer::Staging, reduced, from, to, start, 1});
    }
  }
  return out;
}
