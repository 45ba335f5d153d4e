//===- TrainKernels.cpp - The runtime kernel call of each compute op ------===//
//
// Part of the ztrain project.
//
// RuntimeKernelOpInterface: each compute op describes the ztrt_* kernel
// call that computes it (runtime/include/ztrt_abi.def documents the
// arguments). Elementwise ops get theirs from their ODS class
// (elementwiseKernelCall); the rest are here, one function per op.
// lower-to-runtime turns the description into a call on buffer pointers.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "ztrt.h" // ZTRT_NO_IGNORE_INDEX

using namespace mlir;
using namespace ztrain;
using namespace ztrain::train;

int64_t train::numElements(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}

std::pair<int64_t, int64_t> train::rowsCols(Value v) {
  ArrayRef<int64_t> s = cast<RankedTensorType>(v.getType()).getShape();
  int64_t cols = s.empty() ? 1 : s.back();
  // Verifiers refuse zero-size dimensions; guard the division anyway.
  return {cols ? numElements(v) / cols : 0, cols};
}

Type train::elementTypeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

static ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

static SmallVector<int64_t> dimMask(int64_t rank, ArrayRef<int64_t> dims) {
  SmallVector<int64_t> mask(rank, 0);
  for (int64_t d : dims)
    mask[d] = 1;
  return mask;
}

static KernelCall call(StringRef kernel, Value typed,
                       std::initializer_list<KernelArg> args) {
  return KernelCall{kernel.str(), elementTypeOf(typed),
                    SmallVector<KernelArg>(args)};
}
static KernelCall call(StringRef kernel, Value typed,
                       SmallVector<KernelArg> args) {
  return KernelCall{kernel.str(), elementTypeOf(typed), std::move(args)};
}
using A = KernelArg;

KernelCall train::elementwiseKernelCall(Operation *op, StringRef kernel) {
  KernelCall c{kernel.str(), elementTypeOf(op->getResult(0)), {}};
  for (Value v : op->getOperands())
    c.args.push_back(A::buffer(v));
  c.args.push_back(A::buffer(op->getResult(0)));
  c.args.push_back(A::i64(numElements(op->getResult(0))));
  return c;
}

KernelCall FillOp::getKernelCall() {
  return call("fill", getResult(),
              {A::buffer(getResult()), A::i64(numElements(getResult())),
               A::f64(getValue().convertToDouble())});
}

KernelCall CastOp::getKernelCall() {
  // Typed by the input; the destination type is the last argument.
  return call("cast", getInput(),
              {A::buffer(getInput()), A::buffer(getResult()),
               A::i64(numElements(getResult())),
               A::dtype(elementTypeOf(getResult()))});
}

KernelCall FoundNonfiniteOp::getKernelCall() {
  // Typed by the input; both flags are f32.
  return call("found_nonfinite", getInput(),
              {A::buffer(getInput()), A::i64(numElements(getInput())),
               A::buffer(getFound()), A::buffer(getResult())});
}

KernelCall GradSqNormOp::getKernelCall() {
  // Typed by the input; both sums are f32.
  return call("grad_sq_norm", getInput(),
              {A::buffer(getInput()), A::i64(numElements(getInput())),
               A::buffer(getSum()), A::buffer(getResult())});
}

KernelCall ScaleOp::getKernelCall() {
  return call("scale", getResult(),
              {A::buffer(getInput()), A::buffer(getResult()),
               A::i64(numElements(getResult())),
               A::f64(getFactor().convertToDouble())});
}

KernelCall BiasAddOp::getKernelCall() {
  auto [rows, cols] = rowsCols(getInput());
  return call("bias_add", getResult(),
              {A::buffer(getInput()), A::buffer(getBias()),
               A::buffer(getResult()), A::i64(rows), A::i64(cols)});
}

KernelCall MatmulOp::getKernelCall() {
  ArrayRef<int64_t> a = shapeOf(getLhs()), bs = shapeOf(getRhs()),
                    c = shapeOf(getResult());
  int64_t rank = a.size();
  int64_t batch = 1;
  for (int64_t d : a.drop_back(2))
    batch *= d;
  int64_t m = c[rank - 2], n = c[rank - 1];
  int64_t k = getTransposeA() ? a[rank - 2] : a[rank - 1];
  int64_t strideA = m * k, strideB = k * n, strideC = m * n;
  if (bs.size() == 2 && rank > 2) {
    strideB = 0;
    if (!getTransposeA()) {
      // Rows of every batch element are contiguous: one GEMM.
      m *= batch;
      batch = 1;
      strideA = m * k;
      strideC = m * n;
    }
  }
  return call("matmul", getResult(),
              {A::buffer(getLhs()), A::buffer(getRhs()),
               A::buffer(getResult()), A::i64(batch), A::i64(m), A::i64(n),
               A::i64(k), A::i32(getTransposeA()), A::i32(getTransposeB()),
               A::i64(strideA), A::i64(strideB), A::i64(strideC)});
}

KernelCall LayerNormOp::getKernelCall() {
  auto [rows, cols] = rowsCols(getInput());
  return call("layer_norm", getResult(),
              {A::buffer(getInput()), A::buffer(getGamma()),
               A::buffer(getBeta()), A::buffer(getResult()), A::i64(rows),
               A::i64(cols), A::f64(getEpsilon().convertToDouble())});
}

KernelCall LayerNormGradOp::getKernelCall() {
  auto [rows, cols] = rowsCols(getInput());
  return call("layer_norm_grad", getInputGrad(),
              {A::buffer(getGrad()), A::buffer(getInput()),
               A::buffer(getGamma()), A::buffer(getInputGrad()),
               A::buffer(getGammaGrad()), A::buffer(getBetaGrad()),
               A::i64(rows), A::i64(cols),
               A::f64(getEpsilon().convertToDouble())});
}

KernelCall SoftmaxOp::getKernelCall() {
  auto [rows, cols] = rowsCols(getInput());
  return call("softmax", getResult(),
              {A::buffer(getInput()), A::buffer(getResult()), A::i64(rows),
               A::i64(cols), A::i32(getCausal())});
}

KernelCall SoftmaxGradOp::getKernelCall() {
  auto [rows, cols] = rowsCols(getOutput());
  return call("softmax_grad", getResult(),
              {A::buffer(getGrad()), A::buffer(getOutput()),
               A::buffer(getResult()), A::i64(rows), A::i64(cols)});
}

/// heads x Tq x Tk x D of an attention whose q and k are given.
static SmallVector<KernelArg> attentionDims(Value q, Value k, bool causal,
                                            double scale) {
  ArrayRef<int64_t> qs = shapeOf(q), ks = shapeOf(k);
  int64_t tq = qs[qs.size() - 2], d = qs.back(), tk = ks[ks.size() - 2];
  int64_t heads = numElements(q) / (tq * d);
  // Query heads per key / value head (1 unless grouped-query). The
  // verifier refused empty dims and key heads that do not divide q's.
  const int64_t kvHeads = numElements(k) / (tk * d);
  assert(kvHeads > 0 && heads % kvHeads == 0 && "verified attention shapes");
  int64_t groups = heads / kvHeads;
  return {A::i64(heads), A::i64(groups), A::i64(tq),   A::i64(tk),
          A::i64(d),     A::i32(causal), A::f64(scale)};
}

KernelCall AttentionOp::getKernelCall() {
  KernelCall c = call("attention", getResult(),
                      {A::buffer(getQuery()), A::buffer(getKey()),
                       A::buffer(getValue()), A::buffer(getResult()),
                       A::buffer(getLse())});
  c.args.append(attentionDims(getQuery(), getKey(), getCausal(),
                              getScale().convertToDouble()));
  return c;
}

KernelCall AttentionGradOp::getKernelCall() {
  KernelCall c = call("attention_grad", getQueryGrad(),
                      {A::buffer(getGrad()), A::buffer(getQuery()),
                       A::buffer(getKey()), A::buffer(getValue()),
                       A::buffer(getOutput()), A::buffer(getLse()),
                       A::buffer(getQueryGrad()), A::buffer(getKeyGrad()),
                       A::buffer(getValueGrad())});
  c.args.append(attentionDims(getQuery(), getKey(), getCausal(),
                              getScale().convertToDouble()));
  return c;
}

KernelCall TransposeOp::getKernelCall() {
  ArrayRef<int64_t> s = shapeOf(getInput());
  return call("transpose", getResult(),
              {A::buffer(getInput()), A::buffer(getResult()),
               A::i64(s.size()), A::i64Array(s),
               A::i64Array(getPermutation())});
}

KernelCall ReduceOp::getKernelCall() {
  ArrayRef<int64_t> s = shapeOf(getInput());
  return call("reduce", getResult(),
              {A::buffer(getInput()), A::buffer(getResult()),
               A::i64(s.size()), A::i64Array(s),
               A::i64Array(dimMask(s.size(), getDims())),
               A::i32(static_cast<int32_t>(getKind()))});
}

KernelCall ReduceMaxGradOp::getKernelCall() {
  ArrayRef<int64_t> s = shapeOf(getInput());
  return call("reduce_max_grad", getResult(),
              {A::buffer(getGrad()), A::buffer(getInput()),
               A::buffer(getOutput()), A::buffer(getResult()),
               A::i64(s.size()), A::i64Array(s),
               A::i64Array(dimMask(s.size(), getDims()))});
}

KernelCall NegOp::getKernelCall() {
  return call("scale", getResult(),
              {A::buffer(getInput()), A::buffer(getResult()),
               A::i64(numElements(getResult())), A::f64(-1.0)});
}

KernelCall MaskedFillOp::getKernelCall() {
  int64_t inner = numElements(getMask());
  return call("masked_fill", getResult(),
              {A::buffer(getInput()), A::buffer(getMask()),
               A::buffer(getResult()),
               A::i64(numElements(getInput()) / inner), A::i64(inner),
               A::f64(getValue().convertToDouble())});
}

KernelCall WhereOp::getKernelCall() {
  int64_t inner = numElements(getMask());
  return call("where", getResult(),
              {A::buffer(getMask()), A::buffer(getOnTrue()),
               A::buffer(getOnFalse()), A::buffer(getResult()),
               A::i64(numElements(getResult()) / inner), A::i64(inner)});
}

KernelCall DropoutOp::getKernelCall() {
  return call("dropout", getResult(),
              {A::buffer(getInput()), A::buffer(getResult()),
               A::i64(numElements(getInput())), A::i64(getStreamAttr().getInt()),
               A::f64(getProbability().convertToDouble())});
}

KernelCall RMSNormOp::getKernelCall() {
  auto [rows, cols] = rowsCols(getInput());
  return call("rms_norm", getResult(),
              {A::buffer(getInput()), A::buffer(getGamma()),
               A::buffer(getResult()), A::i64(rows), A::i64(cols),
               A::f64(getEpsilon().convertToDouble())});
}

KernelCall RMSNormGradOp::getKernelCall() {
  auto [rows, cols] = rowsCols(getInput());
  return call("rms_norm_grad", getInputGrad(),
              {A::buffer(getGrad()), A::buffer(getInput()),
               A::buffer(getGamma()), A::buffer(getInputGrad()),
               A::buffer(getGammaGrad()), A::i64(rows), A::i64(cols),
               A::f64(getEpsilon().convertToDouble())});
}

KernelCall RotaryEmbeddingOp::getKernelCall() {
  // The input as [outer, seq, inner, dim].
  ArrayRef<int64_t> s = shapeOf(getInput());
  int64_t seqDim = getSeqDim(), rank = s.size();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < seqDim; ++d)
    outer *= s[d];
  for (int64_t d = seqDim + 1; d < rank - 1; ++d)
    inner *= s[d];
  // No scaling is factor 0 (the other three then do nothing).
  double scaling[4] = {0.0, 1.0, 4.0, 8192.0};
  if (std::optional<ArrayRef<double>> given = getLlama3Scaling())
    std::copy(given->begin(), given->end(), scaling);
  return call("rotary_embedding", getResult(),
              {A::buffer(getInput()), A::buffer(getResult()), A::i64(outer),
               A::i64(s[seqDim]), A::i64(inner), A::i64(s.back()),
               A::f64(getTheta().convertToDouble()), A::f64(scaling[0]),
               A::f64(scaling[1]), A::f64(scaling[2]), A::f64(scaling[3]),
               A::i32(getInverse())});
}

KernelCall BroadcastOp::getKernelCall() {
  ArrayRef<int64_t> s = shapeOf(getResult());
  return call("broadcast", getResult(),
              {A::buffer(getInput()), A::buffer(getResult()),
               A::i64(s.size()), A::i64Array(s),
               A::i64Array(dimMask(s.size(), getDims())), A::f64(1.0)});
}

/// The kernels' `ignore` argument: the label whose rows do not count, or a
/// value no int32 label has (ZTRT_NO_IGNORE_INDEX) when none is ignored.
static int64_t ignoreArg(std::optional<int64_t> ignoreIndex) {
  return ignoreIndex ? *ignoreIndex : ZTRT_NO_IGNORE_INDEX;
}

KernelCall CrossEntropyOp::getKernelCall() {
  auto [rows, classes] = rowsCols(getLogits());
  SmallVector<KernelArg> args{
      A::buffer(getLogits()), A::buffer(getLabels()),
      A::buffer(getResult()), A::i64(rows),
      A::i64(classes),        A::i64(ignoreArg(getIgnoreIndex()))};
  if (std::optional<int64_t> first = getFirstRow()) {
    args.append({A::i64(*first), A::i64(shapeOf(getLabels())[0])});
    return call("cross_entropy_tile", getLogits(), args);
  }
  return call("cross_entropy", getLogits(), args);
}

KernelCall CrossEntropyWithGradOp::getKernelCall() {
  auto [rows, classes] = rowsCols(getLogits());
  SmallVector<KernelArg> args{A::buffer(getLogits()),
                              A::buffer(getLabels()),
                              A::buffer(getDloss()),
                              A::buffer(getResult()),
                              A::buffer(getLogitsGrad()),
                              A::i64(rows),
                              A::i64(classes),
                              A::i64(ignoreArg(getIgnoreIndex()))};
  if (std::optional<int64_t> first = getFirstRow()) {
    args.append({A::i64(*first), A::i64(shapeOf(getLabels())[0])});
    return call("cross_entropy_tile_with_grad", getLogits(), args);
  }
  return call("cross_entropy_with_grad", getLogits(), args);
}

KernelCall CrossEntropyGradOp::getKernelCall() {
  auto [rows, classes] = rowsCols(getLogits());
  return call("cross_entropy_grad", getLogits(),
              {A::buffer(getGrad()), A::buffer(getLogits()),
               A::buffer(getLabels()), A::buffer(getResult()), A::i64(rows),
               A::i64(classes), A::i64(ignoreArg(getIgnoreIndex()))});
}

KernelCall EmbeddingOp::getKernelCall() {
  ArrayRef<int64_t> t = shapeOf(getTable());
  return call("embedding", getTable(),
              {A::buffer(getTable()), A::buffer(getIds()),
               A::buffer(getResult()), A::i64(numElements(getIds())),
               A::i64(t[0]), A::i64(t[1])});
}

KernelCall EmbeddingGradOp::getKernelCall() {
  ArrayRef<int64_t> t = shapeOf(getResult());
  return call("embedding_grad", getResult(),
              {A::buffer(getGrad()), A::buffer(getIds()),
               A::buffer(getResult()), A::i64(numElements(getIds())),
               A::i64(t[0]), A::i64(t[1])});
}

//===----------------------------------------------------------------------===//
// Optimizer updates (OptimizerUpdateOpInterface)
//===----------------------------------------------------------------------===//

// With a master copy the kernel is the `_master` variant: typed by the
// gradient, the master first among the states, and the parameter's element
// type as the last argument (ztrt_abi.def).

SmallVector<FlatSymbolRefAttr> SGDUpdateOp::getUpdatedStates() {
  if (getMasterAttr())
    return {getMasterAttr(), getMomentumBufferAttr()};
  return {getMomentumBufferAttr()};
}

/// The run's weight decay, or 0 for a parameter exempt from it (its
/// no-decay group: the run's --weight-decay does not reach it).
static KernelArg weightDecayArg(APFloat compiled, bool noDecay) {
  if (noDecay)
    return KernelArg::f64(0.0);
  return KernelArg::hyper(KernelArg::WeightDecay, compiled.convertToDouble());
}

KernelCall SGDUpdateOp::getUpdateKernel(Type paramElementType) {
  KernelCall c = call(getMasterAttr() ? "sgd_update_master" : "sgd_update",
                      getGrad(),
                      {A::learningRate(getLr().convertToDouble()),
                       A::hyper(A::Momentum, getMomentum().convertToDouble()),
                       A::hyper(A::Dampening,
                                getDampening().convertToDouble()),
                       weightDecayArg(getWeightDecay(), getNoDecay()),
                       A::i32(getNesterov())});
  if (getMasterAttr())
    c.args.push_back(A::dtype(paramElementType));
  return c;
}

SmallVector<FlatSymbolRefAttr> AdamUpdateOp::getUpdatedStates() {
  if (getMasterAttr())
    return {getMasterAttr(), getExpAvgAttr(), getExpAvgSqAttr()};
  return {getExpAvgAttr(), getExpAvgSqAttr()};
}

KernelCall AdamUpdateOp::getUpdateKernel(Type paramElementType) {
  KernelCall c = call(getMasterAttr() ? "adam_update_master" : "adam_update",
                      getGrad(),
                      {A::learningRate(getLr().convertToDouble()),
                       A::hyper(A::Beta1, getBeta1().convertToDouble()),
                       A::hyper(A::Beta2, getBeta2().convertToDouble()),
                       A::hyper(A::Eps, getEpsilon().convertToDouble()),
                       weightDecayArg(getWeightDecay(), getNoDecay()),
                       A::i32(getDecoupled())});
  if (getMasterAttr())
    c.args.push_back(A::dtype(paramElementType));
  return c;
}
