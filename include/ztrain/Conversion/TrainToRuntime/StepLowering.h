//===- StepLowering.h - Lowering a training step to runtime calls -*- C++ -*-===//
//
// Part of the ztrain project.
//
// lower-to-runtime, split by concern:
//   RuntimeCalls     the ABI: ztrt_* declarations from ztrt_abi.def, calls,
//                    constants, constant arrays (RuntimeCalls.cpp);
//   StepLowering     memory addressing: which pointer each tensor value
//                    lives at (persistent gradient buffers, plan-memory's
//                    arena slots or allocations freed after the last use),
//                    and the model state's storage (StepMemory.cpp);
//   RuntimePattern   the lowering of one op or op family, in files by
//                    family: train compute ops through their
//                    RuntimeKernelOpInterface, optimizer updates through
//                    OptimizerUpdateOpInterface (TrainPatterns.cpp), the
//                    dist ops' collectives, buckets and tiles
//                    (DistToRuntime/DistPatterns.cpp);
//   the descriptor   the model's parameters, states and inputs for the
//                    runtime's main (Descriptor.cpp);
//   the pass         walks the step in order and applies the patterns
//                    (LowerToRuntime.cpp).
//
// The step is one straight-line block whose buffers are decided by a
// positional analysis (dist::StepBuffers: aliases, last uses, plan slots)
// of the unmodified function, so the patterns run in op order over the
// original ops and record each value's pointer here, instead of going
// through the dialect conversion driver (docs/lowering.md says why).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_CONVERSION_TRAINTORUNTIME_STEPLOWERING_H
#define ZTRAIN_CONVERSION_TRAINTORUNTIME_STEPLOWERING_H

#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Dist/IR/StepBuffers.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <map>
#include <memory>
#include <vector>

namespace ztrain {

/// Builds the calls of ztrain_step: ztrt_* functions declared from the ABI
/// table on first use, one arith.constant per distinct value at the top of
/// the step, constant int64 arrays as shared globals.
class RuntimeCalls {
public:
  RuntimeCalls(mlir::ModuleOp module, mlir::OpBuilder &b, mlir::Value ctx);

  mlir::Value i64(int64_t v);
  mlir::Value i32(int32_t v);
  mlir::Value f64(double v);
  mlir::Value null();
  /// `base` advanced by `bytes`.
  mlir::Value offset(mlir::Value base, mlir::Value bytes);
  mlir::Value offset(mlir::Value base, int64_t bytes) {
    return offset(base, i64(bytes));
  }
  mlir::Value mul(mlir::Value a, mlir::Value b);
  /// This process's rank (one ztrt_rank call per step, at its top).
  mlir::Value rank();
  /// This process's rank in its shard group: rank() % shardGroup under
  /// hybrid sharding (shardGroup > 0), rank() otherwise.
  mlir::Value shardRank();
  /// This process's rank in its group of `g` consecutive ranks: rank() % g.
  mlir::Value groupRank(int64_t g);
  int64_t shardGroup = 0;
  /// Calls ztrt_<name>(ctx, args...) and returns its result (or null).
  /// `name` must be in ztrt_abi.def: the call verifier then checks the
  /// arguments against the declaration.
  mlir::Value call(llvm::StringRef name, llvm::ArrayRef<mlir::Value> args);
  /// Whether ztrt_<name> is in the ABI table.
  static bool exists(llvm::StringRef name);
  /// A pointer to a constant int64 array global; equal arrays share one.
  mlir::Value i64Array(llvm::ArrayRef<int64_t> values);

  mlir::OpBuilder &builder() { return b; }
  mlir::Location loc;
  unsigned calls = 0;

private:
  mlir::Value constant(mlir::TypedAttr value);
  mlir::LLVM::LLVMFuncOp declare(const std::string &name);

  mlir::ModuleOp module;
  mlir::OpBuilder &b;
  mlir::Value ctx;
  std::map<std::string, mlir::LLVM::GlobalOp> arrays;

public:
  /// The name prefix of the constant-array globals: distinct per lowered
  /// function of a module (the step's and the evaluation's).
  std::string arrayPrefix = "__ztrt_i64_";
  llvm::StringMap<mlir::LLVM::LLVMFuncOp> declared;
  llvm::DenseMap<mlir::Attribute, mlir::Value> constants;
  mlir::Value rankValue;
};

/// The generated kernels of train.fused regions (FusedKernels.cpp): one
/// per distinct region structure, shared by every function of the module.
class FusedKernels {
public:
  explicit FusedKernels(mlir::ModuleOp module);
  struct Kernel {
    /// The baseline kernel and its AVX-512 copy.
    mlir::LLVM::LLVMFuncOp fn, wide;
    /// Its name for the trace ("fused:bias_add+gelu"), NUL-terminated.
    mlir::LLVM::GlobalOp name;
  };
  /// The kernel of `op`'s region, generated on first use.
  mlir::FailureOr<Kernel> get(train::FusedOp op);
  unsigned size() const { return kernels.size(); }

private:
  mlir::FailureOr<mlir::LLVM::LLVMFuncOp> generate(train::FusedOp op,
                                                   const std::string &name,
                                                   unsigned lanes,
                                                   llvm::StringRef features);
  mlir::LLVM::LLVMFuncOp libm(llvm::StringRef name);

  mlir::ModuleOp module;
  std::map<std::string, Kernel> kernels;
  llvm::StringMap<mlir::LLVM::LLVMFuncOp> libmFunctions;
};

/// The items ztrt_fused runs a region's kernel over and the elements of
/// each: (elements, 1), or (rows, columns) when a member reads a bias.
std::pair<int64_t, int64_t> fusedItems(train::FusedOp op);

/// The lowering's state: where every tensor value of the step lives, and
/// the model state's storage under the plan.
class StepLowering {
public:
  StepLowering(mlir::ModuleOp module, mlir::func::FuncOp entry,
               RuntimeCalls &rt, int64_t stage, int64_t gridSize);

  RuntimeCalls &rt;
  const dist::StepBuffers &buffers() const { return stepBuffers; }
  /// gridSize: the ranks states are partitioned over (the #dist.zero grid:
  /// a shard group under hybrid sharding).
  int64_t stage, gridSize;
  dist::MeshLayout mesh;
  /// The runtime axis argument of a collective over `grid`.
  mlir::Value axis(mlir::FlatSymbolRefAttr grid) {
    return rt.i32(mesh.axisOf(grid));
  }

  // --- Values and their buffers ----------------------------------------------
  /// The pointer of a value lowered earlier.
  mlir::Value get(mlir::Value v) const { return pointers.lookup(v); }
  /// Records that `v` lives at `ptr` (a view, an alias, a runtime binding).
  void bind(mlir::Value v, mlir::Value ptr) { pointers[v] = ptr; }
  /// The buffer of result `v`: its parameter's persistent gradient buffer,
  /// its slot in plan-memory's arenas, or (unplanned) a fresh activation
  /// freed after its last use.
  mlir::Value alloc(mlir::Value v);
  /// Unplanned only: `bytes` in `category` for `v`, freed after the last
  /// use of `v`.
  mlir::Value allocOwned(mlir::Value v, int64_t bytes, int32_t category);
  bool planned() const { return isPlanned; }
  /// The planned buffer of result `i` of `op`, or of staging buffer `i` of
  /// a bucket's start op.
  mlir::Value slotOf(mlir::Operation *op, unsigned i);
  mlir::Value stagingOf(mlir::Operation *op, unsigned i);
  /// A bucket's packed buffer `index` (its planned staging slot, or an
  /// allocation the wait frees).
  mlir::Value stagingBuffer(mlir::Operation *start, unsigned index,
                            int64_t bytes);

  // --- Model state ---------------------------------------------------------
  train::ParamOp paramOp(llvm::StringRef name) {
    return symbols.lookup<train::ParamOp>(name);
  }
  /// The train.param or train.state named `name`.
  mlir::Operation *symbolOp(llvm::StringRef name) {
    return symbols.lookup(name);
  }
  dist::StateStorage storageOf(mlir::Operation *symbolOp, mlir::Type type) {
    return dist::getStateStorage(symbolOp,
                                 llvm::cast<mlir::RankedTensorType>(type),
                                 stage, gridSize);
  }
  /// ztrt_param / ztrt_state of a symbol (a null pointer for a null ref).
  mlir::Value param(llvm::StringRef name);
  /// ztrt_buffer of a train.buffer.
  mlir::Value buffer(llvm::StringRef name);
  mlir::Value state(mlir::FlatSymbolRefAttr name, int64_t chunk = -1);
  /// The swapBuffers key of a swapped tensor, or of one chunk of it.
  static std::string swapKey(llvm::StringRef name, int64_t chunk = -1) {
    return chunk < 0 ? name.str() : (name + "#" + llvm::Twine(chunk)).str();
  }
  /// The storage an update writes: the whole parameter, its shard when it
  /// rests partitioned, or this rank's slice of `slice` elements of its
  /// padded replicated storage.
  mlir::Value updatedParam(llvm::StringRef name, bool sharded, int64_t slice);
  /// The element type of train.param `name` (through the step's symbol
  /// table).
  mlir::Type paramElementType(llvm::StringRef name);

  // --- Asynchronous collectives ---------------------------------------------
  /// A collective in flight: the runtime's handle, and a bucket's packed
  /// buffers (in, and out for a reduce-scatter) with each tensor's offset
  /// in elements.
  struct Pending {
    mlir::Value handle, in, out;
    llvm::SmallVector<int64_t> offsets;
  };
  llvm::DenseMap<mlir::Value, Pending> pending;

  // --- Offload (zero-offload) -------------------------------------------------
  /// The index of a train.state in the descriptor (ztrt_state, ztrt_swap_*).
  llvm::StringMap<int64_t> stateIndex;
  /// The index of a train.param in the descriptor (ztrt_param, ztrt_swap_*).
  int64_t paramIndexOf(llvm::StringRef name) const {
    return paramIndex.lookup(name);
  }
  /// The swap buffer of each nvme tensor between its dist.swap_in_start
  /// and its dist.swap_out_start or dist.swap_release: what state() and
  /// param() return for it.
  llvm::StringMap<mlir::Value> swapBuffers;
  /// The parameter pointer each asynchronous update (dist.async_update)
  /// passed, by parameter, for its dist.update_wait.
  llvm::DenseMap<mlir::Attribute, mlir::Value> asyncUpdates;
  /// Offloaded activations: the host copy of each (its
  /// dist.offload_activation_start's slot in host_activations).
  llvm::DenseMap<mlir::Value, mlir::Value> hostCopies;

  /// After `op` is lowered: report the loss if `op` made it, free the
  /// buffers whose last use `op` was.
  void finishOp(mlir::Operation &op);
  /// Gradient accumulation (train.accumulation_boundary): the rest of the
  /// step runs only when ztrt_accumulation_boundary says this micro-batch
  /// ends its optimizer step; otherwise the step frees what it owns and
  /// returns. Lowering continues in the block that runs the rest.
  void branchAtBoundary(mlir::Location loc);
  /// Whether every buffer found its place in the plan.
  bool planOk() const { return !planBroken; }
  /// The kernels of train.fused regions (the pass's, for every function).
  FusedKernels *fusedKernels = nullptr;
  /// The pointer array a ztrt_fused call passes (one per function, at its
  /// top, reused by every call).
  mlir::Value fusedArgs;

  /// Whether the function's returned value is a loss to report with
  /// ztrt_set_loss (false for the logits function).
  bool reportLoss = true;
  unsigned numBuffers = 0;

private:
  mlir::Value planned(mlir::Attribute attr, mlir::Operation *where);

  mlir::ModuleOp module;
  dist::StepBuffers stepBuffers;
  mlir::SymbolTable symbols;
  mlir::Value loss;
  llvm::StringMap<int64_t> paramIndex, bufferIndex;
  llvm::DenseMap<mlir::Value, mlir::Value> pointers;
  llvm::DenseSet<mlir::Value> owned; // roots allocated by this step
  llvm::StringMap<mlir::Value> arenaBase;
  bool isPlanned = false, planBroken = false;
};

/// The lowering of one op (or family of ops) to runtime calls.
class RuntimePattern {
public:
  virtual ~RuntimePattern();
  /// The op this pattern lowers, or null when it matches by interface.
  virtual std::optional<mlir::TypeID> rootKind() const { return {}; }
  virtual bool matches(mlir::Operation *op) const = 0;
  virtual mlir::LogicalResult lower(mlir::Operation *op,
                                    StepLowering &s) const = 0;
};

/// A pattern for one op class.
template <typename OpTy> class OpRuntimePattern : public RuntimePattern {
public:
  std::optional<mlir::TypeID> rootKind() const final {
    return mlir::TypeID::get<OpTy>();
  }
  bool matches(mlir::Operation *op) const final { return mlir::isa<OpTy>(op); }
  mlir::LogicalResult lower(mlir::Operation *op,
                            StepLowering &s) const final {
    return lower(mlir::cast<OpTy>(op), s);
  }
  virtual mlir::LogicalResult lower(OpTy op, StepLowering &s) const = 0;
};

using RuntimePatternList = std::vector<std::unique_ptr<RuntimePattern>>;

/// train ops: compute ops by their kernel call, parameter reads, reshapes,
/// optimizer updates.
void populateTrainToRuntimePatterns(RuntimePatternList &patterns);

/// A kernel or collective of the ABI table and the element type it runs
/// in: ztrt_<name>(ctx, dtype, args...).
struct RuntimeKernel {
  std::string name;
  /// The ztrt_dtype code of the element type.
  int32_t dtype;
  /// Emits the call; its result, or a null Value for a void function.
  mlir::Value call(RuntimeCalls &rt, llvm::ArrayRef<mlir::Value> args) const;
};

/// `kernel` of the ABI table in `elementType`, or a located error when the
/// runtime has no such kernel or does not store that type.
/// The ztrt_dtype code of f32, bf16 or f16; an error at `where` for any
/// other element type.
mlir::FailureOr<int32_t> dtypeCode(mlir::Operation *where,
                                   mlir::Type elementType);

mlir::FailureOr<RuntimeKernel> typedKernel(mlir::Operation *where,
                                           llvm::StringRef kernel,
                                           mlir::Type elementType);

/// Emits a described kernel call: tensors become their buffers (results
/// get theirs from StepLowering::alloc, in argument order).
mlir::LogicalResult emitKernelCall(mlir::Operation *op,
                                   const train::KernelCall &call,
                                   StepLowering &s);

/// Every byte one rank allocates through the runtime for this step: the
/// storage of parameters, states and gradients, inputs, buffers and
/// plan-memory's arenas (the runtime's plannedBytes over the descriptor;
/// zero-report's predicted peak). Set by lower-to-runtime as the module's
/// `ztrain.planned_bytes`, which ztrain-compile checks against
/// --device-memory.
int64_t plannedStepBytes(mlir::ModuleOp module, mlir::func::FuncOp entry,
                         int64_t stage, int64_t gridSize);

/// The runtime's descriptor of the module's parameters, states and inputs
/// (docs/runtime.md), or a located error for names or types it cannot
/// carry.
mlir::FailureOr<std::string> buildDescriptor(mlir::ModuleOp module,
                                             mlir::func::FuncOp entry,
                                             int64_t stage,
                                             const dist::MeshLayout &mesh);

} // namespace ztrain

#endif // ZTRAIN_CONVERSION_TRAINTORUNTIME_STEPLOWERING_H
