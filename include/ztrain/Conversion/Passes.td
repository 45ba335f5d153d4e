//===- Passes.td - ztrain conversion passes ----------------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_CONVERSION_PASSES_TD
#define ZTRAIN_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def LowerToRuntime : Pass<"lower-to-runtime", "::mlir::ModuleOp"> {
  let summary = "Lowers a training step to calls into the ztrt runtime";
  let description = [{
    Turns the entry function of a complete training step (after
    `train-optimizer`) into `func.func @ztrain_step(%ctx: !llvm.ptr)`, a
    straight-line sequence of `ztrt_*` calls on opaque buffer pointers, and
    embeds the model descriptor (`ztrain_descriptor`, a NUL-terminated
    string: parameters, states, inputs, optimizer) the runtime's `main`
    reads. The runtime functions are declared from the one ABI table,
    `runtime/include/ztrt_abi.def`, that the runtime's header is also
    generated from.

    Buffers: every tensor value gets a buffer from `ztrt_alloc` with a
    memory category (gradients for the values the optimizer consumes,
    `gathered_parameters` for gathered parameters, "other" for the packed
    buffers of gradient buckets, activations otherwise), freed right after
    its last use (a `dist.release` is a use); reshapes alias their operand;
    parameter, state and input buffers belong to the runtime
    (`ztrt_param`, `ztrt_state`, `ztrt_input`).

    Asynchronous collectives become `ztrt_*_start` calls returning a
    handle and `ztrt_wait(handle)`: a gathered parameter's buffer is
    allocated at its start, a one-tensor reduce-scatter writes straight into
    its result's buffer, and a bucket is packed (`ztrt_copy_2d`, rank-major
    for a reduce-scatter) at its start and unpacked at its wait. Operands of
    a one-tensor collective stay allocated until its wait.

    Partitioned steps (after `zero-insert-collectives`): the descriptor
    records the grid size and each state's per-rank storage (`store E full`
    for padded replicated parameters, `store E shard` for slices); `dist`
    collectives become `ztrt_all_reduce`, `ztrt_reduce_scatter` and
    `ztrt_all_gather`, and a sharded update addresses this rank's slice
    at `ztrt_rank(ctx) * slice` bytes into the parameter. A partitioned
    step whose gradients are not synchronized is rejected.

    Before:
    ```mlir
    %h = train.relu %x : tensor<32x128xf32>
    ```
    After:
    ```mlir
    %c0_i32 = arith.constant 0 : i32        // ZTRT_F32 (bf16 1, f16 2)
    %c3_i32 = arith.constant 3 : i32        // ZTRT_CAT_ACTIVATIONS
    %c16384_i64 = arith.constant 16384 : i64 // bytes
    %c4096_i64 = arith.constant 4096 : i64   // elements
    ...
    %buf = llvm.call @ztrt_alloc(%ctx, %c16384_i64, %c3_i32) : (!llvm.ptr, i64, i32) -> !llvm.ptr
    llvm.call @ztrt_relu(%ctx, %c0_i32, %x, %buf, %c4096_i64) : (!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, i64) -> ()
    ```

    The step functions and the `ztrt_*` declarations are built in the LLVM
    dialect directly (`llvm.func`, `llvm.call`, `llvm.getelementptr`): a
    large model's step has hundreds of thousands of calls, and converting
    them afterwards was a fifth of its compile time. Only the uniqued
    constants are `arith.constant`; `finalize-llvm` converts them.

    A `train.fused` region (train-fuse-elementwise) becomes a generated
    kernel, `llvm.func internal @ztrain_fused.N(!llvm.ptr, i64, i64)` (and
    its AVX-512 copy `@ztrain_fused.N.avx512`), built from scf, arith, math
    and vector ops and converted with MLIR's own patterns to the LLVM
    dialect, function by function; the step calls it through
    `ztrt_fused(ctx, name, kernel, wide, args, items, item_elements)` with
    its buffers in a pointer array. Identical regions share one kernel.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::cf::ControlFlowDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::LLVM::LLVMDialect"];
  let statistics = [
    Statistic<"numCalls", "runtime-calls", "ztrt_* calls emitted">,
    Statistic<"numBuffers", "buffers", "Buffers allocated per step">,
    Statistic<"numFusedKernels", "fused-kernels",
              "Kernels generated for train.fused regions">
  ];
}

def FinalizeLLVM : Pass<"finalize-llvm", "::mlir::ModuleOp"> {
  let summary = "Finish the lowered module in the LLVM dialect";
  let description = [{
    After `lower-to-runtime` the step functions are in the LLVM dialect but
    for their uniqued `arith.constant`s; this pass replaces those with
    `llvm.mlir.constant`, visiting each op once. When the module holds
    anything else outside the LLVM dialect (a function the model carried
    besides its entries), it runs the upstream conversions instead
    (`convert-arith-to-llvm`, `convert-func-to-llvm`,
    `reconcile-unrealized-casts`) over the module, as the pipeline did
    before: they cost a second per 100,000 calls even with nothing to
    convert, which is why they are not run unconditionally.

    Before:
    ```mlir
    %c4_i64 = arith.constant 4 : i64
    llvm.call @ztrt_add(%ctx, %c0_i32, %a, %b, %out, %c4_i64) : (...) -> ()
    ```
    After:
    ```mlir
    %0 = llvm.mlir.constant(4 : i64) : i64
    llvm.call @ztrt_add(%ctx, %1, %a, %b, %out, %0) : (...) -> ()
    ```
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
  let statistics = [
    Statistic<"numConstants", "constants", "arith.constant ops converted">
  ];
}

def OutlineLongFunctions
    : Pass<"outline-long-functions", "::mlir::ModuleOp"> {
  let summary = "Cut long lowered functions into a chain of bounded ones";
  let description = [{
    A lowered step is one straight-line function of runtime calls: a
    million of them for the largest models. LLVM's code generation works a
    function at a time and keeps all of a function's machine code, frame
    and register state live until its end; at that size it dominates the
    compile time (and a function is the unit that can be compiled in
    parallel). This pass cuts every `llvm.func` of more than four times
    `max-ops` operations into runs of at most `max-ops` consecutive
    operations of a block, moves each run into an internal function
    `<name>.part<N>`, and calls it in the run's place. Values a run uses
    from outside become arguments; those it defines and the rest of the
    function uses come back as its result (a struct when there are
    several). Constants and global addresses are not passed: each part
    makes its own copies; nor are buffer addresses (`llvm.getelementptr`
    with constant offsets): each part recomputes the addresses it uses
    from their base, so a layer whose thousands of buffers are live at
    once does not become thousands of arguments. Operations with regions
    and block terminators stay where they are. The calls run the same runtime calls in the same
    order: the executable computes exactly what it did before.

    Before (max-ops=2, the function longer than 8 ops):
    ```mlir
    llvm.func @ztrain_step(%ctx: !llvm.ptr) {
      %c4 = llvm.mlir.constant(4 : i64) : i64
      %a = llvm.call @ztrt_arena(%ctx, ...) : (...) -> !llvm.ptr
      %b = llvm.getelementptr %a[16] : (!llvm.ptr) -> !llvm.ptr, i8
      llvm.call @ztrt_add(%ctx, %z, %a, %a, %b, %c4) : (...) -> ()
      ...
    }
    ```
    After:
    ```mlir
    llvm.func internal @ztrain_step.part0(%ctx: !llvm.ptr) -> !llvm.ptr {
      %a = llvm.call @ztrt_arena(%ctx, ...) : (...) -> !llvm.ptr
      %b = llvm.getelementptr %a[16] : (!llvm.ptr) -> !llvm.ptr, i8
      llvm.return %b : !llvm.ptr
    }
    llvm.func @ztrain_step(%ctx: !llvm.ptr) {
      %b = llvm.call @ztrain_step.part0(%ctx) : (!llvm.ptr) -> !llvm.ptr
      ...
    }
    ```
  }];
  let options = [
    Option<"maxOps", "max-ops", "int64_t", /*default=*/"1024",
           "Operations per outlined part (a function longer than four "
           "times this is cut)">
  ];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
  let statistics = [
    Statistic<"numParts", "parts", "functions outlined">
  ];
}

def RerollCallRuns : Pass<"reroll-call-runs", "::mlir::ModuleOp"> {
  let summary = "Make loops of long runs of like runtime calls";
  let description = [{
    A lowered step calls the runtime once per operation, in order. A graph
    of many small like operations (a wide layer of independent adds, a long
    chain of them) becomes hundreds of thousands of consecutive calls that
    differ only in the buffers they touch, and LLVM generates code for each
    (about 15 us a call at -O0: most of such a module's compile time). This
    pass looks at the calls of a block whose results are unused (the
    addresses and constants between them are stepped over; any other
    operation, or a call whose result is used, separates them) and the
    shape of each: its callee, and every argument either the same value, a
    byte address `base + constant` (`llvm.getelementptr` with one constant
    index) off the same base, or an integer constant of the same type. A
    run is a stretch of such calls whose shapes repeat with a period of at
    most `max-period` calls (add, add, ...; or add, mul, sub, add, mul,
    sub, ...) at least `min-trips` times; from each call on, the period
    that covers the most calls is taken, the shorter on a tie. Each run
    becomes a call of an internal function `<name>.loop<N>`: a loop whose
    every trip makes one period's calls, reading their changing numbers
    (offsets, integers) from a constant table `<name>.table<N>` (a row per
    trip). Numbers that never change are not in the table. The calls are
    the same calls in the same order: the executable computes exactly what
    it did before, bitwise.

    Before (min-trips=2):
    ```mlir
    %o0 = llvm.getelementptr %arena[%c0] : (!llvm.ptr, i64) -> !llvm.ptr, i8
    llvm.call @ztrt_add(%ctx, %s, %x, %w, %o0, %c4) : (...) -> ()
    %o1 = llvm.getelementptr %arena[%c16] : (!llvm.ptr, i64) -> !llvm.ptr, i8
    llvm.call @ztrt_add(%ctx, %s, %x, %w, %o1, %c4) : (...) -> ()
    ```
    After:
    ```mlir
    llvm.mlir.global internal constant @ztrain_step.table0(dense<[0, 16]>
        : tensor<2xi64>) : !llvm.array<2 x i64>
    llvm.func internal @ztrain_step.loop0(%ctx: !llvm.ptr, %x: !llvm.ptr,
        %w: !llvm.ptr, %arena: !llvm.ptr) {
      // for i in [0, 2): %o = %arena + table0[i]; ztrt_add(..., %o, 4)
    }
    llvm.call @ztrain_step.loop0(%ctx, %x, %w, %arena) : (...) -> ()
    ```
  }];
  let options = [
    Option<"minTrips", "min-trips", "int64_t", /*default=*/"32",
           "The fewest trips a run needs to become a loop">,
    Option<"maxPeriod", "max-period", "int64_t", /*default=*/"8",
           "The most calls a trip of a loop makes">
  ];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
  let statistics = [
    Statistic<"numLoops", "loops", "runs made loops">,
    Statistic<"numCalls", "calls", "calls moved into loops">
  ];
}

#endif // ZTRAIN_CONVERSION_PASSES_TD
