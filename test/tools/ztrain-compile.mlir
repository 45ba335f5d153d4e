// REQUIRES: runtime
// The driver: every --emit kind, the per-stage IR dump, and an executable
// that trains.
// RUN: rm -rf %t && mkdir -p %t
// RUN: ztrain-compile %s --emit=mlir | FileCheck %s --check-prefix=MLIR
// RUN: ztrain-compile %s --emit=llvm -o %t/step.ll && FileCheck %s --check-prefix=LL < %t/step.ll
// RUN: ztrain-compile %s --emit=obj -o %t/step.o && test -s %t/step.o
// RUN: ztrain-compile %s -o %t/model --optimizer=sgd --lr=0.5 --dump-ir-dir=%t/ir
// RUN: ls %t/ir | FileCheck %s --check-prefix=DUMP
// A relative -o in a subdirectory (the demo's `-o out/gpt`): the link's
// private directory is next to it, not under the system's temp directory.
// RUN: mkdir -p %t/sub && cd %t && ztrain-compile %s -o sub/rel --optimizer=sgd && test -x %t/sub/rel
// RUN: ls %t/sub | FileCheck %s --check-prefix=REL
// REL: rel
// REL-NOT: tmp
// RUN: touch %t/afile && not ztrain-compile %s -o %t/m2 --dump-ir-dir=%t/afile 2>&1 | FileCheck %s --check-prefix=DUMPFILE
// RUN: not test -e %t/m2
// RUN: FileCheck %s --check-prefix=OPT < %t/ir/04-train-optimizer.mlir
// RUN: FileCheck %s --check-prefix=EVAL < %t/ir/01-train-eval-entry.mlir
// RUN: not %t/model --steps 4 --eval-data %t/eval.safetensors --eval-steps 2 2>&1 | FileCheck %s --check-prefix=NOFILE
// RUN: %t/model --steps 30 --log-every 10 --report %t/report.json | FileCheck %s --check-prefix=STEPS
// RUN: FileCheck %s --check-prefix=REPORT < %t/report.json

// MLIR: llvm.func @ztrain_step(
// MLIR: llvm.func @ztrain_eval(
// LL: @ztrain_descriptor = constant
// LL: define void @ztrain_step(ptr
// DUMPFILE: ztrain-compile: error: --dump-ir-dir: {{.*}}afile is not a directory
// DUMPFILE-NOT: error
// DUMP: 00-input.mlir
// DUMP-NEXT: 01-train-eval-entry.mlir
// DUMP-NEXT: 02-train-autodiff.mlir
// DUMP-NEXT: 03-train-fuse-loss.mlir
// DUMP-NEXT: 04-train-optimizer.mlir
// DUMP-NEXT: 05-plan-memory.mlir
// DUMP-NEXT: 06-lower-to-runtime.mlir
// DUMP-NEXT: 07-finalize-llvm.mlir
// DUMP-NEXT: 08-reroll-call-runs.mlir
// DUMP-NEXT: 09-outline-long-functions.mlir
// DUMP-NEXT: 10-llvm-ir.ll
// The forward-only copy the executable evaluates with.
// EVAL: func.func @f_eval(%{{.*}}) -> tensor<f32> attributes {train.eval}
// EVAL-NEXT: train.param_read @w
// EVAL-NEXT: train.matmul
// EVAL-NEXT: train.cross_entropy
// EVAL-NEXT: return
// NOFILE: ztrain: error: --eval-data: cannot open '{{.*}}eval.safetensors': No such file or directory
// OPT: train.sgd_update @w, %{{.*}} {lr = 5.000000e-01 : f64}
// STEPS: step 10/30 loss
// STEPS: step 20/30 loss
// STEPS: step 30/30 loss
// REPORT: "steps": [

// Learns y = argmax of a fixed linear map of x on synthetic data: the loss
// is checked by the e2e tests; this only shows the driver's outputs work.
train.param @w : tensor<3x4xf32> init(normal, 0.02)
func.func @f(%x: tensor<8x4xf32> {train.name = "x"}, %y: tensor<8xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<3x4xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<8x4xf32>, tensor<3x4xf32>) -> tensor<8x3xf32>
  %loss = train.cross_entropy %l, %y : (tensor<8x3xf32>, tensor<8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
