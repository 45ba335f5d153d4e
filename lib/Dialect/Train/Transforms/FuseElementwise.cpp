//===- FuseElementwise.cpp - train-fuse-elementwise -----------------------===//
//
// Part of the ztrain project.
//
// Producer-consumer chains of fusible elementwise ops (FusibleOpInterface)
// become train.fused regions, which lower-to-runtime turns into one
// generated loop each: the intermediates that only the chain reads never
// reach memory. The pass only groups; what a member computes is its own
// rule (TrainOps.td, `let element`), so a new fusible op needs nothing here.
//
// Grouping walks the block once, in order. An op joins the group of a
// producer of one of its operands when
//   - its result has the group's shape (a bias operand does not link);
//   - nothing between the group's first op and it is a barrier: a dist op
//     (collectives, gathers and releases, offload and swaps) or an op with
//     side effects (updates, accumulation, loss scaling). The region is
//     placed at its last member, so its members move past everything in
//     between, and moving a read of a gathered parameter past its release,
//     or compute past a collective the schedule placed, is not allowed;
//   - every reader of the group's values outside it comes after the op
//     (the region's results exist only at its place);
//   - the region keeps at most kMaxValues inputs and results and
//     kMaxMembers ops;
//   - it is recomputed (train.recomputed) exactly when the group is.
// Two producer groups merge through a common consumer under the same
// conditions. The result depends on the op order only (deterministic).
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"
#include "ztrain/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/ADT/SetVector.h"

#define DEBUG_TYPE "train-fuse-elementwise"

namespace ztrain::train {
#define GEN_PASS_DEF_TRAINFUSEELEMENTWISE
#include "ztrain/Dialect/Train/Transforms/Passes.h.inc"
} // namespace ztrain::train

using namespace mlir;
using namespace ztrain::train;

namespace {
/// Inputs plus results of one region: the generated kernel's pointer
/// array (ztrt_fused's `args`).
constexpr unsigned kMaxValues = 16;
/// Ops of one region: bounds the work of each join test (a chain of a
/// million adds would otherwise be quadratic) and the generated kernel.
constexpr size_t kMaxMembers = 64;

/// Whether `t` is a tensor a fused region may compute in.
bool fusibleType(Type t) {
  auto tensor = dyn_cast<RankedTensorType>(t);
  return tensor && tensor.hasStaticShape() &&
         (tensor.getElementType().isF32() || tensor.getElementType().isBF16());
}

bool isCandidate(Operation *op) {
  auto fusible = dyn_cast<FusibleOpInterface>(op);
  if (!fusible || op->getNumResults() != 1 || op->getNumRegions() != 0)
    return false;
  return llvm::all_of(op->getOperandTypes(), fusibleType) &&
         fusibleType(op->getResult(0).getType());
}

bool isBarrier(Operation *op) {
  // By namespace: the dist dialect's library depends on this one.
  Dialect *dialect = op->getDialect();
  return (dialect && dialect->getNamespace() == "dist") ||
         !isMemoryEffectFree(op) || op->getNumRegions() != 0;
}

struct Group {
  SmallVector<Operation *> members; // in block order
  ArrayRef<int64_t> shape;
  bool recomputed = false;
  bool dead = false; // merged into another group
};

class Grouper {
public:
  explicit Grouper(Block &block) : block(block) {}
  /// Groups the block's ops and rewrites groups of two or more; returns
  /// the number of regions made.
  unsigned run();

private:
  int64_t barriersBefore(Operation *op) const {
    return barrierPrefix[position.lookup(op)];
  }
  bool inUnion(Operation *op, ArrayRef<unsigned> groups) const {
    auto it = groupOf.find(op);
    return it != groupOf.end() && llvm::is_contained(groups, it->second);
  }
  /// Whether `op` may join the union of `groups` (see the file comment).
  bool canJoin(Operation *op, ArrayRef<unsigned> groups) const;
  void rewrite(Group &g);

  Block &block;
  DenseMap<Operation *, int64_t> position;
  std::vector<int64_t> barrierPrefix;
  DenseMap<Operation *, unsigned> groupOf;
  std::vector<Group> groups;
};

bool Grouper::canJoin(Operation *op, ArrayRef<unsigned> ids) const {
  int64_t at = position.lookup(op);
  bool recomputed = op->hasAttr(kRecomputedAttr);
  ArrayRef<int64_t> shape =
      cast<RankedTensorType>(op->getResult(0).getType()).getShape();
  llvm::SetVector<Value> inputs;
  unsigned results = 0;
  size_t members = 1;
  for (unsigned id : ids)
    members += groups[id].members.size();
  if (members > kMaxMembers)
    return false;
  for (unsigned id : ids) {
    const Group &g = groups[id];
    if (g.shape != shape || g.recomputed != recomputed ||
        barriersBefore(g.members.front()) != barrierPrefix[at])
      return false;
    for (Operation *m : g.members) {
      for (Value v : m->getOperands())
        if (!inUnion(v.getDefiningOp(), ids))
          inputs.insert(v);
      bool external = false;
      for (Operation *user : m->getResult(0).getUsers()) {
        if (user == op || inUnion(user, ids))
          continue;
        // A reader before the region's place, or in another block (or the
        // terminator, which comes after it: it just makes a result).
        if (user->getBlock() != &block || position.lookup(user) < at)
          return false;
        external = true;
      }
      results += external;
    }
  }
  for (Value v : op->getOperands())
    if (!inUnion(v.getDefiningOp(), ids))
      inputs.insert(v);
  return inputs.size() + results + 1 <= kMaxValues;
}

unsigned Grouper::run() {
  int64_t index = 0;
  barrierPrefix.push_back(0);
  for (Operation &op : block) {
    position[&op] = index++;
    barrierPrefix.push_back(barrierPrefix.back() + isBarrier(&op));
  }
  for (Operation &op : block) {
    if (!isCandidate(&op))
      continue;
    auto fusible = cast<FusibleOpInterface>(&op);
    // The groups of this op's producers, in operand order.
    SmallVector<unsigned> producers;
    for (OpOperand &operand : op.getOpOperands()) {
      if (fusible.isLastDimOperand(operand.getOperandNumber()))
        continue;
      auto it = groupOf.find(operand.get().getDefiningOp());
      if (it != groupOf.end() && !llvm::is_contained(producers, it->second))
        producers.push_back(it->second);
    }
    SmallVector<unsigned> join;
    if (!producers.empty() && canJoin(&op, producers))
      join = producers;
    else
      for (unsigned id : producers)
        if (canJoin(&op, {id})) {
          join = {id};
          break;
        }
    if (join.empty()) {
      Group g;
      g.members.push_back(&op);
      g.shape = cast<RankedTensorType>(op.getResult(0).getType()).getShape();
      g.recomputed = op.hasAttr(kRecomputedAttr);
      groupOf[&op] = groups.size();
      groups.push_back(std::move(g));
      continue;
    }
    Group &into = groups[join.front()];
    for (unsigned id : ArrayRef(join).drop_front()) {
      Group &from = groups[id];
      for (Operation *m : from.members)
        groupOf[m] = join.front();
      into.members.append(from.members.begin(), from.members.end());
      from.members.clear();
      from.dead = true;
    }
    llvm::sort(into.members, [&](Operation *a, Operation *b) {
      return position.lookup(a) < position.lookup(b);
    });
    into.members.push_back(&op);
    groupOf[&op] = join.front();
  }
  unsigned made = 0;
  for (Group &g : groups)
    if (!g.dead && g.members.size() >= 2) {
      rewrite(g);
      ++made;
    }
  return made;
}

void Grouper::rewrite(Group &g) {
  llvm::SmallPtrSet<Operation *, 16> members(g.members.begin(),
                                             g.members.end());
  llvm::SetVector<Value> inputs;
  SmallVector<Value> yielded;
  for (Operation *m : g.members) {
    for (Value v : m->getOperands())
      if (!members.contains(v.getDefiningOp()))
        inputs.insert(v);
    Value r = m->getResult(0);
    if (llvm::any_of(r.getUsers(),
                     [&](Operation *u) { return !members.contains(u); }))
      yielded.push_back(r);
  }
  Operation *last = g.members.back();
  OpBuilder b(last->getContext());
  b.setInsertionPointAfter(last);
  SmallVector<Type> resultTypes;
  for (Value v : yielded)
    resultTypes.push_back(v.getType());
  SmallVector<Location> locs;
  for (Operation *m : g.members)
    locs.push_back(m->getLoc());
  auto fused = FusedOp::create(b, b.getFusedLoc(locs), resultTypes,
                               inputs.getArrayRef());
  if (g.recomputed)
    fused->setAttr(kRecomputedAttr, b.getUnitAttr());
  Block *body = b.createBlock(&fused.getBody());
  IRMapping map;
  for (Value v : inputs)
    map.map(v, body->addArgument(v.getType(), v.getLoc()));
  for (Operation *m : g.members)
    b.clone(*m, map);
  SmallVector<Value> results;
  for (Value v : yielded)
    results.push_back(map.lookup(v));
  YieldOp::create(b, fused.getLoc(), results);
  for (auto [old, now] : llvm::zip(yielded, fused.getResults()))
    old.replaceAllUsesWith(now);
  for (Operation *m : llvm::reverse(g.members))
    m->erase();
}

struct TrainFuseElementwisePass
    : public ztrain::train::impl::TrainFuseElementwiseBase<
          TrainFuseElementwisePass> {
  using TrainFuseElementwiseBase::TrainFuseElementwiseBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp entry = getEntryFunction(module);
    if (!entry)
      return signalPassFailure();
    SmallVector<func::FuncOp> functions{entry};
    for (func::FuncOp f : getForwardFunctions(module))
      functions.push_back(f);
    for (func::FuncOp f : functions)
      if (f.getBody().hasOneBlock())
        numRegions += Grouper(f.getBody().front()).run();
  }
};
} // namespace
