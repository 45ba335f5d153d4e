//===- DistInterfaces.td - dist dialect interfaces ---------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_DISTINTERFACES_TD
#define ZTRAIN_DIALECT_DIST_DISTINTERFACES_TD

include "mlir/IR/OpBase.td"

def Dist_CollectiveOpInterface : OpInterface<"CollectiveOpInterface"> {
  let cppNamespace = "::ztrain::dist";
  let description = [{
    A collective over a `shard.grid`. Every collective of a step runs on
    every rank, in the same order; the interface exposes what a plan
    analysis needs: the grid, its size, and the bytes the op moves.
  }];
  let methods = [
    InterfaceMethod<"The grid symbol the collective runs over.",
      "::mlir::FlatSymbolRefAttr", "getGridRef", (ins),
      [{ return $_op.getGridAttr(); }]>,
    InterfaceMethod<[{
        Bytes each rank sends per execution, as the ZeRO paper counts them
        (the bandwidth-optimal ring algorithms): an all-reduce of S bytes
        sends 2 S (N - 1) / N, a reduce-scatter or all-gather of a full
        buffer of S bytes sends S (N - 1) / N, a broadcast of S bytes is
        counted as S (the root's payload). The runtime counts the same.
        `symbols` caches the symbol lookups (a parameter's type) of a walk
        over many collectives.
      }],
      "int64_t", "getCommunicatedBytes",
      (ins "int64_t":$gridSize, "::mlir::SymbolTableCollection &":$symbols)>
  ];
}

#endif // ZTRAIN_DIALECT_DIST_DISTINTERFACES_TD
