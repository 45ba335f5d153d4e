//===- TrainGradients.cpp - Backward rules of the train ops ---------------===//
//
// Part of the ztrain project.
//
// The gradient rules with more logic than creating a few ops (matmul,
// transpose, reduce, concat), and the helpers every rule may use. The other
// rules are declared beside their ops in TrainOps.td (`let gradient`).
// train-autodiff drives them in reverse program order.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace ztrain::train;
using namespace ztrain::train::grad;

static RankedTensorType tensorTy(Value v) {
  return cast<RankedTensorType>(v.getType());
}

Value ztrain::train::grad::scaleBy(OpBuilder &b, Location loc, Value x,
                                   double factor) {
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

SmallVector<int64_t> ztrain::train::grad::leadingDims(int64_t n) {
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d < n; ++d)
    dims.push_back(d);
  return dims;
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

/// The adjoint of a cast is the incoming adjoint cast back.
SmallVector<Value> CastOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> resultGrads) {
  Value dy = resultGrads.front();
  if (!dy)
    return {Value()};
  return {CastOp::create(b, getLoc(), getInput().getType(), dy)};
}
