//===- ZeroOffloadSwaps.cpp - zero-offload: nvme swaps
//----------------------===//
//
// Part of the ztrain project.
//
// zero-offload's swap planning for tensors on nvme: updates split into
// chunks (sub-group-size) and the schedule of swap-ins, write-backs and
// releases around each use, a static version of ZeRO-Infinity's optimizer
// swapper written into the IR so that plan-memory sizes its buffers and
// zero-report prices its bytes.
//
//===----------------------------------------------------------------------===//

#include "ZeroOffload.h"

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/IR/StepBuffers.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

#define DEBUG_TYPE "zero-offload"

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;
using namespace ztrain::dist::offload;

namespace {
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

/// sub-group-size: an update whose states all live on nvme (and whose
/// parameter does not) and hold more than sub-group-size elements becomes
/// C updates of one chunk each (`dist.chunk = array<i64: c, C>`), in
/// order, each a use of its own below: its states' chunk is swapped in,
/// stepped and swapped out while the next chunk is read, through buffers
/// of one chunk. Adam and SGD are elementwise, so the chunks compute
/// exactly the whole update's values.
LogicalResult offload::splitIntoChunks(func::FuncOp fn, int64_t subGroupSize,
                                       OnNvme nvme, Statistics &stats) {
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
    ++stats.chunkedUpdates;
  }
  return success();
}

/// For each use, the op before which its reads are issued.
using IssuePoints = std::vector<Operation *>;

/// A piece's `chunk c of C` attributes (none for a whole tensor).
static IntegerAttr chunkIndex(Builder &attrs, const Piece &t) {
  return t.chunk < 0 ? IntegerAttr() : attrs.getI64IntegerAttr(t.chunk);
}
static IntegerAttr chunkCount(Builder &attrs, const Piece &t) {
  return t.chunk < 0 ? IntegerAttr() : attrs.getI64IntegerAttr(t.chunks);
}

/// Whether an update swaps its parameter or any of its states.
static bool swapsTensors(train::OptimizerUpdateOpInterface update,
                         OnNvme nvme) {
  bool swapped = nvme(update.getUpdatedParam());
  for (FlatSymbolRefAttr s : update.getUpdatedStates())
    swapped |= nvme(s);
  return swapped;
}

/// On one rank stage 3 gathers nothing: parameters are read in place. A
/// read whose value the backward pass uses again would keep the swap
/// buffer from the forward pass to the backward pass (every parameter's
/// at once): each op that reads the value gets a read of its own right
/// before it instead, so a parameter visits host memory for each use, as
/// stage 3 gathers it for the forward and again for the backward pass.
static void readPerUse(func::FuncOp fn, OnNvme nvme) {
  Block &body = fn.getBody().front();
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
}

/// The updates that swap tensors, made ready for the schedule: moved up
/// next to their gradients, split into chunks (sub-group-size), their
/// gradients transient where nothing accumulates, their host steps
/// asynchronous.
static LogicalResult prepareSwappedUpdates(func::FuncOp fn, OnNvme nvme,
                                           int64_t subGroupSize,
                                           Statistics &stats) {
  Block &body = fn.getBody().front();
  hoistUpdates(
      fn,
      [&](Operation *op) {
        return swapsTensors(cast<train::OptimizerUpdateOpInterface>(op), nvme);
      },
      stats);
  if (failed(splitIntoChunks(fn, subGroupSize, nvme, stats)))
    return failure();

  // Without accumulation a gradient lives from the op that makes it to its
  // update: the gradients of swapped updates (moved right after them) go
  // into the activation arena, where they take room only for that while,
  // rather than into persistent buffers that hold every gradient at once.
  if (fn.getBody().front().getOps<train::AccumulateGradOp>().empty()) {
    SymbolTable module(fn->getParentOfType<ModuleOp>());
    for (auto update : body.getOps<train::OptimizerUpdateOpInterface>()) {
      if (!swapsTensors(update, nvme))
        continue;
      if (Operation *param = module.lookup(update.getUpdatedParam().getAttr()))
        param->setAttr(kTransientGradientAttr, UnitAttr::get(fn.getContext()));
    }
  }

  // Their host steps run asynchronously on a device backend, one in
  // flight: each until right before the next use.
  completeAsyncUpdates(fn, stats, nvme);
  return success();
}

/// The ops that need swapped tensors in host buffers, in order, and the
/// accumulation boundary (null without one).
static FailureOr<std::vector<Use>> collectUses(func::FuncOp fn, OnNvme nvme,
                                               Operation *&boundary) {
  Block &body = fn.getBody().front();
  std::vector<Use> uses;
  boundary = nullptr;
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
    if (auto gather = dyn_cast<GatherParamOp>(op);
        gather && nvme(gather.getParamAttr())) {
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
      for (Operation *next = op.getNextNode(); next; next = next->getNextNode())
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
  return uses;
}

/// Where each use's reads are issued, and which tensors each use reads
/// and ends (`ins`, `ends`).
static IssuePoints planBuffers(func::FuncOp fn, std::vector<Use> &uses,
                               Operation *boundary, int64_t bufferCount) {
  Block &body = fn.getBody().front();
  // Where each use's reads are issued: P uses ahead (before use k - P of
  // its segment, or at the segment's start when there is none), where
  // P = buffer-count - 2 leaves one buffer stepping and one writing back
  // (at least 1; 0 with one buffer: right before the use).
  const int64_t D = static_cast<int64_t>(bufferCount);
  const int64_t P = D == 1 ? 0 : std::max<int64_t>(1, D - 2);
  auto segmentStart = [&](int segment) {
    return segment == 1 ? boundary->getNextNode() : &body.front();
  };
  IssuePoints issueAt(uses.size());
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
  llvm::MapVector<std::pair<Attribute, int64_t>, std::pair<size_t, bool>> owner;
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
  return issueAt;
}

/// The ops: ends right after their anchor, then reads (with the waits
/// they need) at their issue points, then the reads' waits right before
/// each use, then the remaining write-backs' waits before the return.
static LogicalResult emitSwaps(func::FuncOp fn, std::vector<Use> &uses,
                               const IssuePoints &issueAt, int64_t bufferCount,
                               Statistics &stats) {
  Block &body = fn.getBody().front();
  Builder attrs(fn.getContext());
  const int64_t D = bufferCount;
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
                                                     chunkIndex(attrs, t),
                                                     chunkCount(attrs, t))
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
                                                 chunkIndex(attrs, t),
                                                 chunkCount(attrs, t))
                               .getToken());
      ++stats.swaps;
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

/// The swaps of one function (see the pass description): each use's
/// tensors are read ahead of it, one use early (in the same micro-batch
/// segment), and end after it: written back if it wrote them, released if
/// it only read them. A tensor still in its buffer from an earlier use when
/// a later use would read it again stays there instead (its lifetime grows;
/// one tensor never has two buffers). Before a read starts, the write-back
/// of the same tensor and those of the use `buffer-count` back complete;
/// the remaining write-backs complete before the function returns.
LogicalResult offload::scheduleSwaps(func::FuncOp fn,
                                     const llvm::DenseSet<StringAttr> &onNvme,
                                     int64_t bufferCount, int64_t subGroupSize,
                                     Statistics &stats) {
  if (!fn.getBody().hasOneBlock())
    return fn.emitError() << "zero-offload needs a single-block function";
  auto nvme = [&](FlatSymbolRefAttr s) {
    return s && onNvme.contains(s.getAttr());
  };
  readPerUse(fn, nvme);
  if (failed(prepareSwappedUpdates(fn, nvme, subGroupSize, stats)))
    return failure();
  Operation *boundary = nullptr;
  FailureOr<std::vector<Use>> uses = collectUses(fn, nvme, boundary);
  if (failed(uses))
    return failure();
  IssuePoints issueAt = planBuffers(fn, *uses, boundary, bufferCount);
  return emitSwaps(fn, *uses, issueAt, bufferCount, stats);
}
