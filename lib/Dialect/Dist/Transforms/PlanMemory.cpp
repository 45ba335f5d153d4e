//===- PlanMemory.cpp - plan-memory ---------------------------------------===//
//
// Part of the ztrain project.
//
// A static memory plan for the straight-line step: every buffer's lifetime
// comes from dist::StepBuffers (the analysis the lowering frees by and
// zero-report prices by), and its offset in a per-category arena from a
// greedy interval packing. The plan is written into the IR so that the
// lowering allocates exactly it and the report prices exactly it.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/IR/StepBuffers.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"

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
    "activations", "gathered_parameters", "other"};

/// A buffer of the step and its place: arena index (Buffer::Kind) and
/// offset.
struct Placed {
  StepBuffers::Buffer buf;
  int64_t offset = -1;
};

/// Places `buffers` (of one arena) at the lowest `align`-aligned offset free
/// for their whole lifetime, largest first; returns the arena size.
int64_t pack(SmallVectorImpl<Placed *> &buffers, int64_t align) {
  llvm::stable_sort(buffers, [](Placed *a, Placed *b) {
    return a->buf.bytes != b->buf.bytes ? a->buf.bytes > b->buf.bytes
                                        : a->buf.from < b->buf.from;
  });
  SmallVector<Placed *> placed;
  int64_t size = 0;
  for (Placed *p : buffers) {
    const StepBuffers::Buffer &buf = p->buf;
    SmallVector<std::pair<int64_t, int64_t>> busy;
    for (Placed *other : placed)
      if (other->buf.from <= buf.to && buf.from <= other->buf.to)
        busy.push_back({other->offset, other->offset + other->buf.bytes});
    llvm::sort(busy);
    int64_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + buf.bytes <= lo)
        break;
      offset = std::max(offset, (hi + align - 1) / align * align);
    }
    p->offset = offset;
    size = std::max(size, offset + buf.bytes);
    placed.push_back(p);
  }
  return size;
}

struct PlanMemoryPass : public dist::impl::PlanMemoryBase<PlanMemoryPass> {
  using PlanMemoryBase::PlanMemoryBase;
  void runOnOperation() override;
};

} // namespace

void PlanMemoryPass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp entry = train::getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  if (module->hasAttr(kArenasAttr)) {
    module.emitError() << "the step already has a memory plan (dist.arenas)";
    return signalPassFailure();
  }
  if (!entry.getBody().hasOneBlock()) {
    entry.emitError() << "plan-memory needs a single-block step";
    return signalPassFailure();
  }
  int64_t stage = 0, gridSize = 1;
  if (auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr)) {
    stage = zero.getStage();
    SymbolTableCollection symbols;
    FailureOr<int64_t> n = getGridSize(module, zero.getGrid(), symbols);
    if (failed(n))
      return signalPassFailure();
    gridSize = *n;
  }

  Block &body = entry.getBody().front();
  std::vector<Placed> all;
  for (const StepBuffers::Buffer &buf :
       StepBuffers(entry, stage).list(gridSize))
    all.push_back({buf});

  // Pack each arena; the gathered one must respect max-live-bytes, which
  // tighter alignment can rescue when padding to 16 bytes would not.
  int64_t sizes[3] = {0, 0, 0};
  auto bound = module->getAttrOfType<IntegerAttr>("dist.max_live_bytes");
  for (unsigned arena = 0; arena < 3; ++arena) {
    SmallVector<Placed *> mine;
    for (Placed &p : all)
      if (static_cast<unsigned>(p.buf.kind) == arena)
        mine.push_back(&p);
    sizes[arena] = pack(mine, 16);
    if (arena == 1 && bound && sizes[arena] > bound.getInt()) {
      // The tightest packing that keeps every element aligned.
      int64_t align = 1;
      for (Placed *p : mine) {
        Operation *owner = p->buf.owner;
        Value v = p->buf.kind == StepBuffers::Buffer::Staging
                      ? owner->getOperand(0)
                      : owner->getResult(p->buf.index);
        align = std::max(align, elementBytes(v.getType()));
      }
      sizes[arena] = pack(mine, align);
    }
    if (arena == 1 && bound && sizes[arena] > bound.getInt()) {
      module.emitError() << "plan-memory: the gathered parameters need an "
                            "arena of "
                         << sizes[arena]
                         << " bytes, more than max-live-bytes="
                         << bound.getInt()
                         << " (fragmentation); raise the bound";
      return signalPassFailure();
    }
  }

  // Write the plan into the IR.
  MLIRContext *ctx = &getContext();
  Builder b(ctx);
  DenseMap<Operation *, SmallVector<Attribute>> slots, staging;
  for (Operation &op : body)
    if (op.getNumResults() && !isa<train::ParamReadOp, train::BufferReadOp>(op))
      slots[&op].assign(op.getNumResults(), UnitAttr::get(ctx));
  for (Placed &p : all) {
    const StepBuffers::Buffer &buf = p.buf;
    auto slot =
        SlotAttr::get(ctx, kArenaNames[buf.kind], p.offset, buf.bytes);
    if (buf.kind == StepBuffers::Buffer::Staging) {
      auto &list = staging[buf.owner];
      list.resize(std::max<size_t>(list.size(), buf.index + 1));
      list[buf.index] = slot;
    } else {
      slots[buf.owner][buf.index] = slot;
    }
    ++numBuffers;
  }
  for (auto &[op, list] : slots)
    if (llvm::any_of(list, [](Attribute a) { return isa<SlotAttr>(a); }))
      op->setAttr(kSlotsAttr, b.getArrayAttr(list));
  for (auto &[op, list] : staging)
    op->setAttr(kStagingAttr, b.getArrayAttr(list));
  SmallVector<NamedAttribute> arenas;
  for (unsigned arena = 0; arena < 3; ++arena) {
    arenas.push_back(b.getNamedAttr(kArenaNames[arena],
                                    b.getI64IntegerAttr(sizes[arena])));
    numBytes += sizes[arena];
  }
  module->setAttr(kArenasAttr, b.getDictionaryAttr(arenas));
}
