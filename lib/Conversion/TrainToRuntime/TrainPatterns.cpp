//===- TrainPatterns.cpp - train ops to runtime calls ---------------------===//
//
// Part of the ztrain project.
//
// Compute ops lower through the kernel call they describe
// (RuntimeKernelOpInterface): no case per op here. What is left are the ops
// whose lowering is about memory, not a kernel: parameter reads and
// reshapes (views), slices and concatenations (strided copies), and
// optimizer updates, which address the parameter's
// and its states' storage under the ZeRO plan
// (OptimizerUpdateOpInterface).
//
//===----------------------------------------------------------------------===//

#include "ztrain/Conversion/TrainToRuntime/StepLowering.h"
#include "ztrain/Dialect/Dist/IR/DistDialect.h"

using namespace mlir;
using namespace ztrain;
using namespace ztrain::train;

namespace {

/// Any op that describes its runtime kernel call.
struct KernelPattern : RuntimePattern {
  bool matches(Operation *op) const override {
    return isa<RuntimeKernelOpInterface>(op);
  }
  LogicalResult lower(Operation *op, StepLowering &s) const override {
    return emitKernelCall(op,
                          cast<RuntimeKernelOpInterface>(op).getKernelCall(),
                          s);
  }
};

struct ParamReadPattern : OpRuntimePattern<ParamReadOp> {
  LogicalResult lower(ParamReadOp op, StepLowering &s) const override {
    if (s.gridSize > 1 &&
        s.paramOp(op.getParam())->hasAttr(dist::kPartitionAttr))
      return op.emitOpError() << "reads a parameter partitioned at rest; run "
                                 "zero-insert-collectives (it gathers it)";
    s.bind(op.getResult(), s.param(op.getParam()));
    return success();
  }
};

/// The buffer's storage itself (the step never writes a buffer).
struct BufferReadPattern : OpRuntimePattern<BufferReadOp> {
  LogicalResult lower(BufferReadOp op, StepLowering &s) const override {
    s.bind(op.getResult(), s.buffer(op.getBuffer()));
    return success();
  }
};

/// A view of its operand, unless its result must land in a gradient
/// buffer: then a copy.
struct ReshapePattern : OpRuntimePattern<ReshapeOp> {
  LogicalResult lower(ReshapeOp op, StepLowering &s) const override {
    if (!s.buffers().gradientOf(op.getResult())) {
      s.bind(op.getResult(), s.get(op.getInput()));
      return success();
    }
    Value x = s.get(op.getInput());
    s.rt.call("copy", {x, s.alloc(op.getResult()),
                       s.rt.i64(tensorBytes(op.getType()))});
    return success();
  }
};

/// A tensor seen as [outer, size along `dim` * inner] in bytes: the row
/// length is `along * innerBytes`.
struct Rows {
  int64_t outer = 1, innerBytes;
};
static Rows rowsAround(RankedTensorType type, int64_t dim) {
  Rows r{1, elementBytes(type)};
  for (int64_t d = 0; d < dim; ++d)
    r.outer *= type.getDimSize(d);
  for (int64_t d = dim + 1; d < type.getRank(); ++d)
    r.innerBytes *= type.getDimSize(d);
  return r;
}

/// Copies `part` into (or out of) `whole` at `start` along `dim`: one
/// ztrt_copy_2d of `outer` rows. `toWhole` picks the direction.
static void copyBlock(StepLowering &s, Value partPtr, RankedTensorType part,
                      Value wholePtr, RankedTensorType whole, int64_t dim,
                      int64_t start, bool toWhole) {
  Rows r = rowsAround(whole, dim);
  int64_t partRow = part.getDimSize(dim) * r.innerBytes;
  int64_t wholeRow = whole.getDimSize(dim) * r.innerBytes;
  Value at = s.rt.offset(wholePtr, start * r.innerBytes);
  Value src = toWhole ? partPtr : at, dst = toWhole ? at : partPtr;
  s.rt.call("copy_2d",
            {src, dst, s.rt.i64(r.outer), s.rt.i64(partRow),
             s.rt.i64(toWhole ? partRow : wholeRow),
             s.rt.i64(toWhole ? wholeRow : partRow)});
}

/// Slices, concatenations and the adjoint of a slice move data without
/// arithmetic: strided copies (ztrt_copy_2d, every backend has it) and,
/// for the adjoint, a fill with zeros.
struct SlicePattern : OpRuntimePattern<SliceOp> {
  LogicalResult lower(SliceOp op, StepLowering &s) const override {
    Value out = s.alloc(op.getResult());
    copyBlock(s, out, op.getType(), s.get(op.getInput()),
              op.getInput().getType(), op.getDim(), op.getStart(),
              /*toWhole=*/false);
    return success();
  }
};

struct SliceGradPattern : OpRuntimePattern<SliceGradOp> {
  LogicalResult lower(SliceGradOp op, StepLowering &s) const override {
    FailureOr<RuntimeKernel> fill =
        typedKernel(op, "fill", op.getType().getElementType());
    if (failed(fill))
      return failure();
    Value out = s.alloc(op.getResult());
    fill->call(s.rt, {out, s.rt.i64(op.getType().getNumElements()),
                      s.rt.f64(0.0)});
    copyBlock(s, s.get(op.getGrad()), op.getGrad().getType(), out,
              op.getType(), op.getDim(), op.getStart(), /*toWhole=*/true);
    return success();
  }
};

struct ConcatPattern : OpRuntimePattern<ConcatOp> {
  LogicalResult lower(ConcatOp op, StepLowering &s) const override {
    Value out = s.alloc(op.getResult());
    int64_t start = 0, dim = op.getDim();
    for (Value x : op.getInputs()) {
      auto type = cast<RankedTensorType>(x.getType());
      copyBlock(s, s.get(x), type, out, op.getType(), dim, start,
                /*toWhole=*/true);
      start += type.getDimSize(dim);
    }
    return success();
  }
};

/// ztrt_<kernel>(param, grad, states..., n, hyper-parameters...): the
/// parameter (or this rank's slice of it) and its states are updated in
/// place.
struct UpdatePattern : RuntimePattern {
  bool matches(Operation *op) const override {
    return isa<OptimizerUpdateOpInterface>(op);
  }
  LogicalResult lower(Operation *op, StepLowering &s) const override {
    auto update = cast<OptimizerUpdateOpInterface>(op);
    KernelCall kernel = update.getUpdateKernel(
        s.paramElementType(update.getUpdatedParam().getValue()));
    FailureOr<RuntimeKernel> name =
        typedKernel(op, kernel.kernel, kernel.elementType);
    if (failed(name))
      return failure();
    Value grad = update.getGradient();
    int64_t n = numElements(grad);
    Value param = s.updatedParam(update.getUpdatedParam().getValue(),
                                 update.isSharded(), n);
    // (A gradient spilled to host memory, zero-offload's optimizer=cpu, is
    // the host copy its spill's wait yields.)
    Value gradPtr = s.get(grad);
    // One chunk of a split update (zero-offload's sub-group-size): its
    // elements of the parameter and the gradient; its states are the
    // chunk's swap buffers.
    int64_t chunk = -1, count = n;
    if (auto c = op->getAttrOfType<DenseI64ArrayAttr>(dist::kChunkAttr)) {
      chunk = c[0];
      const int64_t first = chunk * dist::chunkElements(n, c[1]);
      count = dist::chunkSize(n, chunk, c[1]);
      param = s.rt.offset(
          param, first * elementBytes(s.paramElementType(
                             update.getUpdatedParam().getValue())));
      gradPtr = s.rt.offset(gradPtr, first * elementBytes(grad.getType()));
    }
    SmallVector<Value> args{param, gradPtr};
    for (FlatSymbolRefAttr state : update.getUpdatedStates()) {
      if (chunk >= 0 && state &&
          !s.swapBuffers.count(StepLowering::swapKey(state.getValue(), chunk)))
        return op->emitOpError()
               << "steps chunk " << chunk << " but state @"
               << state.getValue() << " is not swapped in as that chunk";
      args.push_back(s.state(state, chunk));
    }
    args.push_back(s.rt.i64(count));
    for (const KernelArg &hyper : kernel.args) {
      if (hyper.kind == KernelArg::F64) {
        args.push_back(s.rt.f64(hyper.f));
      } else if (hyper.kind == KernelArg::LearningRate) {
        // The run's learning rate (--lr, --lr-schedule), the compiled one
        // its default.
        args.push_back(s.rt.call("lr", {s.rt.f64(hyper.f)}));
      } else if (hyper.kind == KernelArg::Hyper) {
        // The run's value (--beta1, --weight-decay, ...), the compiled one
        // its default.
        args.push_back(s.rt.call(
            "hyper", {s.rt.i32(static_cast<int32_t>(hyper.i)),
                      s.rt.f64(hyper.f)}));
      } else if (hyper.kind == KernelArg::DType) {
        FailureOr<int32_t> code = dtypeCode(op, hyper.type);
        if (failed(code))
          return failure();
        args.push_back(s.rt.i32(*code));
      } else {
        args.push_back(s.rt.i32(static_cast<int32_t>(hyper.i)));
      }
    }
    if (op->hasAttr(dist::kAsyncUpdateAttr)) {
      // Its host step may run beside the step (on a device backend) until
      // its dist.update_wait.
      s.rt.call("update_async", {param});
      s.asyncUpdates[update.getUpdatedParam().getAttr()] = param;
    }
    name->call(s.rt, args);
    return success();
  }
};

/// Dynamic loss scaling: the scale and the overflow decision are the
/// runtime's (its scaler is host state that persists across steps).
struct LossScalePattern : OpRuntimePattern<LossScaleOp> {
  LogicalResult lower(LossScaleOp op, StepLowering &s) const override {
    s.rt.call("loss_scale", {s.alloc(op.getResult())});
    return success();
  }
};

struct UpdateLossScalePattern : OpRuntimePattern<UpdateLossScaleOp> {
  LogicalResult lower(UpdateLossScaleOp op, StepLowering &s) const override {
    s.rt.call("update_loss_scale", {s.get(op.getFound())});
    return success();
  }
};

struct ClipGradNormPattern : OpRuntimePattern<ClipGradNormOp> {
  LogicalResult lower(ClipGradNormOp op, StepLowering &s) const override {
    s.rt.call("clip_grad_norm", {s.get(op.getSumSq()),
                                 s.rt.f64(op.getMaxNorm().convertToDouble())});
    return success();
  }
};

/// ztrt_accumulate_grad(acc, x, n): `acc` is the parameter's persistent
/// gradient buffer (dist::StepBuffers counts the op's result as one).
struct AccumulateGradPattern : OpRuntimePattern<AccumulateGradOp> {
  LogicalResult lower(AccumulateGradOp op, StepLowering &s) const override {
    if (s.buffers().gradientOf(op.getResult()) != op.getParamAttr())
      return op.emitOpError() << "has no persistent gradient buffer of "
                              << op.getParamAttr();
    FailureOr<RuntimeKernel> kernel =
        typedKernel(op, "accumulate_grad", op.getType().getElementType());
    if (failed(kernel))
      return failure();
    Value x = s.get(op.getInput());
    kernel->call(s.rt, {s.alloc(op.getResult()), x,
                        s.rt.i64(op.getType().getNumElements())});
    return success();
  }
};

/// ztrt_matmul_acc(a, b, c_in, c, m, n, k, trans_a, trans_b), typed by the
/// operands: in place (c is c_in's buffer) when dist::StepBuffers makes the
/// result an alias of its accumulator, else into the result's own buffer.
struct MatmulAccPattern : OpRuntimePattern<MatmulAccOp> {
  LogicalResult lower(MatmulAccOp op, StepLowering &s) const override {
    FailureOr<RuntimeKernel> kernel =
        typedKernel(op, "matmul_acc", elementTypeOf(op.getLhs()));
    if (failed(kernel))
      return failure();
    ArrayRef<int64_t> a = op.getLhs().getType().getShape(),
                      c = op.getType().getShape();
    int64_t k = op.getTransposeA() ? a[0] : a[1];
    Value acc = s.get(op.getAcc());
    Value out = acc;
    if (s.buffers().isAlias(op.getResult()))
      s.bind(op.getResult(), acc);
    else
      out = s.alloc(op.getResult());
    kernel->call(s.rt,
                 {s.get(op.getLhs()), s.get(op.getRhs()), acc, out,
                  s.rt.i64(c[0]), s.rt.i64(c[1]), s.rt.i64(k),
                  s.rt.i32(op.getTransposeA()), s.rt.i32(op.getTransposeB())});
    return success();
  }
};

/// A fused region: its generated kernel, run by ztrt_fused over the
/// region's items with the buffers of its inputs and results.
struct FusedPattern : OpRuntimePattern<FusedOp> {
  /// The most buffers a region has (train-fuse-elementwise's limit).
  static constexpr unsigned kMaxBuffers = 16;

  LogicalResult lower(FusedOp op, StepLowering &s) const override {
    if (!s.fusedKernels)
      return op.emitOpError() << "has no kernel generator";
    unsigned count = op.getInputs().size() + op.getNumResults();
    if (count > kMaxBuffers)
      return op.emitOpError()
             << "has " << count << " inputs and results; "
             << "a generated kernel takes at most " << kMaxBuffers;
    FailureOr<FusedKernels::Kernel> kernel = s.fusedKernels->get(op);
    if (failed(kernel))
      return failure();
    RuntimeCalls &rt = s.rt;
    OpBuilder &b = rt.builder();
    auto ptrTy = LLVM::LLVMPointerType::get(b.getContext());
    if (!s.fusedArgs) {
      Value one = rt.i64(1);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointAfter(one.getDefiningOp());
      s.fusedArgs = LLVM::AllocaOp::create(
          b, rt.loc, ptrTy, LLVM::LLVMArrayType::get(ptrTy, kMaxBuffers), one);
    }
    SmallVector<Value> buffers;
    for (Value v : op.getInputs())
      buffers.push_back(s.get(v));
    for (Value v : op.getResults())
      buffers.push_back(s.alloc(v));
    for (auto [i, p] : llvm::enumerate(buffers)) {
      Value slot = LLVM::GEPOp::create(b, rt.loc, ptrTy, ptrTy, s.fusedArgs,
                                       ArrayRef<LLVM::GEPArg>{int32_t(i)});
      LLVM::StoreOp::create(b, rt.loc, p, slot);
    }
    auto [items, itemElements] = fusedItems(op);
    rt.call("fused", {LLVM::AddressOfOp::create(b, rt.loc, kernel->name),
                      LLVM::AddressOfOp::create(b, rt.loc, kernel->fn),
                      LLVM::AddressOfOp::create(b, rt.loc, kernel->wide),
                      s.fusedArgs, rt.i64(items), rt.i64(itemElements)});
    return success();
  }
};

struct AccumulationBoundaryPattern
    : OpRuntimePattern<AccumulationBoundaryOp> {
  LogicalResult lower(AccumulationBoundaryOp op,
                      StepLowering &s) const override {
    s.branchAtBoundary(op.getLoc());
    return success();
  }
};

struct ReturnPattern : OpRuntimePattern<func::ReturnOp> {
  LogicalResult lower(func::ReturnOp, StepLowering &) const override {
    return success();
  }
};

} // namespace

void ztrain::populateTrainToRuntimePatterns(RuntimePatternList &patterns) {
  patterns.push_back(std::make_unique<KernelPattern>());
  patterns.push_back(std::make_unique<ParamReadPattern>());
  patterns.push_back(std::make_unique<BufferReadPattern>());
  patterns.push_back(std::make_unique<ReshapePattern>());
  patterns.push_back(std::make_unique<SlicePattern>());
  patterns.push_back(std::make_unique<SliceGradPattern>());
  patterns.push_back(std::make_unique<ConcatPattern>());
  patterns.push_back(std::make_unique<UpdatePattern>());
  patterns.push_back(std::make_unique<LossScalePattern>());
  patterns.push_back(std::make_unique<UpdateLossScalePattern>());
  patterns.push_back(std::make_unique<ClipGradNormPattern>());
  patterns.push_back(std::make_unique<AccumulateGradPattern>());
  patterns.push_back(std::make_unique<MatmulAccPattern>());
  patterns.push_back(std::make_unique<AccumulationBoundaryPattern>());
  patterns.push_back(std::make_unique<ReturnPattern>());
  patterns.push_back(std::make_unique<FusedPattern>());
}
