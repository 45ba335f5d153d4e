//===- TrainOps.cpp - train dialect operations ----------------------------===//
//
// Part of the ztrain project.
//
// The shared checks (shapes, names, element types) and the compute ops'
// verifiers; the step-level ops and queries are in TrainStep.cpp. Verifiers
// say what is wrong in the user's terms: which dimension, what was
// expected, what was found.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/TrainOps.h"
#include "ztrain/Dialect/Train/IR/ElementBuilder.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <limits>

using namespace mlir;
using namespace ztrain::train;

/// Formats a shape as `[2, 3, 4]` for diagnostics.
static std::string fmtShape(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << '[';
  llvm::interleaveComma(shape, os);
  os << ']';
  return s;
}

static ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

std::optional<int64_t>
ztrain::train::checkedElementCount(ArrayRef<int64_t> shape,
                                   int64_t elementBytes) {
  int64_t count = elementBytes;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(count, d, &count))
      return std::nullopt;
  return elementBytes ? count / elementBytes : 0;
}

std::string ztrain::train::shapeProblem(RankedTensorType type) {
  ArrayRef<int64_t> shape = type.getShape();
  for (auto [d, size] : llvm::enumerate(shape))
    if (size == 0)
      return ("has a zero-size dimension (dim " + Twine(d) + " of " +
              fmtShape(shape) +
              "); empty tensors are not supported")
          .str();
  if (type.hasStaticShape() &&
      !checkedElementCount(shape, ztrain::elementBytes(type)))
    return "has shape " + fmtShape(shape) +
           ", whose byte size overflows int64";
  return "";
}

LogicalResult ztrain::train::verifyTensorShapes(Operation *op) {
  auto check = [&](Type type, StringRef what, unsigned i) -> LogicalResult {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor)
      return success();
    std::string problem = shapeProblem(tensor);
    if (problem.empty())
      return success();
    return op->emitOpError() << what << " #" << i << " " << problem;
  };
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (failed(check(v.getType(), "operand", i)))
      return failure();
  for (auto [i, v] : llvm::enumerate(op->getResults()))
    if (failed(check(v.getType(), "result", i)))
      return failure();
  return success();
}

std::string ztrain::train::nameProblem(StringRef name) {
  // (As unsigned bytes: UTF-8 names are names.)
  if (name.empty() || llvm::any_of(name, [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u <= ' ' || u == 127;
      }))
    return "must be non-empty and contain no whitespace or control characters "
           "(it becomes a checkpoint / data key)";
  // Checkpoint indexes and reports are JSON, which is UTF-8.
  const auto *begin = reinterpret_cast<const llvm::UTF8 *>(name.data());
  const llvm::UTF8 *at = begin;
  if (!llvm::isLegalUTF8String(&at, begin + name.size()))
    return ("is not valid UTF-8 (byte 0x" +
            llvm::utohexstr(static_cast<unsigned char>(name[at - begin])) +
            " at offset " + std::to_string(at - begin) +
            "; it becomes a checkpoint / data key)");
  return "";
}

/// The candidate closest to `name` by edit distance, when it is close
/// enough to be a likely misspelling; empty otherwise.
static StringRef nearestName(StringRef name, ArrayRef<StringRef> candidates) {
  StringRef best;
  unsigned bestDistance = std::max<unsigned>(2, name.size() / 3) + 1;
  for (StringRef candidate : candidates) {
    unsigned d = name.edit_distance(candidate, /*AllowReplacements=*/true,
                                    bestDistance);
    if (d < bestDistance) {
      bestDistance = d;
      best = candidate;
    }
  }
  return best;
}

LogicalResult ztrain::train::verifyKnownAttributes(Operation *op) {
  for (NamedAttribute attr : op->getDiscardableAttrs()) {
    StringRef name = attr.getName().getValue();
    if (name.contains('.'))
      continue; // a dialect attribute: its dialect verifies it
    SmallVector<StringRef> own;
    if (std::optional<RegisteredOperationName> info =
            op->getName().getRegisteredInfo())
      for (StringAttr known : info->getAttributeNames())
        // (operandSegmentSizes and the like are the format's, not the
        // user's)
        if (!known.getValue().ends_with("SegmentSizes"))
          own.push_back(known.getValue());
    InFlightDiagnostic diag = op->emitOpError()
                              << "has no attribute '" << name << "'";
    if (StringRef near = nearestName(name, own); !near.empty())
      diag << " (did you mean '" << near << "'?)";
    if (own.empty()) {
      diag << "; it takes none";
    } else {
      diag << "; its attributes: ";
      llvm::interleaveComma(own, diag, [&](StringRef n) { diag << n; });
    }
    return diag;
  }
  return success();
}

bool ztrain::train::isAlwaysF32(Value v) {
  Operation *op = v.getDefiningOp();
  // The loss of a cross-entropy is f32 whatever the logits are, and so is
  // the adjoint that seeds its gradient.
  if (isa_and_nonnull<CrossEntropyOp, CrossEntropyGradOp,
                      CrossEntropyWithGradOp>(op) &&
      cast<RankedTensorType>(v.getType()).getRank() == 0)
    return true;
  // Attention's row log-sum-exps.
  if (auto attention = dyn_cast_or_null<AttentionOp>(op))
    return v == attention.getLse();
  return false;
}

LogicalResult ztrain::train::verifySameFloatElementType(Operation *op) {
  bool lossExempt =
      isa<CrossEntropyOp, CrossEntropyGradOp, CrossEntropyWithGradOp>(op);
  Type first;
  std::string firstWhat;
  auto check = [&](Value v, StringRef what, unsigned i) -> LogicalResult {
    auto tensor = dyn_cast<RankedTensorType>(v.getType());
    if (!tensor || !isa<FloatType>(tensor.getElementType()))
      return success();
    if (lossExempt && tensor.getRank() == 0)
      return success();
    // An f32 value that stays f32 whatever the op's element type: this
    // op's own lse (or loss) result, and the lse operand of attention's
    // adjoint. (Another op reading such a value is checked as usual.)
    if ((v.getDefiningOp() == op && isAlwaysF32(v)) ||
        (isa<AttentionGradOp>(op) &&
         v == cast<AttentionGradOp>(op).getLse()))
      return success();
    std::string name = (what + " #" + Twine(i)).str();
    if (!first) {
      first = tensor.getElementType();
      firstWhat = name;
      return success();
    }
    if (tensor.getElementType() == first)
      return success();
    return op->emitOpError()
           << "mixes element types: " << firstWhat << " is " << first
           << " but " << name << " is " << tensor.getElementType()
           << "; every floating-point tensor of the op must have the same "
              "element type";
  };
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (failed(check(v, "operand", i)))
      return failure();
  for (auto [i, v] : llvm::enumerate(op->getResults()))
    if (failed(check(v, "result", i)))
      return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Compute ops
//===----------------------------------------------------------------------===//

LogicalResult CastOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (in.getShape() != out.getShape())
    return emitOpError() << "changes the shape from " << fmtShape(in.getShape())
                         << " to " << fmtShape(out.getShape())
                         << "; a cast changes only the element type";
  if (in.getElementType() == out.getElementType())
    return emitOpError() << "casts " << in.getElementType()
                         << " to itself";
  return success();
}

bool BiasAddOp::isLastDimOperand(unsigned index) { return index == 1; }

YieldOp FusedOp::getYield() {
  return cast<YieldOp>(getBody().front().getTerminator());
}

ArrayRef<int64_t> FusedOp::getIterationShape() { return shapeOf(getResult(0)); }

LogicalResult FusedOp::verify() {
  if (getNumResults() == 0)
    return emitOpError() << "has no results";
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError() << "has " << getInputs().size()
                         << " inputs but its body takes "
                         << body.getNumArguments() << " arguments";
  for (auto [input, arg] : llvm::zip(getInputs(), body.getArguments()))
    if (input.getType() != arg.getType())
      return emitOpError() << "input of type " << input.getType()
                           << " enters the body as " << arg.getType();
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError() << "body must end in train.yield";
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError() << "yields " << yield.getValues().size()
                         << " values whose types are not its results'";
  ArrayRef<int64_t> shape = getIterationShape();
  for (Operation &op : body.without_terminator()) {
    auto fusible = dyn_cast<FusibleOpInterface>(&op);
    if (!fusible || op.getNumRegions() != 0)
      return op.emitOpError() << "is not fusible: a train.fused body holds "
                                 "fusible elementwise ops only";
    for (Value r : op.getResults()) {
      Type element = getElementTypeOrSelf(r.getType());
      if (!element.isF32() && !element.isBF16())
        return op.emitOpError()
               << "computes " << element << "; fused regions hold f32 and bf16";
      if (shapeOf(r) != shape)
        return op.emitOpError()
               << "has shape " << fmtShape(shapeOf(r))
               << ", not the region's iteration shape " << fmtShape(shape);
    }
    for (OpOperand &operand : op.getOpOperands()) {
      ArrayRef<int64_t> s = shapeOf(operand.get());
      bool lastDim = fusible.isLastDimOperand(operand.getOperandNumber());
      if (lastDim ? (s.size() != 1 || shape.empty() || s[0] != shape.back())
                  : s != shape)
        return op.emitOpError()
               << "operand " << operand.getOperandNumber() << " of shape "
               << fmtShape(s) << " does not match the region's iteration shape "
               << fmtShape(shape);
    }
  }
  return success();
}

LogicalResult BiasAddOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getInput()), b = shapeOf(getBias());
  if (x.empty())
    return emitOpError() << "input must have rank >= 1";
  if (b.size() != 1 || b[0] != x.back())
    return emitOpError() << "bias shape " << fmtShape(b) << " must be ["
                         << x.back() << "] (the last dim of input "
                         << fmtShape(x) << ")";
  return success();
}

/// A matrix product's contracted dimensions disagree: both operands' shapes
/// and what each contributes (train.matmul, train.matmul_acc).
static LogicalResult contractedDimsDiffer(Operation *op, ArrayRef<int64_t> a,
                                          bool transA, int64_t ka,
                                          ArrayRef<int64_t> b, bool transB,
                                          int64_t kb) {
  return op->emitOpError() << "contracted dims differ: lhs " << fmtShape(a)
                           << (transA ? " (transposed)" : "") << " gives " << ka
                           << ", rhs " << fmtShape(b)
                           << (transB ? " (transposed)" : "") << " gives "
                           << kb;
}

LogicalResult MatmulOp::verify() {
  ArrayRef<int64_t> a = shapeOf(getLhs()), b = shapeOf(getRhs()),
                    c = shapeOf(getResult());
  if (a.size() < 2 || b.size() < 2)
    return emitOpError() << "operands must have rank >= 2, got lhs "
                         << fmtShape(a) << " and rhs " << fmtShape(b);
  if (b.size() != 2 && b.size() != a.size())
    return emitOpError() << "rhs must be a matrix or have the rank of lhs ("
                         << a.size() << "), got " << fmtShape(b);
  size_t batch = a.size() - 2;
  if (b.size() == a.size())
    for (size_t d = 0; d < batch; ++d)
      if (a[d] != b[d])
        return emitOpError() << "batch dim " << d << " differs: lhs " << a[d]
                             << " vs rhs " << b[d];
  int64_t m = getTransposeA() ? a[batch + 1] : a[batch];
  int64_t ka = getTransposeA() ? a[batch] : a[batch + 1];
  size_t rb = b.size() - 2;
  int64_t kb = getTransposeB() ? b[rb + 1] : b[rb];
  int64_t n = getTransposeB() ? b[rb] : b[rb + 1];
  if (ka != kb)
    return contractedDimsDiffer(*this, a, getTransposeA(), ka, b,
                                getTransposeB(), kb);
  SmallVector<int64_t> expected(a.begin(), a.begin() + batch);
  expected.push_back(m);
  expected.push_back(n);
  if (c != ArrayRef<int64_t>(expected))
    return emitOpError() << "result shape " << fmtShape(c) << " must be "
                         << fmtShape(expected);
  return success();
}

LogicalResult MatmulAccOp::verify() {
  ArrayRef<int64_t> a = shapeOf(getLhs()), b = shapeOf(getRhs()),
                    c = shapeOf(getAcc());
  if (a.size() != 2 || b.size() != 2 || c.size() != 2)
    return emitOpError() << "operands must be matrices, got acc " << fmtShape(c)
                         << ", lhs " << fmtShape(a) << " and rhs "
                         << fmtShape(b);
  if (elementTypeOf(getLhs()) != elementTypeOf(getRhs()))
    return emitOpError() << "lhs and rhs must have the same element type, got "
                         << elementTypeOf(getLhs()) << " and "
                         << elementTypeOf(getRhs());
  int64_t m = getTransposeA() ? a[1] : a[0], ka = getTransposeA() ? a[0] : a[1];
  int64_t kb = getTransposeB() ? b[1] : b[0], n = getTransposeB() ? b[0] : b[1];
  if (ka != kb)
    return contractedDimsDiffer(*this, a, getTransposeA(), ka, b,
                                getTransposeB(), kb);
  if (c[0] != m || c[1] != n)
    return emitOpError() << "acc shape " << fmtShape(c) << " must be [" << m
                         << ", " << n << "]";
  return success();
}

LogicalResult LayerNormOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getInput()), g = shapeOf(getGamma());
  if (x.empty())
    return emitOpError() << "input must have rank >= 1";
  if (g.size() != 1 || g[0] != x.back())
    return emitOpError() << "gamma/beta shape " << fmtShape(g) << " must be ["
                         << x.back() << "] (the last dim of input)";
  double eps = getEpsilon().convertToDouble();
  if (!(eps > 0.0) || std::isinf(eps))
    return emitOpError() << "epsilon must be positive and finite, got " << eps;
  return success();
}

LogicalResult RMSNormOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getInput()), g = shapeOf(getGamma());
  if (x.empty())
    return emitOpError() << "input must have rank >= 1";
  if (g.size() != 1 || g[0] != x.back())
    return emitOpError() << "gamma shape " << fmtShape(g) << " must be ["
                         << x.back() << "] (the last dim of input)";
  double eps = getEpsilon().convertToDouble();
  if (!(eps > 0.0) || !std::isfinite(eps))
    return emitOpError() << "epsilon must be positive and finite, got " << eps;
  return success();
}

LogicalResult RotaryEmbeddingOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getInput());
  int64_t rank = x.size(), seqDim = getSeqDim();
  if (rank < 2)
    return emitOpError() << "input must have rank >= 2 ([..., seq, ..., "
                            "head_dim]), got "
                         << fmtShape(x);
  if (seqDim < 0 || seqDim >= rank - 1)
    return emitOpError() << "seq_dim " << seqDim << " must be in [0, "
                         << rank - 1 << ") for input " << fmtShape(x)
                         << " (the last dim is the head dim)";
  if (x.back() % 2 != 0)
    return emitOpError() << "the head dim (last dim of " << fmtShape(x)
                         << ") must be even: RoPE rotates pairs of channels";
  double theta = getTheta().convertToDouble();
  if (!(theta > 0.0) || !std::isfinite(theta))
    return emitOpError() << "theta must be positive and finite, got "
                         << theta;
  if (std::optional<ArrayRef<double>> s = getLlama3Scaling()) {
    if (s->size() != 4)
      return emitOpError() << "llama3_scaling must hold 4 numbers (factor, "
                              "low_freq_factor, high_freq_factor, "
                              "original_max_position_embeddings), got "
                           << s->size();
    const double factor = (*s)[0], low = (*s)[1], high = (*s)[2],
                 original = (*s)[3];
    if (!(factor >= 1.0) || !std::isfinite(factor))
      return emitOpError() << "llama3_scaling factor must be finite and >= 1, "
                              "got "
                           << factor;
    if (!(low > 0.0) || !(high > low) || !std::isfinite(high))
      return emitOpError() << "llama3_scaling needs 0 < low_freq_factor < "
                              "high_freq_factor, got "
                           << low << " and " << high;
    if (!(original > 0.0) || !std::isfinite(original))
      return emitOpError() << "llama3_scaling original_max_position_embeddings "
                              "must be positive and finite, got "
                           << original;
  }
  return success();
}

/// A mask broadcast over leading dims: its shape is a suffix of `x`'s
/// (`what` names x in the message).
static LogicalResult verifyMaskSuffix(Operation *op, Value mask, Value x,
                                      StringRef what) {
  ArrayRef<int64_t> xs = shapeOf(x), m = shapeOf(mask);
  if (m.size() > xs.size() || xs.take_back(m.size()) != m)
    return op->emitOpError() << "mask shape " << fmtShape(m)
                             << " must be a suffix of the " << what
                             << " shape " << fmtShape(xs);
  return success();
}

LogicalResult MaskedFillOp::verify() {
  return verifyMaskSuffix(*this, getMask(), getInput(), "input");
}

LogicalResult WhereOp::verify() {
  return verifyMaskSuffix(*this, getMask(), getResult(), "result");
}

LogicalResult DropoutOp::verify() {
  double p = getProbability().convertToDouble();
  if (!(p >= 0.0 && p <= 1.0))
    return emitOpError() << "probability must be in [0, 1], got " << p;
  // I64Attr's getter is unsigned: read the attribute's signed value.
  int64_t stream = getStreamAttr().getInt();
  if (stream < 0)
    return emitOpError() << "stream must be >= 0, got " << stream;
  return success();
}

LogicalResult SoftmaxOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getInput());
  if (x.empty())
    return emitOpError() << "input must have rank >= 1";
  if (getCausal() && (x.size() < 2 || x[x.size() - 1] != x[x.size() - 2]))
    return emitOpError() << "causal softmax needs the last two dims equal "
                            "(a [T, T] score matrix), got "
                         << fmtShape(x);
  return success();
}

/// q [..., Tq, D], k and v [..., Tk, D], the same leading dims; causal
/// needs Tq == Tk; a finite positive scale.
static LogicalResult verifyAttentionShapes(Operation *op, Value q, Value k,
                                           Value v, bool causal,
                                           double scale) {
  ArrayRef<int64_t> qs = shapeOf(q), ks = shapeOf(k), vs = shapeOf(v);
  if (qs.size() < 2)
    return op->emitOpError() << "query must be [..., T, D] (rank >= 2), got "
                             << fmtShape(qs);
  if (ks != vs)
    return op->emitOpError() << "key " << fmtShape(ks) << " and value "
                             << fmtShape(vs) << " must have the same shape";
  // Grouped-query attention: key / value heads (dim -3) may be fewer than
  // the query's, each shared by a group of consecutive query heads.
  const int64_t rank = qs.size();
  const bool grouped = rank >= 3 && ks.size() == qs.size() &&
                       ks.drop_back(3) == qs.drop_back(3) &&
                       ks[rank - 3] > 0 && qs[rank - 3] % ks[rank - 3] == 0;
  if (ks.size() != qs.size() || ks.back() != qs.back() ||
      (ks.drop_back(2) != qs.drop_back(2) && !grouped))
    return op->emitOpError()
           << "key " << fmtShape(ks) << " must be [..., Tk, D] with query "
           << fmtShape(qs)
           << "'s leading dims and D (or, grouped-query, [..., Hk, Tk, D] "
              "with Hk dividing the query's heads)";
  if (causal && ks[ks.size() - 2] != qs[qs.size() - 2])
    return op->emitOpError() << "causal attention needs as many keys as "
                                "queries, got Tq = "
                             << qs[qs.size() - 2]
                             << " and Tk = " << ks[ks.size() - 2];
  if (!std::isfinite(scale) || scale <= 0.0)
    return op->emitOpError() << "scale must be finite and positive, got "
                             << scale;
  return success();
}

/// lse is f32 with q's shape without its last dim.
static LogicalResult verifyLse(Operation *op, Value q, Value lse) {
  ArrayRef<int64_t> qs = shapeOf(q);
  auto expected = RankedTensorType::get(
      qs.drop_back(), Float32Type::get(op->getContext()));
  if (lse.getType() != expected)
    return op->emitOpError() << "lse must be " << expected << ", got "
                             << lse.getType();
  return success();
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionShapes(*this, getQuery(), getKey(), getValue(),
                                   getCausal(),
                                   getScale().convertToDouble())))
    return failure();
  return verifyLse(*this, getQuery(), getLse());
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttentionShapes(*this, getQuery(), getKey(), getValue(),
                                   getCausal(),
                                   getScale().convertToDouble())))
    return failure();
  return verifyLse(*this, getQuery(), getLse());
}

LogicalResult ReshapeOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "element type changes from "
                         << in.getElementType() << " to "
                         << out.getElementType();
  if (in.getNumElements() != out.getNumElements())
    return emitOpError() << "element count changes from "
                         << in.getNumElements() << " " << fmtShape(in.getShape())
                         << " to " << out.getNumElements() << " "
                         << fmtShape(out.getShape());
  return success();
}

LogicalResult TransposeOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getInput()), y = shapeOf(getResult());
  ArrayRef<int64_t> perm = getPermutation();
  if (perm.size() != x.size())
    return emitOpError() << "permutation has " << perm.size()
                         << " entries for an operand of rank " << x.size();
  SmallVector<bool> seen(x.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= (int64_t)x.size() || seen[p])
      return emitOpError() << "permutation " << fmtShape(perm)
                           << " is not a permutation of [0, " << x.size()
                           << ")";
    seen[p] = true;
  }
  SmallVector<int64_t> expected;
  for (int64_t p : perm)
    expected.push_back(x[p]);
  if (y != ArrayRef<int64_t>(expected))
    return emitOpError() << "result shape " << fmtShape(y) << " must be "
                         << fmtShape(expected);
  return success();
}

/// Checks that `dims` is strictly increasing in [0, rank) and that `big`
/// without `dims` equals `small`. `what` names the op's role in messages.
static LogicalResult verifyDims(Operation *op, ArrayRef<int64_t> dims,
                                ArrayRef<int64_t> big,
                                ArrayRef<int64_t> small, StringRef bigName,
                                StringRef smallName) {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] >= (int64_t)big.size())
      return op->emitOpError() << "dim " << dims[i] << " is out of range for "
                               << bigName << " of rank " << big.size();
    if (i > 0 && dims[i] <= dims[i - 1])
      return op->emitOpError()
             << "dims " << fmtShape(dims) << " must be strictly increasing";
  }
  SmallVector<int64_t> expected;
  for (size_t d = 0; d < big.size(); ++d)
    if (!llvm::is_contained(dims, (int64_t)d))
      expected.push_back(big[d]);
  if (small != ArrayRef<int64_t>(expected))
    return op->emitOpError() << smallName << " shape " << fmtShape(small)
                             << " must be " << fmtShape(expected) << " ("
                             << bigName << " " << fmtShape(big)
                             << " without dims " << fmtShape(dims) << ")";
  return success();
}

LogicalResult ReduceOp::verify() {
  return verifyDims(*this, getDims(), shapeOf(getInput()),
                    shapeOf(getResult()), "operand", "result");
}

LogicalResult BroadcastOp::verify() {
  return verifyDims(*this, getDims(), shapeOf(getResult()),
                    shapeOf(getInput()), "result", "operand");
}

/// Shared by slice and its adjoint: `part` is `whole` narrowed to
/// [start, start + size) along `dim`.
static LogicalResult verifySlice(Operation *op, ArrayRef<int64_t> whole,
                                 ArrayRef<int64_t> part, int64_t dim,
                                 int64_t start, StringRef wholeName,
                                 StringRef partName) {
  int64_t rank = whole.size();
  if (dim < 0 || dim >= rank)
    return op->emitOpError() << "dim " << dim << " is out of range for "
                             << wholeName << " " << fmtShape(whole);
  if ((int64_t)part.size() != rank)
    return op->emitOpError() << partName << " " << fmtShape(part)
                             << " must have the rank of " << wholeName << " "
                             << fmtShape(whole);
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim && part[d] != whole[d])
      return op->emitOpError()
             << partName << " " << fmtShape(part) << " and " << wholeName
             << " " << fmtShape(whole) << " differ in dim " << d
             << ", which is not the sliced dim " << dim;
  if (start < 0 || start > whole[dim] - part[dim])
    return op->emitOpError()
           << "slice [" << start << ", " << start + part[dim]
           << ") is out of range for dim " << dim << " of size " << whole[dim];
  return success();
}

LogicalResult SliceOp::verify() {
  return verifySlice(*this, shapeOf(getInput()), shapeOf(getResult()),
                     getDim(), getStart(), "operand", "result");
}

LogicalResult SliceGradOp::verify() {
  return verifySlice(*this, shapeOf(getResult()), shapeOf(getGrad()),
                     getDim(), getStart(), "result", "grad");
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "needs at least one operand";
  ArrayRef<int64_t> y = shapeOf(getResult());
  int64_t rank = y.size(), dim = getDim();
  if (dim < 0 || dim >= rank)
    return emitOpError() << "dim " << dim << " is out of range for result "
                         << fmtShape(y);
  int64_t total = 0;
  for (auto [i, v] : llvm::enumerate(getInputs())) {
    ArrayRef<int64_t> x = shapeOf(v);
    if ((int64_t)x.size() != rank)
      return emitOpError() << "operand #" << i << " " << fmtShape(x)
                           << " must have the result's rank " << rank;
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && x[d] != y[d])
        return emitOpError()
               << "operand #" << i << " " << fmtShape(x) << " and result "
               << fmtShape(y) << " differ in dim " << d
               << ", which is not the concatenated dim " << dim;
    total += x[dim];
  }
  if (total != y[dim])
    return emitOpError() << "the operands' sizes along dim " << dim
                         << " add up to " << total << ", but the result has "
                         << y[dim];
  return success();
}

/// Shared by embedding and its adjoint: `table` (named `tableName`) is
/// [vocab, dim] and `rows` (named `rowsName`) has the ids shape + [dim].
static LogicalResult verifyLookup(Operation *op, ArrayRef<int64_t> table,
                                  StringRef tableName, ArrayRef<int64_t> ids,
                                  ArrayRef<int64_t> rows, StringRef rowsName) {
  if (table.size() != 2)
    return op->emitOpError() << tableName << " must be [vocab, dim], got "
                             << fmtShape(table);
  SmallVector<int64_t> expected(ids.begin(), ids.end());
  expected.push_back(table[1]);
  if (rows != ArrayRef<int64_t>(expected))
    return op->emitOpError() << rowsName << " shape " << fmtShape(rows)
                             << " must be " << fmtShape(expected)
                             << " (ids shape + [dim])";
  return success();
}

LogicalResult EmbeddingOp::verify() {
  return verifyLookup(*this, shapeOf(getTable()), "table", shapeOf(getIds()),
                      shapeOf(getResult()), "result");
}

/// logits [rows, classes] and labels [rows] (a tile's rows inside them);
/// an ignore_index an i32 label.
static LogicalResult verifyCrossEntropy(Operation *op, Value logits,
                                        Value labels,
                                        std::optional<int64_t> ignoreIndex,
                                        std::optional<int64_t> firstRow) {
  if (ignoreIndex && (*ignoreIndex < std::numeric_limits<int32_t>::min() ||
                      *ignoreIndex > std::numeric_limits<int32_t>::max()))
    return op->emitOpError()
           << "ignore_index " << *ignoreIndex << " is not an i32 label";
  ArrayRef<int64_t> l = shapeOf(logits), y = shapeOf(labels);
  if (l.size() != 2)
    return op->emitOpError() << "logits must be [rows, classes], got "
                             << fmtShape(l);
  if (firstRow) {
    if (y.size() != 1 || *firstRow < 0 || *firstRow > y[0] ||
        l[0] > y[0] - *firstRow)
      return op->emitOpError()
             << "tile rows [" << *firstRow << ", " << *firstRow + l[0]
             << ") must lie inside labels " << fmtShape(y);
    return success();
  }
  if (y.size() != 1 || y[0] != l[0])
    return op->emitOpError() << "labels shape " << fmtShape(y)
                             << " must be [" << l[0]
                             << "] (one label per logits row)";
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  return verifyCrossEntropy(*this, getLogits(), getLabels(), getIgnoreIndex(),
                            getFirstRow());
}

LogicalResult CrossEntropyWithGradOp::verify() {
  return verifyCrossEntropy(*this, getLogits(), getLabels(), getIgnoreIndex(),
                            getFirstRow());
}

LogicalResult EmbeddingGradOp::verify() {
  return verifyLookup(*this, shapeOf(getResult()), "result",
                      shapeOf(getIds()), shapeOf(getGrad()), "grad");
}

#define GET_OP_CLASSES
#include "ztrain/Dialect/Train/IR/TrainOps.cpp.inc"
