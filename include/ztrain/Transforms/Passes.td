//===- Passes.td - ztrain passes over whole compilations ---*- tablegen -*-===//
//
// Part of the ztrain project.
//
// Passes that run the named pipelines themselves (and so live above the
// dialects' libraries).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_TRANSFORMS_PASSES_TD
#define ZTRAIN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanSearch : Pass<"plan-search", "::mlir::ModuleOp"> {
  let summary = "Prints the fastest plan that fits a memory budget per rank";
  let description = [{
    Runs on a model (forward + loss, before `ztrain-training`) and leaves it
    unchanged: it compiles a copy of the model for every candidate plan,
    ZeRO stage (0-3 when `dp` > 1), recompute policy (none, selective,
    full), tiling bound at stage 3 (none, half and a quarter of the largest
    parameter), overlap (with prefetch depth 1 or 2 and resharding after the
    forward pass on or off at stage 3), up to `plan-memory`, prices each
    with zero-report's exact per-rank bytes and a cost model (bytes sent
    over `link-gbps` plus `latency-us` per collective; matmul FLOPs over
    `device-tflops` plus the bytes the other kernels read and write over
    `memory-gbps`, recomputation included; an overlapped plan takes the
    larger of the two, a synchronous one their sum), and prints the
    table of candidates, the fastest plan whose predicted peak fits
    `memory-budget`, as `ztrain-compile` flags and as the pipeline string,
    or, when none fits, the smallest predicted peak.

    When no plan fits, the search runs again with the optimizer states on
    nvme (`zero-offload`), and at stage 3 (one rank included) with the
    parameters there too: the budget then counts the host swap buffers as
    well as the device's peak, and the step pays the swaps' bytes over
    `nvme-gbps`. Offload is never chosen when a plan fits without it.

    With `host-memory-budget` the plan is for a device backend (cuda):
    `memory-budget` bounds the device's peak (zero-report's
    `device_backend.device_peak`, the swap buffers' device copies
    included) and `host-memory-budget` the host memory offload uses
    (pinned swap buffers, host-placed states, offloaded activations). The
    offload round then first tries host memory: ZeRO-R's Pa+cpu (the
    activations recomputation reads, with a recompute policy), the
    optimizer states (a quarter, half, all), both, and at stage 3 the
    parameter shards with the states; then nvme as above.
    Every byte crossing the host link per step (zero-report's
    `host_to_device_per_step` + `device_to_host_per_step`) is priced at
    `host-link-gbps`.

    With `inter-node-link-gbps` and `ranks-per-node` the ranks are on
    nodes joined by a slower link: every plan's bytes are priced by link
    class (zero-report's intra- and inter-node wire bytes, at `link-gbps`
    and `inter-node-link-gbps`), and at stages 1-3 the search also tries
    hybrid sharding with one shard group per node (`dp-replicate` =
    dp / ranks-per-node: states sharded inside a node, replicated across
    nodes; `3 r2` in the table). It wins where the link between nodes
    limits the step and its larger share of the states fits.

    `ztrain-compile --memory-budget=BYTES` runs the same search and
    compiles the plan it chooses. The precision and the optimizer are the
    user's (they change the numbers a run computes, not only its memory),
    given here as `precision` and `optimizer`; `precision=auto` (the
    compiler's `--precision=auto`) hands the precision to the search too:
    fp32, then bf16, whose matmuls are priced at `device-tflops-16bit`.

    ```
    ztrain-opt gpt.mlir --plan-search="memory-budget=16GB dp=64" -o /dev/null
    ```
  }];
  let options = [
    Option<"memoryBudget", "memory-budget", "std::string", "\"\"",
           "Bytes per rank the plan may use (1e10, 16GB, 16GiB)">,
    Option<"dp", "dp", "int64_t", "1", "Data-parallel ranks">,
    Option<"precision", "precision", "::ztrain::Precision",
           "::ztrain::Precision::fp32",
           "fp32, bf16 or fp16 (as ztrain-training's), or auto: searched "
           "(fp32 or bf16)",
           [{::ztrain::optionValues<::ztrain::Precision>(/*search=*/true)}]>,
    Option<"optimizer", "optimizer", "::ztrain::OptimizerKind",
           "::ztrain::OptimizerKind::adamw",
           "sgd, adam or adamw (as ztrain-training's)",
           [{::ztrain::optionValues<::ztrain::OptimizerKind>()}]>,
    Option<"linkGBps", "link-gbps", "double", "25.0",
           "Cost model: GB/s one rank sends">,
    Option<"interNodeLinkGBps", "inter-node-link-gbps", "double", "0.0",
           "Cost model: GB/s one rank sends to other nodes (0: every byte "
           "at link-gbps); with ranks-per-node, bytes are priced by link "
           "class and hybrid sharding (a shard group per node) is searched">,
    Option<"ranksPerNode", "ranks-per-node", "int64_t", "0",
           "Consecutive ranks per node (with inter-node-link-gbps)">,
    Option<"latencyUs", "latency-us", "double", "10.0",
           "Cost model: microseconds per collective beyond its bytes">,
    Option<"deviceTflops", "device-tflops", "double", "100.0",
           "Cost model: matmul TFLOP/s of one rank's device">,
    Option<"device16Tflops", "device-tflops-16bit", "double", "200.0",
           "Cost model: bf16 / fp16 matmul TFLOP/s (precision=auto)">,
    Option<"memoryGBps", "memory-gbps", "double", "2000.0",
           "Cost model: GB/s the other kernels (elementwise, norms, "
           "softmax) move through one rank's device memory">,
    Option<"nvmeGBps", "nvme-gbps", "double", "2.0",
           "Cost model: GB/s one rank reads and writes its swap directory "
           "(offloaded plans)">,
    Option<"hostMemoryBudget", "host-memory-budget", "std::string", "\"\"",
           "A device backend's plan: host memory per rank for offload "
           "(64GB); memory-budget then bounds the device's peak alone">,
    Option<"hostLinkGBps", "host-link-gbps", "double", "25.0",
           "Cost model: GB/s between one rank's device and host memory, "
           "each way (with host-memory-budget)">,
    Option<"hostMemoryGBps", "host-memory-gbps", "double", "50.0",
           "Cost model: GB/s the host's optimizer step (host-placed "
           "states on a device backend) reads and writes host memory "
           "(with host-memory-budget)">,
    Option<"format", "format", "::ztrain::OutputFormat",
           "::ztrain::OutputFormat::text", "text (a table) or json",
           [{::ztrain::optionValues<::ztrain::OutputFormat>()}]>,
    Option<"output", "output", "std::string", "\"-\"",
           "Where to print the search">
  ];
}

#endif // ZTRAIN_TRANSFORMS_PASSES_TD
