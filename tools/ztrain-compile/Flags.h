//===- Flags.h - ztrain-compile's command line
//------------------------------===//
//
// Part of the ztrain project.
//
// Every flag of ztrain-compile (the pipeline options as top-level flags,
// one per row of PipelineOptions.def, and the tool's own), shared by the
// tool's files. Private to tools/ztrain-compile.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_TOOLS_ZTRAIN_COMPILE_FLAGS_H
#define ZTRAIN_TOOLS_ZTRAIN_COMPILE_FLAGS_H

#include "ztrain/OptionEnums.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/CommandLine.h"

#include <cstdint>
#include <string>

namespace ztrain_compile {
namespace cl = llvm::cl;

enum class Emit { Mlir, Llvm, Obj, Exe };

extern cl::OptionCategory category;
extern cl::opt<std::string> inputFile, outputFile, dumpIrDir, runtimeDir,
    configFile, memoryBudget, hostMemoryBudget;
extern cl::opt<Emit> emit;
extern cl::opt<bool> verifyEach;
extern cl::opt<int64_t> deviceMemory;
extern cl::opt<unsigned> jobs;
extern cl::opt<int64_t> outlineMaxOps, opsPerPart, rerollMinTrips;
extern cl::opt<ztrain::FuseMode> fuse;
extern cl::opt<double> linkGBps, interNodeLinkGBps, latencyUs, deviceTflops,
    device16Tflops, memoryGBps, nvmeGBps, hostLinkGBps, hostMemoryGBps;

namespace flags {
#define ZTRAIN_PIPELINE_FLAG(MEMBER, TYPE, DEFAULT, OPTION, FLAG, DESC)        \
  extern cl::opt<TYPE> MEMBER;
#define ZTRAIN_TRAINING_OPTION ZTRAIN_PIPELINE_FLAG
#define ZTRAIN_ZERO_OPTION ZTRAIN_PIPELINE_FLAG
#include "ztrain/PipelineOptions.def"
#undef ZTRAIN_PIPELINE_FLAG
} // namespace flags

/// The first flag whose value no pass would accept, as
/// "lr=-1: expected a finite value >= 0"; "" when all are valid. (A
/// misspelled closed choice never gets here: llvm::cl refuses it.)
std::string checkFlagValues();

/// Prints "ztrain-compile: error: <msg>" and returns 1 (the exit status).
int fail(const llvm::Twine &msg);

} // namespace ztrain_compile

#endif // ZTRAIN_TOOLS_ZTRAIN_COMPILE_FLAGS_H
