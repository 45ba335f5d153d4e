//===- DistTypes.td - dist dialect types -------------------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_DISTTYPES_TD
#define ZTRAIN_DIALECT_DIST_DISTTYPES_TD

include "mlir/IR/AttrTypeBase.td"
include "ztrain/Dialect/Dist/IR/DistDialect.td"

def Dist_TokenType : TypeDef<Dist_Dialect, "Token"> {
  let mnemonic = "token";
  let summary = "a collective in flight";
  let description = [{
    The result of a `dist.*_start` op: the collective has been issued to the
    communication stream and progresses while the ops after it compute.
    Exactly one `dist.wait` takes the token and yields the collective's
    results; until then the collective's operands must not be overwritten
    and its results do not exist.
  }];
}

#endif // ZTRAIN_DIALECT_DIST_DISTTYPES_TD
