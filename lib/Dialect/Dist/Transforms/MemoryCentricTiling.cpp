//===- MemoryCentricTiling.cpp - memory-centric-tiling --------------------===//
//
// Part of the ztrain project.
//
// Splits the uses of a huge gathered parameter into tiles, each gathered on
// its own (chunk j of every rank's shard), so that no more than one tile of
// the layer needs to be materialized at once. The shard layout at rest does
// not change: a tile is the rows whose flat elements fall into chunk j of
// each shard, which is why tiles come out in rank order and
// dist.assemble_tiles / dist.extract_tile permute features.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "memory-centric-tiling"

namespace ztrain::dist {
#define GEN_PASS_DEF_MEMORYCENTRICTILING
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace ztrain::dist

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

namespace {
struct MemoryCentricTilingPass
    : public dist::impl::MemoryCentricTilingBase<MemoryCentricTilingPass> {
  using MemoryCentricTilingBase::MemoryCentricTilingBase;
  void runOnOperation() override;
};

enum class Use { Output, InputGrad, None };

/// How a use of the gathered parameter can be tiled.
Use classify(OpOperand &use) {
  auto mm = dyn_cast<train::MatmulOp>(use.getOwner());
  if (!mm || use.getOperandNumber() != 1 || mm.getTransposeA() ||
      cast<RankedTensorType>(mm.getRhs().getType()).getRank() != 2)
    return Use::None;
  return mm.getTransposeB() ? Use::Output : Use::InputGrad;
}
} // namespace

void MemoryCentricTilingPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (maxTileBytes < 0) {
    module.emitError() << "memory-centric-tiling: max-tile-bytes must be >= 0";
    return signalPassFailure();
  }
  func::FuncOp entry = train::getEntryFunction(module);
  if (!entry)
    return signalPassFailure();
  auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr);
  if (maxTileBytes == 0 || !zero)
    return;
  SymbolTableCollection symbols;
  FailureOr<int64_t> n = getGridSize(module, zero.getGrid(), symbols);
  if (failed(n))
    return signalPassFailure();

  // The step's gathers, and the evaluation function's: its forward pass
  // must not need the whole parameters the step's tiles avoid.
  SmallVector<GatherParamOp> gathers;
  auto collect = [&](func::FuncOp fn) {
    fn.walk([&](GatherParamOp g) {
      if (!g.getTiles())
        gathers.push_back(g);
    });
  };
  collect(entry);
  for (func::FuncOp fn : train::getForwardFunctions(module))
    collect(fn);
  OpBuilder b(&getContext());
  for (GatherParamOp g : gathers) {
    auto type = cast<RankedTensorType>(g.getType());
    int64_t elemBytes = type.getElementTypeBitWidth() / 8;
    int64_t bytes =
        (type.getNumElements() + *n - 1) / *n * *n * elemBytes;
    if (bytes <= maxTileBytes || type.getRank() != 2)
      continue;
    if (llvm::none_of(g.getResult().getUses(),
                      [](OpOperand &u) { return classify(u) != Use::None; }))
      continue;
    int64_t rows = type.getDimSize(0);
    int64_t tiles = (bytes + maxTileBytes - 1) / maxTileBytes;
    while (tiles <= rows / *n && rows % (*n * tiles) != 0)
      ++tiles;
    if (tiles > rows / *n) {
      g.emitWarning() << "cannot tile " << g.getParamAttr() << " (" << bytes
                      << " bytes) into tiles of at most "
                      << static_cast<int64_t>(maxTileBytes)
                      << " bytes: its " << rows
                      << " rows do not split into grid size x tiles; it is "
                         "gathered whole";
      continue;
    }
    auto tileType = RankedTensorType::get({rows / tiles, type.getDimSize(1)},
                                          type.getElementType());
    auto gatherTile = [&](Location loc, int64_t j) {
      ++numTiles;
      return GatherParamOp::create(b, loc, tileType, g.getParamAttr(),
                                   b.getI64IntegerAttr(j),
                                   b.getI64IntegerAttr(tiles),
                                   g.getGridAttr());
    };
    for (OpOperand &use :
         llvm::make_early_inc_range(g.getResult().getUses())) {
      Use kind = classify(use);
      if (kind == Use::None)
        continue;
      auto mm = cast<train::MatmulOp>(use.getOwner());
      Location loc = mm.getLoc();
      b.setInsertionPoint(mm);
      auto outType = cast<RankedTensorType>(mm.getType());
      Value result;
      // A recomputed product's tiles are recomputation too (zero-report
      // prices them apart from the model's FLOPs).
      bool recomputed = mm->hasAttr(train::kRecomputedAttr);
      auto inherit = [&](Operation *op) {
        if (recomputed)
          op->setAttr(train::kRecomputedAttr, b.getUnitAttr());
        return op->getResult(0);
      };
      if (kind == Use::Output) {
        // y = x W^T: each tile yields R / T output features.
        SmallVector<int64_t> shape(outType.getShape());
        shape.back() /= tiles;
        auto partType = RankedTensorType::get(shape, outType.getElementType());
        SmallVector<Value> parts;
        for (int64_t j = 0; j < tiles; ++j) {
          Value w = gatherTile(loc, j);
          parts.push_back(inherit(train::MatmulOp::create(
              b, loc, partType, mm.getLhs(), w, mm.getTransposeAAttr(),
              mm.getTransposeBAttr())));
        }
        result = AssembleTilesOp::create(b, loc, outType, parts,
                                         g.getGridAttr());
      } else {
        // dx = dy W: the sum over R features, tile by tile.
        auto dyType = cast<RankedTensorType>(mm.getLhs().getType());
        SmallVector<int64_t> shape(dyType.getShape());
        shape.back() /= tiles;
        auto sliceType = RankedTensorType::get(shape, dyType.getElementType());
        for (int64_t j = 0; j < tiles; ++j) {
          Value dy = ExtractTileOp::create(
              b, loc, sliceType, mm.getLhs(), b.getI64IntegerAttr(j),
              b.getI64IntegerAttr(tiles), g.getGridAttr());
          Value w = gatherTile(loc, j);
          Value part = inherit(train::MatmulOp::create(
              b, loc, outType, dy, w, mm.getTransposeAAttr(),
              mm.getTransposeBAttr()));
          result = result ? train::AddOp::create(b, loc, outType, result, part)
                                .getResult()
                          : part;
        }
      }
      mm.getResult().replaceAllUsesWith(result);
      mm.erase();
    }
    ++numTiled;
    if (g.getResult().use_empty())
      g.erase();
  }
}
