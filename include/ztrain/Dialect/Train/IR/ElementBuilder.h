//===- ElementBuilder.h - The per-element arithmetic of fused ops -*- C++
//-*-===//
//
// Part of the ztrain project.
//
// A fusible op (FusibleOpInterface) states what it computes for one element
// by calling this builder from its `let element` rule in TrainOps.td; the
// fused-kernel generator (lower-to-runtime) calls the rule with a builder
// of the width it generates (a scalar f32 or vector<N x f32>) and gets back
// arith/math ops that compute exactly what the runtime's kernel computes.
//
// "Exactly" is bitwise: every function below performs the same float
// operations, in the same order, as its counterpart in
// runtime/backends/cpu/VecMath.h and runtime/backends/Elementwise.def
// (cited at each), each rounded separately: no fastmath flags, no fused
// multiply-add, no reassociation, and exp/erf as calls of the C library's
// expf/erff (the runtime calls the same scalar functions). The float
// literals are copied character for character. docs/design.md, "Fusion",
// has the contract; test/e2e/test_fusion.py checks it on every rule.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_TRAIN_IR_ELEMENTBUILDER_H
#define ZTRAIN_DIALECT_TRAIN_IR_ELEMENTBUILDER_H

#include "mlir/IR/Builders.h"

#include <functional>

namespace ztrain::train {

class ElementBuilder {
public:
  /// Emits a call of the C library's scalar function `name` (expf, erff)
  /// on one f32 value at the builder's insertion point.
  using LibCall = std::function<mlir::Value(mlir::OpBuilder &, mlir::Location,
                                            llvm::StringRef, mlir::Value)>;

  /// Values are f32 scalars (width 0) or vector<width x f32>.
  ElementBuilder(mlir::OpBuilder &b, mlir::Location loc, unsigned width,
                 LibCall libCall);

  mlir::OpBuilder &builder() { return b; }
  mlir::Location loc;
  unsigned width() const { return lanes; }
  /// f32 or vector<width x f32>; i32 or vector<width x i32>.
  mlir::Type floatType() const;
  mlir::Type intType() const;

  // --- Primitives: one IEEE operation each ----------------------------------
  mlir::Value constant(float value);
  mlir::Value intConstant(int32_t value);
  mlir::Value add(mlir::Value x, mlir::Value y);
  mlir::Value sub(mlir::Value x, mlir::Value y);
  mlir::Value mul(mlir::Value x, mlir::Value y);
  mlir::Value div(mlir::Value x, mlir::Value y);
  /// -x (the sign flipped, as C's unary minus).
  mlir::Value neg(mlir::Value x);
  /// C's `x < y` and `x <= y` (ordered: false when either is NaN).
  mlir::Value lt(mlir::Value x, mlir::Value y);
  mlir::Value le(mlir::Value x, mlir::Value y);
  mlir::Value eq(mlir::Value x, mlir::Value y);
  /// C's `c ? x : y`.
  mlir::Value select(mlir::Value c, mlir::Value x, mlir::Value y);
  mlir::Value fabs(mlir::Value x);
  mlir::Value copysign(mlir::Value x, mlir::Value sign);
  mlir::Value sqrt(mlir::Value x);
  /// The C library's expf / erff, lane by lane.
  mlir::Value expf(mlir::Value x);
  mlir::Value erff(mlir::Value x);

  // --- VecMath.h, function by function --------------------------------------
  mlir::Value expNonPositive(mlir::Value x);
  mlir::Value tanh(mlir::Value x);
  mlir::Value gelu(mlir::Value v);
  mlir::Value geluGrad(mlir::Value dy, mlir::Value v);
  mlir::Value geluErf(mlir::Value v);
  mlir::Value erfGrad(mlir::Value dy, mlir::Value v);
  mlir::Value geluErfGrad(mlir::Value dy, mlir::Value v);
  mlir::Value sigmoid(mlir::Value v);
  mlir::Value sigmoidGrad(mlir::Value dy, mlir::Value y);
  mlir::Value silu(mlir::Value v);
  mlir::Value siluGrad(mlir::Value dy, mlir::Value v);
  mlir::Value rsqrt(mlir::Value v);
  mlir::Value rsqrtGrad(mlir::Value dy, mlir::Value y);

  // --- Storage ---------------------------------------------------------------
  /// `x` rounded to `elementType` and widened back: what storing it in a
  /// tensor of that type and loading it again gives. The identity for f32;
  /// for bf16 the runtime's rounding (base/DType.h: to nearest even, NaN
  /// kept quiet with its sign and payload), as integer operations.
  mlir::Value roundTo(mlir::Type elementType, mlir::Value x);
  /// The bf16 bits of `x` (an i32 or vector of i32 whose low 16 bits are
  /// the bf16 value), by the same sequence.
  mlir::Value bf16Bits(mlir::Value x);
  /// The f32 of bf16 bits held in the low half of i32 lanes.
  mlir::Value fromBf16Bits(mlir::Value bits);

private:
  mlir::Value splat(mlir::TypedAttr scalar, mlir::Type type);
  mlir::Value lanewise(llvm::StringRef name, mlir::Value x);

  mlir::OpBuilder &b;
  unsigned lanes;
  LibCall libCall;
};

} // namespace ztrain::train

#endif // ZTRAIN_DIALECT_TRAIN_IR_ELEMENTBUILDER_H
