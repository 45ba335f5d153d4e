//===- DistDialect.td - The dist dialect -------------------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_DISTDIALECT_TD
#define ZTRAIN_DIALECT_DIST_DISTDIALECT_TD

include "mlir/IR/OpBase.td"

def Dist_Dialect : Dialect {
  let name = "dist";
  let cppNamespace = "::ztrain::dist";
  let summary = "Distributed training plans: partitions and collectives";
  let description = [{
    The `dist` dialect describes how a training step is spread over the
    ranks of a data-parallel grid. The grid itself is the upstream
    `shard.grid` (a one-dimensional `shard.grid @dp(shape = N)`), so that
    plans interoperate with upstream sharding tools.

    - `#dist.partition` says that a module-level state (`train.param`,
      `train.state`) is stored partitioned over the grid the way ZeRO
      partitions it: flattened and split into equal contiguous shards, the
      last one zero-padded.
    - `#dist.zero` records the ZeRO stage a module was partitioned for.
    - The collective ops (`dist.all_reduce`, `dist.reduce_scatter`,
      `dist.all_gather`, `dist.broadcast`) have value semantics on tensors;
      their verifiers check the shape rules against the grid size, and they
      share `CollectiveOpInterface`, which gives the bytes each moves.
    - Asynchronous collectives (`dist.gather_param_start`,
      `dist.reduce_scatter_start`, `dist.all_reduce_start`,
      `dist.all_gather_param_start`) return a `!dist.token`; `dist.wait`
      turns it into the results. `overlap-schedule` places the starts ahead
      of the compute they overlap and the waits just before first use, and
      `dist.release` ends a gathered parameter's lifetime.
    - `#dist.space` (the `dist.space` attribute of a `train.state`) says
      where a state lives between steps: `device`, `host` or `nvme`
      (`zero-offload`); `dist.swap_in_start` / `dist.swap_out_start` move an
      nvme-resident state through a host buffer around its update.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let useDefaultTypePrinterParser = 1;
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

#endif // ZTRAIN_DIALECT_DIST_DISTDIALECT_TD
