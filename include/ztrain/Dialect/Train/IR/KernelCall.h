//===- KernelCall.h - A runtime kernel call, described by its op -*- C++ -*-===//
//
// Part of the ztrain project.
//
// What a compute op asks of the runtime, in the op's own terms: the
// kernel's name in the ABI table (runtime/include/ztrt_abi.def, without the
// `ztrt_` prefix), the element type it runs in, and its arguments in ABI
// order: tensors of the op (operands and results, which the lowering turns
// into buffer pointers) and scalars. An op describes its call through
// RuntimeKernelOpInterface; lower-to-runtime emits it. So the lowering has
// no case per compute op: a new op that maps to a kernel only describes
// the call (see docs/adding-an-op.md).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_TRAIN_IR_KERNELCALL_H
#define ZTRAIN_DIALECT_TRAIN_IR_KERNELCALL_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace ztrain::train {

/// One argument of a kernel call.
struct KernelArg {
  enum Kind {
    Buffer,   ///< the buffer of `value` (an operand or result of the op)
    I64,      ///< int64_t `i`
    I32,      ///< int32_t `i`
    F64,      ///< double `f`
    I64Array, ///< a constant int64_t array (shapes, permutations, masks)
    DType,    ///< the ztrt_dtype code (int32_t) of element type `type`
    LearningRate, ///< double: the step's learning rate, ztrt_lr(ctx, `f`)
                  ///< (`f` is the compiled one; the executable's --lr and
                  ///< --lr-schedule decide)
    Hyper,        ///< double: optimizer hyper-parameter `i` (a HyperParam)
                  ///< of the run, ztrt_hyper(ctx, `i`, `f`), `f` compiled
  } kind;
  mlir::Value value;
  int64_t i = 0;
  double f = 0.0;
  llvm::SmallVector<int64_t> array;
  mlir::Type type;

  static KernelArg buffer(mlir::Value v) { return {Buffer, v}; }
  static KernelArg i64(int64_t v) { return {I64, {}, v}; }
  static KernelArg i32(int32_t v) { return {I32, {}, v}; }
  static KernelArg f64(double v) { return {F64, {}, 0, v}; }
  static KernelArg learningRate(double v) { return {LearningRate, {}, 0, v}; }
  /// The values of ztrt.h's ztrt_hyper_id (lower-to-runtime checks).
  enum HyperParam { Beta1, Beta2, Eps, WeightDecay, Momentum, Dampening };
  static KernelArg hyper(HyperParam which, double compiled) {
    return {Hyper, {}, which, compiled};
  }
  static KernelArg i64Array(llvm::ArrayRef<int64_t> v) {
    return {I64Array, {}, 0, 0.0, llvm::SmallVector<int64_t>(v)};
  }
  static KernelArg dtype(mlir::Type elementType) {
    return {DType, {}, 0, 0.0, {}, elementType};
  }
};

struct KernelCall {
  /// The ABI name without `ztrt_` and without an element-type suffix.
  std::string kernel;
  /// The element type the kernel computes in (of its floating-point
  /// tensors; integer ids and labels are always i32).
  mlir::Type elementType;
  llvm::SmallVector<KernelArg> args;
};

/// The call of an elementwise kernel: the op's operands, its result, the
/// element count.
KernelCall elementwiseKernelCall(mlir::Operation *op, llvm::StringRef kernel);

/// The number of elements of a static tensor value.
int64_t numElements(mlir::Value v);
/// A tensor seen as rows x cols, cols its last dimension (1 for a 0-d one).
std::pair<int64_t, int64_t> rowsCols(mlir::Value v);
/// The element type of a tensor value.
mlir::Type elementTypeOf(mlir::Value v);

} // namespace ztrain::train

#endif // ZTRAIN_DIALECT_TRAIN_IR_KERNELCALL_H
