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

constexpr llvm::StringLiteral kArenaNames[] = {
    "activations", "gathered_parameters", "other"};

struct Buffer {
  unsigned arena; ///< index into kArenaNames
  int64_t bytes;
  unsigned from, to; ///< inclusive op positions
  int64_t offset = -1;
  Operation *owner;  ///< the op that carries the slot
  int index;         ///< result number, or staging index (owner = start)
  bool staging;
};

/// Places `buffers` (of one arena) at the lowest `align`-aligned offset free
/// for their whole lifetime, largest first; returns the arena size.
int64_t pack(SmallVectorImpl<Buffer *> &buffers, int64_t align) {
  llvm::stable_sort(buffers, [](Buffer *a, Buffer *b) {
    return a->bytes != b->bytes ? a->bytes > b->bytes : a->from < b->from;
  });
  SmallVector<Buffer *> placed;
  int64_t size = 0;
  for (Buffer *buf : buffers) {
    SmallVector<std::pair<int64_t, int64_t>> busy;
    for (Buffer *other : placed)
      if (other->from <= buf->to && buf->from <= other->to)
        busy.push_back({other->offset, other->offset + other->bytes});
    llvm::sort(busy);
    int64_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + buf->bytes <= lo)
        break;
      offset = std::max(offset, (hi + align - 1) / align * align);
    }
    buf->offset = offset;
    size = std::max(size, offset + buf->bytes);
    placed.push_back(buf);
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
  StepBuffers buffers(entry, stage);
  std::vector<Buffer> all;
  for (Operation &op : body) {
    if (isa<train::ParamReadOp>(op))
      continue;
    for (OpResult r : op.getResults()) {
      auto type = dyn_cast<RankedTensorType>(r.getType());
      if (!type || buffers.isAlias(r) || buffers.gradientOf(r))
        continue;
      int64_t elemBytes = type.getElementTypeBitWidth() / 8;
      int64_t bytes = type.getNumElements() * elemBytes;
      bool gathered = isa<GatherParamOp>(op) ||
                      isa_and_nonnull<GatherParamStartOp>(
                          buffers.filledByStart(r));
      if (gathered) // N padded shards
        bytes = (type.getNumElements() + gridSize - 1) / gridSize * gridSize *
                elemBytes;
      all.push_back({gathered ? 1u : 0u, bytes, buffers.allocPosition(r),
                     buffers.lastUse(r), -1, &op,
                     static_cast<int>(r.getResultNumber()), false});
    }
  }
  DenseMap<Operation *, int> stagingCount;
  for (const StepBuffers::Staging &s : buffers.staging()) {
    // A reduce-scatter bucket packs its operands into `in` and receives
    // into `out`; an all-reduce bucket reduces one packed buffer in place.
    Operation *start = s.start;
    auto wait = cast<WaitOp>(*start->getResult(0).getUsers().begin());
    int64_t in = 0, out = 0;
    for (Value v : start->getOperands())
      in += cast<RankedTensorType>(v.getType()).getNumElements() * 4;
    for (Value v : wait.getResults())
      out += cast<RankedTensorType>(v.getType()).getNumElements() * 4;
    all.push_back({2u, in, s.from, s.to, -1, start, stagingCount[start]++,
                   true});
    if (isa<ReduceScatterStartOp>(start))
      all.push_back({2u, out, s.from, s.to, -1, start,
                     stagingCount[start]++, true});
  }

  // Pack each arena; the gathered one must respect max-live-bytes, which
  // tighter alignment can rescue when padding to 16 bytes would not.
  int64_t sizes[3] = {0, 0, 0};
  auto bound = module->getAttrOfType<IntegerAttr>("dist.max_live_bytes");
  for (unsigned arena = 0; arena < 3; ++arena) {
    SmallVector<Buffer *> mine;
    for (Buffer &b : all)
      if (b.arena == arena)
        mine.push_back(&b);
    sizes[arena] = pack(mine, 16);
    if (arena == 1 && bound && sizes[arena] > bound.getInt())
      sizes[arena] = pack(mine, 4);
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
    if (op.getNumResults() && !isa<train::ParamReadOp>(op))
      slots[&op].assign(op.getNumResults(), UnitAttr::get(ctx));
  for (Buffer &buf : all) {
    auto slot = SlotAttr::get(ctx, kArenaNames[buf.arena], buf.offset,
                              buf.bytes);
    if (buf.staging) {
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
