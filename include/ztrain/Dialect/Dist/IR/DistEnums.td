//===- DistEnums.td - dist dialect enums -------------------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_DISTENUMS_TD
#define ZTRAIN_DIALECT_DIST_DISTENUMS_TD

include "mlir/IR/EnumAttr.td"

def Dist_Reduction : I32EnumAttr<"Reduction", "how a collective combines ranks", [
    I32EnumAttrCase<"sum", 0>,
    I32EnumAttrCase<"mean", 1>]> {
  let cppNamespace = "::ztrain::dist";
}

def Dist_MemorySpace : I32EnumAttr<"MemorySpace",
    "where a model state lives between steps", [
    I32EnumAttrCase<"device", 0>,
    I32EnumAttrCase<"host", 1>,
    I32EnumAttrCase<"nvme", 2>]> {
  let cppNamespace = "::ztrain::dist";
  let genSpecializedAttr = 0;
}

#endif // ZTRAIN_DIALECT_DIST_DISTENUMS_TD
