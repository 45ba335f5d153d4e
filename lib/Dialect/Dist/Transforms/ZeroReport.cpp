//===- ZeroReport.cpp - zero-report ---------------------------------------===//
//
// Part of the ztrain project.
//
// Prices a (partitioned) training step per rank: model-state bytes by
// category, activation peak, communication buffers and the collectives of a
// step. Pure analysis over the IR: it allocates nothing, so it works on
// models far larger than the machine.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/IR/StepBuffers.h"
#include "ztrain/Dialect/Dist/Transforms/Passes.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"

#include <optional>

#define DEBUG_TYPE "zero-report"

namespace ztrain::dist {
#define GEN_PASS_DEF_ZEROREPORT
#include "ztrain/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace ztrain::dist

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

namespace {

struct Collective {
  std::string kind;
  std::string tensor;
  int64_t count = 0;
  int64_t bytes = 0; // sent per rank per step, all executions together
};

struct Report {
  int64_t stage = 0;
  int64_t worldSize = 1;
  std::string grid;
  int64_t paramCount = 0, paramElements = 0, paramBytes = 0;
  /// Of those, the frozen ones (no gradient, no optimizer state).
  int64_t frozenCount = 0, frozenElements = 0;
  int64_t parameters = 0, gradients = 0, optimizerStates = 0;
  /// Optimizer states placed off the device by zero-offload (#dist.space):
  /// in host memory, and in nvme files (whole 4096-byte blocks); the host
  /// buffers nvme parameter shards pass through (the swap_buffers arena)
  /// and those nvme states pass through (state_swap_buffers); the bytes
  /// read from and written to nvme per optimizer step, and of those the
  /// parameters' (which a device backend copies to and from the device).
  int64_t hostStates = 0, nvmeStates = 0, swapBuffers = 0, nvmeParams = 0;
  int64_t stateSwapBuffers = 0;
  /// Parameter shards placed in host memory (param=cpu).
  int64_t hostParams = 0;
  int64_t nvmeToHost = 0, hostToNvme = 0;
  int64_t paramsNvmeToHost = 0, paramsHostToNvme = 0;
  /// Activations offloaded to host memory (Pa+cpu): the host_activations
  /// arena, and the bytes copied to host memory (and back) per step.
  int64_t hostActivations = 0, activationsToHost = 0;
  /// Gradients spilled to host memory for a host step (optimizer=cpu): the
  /// host_gradients arena, and the bytes copied down per step.
  int64_t hostGradients = 0, gradientsToHost = 0;
  /// Host-placed parameters' bytes over the host link per step (device
  /// backends): read (gathers, updates) and written (updates).
  int64_t hostParamsToDevice = 0, hostParamsToHost = 0;
  /// ZeRO-Offload's CPU step (device backends): an update whose states are
  /// host-placed runs on the host, its gradient sent down and its parameter
  /// (unless host-placed) down (unless a master-weight update, which only
  /// writes it) and back up, staged through one pinned buffer sized for the
  /// largest such update.
  int64_t hostStepToDevice = 0, hostStepToHost = 0, hostStepBuffers = 0;
  /// Host steps per step, and how many of them run on the runtime's host
  /// step thread (dist.async_update).
  int64_t hostSteps = 0, asyncHostSteps = 0;
  /// The bytes those host steps read and write in host memory: gradient,
  /// parameter, every state read and written.
  int64_t hostStepBytes = 0;
  /// On a device backend (cuda): the parameters' swap buffers have a
  /// device copy, each of their swaps moves its bytes between that copy and
  /// its pinned staging copy (the states' are stepped on the host: no
  /// device copy).
  int64_t devicePeakOnDevice() const { return predictedPeak() + swapBuffers; }
  /// (Plus the offloaded activations, which cross it every micro-batch.)
  /// And host-placed parameters' shards: read by their gathers and by a
  /// device update, written by a device update. And the host steps'
  /// gradients and parameters.
  int64_t hostToDevice() const {
    return paramsNvmeToHost + activationsToHost + hostParamsToDevice +
           hostStepToDevice;
  }
  int64_t deviceToHost() const {
    return paramsHostToNvme + activationsToHost + hostParamsToHost +
           hostStepToHost +
           gradientsToHost;
  }
  int64_t buffers = 0, inputs = 0, activations = 0, communicationBuffers = 0;
  /// Of the activations: gathered parameters allocated at once.
  int64_t gatheredPeak = 0;
  bool hasStates = false;
  /// Element types: parameters, gradients (as the updates consume them),
  /// optimizer states; empty when there are none.
  std::string paramType, gradType, stateType;
  /// fp16's dynamic loss scaling (train.loss_scale), when the step has it.
  std::optional<train::LossScalePolicy> lossScale;
  /// Micro-batches per optimizer step (train.grad_accum_steps; 1 without
  /// accumulation): "per step" means per optimizer step.
  int64_t accumSteps = 1;
  /// Matrix-product FLOPs per optimizer step and rank: the model's (as MFU
  /// counts them) and those train-recompute repeats, with the policy and
  /// the number of ops it repeats.
  int64_t modelFlops = 0, recomputeFlops = 0, recomputedOps = 0;
  /// Bytes the other kernels read and write per optimizer step and rank
  /// (memory-bound work), the model's and the recomputed ones.
  int64_t kernelBytes = 0, recomputeKernelBytes = 0;
  std::string recompute = "none";
  bool collectivesFromIR = false;
  /// Memory from plan-memory's arenas (exact) rather than a liveness sweep.
  bool staticPlan = false;
  std::vector<Collective> collectives;

  /// Parameters, gradients and optimizer states: ZeRO's model states.
  int64_t modelStates() const {
    return parameters + gradients + optimizerStates;
  }
  double bytesPerParameter() const {
    return paramElements ? (double)modelStates() / (double)paramElements : 0.0;
  }
  int64_t predictedPeak() const {
    return parameters + gradients + optimizerStates + buffers + inputs +
           activations + communicationBuffers;
  }
  int64_t communicationBytes() const {
    int64_t total = 0;
    for (const Collective &c : collectives)
      total += c.bytes;
    return total;
  }
};

/// Peak bytes of live temporaries over the straight-line entry function,
/// by the buffer analysis the lowering allocates with: parameter reads
/// and aliases use existing storage, and values in persistent gradient
/// buffers are counted as gradients.
int64_t activationPeak(func::FuncOp entry, int64_t stage, int64_t gridSize,
                       int64_t &gatheredPeak) {
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

struct ZeroReportPass : public dist::impl::ZeroReportBase<ZeroReportPass> {
  using ZeroReportBase::ZeroReportBase;
  void runOnOperation() override;
  void printText(llvm::raw_ostream &os, const Report &r);
  void printJson(llvm::raw_ostream &os, const Report &r);
};

} // namespace

/// Records `t` in `names` ("bf16", or "bf16+f32" when tensors differ).
static void noteType(std::string &names, Type t) {
  std::string name;
  llvm::raw_string_ostream(name) << t;
  for (StringRef seen : llvm::split(StringRef(names), '+'))
    if (seen == name)
      return;
  names += (names.empty() ? "" : "+") + name;
}

static FailureOr<Report> analyzeStep(ModuleOp module) {
  Report r;
  SymbolTableCollection symbols;
  if (auto zero = module->getAttrOfType<ZeroAttr>(kZeroAttr)) {
    r.stage = zero.getStage();
    r.grid = zero.getGrid().getValue().str();
    FailureOr<int64_t> n = getGridSize(module, zero.getGrid(), symbols);
    if (failed(n))
      return failure();
    r.worldSize = *n;
  }
  const int64_t n = r.worldSize;
  auto shardOf = [&](int64_t elements) { return (elements + n - 1) / n; };

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
    int64_t stage3Gathers = (int64_t(fwd) + int64_t(bwd)) * r.accumSteps;
    if (frozen) {
      // No gradient to reduce, no update to share: only stage 3's gathers.
      if (r.stage == 3 && stage3Gathers)
        r.collectives.push_back(
            {"all_gather", name, stage3Gathers, stage3Gathers * oneWay});
      continue;
    }
    // The collectives the stage implies for this parameter: the ZeRO
    // paper's per-rank volumes. Stage 0 all-reduces the gradient as it is;
    // the partitioned stages move the padded flat buffer (N equal shards).
    // With gradient accumulation, what runs per micro-batch runs K times
    // per optimizer step: stage 2 and 3's reduce-scatters, stage 3's
    // gathers (forward, and backward where the step has a backward use:
    // the paper's 3 Psi counts two gathers for every parameter).
    if (r.stage == 0) {
      r.collectives.push_back(
          {"all_reduce", name, 1, 2 * gradFull * (n - 1) / n});
    } else {
      int64_t reductions = r.stage >= 2 ? r.accumSteps : 1;
      r.collectives.push_back({"reduce_scatter", name, reductions,
                               reductions * gradShard * (n - 1)});
      int64_t gathers = r.stage == 3 ? stage3Gathers : 1;
      if (gathers)
        r.collectives.push_back(
            {"all_gather", name, gathers, gathers * oneWay});
    }
  }
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
  // Buffers (train.buffer): whole on every rank, whatever the stage.
  for (auto buffer : module.getOps<train::BufferOp>())
    r.buffers += tensorBytes(buffer.getType());
  if (n > 1 && r.stage >= 2)
    r.communicationBuffers = largestParam;

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

  // What runs before the accumulation boundary runs once per micro-batch.
  auto runsPerStep = [&](Operation *op) -> int64_t {
    return boundary && op->getBlock() == boundary->getBlock() &&
                   op->isBeforeInBlock(boundary)
               ? r.accumSteps
               : 1;
  };

  // The arithmetic.
  if (auto policy = module->getAttrOfType<StringAttr>(train::kRecomputeAttr))
    r.recompute = policy.getValue().str();
  entry.walk([&](Operation *op) {
    int64_t times = runsPerStep(op);
    bool again = op->hasAttr(train::kRecomputedAttr);
    r.recomputedOps += again ? times : 0;
    if (train::OpFlops flops = train::opFlops(op)) {
      // A recomputed op's products are all recompute; an op's own
      // repeated products (attention's backward) are too.
      (again ? r.recomputeFlops : r.modelFlops) += times * flops.model;
      r.recomputeFlops += times * flops.recomputed;
      return;
    }
    // The other kernels (elementwise, norms, softmax, ...) are bound by
    // memory: the bytes they read and write.
    if (!isa<train::RuntimeKernelOpInterface>(op))
      return;
    int64_t bytes = 0;
    for (Value v : llvm::concat<Value>(op->getOperands(), op->getResults()))
      if (isa<RankedTensorType>(v.getType()))
        bytes += tensorBytes(v.getType());
    (again ? r.recomputeKernelBytes : r.kernelBytes) += times * bytes;
  });

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
      int64_t touched =
          elements * elementBytes(update.getGradient().getType());
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

  // Once collectives are in the IR they are the truth, not the plan.
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
        tensor = op->getAttrOfType<FlatSymbolRefAttr>("param")
                     .getValue()
                     .str();
      } else if (op->getNumOperands() > 1) {
        tensor = llvm::formatv("bucket of {0}", op->getNumOperands()).str();
      }
      // Before the accumulation boundary: once per micro-batch.
      int64_t times =
          boundary && c->isBeforeInBlock(boundary) ? r.accumSteps : 1;
      r.collectives.push_back(
          {kind, tensor, times, times * c.getCommunicatedBytes(*size, symbols)});
    }
  }
  return r;
}

static std::string mib(int64_t bytes) {
  return llvm::formatv("{0:F2}", bytes / (1024.0 * 1024.0)).str();
}

void ZeroReportPass::printText(llvm::raw_ostream &os, const Report &r) {
  os << "zero-report: stage " << r.stage << ", " << r.worldSize
     << (r.worldSize == 1 ? " rank" : " ranks")
     << (r.grid.empty() ? std::string(" (not partitioned)")
                        : " over @" + r.grid)
     << "\n";
  os << llvm::formatv("parameters: {0} tensors, {1} elements, {2} bytes "
                      "(Psi)",
                      r.paramCount, r.paramElements, r.paramBytes);
  if (r.frozenCount)
    os << llvm::formatv("; {0} of them frozen ({1} elements: no gradient, "
                        "no optimizer state)",
                        r.frozenCount, r.frozenElements);
  os << "\n";
  os << llvm::formatv("{0,-26}{1,16}{2,12}\n", "per rank", "bytes", "MiB");
  auto row = [&](StringRef what, int64_t bytes) {
    os << llvm::formatv("  {0,-24}{1,16}{2,12}\n", what, bytes, mib(bytes));
  };
  row("parameters", r.parameters);
  row("gradients", r.gradients);
  row(r.hasStates ? "optimizer states" : "optimizer states (none yet)",
      r.optimizerStates);
  if (r.buffers)
    row("buffers", r.buffers);
  row("inputs (micro-batch)", r.inputs);
  row(r.staticPlan ? "activations (arena)" : "activations (at least)",
      r.activations);
  if (r.gatheredPeak)
    row("  of which gathered", r.gatheredPeak);
  row("communication buffers", r.communicationBuffers);
  row("predicted peak", r.predictedPeak());
  if (r.hostStates || r.nvmeStates || r.swapBuffers || r.nvmeParams ||
      r.hostActivations || r.hostParams || r.hostGradients ||
      r.stateSwapBuffers) {
    os << "offloaded (zero-offload), per rank: not in the peak above\n";
    if (r.hostParams)
      row("host: parameters", r.hostParams);
    if (r.hostActivations)
      row("host: activations", r.hostActivations);
    if (r.hostGradients)
      row("host: gradients", r.hostGradients);
    if (r.hostStates)
      row("host: optimizer states", r.hostStates);
    if (r.swapBuffers)
      row("host: swap buffers", r.swapBuffers);
    if (r.stateSwapBuffers)
      row("host: state swap buffers", r.stateSwapBuffers);
    if (r.nvmeParams)
      row("nvme: parameters", r.nvmeParams);
    if (r.nvmeStates)
      row("nvme: optimizer states", r.nvmeStates);
    if (r.nvmeToHost || r.hostToNvme || r.activationsToHost ||
        r.gradientsToHost) {
      os << llvm::formatv("{0,-26}{1,16}{2,12}\n", "transfers per step",
                          "bytes/rank", "MiB");
      if (r.nvmeToHost || r.hostToNvme) {
        row("nvme -> host", r.nvmeToHost);
        row("host -> nvme", r.hostToNvme);
      }
      if (r.activationsToHost)
        row("activations <-> host", r.activationsToHost);
      if (r.gradientsToHost)
        row("gradients -> host", r.gradientsToHost);
    }
    // A device backend computes on device copies of the parameters' swap
    // buffers and runs the updates of host- and nvme-placed states on the
    // host (their gradients down, their parameters up, through the host
    // step buffer).
    os << "on a device backend (--backend cuda), per rank: the "
          "parameters' swap buffers on the device too\n";
    row("device peak", r.devicePeakOnDevice());
    if (r.hostStepBuffers)
      row("host: step buffers", r.hostStepBuffers);
    if (r.hostSteps)
      os << llvm::formatv("  host steps per step {0,17} ({1} asynchronous)\n",
                          r.hostSteps, r.asyncHostSteps);
    row("host -> device per step", r.hostToDevice());
    row("device -> host per step", r.deviceToHost());
  }
  // ZeRO's model states in its units (GB = 10^9 bytes) and Megatron's
  // bytes per parameter.
  os << llvm::formatv("model states: {0} bytes per rank = {1:F2} GB, "
                      "{2:F4} bytes per parameter\n",
                      r.modelStates(), r.modelStates() / 1e9,
                      r.bytesPerParameter());
  if (!r.paramType.empty())
    os << "element types: parameters " << r.paramType << ", gradients "
       << r.gradType << ", optimizer states "
       << (r.stateType.empty() ? "-" : r.stateType) << "\n";
  if (r.lossScale)
    os << "loss scaling: dynamic, initial scale "
       << llvm::format("%g", r.lossScale->init) << ", doubled after "
       << r.lossScale->window << " clean steps, halved after "
       << r.lossScale->hysteresis << " overflow(s), minimum "
       << llvm::format("%g", r.lossScale->min)
       << "; overflowed steps are skipped\n";
  if (r.accumSteps > 1)
    os << "gradient accumulation: " << r.accumSteps
       << " micro-batches per optimizer step (inputs and activations are "
          "per micro-batch; the collectives of each micro-batch are counted "
       << r.accumSteps << " times)\n";

  if (r.recompute != "none")
    os << llvm::formatv(
        "recompute: {0}, {1} ops repeated in the backward pass, {2} FLOPs "
        "per step per rank (+{3:F1}% over the model's {4})\n",
        r.recompute, r.recomputedOps, r.recomputeFlops,
        r.modelFlops ? 100.0 * r.recomputeFlops / r.modelFlops : 0.0,
        r.modelFlops);

  llvm::MapVector<StringRef, std::pair<int64_t, int64_t>> byKind;
  for (const Collective &c : r.collectives) {
    auto &slot = byKind[c.kind];
    slot.first += c.count;
    slot.second += c.bytes;
  }
  os << llvm::formatv("{0,-26}{1,16}{2,12}\n",
                      r.collectivesFromIR ? "collectives per step"
                                          : "collectives per step (planned)",
                      "bytes/rank", "count");
  for (auto &[kind, v] : byKind)
    os << llvm::formatv("  {0,-24}{1,16}{2,12}\n", kind, v.second, v.first);
  os << llvm::formatv("  {0,-24}{1,16}\n", "total", r.communicationBytes());
}

void ZeroReportPass::printJson(llvm::raw_ostream &os, const Report &r) {
  llvm::json::Array collectives;
  for (const Collective &c : r.collectives)
    collectives.push_back(llvm::json::Object{{"kind", c.kind},
                                             {"tensor", c.tensor},
                                             {"count", c.count},
                                             {"bytes", c.bytes}});
  llvm::json::Object root{
      {"stage", r.stage},
      {"world_size", r.worldSize},
      {"grid", r.grid},
      {"parameters", llvm::json::Object{{"tensors", r.paramCount},
                                        {"elements", r.paramElements},
                                        {"bytes", r.paramBytes},
                                        {"frozen_tensors", r.frozenCount},
                                        {"frozen_elements", r.frozenElements}}},
      {"per_rank",
       llvm::json::Object{{"parameters", r.parameters},
                          {"gradients", r.gradients},
                          {"optimizer_states", r.optimizerStates},
                          {"buffers", r.buffers},
                          {"inputs", r.inputs},
                          {"activations", r.activations},
                          {"communication_buffers", r.communicationBuffers},
                          {"gathered_parameters_peak", r.gatheredPeak},
                          {"predicted_peak", r.predictedPeak()}}},
      {"model_states",
       llvm::json::Object{{"bytes_per_rank", r.modelStates()},
                          {"bytes_per_parameter", r.bytesPerParameter()}}},
      {"element_types", llvm::json::Object{{"parameters", r.paramType},
                                           {"gradients", r.gradType},
                                           {"optimizer_states", r.stateType}}},
      {"loss_scale", r.lossScale ? llvm::json::Value(llvm::json::Object{
                                       {"init", r.lossScale->init},
                                       {"window", r.lossScale->window},
                                       {"hysteresis", r.lossScale->hysteresis},
                                       {"min", r.lossScale->min}})
                                 : llvm::json::Value(nullptr)},
      {"grad_accum_steps", r.accumSteps},
      {"flops_per_step", r.modelFlops},
      {"kernel_bytes_per_step", r.kernelBytes},
      {"recompute",
       llvm::json::Object{{"policy", r.recompute},
                          {"ops", r.recomputedOps},
                          {"flops_per_step", r.recomputeFlops},
                          {"kernel_bytes_per_step", r.recomputeKernelBytes}}},
      {"offload",
       llvm::json::Object{
           {"host",
            llvm::json::Object{{"optimizer_states", r.hostStates},
                               {"swap_buffers", r.swapBuffers},
                               {"state_swap_buffers", r.stateSwapBuffers},
                               {"activations", r.hostActivations},
                               {"gradients", r.hostGradients},
                               {"parameters", r.hostParams}}},
           {"nvme", llvm::json::Object{{"parameters", r.nvmeParams},
                                       {"optimizer_states", r.nvmeStates}}},
           {"transfers_per_step",
            llvm::json::Object{{"nvme_to_host", r.nvmeToHost},
                               {"host_to_nvme", r.hostToNvme},
                               {"activations_to_host", r.activationsToHost},
                               {"gradients_to_host", r.gradientsToHost}}},
           {"device_backend",
            llvm::json::Object{
                {"device_peak", r.devicePeakOnDevice()},
                {"host_step_buffers", r.hostStepBuffers},
                {"host_steps_per_step", r.hostSteps},
                {"asynchronous_host_steps_per_step", r.asyncHostSteps},
                {"host_to_device_per_step", r.hostToDevice()},
                {"device_to_host_per_step", r.deviceToHost()}}}}},
      {"collectives_source", r.collectivesFromIR ? "ir" : "plan"},
      {"memory_plan", r.staticPlan ? "static" : "liveness"},
      {"collectives", std::move(collectives)},
      {"communication_bytes_per_step", r.communicationBytes()}};
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

void ZeroReportPass::runOnOperation() {
  if (format != "text" && format != "json") {
    getOperation().emitError() << "zero-report: unknown format '" << format
                               << "' (expected text or json)";
    return signalPassFailure();
  }
  ModuleOp module = getOperation();
  // The executable always runs on plan-memory's arenas, which can exceed
  // the liveness peak (fragmentation, buffers that cannot share). A step
  // without a plan yet is priced as plan-memory will place it, on a copy;
  // only where that cannot be done (a multi-block step, a plan that fails)
  // does the liveness sweep stand in, and the report says it is a bound.
  OwningOpRef<ModuleOp> planned;
  if (!module->hasAttr(kArenasAttr)) {
    func::FuncOp entry = train::getEntryFunction(module);
    if (entry && entry.getBody().hasOneBlock()) {
      planned = cast<ModuleOp>(module->clone());
      ScopedDiagnosticHandler quiet(&getContext(),
                                    [](Diagnostic &) { return success(); });
      if (failed(dist::planMemory(*planned)))
        planned = nullptr;
    }
  }
  FailureOr<Report> report = analyzeStep(planned ? *planned : module);
  if (failed(report))
    return signalPassFailure();
  std::string err;
  auto out = openOutputFile(output, &err);
  if (!out) {
    getOperation().emitError() << "zero-report: " << err;
    return signalPassFailure();
  }
  if (format == "json")
    printJson(out->os(), *report);
  else
    printText(out->os(), *report);
  out->keep();
  markAllAnalysesPreserved();
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
