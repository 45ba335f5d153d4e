// ztrain-compile --device-memory=BYTES warns when the compiled plan needs
// more per rank than that; the count is lower-to-runtime's (every byte the
// executable will allocate: zero-report's predicted peak, 1779236 bytes for
// the MLP with AdamW) and compilation goes on.
// RUN: ztrain-compile %ztrain_src/examples/mlp.mlir --device-memory=1000000 --emit=mlir -o %t.mlir 2>&1 | FileCheck %s --check-prefix=WARN
// WARN: ztrain-compile: warning: the compiled plan needs 1779236 bytes per rank, more than --device-memory=1000000 (use more ranks, a higher ZeRO stage, recompute or a smaller batch)
// RUN: FileCheck %s --check-prefix=ATTR < %t.mlir
// ATTR: ztrain.planned_bytes = 1779236
// RUN: ztrain-opt %ztrain_src/examples/mlp.mlir --ztrain-training=optimizer=adamw --plan-memory --zero-report=format=json -o /dev/null | FileCheck %s --check-prefix=REPORT
// REPORT: "predicted_peak": 1779236

// Enough memory: no warning.
// RUN: ztrain-compile %ztrain_src/examples/mlp.mlir --device-memory=1779236 --emit=mlir -o %t.ok.mlir 2>&1 | FileCheck %s --check-prefix=QUIET --allow-empty
// QUIET-NOT: warning
