//===- DistOps.cpp - The dist collectives ---------------------------------===//
//
// Part of the ztrain project.
//
// The collectives' verifiers: synchronous ones, parameter gathers and
// tiles, the asynchronous start / wait pairs and buckets, and the release
// of a gathered parameter. The offload ops are in DistOffloadOps.cpp.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

static int64_t bytesOf(Value v) { return tensorBytes(v); }

/// The checks every collective shares: the grid exists and is usable, and
/// the element types agree.
static FailureOr<int64_t> verifyCollective(Operation *op,
                                           FlatSymbolRefAttr grid,
                                           SymbolTableCollection &symbols) {
  FailureOr<int64_t> n = getGridSize(op, grid, symbols);
  if (failed(n))
    return failure();
  auto in = cast<RankedTensorType>(op->getOperand(0).getType());
  auto out = cast<RankedTensorType>(op->getResult(0).getType());
  if (in.getElementType() != out.getElementType())
    return op->emitOpError() << "element type changes from "
                             << in.getElementType() << " to "
                             << out.getElementType();
  return n;
}

/// Checks `big` dim 0 = `small` dim 0 x n, other dims equal.
static LogicalResult verifyDim0Scaled(Operation *op, RankedTensorType big,
                                      StringRef bigName, RankedTensorType small,
                                      StringRef smallName, int64_t n) {
  if (big.getRank() < 1 || big.getRank() != small.getRank())
    return op->emitOpError() << "operand and result must have the same "
                                "rank >= 1";
  if (big.getDimSize(0) != small.getDimSize(0) * n)
    return op->emitOpError()
           << bigName << " dim 0 (" << big.getDimSize(0) << ") must be "
           << smallName << " dim 0 (" << small.getDimSize(0)
           << ") x grid size (" << n << ")";
  if (big.getShape().drop_front() != small.getShape().drop_front())
    return op->emitOpError() << "dims after dim 0 must be equal";
  return success();
}

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyCollective(*this, getGridAttr(), symbols);
}

int64_t AllReduceOp::getCommunicatedBytes(int64_t n,
                                      SymbolTableCollection &symbols) {
  return 2 * bytesOf(getInput()) * (n - 1) / n;
}

LogicalResult
ReduceScatterOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> n = verifyCollective(*this, getGridAttr(), symbols);
  if (failed(n))
    return failure();
  return verifyDim0Scaled(*this, cast<RankedTensorType>(getInput().getType()),
                          "operand",
                          cast<RankedTensorType>(getResult().getType()),
                          "result", *n);
}

int64_t ReduceScatterOp::getCommunicatedBytes(int64_t n,
                                      SymbolTableCollection &symbols) {
  return bytesOf(getInput()) * (n - 1) / n;
}

LogicalResult AllGatherOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> n = verifyCollective(*this, getGridAttr(), symbols);
  if (failed(n))
    return failure();
  return verifyDim0Scaled(*this,
                          cast<RankedTensorType>(getResult().getType()),
                          "result", cast<RankedTensorType>(getInput().getType()),
                          "operand", *n);
}

LogicalResult SliceShardOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> n = getGridSize(*this, getGridAttr(), symbols);
  if (failed(n))
    return failure();
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (in.getRank() != 1 || out.getRank() != 1 ||
      in.getElementType() != out.getElementType() ||
      in.getNumElements() != out.getNumElements() * *n)
    return emitOpError() << "operand and result must be one-dimensional "
                            "tensors of one element type, the operand "
                         << *n << " x the result's elements (the grid "
                         << getGridAttr() << " of " << *n << " ranks), got "
                         << in << " and " << out;
  return success();
}

int64_t AllGatherOp::getCommunicatedBytes(int64_t n,
                                      SymbolTableCollection &symbols) {
  return bytesOf(getResult()) * (n - 1) / n;
}

LogicalResult BroadcastOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> n = verifyCollective(*this, getGridAttr(), symbols);
  if (failed(n))
    return failure();
  int64_t root = static_cast<int64_t>(getRoot());
  if (root < 0 || root >= *n)
    return emitOpError() << "root " << root << " is not a rank of grid "
                         << getGridAttr() << " (size " << *n << ")";
  return success();
}

int64_t BroadcastOp::getCommunicatedBytes(int64_t n,
                                      SymbolTableCollection &symbols) {
  return n > 1 ? bytesOf(getInput()) : 0;
}

LogicalResult PadFlatOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (out.getRank() != 1 || out.getNumElements() < in.getNumElements() ||
      in.getElementType() != out.getElementType())
    return emitOpError() << "result must be a one-dimensional "
                         << in.getElementType() << " tensor of at least "
                         << in.getNumElements() << " elements, got " << out;
  return success();
}

/// The train.param `ref` names, looked up from `op`.
static FailureOr<train::ParamOp> lookupParam(Operation *op,
                                             FlatSymbolRefAttr ref,
                                             SymbolTableCollection &symbols) {
  auto param = symbols.lookupNearestSymbolFrom<train::ParamOp>(op, ref);
  if (!param)
    return op->emitOpError() << "references undeclared parameter " << ref;
  return param;
}

static int64_t gatheredBytes(RankedTensorType type, int64_t n) {
  int64_t shard = (type.getNumElements() + n - 1) / n;
  return shard * (n - 1) * (type.getElementTypeBitWidth() / 8);
}

/// Tile `tiles` of a parameter of `type`: R / tiles of its R rows.
static RankedTensorType tileType(RankedTensorType type, int64_t tiles) {
  SmallVector<int64_t> shape(type.getShape());
  shape[0] /= tiles;
  return RankedTensorType::get(shape, type.getElementType());
}

/// The checks dist.gather_param and dist.gather_param_start share: the grid,
/// a parameter partitioned over it, and the tile's constraints. Returns the
/// type the gather yields: the parameter's, or its tile's.
static FailureOr<RankedTensorType>
verifyGather(Operation *op, FlatSymbolRefAttr paramRef, FlatSymbolRefAttr grid,
             std::optional<int64_t> tile, std::optional<int64_t> tiles,
             SymbolTableCollection &symbols) {
  FailureOr<int64_t> n = getGridSize(op, grid, symbols);
  if (failed(n))
    return failure();
  FailureOr<train::ParamOp> param = lookupParam(op, paramRef, symbols);
  if (failed(param))
    return failure();
  auto partition = (*param)->getAttrOfType<PartitionAttr>(kPartitionAttr);
  if (!partition || partition.getGrid() != grid)
    return op->emitOpError() << "parameter " << paramRef
                             << " is not partitioned over " << grid;
  RankedTensorType type = param->getTensorType();
  if (tile.has_value() != tiles.has_value())
    return op->emitOpError() << "needs both `tile` and `tiles` or neither";
  if (!tiles)
    return type;
  if (*tiles < 1 || *tile < 0 || *tile >= *tiles)
    return op->emitOpError() << "tile " << *tile << " of " << *tiles
                             << " is not a tile (0 <= tile < tiles)";
  if (type.getRank() < 1 || type.getDimSize(0) % (*n * *tiles) != 0)
    return op->emitOpError()
           << "parameter " << param->getSymName() << " of type " << type
           << " has no " << *tiles << " tiles over " << *n
           << " ranks: dim 0 must be divisible by " << *n * *tiles;
  return tileType(type, *tiles);
}

/// The checks dist.all_gather_param and its start share: the grid, and a
/// parameter stored replicated.
static LogicalResult verifyParamAllGather(Operation *op,
                                          FlatSymbolRefAttr paramRef,
                                          FlatSymbolRefAttr grid,
                                          SymbolTableCollection &symbols) {
  if (failed(getGridSize(op, grid, symbols)))
    return failure();
  FailureOr<train::ParamOp> param = lookupParam(op, paramRef, symbols);
  if (failed(param))
    return failure();
  if ((*param)->hasAttr(kPartitionAttr))
    return op->emitOpError() << "parameter " << paramRef
                             << " is partitioned at rest; use "
                             << (isa<AllGatherParamOp>(op)
                                     ? "dist.gather_param"
                                     : "dist.gather_param_start");
  return success();
}

/// Bytes one rank sends gathering `paramRef` (a tile of it when `tiles`).
static int64_t paramGatherBytes(Operation *op, FlatSymbolRefAttr paramRef,
                                std::optional<int64_t> tiles, int64_t n,
                                SymbolTableCollection &symbols) {
  auto param = symbols.lookupNearestSymbolFrom<train::ParamOp>(op, paramRef);
  if (!param)
    return 0;
  RankedTensorType type = param.getTensorType();
  return gatheredBytes(tiles ? tileType(type, *tiles) : type, n);
}

LogicalResult
GatherParamOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<RankedTensorType> expected = verifyGather(
      *this, getParamAttr(), getGridAttr(), getTile(), getTiles(), symbols);
  if (failed(expected))
    return failure();
  if (*expected != getResult().getType())
    return emitOpError() << "result type " << getResult().getType()
                         << " does not match parameter " << getParamAttr()
                         << (getTiles() ? " tile, expected " : " declared as ")
                         << *expected;
  return success();
}

int64_t GatherParamOp::getCommunicatedBytes(int64_t n,
                                      SymbolTableCollection &symbols) {
  return gatheredBytes(cast<RankedTensorType>(getResult().getType()), n);
}

LogicalResult
AllGatherParamOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyParamAllGather(*this, getParamAttr(), getGridAttr(), symbols);
}

int64_t AllGatherParamOp::getCommunicatedBytes(int64_t n,
                                      SymbolTableCollection &symbols) {
  return paramGatherBytes(*this, getParamAttr(), std::nullopt, n, symbols);
}

//===----------------------------------------------------------------------===//
// Asynchronous collectives
//===----------------------------------------------------------------------===//

/// Every start's token feeds exactly one dist.wait in its block.
static LogicalResult verifyStartToken(Operation *op) {
  Value token = op->getResult(0);
  if (!token.hasOneUse() || !isa<WaitOp>(*token.getUsers().begin()))
    return op->emitOpError() << "token must have exactly one use, a dist.wait "
                                "(every started collective is waited once)";
  Operation *wait = *token.getUsers().begin();
  if (wait->getBlock() != op->getBlock())
    return op->emitOpError() << "must be waited in the same block";
  return success();
}

/// The wait completing `start` (verified to exist).
static WaitOp waitOf(Operation *start) {
  return cast<WaitOp>(*start->getResult(0).getUsers().begin());
}

/// Checks that the wait of `start` yields exactly `expected`.
static LogicalResult verifyWaitTypes(Operation *start,
                                     ArrayRef<Type> expected) {
  WaitOp wait = waitOf(start);
  if (TypeRange(wait.getResults().getTypes()) == TypeRange(expected))
    return success();
  InFlightDiagnostic diag = wait.emitOpError()
                            << "yields (" << wait.getResults().getTypes()
                            << ") but its " << start->getName()
                            << " produces (";
  llvm::interleaveComma(expected, diag);
  diag << ")";
  diag.attachNote(start->getLoc()) << "started here";
  return diag;
}

/// Bucketed collectives: one or more operands of one element type.
static LogicalResult verifyBucket(Operation *op, ValueRange inputs) {
  if (inputs.empty())
    return op->emitOpError() << "needs at least one operand";
  Type elem = cast<RankedTensorType>(inputs[0].getType()).getElementType();
  for (Value v : inputs)
    if (cast<RankedTensorType>(v.getType()).getElementType() != elem)
      return op->emitOpError() << "mixes element types " << elem << " and "
                               << cast<RankedTensorType>(v.getType())
                                      .getElementType()
                               << " in one bucket";
  return success();
}

static int64_t totalBytes(ValueRange values) {
  int64_t total = 0;
  for (Value v : values)
    total += bytesOf(v);
  return total;
}

LogicalResult GatherParamStartOp::verify() { return verifyStartToken(*this); }

LogicalResult
GatherParamStartOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<RankedTensorType> expected = verifyGather(
      *this, getParamAttr(), getGridAttr(), getTile(), getTiles(), symbols);
  if (failed(expected))
    return failure();
  return verifyWaitTypes(*this, {*expected});
}

int64_t GatherParamStartOp::getCommunicatedBytes(int64_t n,
                                      SymbolTableCollection &symbols) {
  return paramGatherBytes(*this, getParamAttr(), getTiles(), n, symbols);
}

/// Shapes of a tile permutation: `big` is `small` with the last dimension
/// `tiles` times larger, divisible by n x tiles.
static LogicalResult verifyTileShapes(Operation *op, RankedTensorType small,
                                      RankedTensorType big, int64_t tiles,
                                      int64_t n) {
  if (small.getRank() < 1 || small.getRank() != big.getRank() ||
      small.getElementType() != big.getElementType() ||
      small.getShape().drop_back() != big.getShape().drop_back() ||
      big.getShape().back() != small.getShape().back() * tiles ||
      big.getShape().back() % (n * tiles) != 0)
    return op->emitOpError()
           << "tiles of type " << small << " and the whole " << big
           << " do not match: the whole's last dimension must be " << tiles
           << " x the tile's and divisible by " << n * tiles
           << " (grid size x tiles), other dimensions equal";
  return success();
}

LogicalResult
AssembleTilesOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> n = getGridSize(*this, getGridAttr(), symbols);
  if (failed(n))
    return failure();
  if (getInputs().empty())
    return emitOpError() << "needs at least one tile";
  Type first = getInputs()[0].getType();
  for (Value v : getInputs())
    if (v.getType() != first)
      return emitOpError() << "tiles must all have one type, got " << first
                           << " and " << v.getType();
  return verifyTileShapes(*this, cast<RankedTensorType>(first),
                          cast<RankedTensorType>(getResult().getType()),
                          getInputs().size(), *n);
}

LogicalResult
ExtractTileOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> n = getGridSize(*this, getGridAttr(), symbols);
  if (failed(n))
    return failure();
  if (getTiles() < 1 || getTile() < 0 || getTile() >= getTiles())
    return emitOpError() << "tile " << getTile() << " of " << getTiles()
                         << " is not a tile (0 <= tile < tiles)";
  return verifyTileShapes(*this, cast<RankedTensorType>(getResult().getType()),
                          cast<RankedTensorType>(getInput().getType()),
                          getTiles(), *n);
}

LogicalResult ReduceScatterStartOp::verify() {
  if (failed(verifyBucket(*this, getInputs())))
    return failure();
  for (Value v : getInputs())
    if (cast<RankedTensorType>(v.getType()).getRank() != 1)
      return emitOpError() << "operands must be flat (one-dimensional), got "
                           << v.getType();
  return verifyStartToken(*this);
}

LogicalResult
ReduceScatterStartOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> n = getGridSize(*this, getGridAttr(), symbols);
  if (failed(n))
    return failure();
  SmallVector<Type> expected;
  for (Value v : getInputs()) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getDimSize(0) % *n != 0)
      return emitOpError() << "operand of " << t.getDimSize(0)
                           << " elements does not split into " << *n
                           << " equal chunks (grid " << getGridAttr() << ")";
    expected.push_back(
        RankedTensorType::get({t.getDimSize(0) / *n}, t.getElementType()));
  }
  return verifyWaitTypes(*this, expected);
}

int64_t ReduceScatterStartOp::getCommunicatedBytes(int64_t n,
                                      SymbolTableCollection &symbols) {
  return totalBytes(getInputs()) * (n - 1) / n;
}

LogicalResult AllReduceStartOp::verify() {
  if (failed(verifyBucket(*this, getInputs())))
    return failure();
  return verifyStartToken(*this);
}

LogicalResult
AllReduceStartOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (failed(getGridSize(*this, getGridAttr(), symbols)))
    return failure();
  return verifyWaitTypes(*this, llvm::to_vector(getInputs().getTypes()));
}

int64_t AllReduceStartOp::getCommunicatedBytes(int64_t n,
                                      SymbolTableCollection &symbols) {
  // One collective over the concatenation: rounded once, as the runtime
  // counts it.
  return 2 * totalBytes(getInputs()) * (n - 1) / n;
}

LogicalResult AllGatherParamStartOp::verify() {
  return verifyStartToken(*this);
}

LogicalResult
AllGatherParamStartOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (failed(verifyParamAllGather(*this, getParamAttr(), getGridAttr(),
                                  symbols)))
    return failure();
  return verifyWaitTypes(*this, {});
}

int64_t AllGatherParamStartOp::getCommunicatedBytes(int64_t n,
                                      SymbolTableCollection &symbols) {
  return paramGatherBytes(*this, getParamAttr(), std::nullopt, n, symbols);
}

LogicalResult WaitOp::verify() {
  Operation *start = getStart();
  if (!start || !isa<GatherParamStartOp, ReduceScatterStartOp,
                     AllReduceStartOp, AllGatherParamStartOp, SwapInStartOp,
                     SwapOutStartOp, OffloadActivationStartOp,
                     ReloadActivationStartOp>(start))
    return emitOpError() << "token must come from a dist.*_start op";
  if (isa<SwapInStartOp, SwapOutStartOp>(start) && getNumResults())
    return emitOpError() << "completes a swap transfer, which yields nothing";
  if (auto offload = dyn_cast<OffloadActivationStartOp>(start)) {
    if (getNumResults() == 0)
      return success();
    // A gradient spill: the host copy, read by its host-step update.
    if (getNumResults() != 1 ||
        getResult(0).getType() != offload.getInput().getType())
      return emitOpError()
             << "completes a copy to host memory: it yields nothing (an "
                "activation's), or the host copy of a gradient, of type "
             << offload.getInput().getType();
    for (Operation *user : getResult(0).getUsers())
      if (!user->hasAttr(kHostGradientAttr) && !isa<UpdateWaitOp>(user))
        return emitOpError()
               << "yields a gradient's host copy, which only an optimizer "
                  "update marked '"
               << kHostGradientAttr << "' (and its dist.update_wait) may read";
  }
  if (auto reload = dyn_cast<ReloadActivationStartOp>(start))
    if (getNumResults() != 1 ||
        getResult(0).getType() != reload.getInput().getType())
      return emitOpError() << "must yield the reloaded activation, of type "
                           << reload.getInput().getType();
  return success();
}
LogicalResult ReleaseOp::verify() {
  Value v = getInput();
  bool gathered = v.getDefiningOp<GatherParamOp>() != nullptr;
  if (auto wait = v.getDefiningOp<WaitOp>())
    gathered = isa_and_nonnull<GatherParamStartOp>(wait.getStart());
  if (!gathered)
    return emitOpError() << "releases a value that is not a gathered "
                            "parameter (the result of dist.gather_param or "
                            "of a dist.wait on dist.gather_param_start)";
  // The value and its reshapes (which share its buffer) are dead here.
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    for (Operation *user : cur.getUsers()) {
      if (user == getOperation())
        continue;
      if (user->getBlock() == getOperation()->getBlock() &&
          getOperation()->isBeforeInBlock(user)) {
        InFlightDiagnostic diag = emitOpError()
                                  << "frees a gathered parameter that is "
                                     "used afterwards";
        diag.attachNote(user->getLoc()) << "used here";
        return diag;
      }
      if (auto reshape = dyn_cast<train::ReshapeOp>(user))
        work.push_back(reshape.getResult());
    }
  }
  return success();
}

#define GET_OP_CLASSES
#include "ztrain/Dialect/Dist/IR/DistOps.cpp.inc"
