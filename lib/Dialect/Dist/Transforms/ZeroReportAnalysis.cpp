//===- ZeroReportAnalysis.cpp - zero-report: the step's costs -------------===//
//
// Part of the ztrain project.
//
// zero-report's analysis: per-rank bytes by category and memory space,
// transfers, FLOPs and collectives of a (partitioned) training step, from
// the IR alone: it allocates nothing, so it works on models far larger than
// the machine. plan-search reads the same numbers (summarizeStep).
//
//===----------------------------------------------------------------------===//

#include "ZeroReport.h"

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/IR/StepBuffers.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#define DEBUG_TYPE "zero-report"

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;
using namespace ztrain::dist::report;

/// Peak bytes of live temporaries over the straight-line entry function,
/// by the buffer analysis the lowering allocates with: parameter reads
/// and aliases use existing storage, and values in persistent gradient
/// buffers are counted as gradients.
static int64_t activationPeak(func::FuncOp entry, int64_t stage,
                              int64_t gridSize, int64_t &gatheredPeak) {
  Block &body = entry.getBody().front();
  StepBuffers buffers(entry, stage);
  size_t size = body.getOperations().size() + 1;
  std::vector<int64_t> delta(size, 0), gathered(size, 0);
  for (const StepBuffers::Buffer &buf : buffers.list(gridSize)) {
    if (buf.kind == StepBuffers::Buffer::Swap || // host memory, not the
        buf.kind == StepBuffers::Buffer::StateSwap ||
        buf.kind == StepBuffers::Buffer::HostActivation || // device's
        buf.kind == StepBuffers::Buffer::HostGradient)
      continue;
    delta[buf.from] += buf.bytes;
    delta[buf.to + 1] -= buf.bytes;
    if (buf.kind == StepBuffers::Buffer::Gathered) {
      gathered[buf.from] += buf.bytes;
      gathered[buf.to + 1] -= buf.bytes;
    }
  }
  int64_t live = 0, peak = 0, liveGathered = 0;
  gatheredPeak = 0;
  for (size_t i = 0; i < size; ++i) {
    live += delta[i];
    peak = std::max(peak, live);
    liveGathered += gathered[i];
    gatheredPeak = std::max(gatheredPeak, liveGathered);
  }
  return peak;
}

/// Records `t` in `names` ("bf16", or "bf16+f32" when tensors differ).
static void noteType(std::string &names, Type t) {
  std::string name;
  llvm::raw_string_ostream(name) << t;
  for (StringRef seen : llvm::split(StringRef(names), '+'))
    if (seen == name)
      return;
  names += (names.empty() ? "" : "+") + name;
}

/// Splits `c`'s bytes (`times` executions of a collective over `axis` of
/// `payload` elements of `eb` bytes: n for an all-reduce, count for a
/// reduce-scatter or all-gather) by link class, as the CPU runtime moves
/// them: every phase sends each other rank of the group one block
/// (CpuCollectives.cpp: an all-reduce is a reduce-scatter of ceil(n / G)
/// and an all-gather of it).
static void splitLinks(Collective &c, const MeshLayout &mesh, int axis,
                       int64_t times, int64_t payload, int64_t eb) {
  const int64_t g = mesh.groupSize(axis), local = mesh.sameNodeMembers(axis);
  if (c.grid.empty() && mesh.shardGrid)
    c.grid = axis == 2            ? mesh.replicateGrid.getValue().str()
             : axis == 1          ? mesh.groupGrid.getValue().str()
             : mesh.replicateGrid ? "dp"
                                  : mesh.shardGrid.getValue().str();
  if (g <= 1 || c.kind == "broadcast")
    return;
  int64_t block = payload * eb, phases = 1;
  if (c.kind == "all_reduce") {
    block = (payload + g - 1) / g * eb;
    phases = 2;
  }
  c.intraNodeBytes = times * phases * (local - 1) * block;
  c.interNodeBytes = times * phases * (g - local) * block;
}

/// The parameters' bytes by where they live, their gradients' and, from
/// the ZeRO stage, the collectives the plan implies for each (the
/// collectives in the IR replace these once inserted). Returns the largest
/// gradient's padded bytes (stage 2's communication buffer).
static int64_t priceParameters(Report &r, ModuleOp module, func::FuncOp entry) {
  const int64_t n = r.worldSize;
  auto shardOf = [&](int64_t elements) { return (elements + n - 1) / n; };
  // Gradients are held in the type the update consumes them in: the
  // parameter's, or f32 with mixed precision reducing in f32.
  llvm::DenseMap<StringAttr, Type> gradTypes =
      train::gradientElementTypes(entry);
  int64_t largestParam = 0;
  // Stage 3 gathers a parameter before its first forward use and again
  // before its first backward use, if it has one (zero-insert-collectives,
  // which also counts backward uses through a forward reshape). A backward
  // use exists only where a gradient needs the parameter's value: the input
  // gradient of its matmul, not the first layer's (its input is data) nor a
  // frozen embedding's.
  Block &body = entry.getBody().front();
  Operation *lossOp = body.getTerminator()->getOperand(0).getDefiningOp();
  auto isBackward = [&](OpOperand &use) {
    return lossOp && lossOp->isBeforeInBlock(use.getOwner()) &&
           !use.getOwner()->hasTrait<OpTrait::IsTerminator>();
  };
  llvm::StringMap<std::pair<bool, bool>> usedForwardBackward;
  for (auto read : body.getOps<train::ParamReadOp>())
    for (OpOperand &use : read.getResult().getUses()) {
      auto &[fwd, bwd] = usedForwardBackward[read.getParam()];
      if (isBackward(use)) {
        bwd = true;
        continue;
      }
      fwd = true;
      if (auto reshape = dyn_cast<train::ReshapeOp>(use.getOwner()))
        bwd |= llvm::any_of(reshape.getResult().getUses(), isBackward);
    }
  for (auto param : module.getOps<train::ParamOp>()) {
    int64_t elements = param.getTensorType().getNumElements();
    int64_t eb = elementBytes(param.getType());
    bool frozen = param.getFrozen();
    Type gradType = gradTypes.lookup(param.getSymNameAttr());
    int64_t gb = gradType ? elementBytes(gradType) : eb;
    noteType(r.paramType, param.getTensorType().getElementType());
    if (!frozen)
      noteType(r.gradType,
               gradType ? gradType : param.getTensorType().getElementType());
    int64_t full = elements * eb, shard = shardOf(elements) * eb;
    int64_t gradFull = elements * gb, gradShard = shardOf(elements) * gb;
    ++r.paramCount;
    r.paramElements += elements;
    r.paramBytes += full;
    if (frozen) {
      ++r.frozenCount;
      r.frozenElements += elements;
    }
    int64_t stored =
        getStateStorage(param, param.getTensorType(), r.stage, n).elements * eb;
    auto space = param->getAttrOfType<MemorySpaceAttr>(kSpaceAttr);
    if (space && space.getValue() == MemorySpace::nvme)
      r.nvmeParams += swapBytes(stored);
    else if (space && space.getValue() == MemorySpace::host)
      r.hostParams += stored;
    else
      r.parameters += stored;
    r.gradients += getGradientElements(param, r.stage, n) * gb;
    if (!frozen)
      largestParam = std::max(largestParam, shardOf(elements) * n * gb);
    if (n == 1)
      continue;
    std::string name = param.getSymName().str();
    int64_t oneWay = shard * (n - 1);
    auto [fwd, bwd] = usedForwardBackward.lookup(param.getSymName());
    const MeshLayout &mesh = r.mesh;
    const int partition = mesh.axisOf(mesh.shardGrid);
    // Stage 3's gathers: the forward's over the partition's ranks, the
    // backward's too, or with hpZ inside its group from the shards kept
    // after the forward (zero-insert-collectives).
    auto stage3Gathers = [&]() {
      int64_t forward = int64_t(fwd) * r.accumSteps;
      int64_t backward = int64_t(bwd) * r.accumSteps;
      if (mesh.secondary && fwd) {
        int64_t h = mesh.shard, block = (elements + h - 1) / h;
        if (backward) {
          r.collectives.push_back(
              {"all_gather", name, backward, backward * block * (h - 1) * eb});
          splitLinks(r.collectives.back(), mesh, 1, backward, block, eb);
        }
        backward = 0;
      }
      if (forward + backward) {
        r.collectives.push_back({"all_gather", name, forward + backward,
                                 (forward + backward) * oneWay});
        splitLinks(r.collectives.back(), mesh, partition, forward + backward,
                   shardOf(elements), eb);
      }
    };
    if (frozen) {
      // No gradient to reduce, no update to share: only stage 3's gathers.
      if (r.stage == 3)
        stage3Gathers();
      continue;
    }
    // The collectives the stage implies for this parameter: the ZeRO
    // paper's per-rank volumes. Stage 0 all-reduces the gradient as it is;
    // the partitioned stages move the padded flat buffer (N equal shards).
    // With gradient accumulation, what runs per micro-batch runs K times
    // per optimizer step: stage 2 and 3's reduce-scatters, stage 3's
    // gathers (forward, and backward where the step has a backward use:
    // the paper's 3 Psi counts two gathers for every parameter).
    // Hybrid sharding averages each gradient shard over the replicas once
    // per optimizer step (zero-insert-collectives).
    if (r.stage == 0) {
      r.collectives.push_back(
          {"all_reduce", name, 1, 2 * gradFull * (n - 1) / n});
      splitLinks(r.collectives.back(), mesh, partition, 1, elements, gb);
    } else {
      int64_t reductions = r.stage >= 2 ? r.accumSteps : 1;
      r.collectives.push_back({"reduce_scatter", name, reductions,
                               reductions * gradShard * (n - 1)});
      splitLinks(r.collectives.back(), mesh, partition, reductions,
                 shardOf(elements), gb);
      if (int64_t reps = mesh.replicate; mesh.replicateGrid && reps > 1) {
        r.collectives.push_back(
            {"all_reduce", name, 1, 2 * gradShard * (reps - 1) / reps});
        splitLinks(r.collectives.back(), mesh, 2, 1, shardOf(elements), gb);
      }
      if (r.stage == 3) {
        stage3Gathers();
      } else {
        r.collectives.push_back({"all_gather", name, 1, oneWay});
        splitLinks(r.collectives.back(), mesh, partition, 1, shardOf(elements),
                   eb);
      }
    }
  }
  return largestParam;
}

/// The optimizer states' bytes by where they live.
static void priceStates(Report &r, ModuleOp module) {
  const int64_t n = r.worldSize;
  for (auto state : module.getOps<train::StateOp>()) {
    r.hasStates = true;
    auto type = cast<RankedTensorType>(state.getType());
    noteType(r.stateType, type.getElementType());
    int64_t bytes =
        getStateStorage(state, type, r.stage, n).elements * elementBytes(type);
    auto space = state->getAttrOfType<MemorySpaceAttr>(kSpaceAttr);
    if (space && space.getValue() == MemorySpace::host)
      r.hostStates += bytes;
    else if (space && space.getValue() == MemorySpace::nvme)
      r.nvmeStates += swapBytes(bytes);
    else
      r.optimizerStates += bytes;
  }
}

/// The step's inputs and its activations: plan-memory's arenas when it
/// ran, else the liveness sweep.
static void priceActivations(Report &r, ModuleOp module, func::FuncOp entry) {
  const int64_t n = r.worldSize;
  for (Type t : entry.getArgumentTypes())
    if (isa<RankedTensorType>(t))
      r.inputs += tensorBytes(t);
  if (auto arenas = module->getAttrOfType<DictionaryAttr>(kArenasAttr)) {
    // plan-memory decided it: the arenas are what the step allocates.
    auto arena = [&](StringRef name) {
      auto bytes = arenas.getAs<IntegerAttr>(name);
      return bytes ? bytes.getInt() : 0;
    };
    r.staticPlan = true;
    r.activations = arena("activations");
    r.gatheredPeak = arena("gathered_parameters");
    r.swapBuffers = arena("swap_buffers");
    r.stateSwapBuffers = arena("state_swap_buffers");
    r.hostActivations = arena("host_activations");
    r.hostGradients = arena("host_gradients");
  } else if (entry.getBody().hasOneBlock()) {
    r.activations = activationPeak(entry, r.stage, n, r.gatheredPeak);
  }
}

/// How many times `op` runs per optimizer step: what runs before the
/// accumulation boundary runs once per micro-batch.
static int64_t timesPerStep(const Report &r,
                            train::AccumulationBoundaryOp boundary,
                            Operation *op) {
  return boundary && op->getBlock() == boundary->getBlock() &&
                 op->isBeforeInBlock(boundary)
             ? r.accumSteps
             : 1;
}

/// The FLOPs of the matrix products and the bytes of the other kernels,
/// the model's and those train-recompute repeats.
static void countArithmetic(Report &r, ModuleOp module, func::FuncOp entry,
                            train::AccumulationBoundaryOp boundary) {
  auto runsPerStep = [&](Operation *op) {
    return timesPerStep(r, boundary, op);
  };
  if (auto policy = module->getAttrOfType<StringAttr>(train::kRecomputeAttr))
    r.recompute = policy.getValue().str();
  entry.walk([&](Operation *op) {
    int64_t times = runsPerStep(op);
    bool again = op->hasAttr(train::kRecomputedAttr);
    // A fused region's members are counted, not the region.
    r.recomputedOps += again && !isa<train::FusedOp>(op) ? times : 0;
    if (train::OpFlops flops = train::opFlops(op)) {
      // A recomputed op's products are all recompute; an op's own
      // repeated products (attention's backward) are too.
      (again ? r.recomputeFlops : r.modelFlops) += times * flops.model;
      r.recomputeFlops += times * flops.recomputed;
      return;
    }
    // The other kernels (elementwise, norms, softmax, ...) are bound by
    // memory: the bytes they read and write. A fused region is one kernel
    // (its inputs and results); its members move no bytes of their own.
    if (isa<train::FusedOp>(op->getParentOp()) ||
        !isa<train::RuntimeKernelOpInterface, train::FusedOp>(op))
      return;
    int64_t bytes = 0;
    for (Value v : llvm::concat<Value>(op->getOperands(), op->getResults()))
      if (isa<RankedTensorType>(v.getType()))
        bytes += tensorBytes(v.getType());
    (again ? r.recomputeKernelBytes : r.kernelBytes) += times * bytes;
  });
}

/// The copies between memory spaces: activations and gradients to host
/// memory, nvme swaps.
static void priceTransfers(Report &r, ModuleOp module, func::FuncOp entry,
                           train::AccumulationBoundaryOp boundary,
                           SymbolTableCollection &symbols) {
  const int64_t n = r.worldSize;
  auto runsPerStep = [&](Operation *op) {
    return timesPerStep(r, boundary, op);
  };
  // Every transfer as often as its op runs in a step: before the
  // accumulation boundary once per micro-batch (the swaps of nvme
  // parameters that the passes read, the offloaded activations down and
  // back), after it once (the swaps of nvme states and of the parameters
  // the updates write, gradients spilled for a host step).
  entry.walk([&](OffloadActivationStartOp op) {
    bool gradient = static_cast<bool>(spilledGradient(op));
    (gradient ? r.gradientsToHost : r.activationsToHost) +=
        runsPerStep(op) * tensorBytes(op.getInput().getType());
  });
  entry.walk([&](Operation *op) {
    if (!isa<SwapInStartOp, SwapOutStartOp>(op))
      return;
    auto name = op->getAttrOfType<FlatSymbolRefAttr>("state");
    int64_t bytes =
        runsPerStep(op) * swapBufferBytes(symbols, op, name, r.stage, n);
    (isa<SwapInStartOp>(op) ? r.nvmeToHost : r.hostToNvme) += bytes;
    if (!symbols.lookupNearestSymbolFrom<train::StateOp>(module, name))
      (isa<SwapInStartOp>(op) ? r.paramsNvmeToHost : r.paramsHostToNvme) +=
          bytes;
  });
}

/// Host-placed parameters' traffic over the host link and the host steps
/// (ZeRO-Offload's CPU step), on a device backend.
static void priceHostTraffic(Report &r, ModuleOp module, func::FuncOp entry,
                             train::AccumulationBoundaryOp boundary,
                             SymbolTableCollection &symbols) {
  const int64_t n = r.worldSize;
  auto runsPerStep = [&](Operation *op) {
    return timesPerStep(r, boundary, op);
  };
  // Host-placed parameters (param=cpu) on a device backend: a gather reads
  // the shard (its tile's part) over the host link, once per run of the
  // gather; the update reads and writes it in place (the master-weight
  // form only writes it: the new master rounded).
  // An update with host- or nvme-placed states runs on the host on a
  // device backend (ZeRO-Offload's CPU step; ZeRO-Infinity's for nvme):
  // dist::getHostStep, as the runtime decides it.
  auto hostParam = [&](FlatSymbolRefAttr name) -> train::ParamOp {
    auto param = symbols.lookupNearestSymbolFrom<train::ParamOp>(module, name);
    auto space =
        param ? param->getAttrOfType<MemorySpaceAttr>(kSpaceAttr) : nullptr;
    return space && space.getValue() == MemorySpace::host ? param
                                                          : train::ParamOp();
  };
  entry.walk([&](Operation *op) {
    int64_t times = runsPerStep(op);
    if (isa<GatherParamOp, GatherParamStartOp>(op)) {
      train::ParamOp param =
          hostParam(op->getAttrOfType<FlatSymbolRefAttr>("param"));
      if (!param)
        return;
      int64_t count =
          getStateStorage(param, param.getTensorType(), r.stage, n).elements;
      if (auto tiles = op->getAttrOfType<IntegerAttr>("tiles"))
        count /= tiles.getInt();
      r.hostParamsToDevice += times * count * elementBytes(param.getType());
      return;
    }
    auto update = dyn_cast<train::OptimizerUpdateOpInterface>(op);
    if (!update)
      return;
    train::ParamOp param = hostParam(update.getUpdatedParam());
    int64_t elements =
        cast<ShapedType>(update.getGradient().getType()).getNumElements();
    // One chunk of a split update (sub-group-size) touches its chunk.
    if (auto c = op->getAttrOfType<DenseI64ArrayAttr>(kChunkAttr))
      elements = chunkSize(elements, c[0], c[1]);
    FlatSymbolRefAttr master;
    if (auto sgd = dyn_cast<train::SGDUpdateOp>(op))
      master = sgd.getMasterAttr();
    else if (auto adam = dyn_cast<train::AdamUpdateOp>(op))
      master = adam.getMasterAttr();
    if (std::optional<HostStep> step = getHostStep(symbols, op)) {
      // The host step: the gradient goes down (unless spilled: already in
      // host memory); a parameter in device memory comes back (and goes
      // down first unless only written); a host-placed one is updated
      // where it is.
      r.hostStepToHost +=
          times * (step->gradBytes + (step->master ? 0 : step->paramBytes));
      r.hostStepToDevice += times * step->paramBytes;
      r.hostStepBuffers = std::max(r.hostStepBuffers, step->bufferBytes());
      r.hostSteps += times;
      if (op->hasAttr(kAsyncUpdateAttr))
        r.asyncHostSteps += times;
      train::ParamOp p = symbols.lookupNearestSymbolFrom<train::ParamOp>(
          module, update.getUpdatedParam());
      // (It reads the gradient in host memory, spilled or staged.)
      int64_t touched = elements * elementBytes(update.getGradient().getType());
      if (p)
        touched += (master ? 1 : 2) * elements * elementBytes(p.getType());
      for (FlatSymbolRefAttr name : update.getUpdatedStates())
        if (auto state = name ? symbols.lookupNearestSymbolFrom<train::StateOp>(
                                    module, name)
                              : train::StateOp())
          touched += 2 * elements * elementBytes(state.getType());
      r.hostStepBytes += times * touched;
      return;
    }
    if (!param)
      return;
    int64_t bytes = times * elements * elementBytes(param.getType());
    if (!master)
      r.hostParamsToDevice += bytes;
    r.hostParamsToHost += bytes;
  });
}

/// Once collectives are in the IR they are the truth, not the plan.
static LogicalResult collectivesFromIR(Report &r, ModuleOp module,
                                       func::FuncOp entry,
                                       train::AccumulationBoundaryOp boundary,
                                       SymbolTableCollection &symbols) {
  SmallVector<CollectiveOpInterface> ops;
  entry.walk([&](CollectiveOpInterface c) { ops.push_back(c); });
  if (!ops.empty()) {
    // The buffers of the inserted collectives are values of the step: the
    // activation sweep already counts them.
    r.collectivesFromIR = true;
    r.communicationBuffers = 0;
    if (auto arenas = module->getAttrOfType<DictionaryAttr>(kArenasAttr)) {
      for (StringRef name : {"gathered_parameters", "other"})
        if (auto bytes = arenas.getAs<IntegerAttr>(name))
          r.communicationBuffers += bytes.getInt();
    }
    r.collectives.clear();
    for (CollectiveOpInterface c : ops) {
      FailureOr<int64_t> size = getGridSize(c, c.getGridRef(), symbols);
      if (failed(size))
        return failure();
      // Parameter gathers are all-gathers into a buffer or in place.
      std::string kind = c->getName().stripDialect().str(), tensor;
      if (StringRef(kind).ends_with("_start"))
        kind.resize(kind.size() - strlen("_start"));
      Operation *op = c.getOperation();
      if (isa<GatherParamOp, GatherParamStartOp, AllGatherParamOp,
              AllGatherParamStartOp>(op)) {
        kind = "all_gather";
        tensor = op->getAttrOfType<FlatSymbolRefAttr>("param").getValue().str();
      } else if (op->getNumOperands() > 1) {
        tensor = llvm::formatv("bucket of {0}", op->getNumOperands()).str();
      }
      // Before the accumulation boundary: once per micro-batch.
      int64_t times =
          boundary && c->isBeforeInBlock(boundary) ? r.accumSteps : 1;
      const int64_t once = c.getCommunicatedBytes(*size, symbols);
      r.collectives.push_back({kind, tensor, times, times * once});
      r.collectives.back().grid = c.getGridRef().getValue().str();
      // The payload the runtime's blocks are cut from: an all-reduce's
      // elements (a bucket's together), else one block per other rank.
      int64_t payload = 0, eb = 1;
      if (kind == "all_reduce") {
        for (Value v : op->getOperands()) {
          auto t = cast<RankedTensorType>(v.getType());
          payload += t.getNumElements();
          eb = elementBytes(t);
        }
      } else if (*size > 1) {
        payload = once / (*size - 1);
      }
      splitLinks(r.collectives.back(), r.mesh, r.mesh.axisOf(c.getGridRef()),
                 times, payload, eb);
    }
  }
  return success();
}

FailureOr<Report> report::analyzeStep(ModuleOp module) {
  Report r;
  SymbolTableCollection symbols;
  if (auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr)) {
    r.stage = zero.getStage();
    r.grid = zero.getGrid().getValue().str();
    FailureOr<int64_t> n = getGridSize(module, zero.getGrid(), symbols);
    if (failed(n))
      return failure();
    r.worldSize = *n;
    FailureOr<MeshLayout> mesh = getMeshLayout(module, symbols);
    if (failed(mesh))
      return failure();
    r.mesh = *mesh;
  }
  const int64_t n = r.worldSize;

  func::FuncOp entry = train::getEntryFunction(module);
  if (!entry)
    return failure();
  FailureOr<std::optional<train::LossScalePolicy>> scaling =
      train::getLossScalePolicy(module);
  if (failed(scaling))
    return failure();
  r.lossScale = *scaling;
  if (auto k = module->getAttrOfType<IntegerAttr>(train::kGradAccumAttr))
    r.accumSteps = std::max<int64_t>(1, k.getInt());
  train::AccumulationBoundaryOp boundary =
      train::getAccumulationBoundary(entry);
  int64_t largestParam = priceParameters(r, module, entry);
  priceStates(r, module);
  // Buffers (train.buffer): whole on every rank, whatever the stage.
  for (auto buffer : module.getOps<train::BufferOp>())
    r.buffers += tensorBytes(buffer.getType());
  if (n > 1 && r.stage >= 2)
    r.communicationBuffers = largestParam;
  priceActivations(r, module, entry);
  countArithmetic(r, module, entry, boundary);
  priceTransfers(r, module, entry, boundary, symbols);
  priceHostTraffic(r, module, entry, boundary, symbols);
  if (failed(collectivesFromIR(r, module, entry, boundary, symbols)))
    return failure();
  return r;
}

FailureOr<StepSummary> ztrain::dist::summarizeStep(ModuleOp module) {
  FailureOr<Report> r = analyzeStep(module);
  if (failed(r))
    return failure();
  StepSummary s;
  s.predictedPeak = r->predictedPeak();
  s.activations = r->activations;
  s.modelStates = r->modelStates();
  s.communicationBytes = r->communicationBytes();
  s.intraNodeBytes = r->intraNodeBytes();
  s.interNodeBytes = r->interNodeBytes();
  // The cost model's latency is per collective that sends something: a
  // one-rank gather (a host-placed parameter's copy) is a copy.
  for (const Collective &c : r->collectives)
    if (c.bytes > 0)
      s.collectives += c.count;
  s.modelFlops = r->modelFlops;
  s.recomputeFlops = r->recomputeFlops;
  s.kernelBytes = r->kernelBytes;
  s.recomputeKernelBytes = r->recomputeKernelBytes;
  s.hostBytes = r->swapBuffers + r->stateSwapBuffers + r->hostStates +
                r->hostActivations + r->hostParams + r->hostGradients;
  s.hostStepBuffers = r->hostStepBuffers;
  s.hostStepBytes = r->hostStepBytes;
  s.nvmeTransferBytes = r->nvmeToHost + r->hostToNvme;
  s.devicePeak = r->devicePeakOnDevice();
  s.hostLinkBytes = r->hostToDevice() + r->deviceToHost();
  return s;
}
