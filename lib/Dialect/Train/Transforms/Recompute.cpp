//===- Recompute.cpp - train-recompute ------------------------------------===//
//
// Part of the ztrain project.
//
// Activation checkpointing (ZeRO-R's, Megatron's and torch.utils.
// checkpoint's): the backward pass reads fewer forward values, and
// recomputes the others from the ones it keeps, right before it needs them.
// The recomputation is the forward ops cloned (same ops, same operands, same
// attributes, so the same bits, dropout included: its mask is a function of
// seed, stream, step and index), placed in the backward pass, and the
// backward ops read the clones; the originals then die in the forward pass
// and plan-memory's liveness does the rest.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"
#include "ztrain/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

#define DEBUG_TYPE "train-recompute"

namespace ztrain::train {
#define GEN_PASS_DEF_TRAINRECOMPUTE
#include "ztrain/Dialect/Train/Transforms/Passes.h.inc"
} // namespace ztrain::train

using namespace mlir;
using namespace ztrain;
using namespace ztrain::train;

namespace {
struct TrainRecomputePass
    : public ztrain::train::impl::TrainRecomputeBase<TrainRecomputePass> {
  using TrainRecomputeBase::TrainRecomputeBase;
  void runOnOperation() override;
};

/// The forward pass of a differentiated entry function and what the
/// recomputation needs to know about it.
struct Forward {
  Block *body = nullptr;
  /// Position of each op in the body.
  DenseMap<Operation *, unsigned> position;
  /// Ops at positions <= last are the forward pass (the loss's op is the
  /// last: train-autodiff erased every forward op the loss does not read).
  unsigned last = 0;
  /// Forward values computed from the step's inputs (activations), as
  /// opposed to those computed from parameters, buffers and constants only.
  DenseSet<Value> fromInputs;

  bool isForward(Operation *op) const {
    auto it = position.find(op);
    return it != position.end() && it->second <= last;
  }
  /// The last forward op reading `v`, or the position of its definition.
  unsigned lastForwardUse(Value v) const {
    unsigned at = position.lookup(v.getDefiningOp());
    for (Operation *user : v.getUsers())
      if (isForward(user))
        at = std::max(at, position.lookup(user));
    return at;
  }
  unsigned forwardUses(Value v) const {
    unsigned n = 0;
    for (Operation *user : v.getUsers())
      n += isForward(user);
    return n;
  }
};
} // namespace

/// Segment boundaries found from the graph when the model carries no
/// marks: the residual stream. A forward value is a boundary when, right
/// after its op, it is the only activation still to be read by the forward
/// pass (every other activation is dead: the graph can be cut there) and
/// two forward ops read it (the residual connection and the branch). In a
/// pre-norm transformer that is the input of every attention and MLP
/// sub-block (merged into whole blocks below); the last sub-block's output
/// feeds only the final norm, so the last MLP stays with the loss head (not
/// recomputed).
static SmallVector<Operation *> residualBoundaries(const Forward &fwd) {
  SmallVector<int64_t> delta(fwd.last + 2, 0);
  SmallVector<Operation *> ops(fwd.last + 1, nullptr);
  for (Operation &op : *fwd.body) {
    unsigned p = fwd.position.lookup(&op);
    if (p > fwd.last)
      break;
    ops[p] = &op;
    for (Value r : op.getResults()) {
      if (!fwd.fromInputs.contains(r))
        continue;
      unsigned lastUse = fwd.lastForwardUse(r);
      if (lastUse == p)
        continue; // read by nothing in the forward pass
      ++delta[p];
      --delta[lastUse];
    }
  }
  SmallVector<Operation *> boundaries;
  int64_t live = 0;
  for (unsigned p = 0; p <= fwd.last; ++p) {
    live += delta[p];
    Operation *op = ops[p];
    if (live == 1 && op && op->getNumResults() == 1 &&
        fwd.fromInputs.contains(op->getResult(0)) &&
        fwd.forwardUses(op->getResult(0)) >= 2)
      boundaries.push_back(op);
  }
  // Whole blocks: where some sub-blocks hold attention (a product of two
  // activations), a boundary before a sub-block without one (the MLP)
  // merges it into the attention sub-block before it, so that a segment is
  // a transformer block, as with the builders' marks; the last boundary
  // stays, so that the last block's attention is recomputed too.
  SmallVector<bool> attention(boundaries.size(), false);
  for (auto [i, b] : llvm::enumerate(boundaries)) {
    unsigned from = fwd.position.lookup(b) + 1;
    unsigned to = i + 1 < boundaries.size()
                      ? fwd.position.lookup(boundaries[i + 1])
                      : fwd.last;
    for (unsigned p = from; p <= to && !attention[i]; ++p)
      if (isa_and_nonnull<AttentionOp>(ops[p]))
        attention[i] = true;
      else if (auto mm = dyn_cast_or_null<MatmulOp>(ops[p]))
        attention[i] = fwd.fromInputs.contains(mm.getLhs()) &&
                       fwd.fromInputs.contains(mm.getRhs());
  }
  if (llvm::none_of(attention, [](bool a) { return a; }))
    return boundaries;
  SmallVector<Operation *> blocks;
  for (auto [i, b] : llvm::enumerate(boundaries))
    if (attention[i] || i + 1 == boundaries.size())
      blocks.push_back(b);
  return blocks;
}

/// What selective recompute repeats: the attention scores, a product of
/// two activations larger than either (q k^T: [T, T] per head from two
/// [T, D]), and the MLP's activation function (gelu, silu, relu, sigmoid),
/// each with the ops that follow it up to the next matrix product (scale,
/// softmax, the probabilities' dropout; SwiGLU's gating product). These
/// hold the [T, T] probabilities and the 4x-wide activations, most of a
/// block's bytes, for few FLOPs; norms, the linear layers' products, the
/// attention output (probabilities times v, [T, D]: keeping it is cheaper
/// than a second batched product) and the residual stream are kept.
static DenseSet<Operation *> selectiveSet(const Forward &fwd) {
  DenseSet<Operation *> core;
  for (Operation &op : *fwd.body) {
    if (!fwd.isForward(&op))
      break;
    if (auto mm = dyn_cast<MatmulOp>(op)) {
      auto elements = [](Value v) {
        return cast<RankedTensorType>(v.getType()).getNumElements();
      };
      int64_t out = elements(mm.getResult());
      if (fwd.fromInputs.contains(mm.getLhs()) &&
          fwd.fromInputs.contains(mm.getRhs()) && out > elements(mm.getLhs()) &&
          out > elements(mm.getRhs()))
        core.insert(&op);
      continue;
    }
    if (isa<GeluOp, SiluOp, ReluOp, SigmoidOp>(op) &&
        fwd.fromInputs.contains(op.getOperand(0))) {
      core.insert(&op);
      continue;
    }
    if (llvm::any_of(op.getOperands(), [&](Value v) {
          return v.getDefiningOp() && core.contains(v.getDefiningOp());
        }))
      core.insert(&op);
  }
  return core;
}

/// The recomputation of one segment: the ops that recompute the forward
/// values the backward pass reads (the closure over their operands back to
/// kept values), and the first backward op that needs one of them.
struct SegmentPlan {
  llvm::SetVector<Operation *> ops;
  Operation *before = nullptr;
};

/// The forward pass of the entry function: positions, its last op (the
/// loss's) and the values computed from the step's inputs.
static LogicalResult analyzeForward(func::FuncOp entry, Forward &fwd) {
  fwd.body = &entry.getBody().front();
  for (auto [i, op] : llvm::enumerate(*fwd.body))
    fwd.position[&op] = i;
  Operation *lossOp =
      fwd.body->getTerminator()->getOperand(0).getDefiningOp();
  if (!lossOp)
    return entry.emitError()
           << "train-recompute: the loss is an argument of @"
           << entry.getSymName() << "; there is nothing to recompute";
  fwd.last = fwd.position[lossOp];
  for (BlockArgument arg : fwd.body->getArguments())
    fwd.fromInputs.insert(arg);
  for (Operation &op : *fwd.body) {
    if (!fwd.isForward(&op))
      break;
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return fwd.fromInputs.contains(v); }))
      for (Value r : op.getResults())
        fwd.fromInputs.insert(r);
  }
  return success();
}

/// The segment boundaries: the ops the model marks (checked), or else the
/// residual stream's.
static LogicalResult findBoundaries(const Forward &fwd,
                                    SmallVector<Operation *> &boundaries) {
  bool marked = false;
  for (Operation &op : *fwd.body) {
    if (!op.hasAttr(kCheckpointAttr))
      continue;
    marked = true;
    if (!fwd.isForward(&op))
      return op.emitOpError() << "is marked '" << kCheckpointAttr
                              << "' but is not part of the forward pass";
    Value v = op.getResult(0); // the dialect verifier checked: one result
    if (isa<ParamReadOp, BufferReadOp>(op) || !fwd.fromInputs.contains(v))
      return op.emitOpError()
             << "is marked '" << kCheckpointAttr
             << "' but its result is computed from parameters and "
                "constants alone, not from the step's inputs: "
                "there is no activation to checkpoint here";
    if (fwd.lastForwardUse(v) == fwd.position.lookup(&op))
      return op.emitOpError()
             << "is marked '" << kCheckpointAttr
             << "' but no later forward op reads its result, so it "
                "ends no segment";
    boundaries.push_back(&op);
  }
  if (!marked)
    boundaries = residualBoundaries(fwd);
  return success();
}

/// What the backward pass keeps rather than recomputes.
static DenseSet<Operation *> keptOps(const Forward &fwd,
                                     ArrayRef<Operation *> boundaries,
                                     DenseMap<Operation *, unsigned> &segmentOf,
                                     unsigned tail, bool selective) {
  // What the backward pass keeps: the boundaries, every value read across
  // segments (recomputing it would chain segments), and for the selective
  // policy everything but the attention core and the activation functions
  // (selectiveSet). Ops with effects are never repeated.
  DenseSet<Operation *> kept(boundaries.begin(), boundaries.end());
  DenseSet<Operation *> core;
  if (selective)
    core = selectiveSet(fwd);
  for (Operation &op : *fwd.body) {
    if (!fwd.isForward(&op))
      break;
    unsigned s = segmentOf[&op];
    if (s == tail || isa<ParamReadOp, BufferReadOp>(op) ||
        !isMemoryEffectFree(&op) || op.getNumRegions() != 0 ||
        (selective && !core.contains(&op)))
      kept.insert(&op);
    for (Value r : op.getResults())
      for (Operation *user : r.getUsers())
        if (fwd.isForward(user) && segmentOf[user] != s)
          kept.insert(&op);
  }
  return kept;
}

/// Per segment: the forward values the backward pass reads that are
/// recomputed, the ops that recompute them and where they go.
static SmallVector<SegmentPlan>
planSegments(const Forward &fwd, const DenseSet<Operation *> &kept,
             DenseMap<Operation *, unsigned> &segmentOf, unsigned tail) {
  auto recomputable = [&](Value v) {
    Operation *def = v.getDefiningOp();
    return def && fwd.isForward(def) && !kept.contains(def);
  };
  SmallVector<SegmentPlan> plans(tail);
  SmallVector<Operation *> backward;
  for (Operation &op : *fwd.body)
    if (!fwd.isForward(&op))
      backward.push_back(&op);
  for (Operation *op : backward)
    for (Value v : op->getOperands()) {
      if (!recomputable(v))
        continue;
      SegmentPlan &plan = plans[segmentOf[v.getDefiningOp()]];
      if (!plan.before)
        plan.before = op;
      SmallVector<Operation *> work{v.getDefiningOp()};
      while (!work.empty()) {
        Operation *def = work.pop_back_val();
        if (!plan.ops.insert(def))
          continue;
        for (Value operand : def->getOperands())
          if (recomputable(operand))
            work.push_back(operand.getDefiningOp());
      }
    }
  return plans;
}

/// Clones each segment's ops before its first backward use and points the
/// backward ops at the clones. Returns the number of ops cloned.
static unsigned applySegments(MLIRContext *ctx, const Forward &fwd,
                              ArrayRef<SegmentPlan> plans) {
  OpBuilder b(ctx);
  unsigned count = 0;
  for (const SegmentPlan &plan : plans) {
    if (plan.ops.empty())
      continue;
    SmallVector<Operation *> ops(plan.ops.begin(), plan.ops.end());
    llvm::sort(ops, [&](Operation *x, Operation *y) {
      return fwd.position.lookup(x) < fwd.position.lookup(y);
    });
    IRMapping map;
    b.setInsertionPoint(plan.before);
    for (Operation *op : ops) {
      Operation *clone = b.clone(*op, map);
      clone->setAttr(kRecomputedAttr, b.getUnitAttr());
      ++count;
    }
    // The backward ops read the recomputed values.
    for (Operation *op : ops)
      for (OpResult r : op->getResults()) {
        Value again = map.lookup(r);
        r.replaceUsesWithIf(again, [&](OpOperand &use) {
          Operation *user = use.getOwner();
          return !fwd.isForward(user) && !user->hasAttr(kRecomputedAttr);
        });
      }
  }
  return count;
}

void TrainRecomputePass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp entry = getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  if (policy == RecomputePolicy::none)
    return markAllAnalysesPreserved();
  if (!entry->hasAttr(kGradientsAttr) || entry->hasAttr(kStepAttr)) {
    entry.emitError() << "train-recompute rewrites the backward pass: run it "
                         "after train-autodiff and before train-optimizer";
    return signalPassFailure();
  }
  if (module->hasAttr(kRecomputeAttr)) {
    entry.emitError() << "@" << entry.getSymName() << " is already recomputed ("
                      << module->getAttr(kRecomputeAttr) << ")";
    return signalPassFailure();
  }

  Forward fwd;
  if (failed(analyzeForward(entry, fwd)))
    return signalPassFailure();
  SmallVector<Operation *> boundaries;
  if (failed(findBoundaries(fwd, boundaries)))
    return signalPassFailure();
  if (boundaries.empty()) {
    entry.emitError()
        << "train-recompute{policy=" << stringify<RecomputePolicy>(policy)
        << "}: nothing to recompute in @" << entry.getSymName()
        << ": the graph has no segment boundary (no residual stream to cut "
           "at); mark the values to keep with '"
        << kCheckpointAttr << "'";
    return signalPassFailure();
  }

  // The segment of each forward op: ops up to the first boundary are
  // segment 0, ..., ops after the last boundary the tail (the loss head),
  // which is not recomputed: the backward pass starts with it.
  const unsigned tail = boundaries.size();
  DenseMap<Operation *, unsigned> segmentOf;
  {
    unsigned s = 0;
    for (Operation &op : *fwd.body) {
      if (!fwd.isForward(&op))
        break;
      segmentOf[&op] = s;
      if (s < tail && &op == boundaries[s])
        ++s;
    }
  }

  DenseSet<Operation *> kept = keptOps(fwd, boundaries, segmentOf, tail,
                                       policy == RecomputePolicy::selective);
  SmallVector<SegmentPlan> plans = planSegments(fwd, kept, segmentOf, tail);
  unsigned count = applySegments(&getContext(), fwd, plans);
  if (count == 0) {
    entry.emitError() << "train-recompute{policy="
                      << stringify<RecomputePolicy>(policy)
                      << "}: nothing to recompute in @" << entry.getSymName()
                      << ": the backward pass reads only values the policy "
                         "keeps ("
                      << boundaries.size() << " segment boundar"
                      << (boundaries.size() == 1 ? "y" : "ies") << ")";
    return signalPassFailure();
  }
  module->setAttr(
      kRecomputeAttr,
      StringAttr::get(&getContext(), stringify<RecomputePolicy>(policy)));
  numRecomputedOps += count;
  numSegments += tail;
}
