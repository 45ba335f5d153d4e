//===- fuzz_mlir_pipeline.cpp - libFuzzer target: IR through the pipeline -===//
//
// Part of ztrain's fuzz targets (docs/fuzzing.md). Input: MLIR text, as
// ztrain-compile reads it. It goes where ztrain-compile sends it: the
// nesting check, the parser and the verifiers (train and dist dialects),
// then, when it verifies, the whole compilation (ztrain-training,
// ztrain-zero, ztrain-to-llvm, translation to LLVM IR) with options drawn
// from a hash of the input: optimizer, ZeRO stage and dp, precision,
// overlap, recompute, gradient accumulation, clipping, tiling, offload.
// ZTRAIN_FUZZ_VERBOSE=1 prints the options and the diagnostics.
//
// Checked beyond the sanitizers: a refusal (the parser, a verifier or a
// pass failing) comes with an error diagnostic, as ztrain-compile's exit
// status 1 needs its message; a compilation that succeeds leaves IR that
// verifies and translates.
//
//===----------------------------------------------------------------------===//

#include "ztrain/InitAll.h"
#include "ztrain/InputLimits.h"
#include "ztrain/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstdlib>

using namespace mlir;

namespace {

mlir::DialectRegistry *registry = nullptr;
bool verbose = false;

[[noreturn]] void crash(const char *what) {
  std::fprintf(stderr, "ztrain-fuzz: contract broken: %s\n", what);
  std::abort();
}

uint64_t fnv1a(const uint8_t *data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i)
    h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  registry = new mlir::DialectRegistry;
  ztrain::registerAllDialects(*registry);
  verbose = std::getenv("ZTRAIN_FUZZ_VERBOSE") != nullptr;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::unique_ptr<llvm::MemoryBuffer> buffer =
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size),
          "input.mlir");
  std::string nesting;
  llvm::raw_string_ostream nestingOs(nesting);
  if (failed(ztrain::checkNestingDepth(*buffer, nestingOs))) {
    if (nesting.find("error:") == std::string::npos)
      crash("a refused nesting depth without an error");
    return 0;
  }

  MLIRContext context(*registry, MLIRContext::Threading::DISABLED);
  context.printOpOnDiagnostic(false);
  int errors = 0;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error)
      ++errors;
    if (verbose)
      llvm::errs() << diag.getLocation() << ": " << diag << "\n";
    return success();
  });
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module) {
    if (!errors)
      crash("input refused by the parser without an error");
    return 0;
  }

  // The options, from the input's hash (ztrain-compile's flags).
  const uint64_t h = fnv1a(data, size);
  ztrain::TrainingPipelineOptions training;
  ztrain::ZeroPipelineOptions zero;
  using ztrain::OffloadPlacement, ztrain::OptimizerKind, ztrain::Precision,
      ztrain::RecomputePolicy;
  static const OptimizerKind optimizers[] = {
      OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw};
  static const Precision precisions[] = {Precision::fp32, Precision::fp32,
                                         Precision::bf16, Precision::fp16};
  static const RecomputePolicy recomputes[] = {
      RecomputePolicy::none, RecomputePolicy::none, RecomputePolicy::full,
      RecomputePolicy::selective};
  static const OffloadPlacement offloads[] = {
      OffloadPlacement::none, OffloadPlacement::none, OffloadPlacement::cpu,
      OffloadPlacement::nvme};
  static const int64_t dps[] = {1, 2, 4};
  training.optimizer = optimizers[h % 3];
  zero.stage = (h >> 2) % 4;
  zero.dp = dps[(h >> 4) % 3];
  training.precision = precisions[(h >> 6) % 4];
  zero.overlap = (h >> 8) & 1;
  training.recompute = recomputes[(h >> 9) % 4];
  training.gradAccumSteps = (h >> 11) & 1 ? 2 : 1;
  training.clipGradNorm = (h >> 12) & 1 ? 1.0 : 0.0;
  zero.maxTileBytes = zero.stage == 3 && ((h >> 13) & 1) ? 4096 : 0;
  zero.offloadOptimizer = offloads[(h >> 14) % 4];
  training.eval = (h >> 16) & 1;
  if (verbose)
    llvm::errs() << "ztrain-fuzz: optimizer="
                 << ztrain::stringify<OptimizerKind>(training.optimizer)
                 << " stage=" << zero.stage << " dp=" << zero.dp
                 << " precision="
                 << ztrain::stringify<Precision>(training.precision)
                 << " overlap=" << zero.overlap << " recompute="
                 << ztrain::stringify<RecomputePolicy>(training.recompute)
                 << " grad-accum-steps=" << training.gradAccumSteps
                 << " clip-grad-norm=" << training.clipGradNorm
                 << " max-tile-bytes=" << zero.maxTileBytes
                 << " offload-optimizer="
                 << ztrain::stringify<OffloadPlacement>(zero.offloadOptimizer)
                 << " eval=" << training.eval << "\n";

  PassManager pm(&context);
  pm.enableVerifier(false); // as ztrain-compile: verified once, at the end
  ztrain::buildTrainingPipeline(pm, training);
  if (zero.dp != 1 || zero.stage != 0)
    ztrain::buildZeroPipeline(pm, zero);
  else
    ztrain::addZeroOffload(pm, zero);
  ztrain::buildToLLVMPipeline(pm);
  const int before = errors;
  if (failed(pm.run(*module))) {
    if (errors == before)
      crash("a pass failed without an error");
    return 0;
  }
  if (failed(verify(*module)))
    crash("the compiled IR does not verify");
  llvm::LLVMContext llvmContext;
  if (!translateModuleToLLVMIR(*module, llvmContext, "ztrain_model"))
    crash("the compiled IR does not translate to LLVM IR");
  return 0;
}
