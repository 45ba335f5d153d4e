//===- TrainDialect.h - The train dialect -----------------------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_TRAIN_IR_TRAINDIALECT_H
#define ZTRAIN_DIALECT_TRAIN_IR_TRAINDIALECT_H

#include "mlir/IR/Dialect.h"

#include "ztrain/Dialect/Train/IR/TrainDialect.h.inc"

namespace ztrain::train {
/// Unit attribute on the func.func that computes the loss (and, after the
/// training passes, the whole step).
inline constexpr llvm::StringLiteral kEntryAttr = "train.entry";
/// Argument attribute naming a step input (the data file's tensor name).
inline constexpr llvm::StringLiteral kInputNameAttr = "train.name";
/// Set by train-autodiff: the parameters whose gradients the entry function
/// returns after the loss, in order.
inline constexpr llvm::StringLiteral kGradientsAttr = "train.gradients";
/// Set by train-optimizer: the entry function is a complete training step.
inline constexpr llvm::StringLiteral kStepAttr = "train.step";
/// Set by train-optimizer on the module: a human-readable optimizer summary.
inline constexpr llvm::StringLiteral kOptimizerAttr = "train.optimizer";
/// Set by train-precision on the module: the mixed-precision policy,
/// `{param = bf16, reduce = f32}` (the parameters' and the gradient
/// reduction's element types).
inline constexpr llvm::StringLiteral kPrecisionAttr = "train.precision";
/// Set by train-precision on the module for fp16: the dynamic loss scaling
/// policy, `{init = 65536.0, window = 1000, hysteresis = 2, min = 1.0}`
/// (DeepSpeed's initial scale, scale window, hysteresis and minimum scale).
inline constexpr llvm::StringLiteral kLossScaleAttr = "train.loss_scale";
/// Unit attribute on the forward-only copy of the entry function that
/// train-eval-entry makes (the executable's evaluation: loss, no gradients,
/// no update).
inline constexpr llvm::StringLiteral kEvalAttr = "train.eval";
/// Unit attribute on the forward copy that returns the logits of a model
/// whose loss is a cross-entropy (train-eval-entry): the executable's
/// --sample.
inline constexpr llvm::StringLiteral kLogitsAttr = "train.logits";
/// Unit attribute a model puts on a forward op of the entry function: its
/// result is a checkpoint, kept for the backward pass, and ends a segment
/// that train-recompute may recompute (torch.utils.checkpoint's segment
/// boundary; the Python builders mark each transformer block's output).
inline constexpr llvm::StringLiteral kCheckpointAttr = "train.checkpoint";
/// Unit attribute train-recompute puts on the ops it added: a recomputation
/// in the backward pass of a forward op (zero-report counts their FLOPs).
inline constexpr llvm::StringLiteral kRecomputedAttr = "train.recomputed";
/// Set by train-recompute on the module: the policy it applied (`full` or
/// `selective`).
inline constexpr llvm::StringLiteral kRecomputeAttr = "train.recompute";
/// Set by train-optimizer on the module with gradient accumulation: the
/// number of micro-batches per optimizer step the step was compiled for
/// (i64 > 1; the executable's default, --grad-accum-steps overrides it).
inline constexpr llvm::StringLiteral kGradAccumAttr = "train.grad_accum_steps";
} // namespace ztrain::train

#endif // ZTRAIN_DIALECT_TRAIN_IR_TRAINDIALECT_H
