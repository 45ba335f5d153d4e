//===- DistOps.td - dist dialect operations ----------------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_DISTOPS_TD
#define ZTRAIN_DIALECT_DIST_DISTOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "ztrain/Dialect/Dist/IR/DistDialect.td"
include "ztrain/Dialect/Dist/IR/DistEnums.td"
include "ztrain/Dialect/Dist/IR/DistAttrs.td"
include "ztrain/Dialect/Dist/IR/DistInterfaces.td"

// Collectives have value semantics: every rank runs the same program, so
// any rewrite (CSE, dead-code removal, reordering of independent ones) is
// applied on every rank alike.
class Dist_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, !listconcat(traits, [Pure,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>,
        DeclareOpInterfaceMethods<Dist_CollectiveOpInterface,
                                  ["getCommunicatedBytes"]>])>;

def Dist_AllReduceOp : Dist_CollectiveOp<"all_reduce", [SameOperandsAndResultType]> {
  let summary = "sum or mean of a tensor over the ranks of a grid";
  let description = [{
    Every rank gets the elementwise sum (or mean) of the operand over all
    ranks. Stage-0 data parallelism averages gradients with it.

    ```mlir
    %g = dist.all_reduce mean %grad on @dp : tensor<1024x256xf32>
    ```

    **Constraints:**
    - `@grid` is a one-dimensional `shard.grid` with a static size.
  }];
  let arguments = (ins Dist_Reduction:$reduction, AnyStaticShapeTensor:$input,
                       FlatSymbolRefAttr:$grid);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$reduction $input `on` $grid attr-dict `:` type($result)";
}

def Dist_ReduceScatterOp : Dist_CollectiveOp<"reduce_scatter"> {
  let summary = "reduce over ranks, each rank keeping its chunk";
  let description = [{
    The operand's dim 0 is split into N equal chunks; rank r gets the sum
    (or mean) over all ranks of chunk r. ZeRO stages 2 and 3 reduce
    gradients this way, each rank keeping the shard it updates.

    ```mlir
    %shard = dist.reduce_scatter mean %flat on @dp : tensor<1024xf32> -> tensor<256xf32>
    ```

    **Constraints:**
    - operand dim 0 = result dim 0 x grid size; other dims equal;
    - element types equal.
  }];
  let arguments = (ins Dist_Reduction:$reduction, AnyStaticShapeTensor:$input,
                       FlatSymbolRefAttr:$grid);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $reduction $input `on` $grid attr-dict `:` type($input) `->` type($result)
  }];
}

def Dist_AllGatherOp : Dist_CollectiveOp<"all_gather"> {
  let summary = "concatenation of every rank's tensor along dim 0";
  let description = [{
    Every rank gets the operands of all ranks concatenated along dim 0 in
    rank order. ZeRO gathers partitioned parameters this way.

    ```mlir
    %full = dist.all_gather %shard on @dp : tensor<256xf32> -> tensor<1024xf32>
    ```

    **Constraints:**
    - result dim 0 = operand dim 0 x grid size; other dims equal;
    - element types equal.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$grid);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$input `on` $grid attr-dict `:` type($input) `->` type($result)";
}

def Dist_BroadcastOp : Dist_CollectiveOp<"broadcast", [SameOperandsAndResultType]> {
  let summary = "every rank gets the root rank's tensor";
  let description = [{
    ```mlir
    %w = dist.broadcast %w0 on @dp root 0 : tensor<1024xf32>
    ```

    **Constraints:**
    - `root` is a rank of the grid.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$grid,
                       I64Attr:$root);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$input `on` $grid `root` $root attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// ZeRO's partitioned parameters
//===----------------------------------------------------------------------===//

def Dist_PadFlatOp : Op<Dist_Dialect, "pad_flat", [Pure]> {
  let summary = "flattens a tensor and pads it with zeros";
  let description = [{
    The row-major elements of the operand followed by zeros up to the
    result's size: the flat buffer ZeRO reduce-scatters, N equal shards.

    ```mlir
    %flat = dist.pad_flat %dw : tensor<7x3xf32> -> tensor<24xf32>
    ```

    **Constraints:**
    - the result is one-dimensional, no smaller than the operand, with the
      same element type.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

// Collectives on a partitioned parameter's storage: they read or write
// module-level state, so they carry memory effects instead of being pure.
class Dist_ParamCollectiveOp<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, !listconcat(traits, [
        DeclareOpInterfaceMethods<SymbolUserOpInterface>,
        DeclareOpInterfaceMethods<Dist_CollectiveOpInterface,
                                  ["getCommunicatedBytes"]>])>;

def Dist_GatherParamOp : Dist_ParamCollectiveOp<"gather_param",
    [MemoryEffects<[MemRead]>]> {
  let summary = "the full value of a parameter partitioned at rest";
  let description = [{
    ZeRO stage 3 keeps each parameter as one flat shard per rank and
    all-gathers it before use, once for the forward pass and again for the
    backward pass; the gathered copy is released after its last use.

    ```mlir
    %w = dist.gather_param @fc1.weight on @dp : tensor<128x784xf32>
    ```

    **Constraints:**
    - `@param` is a `train.param` of the result type with a
      `#dist.partition` over `@grid`.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, FlatSymbolRefAttr:$grid);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$param `on` $grid attr-dict `:` type($result)";
}

def Dist_AllGatherParamOp : Dist_ParamCollectiveOp<"all_gather_param",
    [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "gathers every rank's updated slice of a parameter";
  let description = [{
    ZeRO stages 1 and 2 keep parameters replicated but update them by
    slice (each rank owns the optimizer states of one slice). After the
    sharded updates, this writes every rank's slice into every rank's
    parameter storage, in place.

    ```mlir
    dist.all_gather_param @fc1.weight on @dp
    ```

    **Constraints:**
    - `@param` is a `train.param` stored replicated (no `#dist.partition`).
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, FlatSymbolRefAttr:$grid);
  let assemblyFormat = "$param `on` $grid attr-dict";
}

#endif // ZTRAIN_DIALECT_DIST_DISTOPS_TD
