//===- OverlapSchedule.cpp - overlap-schedule -----------------------------===//
//
// Part of the ztrain project.
//
// Turns the synchronous collectives of a partitioned step into start/wait
// pairs placed so that communication overlaps compute: parameter gathers
// prefetched `prefetch-depth` uses ahead under a bound on the gathered bytes
// live at once, gradient reductions grouped in buckets issued as soon as
// their gradients are final, gathered copies released after their last use.
// The schedule is static: the compiler decides it and the IR shows it.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

#define DEBUG_TYPE "overlap-schedule"

namespace ztrain::dist {
#define GEN_PASS_DEF_OVERLAPSCHEDULE
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace ztrain::dist

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

namespace {

int64_t bytesOf(Type type) { return tensorBytes(type); }

/// Where new ops go relative to existing ones, so that ops inserted at the
/// same point keep the order they were created in.
class Inserter {
public:
  explicit Inserter(OpBuilder &b) : b(b) {}
  /// Right before `op`, after what was inserted there earlier.
  void before(Operation *op) { b.setInsertionPoint(op); }
  /// Right after `op` (block start when null), after what was inserted
  /// there earlier. Call done() with the created op.
  void after(Operation *op, Block *block) {
    Operation *&last = lastAfter[op];
    if (last)
      b.setInsertionPointAfter(last);
    else if (op)
      b.setInsertionPointAfter(op);
    else
      b.setInsertionPointToStart(block);
    current = op;
  }
  void done(Operation *created) { lastAfter[current] = created; }

private:
  OpBuilder &b;
  DenseMap<Operation *, Operation *> lastAfter;
  Operation *current = nullptr;
};

struct OverlapSchedulePass
    : public dist::impl::OverlapScheduleBase<OverlapSchedulePass> {
  using OverlapScheduleBase::OverlapScheduleBase;
  void runOnOperation() override;

  void reuseForwardGathers(Block &body);
  void bucketGradients(Block &body, FlatSymbolRefAttr replicate,
                       bool acrossReplicas);
  LogicalResult scheduleGathers(Block &body, int64_t gridSize);
  void asyncParamAllGathers(Block &body);
};

/// Positions of the ops of `body`, for ordering decisions.
DenseMap<Operation *, unsigned> positionsOf(Block &body) {
  DenseMap<Operation *, unsigned> pos;
  for (auto [i, op] : llvm::enumerate(body))
    pos[&op] = i;
  return pos;
}

/// The first op of `body` that uses `v`, or null.
Operation *firstUser(Value v, const DenseMap<Operation *, unsigned> &pos) {
  Operation *first = nullptr;
  for (Operation *user : v.getUsers())
    if (!first || pos.lookup(user) < pos.lookup(first))
      first = user;
  return first;
}

} // namespace

/// reshard-after-forward=false: the backward pass uses the forward gather.
void OverlapSchedulePass::reuseForwardGathers(Block &body) {
  // Per parameter, and per tile of a tiled one.
  llvm::MapVector<std::pair<StringAttr, int64_t>, SmallVector<GatherParamOp>>
      gathersOf;
  for (auto g : body.getOps<GatherParamOp>())
    gathersOf[{g.getParamAttr().getAttr(), g.getTile().value_or(-1)}]
        .push_back(g);
  for (auto &[name, gathers] : gathersOf)
    for (GatherParamOp again : llvm::drop_begin(gathers)) {
      again.getResult().replaceAllUsesWith(gathers.front().getResult());
      again.erase();
    }
}

namespace {
/// When each gradient collective's input is ready and its result first
/// needed, in positions of the block before any move.
struct GradientReadiness {
  Block &body;
  const DenseMap<Operation *, unsigned> &pos;
  /// The accumulation boundary (null without accumulation): a reduction
  /// after it (stages 0 and 1: of the accumulated sum) is ready at the
  /// boundary, not where its operand was last written in the micro-batch;
  /// a reduction before it (stages 2 and 3) is first needed by the
  /// accumulation, which can wait until the boundary.
  Operation *boundary;

  Operation *readyOp(Operation *c) const {
    Operation *def = c->getOperand(0).getDefiningOp();
    if (boundary && pos.lookup(c) > pos.lookup(boundary) &&
        (!def || pos.lookup(def) < pos.lookup(boundary)))
      return boundary;
    return def;
  }
  int64_t readyPos(Operation *c) const {
    Operation *ready = readyOp(c);
    return ready ? pos.lookup(ready) : -1;
  }
  bool onlyAccumulated(Operation *c) const {
    return boundary && !c->getResult(0).use_empty() &&
           llvm::all_of(c->getResult(0).getUsers(), [](Operation *user) {
             return isa<train::AccumulateGradOp>(user);
           });
  }
  int64_t usePos(Operation *c) const {
    if (onlyAccumulated(c))
      return pos.lookup(boundary);
    Operation *user = firstUser(c->getResult(0), pos);
    return user ? pos.lookup(user) : pos.lookup(body.getTerminator());
  }
};

/// An issued bucket: its start, its wait, and whether only accumulations
/// read it.
using IssuedBucket = std::tuple<Operation *, WaitOp, bool>;
} // namespace

/// Greedy buckets in ready order: a bucket closes when it has bucket-bytes,
/// when the next gradient is of another kind or is itself at least
/// bucket-bytes (it travels alone: packing it would only copy it twice),
/// or when one of its results is needed before the next gradient is ready.
static SmallVector<SmallVector<Operation *>>
formBuckets(ArrayRef<Operation *> collectives, const GradientReadiness &r,
            int64_t bucketBytes) {
  SmallVector<SmallVector<Operation *>> buckets;
  int64_t bucketBytesSoFar = 0, bucketFirstUse = 0;
  for (Operation *c : collectives) {
    bool fits = !buckets.empty() && !buckets.back().empty();
    if (fits) {
      Operation *head = buckets.back().front();
      fits = head->getName() == c->getName() &&
             head->getAttr("reduction") == c->getAttr("reduction") &&
             head->getAttr("grid") == c->getAttr("grid") &&
             cast<RankedTensorType>(head->getOperand(0).getType())
                     .getElementType() ==
                 cast<RankedTensorType>(c->getOperand(0).getType())
                     .getElementType() &&
             bucketBytes > 0 && bucketBytesSoFar < bucketBytes &&
             bytesOf(c->getOperand(0).getType()) < bucketBytes &&
             r.readyPos(c) < bucketFirstUse;
    }
    if (!fits) {
      buckets.emplace_back();
      bucketBytesSoFar = 0;
      bucketFirstUse = r.usePos(c);
    }
    buckets.back().push_back(c);
    bucketBytesSoFar += bytesOf(c->getOperand(0).getType());
    bucketFirstUse = std::min<int64_t>(bucketFirstUse, r.usePos(c));
  }
  return buckets;
}

/// At most two buckets in flight, and buckets only accumulations read kept
/// in flight until the next one starts (see below).
static void boundBucketsInFlight(Block &body, ArrayRef<IssuedBucket> issued,
                                 Operation *boundary) {
  // At most two buckets in flight: a bucket's wait comes no later than the
  // start of the bucket after the next (double buffering, as DeepSpeed's
  // overlap_comm reduces one bucket while the next fills). A collective
  // reads its input until its wait, so waiting only where the result is
  // first used, the optimizer, kept every full gradient of the step alive
  // at once: at stages 2 and 3 the bytes partitioning was meant to free
  // (with recompute, most of the activation peak).
  // (Positions from before the moves: each move is of a wait no later
  // comparison looks at again, and asking the block after every move
  // would renumber it each time.)
  DenseMap<Operation *, unsigned> order = positionsOf(body);
  for (auto [i, entry] : llvm::enumerate(issued)) {
    auto [start, wait, deferrable] = entry;
    if (deferrable || i + 2 >= issued.size())
      continue;
    Operation *after = std::get<0>(issued[i + 2]);
    if (order.lookup(after) < order.lookup(wait))
      wait->moveBefore(after);
  }
  // A bucket only accumulations read stays in flight until the next one
  // starts (the last one: until the boundary); its accumulations follow its
  // wait.
  for (auto [i, entry] : llvm::enumerate(issued)) {
    auto [start, wait, deferrable] = entry;
    if (!deferrable)
      continue;
    Operation *until = boundary;
    if (i + 1 < issued.size() &&
        std::get<0>(issued[i + 1])->isBeforeInBlock(boundary))
      until = std::get<0>(issued[i + 1]);
    if (!wait->isBeforeInBlock(until))
      continue;
    SmallVector<Operation *> accumulations;
    for (Operation *user : wait->getUsers())
      accumulations.push_back(user);
    llvm::sort(accumulations, [](Operation *x, Operation *y) {
      return x->isBeforeInBlock(y);
    });
    wait->moveBefore(until);
    for (Operation *acc : accumulations)
      acc->moveBefore(until);
  }
}

/// Gradient reduce-scatters / all-reduces -> bucketed starts and waits.
/// Hybrid sharding's averages across replicas (all-reduces over the mesh's
/// `replicate` grid, of a reduce-scatter's shard) are bucketed in a second
/// round (`acrossReplicas`), once the first has placed the reduce-scatters'
/// waits: each starts when its shards are in, and so overlaps the rest of
/// the backward pass.
void OverlapSchedulePass::bucketGradients(Block &body,
                                          FlatSymbolRefAttr replicate,
                                          bool acrossReplicas) {
  OpBuilder b(&getContext());
  // (zero-insert-collectives already put each gradient's flat copy where
  // the gradient is final, at every stage.)
  SmallVector<Operation *> collectives;
  for (Operation &op : body) {
    if (auto rs = dyn_cast<ReduceScatterOp>(op)) {
      if (cast<RankedTensorType>(rs.getInput().getType()).getRank() != 1)
        continue;
      collectives.push_back(&op);
    } else if (auto ar = dyn_cast<AllReduceOp>(op)) {
      bool replicas = replicate && ar.getGridAttr() == replicate;
      if (replicas == acrossReplicas)
        collectives.push_back(&op);
    }
  }
  if (collectives.empty())
    return;
  DenseMap<Operation *, unsigned> pos = positionsOf(body);
  Operation *boundary = nullptr;
  for (auto op : body.getOps<train::AccumulationBoundaryOp>())
    boundary = op;
  GradientReadiness ready{body, pos, boundary};
  llvm::stable_sort(collectives, [&](Operation *x, Operation *y) {
    return ready.readyPos(x) < ready.readyPos(y);
  });

  SmallVector<SmallVector<Operation *>> buckets =
      formBuckets(collectives, ready, bucketBytes);

  Inserter at(b);
  SmallVector<IssuedBucket> issued;
  for (ArrayRef<Operation *> bucket : buckets) {
    Operation *head = bucket.front();
    SmallVector<Value> inputs;
    SmallVector<Type> types;
    bool deferrable = true;
    for (Operation *c : bucket) {
      inputs.push_back(c->getOperand(0));
      types.push_back(c->getResult(0).getType());
      deferrable &= ready.onlyAccumulated(c);
    }
    Operation *lastReady = ready.readyOp(bucket.back());
    at.after(lastReady, &body);
    Location loc = head->getLoc();
    Operation *start;
    if (auto rs = dyn_cast<ReduceScatterOp>(head))
      start = ReduceScatterStartOp::create(b, loc, rs.getReductionAttr(),
                                           inputs, rs.getGridAttr());
    else
      start = AllReduceStartOp::create(
          b, loc, cast<AllReduceOp>(head).getReductionAttr(), inputs,
          cast<AllReduceOp>(head).getGridAttr());
    at.done(start);
    // The wait goes right before the first use of any result.
    Operation *first = nullptr;
    for (Operation *c : bucket)
      if (Operation *u = firstUser(c->getResult(0), pos))
        if (!first || pos.lookup(u) < pos.lookup(first))
          first = u;
    at.before(first ? first : body.getTerminator());
    auto wait = WaitOp::create(b, loc, types, start->getResult(0));
    for (auto [c, r] : llvm::zip(bucket, wait.getResults())) {
      c->getResult(0).replaceAllUsesWith(r);
      c->erase();
    }
    issued.push_back({start, wait, deferrable});
    ++numStarts;
    if (bucket.size() > 1)
      ++numBuckets;
  }
  boundBucketsInFlight(body, issued, boundary);
}

LogicalResult OverlapSchedulePass::scheduleGathers(Block &body,
                                                   int64_t gridSize) {
  SmallVector<GatherParamOp> gathers(body.getOps<GatherParamOp>());
  if (gathers.empty())
    return success();
  DenseMap<Operation *, unsigned> pos = positionsOf(body);
  Operation *terminator = body.getTerminator();

  struct Gather {
    GatherParamOp op;
    Operation *first = nullptr, *last = nullptr;
    unsigned startPos = 0;
    int64_t bytes = 0;
  };
  SmallVector<Gather> plan;
  for (GatherParamOp g : gathers) {
    Gather info{g};
    auto type = cast<RankedTensorType>(g.getType());
    info.bytes = (type.getNumElements() + gridSize - 1) / gridSize *
                 gridSize * (type.getElementTypeBitWidth() / 8);
    // Uses through reshapes share the gathered buffer.
    SmallVector<Value> work{g.getResult()};
    while (!work.empty()) {
      Value v = work.pop_back_val();
      for (Operation *user : v.getUsers()) {
        if (!info.first || pos[user] < pos[info.first])
          if (v == g.getResult())
            info.first = user;
        if (!info.last || pos[user] > pos[info.last])
          info.last = user;
        if (auto r = dyn_cast<train::ReshapeOp>(user))
          work.push_back(r.getResult());
      }
    }
    if (!info.first) { // unused: nothing to gather
      g.erase();
      continue;
    }
    plan.push_back(info);
  }
  llvm::stable_sort(plan, [&](const Gather &x, const Gather &y) {
    return pos[x.first] < pos[y.first];
  });

  // Gathered bytes allocated at each position: [start, last use].
  std::vector<int64_t> live(body.getOperations().size() + 1, 0);
  unsigned previousStart = 0;
  for (auto [j, g] : llvm::enumerate(plan)) {
    unsigned use = pos[g.first];
    unsigned end = pos[g.last];
    int64_t ahead = static_cast<int64_t>(j) - prefetchDepth;
    unsigned p = ahead < 0 ? 0 : pos[plan[ahead].first];
    p = std::max(p, previousStart);
    if (maxLiveBytes > 0) {
      if (g.bytes > maxLiveBytes)
        return g.op.emitOpError()
               << "gathers " << g.bytes << " bytes of " << g.op.getParamAttr()
               << ", more than max-live-bytes="
               << static_cast<int64_t>(maxLiveBytes)
               << ": raise the bound or tile the operators that use it "
                  "(memory-centric-tiling)";
      auto fitsFrom = [&](unsigned from) {
        for (unsigned k = from; k <= end; ++k)
          if (live[k] + g.bytes > maxLiveBytes)
            return false;
        return true;
      };
      while (p <= use && !fitsFrom(p))
        ++p;
      if (p > use) {
        int64_t others = 0;
        for (unsigned k = use; k <= end; ++k)
          others = std::max(others, live[k]);
        InFlightDiagnostic diag =
            g.op.emitOpError()
            << "cannot gather " << g.op.getParamAttr() << " (" << g.bytes
            << " bytes) within max-live-bytes="
            << static_cast<int64_t>(maxLiveBytes) << ": " << others
            << " bytes of other gathered parameters are live during its use";
        if (!reshardAfterForward)
          diag << " (with reshard-after-forward=false, forward gathers stay "
                  "live into the backward pass)";
        return diag;
      }
    }
    for (unsigned k = p; k <= end; ++k)
      live[k] += g.bytes;
    g.startPos = p;
    previousStart = p;
  }

  // Materialize: before an op, starts first, then waits; releases after the
  // last use.
  SmallVector<Operation *> ops = llvm::map_to_vector(
      body.getOperations(), [](Operation &op) { return &op; });
  OpBuilder b(&getContext());
  Inserter at(b);
  DenseMap<Operation *, SmallVector<Gather *>> startsBefore, waitsBefore;
  for (Gather &g : plan) {
    startsBefore[ops[g.startPos]].push_back(&g);
    waitsBefore[g.first].push_back(&g);
  }
  DenseMap<Gather *, Value> tokens;
  for (Operation *op : ops) {
    at.before(op);
    for (Gather *g : startsBefore.lookup(op)) {
      auto start = GatherParamStartOp::create(
          b, g->op.getLoc(), g->op.getParamAttr(), g->op.getTileAttr(),
          g->op.getTilesAttr(), g->op.getGridAttr());
      tokens[g] = start.getToken();
      ++numStarts;
    }
    for (Gather *g : waitsBefore.lookup(op)) {
      auto wait = WaitOp::create(b, g->op.getLoc(),
                                 TypeRange{g->op.getType()}, tokens[g]);
      g->op.getResult().replaceAllUsesWith(wait.getResult(0));
      if (g->last != terminator) {
        at.after(g->last, &body);
        at.done(ReleaseOp::create(b, g->op.getLoc(), wait.getResult(0)));
        at.before(op);
        ++numReleases;
      }
    }
  }
  for (Gather &g : plan)
    g.op.erase();
  return success();
}

/// Stages 1-2: the in-place parameter all-gathers overlap the remaining
/// updates; all are waited at the end of the step.
void OverlapSchedulePass::asyncParamAllGathers(Block &body) {
  SmallVector<AllGatherParamOp> gathers(body.getOps<AllGatherParamOp>());
  OpBuilder b(&getContext());
  for (AllGatherParamOp g : gathers) {
    b.setInsertionPoint(g);
    auto start = AllGatherParamStartOp::create(b, g.getLoc(),
                                               g.getParamAttr(),
                                               g.getGridAttr());
    b.setInsertionPoint(body.getTerminator());
    WaitOp::create(b, g.getLoc(), TypeRange{}, start.getToken());
    g.erase();
    ++numStarts;
  }
}

void OverlapSchedulePass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp entry = train::getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  if (prefetchDepth < 0 || maxLiveBytes < 0 || bucketBytes < 0) {
    module.emitError() << "overlap-schedule: prefetch-depth, max-live-bytes "
                          "and bucket-bytes must be >= 0";
    return signalPassFailure();
  }
  auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr);
  if (!zero)
    return; // one process: nothing to overlap
  SymbolTableCollection symbols;
  FailureOr<int64_t> n = getGridSize(module, zero.getGrid(), symbols);
  if (failed(n))
    return signalPassFailure();
  if (!entry.getBody().hasOneBlock()) {
    entry.emitError() << "overlap-schedule needs a single-block step";
    return signalPassFailure();
  }
  Block &body = entry.getBody().front();
  bool scheduled = false;
  body.walk([&](WaitOp) { scheduled = true; });
  if (scheduled) {
    entry.emitError() << "the step is already scheduled (it has dist.wait "
                         "ops)";
    return signalPassFailure();
  }
  if (!reshardAfterForward)
    reuseForwardGathers(body);
  FlatSymbolRefAttr replicate;
  if (auto mesh = module->getAttrOfType<MeshAttr>(kMeshAttr))
    replicate = mesh.getReplicate();
  bucketGradients(body, replicate, /*acrossReplicas=*/false);
  if (replicate)
    bucketGradients(body, replicate, /*acrossReplicas=*/true);
  if (failed(scheduleGathers(body, *n)))
    return signalPassFailure();
  // plan-memory must keep the bound when it places the gathered buffers.
  if (maxLiveBytes > 0)
    module->setAttr("dist.max_live_bytes",
                    IntegerAttr::get(IntegerType::get(&getContext(), 64),
                                     static_cast<int64_t>(maxLiveBytes)));
  asyncParamAllGathers(body);
}
