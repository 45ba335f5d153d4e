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

#endif // ZTRAIN_DIALECT_DIST_DISTENUMS_TD
