//===- ElementType.h - Sizes from element types -----------------*- C++ -*-===//
//
// Part of the ztrain project.
//
// Every byte count in the compiler derives from a tensor's element type
// through these; no pass assumes a size per element.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_TRAIN_IR_ELEMENTTYPE_H
#define ZTRAIN_DIALECT_TRAIN_IR_ELEMENTTYPE_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Value.h"

namespace ztrain {

/// The bytes of one element of `type`: a scalar type, or a shaped type's
/// element type.
inline int64_t elementBytes(mlir::Type type) {
  if (auto shaped = mlir::dyn_cast<mlir::ShapedType>(type))
    type = shaped.getElementType();
  return static_cast<int64_t>((type.getIntOrFloatBitWidth() + 7) / 8);
}

/// The bytes of a static tensor of type `type` (or of value `v`).
inline int64_t tensorBytes(mlir::Type type) {
  return mlir::cast<mlir::RankedTensorType>(type).getNumElements() *
         elementBytes(type);
}
inline int64_t tensorBytes(mlir::Value v) { return tensorBytes(v.getType()); }

} // namespace ztrain

#endif // ZTRAIN_DIALECT_TRAIN_IR_ELEMENTTYPE_H
