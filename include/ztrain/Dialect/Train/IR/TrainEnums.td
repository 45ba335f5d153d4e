//===- TrainEnums.td - train dialect enums -----------------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_TRAIN_TRAINENUMS_TD
#define ZTRAIN_DIALECT_TRAIN_TRAINENUMS_TD

include "mlir/IR/EnumAttr.td"
include "ztrain/Dialect/Train/IR/TrainDialect.td"

// `causal` is for buffers only: 1 where the column index exceeds the row
// index in the last two dims (what a causal mask hides), 0 elsewhere.
def Train_InitKind : I32EnumAttr<"InitKind", "parameter or buffer initializer", [
    I32EnumAttrCase<"zeros", 0>,
    I32EnumAttrCase<"ones", 1>,
    I32EnumAttrCase<"normal", 2>,
    I32EnumAttrCase<"uniform", 3>,
    I32EnumAttrCase<"causal", 4>,
    I32EnumAttrCase<"external", 5>]> {
  let cppNamespace = "::ztrain::train";
}

def Train_ReduceKind : I32EnumAttr<"ReduceKind", "reduction kind", [
    I32EnumAttrCase<"sum", 0>,
    I32EnumAttrCase<"mean", 1>,
    I32EnumAttrCase<"max", 2>]> {
  let cppNamespace = "::ztrain::train";
}

#endif // ZTRAIN_DIALECT_TRAIN_TRAINENUMS_TD
