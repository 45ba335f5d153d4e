//===- TrainGradients.cpp - Backward rules of the train ops ---------------===//
//
// Part of the ztrain project.
//
// GradientOpInterface implementations: given the adjoints of an op's
// results, build the adjoints of its operands from train ops. train-autodiff
// drives these in reverse program order.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace ztrain::train;

static RankedTensorType tensorTy(Value v) {
  return cast<RankedTensorType>(v.getType());
}

static Value scaleBy(OpBuilder &b, Location loc, Value x, double factor) {
  return ScaleOp::create(b, loc, x.getType(), x, b.getF64FloatAttr(factor));
}

static Value matmul(OpBuilder &b, Location loc, Type type, Value lhs,
                    Value rhs, bool ta, bool tb) {
  auto op = MatmulOp::create(b, loc, type, lhs, rhs, UnitAttr(), UnitAttr());
  op.setTransposeA(ta);
  op.setTransposeB(tb);
  return op;
}

static Value reshape(OpBuilder &b, Location loc, Value x,
                     ArrayRef<int64_t> shape) {
  auto type = RankedTensorType::get(shape, tensorTy(x).getElementType());
  if (type == x.getType())
    return x;
  return ReshapeOp::create(b, loc, type, x);
}

/// dims [0, n).
static SmallVector<int64_t> leadingDims(int64_t n) {
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d < n; ++d)
    dims.push_back(d);
  return dims;
}

SmallVector<Value> AddOp::buildGradients(OpBuilder &b,
                                         ArrayRef<Value> resultGrads) {
  return {resultGrads[0], resultGrads[0]};
}

SmallVector<Value> SubOp::buildGradients(OpBuilder &b,
                                         ArrayRef<Value> resultGrads) {
  return {resultGrads[0], scaleBy(b, getLoc(), resultGrads[0], -1.0)};
}

SmallVector<Value> MulOp::buildGradients(OpBuilder &b,
                                         ArrayRef<Value> resultGrads) {
  Value dy = resultGrads[0];
  Type t = getType();
  return {MulOp::create(b, getLoc(), t, dy, getRhs()),
          MulOp::create(b, getLoc(), t, dy, getLhs())};
}

SmallVector<Value> ScaleOp::buildGradients(OpBuilder &b,
                                           ArrayRef<Value> resultGrads) {
  return {scaleBy(b, getLoc(), resultGrads[0],
                  getFactor().convertToDouble())};
}

SmallVector<Value> BiasAddOp::buildGradients(OpBuilder &b,
                                             ArrayRef<Value> resultGrads) {
  Value dy = resultGrads[0];
  int64_t rank = tensorTy(dy).getRank();
  Value db = ReduceOp::create(b, getLoc(), getBias().getType(),
                              ReduceKind::sum, dy, leadingDims(rank - 1));
  return {dy, db};
}

SmallVector<Value> ReluOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> resultGrads) {
  return {ReluGradOp::create(b, getLoc(), getType(), resultGrads[0],
                             getInput())};
}

SmallVector<Value> GeluOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> resultGrads) {
  return {GeluGradOp::create(b, getLoc(), getType(), resultGrads[0],
                             getInput())};
}

/// C = op(A) op(B) with op = transpose when the flag is set. With
/// A' = op(A), B' = op(B): dA' = dC B'^T and dB' = A'^T dC; each is then
/// transposed back when the operand was transposed, which folds into the
/// flags of the matmul computing it.
static std::pair<Value, Value> matmulGrads(OpBuilder &b, Location loc,
                                           Value a, Value bm, Value dc,
                                           bool ta, bool tb) {
  Type aTy = a.getType(), bTy = bm.getType();
  Value da = !ta ? matmul(b, loc, aTy, dc, bm, false, !tb)
                 : matmul(b, loc, aTy, bm, dc, tb, true);
  Value db = !tb ? matmul(b, loc, bTy, a, dc, !ta, false)
                 : matmul(b, loc, bTy, dc, a, true, ta);
  return {da, db};
}

SmallVector<Value> MatmulOp::buildGradients(OpBuilder &b,
                                            ArrayRef<Value> resultGrads) {
  Location loc = getLoc();
  Value a = getLhs(), bm = getRhs(), dc = resultGrads[0];
  bool ta = getTransposeA(), tb = getTransposeB();
  ArrayRef<int64_t> aShape = tensorTy(a).getShape();
  ArrayRef<int64_t> cShape = tensorTy(dc).getShape();
  int64_t batchRank = aShape.size() - 2;
  bool shared = tensorTy(bm).getRank() == 2 && batchRank > 0;
  if (!shared) {
    auto [da, db] = matmulGrads(b, loc, a, bm, dc, ta, tb);
    return {da, db};
  }
  if (!ta) {
    // A linear layer applied to [batch..., M, K]: fold the batch into M and
    // use the plain 2-D rules, which also sums dB over the batch in one GEMM.
    int64_t rows = 1;
    for (int64_t d : aShape.drop_back())
      rows *= d;
    Value a2 = reshape(b, loc, a, {rows, aShape.back()});
    Value dc2 = reshape(b, loc, dc, {rows, cShape.back()});
    auto [da2, db] = matmulGrads(b, loc, a2, bm, dc2, false, tb);
    return {reshape(b, loc, da2, aShape), db};
  }
  // Transposed lhs with a shared rhs: broadcast B over the batch, apply the
  // batched rules, then sum dB over the batch dims.
  SmallVector<int64_t> bbShape(aShape.begin(), aShape.begin() + batchRank);
  llvm::append_range(bbShape, tensorTy(bm).getShape());
  auto bbTy = RankedTensorType::get(bbShape, tensorTy(bm).getElementType());
  Value bb = BroadcastOp::create(b, loc, bbTy, bm, leadingDims(batchRank));
  auto [da, dbb] = matmulGrads(b, loc, a, bb, dc, ta, tb);
  Value db = ReduceOp::create(b, loc, bm.getType(), ReduceKind::sum, dbb,
                              leadingDims(batchRank));
  return {da, db};
}

SmallVector<Value> LayerNormOp::buildGradients(OpBuilder &b,
                                               ArrayRef<Value> resultGrads) {
  auto grad = LayerNormGradOp::create(
      b, getLoc(), getInput().getType(), getGamma().getType(),
      getGamma().getType(), resultGrads[0], getInput(), getGamma(),
      getEpsilonAttr());
  return {grad.getInputGrad(), grad.getGammaGrad(), grad.getBetaGrad()};
}

SmallVector<Value> SoftmaxOp::buildGradients(OpBuilder &b,
                                             ArrayRef<Value> resultGrads) {
  return {SoftmaxGradOp::create(b, getLoc(), getType(), resultGrads[0],
                                getResult())};
}

SmallVector<Value> ReshapeOp::buildGradients(OpBuilder &b,
                                             ArrayRef<Value> resultGrads) {
  return {ReshapeOp::create(b, getLoc(), getInput().getType(),
                            resultGrads[0])};
}

SmallVector<Value> TransposeOp::buildGradients(OpBuilder &b,
                                               ArrayRef<Value> resultGrads) {
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (size_t d = 0; d < perm.size(); ++d)
    inverse[perm[d]] = d;
  return {TransposeOp::create(b, getLoc(), getInput().getType(),
                              resultGrads[0], inverse)};
}

SmallVector<Value> ReduceOp::buildGradients(OpBuilder &b,
                                            ArrayRef<Value> resultGrads) {
  if (getKind() == ReduceKind::max)
    return {ReduceMaxGradOp::create(b, getLoc(), getInput().getType(),
                                    resultGrads[0], getInput(), getResult(),
                                    getDims())};
  Value dx = BroadcastOp::create(b, getLoc(), getInput().getType(),
                                 resultGrads[0], getDims());
  if (getKind() == ReduceKind::mean) {
    int64_t count = 1;
    for (int64_t d : getDims())
      count *= tensorTy(getInput()).getDimSize(d);
    dx = scaleBy(b, getLoc(), dx, 1.0 / (double)count);
  }
  return {dx};
}

SmallVector<Value> BroadcastOp::buildGradients(OpBuilder &b,
                                               ArrayRef<Value> resultGrads) {
  return {ReduceOp::create(b, getLoc(), getInput().getType(), ReduceKind::sum,
                           resultGrads[0], getDims())};
}

SmallVector<Value> EmbeddingOp::buildGradients(OpBuilder &b,
                                               ArrayRef<Value> resultGrads) {
  return {EmbeddingGradOp::create(b, getLoc(), getTable().getType(),
                                  resultGrads[0], getIds()),
          Value()};
}

SmallVector<Value>
CrossEntropyOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads) {
  return {CrossEntropyGradOp::create(b, getLoc(), getLogits().getType(),
                                     resultGrads[0], getLogits(),
                                     getLabels()),
          Value()};
}

//===----------------------------------------------------------------------===//
// The ops of Llama-class models
//===----------------------------------------------------------------------===//

SmallVector<Value> DivOp::buildGradients(OpBuilder &b,
                                         ArrayRef<Value> resultGrads) {
  // d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b: da = dy / b, db = -(da * y).
  Location loc = getLoc();
  Type t = getType();
  Value da = DivOp::create(b, loc, t, resultGrads[0], getRhs());
  Value db = NegOp::create(b, loc, t, MulOp::create(b, loc, t, da, getResult()));
  return {da, db};
}

SmallVector<Value> NegOp::buildGradients(OpBuilder &b,
                                         ArrayRef<Value> resultGrads) {
  return {NegOp::create(b, getLoc(), getType(), resultGrads[0])};
}

SmallVector<Value> SiluOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> resultGrads) {
  return {SiluGradOp::create(b, getLoc(), getType(), resultGrads[0],
                             getInput())};
}

SmallVector<Value> SigmoidOp::buildGradients(OpBuilder &b,
                                             ArrayRef<Value> resultGrads) {
  return {SigmoidGradOp::create(b, getLoc(), getType(), resultGrads[0],
                                getResult())};
}

SmallVector<Value> ExpOp::buildGradients(OpBuilder &b,
                                         ArrayRef<Value> resultGrads) {
  return {MulOp::create(b, getLoc(), getType(), resultGrads[0], getResult())};
}

SmallVector<Value> SqrtOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> resultGrads) {
  // dy / (2 y): the halving is exact, so this is PyTorch's dy / (2 * y).
  Value q = DivOp::create(b, getLoc(), getType(), resultGrads[0], getResult());
  return {scaleBy(b, getLoc(), q, 0.5)};
}

SmallVector<Value> RsqrtOp::buildGradients(OpBuilder &b,
                                           ArrayRef<Value> resultGrads) {
  return {RsqrtGradOp::create(b, getLoc(), getType(), resultGrads[0],
                              getResult())};
}

SmallVector<Value> MaskedFillOp::buildGradients(OpBuilder &b,
                                                ArrayRef<Value> resultGrads) {
  // Masked elements did not come from the input: their adjoint is 0.
  return {MaskedFillOp::create(b, getLoc(), getType(), resultGrads[0],
                               getMask(), b.getF64FloatAttr(0.0)),
          Value()};
}

SmallVector<Value> RMSNormOp::buildGradients(OpBuilder &b,
                                             ArrayRef<Value> resultGrads) {
  auto grad = RMSNormGradOp::create(b, getLoc(), getInput().getType(),
                                    getGamma().getType(), resultGrads[0],
                                    getInput(), getGamma(), getEpsilonAttr());
  return {grad.getInputGrad(), grad.getGammaGrad()};
}

SmallVector<Value>
RotaryEmbeddingOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads) {
  // A rotation's adjoint is its transpose: the rotation by -angle.
  auto op = RotaryEmbeddingOp::create(b, getLoc(), getType(), resultGrads[0],
                                      getSeqDimAttr(), getThetaAttr(),
                                      UnitAttr());
  op.setInverse(!getInverse());
  return {op};
}

SmallVector<Value> SliceOp::buildGradients(OpBuilder &b,
                                           ArrayRef<Value> resultGrads) {
  return {SliceGradOp::create(b, getLoc(), getInput().getType(),
                              resultGrads[0], getDimAttr(), getStartAttr())};
}

SmallVector<Value> ConcatOp::buildGradients(OpBuilder &b,
                                            ArrayRef<Value> resultGrads) {
  SmallVector<Value> grads;
  int64_t start = 0, dim = getDim();
  for (Value x : getInputs()) {
    grads.push_back(SliceOp::create(b, getLoc(), x.getType(), resultGrads[0],
                                    getDimAttr(), b.getI64IntegerAttr(start)));
    start += tensorTy(x).getDimSize(dim);
  }
  return grads;
}
