//===- ElementBuilder.cpp - The per-element arithmetic of fused ops -------===//
//
// Part of the ztrain project. See ElementBuilder.h: every function mirrors
// the runtime's, operation by operation; keep them in step.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Train/IR/ElementBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace ztrain::train;

ElementBuilder::ElementBuilder(OpBuilder &b, Location loc, unsigned width,
                               LibCall libCall)
    : loc(loc), b(b), lanes(width), libCall(std::move(libCall)) {}

Type ElementBuilder::floatType() const {
  Type f32 = b.getF32Type();
  return lanes ? Type(VectorType::get({lanes}, f32)) : f32;
}

Type ElementBuilder::intType() const {
  Type i32 = b.getI32Type();
  return lanes ? Type(VectorType::get({lanes}, i32)) : i32;
}

Value ElementBuilder::splat(TypedAttr scalar, Type type) {
  if (auto vector = dyn_cast<VectorType>(type))
    return arith::ConstantOp::create(b, loc,
                                     DenseElementsAttr::get(vector, scalar));
  return arith::ConstantOp::create(b, loc, scalar);
}

Value ElementBuilder::constant(float value) {
  return splat(b.getF32FloatAttr(value), floatType());
}

Value ElementBuilder::intConstant(int32_t value) {
  return splat(b.getI32IntegerAttr(value), intType());
}

Value ElementBuilder::add(Value x, Value y) {
  return arith::AddFOp::create(b, loc, x, y);
}
Value ElementBuilder::sub(Value x, Value y) {
  return arith::SubFOp::create(b, loc, x, y);
}
Value ElementBuilder::mul(Value x, Value y) {
  return arith::MulFOp::create(b, loc, x, y);
}
Value ElementBuilder::div(Value x, Value y) {
  return arith::DivFOp::create(b, loc, x, y);
}
Value ElementBuilder::neg(Value x) { return arith::NegFOp::create(b, loc, x); }
Value ElementBuilder::lt(Value x, Value y) {
  return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x, y);
}
Value ElementBuilder::le(Value x, Value y) {
  return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE, x, y);
}
Value ElementBuilder::eq(Value x, Value y) {
  return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, x, y);
}
Value ElementBuilder::select(Value c, Value x, Value y) {
  return arith::SelectOp::create(b, loc, c, x, y);
}
Value ElementBuilder::fabs(Value x) { return math::AbsFOp::create(b, loc, x); }
Value ElementBuilder::copysign(Value x, Value sign) {
  return math::CopySignOp::create(b, loc, x, sign);
}
Value ElementBuilder::sqrt(Value x) { return math::SqrtOp::create(b, loc, x); }

Value ElementBuilder::lanewise(StringRef name, Value x) {
  if (!lanes)
    return libCall(b, loc, name, x);
  Value out = x;
  for (unsigned i = 0; i < lanes; ++i) {
    Value lane = vector::ExtractOp::create(b, loc, x, int64_t(i));
    out = vector::InsertOp::create(b, loc, libCall(b, loc, name, lane), out,
                                   int64_t(i));
  }
  return out;
}

Value ElementBuilder::expf(Value x) { return lanewise("expf", x); }
Value ElementBuilder::erff(Value x) { return lanewise("erff", x); }

// VecMath.h, expNonPositive: the baseline build's integer floor (the
// AVX-512 build's floor instruction gives the same n: |t| < 2^24).
Value ElementBuilder::expNonPositive(Value x) {
  x = select(lt(x, constant(-87.0f)), constant(-87.0f), x);
  Value t = add(mul(x, constant(1.44269504088896341f)), constant(0.5f));
  t = select(eq(t, t), t, constant(0.0f));
  Value n = arith::FPToSIOp::create(b, loc, intType(), t);
  Value below = lt(t, arith::SIToFPOp::create(b, loc, floatType(), n));
  n = arith::SubIOp::create(b, loc, n,
                            arith::ExtUIOp::create(b, loc, intType(), below));
  Value fx = arith::SIToFPOp::create(b, loc, floatType(), n);
  Value r = sub(sub(x, mul(fx, constant(0.693359375f))),
                mul(fx, constant(-2.12194440e-4f)));
  Value r2 = mul(r, r);
  Value p = add(mul(constant(1.9875691500e-4f), r), constant(1.3981999507e-3f));
  p = add(mul(p, r), constant(8.3334519073e-3f));
  p = add(mul(p, r), constant(4.1665795894e-2f));
  p = add(mul(p, r), constant(1.6666665459e-1f));
  p = add(mul(p, r), constant(5.0000001201e-1f));
  Value y = add(add(mul(p, r2), r), constant(1.0f));
  Value bits = arith::ShLIOp::create(
      b, loc, arith::AddIOp::create(b, loc, n, intConstant(127)),
      intConstant(23));
  Value scale = arith::BitcastOp::create(b, loc, floatType(), bits);
  return mul(y, scale);
}

// VecMath.h, tanh: both branches, one selected.
Value ElementBuilder::tanh(Value x) {
  Value a = fabs(x);
  Value e = expNonPositive(mul(constant(-2.0f), a));
  Value large = div(sub(constant(1.0f), e), add(constant(1.0f), e));
  Value z = mul(x, x);
  Value p =
      add(mul(constant(-5.70498872745e-3f), z), constant(2.06390887954e-2f));
  p = sub(mul(p, z), constant(5.37397155531e-2f));
  p = add(mul(p, z), constant(1.33314422036e-1f));
  p = sub(mul(p, z), constant(3.33332819422e-1f));
  Value small = add(mul(mul(p, z), a), a);
  return copysign(select(lt(a, constant(0.625f)), small, large), x);
}

namespace {
// VecMath.h's constants, as written there.
constexpr float kGeluBeta = 0.7978845608028654f;
constexpr float kGeluKappa = 0.044715f;
constexpr float kGeluErfAlpha = 0.70710678118654752440f;
constexpr float kGeluErfBeta = 0.39894228040143267794f;
constexpr float kTwoOverSqrtPi = 1.12837916709551257390f;
} // namespace

// kGeluBeta * (v + kGeluKappa * v * v * v); 0.5f * v * (1 + tanh(inner)).
Value ElementBuilder::gelu(Value v) {
  Value cube = mul(mul(mul(constant(kGeluKappa), v), v), v);
  Value inner = mul(constant(kGeluBeta), add(v, cube));
  return mul(mul(constant(0.5f), v), add(constant(1.0f), tanh(inner)));
}

Value ElementBuilder::geluGrad(Value dy, Value v) {
  Value vSq = mul(v, v);
  Value inner =
      mul(constant(kGeluBeta), add(v, mul(mul(constant(kGeluKappa), vSq), v)));
  Value t = tanh(inner);
  Value left = mul(constant(0.5f), v);
  Value right = add(constant(1.0f), t);
  Value leftDerivative = mul(constant(0.5f), right);
  // left * (1 - t * t) * kGeluBeta * (1 + 3.0f * kGeluKappa * vSq): the
  // runtime's compiler folds 3.0f * kGeluKappa in float, as this does.
  Value rightDerivative =
      mul(mul(mul(left, sub(constant(1.0f), mul(t, t))), constant(kGeluBeta)),
          add(constant(1.0f), mul(constant(3.0f * kGeluKappa), vSq)));
  return mul(dy, add(leftDerivative, rightDerivative));
}

// v * 0.5f * (1 + erf(v * alpha)).
Value ElementBuilder::geluErf(Value v) {
  return mul(mul(v, constant(0.5f)),
             add(constant(1.0f), erff(mul(v, constant(kGeluErfAlpha)))));
}

// kTwoOverSqrtPi * exp(-(v * v)) * dy.
Value ElementBuilder::erfGrad(Value dy, Value v) {
  return mul(mul(constant(kTwoOverSqrtPi), expf(neg(mul(v, v)))), dy);
}

Value ElementBuilder::geluErfGrad(Value dy, Value v) {
  Value cdf = mul(constant(0.5f),
                  add(constant(1.0f), erff(mul(v, constant(kGeluErfAlpha)))));
  Value pdf =
      mul(expf(mul(mul(constant(-0.5f), v), v)), constant(kGeluErfBeta));
  return mul(dy, add(cdf, mul(v, pdf)));
}

Value ElementBuilder::sigmoid(Value v) {
  return div(constant(1.0f), add(constant(1.0f), expf(neg(v))));
}

// dy * (1 - y) * y.
Value ElementBuilder::sigmoidGrad(Value dy, Value y) {
  return mul(mul(dy, sub(constant(1.0f), y)), y);
}

Value ElementBuilder::silu(Value v) {
  return div(v, add(constant(1.0f), expf(neg(v))));
}

// s = 1 / (1 + exp(-v)); dy * s * (1 + v * (1 - s)).
Value ElementBuilder::siluGrad(Value dy, Value v) {
  Value s = div(constant(1.0f), add(constant(1.0f), expf(neg(v))));
  return mul(mul(dy, s), add(constant(1.0f), mul(v, sub(constant(1.0f), s))));
}

Value ElementBuilder::rsqrt(Value v) { return div(constant(1.0f), sqrt(v)); }

// (-0.5f * dy) * (y * y * y).
Value ElementBuilder::rsqrtGrad(Value dy, Value y) {
  return mul(mul(constant(-0.5f), dy), mul(mul(y, y), y));
}

// base/DType.h, bf16(float): NaN -> (u >> 16) | 0x40; otherwise
// (u + 0x7fff + ((u >> 16) & 1)) >> 16.
Value ElementBuilder::bf16Bits(Value x) {
  Value u = arith::BitcastOp::create(b, loc, intType(), x);
  Value high = arith::ShRUIOp::create(b, loc, u, intConstant(16));
  Value magnitude = arith::AndIOp::create(b, loc, u, intConstant(0x7fffffff));
  Value isNaN = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt,
                                      magnitude, intConstant(0x7f800000));
  Value quiet = arith::OrIOp::create(b, loc, high, intConstant(0x40));
  Value lsb = arith::AndIOp::create(b, loc, high, intConstant(1));
  Value biased = arith::AddIOp::create(
      b, loc, u, arith::AddIOp::create(b, loc, intConstant(0x7fff), lsb));
  Value rounded = arith::ShRUIOp::create(b, loc, biased, intConstant(16));
  return arith::SelectOp::create(b, loc, isNaN, quiet, rounded);
}

Value ElementBuilder::fromBf16Bits(Value bits) {
  Value u = arith::ShLIOp::create(b, loc, bits, intConstant(16));
  return arith::BitcastOp::create(b, loc, floatType(), u);
}

Value ElementBuilder::roundTo(Type elementType, Value x) {
  if (elementType.isF32())
    return x;
  assert(elementType.isBF16() && "fused regions hold f32 and bf16");
  return fromBf16Bits(bf16Bits(x));
}
