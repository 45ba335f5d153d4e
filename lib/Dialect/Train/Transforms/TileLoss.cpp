//===- TileLoss.cpp - train-tile-loss -------------------------------------===//
//
// Part of the ztrain project.
//
// The vocabulary projection and its cross-entropy as a sequence of token
// tiles, so that the [tokens, vocabulary] logits and their gradient never
// exist whole: for each tile of rows, its logits (x_t W^T), its share of the
// loss and its rows of the adjoint (train.cross_entropy_with_grad with
// first_row), its rows of dx and its term of dW, then the next tile in the
// same buffers. Liger's fused linear cross-entropy and ALST's tiled loss do
// this by hand; here it is a rewrite of the step, so plan-memory, the
// report and the ZeRO passes see the tiles like any other ops
// (docs/tiling.md).
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"
#include "ztrain/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "train-tile-loss"

namespace ztrain::train {
#define GEN_PASS_DEF_TRAINTILELOSS
#include "ztrain/Dialect/Train/Transforms/Passes.h.inc"
} // namespace ztrain::train

using namespace mlir;
using namespace ztrain::train;

namespace {

/// More tiles than this would unroll into a step that is mostly tile
/// bookkeeping; a bound that asks for more gets this many (with a warning).
constexpr int64_t kMaxTiles = 64;

struct TrainTileLossPass
    : public ztrain::train::impl::TrainTileLossBase<TrainTileLossPass> {
  using TrainTileLossBase::TrainTileLossBase;
  void runOnOperation() override;
};

/// A loss's projection: logits = x W^T (x [..., C], W [V, C]), reaching the
/// loss through reshapes nothing else reads.
struct Head {
  MatmulOp projection;
  Value x, weight;
  int64_t rows = 0, classes = 0, width = 0;
  /// The projection and its reshapes, to erase once the tiles replace them.
  SmallVector<Operation *> ops;
};

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

Value stripReshapes(Value v) {
  while (auto r = v.getDefiningOp<ReshapeOp>())
    v = r.getInput();
  return v;
}

std::optional<Head> matchHead(Value logits) {
  Head head;
  Value v = logits;
  while (auto r = v.getDefiningOp<ReshapeOp>()) {
    if (!r->hasOneUse())
      return std::nullopt;
    head.ops.push_back(r);
    v = r.getInput();
  }
  auto mm = v.getDefiningOp<MatmulOp>();
  if (!mm || !mm->hasOneUse() || mm.getTransposeA() || !mm.getTransposeB() ||
      shapeOf(mm.getRhs()).size() != 2)
    return std::nullopt;
  head.ops.push_back(mm);
  head.projection = mm;
  head.x = mm.getLhs();
  head.weight = mm.getRhs();
  head.rows = shapeOf(logits)[0];
  head.classes = shapeOf(logits)[1];
  head.width = shapeOf(head.weight)[1];
  return head;
}

/// The products of the adjoint `g` of the logits: dx = g W and dW = g^T x,
/// each reading g through reshapes nothing else reads. Either may be absent
/// (x an input, W frozen).
struct Adjoint {
  MatmulOp dx, dw;
  SmallVector<Operation *> reshapes;
};

std::optional<Adjoint> matchAdjoint(Value g, const Head &head) {
  Adjoint adj;
  SmallVector<Value> work{g};
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    for (Operation *user : cur.getUsers()) {
      if (auto r = dyn_cast<ReshapeOp>(user)) {
        adj.reshapes.push_back(r);
        work.push_back(r.getResult());
        continue;
      }
      auto mm = dyn_cast<MatmulOp>(user);
      if (!mm || mm.getLhs() != cur || mm.getTransposeB() ||
          shapeOf(cur).back() != head.classes)
        return std::nullopt;
      if (!mm.getTransposeA() && mm.getRhs() == head.weight && !adj.dx) {
        adj.dx = mm;
      } else if (mm.getTransposeA() && !adj.dw && shapeOf(cur).size() == 2 &&
                 stripReshapes(mm.getRhs()) == stripReshapes(head.x) &&
                 shapeOf(mm.getRhs()) ==
                     ArrayRef<int64_t>{head.rows, head.width}) {
        adj.dw = mm;
      } else {
        return std::nullopt;
      }
    }
  }
  return adj;
}

/// Builds the tiles of one loss at the loss's place.
class Tiler {
public:
  Tiler(OpBuilder &b, Location loc, const Head &head, int64_t tileRows)
      : b(b), loc(loc), head(head), tileRows(tileRows) {
    auto xType = cast<RankedTensorType>(head.x.getType());
    elem = xType.getElementType();
    x2 = head.x;
    if (xType.getRank() != 2)
      x2 = ReshapeOp::create(b, loc, type({head.rows, head.width}), head.x);
  }

  int64_t tiles() const { return (head.rows + tileRows - 1) / tileRows; }
  int64_t firstRow(int64_t t) const { return t * tileRows; }
  int64_t rowsOf(int64_t t) const {
    return std::min(tileRows, head.rows - firstRow(t));
  }

  /// Tile t's rows of x, and its logits.
  std::pair<Value, Value> logits(int64_t t) {
    int64_t n = rowsOf(t);
    Value xt = SliceOp::create(b, loc, type({n, head.width}), x2,
                               b.getI64IntegerAttr(0),
                               b.getI64IntegerAttr(firstRow(t)));
    Value lt = MatmulOp::create(b, loc, type({n, head.classes}), xt,
                                head.weight, UnitAttr(), b.getUnitAttr());
    return {xt, lt};
  }

  /// Adds `share` to the running sum `acc` (the first share starts it).
  Value add(Value acc, Value share) {
    return acc ? AddOp::create(b, loc, share.getType(), acc, share).getResult()
               : share;
  }

  RankedTensorType type(ArrayRef<int64_t> shape, Type e = {}) const {
    return RankedTensorType::get(shape, e ? e : elem);
  }

  OpBuilder &b;
  Location loc;
  const Head &head;
  int64_t tileRows;
  Type elem;
  Value x2;
};

/// Erases `ops` (consumers before producers), each dead by then.
void eraseDead(ArrayRef<Operation *> ops) {
  for (Operation *op : ops) {
    assert(op->use_empty() && "train-tile-loss: a replaced op is still read");
    op->erase();
  }
}

/// Tiles a loss and its adjoint's products (the step).
void tileWithGrad(CrossEntropyWithGradOp ce, const Head &head, Adjoint adj,
                  int64_t tileRows) {
  OpBuilder b(ce);
  Location loc = ce.getLoc();
  Tiler tiler(b, loc, head, tileRows);
  // dW accumulates in f32 whatever the compute type (a bf16 sum of the
  // tiles' terms would round once per tile), each tile's product added by
  // train.matmul_acc, in place: one [V, C] f32 buffer. In f32 the first
  // tile's product starts it; otherwise a zero-filled f32 accumulator.
  Type f32 = b.getF32Type();
  bool widen = tiler.elem != f32;
  auto dwType = tiler.type({head.classes, head.width}, f32);
  SmallVector<Value> dxParts;
  Value loss, dw;
  for (int64_t t = 0; t < tiler.tiles(); ++t) {
    auto [xt, lt] = tiler.logits(t);
    auto tile = CrossEntropyWithGradOp::create(
        b, loc, ce.getResult().getType(), lt.getType(), lt, ce.getLabels(),
        ce.getDloss(), ce.getIgnoreIndexAttr(),
        b.getI64IntegerAttr(tiler.firstRow(t)));
    loss = tiler.add(loss, tile.getResult());
    if (adj.dx)
      dxParts.push_back(MatmulOp::create(
          b, loc, tiler.type({tiler.rowsOf(t), head.width}),
          tile.getLogitsGrad(), head.weight, UnitAttr(), UnitAttr()));
    if (!adj.dw)
      continue;
    if (!dw && !widen) {
      dw = MatmulOp::create(b, loc, dwType, tile.getLogitsGrad(), xt,
                            b.getUnitAttr(), UnitAttr());
      continue;
    }
    if (!dw)
      dw = FillOp::create(b, loc, dwType, b.getF64FloatAttr(0.0));
    dw = MatmulAccOp::create(b, loc, dwType, dw, tile.getLogitsGrad(), xt,
                             b.getUnitAttr(), UnitAttr());
  }
  SmallVector<Operation *> dead;
  if (adj.dx) {
    Value dx = ConcatOp::create(b, loc, tiler.type({head.rows, head.width}),
                                dxParts, b.getI64IntegerAttr(0));
    if (dx.getType() != adj.dx.getType())
      dx = ReshapeOp::create(b, loc, adj.dx.getType(), dx);
    adj.dx.getResult().replaceAllUsesWith(dx);
    dead.push_back(adj.dx);
  }
  // dW's old view of x as [rows, width], when nothing else reads it.
  ReshapeOp xView;
  if (adj.dw) {
    if (widen)
      dw = CastOp::create(b, loc, adj.dw.getType(), dw);
    adj.dw.getResult().replaceAllUsesWith(dw);
    xView = adj.dw.getRhs().getDefiningOp<ReshapeOp>();
    dead.push_back(adj.dw);
  }
  ce.getResult().replaceAllUsesWith(loss);
  dead.append(adj.reshapes.rbegin(), adj.reshapes.rend());
  dead.push_back(ce);
  dead.append(head.ops);
  eraseDead(dead);
  if (xView && xView->use_empty())
    xView->erase();
}

/// Tiles a loss without an adjoint (the evaluation function): the forward
/// half of the same tiles.
void tileForward(CrossEntropyOp ce, const Head &head, int64_t tileRows) {
  OpBuilder b(ce);
  Tiler tiler(b, ce.getLoc(), head, tileRows);
  Value loss;
  for (int64_t t = 0; t < tiler.tiles(); ++t) {
    Value lt = tiler.logits(t).second;
    loss = tiler.add(
        loss, CrossEntropyOp::create(b, ce.getLoc(), ce.getType(), lt,
                                     ce.getLabels(), ce.getIgnoreIndexAttr(),
                                     b.getI64IntegerAttr(tiler.firstRow(t))));
  }
  ce.getResult().replaceAllUsesWith(loss);
  SmallVector<Operation *> dead{ce};
  dead.append(head.ops);
  eraseDead(dead);
}

} // namespace

void TrainTileLossPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (maxTileBytes < 0) {
    module.emitError() << "train-tile-loss: max-tile-bytes must be >= 0";
    return signalPassFailure();
  }
  if (maxTileBytes == 0)
    return;
  // How many rows a tile of a loss with `head`'s logits holds, or 0 when its
  // logits fit whole.
  auto tileRowsFor = [&](Operation *loss, const Head &head) -> int64_t {
    auto logitsType = cast<RankedTensorType>(head.weight.getType());
    int64_t rowBytes = head.classes * (logitsType.getElementTypeBitWidth() / 8);
    if (head.rows * rowBytes <= maxTileBytes)
      return 0;
    int64_t rows = std::max<int64_t>(1, maxTileBytes / rowBytes);
    if ((head.rows + rows - 1) / rows > kMaxTiles) {
      rows = (head.rows + kMaxTiles - 1) / kMaxTiles;
      loss->emitWarning() << "train-tile-loss: tiles of at most "
                          << static_cast<int64_t>(maxTileBytes)
                          << " bytes of logits would take more than "
                          << kMaxTiles << " tiles; using " << kMaxTiles
                          << " tiles of " << rows << " rows ("
                          << rows * rowBytes << " bytes)";
    }
    // Balanced tiles: the same count, the largest as small as it can be.
    int64_t tiles = (head.rows + rows - 1) / rows;
    return (head.rows + tiles - 1) / tiles;
  };

  SmallVector<Operation *> losses;
  module.walk([&](Operation *op) {
    if (auto ce = dyn_cast<CrossEntropyWithGradOp>(op); ce && !ce.getFirstRow())
      losses.push_back(op);
    if (auto ce = dyn_cast<CrossEntropyOp>(op); ce && !ce.getFirstRow())
      losses.push_back(op);
  });
  bool found = false;
  int64_t tiled = 0; // (statistics count nothing unless enabled)
  for (Operation *op : losses) {
    auto ceg = dyn_cast<CrossEntropyWithGradOp>(op);
    std::optional<Head> head =
        matchHead(ceg ? ceg.getLogits() : cast<CrossEntropyOp>(op).getLogits());
    if (!head)
      continue;
    std::optional<Adjoint> adj;
    if (ceg && !(adj = matchAdjoint(ceg.getLogitsGrad(), *head)))
      continue;
    found = true;
    int64_t tileRows = tileRowsFor(op, *head);
    if (!tileRows)
      continue;
    int64_t tiles = (head->rows + tileRows - 1) / tileRows;
    if (ceg)
      tileWithGrad(ceg, *head, *adj, tileRows);
    else
      tileForward(cast<CrossEntropyOp>(op), *head, tileRows);
    ++tiled;
    numTiled += 1;
    numTiles += tiles;
  }
  // The sampling function (train.logits) returns the whole logits the tiles
  // avoid: with a tiled loss it would set the arenas' size. It goes; the
  // executable's --sample says why it has none.
  if (tiled > 0)
    for (auto fn : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      if (fn->hasAttr(kLogitsAttr))
        fn.erase();
  if (!found)
    module.emitWarning()
        << "train-tile-loss: no cross-entropy of a projection x W^T to tile "
           "(the loss's logits must come from one train.matmul with "
           "transpose_b that nothing else reads)";
}
