//===- ZeroOffload.cpp - zero-offload -------------------------------------===//
//
// Part of the ztrain project.
//
// Places optimizer states in host memory or on NVMe (#dist.space) and, for
// NVMe, schedules the swap transfers around each optimizer update: a
// static version of ZeRO-Infinity's optimizer swapper, written into the IR
// so that plan-memory sizes its buffers and zero-report prices its bytes.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/IR/StepBuffers.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include <cstdio>

#define DEBUG_TYPE "zero-offload"

namespace ztrain::dist {
#define GEN_PASS_DEF_ZEROOFFLOAD
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace ztrain::dist

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

namespace {
struct ZeroOffloadPass : public dist::impl::ZeroOffloadBase<ZeroOffloadPass> {
  using ZeroOffloadBase::ZeroOffloadBase;
  void runOnOperation() override;
  LogicalResult scheduleSwaps(func::FuncOp fn,
                              const llvm::DenseSet<StringAttr> &onNvme);
  void hoistUpdates(func::FuncOp fn,
                    llvm::function_ref<bool(Operation *)> moves);
  void completeAsyncUpdates(
      func::FuncOp fn,
      llvm::function_ref<bool(FlatSymbolRefAttr)> nvme = nullptr);
  LogicalResult splitIntoChunks(func::FuncOp fn,
                                llvm::function_ref<bool(FlatSymbolRefAttr)> nvme);
  LogicalResult offloadActivations(func::FuncOp fn);
  void spillGradients(func::FuncOp fn);
};

/// A tensor a swap moves: all of it, or chunk `chunk` of `chunks`
/// (sub-group-size).
struct Piece {
  FlatSymbolRefAttr sym;
  int64_t chunk = -1, chunks = 0;
  std::pair<Attribute, int64_t> key() const { return {sym, chunk}; }
};

/// An op that needs nvme-resident tensors in host buffers: an optimizer
/// update (its states and, at stage 3, its parameter shard: written) or a
/// stage-3 parameter gather (the shard: read only).
struct Use {
  Operation *op;
  /// Where the tensors' lifetime may end: the update (the dist.update_wait
  /// of an asynchronous one), the synchronous gather, or the wait of an
  /// asynchronous gather (it reads the shard until then).
  Operation *endAnchor;
  SmallVector<Piece> tensors;
  bool dirty;
  /// 0 before the accumulation boundary (every micro-batch), 1 after.
  int segment;
  /// Filled by the scheduling: the tensors swapped in for this use, and
  /// the tensors whose buffer ends after it (written back when dirty).
  SmallVector<Piece> ins;
  SmallVector<std::pair<Piece, bool>> ends;
  SmallVector<Value> inTokens, outTokens;
};
} // namespace

void ZeroOffloadPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (optimizer != "none" && optimizer != "cpu" && optimizer != "nvme") {
    module.emitError() << "zero-offload: unknown optimizer placement '"
                       << optimizer << "' (expected none, cpu or nvme)";
    return signalPassFailure();
  }
  if (param != "none" && param != "cpu" && param != "nvme") {
    module.emitError() << "zero-offload: unknown parameter placement '"
                       << param << "' (expected none, cpu or nvme)";
    return signalPassFailure();
  }
  // The fractions of the states' and the parameters' bytes placed.
  for (auto [name, value] : {std::pair<const char *, double>{"ratio", ratio},
                             {"param-ratio", paramRatio}})
    if (!(value > 0.0 && value <= 1.0)) {
      char shown[32];
      std::snprintf(shown, sizeof(shown), "%g", value);
      module.emitError() << "zero-offload: " << name << "=" << shown
                         << " is out of range (0, 1]";
      return signalPassFailure();
    }
  if (subGroupSize < 0) {
    module.emitError() << "zero-offload: sub-group-size="
                       << static_cast<int64_t>(subGroupSize)
                       << " must be >= 0 (elements; 0: whole states)";
    return signalPassFailure();
  }
  if (bufferCount < 1 || bufferCount > 16) {
    module.emitError() << "zero-offload: buffer-count="
                       << static_cast<int64_t>(bufferCount)
                       << " is out of range (1-16)";
    return signalPassFailure();
  }
  if (activations != "none" && activations != "cpu") {
    module.emitError() << "zero-offload: unknown activation placement '"
                       << activations << "' (expected none or cpu)";
    return signalPassFailure();
  }
  if (optimizer == "none" && param == "none" && activations == "none")
    return markAllAnalysesPreserved();

  func::FuncOp entry = train::getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  if (activations == "cpu" && failed(offloadActivations(entry)))
    return signalPassFailure();
  if (optimizer == "none" && param == "none")
    return;
  MLIRContext *ctx = &getContext();
  llvm::DenseSet<StringAttr> onNvme;
  if (param != "none") {
    auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr);
    if (!zero || zero.getStage() != 3) {
      module.emitError()
          << "zero-offload: param=" << param
          << " needs ZeRO stage 3 (parameters "
             "partitioned at rest and gathered for use), as DeepSpeed's "
             "offload_param; this step is at stage "
          << (zero ? zero.getStage() : 0);
      return signalPassFailure();
    }
    // cpu: the shards live in host memory and every reader (the gathers,
    // the update) reaches them there; nothing is scheduled.
    MemorySpace space = param == "cpu" ? MemorySpace::host : MemorySpace::nvme;
    auto params = llvm::to_vector(module.getOps<train::ParamOp>());
    for (train::ParamOp p : params)
      if (p->hasAttr(kSpaceAttr)) {
        p.emitOpError() << "is already placed (dist.space): zero-offload "
                           "runs once";
        return signalPassFailure();
      }
    // Partial offload: whole parameters, in declaration order, until
    // `param-ratio` of their shards' bytes are placed (at least one).
    llvm::DenseSet<StringAttr> placedParams;
    {
      SymbolTableCollection symbols;
      FailureOr<int64_t> n = getGridSize(module, zero.getGrid(), symbols);
      if (failed(n))
        return signalPassFailure();
      auto bytesOf = [&](train::ParamOp p) {
        return getStateStorage(p, p.getTensorType(), zero.getStage(), *n)
                   .elements *
               elementBytes(p.getType());
      };
      int64_t total = 0, placed = 0;
      for (train::ParamOp p : params)
        total += bytesOf(p);
      for (train::ParamOp p : params) {
        if (!placedParams.empty() &&
            placed >= paramRatio * static_cast<double>(total))
          break;
        placedParams.insert(p.getSymNameAttr());
        placed += bytesOf(p);
      }
    }
    for (train::ParamOp p : params) {
      if (!placedParams.contains(p.getSymNameAttr()))
        continue;
      p->setAttr(kSpaceAttr, MemorySpaceAttr::get(ctx, space));
      if (space == MemorySpace::nvme)
        onNvme.insert(p.getSymNameAttr());
    }
    // cpu on one rank: stage 3 gathers nothing there, so the step's ops
    // would read the host shards in place, each kernel over the host link
    // as often as it touches its operand (a GEMM re-reads tiles). Each op
    // that reads a parameter gets a gather of one rank instead (a copy into
    // the gathered-parameter buffers, as the gathers of N > 1 ranks are):
    // the host link carries each parameter once per use, priced by
    // zero-report, as DeepSpeed fetches offloaded parameters before use.
    if (space == MemorySpace::host)
      for (auto fn : module.getOps<func::FuncOp>()) {
        OpBuilder b(ctx);
        for (auto read :
             llvm::to_vector(fn.getBody().getOps<train::ParamReadOp>())) {
          if (!placedParams.contains(read.getParamAttr().getAttr()))
            continue;
          SmallVector<Operation *> users;
          for (Operation *user : read.getResult().getUsers())
            if (!llvm::is_contained(users, user))
              users.push_back(user);
          for (Operation *user : users) {
            b.setInsertionPoint(user);
            Value full = GatherParamOp::create(
                b, read.getLoc(), read.getType(), read.getParamAttr(),
                IntegerAttr(), IntegerAttr(), zero.getGrid());
            user->replaceUsesOfWith(read.getResult(), full);
          }
          read.erase();
        }
      }
  }
  if (optimizer != "none") {
    auto states = llvm::to_vector(module.getOps<train::StateOp>());
    if (states.empty()) {
      module.emitError() << "zero-offload: optimizer=" << optimizer
                         << ", but the step has no optimizer states to place "
                            "(SGD without momentum keeps none)";
      return signalPassFailure();
    }
    for (train::StateOp state : states)
      if (state->hasAttr(kSpaceAttr)) {
        state.emitOpError() << "is already placed (dist.space): zero-offload "
                               "runs once";
        return signalPassFailure();
      }
    MemorySpace space =
        optimizer == "cpu" ? MemorySpace::host : MemorySpace::nvme;
    // Partial offload: the states of whole updates, in step order, until
    // `ratio` of the states' bytes are placed (at least one update's).
    llvm::DenseSet<StringAttr> chosen;
    if (ratio < 1.0) {
      auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr);
      int64_t stage = zero ? zero.getStage() : 0, n = 1;
      if (zero) {
        SymbolTableCollection symbols;
        FailureOr<int64_t> size = getGridSize(module, zero.getGrid(), symbols);
        if (failed(size))
          return signalPassFailure();
        n = *size;
      }
      auto bytesOf = [&](train::StateOp state) {
        auto type = cast<RankedTensorType>(state.getType());
        return getStateStorage(state, type, stage, n).elements *
               elementBytes(type);
      };
      int64_t total = 0, placed = 0;
      for (train::StateOp state : states)
        total += bytesOf(state);
      SymbolTable table(module);
      entry.walk([&](train::OptimizerUpdateOpInterface update) {
        if (!chosen.empty() && placed >= ratio * static_cast<double>(total))
          return;
        for (FlatSymbolRefAttr s : update.getUpdatedStates())
          if (s && chosen.insert(s.getAttr()).second)
            placed += bytesOf(table.lookup<train::StateOp>(s.getValue()));
      });
    }
    for (train::StateOp state : states) {
      if (ratio < 1.0 && !chosen.contains(state.getSymNameAttr()))
        continue;
      state->setAttr(kSpaceAttr, MemorySpaceAttr::get(ctx, space));
      if (space == MemorySpace::nvme)
        onNvme.insert(state.getSymNameAttr());
    }
    if (space == MemorySpace::host) {
      spillGradients(entry);
      // The host-stepped updates move into the backward pass too, each
      // right after its spill's wait, and run asynchronously until their
      // parameter's next reader.
      hoistUpdates(entry, [](Operation *op) {
        return op->hasAttr(kHostGradientAttr);
      });
      completeAsyncUpdates(entry);
    }
  }
  if (onNvme.empty())
    return;

  SmallVector<func::FuncOp> fns{entry};
  llvm::append_range(fns, train::getForwardFunctions(module));
  for (func::FuncOp fn : fns)
    if (failed(scheduleSwaps(fn, onNvme)))
      return signalPassFailure();
}

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
void ZeroOffloadPass::spillGradients(func::FuncOp fn) {
  Block &body = fn.getBody().front();
  ModuleOp module = fn->getParentOfType<ModuleOp>();
  SymbolTable table(module);
  Operation *boundary = train::getAccumulationBoundary(fn);
  const bool accumulates = !body.getOps<train::AccumulateGradOp>().empty();
  SmallVector<std::pair<OffloadActivationStartOp, WaitOp>> spills;
  llvm::DenseMap<Operation *, Operation *> lastSpillAfter;
  OpBuilder b(fn.getContext());
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
        def->isBeforeInBlock(boundary))
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
    ++numSpilledGradients;
  }
  // One spill in flight: each is waited for where the next one starts (its
  // gradient's device buffer is freed there), the last before its update.
  llvm::sort(spills, [](const auto &a, const auto &b) {
    return a.first->isBeforeInBlock(b.first);
  });
  for (size_t i = 0; i + 1 < spills.size(); ++i)
    if (spills[i + 1].first->isBeforeInBlock(spills[i].second))
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
                          start->getNumOperands() == 0 &&
                          running.hasOneUse();
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
    ++numHoistedChecks;
  }
}

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
void ZeroOffloadPass::completeAsyncUpdates(
    func::FuncOp fn, llvm::function_ref<bool(FlatSymbolRefAttr)> nvme) {
  Block &body = fn.getBody().front();
  SymbolTable table(fn->getParentOfType<ModuleOp>());
  SymbolTableCollection symbols;
  OpBuilder b(fn.getContext());
  auto names = [](Operation *op, FlatSymbolRefAttr param) {
    std::optional<SymbolTable::UseRange> uses = SymbolTable::getSymbolUses(op);
    // (Unknown uses: assume it reads the parameter.)
    return !uses || llvm::any_of(*uses, [&](const SymbolTable::SymbolUse &u) {
      return u.getSymbolRef().getRootReference() == param.getAttr();
    });
  };
  // Whether an op from `from` (excluded) up to `to` (excluded; null: the
  // terminator) names the parameter.
  auto namedBetween = [&](Operation *from, Operation *to,
                          FlatSymbolRefAttr param) {
    for (Operation *next = from->getNextNode();
         next && next != to && !next->hasTrait<OpTrait::IsTerminator>();
         next = next->getNextNode())
      if (names(next, param))
        return true;
    return false;
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
      for (Operation *next = op->getNextNode();
           next && !next->hasTrait<OpTrait::IsTerminator>();
           next = next->getNextNode())
        if (swappedUse(next)) {
          nextUse = next;
          break;
        }
    Operation *reader = op->getNextNode();
    while (reader && !reader->hasTrait<OpTrait::IsTerminator>() &&
           reader != nextUse && !names(reader, param))
      reader = reader->getNextNode();
    // The parameter's all-gather (stages 1-2) moves to the end of the
    // step, after the other updates, when nothing after it names the
    // parameter: the host steps queued meanwhile run while the step
    // thread waits for this one and the device gathers it. Without
    // --overlap the synchronous gather goes before the return; with it the
    // gather's start goes before the first gather wait (its own wait is
    // one of those), so the gathers stay in flight together.
    if (auto gather = dyn_cast_or_null<AllGatherParamOp>(reader);
        gather && gather.getParamAttr() == param &&
        !namedBetween(gather, nullptr, param))
      gather->moveBefore(body.getTerminator());
    if (auto start = dyn_cast_or_null<AllGatherParamStartOp>(reader);
        start && start.getParamAttr() == param && firstGatherWait &&
        start->isBeforeInBlock(firstGatherWait) &&
        !namedBetween(start, firstGatherWait, param))
      start->moveBefore(firstGatherWait);
    // (nvme) The next use stays first if the gather moved past it.
    if (nextUse && reader && reader != nextUse &&
        nextUse->isBeforeInBlock(reader))
      reader = nextUse;
    b.setInsertionPoint(reader && !reader->hasTrait<OpTrait::IsTerminator>()
                            ? reader
                            : body.getTerminator());
    UpdateWaitOp::create(b, op->getLoc(), param, update.getGradient());
    op->setAttr(kAsyncUpdateAttr, b.getUnitAttr());
    ++numAsyncUpdates;
  }
}

/// Pa+cpu: the forward values recomputations read go to host memory
/// between the forward and the backward pass (see the pass description).
LogicalResult ZeroOffloadPass::offloadActivations(func::FuncOp fn) {
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
        isa<train::ParamReadOp, train::BufferReadOp, WaitOp, GatherParamOp>(
            op))
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
    b.setInsertionPointAfter(lastForward == v.getDefiningOp()
                                 ? off.getOperation()
                                 : lastForward);
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
    ++numOffloadedActivations;
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
void ZeroOffloadPass::hoistUpdates(
    func::FuncOp fn, llvm::function_ref<bool(Operation *)> moves) {
  Block &body = fn.getBody().front();
  auto zero = fn->getParentOfType<ModuleOp>()->getAttrOfType<ZeroAttr>(
      kZeroAttr);
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
      note(start.getParamAttr(),
           pos[*start.getToken().getUsers().begin()]);
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
    ++numHoisted;
  }
}

/// sub-group-size: an update whose states all live on nvme (and whose
/// parameter does not) and hold more than sub-group-size elements becomes
/// C updates of one chunk each (`dist.chunk = array<i64: c, C>`), in
/// order, each a use of its own below: its states' chunk is swapped in,
/// stepped and swapped out while the next chunk is read, through buffers
/// of one chunk. Adam and SGD are elementwise, so the chunks compute
/// exactly the whole update's values.
LogicalResult ZeroOffloadPass::splitIntoChunks(
    func::FuncOp fn, llvm::function_ref<bool(FlatSymbolRefAttr)> nvme) {
  if (subGroupSize <= 0)
    return success();
  Block &body = fn.getBody().front();
  for (auto update :
       llvm::to_vector(body.getOps<train::OptimizerUpdateOpInterface>())) {
    Operation *op = update;
    if (nvme(update.getUpdatedParam()))
      continue; // swapped whole with the parameter (stage 3, param=nvme)
    bool any = false, all = true;
    for (FlatSymbolRefAttr s : update.getUpdatedStates()) {
      if (!s)
        continue;
      any |= nvme(s);
      all &= nvme(s);
    }
    if (!any || !all)
      continue;
    const int64_t n =
        cast<ShapedType>(update.getGradient().getType()).getNumElements();
    if (n <= subGroupSize)
      continue;
    int64_t chunks = (n + subGroupSize - 1) / subGroupSize;
    const int64_t each = chunkElements(n, chunks);
    chunks = (n + each - 1) / each;
    if (chunks < 2)
      continue;
    OpBuilder b(op);
    for (int64_t c = 0; c < chunks; ++c) {
      Operation *part = b.clone(*op);
      part->setAttr(kChunkAttr, b.getDenseI64ArrayAttr({c, chunks}));
    }
    op->erase();
    ++numChunkedUpdates;
  }
  return success();
}

/// The swaps of one function (see the pass description): each use's
/// tensors are read ahead of it, one use early (in the same micro-batch
/// segment), and end after it: written back if it wrote them, released if
/// it only read them. A tensor still in its buffer from an earlier use when
/// a later use would read it again stays there instead (its lifetime grows;
/// one tensor never has two buffers). Before a read starts, the write-back
/// of the same tensor and those of the use `buffer-count` back complete;
/// the remaining write-backs complete before the function returns.
LogicalResult
ZeroOffloadPass::scheduleSwaps(func::FuncOp fn,
                               const llvm::DenseSet<StringAttr> &onNvme) {
  if (!fn.getBody().hasOneBlock())
    return fn.emitError() << "zero-offload needs a single-block function";
  Block &body = fn.getBody().front();
  auto nvme = [&](FlatSymbolRefAttr s) {
    return s && onNvme.contains(s.getAttr());
  };
  // A piece's `chunk c of C` attributes (none for a whole tensor).
  Builder attrs(fn.getContext());
  auto chunkIndex = [&](const Piece &t) {
    return t.chunk < 0 ? IntegerAttr() : attrs.getI64IntegerAttr(t.chunk);
  };
  auto chunkCount = [&](const Piece &t) {
    return t.chunk < 0 ? IntegerAttr() : attrs.getI64IntegerAttr(t.chunks);
  };
  // On one rank stage 3 gathers nothing: parameters are read in place. A
  // read whose value the backward pass uses again would keep the swap
  // buffer from the forward pass to the backward pass (every parameter's
  // at once): each op that reads the value gets a read of its own right
  // before it instead, so a parameter visits host memory for each use, as
  // stage 3 gathers it for the forward and again for the backward pass.
  for (auto read : llvm::to_vector(body.getOps<train::ParamReadOp>())) {
    if (!nvme(read.getParamAttr()))
      continue;
    SmallVector<Operation *> users;
    for (Operation *user : read.getResult().getUsers())
      if (!llvm::is_contained(users, user))
        users.push_back(user);
    llvm::sort(users, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
    OpBuilder rb(fn.getContext());
    for (Operation *user : llvm::drop_begin(users)) {
      rb.setInsertionPoint(user);
      auto again = cast<train::ParamReadOp>(rb.clone(*read));
      user->replaceUsesOfWith(read.getResult(), again.getResult());
    }
  }

  hoistUpdates(fn, [&](Operation *op) {
    auto update = cast<train::OptimizerUpdateOpInterface>(op);
    bool swapped = nvme(update.getUpdatedParam());
    for (FlatSymbolRefAttr s : update.getUpdatedStates())
      swapped |= nvme(s);
    return swapped;
  });
  if (failed(splitIntoChunks(fn, nvme)))
    return failure();

  // Without accumulation a gradient lives from the op that makes it to its
  // update: the gradients of swapped updates (moved right after them) go
  // into the activation arena, where they take room only for that while,
  // rather than into persistent buffers that hold every gradient at once.
  if (fn.getBody().front().getOps<train::AccumulateGradOp>().empty()) {
    SymbolTable module(fn->getParentOfType<ModuleOp>());
    for (auto update : body.getOps<train::OptimizerUpdateOpInterface>()) {
      bool swapped = nvme(update.getUpdatedParam());
      for (FlatSymbolRefAttr s : update.getUpdatedStates())
        swapped |= nvme(s);
      if (!swapped)
        continue;
      if (Operation *param =
              module.lookup(update.getUpdatedParam().getAttr()))
        param->setAttr(kTransientGradientAttr, UnitAttr::get(fn.getContext()));
    }
  }

  // Their host steps run asynchronously on a device backend, one in
  // flight: each until right before the next use.
  completeAsyncUpdates(fn, nvme);

  std::vector<Use> uses;
  Operation *boundary = nullptr;
  // A parameter read (one rank: stage 3 gathers nothing) is the parameter's
  // storage until the last use of its value and of views of it.
  StepBuffers buffers(fn, 3);
  std::vector<Operation *> at;
  for (Operation &op : body)
    at.push_back(&op);
  for (Operation &op : body) {
    if (isa<train::AccumulationBoundaryOp>(op))
      boundary = &op;
    int segment = boundary ? 1 : 0;
    if (auto read = dyn_cast<train::ParamReadOp>(op);
        read && nvme(read.getParamAttr())) {
      Operation *last = at[buffers.lastUse(read.getResult())];
      if (!boundary && train::getAccumulationBoundary(fn) &&
          !last->isBeforeInBlock(train::getAccumulationBoundary(fn)))
        return read.emitOpError()
               << "reads @" << read.getParam()
               << " in every micro-batch and uses the value after the "
                  "accumulation boundary: zero-offload cannot swap it";
      uses.push_back({&op, last, {{read.getParamAttr()}}, false, segment});
      continue;
    }
    if (auto gather = dyn_cast<GatherParamOp>(op); gather &&
        nvme(gather.getParamAttr())) {
      uses.push_back({&op, &op, {{gather.getParamAttr()}}, false, segment});
      continue;
    }
    if (auto start = dyn_cast<GatherParamStartOp>(op);
        start && nvme(start.getParamAttr())) {
      Operation *wait = *start.getToken().getUsers().begin();
      uses.push_back({&op, wait, {{start.getParamAttr()}}, false, segment});
      continue;
    }
    auto update = dyn_cast<train::OptimizerUpdateOpInterface>(op);
    if (!update)
      continue;
    // An asynchronous update's states are its host step's until its
    // dist.update_wait: their buffers end there.
    Operation *end = &op;
    if (op.hasAttr(kAsyncUpdateAttr))
      for (Operation *next = op.getNextNode(); next;
           next = next->getNextNode())
        if (auto wait = dyn_cast<UpdateWaitOp>(next);
            wait && wait.getParamAttr() == update.getUpdatedParam() &&
            wait.getGradient() == update.getGradient()) {
          end = next;
          break;
        }
    Use u{&op, end, {}, true, segment};
    // A chunk of a split update (sub-group-size) swaps that chunk only.
    int64_t chunk = -1, chunks = 0;
    if (auto c = op.getAttrOfType<DenseI64ArrayAttr>(kChunkAttr)) {
      chunk = c[0];
      chunks = c[1];
    }
    if (nvme(update.getUpdatedParam()))
      u.tensors.push_back({update.getUpdatedParam()});
    for (FlatSymbolRefAttr s : update.getUpdatedStates())
      if (nvme(s))
        u.tensors.push_back({s, chunk, chunks});
    if (u.tensors.empty())
      continue;
    if (boundary == nullptr && train::getAccumulationBoundary(fn))
      return op.emitOpError() << "runs before the accumulation boundary: "
                                 "zero-offload cannot swap its tensors";
    uses.push_back(std::move(u));
  }

  // Where each use's reads are issued: P uses ahead (before use k - P of
  // its segment, or at the segment's start when there is none), where
  // P = buffer-count - 2 leaves one buffer stepping and one writing back
  // (at least 1; 0 with one buffer: right before the use).
  const int64_t D = static_cast<int64_t>(bufferCount);
  const int64_t P = D == 1 ? 0 : std::max<int64_t>(1, D - 2);
  auto segmentStart = [&](int segment) {
    return segment == 1 ? boundary->getNextNode() : &body.front();
  };
  std::vector<Operation *> issueAt(uses.size());
  size_t segmentBegin = 0;
  for (size_t k = 0; k < uses.size(); ++k) {
    if (k > 0 && uses[k - 1].segment != uses[k].segment)
      segmentBegin = k;
    int64_t ahead = static_cast<int64_t>(k) - P;
    if (k == segmentBegin || ahead < static_cast<int64_t>(segmentBegin))
      issueAt[k] = P == 0 && k != segmentBegin ? uses[k].op
                                               : segmentStart(uses[k].segment);
    else
      issueAt[k] = uses[static_cast<size_t>(ahead)].op;
  }
  // Which use's buffer each tensor is in, and whether it was written.
  llvm::MapVector<std::pair<Attribute, int64_t>, std::pair<size_t, bool>>
      owner;
  llvm::DenseMap<std::pair<Attribute, int64_t>, Piece> pieceOf;
  for (size_t k = 0; k < uses.size(); ++k) {
    for (const Piece &t : uses[k].tensors) {
      pieceOf[t.key()] = t;
      auto it = owner.find(t.key());
      if (it != owner.end()) {
        Use &prev = uses[it->second.first];
        // Still in its buffer where this use's read would start: keep it.
        if (prev.segment == uses[k].segment &&
            !prev.endAnchor->isBeforeInBlock(issueAt[k])) {
          it->second = {k, it->second.second || uses[k].dirty};
          continue;
        }
        prev.ends.push_back({t, it->second.second});
      }
      uses[k].ins.push_back(t);
      owner[t.key()] = {k, uses[k].dirty};
    }
  }
  for (auto &[t, own] : owner)
    uses[own.first].ends.push_back({pieceOf.lookup(t), own.second});

  // The ops: ends right after their anchor, then reads (with the waits
  // they need) at their issue points, then the reads' waits right before
  // each use, then the remaining write-backs' waits before the return.
  OpBuilder b(fn.getContext());
  llvm::DenseSet<Value> waited;
  for (Use &u : uses) {
    b.setInsertionPointAfter(u.endAnchor);
    // In symbol order: the schedule is the same whatever the map's order.
    llvm::sort(u.ends, [](auto &x, auto &y) {
      return std::make_pair(x.first.sym.getValue(), x.first.chunk) <
             std::make_pair(y.first.sym.getValue(), y.first.chunk);
    });
    for (auto [t, dirty] : u.ends) {
      if (dirty) {
        u.outTokens.push_back(SwapOutStartOp::create(b, u.op->getLoc(), t.sym,
                                                     chunkIndex(t),
                                                     chunkCount(t))
                                  .getToken());
      } else {
        SwapReleaseOp::create(b, u.op->getLoc(), t.sym);
      }
    }
  }
  auto waitFor = [&](Value token, Location loc) {
    if (waited.insert(token).second)
      WaitOp::create(b, loc, TypeRange{}, token);
  };
  // The write-back of tensor t by an earlier use, for the reads of t.
  llvm::DenseMap<std::pair<Attribute, int64_t>, Value> lastOut;
  llvm::DenseMap<Operation *,
                 SmallVector<std::pair<std::pair<Attribute, int64_t>, Value>>>
      outsOf;
  for (Use &u : uses) {
    size_t i = 0;
    for (auto [t, dirty] : u.ends)
      if (dirty)
        outsOf[u.op].push_back({t.key(), u.outTokens[i++]});
  }
  for (size_t k = 0; k < uses.size(); ++k) {
    Use &u = uses[k];
    // The write-backs of the uses before this one.
    if (k > 0)
      for (auto &[t, tok] : outsOf[uses[k - 1].op])
        lastOut[t] = tok;
    if (u.ins.empty())
      continue;
    b.setInsertionPoint(issueAt[k]);
    Location loc = u.op->getLoc();
    // The write-backs these reads wait for start before them; one that
    // did not would leave the reads unordered (a tensor read before it is
    // written, more buffers than buffer-count): a scheduling bug, said
    // rather than skipped.
    auto mustWait = [&](Value tok) -> LogicalResult {
      if (!tok.getDefiningOp()->isBeforeInBlock(issueAt[k]))
        return u.op->emitOpError()
               << "zero-offload: the swap-ins for this op would start "
                  "before a write-back they must wait for";
      waitFor(tok, loc);
      return success();
    };
    for (const Piece &t : u.ins)
      if (Value tok = lastOut.lookup(t.key()))
        if (failed(mustWait(tok)))
          return failure();
    if (static_cast<int64_t>(k) - D >= 0)
      for (Value tok : uses[k - D].outTokens)
        if (failed(mustWait(tok)))
          return failure();
    for (const Piece &t : u.ins) {
      u.inTokens.push_back(SwapInStartOp::create(b, loc, t.sym,
                                                 chunkIndex(t),
                                                 chunkCount(t))
                               .getToken());
      ++numSwaps;
    }
  }
  for (Use &u : uses) {
    b.setInsertionPoint(u.op);
    for (Value tok : u.inTokens)
      waitFor(tok, u.op->getLoc());
  }
  b.setInsertionPoint(body.getTerminator());
  for (Use &u : uses)
    for (Value tok : u.outTokens)
      waitFor(tok, fn.getLoc());
  return success();
}
