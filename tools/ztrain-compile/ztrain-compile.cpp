//===- ztrain-compile.cpp - .mlir in, training executable out -------------===//
//
// Part of the ztrain project.
//
// The driver: parses a model (forward + loss in the train dialect), runs the
// named pipelines stage by stage (optionally writing the IR after each
// stage), translates to LLVM IR, emits an object file in-process with LLVM's
// TargetMachine and links it with the runtime into an executable. Nothing is
// written to the output path unless every stage succeeded.
//
//===----------------------------------------------------------------------===//

#include "DeepSpeedConfig.h"
#include "Flags.h"
#include "Output.h"
#include "Partition.h"

#include "ztrain/InitAll.h"
#include "ztrain/InputLimits.h"
#include "ztrain/Pipelines.h"
#include "ztrain/PlanSearch.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/BuryPointer.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"

#include <memory>
#include <set>
#include <string>

using namespace mlir;
using namespace ztrain_compile;

namespace {

/// --mlir-timing's tree: parsing, every pass of the pipeline, the
/// translation to LLVM IR, code generation and the link. The report prints
/// when main's Timing ends (after the root scope has stopped), on every
/// path out of main.
struct Timing {
  DefaultTimingManager manager;
  TimingScope root;
  Timing() {
    applyDefaultTimingManagerCLOptions(manager);
    root = manager.getRootScope();
  }
  ~Timing() { root.stop(); }
};
Timing *timingTree = nullptr;
TimingScope timed(StringRef phase) { return timingTree->root.nest(phase); }

/// --config: a DeepSpeed config becomes flags, parsed as if given on the
/// command line (so a file and the flags build the same bytes); the command
/// line wins where both set one. `fromConfig` gets the flags the file set.
/// Returns the exit status of a failure, 0 to go on.
int applyConfigFile(ztrain::DeepSpeedFlags &dsFlags,
                    std::set<std::string> &fromConfig) {
  if (configFile.empty())
    return 0;
  std::string error;
  if (!ztrain::readDeepSpeedConfig(configFile, dsFlags, error))
    return fail(error);
  auto registered = cl::getRegisteredOptions();
  for (const ztrt::DeepSpeedSetting &setting : dsFlags.compileFlags) {
    const std::string &name = setting.flag, &value = setting.value;
    cl::Option *opt = registered.lookup(name);
    if (!opt)
      return fail("--config: no flag --" + name + " (internal)");
    if (opt->getNumOccurrences() > 0)
      continue;
    if (opt->addOccurrence(0, name, value))
      return 1; // the option's parser said what is wrong
    fromConfig.insert(name);
  }
  for (const std::string &note : dsFlags.notes)
    llvm::errs() << "ztrain-compile: note: --config: " << note << "\n";
  for (const std::string &key : dsFlags.forExecutable)
    llvm::errs() << "ztrain-compile: note: --config: '" << key
                 << "' is the executable's: pass --config " << configFile
                 << " to it too\n";
  return 0;
}

/// The mesh flags: --dp-shard S --dp-replicate R stand for --dp S x R when
/// --dp is not given (zero-partition checks that the three agree). Returns
/// the exit status of a failure, 0 to go on.
int resolveMesh() {
  if (flags::dp.getNumOccurrences() == 0 && flags::dpShard > 0)
    flags::dp = flags::dpShard * flags::dpReplicate;
  return 0;
}

/// The flags' values, then the flags that the chosen optimizer or plan
/// would silently ignore. Returns the exit status of a failure, 0 to go on.
int checkFlagCombinations(const ztrain::DeepSpeedFlags &dsFlags,
                          const std::set<std::string> &fromConfig) {
  if (std::string error = checkFlagValues(); !error.empty()) {
    // The flag, and the config key when the file set it.
    const std::string name = error.substr(0, error.find('='));
    if (fromConfig.count(name))
      error += " (from --config " + configFile + ": " + dsFlags.keyOf(name) +
               ")";
    return fail("--" + error);
  }

  // Flags that the chosen optimizer or plan would silently ignore. A flag
  // that does nothing is a mistake worth one line: an error where it can
  // only be one (an Adam option given to SGD and the reverse), a warning
  // where the build is still what was asked for.
  struct OptimizerFlag {
    const char *name;
    bool given, sgdOnly;
  };
  // A flag that has no effect in this build: a warning when it was typed;
  // a note naming the key when a config file set it (DeepSpeed's and
  // Hugging Face's examples carry keys for every setup: one that does not
  // apply here is no mistake).
  auto noEffect = [&](const std::string &flag, const std::string &why) {
    if (fromConfig.count(flag))
      llvm::errs() << "ztrain-compile: note: --config: "
                   << dsFlags.keyOf(flag) << " (--" << flag << ") " << why
                   << "\n";
    else
      llvm::errs() << "ztrain-compile: warning: --" << flag << " " << why
                   << "\n";
  };
  const bool sgd = flags::optimizer == ztrain::OptimizerKind::sgd;
  const OptimizerFlag optimizerFlags[] = {
      {"beta1", flags::beta1.getNumOccurrences() > 0, false},
      {"beta2", flags::beta2.getNumOccurrences() > 0, false},
      {"eps", flags::eps.getNumOccurrences() > 0, false},
      {"momentum", flags::momentum.getNumOccurrences() > 0, true},
      {"dampening", flags::dampening.getNumOccurrences() > 0, true},
      {"nesterov", flags::nesterov.getNumOccurrences() > 0, true}};
  for (const OptimizerFlag &f : optimizerFlags)
    if (f.given && f.sgdOnly != sgd)
      return fail(llvm::Twine("--") + f.name + " is " +
                  (f.sgdOnly ? "an SGD" : "an Adam") + " option; --optimizer=" +
                  ztrain::stringify<ztrain::OptimizerKind>(flags::optimizer) +
                  " does not use it");
  if (flags::stage > 0 && flags::dp.getNumOccurrences() == 0 &&
      flags::dpShard == 0)
    llvm::errs() << "ztrain-compile: warning: --zero-stage=" << flags::stage
                 << " without --dp: one rank, nothing is partitioned (add "
                    "--dp=N for N ranks)\n";
  if (flags::maxTileBytes > 0 && flags::stage < 3)
    llvm::errs() << "ztrain-compile: warning: --max-tile-bytes tiles the "
                    "parameters stage 3 gathers; at --zero-stage="
                 << flags::stage << " it has no effect\n";
  // overlap-schedule's options: nothing without --overlap, and the
  // parameter-gather ones nothing below stage 3.
  struct ScheduleFlag {
    const char *name;
    bool given, stage3Only;
  };
  const ScheduleFlag scheduleFlags[] = {
      {"prefetch-depth", flags::prefetchDepth.getNumOccurrences() > 0, true},
      {"max-live-bytes", flags::maxLiveBytes.getNumOccurrences() > 0, true},
      {"reshard-after-forward",
       flags::reshardAfterForward.getNumOccurrences() > 0, true},
      {"bucket-bytes", flags::bucketBytes.getNumOccurrences() > 0, false}};
  for (const ScheduleFlag &f : scheduleFlags) {
    if (!f.given)
      continue;
    if (!flags::overlap)
      noEffect(f.name, "configures the overlap schedule; without --overlap "
                       "it has no effect");
    else if (f.stage3Only && flags::stage < 3)
      noEffect(f.name, "schedules the parameter gathers of stage 3; at "
                       "--zero-stage=" +
                           std::to_string(flags::stage) +
                           " it has no effect");
  }

  // fp16's loss-scale options, given to a build without fp16 (also at
  // their default values).
  for (const auto *opt : {&flags::initialScalePower, &flags::lossScaleWindow,
                          &flags::hysteresis})
    if (opt->getNumOccurrences() > 0 &&
        flags::precision != ztrain::Precision::fp16)
      return fail("--" + opt->ArgStr +
                  " configures fp16's dynamic loss scaling; --precision=" +
                  ztrain::stringify<ztrain::Precision>(flags::precision) +
                  " has none");
  if (flags::minLossScale.getNumOccurrences() > 0 &&
      flags::precision != ztrain::Precision::fp16)
    return fail("--min-loss-scale configures fp16's dynamic loss scaling; "
                "--precision=" +
                ztrain::stringify<ztrain::Precision>(flags::precision) +
                " has none");
  if (flags::offloadRatio.getNumOccurrences() > 0 &&
      flags::offloadOptimizer == ztrain::OffloadPlacement::none &&
      memoryBudget.getNumOccurrences() == 0)
    noEffect("offload-ratio", "is the fraction of the optimizer states "
                              "--offload-optimizer places; without it it has "
                              "no effect");
  // (With --memory-budget a ratio bounds what the search tries.)
  if (flags::offloadParamRatio.getNumOccurrences() > 0 &&
      flags::offloadParam == ztrain::OffloadPlacement::none &&
      memoryBudget.getNumOccurrences() == 0)
    noEffect("offload-param-ratio", "is the fraction of the parameters "
                                    "--offload-param places; without it it "
                                    "has no effect");
  if (flags::overlap && flags::dp == 1)
    llvm::errs() << "ztrain-compile: warning: --overlap overlaps "
                    "collectives with compute; at --dp=1 there are none\n";
  for (const auto *opt : {&linkGBps, &interNodeLinkGBps, &latencyUs,
                          &deviceTflops, &device16Tflops, &memoryGBps,
                          &nvmeGBps, &hostLinkGBps, &hostMemoryGBps})
    if (opt->getNumOccurrences() > 0 && memoryBudget.getNumOccurrences() == 0)
      llvm::errs() << "ztrain-compile: warning: --" << opt->ArgStr
                   << " is a cost-model setting of the plan search; without "
                      "--memory-budget it has no effect\n";
  if (hostMemoryBudget.getNumOccurrences() > 0 &&
      memoryBudget.getNumOccurrences() == 0)
    return fail("--host-memory-budget is the host half of the plan search's "
                "budget; give --memory-budget (the device's) too");
  for (const auto *opt : {&hostLinkGBps, &hostMemoryGBps})
    if (opt->getNumOccurrences() > 0 &&
        memoryBudget.getNumOccurrences() > 0 &&
        hostMemoryBudget.getNumOccurrences() == 0)
      llvm::errs() << "ztrain-compile: warning: --" << opt->ArgStr
                   << " prices a device backend's host side; without "
                      "--host-memory-budget the search plans for one memory "
                      "and it has no effect\n";

  // (DeepSpeed's sub_group_size is in every config, Hugging Face's
  // examples too, at its default: from --config it is not worth a line.)
  if (flags::offloadSubGroupSize.getNumOccurrences() > 0 &&
      !fromConfig.count("sub-group-size") &&
      memoryBudget.getNumOccurrences() == 0) {
    if (flags::offloadOptimizer != ztrain::OffloadPlacement::nvme)
      noEffect("sub-group-size", "chunks the optimizer states nvme offload "
                                 "swaps; without --offload-optimizer=nvme it "
                                 "has no effect");
    else if (flags::offloadParam == ztrain::OffloadPlacement::nvme &&
             flags::offloadParamRatio >= 1.0)
      noEffect("sub-group-size",
               "chunks the optimizer states of updates whose parameter "
               "stays in memory; with --offload-param=nvme every update "
               "swaps its parameter shard whole with its states, and it has "
               "no effect");
  }
  if (flags::offloadBufferCount.getNumOccurrences() > 0 &&
      flags::offloadOptimizer != ztrain::OffloadPlacement::nvme &&
      flags::offloadParam != ztrain::OffloadPlacement::nvme)
    noEffect("offload-buffer-count",
             "sizes the swap buffers of nvme offload; without "
             "--offload-optimizer=nvme or --offload-param=nvme it has no "
             "effect");
  return 0;
}

/// The config's batch sizes against the model's: ztrain's micro-batch is
/// the model's batch dimension, not a setting. Returns the exit status of a
/// failure, 0 to go on.
int checkConfigBatch(ModuleOp module, const ztrain::DeepSpeedFlags &dsFlags) {
  if (dsFlags.microBatch <= 0 && dsFlags.trainBatch <= 0)
    return 0;
  func::FuncOp entry = ztrain::train::getEntryFunction(module);
  if (!entry)
    return 1;
  int64_t batch = -1;
  for (Type t : entry.getArgumentTypes())
    if (auto r = dyn_cast<RankedTensorType>(t); r && r.getRank() > 0) {
      batch = r.getDimSize(0);
      break;
    }
  if (dsFlags.microBatch > 0 && batch != dsFlags.microBatch)
    return fail("--config: train_micro_batch_size_per_gpu is " +
                llvm::Twine(dsFlags.microBatch) +
                " but the model's inputs "
                "have batch " +
                llvm::Twine(batch) +
                " (the micro-batch is the model's batch dimension)");
  const int64_t micro = dsFlags.microBatch > 0 ? dsFlags.microBatch : batch;
  const int64_t global = micro * flags::gradAccumSteps * flags::dp;
  if (dsFlags.trainBatch > 0 && global != dsFlags.trainBatch)
    return fail("--config: train_batch_size is " +
                llvm::Twine(dsFlags.trainBatch) + " but micro-batch " +
                llvm::Twine(micro) + " x gradient_accumulation_steps " +
                llvm::Twine(static_cast<int64_t>(flags::gradAccumSteps)) +
                " x dp " + llvm::Twine(static_cast<int64_t>(flags::dp)) +
                " = " + llvm::Twine(global));
  return 0;
}

/// --memory-budget: the dimensions the user set stay set; the others are
/// searched, and the choice is written into the pipeline options. Returns
/// the exit status of a failure, 0 to go on.
int searchPlanIfAsked(ModuleOp module,
                      ztrain::TrainingPipelineOptions &training,
                      ztrain::ZeroPipelineOptions &zero) {
  if (memoryBudget.getNumOccurrences() == 0)
    return 0;
  // The dimensions the user set stay set; the others are searched.
  ztrain::PlanSearchRequest request;
  if (!ztrain::parseByteSize(memoryBudget, request.budget))
    return fail("--memory-budget must be a size in bytes (1e10, 16GB, "
                "16GiB), got '" +
                memoryBudget + "'");
  request.cost.linkBytesPerSecond = linkGBps * 1e9;
  request.cost.deviceFlopsPerSecond = deviceTflops * 1e12;
  request.cost.device16FlopsPerSecond = device16Tflops * 1e12;
  // --precision=auto: the search chooses fp32 or bf16.
  if (flags::precision == ztrain::Precision::automatic) {
    request.searchPrecision = true;
    training.precision = ztrain::Precision::fp32;
  }
  request.cost.collectiveLatency = latencyUs * 1e-6;
  request.cost.memoryBytesPerSecond = memoryGBps * 1e9;
  request.cost.nvmeBytesPerSecond = nvmeGBps * 1e9;
  request.cost.hostLinkBytesPerSecond = hostLinkGBps * 1e9;
  request.cost.hostMemoryBytesPerSecond = hostMemoryGBps * 1e9;
  request.cost.interNodeLinkBytesPerSecond = interNodeLinkGBps * 1e9;
  if (hostMemoryBudget.getNumOccurrences() > 0 &&
      !ztrain::parseByteSize(hostMemoryBudget, request.hostBudget))
    return fail("--host-memory-budget must be a size in bytes (1e10, 64GB, "
                "64GiB), got '" +
                hostMemoryBudget + "'");
  if (std::string error = ztrain::checkCostModel(request.cost, "--");
      !error.empty())
    return fail(error);
  auto given = [](const cl::Option &o) { return o.getNumOccurrences() > 0; };
  if (given(flags::offloadActivations))
    request.offloadActivations = ztrain::stringify<ztrain::ActivationPlacement>(
                                     flags::offloadActivations)
                                     .str();
  if (given(flags::stage))
    request.stage = flags::stage;
  if (given(flags::dpShard) && !given(flags::dpReplicate))
    request.replicate = flags::dp % flags::dpShard == 0
                            ? flags::dp / flags::dpShard
                            : flags::dpReplicate; // zero-partition refuses
  else if (given(flags::dpReplicate))
    request.replicate = flags::dpReplicate;
  if (given(flags::recompute))
    request.recompute =
        ztrain::stringify<ztrain::RecomputePolicy>(flags::recompute).str();
  if (given(flags::maxTileBytes))
    request.maxTileBytes = flags::maxTileBytes;
  if (given(flags::lossTileBytes))
    request.lossTileBytes = flags::lossTileBytes;
  if (given(flags::overlap))
    request.overlap = flags::overlap;
  if (given(flags::prefetchDepth))
    request.prefetchDepth = flags::prefetchDepth;
  if (given(flags::reshardAfterForward))
    request.reshardAfterForward = flags::reshardAfterForward;
  if (given(flags::offloadOptimizer))
    request.offloadOptimizer =
        ztrain::stringify<ztrain::OffloadPlacement>(flags::offloadOptimizer)
            .str();
  if (given(flags::offloadParam))
    request.offloadParam =
        ztrain::stringify<ztrain::OffloadPlacement>(flags::offloadParam).str();
  if (given(flags::offloadRatio))
    request.offloadRatio = flags::offloadRatio;
  if (given(flags::offloadParamRatio))
    request.offloadParamRatio = flags::offloadParamRatio;
  FailureOr<ztrain::PlanSearchResult> result =
      ztrain::searchPlan(module, training, zero, request);
  if (failed(result))
    return 1;
  if (result->chosen < 0)
    return fail("--memory-budget=" + memoryBudget + ": no plan fits " +
                ztrain::describeNoFit(*result, request));
  ztrain::printPlanSearch(llvm::errs(), *result, request, training, zero);
  ztrain::applyPlanChoice(result->candidates[result->chosen].choice, training,
                          zero);
  return 0;
}

/// Runs the named pipelines (exactly what `ztrain-opt --ztrain-training=...
/// [--ztrain-zero=...] --ztrain-to-llvm` runs), writing the IR after each
/// pass with --dump-ir-dir; `dumpIndex` gets the number of the next dump.
/// Returns the exit status of a failure, 0 to go on.
int runPipeline(ModuleOp module,
                const ztrain::TrainingPipelineOptions &training,
                const ztrain::ZeroPipelineOptions &zero, int &dumpIndex) {
  MLIRContext &context = *module.getContext();
  PassManager pm(&context);
  pm.enableVerifier(verifyEach);
  ztrain::buildTrainingPipeline(pm, training);
  if (zero.dp != 1 || zero.stage != 0)
    ztrain::buildZeroPipeline(pm, zero);
  else
    ztrain::addZeroOffload(pm, zero); // one process: placement only
  ztrain::buildToLLVMPipeline(pm, outlineMaxOps, rerollMinTrips, fuse);
  TimingScope passTiming = timed("pipeline");
  pm.enableTiming(passTiming);

  DumpAfterEachPass *dumper = nullptr;
  if (!dumpIrDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(dumpIrDir))
      return fail("--dump-ir-dir: cannot create " + dumpIrDir + ": " +
                  ec.message());
    if (!llvm::sys::fs::is_directory(dumpIrDir))
      return fail("--dump-ir-dir: " + dumpIrDir + " is not a directory");
    auto owned = std::make_unique<DumpAfterEachPass>(dumpIrDir);
    dumper = owned.get();
    dumper->write(module, "input");
    pm.addInstrumentation(std::move(owned));
  }
  if (failed(pm.run(module)) || (dumper && dumper->failed))
    return 1;
  if (!verifyEach && failed(verify(module)))
    return 1;
  dumpIndex = dumper ? dumper->index : 0;
  return 0;
}

/// What one rank will allocate (lower-to-runtime's count, which the
/// executable checks again against the memory it finds). Returns the exit
/// status of a failure, 0 to go on.
int checkPlannedBytes(ModuleOp module) {
  if (auto planned =
          module->getAttrOfType<IntegerAttr>("ztrain.planned_bytes")) {
    if (deviceMemory < 0)
      return fail("--device-memory must be >= 0");
    if (deviceMemory > 0 && planned.getInt() > deviceMemory)
      llvm::errs() << "ztrain-compile: warning: the compiled plan needs "
                   << planned.getInt() << " bytes per rank, more than "
                   << "--device-memory=" << deviceMemory
                   << " (use more ranks, a higher ZeRO stage, recompute or "
                      "a smaller batch)\n";
    if (emit != Emit::Mlir)
      module->removeAttr("ztrain.planned_bytes");
  }
  return 0;
}

/// Writes `llvmModule` to `<dump-ir-dir>/<NN>-llvm-ir<suffix>.ll`.
int dumpLlvmIr(llvm::Module &llvmModule, int dumpIndex, StringRef suffix) {
  SmallString<256> path(dumpIrDir);
  llvm::sys::path::append(
      path, llvm::formatv("{0:D2}-llvm-ir{1}.ll", dumpIndex, suffix).str());
  std::string err;
  auto out = openOutputFile(path, &err);
  if (!out)
    return fail(err);
  llvmModule.print(out->os(), nullptr);
  out->keep();
  return 0;
}

/// Translates `module` to LLVM IR and writes its object file to `path`
/// (and its LLVM IR with --dump-ir-dir, `suffix` naming the part).
LogicalResult compileObject(ModuleOp module, StringRef path, int dumpIndex,
                            StringRef suffix, bool optimize = false) {
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext, "ztrain_model");
  if (!llvmModule) {
    fail("translation to LLVM IR failed");
    return failure();
  }
  if (!dumpIrDir.empty() && dumpLlvmIr(*llvmModule, dumpIndex, suffix))
    return failure();
  return emitObject(*llvmModule, path, optimize);
}

/// Writes what --emit asks for: the LLVM-dialect MLIR, LLVM IR, an object
/// file or the executable. A large model's object is compiled in parts on
/// --jobs threads (Partition.h), linked into one.
int emitOutput(ModuleOp module, int dumpIndex, const char *argv0) {
  std::string err;
  if (emit == Emit::Mlir) {
    auto out = openOutputFile(outputFile, &err);
    if (!out)
      return fail(err);
    module->print(out->os());
    out->keep();
    return 0;
  }
  if (emit == Emit::Llvm) {
    llvm::LLVMContext llvmContext;
    std::unique_ptr<llvm::Module> llvmModule =
        translateModuleToLLVMIR(module, llvmContext, "ztrain_model");
    if (!llvmModule)
      return fail("translation to LLVM IR failed");
    if (!dumpIrDir.empty() && dumpLlvmIr(*llvmModule, dumpIndex, ""))
      return 1;
    auto out = openOutputFile(outputFile, &err);
    if (!out)
      return fail(err);
    llvmModule->print(out->os(), nullptr);
    out->keep();
    return 0;
  }

  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  // The generated kernels (--fuse) are compiled apart, with optimization;
  // the rest is split into parts by size.
  OwningOpRef<ModuleOp> kernels = splitKernels(module);
  unsigned count = partitionCount(module, opsPerPart);
  SmallVector<OwningOpRef<ModuleOp>> others;
  if (count > 1)
    others = splitModule(module, count);
  const size_t kernelPart = others.size() + 1;
  if (kernels)
    others.push_back(std::move(kernels));
  llvm::scope_exit buryParts([&] { // (see main's end)
    for (OwningOpRef<ModuleOp> &other : others)
      llvm::BuryPointer(other.release());
  });
  SmallVector<ModuleOp> parts{module};
  for (OwningOpRef<ModuleOp> &other : others)
    parts.push_back(*other);

  if (emit == Emit::Obj && parts.size() == 1) {
    // ToolOutputFile removes the file unless keep() ran: no partial output.
    TimingScope codegenTiming = timed("translate and generate code");
    return failed(compileObject(module, outputFile, dumpIndex, "")) ? 1 : 0;
  }
  // The objects (and the executable) in a private directory next to -o,
  // renamed into place at the end; nothing is left on failure.
  if (!linkTemporaries.create(outputFile, err))
    return fail(err);
  std::vector<std::string> objects;
  for (unsigned p = 0; p < parts.size(); ++p)
    objects.push_back(
        p == 0
            ? std::string(linkTemporaries.object)
            : llvm::formatv("{0}/model.{1}.o", linkTemporaries.dir, p).str());
  TimingScope codegenTiming = timed(
      llvm::formatv("translate and generate code ({0} parts)", parts.size())
          .str());
  bool ok = succeeded(runInParallel(parts.size(), jobs, [&](unsigned p) {
    bool isKernels = p == kernelPart;
    return compileObject(parts[p], objects[p], dumpIndex,
                         p == 0      ? std::string()
                         : isKernels ? std::string(".kernels")
                                     : llvm::formatv(".part{0}", p).str(),
                         isKernels);
  }));
  codegenTiming.stop();
  TimingScope linkTiming = timed("link");
  if (ok && emit == Emit::Obj)
    ok = objects.size() == 1 ||
         succeeded(linkObjects(objects, linkTemporaries.executable, argv0,
                               /*relocatable=*/true));
  else if (ok)
    ok = succeeded(linkObjects(objects, linkTemporaries.executable, argv0));
  linkTiming.stop();
  if (ok) {
    if (std::error_code ec =
            llvm::sys::fs::rename(linkTemporaries.executable, outputFile)) {
      linkTemporaries.removeAll();
      return fail("cannot write " + outputFile + ": " + ec.message());
    }
  }
  linkTemporaries.removeAll();
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // --mlir-timing and its display options, listed with ztrain-compile's.
  registerDefaultTimingManagerCLOptions();
  for (const char *name : {"mlir-timing", "mlir-timing-display"})
    if (cl::Option *option = cl::getRegisteredOptions().lookup(name))
      option->addCategory(category);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "ztrain-compile: compile a model (forward + loss in the train dialect) "
      "into a training executable\n\n"
      "  ztrain-compile model.mlir -o model [--optimizer=adamw --lr=1e-3]\n"
      "  ./model --steps 100 --report report.json\n");

  if ((emit == Emit::Obj || emit == Emit::Exe) && outputFile.empty())
    return fail("-o is required for --emit=obj and --emit=exe");

  ztrain::DeepSpeedFlags dsFlags;
  std::set<std::string> fromConfig; // flags the file set
  if (int status = applyConfigFile(dsFlags, fromConfig))
    return status;
  if (int status = resolveMesh())
    return status;
  if (int status = checkFlagCombinations(dsFlags, fromConfig))
    return status;

  if (outputFile.empty())
    outputFile = "-";

  DialectRegistry registry;
  ztrain::registerAllDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // A diagnostic names its location and says what is wrong; the offending
  // operation printed in generic form (a whole function for an option the
  // pipeline refuses) buries that line.
  context.printOpOnDiagnostic(false);

  Timing timing;
  timingTree = &timing;
  TimingScope parseTiming = timed("parse");

  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);
  std::string err;
  auto file = openInputFile(inputFile, &err);
  if (!file)
    return fail(err);
  if (failed(ztrain::checkNestingDepth(*file, llvm::errs())))
    return 1;
  sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1;
  parseTiming.stop();

  // A large model compiles for tens of seconds: say so before starting.
  {
    int64_t ops = 0;
    module->walk([&](Operation *) { ++ops; });
    if (ops >= 100000)
      llvm::errs() << "ztrain-compile: compiling a model of " << ops
                   << " ops\n";
  }

  if (int status = checkConfigBatch(*module, dsFlags))
    return status;

  ztrain::TrainingPipelineOptions training;
#define ZTRAIN_TRAINING_OPTION(MEMBER, ...) training.MEMBER = flags::MEMBER;
#include "ztrain/PipelineOptions.def"
  ztrain::ZeroPipelineOptions zero;
#define ZTRAIN_ZERO_OPTION(MEMBER, ...) zero.MEMBER = flags::MEMBER;
#include "ztrain/PipelineOptions.def"
  if (int status = searchPlanIfAsked(*module, training, zero))
    return status;
  int dumpIndex = 0;
  if (int status = runPipeline(*module, training, zero, dumpIndex))
    return status;
  if (int status = checkPlannedBytes(*module))
    return status;
  int status = emitOutput(*module, dumpIndex, argv[0]);
  // Tearing down a module of millions of operations one by one takes
  // seconds and frees nothing the exit does not (clang's -disable-free):
  // the module is left to the exit, reachable for LeakSanitizer.
  llvm::BuryPointer(module.release());
  return status;
}
