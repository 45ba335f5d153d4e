//===- PlanMemory.cpp - plan-memory ---------------------------------------===//
//
// Part of the ztrain project.
//
// A static memory plan for the straight-line step: every buffer's lifetime
// comes from dist::StepBuffers (the analysis the lowering frees by and
// zero-report prices by), and its offset in a per-category arena from a
// greedy interval packing (largest first, lowest free offset). The plan is written into the IR so that the
// lowering allocates exactly it and the report prices exactly it.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/IR/StepBuffers.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"

#include "llvm/Support/Allocator.h"

#include <map>
#include <memory>

#define DEBUG_TYPE "plan-memory"

namespace ztrain::dist {
#define GEN_PASS_DEF_PLANMEMORY
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace ztrain::dist

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

namespace {

/// Indexed by StepBuffers::Buffer::Kind.
constexpr llvm::StringLiteral kArenaNames[] = {
    "activations", "gathered_parameters", "other", "swap_buffers",
    "host_activations", "host_gradients", "state_swap_buffers"};
constexpr unsigned kNumArenas = 7;

/// The arena (index into kArenaNames) of a buffer kind: staging buffers
/// share "other", swap buffers and host copies of activations have their
/// own; the swap buffers of optimizer states are apart from the
/// parameters' (only the host reads them: a device backend keeps no device
/// copy of them).
unsigned arenaOf(StepBuffers::Buffer::Kind kind) {
  if (kind == StepBuffers::Buffer::Swap)
    return 3u;
  if (kind == StepBuffers::Buffer::StateSwap)
    return 6u;
  if (kind == StepBuffers::Buffer::HostActivation)
    return 4u;
  if (kind == StepBuffers::Buffer::HostGradient)
    return 5u;
  return static_cast<unsigned>(kind);
}

/// A buffer of the step and its place: arena index (Buffer::Kind) and
/// offset.
struct Placed {
  StepBuffers::Buffer buf;
  int64_t offset = -1;
};

/// The map nodes of one packing, recycled through a free list: a packing
/// inserts and erases millions of ranges (dozens per buffer), and malloc
/// and free were most of its time.
class NodePool {
public:
  void *allocate(size_t bytes) {
    if (free) {
      void *node = free;
      free = *static_cast<void **>(node);
      return node;
    }
    return arena.Allocate(std::max(bytes, sizeof(void *)),
                          alignof(std::max_align_t));
  }
  /// Every node of the pool has the size of the first (one map type).
  void deallocate(void *node) {
    *static_cast<void **>(node) = free;
    free = node;
  }

private:
  llvm::BumpPtrAllocator arena;
  void *free = nullptr;
};

template <typename T> struct PoolAllocator {
  using value_type = T;
  NodePool *pool;
  explicit PoolAllocator(NodePool *pool) : pool(pool) {}
  template <typename U>
  PoolAllocator(const PoolAllocator<U> &other) : pool(other.pool) {}
  T *allocate(size_t n) {
    assert(n == 1 && "a map allocates one node at a time");
    (void)n;
    return static_cast<T *>(pool->allocate(sizeof(T)));
  }
  void deallocate(T *node, size_t) { pool->deallocate(node); }
  bool operator==(const PoolAllocator &other) const {
    return pool == other.pool;
  }
};

/// Busy offset ranges [lo, hi), disjoint and merged as they are added.
class RangeSet {
public:
  explicit RangeSet(NodePool *pool) : ranges(Ranges::allocator_type(pool)) {}

  /// Adds [lo, hi), merging it with the ranges it meets. Ranges grow in
  /// place (a packed arena keeps a handful of ranges that grow with every
  /// buffer): no map node is allocated unless a new disjoint range starts.
  void insert(int64_t lo, int64_t hi) {
    if (lo >= hi)
      return;
    auto it = ranges.upper_bound(lo);
    Ranges::iterator merged;
    if (it != ranges.begin() && std::prev(it)->second >= lo) {
      merged = std::prev(it);
      merged->second = std::max(merged->second, hi);
    } else if (it != ranges.end() && it->first <= hi) {
      // The next range starts inside [lo, hi]: it becomes the merged one,
      // its key lowered to lo (a node handle keeps the allocation).
      auto node = ranges.extract(it++);
      node.key() = lo;
      node.mapped() = std::max(node.mapped(), hi);
      merged = ranges.insert(it, std::move(node));
    } else {
      ranges.emplace_hint(it, lo, hi);
      return;
    }
    for (auto next = std::next(merged);
         next != ranges.end() && next->first <= merged->second;
         next = ranges.erase(next))
      merged->second = std::max(merged->second, next->second);
  }
  /// The end of the range that meets [o, o + s) and ends last, or -1: no
  /// offset below it fits either.
  int64_t conflict(int64_t o, int64_t s) const {
    auto it = ranges.lower_bound(o + s);
    if (it == ranges.begin())
      return -1;
    --it;
    return it->second > o ? it->second : -1;
  }

private:
  using Ranges = std::map<int64_t, int64_t, std::less<int64_t>,
                          PoolAllocator<std::pair<const int64_t, int64_t>>>;
  Ranges ranges;
};

/// The placed buffers of one arena, indexed by lifetime so that finding the
/// lowest free offset for a new lifetime never lists the (often thousands
/// of) buffers it overlaps. Two segment trees over op positions: `cover`
/// holds each placed buffer's offset range at the canonical nodes of its
/// lifetime [from, to] (a stab at position p finds every buffer live at p
/// on p's root path); `starts` holds it at the leaf of `from` and that
/// leaf's ancestors (a range query finds every buffer that starts inside
/// the range). A buffer live at any point of [f, t] is live at f or starts
/// in (f, t], so the two queries together see exactly the buffers whose
/// lifetimes overlap — the same set the quadratic scan compared against, so
/// the plan is the same.
class Placement {
public:
  explicit Placement(unsigned positions) {
    while (leaves < positions)
      leaves *= 2;
    cover.resize(2 * leaves, nullptr);
    starts.resize(2 * leaves, nullptr);
  }

  /// The lowest `align`-aligned offset at which `bytes` are free throughout
  /// [from, to].
  int64_t lowestFree(unsigned from, unsigned to, int64_t bytes,
                     int64_t align) {
    SmallVector<RangeSet *, 64> sets;
    for (unsigned n = from + leaves; n; n /= 2)
      if (cover[n])
        sets.push_back(cover[n]);
    forCanonical(from, to, [&](unsigned n) {
      if (starts[n])
        sets.push_back(starts[n]);
    });
    int64_t offset = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (RangeSet *set : sets) {
        int64_t hi = set->conflict(offset, bytes);
        if (hi >= 0) {
          offset = (hi + align - 1) / align * align;
          moved = true;
        }
      }
    }
    return offset;
  }

  void place(unsigned from, unsigned to, int64_t lo, int64_t hi) {
    forCanonical(from, to, [&](unsigned n) { get(cover, n).insert(lo, hi); });
    for (unsigned n = from + leaves; n; n /= 2)
      get(starts, n).insert(lo, hi);
  }

private:
  /// Calls `fn` on the nodes whose leaves together are exactly [from, to].
  template <typename Fn> void forCanonical(unsigned from, unsigned to, Fn fn) {
    for (unsigned lo = from + leaves, hi = to + leaves + 1; lo < hi;
         lo /= 2, hi /= 2) {
      if (lo & 1)
        fn(lo++);
      if (hi & 1)
        fn(--hi);
    }
  }
  RangeSet &get(std::vector<RangeSet *> &tree, unsigned n) {
    if (!tree[n])
      tree[n] = new (sets.Allocate()) RangeSet(&pool);
    return *tree[n];
  }

  unsigned leaves = 1;
  NodePool pool;                                 // (outlives `sets`)
  llvm::SpecificBumpPtrAllocator<RangeSet> sets; // destroyed all at once
  std::vector<RangeSet *> cover, starts;
};

/// Places `buffers` (of one arena) at the lowest `align`-aligned offset free
/// for their whole lifetime, largest first; returns the arena size.
/// O(n log^2 n) in the number of buffers for the plans a step produces.
int64_t pack(SmallVectorImpl<Placed *> &buffers, int64_t align) {
  llvm::stable_sort(buffers, [](Placed *a, Placed *b) {
    return a->buf.bytes != b->buf.bytes ? a->buf.bytes > b->buf.bytes
                                        : a->buf.from < b->buf.from;
  });
  unsigned positions = 1;
  for (Placed *p : buffers)
    positions = std::max(positions, p->buf.to + 1);
  Placement placement(positions);
  int64_t size = 0;
  for (Placed *p : buffers) {
    const StepBuffers::Buffer &buf = p->buf;
    p->offset = placement.lowestFree(buf.from, buf.to, buf.bytes, align);
    placement.place(buf.from, buf.to, p->offset, p->offset + buf.bytes);
    size = std::max(size, p->offset + buf.bytes);
  }
  return size;
}

struct PlanMemoryPass : public dist::impl::PlanMemoryBase<PlanMemoryPass> {
  using PlanMemoryBase::PlanMemoryBase;
  void runOnOperation() override;
};

} // namespace

/// Plans `fn`'s buffers into the three arenas, writes each buffer's slot
/// into the IR and raises `sizes` to what the plan needs; fails (after an
/// error) when the gathered arena exceeds `bound`.
static LogicalResult planFunction(func::FuncOp fn, int64_t stage,
                                  int64_t gridSize, IntegerAttr bound,
                                  int64_t sizes[kNumArenas],
                                  int64_t &planned) {
  Block &body = fn.getBody().front();
  std::vector<Placed> all;
  for (const StepBuffers::Buffer &buf :
       StepBuffers(fn, stage).list(gridSize))
    all.push_back({buf});

  // Pack each arena; the gathered one must respect max-live-bytes, which
  // tighter alignment can rescue when padding to 16 bytes would not.
  int64_t mineSizes[kNumArenas] = {};
  for (unsigned arena = 0; arena < kNumArenas; ++arena) {
    SmallVector<Placed *> mine;
    for (Placed &p : all)
      if (arenaOf(p.buf.kind) == arena)
        mine.push_back(&p);
    // Swap buffers are O_DIRECT transfer buffers: block-aligned.
    mineSizes[arena] =
        pack(mine, arena == 3 || arena == 6 ? kSwapAlignment : 16);
    if (arena == 1 && bound && mineSizes[arena] > bound.getInt()) {
      // The tightest packing that keeps every element aligned.
      int64_t align = 1;
      for (Placed *p : mine) {
        Operation *owner = p->buf.owner;
        Value v = p->buf.kind == StepBuffers::Buffer::Staging
                      ? owner->getOperand(0)
                      : owner->getResult(p->buf.index);
        align = std::max(align, elementBytes(v.getType()));
      }
      mineSizes[arena] = pack(mine, align);
    }
    if (arena == 1 && bound && mineSizes[arena] > bound.getInt()) {
      fn->getParentOfType<ModuleOp>().emitError()
                         << "plan-memory: the gathered parameters of @"
                         << fn.getSymName() << " need an arena of "
                         << mineSizes[arena]
                         << " bytes, more than max-live-bytes="
                         << bound.getInt()
                         << " (fragmentation); raise the bound";
      return failure();
    }
  }

  // Write the plan into the IR.
  MLIRContext *ctx = fn.getContext();
  Builder b(ctx);
  DenseMap<Operation *, SmallVector<Attribute>> slots, staging;
  for (Operation &op : body)
    if (op.getNumResults() && !isa<train::ParamReadOp, train::BufferReadOp>(op))
      slots[&op].assign(op.getNumResults(), UnitAttr::get(ctx));
  for (Placed &p : all) {
    const StepBuffers::Buffer &buf = p.buf;
    auto slot =
        SlotAttr::get(ctx, kArenaNames[arenaOf(buf.kind)], p.offset, buf.bytes);
    if (buf.kind == StepBuffers::Buffer::Staging ||
        buf.kind == StepBuffers::Buffer::Swap ||
        buf.kind == StepBuffers::Buffer::StateSwap ||
        buf.kind == StepBuffers::Buffer::HostActivation ||
        buf.kind == StepBuffers::Buffer::HostGradient) {
      auto &list = staging[buf.owner];
      list.resize(std::max<size_t>(list.size(), buf.index + 1));
      list[buf.index] = slot;
    } else {
      slots[buf.owner][buf.index] = slot;
    }
    ++planned;
  }
  for (auto &[op, list] : slots)
    if (llvm::any_of(list, [](Attribute a) { return isa<SlotAttr>(a); }))
      op->setAttr(kSlotsAttr, b.getArrayAttr(list));
  for (auto &[op, list] : staging)
    op->setAttr(kStagingAttr, b.getArrayAttr(list));
  for (unsigned arena = 0; arena < kNumArenas; ++arena)
    sizes[arena] = std::max(sizes[arena], mineSizes[arena]);
  return success();
}

LogicalResult ztrain::dist::planMemory(ModuleOp module, int64_t *numBuffers,
                                      int64_t *numBytes) {
  func::FuncOp entry = train::getEntryFunction(module);
  if (!entry)
    return failure();
  if (module->hasAttr(kArenasAttr))
    return module.emitError()
           << "the step already has a memory plan (dist.arenas)";
  if (!entry.getBody().hasOneBlock())
    return entry.emitError() << "plan-memory needs a single-block step";
  int64_t stage = 0, gridSize = 1;
  if (auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr)) {
    stage = zero.getStage();
    SymbolTableCollection symbols;
    FailureOr<int64_t> n = getGridSize(module, zero.getGrid(), symbols);
    if (failed(n))
      return failure();
    gridSize = *n;
  }

  // The step, and the evaluation function when there is one: they never
  // run at once, so they share the arenas (each sized for the larger).
  int64_t sizes[kNumArenas] = {};
  auto bound = module->getAttrOfType<IntegerAttr>("dist.max_live_bytes");
  int64_t planned = 0;
  if (failed(planFunction(entry, stage, gridSize, bound, sizes, planned)))
    return failure();
  for (func::FuncOp eval : train::getForwardFunctions(module)) {
    if (!eval.getBody().hasOneBlock())
      return eval.emitError() << "plan-memory needs a single-block function";
    if (failed(planFunction(eval, stage, gridSize, bound, sizes, planned)))
      return failure();
  }
  if (numBuffers)
    *numBuffers = planned;

  Builder b(module.getContext());
  SmallVector<NamedAttribute> arenas;
  int64_t bytes = 0;
  for (unsigned arena = 0; arena < kNumArenas; ++arena) {
    // The swap arena exists only where something is swapped (plans without
    // offload keep their three arenas).
    if (arena >= 3 && sizes[arena] == 0)
      continue;
    arenas.push_back(b.getNamedAttr(kArenaNames[arena],
                                    b.getI64IntegerAttr(sizes[arena])));
    bytes += sizes[arena];
  }
  if (numBytes)
    *numBytes = bytes;
  module->setAttr(kArenasAttr, b.getDictionaryAttr(arenas));
  return success();
}

void PlanMemoryPass::runOnOperation() {
  int64_t buffers = 0, bytes = 0;
  if (failed(dist::planMemory(getOperation(), &buffers, &bytes)))
    return signalPassFailure();
  numBuffers += buffers;
  numBytes += bytes;
}
