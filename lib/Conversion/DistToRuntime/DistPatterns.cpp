//===- DistPatterns.cpp - dist ops to runtime calls -----------------------===//
//
// Part of the ztrain project.
//
// The collectives of a partitioned step. Synchronous collectives become
// ztrt_all_reduce / reduce_scatter / all_gather calls; asynchronous ones a
// *_start call returning a handle and a ztrt_wait. A gathered parameter's
// buffer (N padded shards, or one tile of them) is allocated at its start,
// a one-tensor reduce-scatter writes straight into its result, and a
// bucket is packed at its start (rank-major rows for a reduce-scatter, so
// that one collective leaves each rank its chunk of every tensor) and
// unpacked at its wait. Byte offsets derive from each tensor's element
// type.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Conversion/DistToRuntime/DistToRuntime.h"

#include "ztrt.h" // ztrt_category

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;
using train::numElements;

namespace {

Value meanFlag(StepLowering &s, Reduction reduction) {
  return s.rt.i32(reduction == Reduction::mean);
}

/// ztrt_<kernel> in the element type of `typed`.
FailureOr<RuntimeKernel> collective(Operation *op, StringRef kernel,
                                  Value typed) {
  return typedKernel(op, kernel, train::elementTypeOf(typed));
}

/// A gather of a parameter partitioned at rest (or of its tile j of T):
/// this rank's shard (chunk), the buffer of N of them that `result` lives
/// in (its planned slot on `slotOwner`, or a fresh allocation), and the
/// elements each rank sends.
struct Gather {
  Value shard, full;
  int64_t count;
};

Gather gatherParam(StepLowering &s, StringRef name,
                   std::optional<int64_t> tile, std::optional<int64_t> tiles,
                   Value result, Operation *slotOwner) {
  train::ParamOp param = s.paramOp(name);
  int64_t bytes = elementBytes(param.getType());
  int64_t count = s.storageOf(param, param.getType()).elements;
  Value shard = s.param(name);
  if (tiles) {
    count /= *tiles;
    shard = s.rt.offset(shard, *tile * count * bytes);
  }
  Value full;
  if (s.planned()) {
    full = s.slotOf(slotOwner, 0);
    s.bind(result, full);
  } else {
    full = s.allocOwned(result, count * s.gridSize * bytes, ZTRT_CAT_GATHERED);
  }
  return Gather{shard, full, count};
}

/// Stages 1-2: this rank's updated slice of a replicated parameter, to be
/// all-gathered in place into the parameter's storage.
Gather paramSlice(StepLowering &s, StringRef name) {
  train::ParamOp param = s.paramOp(name);
  int64_t count = s.storageOf(param, param.getType()).elements / s.gridSize;
  Value p = s.param(name);
  Value mine =
      s.rt.offset(p, s.rt.mul(s.rt.shardRank(),
                              s.rt.i64(count * elementBytes(param.getType()))));
  return Gather{mine, p, count};
}

/// Where each of `values` starts in a packed buffer (elements), and the
/// buffer's total elements.
std::pair<SmallVector<int64_t>, int64_t> packedOffsets(ValueRange values) {
  SmallVector<int64_t> offsets;
  int64_t total = 0;
  for (Value v : values) {
    offsets.push_back(total);
    total += numElements(v);
  }
  return {offsets, total};
}

WaitOp waitOf(Value token) { return cast<WaitOp>(*token.getUsers().begin()); }

struct AllReducePattern : OpRuntimePattern<AllReduceOp> {
  LogicalResult lower(AllReduceOp op, StepLowering &s) const override {
    auto name = collective(op, "all_reduce", op.getInput());
    if (failed(name))
      return failure();
    // In place (the result takes the operand's buffer) unless the operand
    // is still needed.
    Value x = s.get(op.getInput());
    Value out = x;
    if (s.buffers().isAlias(op.getResult()))
      s.bind(op.getResult(), x);
    else
      out = s.alloc(op.getResult());
    name->call(s.rt,
               {x, out, s.rt.i64(numElements(op.getResult())),
                meanFlag(s, op.getReduction()), s.axis(op.getGridAttr())});
    return success();
  }
};

/// This rank's shard of a flat tensor over a grid of consecutive ranks
/// (axis 1, hpZ's group): a copy from rank % G.
struct SliceShardPattern : OpRuntimePattern<SliceShardOp> {
  LogicalResult lower(SliceShardOp op, StepLowering &s) const override {
    int64_t chunkBytes = tensorBytes(op.getResult().getType());
    int64_t g = numElements(op.getInput()) / numElements(op.getResult());
    Value mine = s.rt.offset(s.get(op.getInput()),
                             s.rt.mul(s.rt.groupRank(g), s.rt.i64(chunkBytes)));
    s.rt.call("copy", {mine, s.alloc(op.getResult()), s.rt.i64(chunkBytes)});
    return success();
  }
};

struct PadFlatPattern : OpRuntimePattern<PadFlatOp> {
  LogicalResult lower(PadFlatOp op, StepLowering &s) const override {
    auto fill = collective(op, "fill", op.getResult());
    if (failed(fill))
      return failure();
    int64_t n = numElements(op.getInput());
    int64_t total = numElements(op.getResult());
    int64_t bytes = elementBytes(op.getInput().getType());
    Value x = s.get(op.getInput()), out = s.alloc(op.getResult());
    s.rt.call("copy", {x, out, s.rt.i64(n * bytes)});
    if (total > n)
      fill->call(s.rt, {s.rt.offset(out, n * bytes), s.rt.i64(total - n),
                        s.rt.f64(0.0)});
    return success();
  }
};

struct ReduceScatterPattern : OpRuntimePattern<ReduceScatterOp> {
  LogicalResult lower(ReduceScatterOp op, StepLowering &s) const override {
    auto name = collective(op, "reduce_scatter", op.getInput());
    if (failed(name))
      return failure();
    Value x = s.get(op.getInput());
    name->call(s.rt,
               {x, s.alloc(op.getResult()),
                s.rt.i64(numElements(op.getResult())),
                meanFlag(s, op.getReduction()), s.axis(op.getGridAttr())});
    return success();
  }
};

struct AllGatherPattern : OpRuntimePattern<AllGatherOp> {
  LogicalResult lower(AllGatherOp op, StepLowering &s) const override {
    auto name = collective(op, "all_gather", op.getInput());
    if (failed(name))
      return failure();
    Value x = s.get(op.getInput());
    name->call(s.rt, {x, s.alloc(op.getResult()),
                      s.rt.i64(numElements(op.getInput())),
                      s.axis(op.getGridAttr())});
    return success();
  }
};

/// The gathered copy is a communication buffer of N padded slices; the
/// tensor is its first elements.
struct GatherParamPattern : OpRuntimePattern<GatherParamOp> {
  LogicalResult lower(GatherParamOp op, StepLowering &s) const override {
    auto name = collective(op, "all_gather", op.getResult());
    if (failed(name))
      return failure();
    Gather g = gatherParam(s, op.getParam(), op.getTile(), op.getTiles(),
                           op.getResult(), op);
    name->call(s.rt,
               {g.shard, g.full, s.rt.i64(g.count), s.axis(op.getGridAttr())});
    return success();
  }
};

struct AllGatherParamPattern : OpRuntimePattern<AllGatherParamOp> {
  LogicalResult lower(AllGatherParamOp op, StepLowering &s) const override {
    train::ParamOp param = s.paramOp(op.getParam());
    auto name = typedKernel(op, "all_gather",
                            param.getTensorType().getElementType());
    if (failed(name))
      return failure();
    Gather g = paramSlice(s, op.getParam());
    name->call(s.rt,
               {g.shard, g.full, s.rt.i64(g.count), s.axis(op.getGridAttr())});
    return success();
  }
};

/// The full copy is allocated now and filled while the ops up to the wait
/// compute (see dist.gather_param).
struct GatherParamStartPattern : OpRuntimePattern<GatherParamStartOp> {
  LogicalResult lower(GatherParamStartOp op, StepLowering &s) const override {
    WaitOp wait = waitOf(op.getToken());
    auto name = collective(op, "all_gather_start", wait.getResult(0));
    if (failed(name))
      return failure();
    Gather g = gatherParam(s, op.getParam(), op.getTile(), op.getTiles(),
                           wait.getResult(0), wait);
    s.pending[op.getToken()] = {
        name->call(s.rt, {g.shard, g.full, s.rt.i64(g.count),
                          s.axis(op.getGridAttr())}),
        {},
        {},
        {}};
    return success();
  }
};

struct AllGatherParamStartPattern : OpRuntimePattern<AllGatherParamStartOp> {
  LogicalResult lower(AllGatherParamStartOp op,
                      StepLowering &s) const override {
    train::ParamOp param = s.paramOp(op.getParam());
    auto name = typedKernel(op, "all_gather_start",
                            param.getTensorType().getElementType());
    if (failed(name))
      return failure();
    Gather g = paramSlice(s, op.getParam());
    s.pending[op.getToken()] = {
        name->call(s.rt, {g.shard, g.full, s.rt.i64(g.count),
                          s.axis(op.getGridAttr())}),
        {},
        {},
        {}};
    return success();
  }
};

struct ReduceScatterStartPattern : OpRuntimePattern<ReduceScatterStartOp> {
  LogicalResult lower(ReduceScatterStartOp op,
                      StepLowering &s) const override {
    auto name = collective(op, "reduce_scatter_start", op.getInputs()[0]);
    if (failed(name))
      return failure();
    WaitOp wait = waitOf(op.getToken());
    Value mean = meanFlag(s, op.getReduction());
    Value axis = s.axis(op.getGridAttr());
    if (op.getInputs().size() == 1) {
      // One tensor: straight into the result's buffer.
      Value out = s.alloc(wait.getResult(0));
      s.pending[op.getToken()] = {
          name->call(s.rt,
                     {s.get(op.getInputs()[0]), out,
                      s.rt.i64(numElements(wait.getResult(0))), mean, axis}),
          {},
          {},
          {}};
      return success();
    }
    // A bucket: chunk r of every tensor side by side in row r, so that one
    // reduce-scatter leaves each rank its chunks.
    int64_t bytes = elementBytes(op.getInputs()[0].getType());
    auto [offsets, total] = packedOffsets(wait.getResults());
    Value in = s.stagingBuffer(op, 0, total * s.gridSize * bytes);
    Value out = s.stagingBuffer(op, 1, total * bytes);
    for (auto [x, r, off] :
         llvm::zip(op.getInputs(), wait.getResults(), offsets)) {
      int64_t chunk = numElements(r) * bytes;
      s.rt.call("copy_2d", {s.get(x), s.rt.offset(in, off * bytes),
                            s.rt.i64(s.gridSize), s.rt.i64(chunk),
                            s.rt.i64(chunk), s.rt.i64(total * bytes)});
    }
    s.pending[op.getToken()] = {
        name->call(s.rt, {in, out, s.rt.i64(total), mean, axis}), in, out,
        offsets};
    return success();
  }
};

struct AllReduceStartPattern : OpRuntimePattern<AllReduceStartOp> {
  LogicalResult lower(AllReduceStartOp op, StepLowering &s) const override {
    auto name = collective(op, "all_reduce_start", op.getInputs()[0]);
    if (failed(name))
      return failure();
    WaitOp wait = waitOf(op.getToken());
    Value mean = meanFlag(s, op.getReduction());
    Value axis = s.axis(op.getGridAttr());
    if (op.getInputs().size() == 1) {
      // In place when nothing else reads the operand.
      Value x = s.get(op.getInputs()[0]);
      Value out = s.buffers().isAlias(wait.getResult(0))
                      ? x
                      : s.alloc(wait.getResult(0));
      s.bind(wait.getResult(0), out);
      s.pending[op.getToken()] = {
          name->call(s.rt, {x, out, s.rt.i64(numElements(wait.getResult(0))),
                            mean, axis}),
          {},
          {},
          {}};
      return success();
    }
    // A bucket: the tensors concatenated, reduced in place.
    int64_t bytes = elementBytes(op.getInputs()[0].getType());
    auto [offsets, total] = packedOffsets(op.getInputs());
    Value packed = s.stagingBuffer(op, 0, total * bytes);
    for (auto [x, off] : llvm::zip(op.getInputs(), offsets))
      s.rt.call("copy", {s.get(x), s.rt.offset(packed, off * bytes),
                         s.rt.i64(tensorBytes(x.getType()))});
    s.pending[op.getToken()] = {
        name->call(s.rt, {packed, packed, s.rt.i64(total), mean, axis}), packed,
        Value(), offsets};
    return success();
  }
};

/// The kind and descriptor index of a swapped tensor (ztrt_swap_in's).
std::pair<Value, Value> swapTarget(StepLowering &s, StringRef name) {
  auto it = s.stateIndex.find(name);
  if (it != s.stateIndex.end())
    return {s.rt.i32(ZTRT_SWAP_STATE), s.rt.i64(it->second)};
  return {s.rt.i32(ZTRT_SWAP_PARAM), s.rt.i64(s.paramIndexOf(name))};
}

/// A swap of one chunk (`chunk c of C`): its byte offset in the tensor's
/// swap file and its bytes (dist::chunkElements over the tensor's per-rank
/// storage, as StepBuffers sizes its buffer).
std::pair<int64_t, int64_t> chunkRange(StepLowering &s, Operation *op) {
  auto name = op->getAttrOfType<FlatSymbolRefAttr>("state");
  const int64_t c = op->getAttrOfType<IntegerAttr>("chunk").getInt();
  const int64_t chunks = op->getAttrOfType<IntegerAttr>("chunks").getInt();
  Operation *symbol = s.symbolOp(name.getValue());
  auto type = cast<RankedTensorType>(
      isa<train::StateOp>(symbol) ? cast<train::StateOp>(symbol).getType()
                                  : cast<train::ParamOp>(symbol).getType());
  const int64_t n = s.storageOf(symbol, type).elements;
  const int64_t eb = elementBytes(type);
  return {c * dist::chunkElements(n, chunks) * eb,
          dist::chunkSize(n, c, chunks) * eb};
}

/// An nvme tensor comes into its swap buffer (plan-memory's slot); from
/// here on the tensor's reads and writes use that buffer.
struct SwapInStartPattern : OpRuntimePattern<SwapInStartOp> {
  LogicalResult lower(SwapInStartOp op, StepLowering &s) const override {
    if (!s.planned()) // an unplanned buffer would be allocated every step
      return op.emitOpError()
             << "needs a memory plan for its swap buffer; run plan-memory "
                "right before lower-to-runtime";
    Value buffer = s.stagingBuffer(op, 0, 0);
    StringRef name = op.getState();
    const int64_t chunk = op.getChunk() ? int64_t(*op.getChunk()) : -1;
    if (!s.swapBuffers.try_emplace(StepLowering::swapKey(name, chunk), buffer)
             .second)
      return op.emitOpError() << "brings @" << name
                              << " in while an earlier swap buffer of it "
                                 "is still live";
    auto [kind, index] = swapTarget(s, name);
    Value ticket =
        chunk < 0 ? s.rt.call("swap_in", {kind, index, buffer})
                  : s.rt.call("swap_in_chunk",
                              {kind, index, buffer,
                               s.rt.i64(chunkRange(s, op).first),
                               s.rt.i64(chunkRange(s, op).second)});
    s.pending[op.getToken()] = StepLowering::Pending{ticket, {}, {}, {}};
    return success();
  }
};

struct SwapOutStartPattern : OpRuntimePattern<SwapOutStartOp> {
  LogicalResult lower(SwapOutStartOp op, StepLowering &s) const override {
    StringRef name = op.getState();
    const int64_t chunk = op.getChunk() ? int64_t(*op.getChunk()) : -1;
    auto it = s.swapBuffers.find(StepLowering::swapKey(name, chunk));
    if (it == s.swapBuffers.end())
      return op.emitOpError() << "writes back @" << name
                              << ", which no dist.swap_in_start brought in";
    auto [kind, index] = swapTarget(s, name);
    Value ticket =
        chunk < 0 ? s.rt.call("swap_out", {kind, index, it->second})
                  : s.rt.call("swap_out_chunk",
                              {kind, index, it->second,
                               s.rt.i64(chunkRange(s, op).first),
                               s.rt.i64(chunkRange(s, op).second)});
    s.swapBuffers.erase(it);
    s.pending[op.getToken()] = StepLowering::Pending{ticket, {}, {}, {}};
    return success();
  }
};

/// A buffer only read: nothing to write; the plan frees its slot here.
struct SwapReleasePattern : OpRuntimePattern<SwapReleaseOp> {
  LogicalResult lower(SwapReleaseOp op, StepLowering &s) const override {
    if (!s.swapBuffers.erase(StepLowering::swapKey(op.getState())))
      return op.emitOpError() << "releases @" << op.getState()
                              << ", which no dist.swap_in_start brought in";
    return success();
  }
};

/// ztrt_update_wait with the pointer its update passed.
struct UpdateWaitPattern : OpRuntimePattern<UpdateWaitOp> {
  LogicalResult lower(UpdateWaitOp op, StepLowering &s) const override {
    auto it = s.asyncUpdates.find(op.getParamAttr().getAttr());
    if (it == s.asyncUpdates.end())
      return op.emitOpError() << "follows no asynchronous update of "
                              << op.getParamAttr();
    s.rt.call("update_wait", {it->second});
    s.asyncUpdates.erase(it);
    return success();
  }
};

/// Pa+cpu: the activation's bytes start for their host copy (plan-memory's
/// slot in host_activations), behind the op that made them.
struct OffloadActivationStartPattern
    : OpRuntimePattern<OffloadActivationStartOp> {
  LogicalResult lower(OffloadActivationStartOp op,
                      StepLowering &s) const override {
    if (!s.planned())
      return op.emitOpError() << "needs a memory plan for its host copy; run "
                                 "plan-memory right before lower-to-runtime";
    Value host = s.stagingBuffer(op, 0, 0);
    s.hostCopies[op.getInput()] = host;
    // A gradient spilled for a host step (zero-offload, optimizer=cpu) is
    // counted apart from activations.
    bool gradient = static_cast<bool>(spilledGradient(op));
    Value ticket = s.rt.call(
        gradient ? "spill_gradient_start" : "copy_to_host_start",
        {s.get(op.getInput()), host,
         s.rt.i64(tensorBytes(op.getInput().getType()))});
    s.pending[op.getToken()] = StepLowering::Pending{ticket, {}, {}, {}};
    return success();
  }
};

/// The host copy comes back into the buffer the wait's result gets.
struct ReloadActivationStartPattern
    : OpRuntimePattern<ReloadActivationStartOp> {
  LogicalResult lower(ReloadActivationStartOp op,
                      StepLowering &s) const override {
    Value host = s.hostCopies.lookup(op.getInput());
    if (!host)
      return op.emitOpError() << "reloads an activation that was not "
                                 "offloaded before it";
    Value result = waitOf(op.getToken()).getResult(0);
    Value dst = s.alloc(result);
    s.bind(result, dst);
    Value ticket = s.rt.call(
        "copy_from_host_start",
        {host, dst, s.rt.i64(tensorBytes(op.getInput().getType()))});
    s.pending[op.getToken()] = StepLowering::Pending{ticket, {}, {}, {}};
    return success();
  }
};

struct WaitPattern : OpRuntimePattern<WaitOp> {
  LogicalResult lower(WaitOp op, StepLowering &s) const override {
    StepLowering::Pending p = s.pending.lookup(op.getToken());
    if (isa<SwapInStartOp, SwapOutStartOp>(op.getStart())) {
      s.rt.call("swap_wait", {p.handle});
      return success();
    }
    if (isa<OffloadActivationStartOp, ReloadActivationStartOp>(
            op.getStart())) {
      s.rt.call("copy_wait", {p.handle});
      // A spilled gradient: its host copy is the value the update reads.
      if (auto off = dyn_cast<OffloadActivationStartOp>(op.getStart());
          off && op.getNumResults() == 1)
        s.bind(op.getResult(0), s.hostCopies.lookup(off.getInput()));
      return success();
    }
    s.rt.call("wait", {p.handle});
    Operation *start = op.getStart();
    if (!p.in)
      return success();
    // Unpack the bucket into each result's buffer: in place into the
    // operand (all-reduce) when the result aliases it.
    Value packed = isa<ReduceScatterStartOp>(start) ? p.out : p.in;
    for (auto [i, r] : llvm::enumerate(op.getResults())) {
      Value dst = s.buffers().isAlias(r) ? s.get(start->getOperand(i))
                                         : s.alloc(r);
      s.bind(r, dst);
      int64_t bytes = elementBytes(r.getType());
      s.rt.call("copy", {s.rt.offset(packed, p.offsets[i] * bytes), dst,
                         s.rt.i64(tensorBytes(r.getType()))});
    }
    if (!s.planned()) {
      s.rt.call("free", {p.in});
      if (p.out)
        s.rt.call("free", {p.out});
    }
    return success();
  }
};

/// Row blocks of R / (N T) features move between the tile's rank order and
/// the parameter's order.
template <typename OpTy>
struct TilePattern : OpRuntimePattern<OpTy> {
  LogicalResult lower(OpTy o, StepLowering &s) const override {
    constexpr bool assemble = std::is_same_v<OpTy, AssembleTilesOp>;
    Value whole = assemble ? o->getResult(0) : o->getOperand(0);
    auto [rows, features] = train::rowsCols(whole);
    int64_t bytes = elementBytes(whole.getType());
    int64_t tiles, first;
    if constexpr (assemble) {
      tiles = o.getInputs().size();
      first = 0;
    } else {
      tiles = o.getTiles();
      first = o.getTile();
    }
    int64_t n = s.gridSize;
    int64_t block = features / (n * tiles);
    int64_t tileWidth = features / tiles;
    Value wholePtr =
        assemble ? s.alloc(o->getResult(0)) : s.get(o->getOperand(0));
    Value tilePtr = assemble ? Value() : s.alloc(o->getResult(0));
    int64_t count = assemble ? tiles : 1;
    for (int64_t k = 0; k < count; ++k) {
      int64_t j = first + k;
      Value t = assemble ? s.get(o->getOperand(k)) : tilePtr;
      for (int64_t r = 0; r < n; ++r) {
        Value inTile = s.rt.offset(t, r * block * bytes);
        Value inWhole = s.rt.offset(
            wholePtr, (r * (features / n) + j * block) * bytes);
        Value src = assemble ? inTile : inWhole;
        Value dst = assemble ? inWhole : inTile;
        s.rt.call("copy_2d",
                  {src, dst, s.rt.i64(rows), s.rt.i64(block * bytes),
                   s.rt.i64((assemble ? tileWidth : features) * bytes),
                   s.rt.i64((assemble ? features : tileWidth) * bytes)});
      }
    }
    return success();
  }
};

/// The gathered copy's last use: freed by the lowering's epilogue.
struct ReleasePattern : OpRuntimePattern<ReleaseOp> {
  LogicalResult lower(ReleaseOp, StepLowering &) const override {
    return success();
  }
};

} // namespace

void ztrain::populateDistToRuntimePatterns(RuntimePatternList &patterns) {
  patterns.push_back(std::make_unique<AllReducePattern>());
  patterns.push_back(std::make_unique<PadFlatPattern>());
  patterns.push_back(std::make_unique<SliceShardPattern>());
  patterns.push_back(std::make_unique<ReduceScatterPattern>());
  patterns.push_back(std::make_unique<AllGatherPattern>());
  patterns.push_back(std::make_unique<GatherParamPattern>());
  patterns.push_back(std::make_unique<AllGatherParamPattern>());
  patterns.push_back(std::make_unique<GatherParamStartPattern>());
  patterns.push_back(std::make_unique<AllGatherParamStartPattern>());
  patterns.push_back(std::make_unique<ReduceScatterStartPattern>());
  patterns.push_back(std::make_unique<AllReduceStartPattern>());
  patterns.push_back(std::make_unique<SwapInStartPattern>());
  patterns.push_back(std::make_unique<SwapOutStartPattern>());
  patterns.push_back(std::make_unique<SwapReleasePattern>());
  patterns.push_back(std::make_unique<UpdateWaitPattern>());
  patterns.push_back(std::make_unique<OffloadActivationStartPattern>());
  patterns.push_back(std::make_unique<ReloadActivationStartPattern>());
  patterns.push_back(std::make_unique<WaitPattern>());
  patterns.push_back(std::make_unique<TilePattern<AssembleTilesOp>>());
  patterns.push_back(std::make_unique<TilePattern<ExtractTileOp>>());
  patterns.push_back(std::make_unique<ReleasePattern>());
}
