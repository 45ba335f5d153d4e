//===- DistAttrs.td - dist dialect attributes --------------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_DISTATTRS_TD
#define ZTRAIN_DIALECT_DIST_DISTATTRS_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "ztrain/Dialect/Dist/IR/DistDialect.td"
include "ztrain/Dialect/Dist/IR/DistEnums.td"

class Dist_Attr<string name, string attrMnemonic> : AttrDef<Dist_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def Dist_PartitionAttr : Dist_Attr<"Partition", "partition"> {
  let summary = "a state stored as equal flat shards over a grid";
  let description = [{
    Attached as `dist.partition` to a `train.param` or `train.state`: the
    tensor is flattened (row-major) and rank r of `grid` stores elements
    [r * shard, (r + 1) * shard), zero-padded past the element count. The
    shard size is ceil(elements / N), so the padding is at most N - 1
    elements.

    ```mlir
    train.state @w.exp_avg : tensor<1000x3xf32> of @w {dist.partition = #dist.partition<@dp, 750>}
    ```
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$grid, "int64_t":$shard);
  let assemblyFormat = "`<` $grid `,` $shard `>`";
}

def Dist_ZeroAttr : Dist_Attr<"Zero", "zero"> {
  let summary = "the ZeRO stage a module is partitioned for";
  let description = [{
    Set as `dist.zero` on the module by `zero-partition`. Stage 0 keeps every
    state replicated (data parallelism with averaged gradients); stage 1
    partitions optimizer states, stage 2 also gradients, stage 3 also
    parameters.

    ```mlir
    module attributes {dist.zero = #dist.zero<stage = 2, grid = @dp>} { ... }
    ```
  }];
  let parameters = (ins "int64_t":$stage, "::mlir::FlatSymbolRefAttr":$grid);
  let assemblyFormat = "`<` `stage` `=` $stage `,` `grid` `=` $grid `>`";
  // The stage is 0, 1, 2 or 3.
  let genVerifyDecl = 1;
}

def Dist_MeshAttr : Dist_Attr<"Mesh", "mesh"> {
  let summary = "the data-parallel mesh of hybrid sharding (HSDP / MiCS)";
  let description = [{
    Set as `dist.mesh` on the module by `zero-partition` when the
    data-parallel ranks form a mesh of `dp = shard x replicate`: model states
    are partitioned over the ranks of a shard group (`@dp_shard`, the grid
    of the module's `#dist.zero`) and replicated across the `replicate`
    groups (`@dp_replicate`). World rank r is shard rank `r % shard` of
    shard group `r / shard`: a shard group is `shard` consecutive ranks, so
    that a launcher's node (consecutive ranks) holds whole groups. Gradients
    are reduce-scattered inside the shard group and all-reduced across the
    replicate group; parameters are gathered inside the shard group only.

    `ranks_per_node` is the node size the plan's communication is priced
    with: zero-report splits every collective's bytes into those that stay
    on a node and those that cross to another (`intra_node` /
    `inter_node`), as the runtime measures them.

    ```mlir
    module attributes {dist.zero = #dist.zero<stage = 3, grid = @dp_shard>,
                       dist.mesh = #dist.mesh<shard = @dp_shard, replicate = @dp_replicate, ranks_per_node = 2>} {
      shard.grid @dp(shape = 4)
      shard.grid @dp_shard(shape = 2)
      shard.grid @dp_replicate(shape = 2)
    ```
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$shard,
                        "::mlir::FlatSymbolRefAttr":$replicate,
                        "int64_t":$ranksPerNode);
  let assemblyFormat = [{
    `<` `shard` `=` $shard `,` `replicate` `=` $replicate `,`
    `ranks_per_node` `=` $ranksPerNode `>`
  }];
  let genVerifyDecl = 1;
}

def Dist_HpzAttr : Dist_Attr<"Hpz", "hpz"> {
  let summary = "ZeRO++'s secondary partition (hpZ) of stage 3's parameters";
  let description = [{
    Set as `dist.hpz` on the module by `zero-partition` with
    `hpz-partition-size=H` at stage 3: states stay partitioned over every
    rank (the `#dist.zero` grid), and after the forward pass each rank keeps
    its shard of each gathered parameter over `grid` (H consecutive ranks, a
    node: `dist.slice_shard`), from which the backward pass gathers the
    parameter inside the group (`dist.all_gather` on `grid`) instead of
    over every rank. `ranks_per_node` is the node size zero-report prices
    links with, as in `#dist.mesh`.

    ```mlir
    module attributes {dist.zero = #dist.zero<stage = 3, grid = @dp>,
                       dist.hpz = #dist.hpz<grid = @dp_hpz, ranks_per_node = 2>} {
      shard.grid @dp(shape = 4)
      shard.grid @dp_hpz(shape = 2)
    ```
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$grid,
                        "int64_t":$ranksPerNode);
  let assemblyFormat = [{
    `<` `grid` `=` $grid `,` `ranks_per_node` `=` $ranksPerNode `>`
  }];
}

def Dist_SlotAttr : Dist_Attr<"Slot", "slot"> {
  let summary = "a buffer's place in one of the step's arenas";
  let description = [{
    Set by `plan-memory`: the buffer of a value (or a bucket's packed
    buffer) lives at byte `offset` of the arena `arena`, `bytes` long, from
    its allocation point to its last use. Arenas are one block per memory
    category (`activations`, `gathered_parameters`, `other`), allocated once
    per step; their sizes are the module's `dist.arenas`.

    ```mlir
    %y = train.matmul %x, %w {dist.slots = [#dist.slot<"activations", 4096, 512>]} ...
    ```
  }];
  let parameters = (ins StringRefParameter<>:$arena, "int64_t":$offset,
                        "int64_t":$bytes);
  let assemblyFormat = "`<` $arena `,` $offset `,` $bytes `>`";
}

def Dist_MemorySpaceAttr : EnumAttr<Dist_Dialect, Dist_MemorySpace, "space"> {
  let summary = "the memory a model state lives in between steps";
  let description = [{
    Attached as `dist.space` to a `train.state` by `zero-offload` (absent:
    `device`). `host`: the state lives in host memory and its optimizer
    update runs on the host (ZeRO-Offload); `nvme`: it lives in a file of
    the rank's swap directory (the executable's `--nvme-path`) and is
    swapped into a host buffer for its update and back out after it
    (ZeRO-Infinity), by `dist.swap_in_start` / `dist.swap_out_start`.

    ```mlir
    train.state @w.exp_avg : tensor<1000x3xf32> of @w {dist.space = #dist.space<nvme>}
    ```
  }];
  let assemblyFormat = "`<` $value `>`";
}

#endif // ZTRAIN_DIALECT_DIST_DISTATTRS_TD
