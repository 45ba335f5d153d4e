//===- ZeroOffloadTransfers.cpp - zero-offload: host copies
//-----------------===//
//
// Part of the ztrain project.
//
// zero-offload's copies between device and host memory: gradients spilled
// for a host step (ZeRO-Offload), host steps made asynchronous, activations
// kept in host memory between the passes (Pa+cpu), and updates moved into
// the backward pass next to the gradients they read.
//
//===----------------------------------------------------------------------===//

#include "ZeroOffload.h"

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/IR/StepBuffers.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "zero-offload"

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;
using namespace ztrain::dist::offload;

/// optimizer=cpu: every update whose states are in host memory runs on the
/// host on a device backend (ZeRO-Offload's CPU step), so its gradient goes
/// to host memory as soon as it is final: a dist.offload_activation_start
/// right after the op that makes it (after the accumulation boundary when
/// it accumulates), on the copy stream while the backward pass goes on,
/// waited where the next spill starts (one in flight; the last right before
/// its update), which yields the host copy the update reads
/// (dist.host_gradient). The runtime decides a host step by the update's
/// first state (its master, else exp_avg or the momentum buffer); so does
/// this.
void offload::spillGradients(func::FuncOp fn, Statistics &stats) {
  Block &body = fn.getBody().front();
  ModuleOp module = fn->getParentOfType<ModuleOp>();
  SymbolTable table(module);
  Operation *boundary = train::getAccumulationBoundary(fn);
  const bool accumulates = !body.getOps<train::AccumulateGradOp>().empty();
  SmallVector<std::pair<OffloadActivationStartOp, WaitOp>> spills;
  llvm::DenseMap<Operation *, Operation *> lastSpillAfter;
  OpBuilder b(fn.getContext());
  // Positions before the spills are inserted (isBeforeInBlock after each
  // insertion renumbers the block: quadratic in the updates).
  llvm::DenseMap<Operation *, size_t> before;
  for (auto [i, op] : llvm::enumerate(body))
    before[&op] = i;
  for (auto update :
       llvm::to_vector(body.getOps<train::OptimizerUpdateOpInterface>())) {
    SmallVector<FlatSymbolRefAttr> states = update.getUpdatedStates();
    if (states.empty() || !states.front())
      continue;
    auto state = table.lookup<train::StateOp>(states.front().getValue());
    auto space =
        state ? state->getAttrOfType<MemorySpaceAttr>(kSpaceAttr) : nullptr;
    if (!space || space.getValue() != MemorySpace::host)
      continue;
    Value grad = update.getGradient();
    Operation *def = grad.getDefiningOp();
    if (!def || def->getBlock() != &body)
      continue;
    Operation *after = def;
    if (boundary && boundary->getBlock() == &body &&
        before.lookup(def) < before.lookup(boundary))
      after = boundary;
    // Spills after the same op (one making several gradients, the
    // accumulation boundary) keep the updates' order, the order of the
    // checks' chains.
    Operation *&last = lastSpillAfter[after];
    b.setInsertionPointAfter(last ? last : after);
    auto spill = OffloadActivationStartOp::create(b, grad.getLoc(), grad);
    last = spill;
    b.setInsertionPoint(update);
    auto wait = WaitOp::create(b, grad.getLoc(), TypeRange{grad.getType()},
                               spill.getToken());
    update.getGradientOperand().set(wait.getResult(0));
    update->setAttr(kHostGradientAttr, b.getUnitAttr());
    // Without accumulation the device gradient is a temporary (the
    // activation arena) that dies at the spill's wait: the device holds no
    // persistent gradient for the parameter (DeepSpeed's ZeRO-Offload).
    if (!accumulates)
      if (Operation *param = table.lookup(update.getUpdatedParam().getAttr()))
        param->setAttr(kTransientGradientAttr, b.getUnitAttr());
    spills.push_back({spill, wait});
    ++stats.spilledGradients;
  }
  // One spill in flight: each is waited for where the next one starts (its
  // gradient's device buffer is freed there), the last before its update.
  llvm::sort(spills, [](const auto &a, const auto &b) {
    return a.first->isBeforeInBlock(b.first);
  });
  // (Positions once: a wait moved before the next spill does not change
  // the order of the later spills and waits.)
  llvm::DenseMap<Operation *, size_t> at;
  for (auto [i, op] : llvm::enumerate(body))
    at[&op] = i;
  for (size_t i = 0; i + 1 < spills.size(); ++i)
    if (at[spills[i + 1].first] < at[spills[i].second])
      spills[i].second->moveBefore(spills[i + 1].first);
  if (spills.empty())
    return;

  // The checks that read every gradient before the updates (gradient
  // clipping's sum of squares, the loss scaler's overflow flag) would keep
  // each spilled gradient's device copy alive to the end of the backward
  // pass. Each link of their chains (train-optimizer builds them in the
  // order the gradients are made) moves up to right after its gradient's
  // spill starts, or its gradient's op, and its running value; its chain's
  // zero start moves to its first link. The links are pure and compute
  // the same values in the same order: the same bits, and the device copy
  // dies at the spill's wait.
  llvm::DenseMap<Value, Operation *> spilledAt;
  for (auto &[spill, wait] : spills)
    spilledAt[spill.getInput()] = spill;
  llvm::DenseMap<Operation *, unsigned> pos;
  for (auto [i, op] : llvm::enumerate(body))
    pos[&op] = i;
  SmallVector<Operation *> links;
  for (Operation &op : body)
    if (isa<train::GradSqNormOp, train::FoundNonfiniteOp>(op))
      links.push_back(&op);
  for (Operation *link : links) {
    Value input = link->getOperand(0), running = link->getOperand(1);
    Operation *anchor = spilledAt.lookup(input);
    if (!anchor)
      anchor = input.getDefiningOp();
    if (!anchor || anchor->getBlock() != &body)
      continue;
    Operation *start = running.getDefiningOp();
    const bool fromZero = start && isa<train::FillOp>(start) &&
                          start->getNumOperands() == 0 && running.hasOneUse();
    if (!fromZero) {
      if (!start || start->getBlock() != &body)
        continue;
      // (>=: a link moved earlier shares its anchor's position and lies
      // after it.)
      if (pos[start] >= pos[anchor])
        anchor = start;
    }
    if (boundary && boundary->getBlock() == &body &&
        pos[anchor] < pos[boundary])
      anchor = boundary;
    if (pos[anchor] + 1 >= pos[link])
      continue;
    link->moveAfter(anchor);
    if (fromZero)
      start->moveBefore(link);
    pos[link] = pos[anchor];
    ++stats.hoistedChecks;
  }
}

namespace {
/// Where every op of a block is (even numbers, in block order: an op moved
/// or made before `x` gets pos(x) - 1) and, for every symbol, the ops that
/// name it by position; ops whose symbol uses are unknown are assumed to
/// name every symbol. completeAsyncUpdates' questions (the next op after an
/// update that names its parameter, whether anything names it in a range)
/// are binary searches in these lists: scanning the block after each
/// update, and asking isBeforeInBlock after each move, was quadratic in the
/// updates (5.5 s of zero-offload at 100 GPT layers).
struct SymbolPositions {
  using Named = std::vector<std::pair<int64_t, Operation *>>;
  DenseMap<Operation *, int64_t> pos;
  DenseMap<StringAttr, Named> namedBy;
  Named unknown;

  explicit SymbolPositions(Block &body) {
    int64_t at = 0;
    for (Operation &op : body)
      record(&op, at += 2);
  }

  void record(Operation *op, int64_t at) {
    pos[op] = at;
    if (op->hasTrait<OpTrait::IsTerminator>())
      return;
    auto insert = [&](Named &list) {
      list.insert(
          llvm::upper_bound(list, std::make_pair(at, op),
                            [](auto &x, auto &y) { return x.first < y.first; }),
          {at, op});
    };
    std::optional<SymbolTable::UseRange> uses = SymbolTable::getSymbolUses(op);
    if (!uses) {
      insert(unknown);
      return;
    }
    llvm::SmallDenseSet<StringAttr, 4> seen;
    for (const SymbolTable::SymbolUse &u : *uses)
      if (seen.insert(u.getSymbolRef().getRootReference()).second)
        insert(namedBy[u.getSymbolRef().getRootReference()]);
  }

  void forget(Operation *op) {
    auto drop = [&](Named &list) {
      llvm::erase_if(list, [&](auto &x) { return x.second == op; });
    };
    drop(unknown);
    if (std::optional<SymbolTable::UseRange> uses =
            SymbolTable::getSymbolUses(op))
      for (const SymbolTable::SymbolUse &u : *uses)
        drop(namedBy[u.getSymbolRef().getRootReference()]);
  }

  /// The first op after position `from` and before `to` (exclusive) that
  /// names `param`, or null.
  Operation *firstNaming(int64_t from, int64_t to, FlatSymbolRefAttr param) {
    Operation *best = nullptr;
    int64_t bestAt = to;
    for (Named *list : {&namedBy[param.getAttr()], &unknown}) {
      auto it = llvm::upper_bound(
          *list, from, [](int64_t x, auto &y) { return x < y.first; });
      if (it != list->end() && it->first < bestAt) {
        bestAt = it->first;
        best = it->second;
      }
    }
    return best;
  }
};
} // namespace

/// The asynchronous host steps: each update that runs on the host gets
/// dist.async_update and a
/// dist.update_wait of its parameter and gradient, and on a device backend
/// its host step runs on the runtime's host step thread in between, beside
/// the backward pass and the other updates; its gradient lives until the
/// wait.
///
/// Without `nvme` (optimizer=cpu): the updates that read a spilled
/// gradient; the wait goes right before the parameter's next reader: the
/// first op after the update that names the parameter (its all-gather at
/// stages 1-2, a read or gather of it) or, when none does, the end of the
/// function.
///
/// With `nvme` (from scheduleSwaps, before it schedules): the host steps
/// (their first state is in host memory or on nvme, as the runtime's host
/// step decides) that swap their states, their parameter (stage 3,
/// param=nvme) or both. A device gradient (nvme states) is staged by the
/// host step itself; a spilled one (host states) is read where it is. The
/// wait goes before the parameter's next reader or the next op that uses
/// swapped tensors, whichever comes first: one host step in flight, whose
/// swapped tensors stay in their buffers until the wait (their write-back
/// follows it), so the plan's buffer-count still bounds the buffers.
void offload::completeAsyncUpdates(func::FuncOp fn, Statistics &stats,
                                   OnNvme nvme) {
  Block &body = fn.getBody().front();
  SymbolTable table(fn->getParentOfType<ModuleOp>());
  SymbolTableCollection symbols;
  OpBuilder b(fn.getContext());
  SymbolPositions at(body);
  auto &pos = at.pos;
  auto firstNaming = [&](int64_t from, int64_t to, FlatSymbolRefAttr param) {
    return at.firstNaming(from, to, param);
  };
  auto record = [&](Operation *op, int64_t where) { at.record(op, where); };
  int64_t end = pos[body.getTerminator()];
  auto moveBefore = [&](Operation *op, Operation *target) {
    at.forget(op);
    op->moveBefore(target);
    record(op, pos[target] - 1);
  };
  // (nvme) An op that needs swapped tensors in host buffers: scheduleSwaps'
  // uses.
  auto swappedUse = [&](Operation *op) {
    if (auto read = dyn_cast<train::ParamReadOp>(op))
      return nvme(read.getParamAttr());
    if (auto gather = dyn_cast<GatherParamOp>(op))
      return nvme(gather.getParamAttr());
    if (auto start = dyn_cast<GatherParamStartOp>(op))
      return nvme(start.getParamAttr());
    auto update = dyn_cast<train::OptimizerUpdateOpInterface>(op);
    if (!update)
      return false;
    bool any = nvme(update.getUpdatedParam());
    for (FlatSymbolRefAttr s : update.getUpdatedStates())
      any |= nvme(s);
    return any;
  };
  std::vector<std::pair<int64_t, Operation *>> swappedUses;
  if (nvme)
    for (Operation &op : body)
      if (swappedUse(&op))
        swappedUses.emplace_back(pos[&op], &op);
  auto updates =
      llvm::to_vector(body.getOps<train::OptimizerUpdateOpInterface>());
  // With --overlap the parameters' all-gathers are started after their
  // updates and waited at the end of the step: the first of those waits
  // after the last update.
  Operation *firstGatherWait = nullptr;
  if (!updates.empty())
    for (Operation *next = updates.back()->getNextNode(); next;
         next = next->getNextNode())
      if (auto wait = dyn_cast<WaitOp>(next);
          wait && isa_and_nonnull<AllGatherParamStartOp>(wait.getStart())) {
        firstGatherWait = next;
        break;
      }
  for (train::OptimizerUpdateOpInterface update : updates) {
    Operation *op = update;
    FlatSymbolRefAttr param = update.getUpdatedParam();
    if (op->hasAttr(kAsyncUpdateAttr))
      continue;
    if (nvme) {
      // A host step (its first state in host memory or on nvme, as the
      // runtime decides it) that swaps something: its states, its
      // parameter (stage 3), or both.
      bool swapped = nvme(param);
      for (FlatSymbolRefAttr s : update.getUpdatedStates())
        swapped |= nvme(s);
      if (!swapped || !getHostStep(symbols, op))
        continue;
    } else if (!op->hasAttr(kHostGradientAttr) || op->hasAttr(kChunkAttr)) {
      continue;
    } else if (Operation *p = table.lookup(param.getAttr())) {
      // A parameter on nvme is swapped with its update: scheduleSwaps'
      // call (with `nvme`) makes that update asynchronous, one in flight.
      if (auto space = p->getAttrOfType<MemorySpaceAttr>(kSpaceAttr);
          space && space.getValue() == MemorySpace::nvme)
        continue;
    }
    // (nvme) The next op that uses swapped tensors: the wait comes before
    // it at the latest.
    Operation *nextUse = nullptr;
    if (nvme)
      for (auto it = llvm::upper_bound(
               swappedUses, pos[op],
               [](int64_t x, auto &y) { return x < y.first; });
           it != swappedUses.end(); ++it)
        if (pos[it->second] == it->first) { // (not moved since)
          nextUse = it->second;
          break;
        }
    Operation *reader =
        firstNaming(pos[op], nextUse ? pos[nextUse] : end, param);
    if (!reader)
      reader = nextUse;
    // The parameter's all-gather (stages 1-2) moves to the end of the
    // step, after the other updates, when nothing after it names the
    // parameter: the host steps queued meanwhile run while the step
    // thread waits for this one and the device gathers it. Without
    // --overlap the synchronous gather goes before the return; with it the
    // gather's start goes before the first gather wait (its own wait is
    // one of those), so the gathers stay in flight together.
    if (auto gather = dyn_cast_or_null<AllGatherParamOp>(reader);
        gather && gather.getParamAttr() == param &&
        !firstNaming(pos[gather], end, param))
      moveBefore(gather, body.getTerminator());
    if (auto start = dyn_cast_or_null<AllGatherParamStartOp>(reader);
        start && start.getParamAttr() == param && firstGatherWait &&
        pos[start] < pos[firstGatherWait] &&
        !firstNaming(pos[start], pos[firstGatherWait], param))
      moveBefore(start, firstGatherWait);
    // (nvme) The next use stays first if the gather moved past it.
    if (nextUse && reader && reader != nextUse && pos[nextUse] < pos[reader])
      reader = nextUse;
    Operation *before = reader && !reader->hasTrait<OpTrait::IsTerminator>()
                            ? reader
                            : body.getTerminator();
    b.setInsertionPoint(before);
    Operation *wait =
        UpdateWaitOp::create(b, op->getLoc(), param, update.getGradient());
    record(wait, pos[before] - 1);
    op->setAttr(kAsyncUpdateAttr, b.getUnitAttr());
    ++stats.asyncUpdates;
  }
}

/// Pa+cpu: the forward values recomputations read go to host memory
/// between the forward and the backward pass (see the pass description).
LogicalResult offload::offloadActivations(func::FuncOp fn, Statistics &stats) {
  if (!fn.getBody().hasOneBlock())
    return fn.emitError() << "zero-offload needs a single-block function";
  Block &body = fn.getBody().front();
  llvm::DenseMap<Operation *, unsigned> pos;
  for (auto [i, op] : llvm::enumerate(body))
    pos[&op] = i;
  // The checkpoints: results of forward ops (not clones, not parameter or
  // buffer reads, not collectives' values) read by a recomputation, with
  // the first recomputation that reads each.
  struct Kept {
    Value value;
    Operation *firstBackward;
  };
  std::vector<Kept> kept;
  bool recomputes = false;
  for (Operation &op : body) {
    recomputes |= op.hasAttr(train::kRecomputedAttr);
    if (op.hasAttr(train::kRecomputedAttr) ||
        isa<train::ParamReadOp, train::BufferReadOp, WaitOp, GatherParamOp>(op))
      continue;
    for (Value v : op.getResults()) {
      if (!isa<RankedTensorType>(v.getType()))
        continue;
      Operation *first = nullptr;
      for (Operation *user : v.getUsers())
        if (user->hasAttr(train::kRecomputedAttr) &&
            (!first || pos[user] < pos[first]))
          first = user;
      if (first)
        kept.push_back({v, first});
    }
  }
  if (!recomputes)
    return fn.emitError()
           << "zero-offload: activations=cpu moves the activations "
              "train-recompute keeps for the backward pass, but this step "
              "recomputes nothing (compile with --recompute=full or "
              "selective)";
  if (kept.empty())
    return fn.emitError() << "zero-offload: activations=cpu found no "
                             "forward value that a recomputation reads";
  llvm::sort(kept, [&](const Kept &a, const Kept &b) {
    return pos[a.firstBackward] < pos[b.firstBackward];
  });
  OpBuilder b(fn.getContext());
  Operation *previousUse = nullptr;
  for (const Kept &k : kept) {
    Value v = k.value;
    // Forward uses stay on the device value; the backward pass's (at and
    // after its first recomputation) read the reloaded one.
    Operation *lastForward = v.getDefiningOp();
    SmallVector<OpOperand *> backward;
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (pos[user] >= pos[k.firstBackward])
        backward.push_back(&use);
      else if (pos[user] > pos[lastForward])
        lastForward = user;
    }
    b.setInsertionPointAfter(v.getDefiningOp());
    auto off = OffloadActivationStartOp::create(b, v.getLoc(), v);
    b.setInsertionPointAfter(
        lastForward == v.getDefiningOp() ? off.getOperation() : lastForward);
    WaitOp::create(b, v.getLoc(), TypeRange{}, off.getToken());
    // One reload ahead: while the previous kept value's segment is
    // recomputed (the first at its own use).
    Operation *at = previousUse && pos[previousUse] > pos[lastForward]
                        ? previousUse
                        : k.firstBackward;
    b.setInsertionPoint(at);
    auto reload = ReloadActivationStartOp::create(b, v.getLoc(), v);
    b.setInsertionPoint(k.firstBackward);
    auto back = WaitOp::create(b, v.getLoc(), TypeRange{v.getType()},
                               reload.getToken());
    for (OpOperand *use : backward)
      use->set(back.getResult(0));
    previousUse = k.firstBackward;
    ++stats.offloadedActivations;
  }
  return success();
}

/// Moves each update that swaps tensors up to the earliest point where it
/// computes the same values: after the op that makes its gradient, after
/// the last read of its parameter's storage (a parameter read's value and
/// views of it, a gather of its shard until the gather completes), and
/// after the ops that need every gradient before any update (gradient
/// clipping, the loss scaler's overflow check, the accumulation boundary).
/// Updates that land after the same op keep their order.
void offload::hoistUpdates(func::FuncOp fn,
                           llvm::function_ref<bool(Operation *)> moves,
                           Statistics &stats) {
  Block &body = fn.getBody().front();
  auto zero =
      fn->getParentOfType<ModuleOp>()->getAttrOfType<ZeroAttr>(kZeroAttr);
  StepBuffers buffers(fn, zero ? zero.getStage() : 0);
  std::vector<Operation *> at;
  llvm::DenseMap<Operation *, unsigned> pos;
  for (Operation &op : body) {
    pos[&op] = at.size();
    at.push_back(&op);
  }
  // The last position reading each parameter's storage, over the whole
  // function (an update never precedes a read of its own parameter).
  llvm::DenseMap<Attribute, unsigned> lastRead;
  unsigned barrier = 0;
  auto note = [&](FlatSymbolRefAttr p, unsigned where) {
    unsigned &last = lastRead[p];
    last = std::max(last, where);
  };
  for (Operation &op : body) {
    if (isa<train::ClipGradNormOp, train::UpdateLossScaleOp,
            train::AccumulationBoundaryOp>(op))
      barrier = std::max(barrier, pos[&op]);
    if (auto read = dyn_cast<train::ParamReadOp>(op))
      note(read.getParamAttr(), buffers.lastUse(read.getResult()));
    else if (auto gather = dyn_cast<GatherParamOp>(op))
      note(gather.getParamAttr(), pos[&op]);
    else if (auto start = dyn_cast<GatherParamStartOp>(op))
      note(start.getParamAttr(), pos[*start.getToken().getUsers().begin()]);
  }
  llvm::DenseMap<Operation *, Operation *> lastMovedAfter;
  for (Operation *op : llvm::to_vector(at)) {
    auto update = dyn_cast<train::OptimizerUpdateOpInterface>(op);
    if (!update || !moves(op))
      continue;
    unsigned earliest = barrier;
    Value grad = update.getGradient();
    if (Operation *def = grad.getDefiningOp())
      earliest = std::max(earliest, pos[def]);
    auto read = lastRead.find(update.getUpdatedParam());
    if (read != lastRead.end())
      earliest = std::max(earliest, read->second);
    if (earliest + 1 >= pos[op])
      continue;
    Operation *anchor = at[earliest];
    Operation *&after = lastMovedAfter[anchor];
    op->moveAfter(after ? after : anchor);
    after = op;
    ++stats.hoisted;
  }
}
