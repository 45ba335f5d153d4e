//===- Flags.cpp - ztrain-compile's command line
//----------------------------===//
//
// Part of the ztrain project.
//
// The flags' definitions and the check of their values (Flags.h).
//
//===----------------------------------------------------------------------===//

#include "Flags.h"

#include "ztrain/Config.h"
#include "ztrain/PlanSearch.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <string>
#include <vector>

namespace ztrain_compile {

cl::OptionCategory category("ztrain-compile options");
cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.mlir>"),
                               cl::init("-"), cl::cat(category));
cl::opt<std::string> outputFile("o", cl::desc("Output file"),
                                cl::value_desc("path"), cl::cat(category));
cl::opt<Emit>
    emit("emit", cl::desc("What to produce"), cl::init(Emit::Exe),
         cl::values(clEnumValN(Emit::Mlir, "mlir", "the LLVM-dialect MLIR"),
                    clEnumValN(Emit::Llvm, "llvm", "LLVM IR"),
                    clEnumValN(Emit::Obj, "obj", "an object file"),
                    clEnumValN(Emit::Exe, "exe", "an executable (default)")),
         cl::cat(category));
cl::opt<std::string>
    dumpIrDir("dump-ir-dir",
              cl::desc("Write the IR after every stage into this directory"),
              cl::value_desc("dir"), cl::cat(category));
cl::opt<bool> verifyEach(
    "verify-each",
    cl::desc("Verify the IR after every pass (default: once, after the "
             "last; verifying after each of ~20 passes is a fifth of the "
             "compile time of a large model)"),
    cl::init(false), cl::cat(category));
cl::opt<unsigned> jobs(
    "jobs",
    cl::desc("Threads that translate and generate the code of a large model "
             "(over 100,000 lowered ops: its functions are compiled in "
             "parts, in parallel; 0: one per core). The executable is the "
             "same for any number"),
    cl::init(0), cl::value_desc("n"), cl::cat(category));
// For tests: the outlining and the parts of small models.
cl::opt<int64_t> outlineMaxOps(
    "outline-max-ops",
    cl::desc("outline-long-functions' max-ops (functions over 4x are cut)"),
    cl::init(1024), cl::Hidden, cl::cat(category));
cl::opt<int64_t> rerollMinTrips(
    "reroll-min-trips",
    cl::desc("reroll-call-runs' min-trips (0: runs of like calls stay "
             "unrolled)"),
    cl::init(32), cl::Hidden, cl::cat(category));
cl::opt<ztrain::FuseMode> fuse(
    "fuse",
    cl::desc("Elementwise chains as generated kernels (train-fuse-elementwise; "
             "the cpu backend runs them, bitwise the same as --fuse=none)"),
    cl::init(ztrain::FuseMode::none), ztrain::EnumValues<ztrain::FuseMode>{},
    cl::cat(category));
cl::opt<int64_t> opsPerPart(
    "ops-per-part",
    cl::desc("Lowered ops per part compiled on its own (at most 16 parts)"),
    cl::init(100000), cl::Hidden, cl::cat(category));
// The pipeline options (ztrain-training, ztrain-zero) as top-level flags:
// one per row of PipelineOptions.def, named by its FLAG column.
namespace flags {
#define ZTRAIN_PIPELINE_FLAG(MEMBER, TYPE, DEFAULT, OPTION, FLAG, DESC)        \
  cl::opt<TYPE> MEMBER(FLAG, cl::desc(DESC), cl::init(DEFAULT),                \
                       ztrain::optionValues<TYPE>(/*search=*/true),            \
                       cl::cat(category));
#define ZTRAIN_TRAINING_OPTION ZTRAIN_PIPELINE_FLAG
#define ZTRAIN_ZERO_OPTION ZTRAIN_PIPELINE_FLAG
#include "ztrain/PipelineOptions.def"
#undef ZTRAIN_PIPELINE_FLAG
} // namespace flags
cl::opt<std::string>
    runtimeDir("runtime-dir",
               cl::desc("Directory with libztrt.a and libztrt_main.a "
                        "(default: ../lib next to this tool)"),
               cl::value_desc("dir"), cl::cat(category));

cl::opt<std::string> configFile(
    "config",
    cl::desc("A DeepSpeed JSON config (ds_config.json): its keys for what "
             "ztrain has set the matching flags; a flag given here overrides "
             "the file; unknown or unsupported keys are an error "
             "(docs/config.md)"),
    cl::value_desc("file"), cl::cat(category));

cl::opt<int64_t> deviceMemory(
    "device-memory",
    cl::desc("Warn when the compiled plan needs more than this many bytes "
             "per rank (0: no check)"),
    cl::init(0), cl::value_desc("bytes"), cl::cat(category));

cl::opt<std::string> memoryBudget(
    "memory-budget",
    cl::desc("Search the plan: the fastest ZeRO stage, recompute policy, "
             "tiling bound and overlap schedule whose predicted peak fits "
             "this many bytes per rank (1e10, 16GB, 16GiB), and only when "
             "none fits, with optimizer states and parameters on nvme; "
             "flags given fix their dimension; prints the candidates, then "
             "compiles the choice"),
    cl::value_desc("bytes"), cl::cat(category));
cl::opt<double> linkGBps("link-gbps",
                         cl::desc("Plan search cost model: GB/s one rank "
                                  "sends (default 25)"),
                         cl::init(25.0), cl::cat(category));
cl::opt<double> interNodeLinkGBps(
    "inter-node-link-gbps",
    cl::desc("Plan search cost model: GB/s one rank sends to other nodes "
             "(default 0: every byte at --link-gbps); with --ranks-per-node "
             "bytes are priced by link class and hybrid sharding (a shard "
             "group per node) is searched"),
    cl::init(0.0), cl::cat(category));
cl::opt<double> latencyUs("latency-us",
                          cl::desc("Plan search cost model: microseconds per "
                                   "collective beyond its bytes (default 10)"),
                          cl::init(10.0), cl::cat(category));
cl::opt<double> deviceTflops("device-tflops",
                             cl::desc("Plan search cost model: matmul TFLOP/s "
                                      "of one rank's device (default 100)"),
                             cl::init(100.0), cl::cat(category));
cl::opt<double> device16Tflops(
    "device-tflops-16bit",
    cl::desc("Plan search cost model: bf16 / fp16 matmul TFLOP/s of one "
             "rank's device, for --precision=auto (default 200)"),
    cl::init(200.0), cl::cat(category));
cl::opt<double> memoryGBps(
    "memory-gbps",
    cl::desc("Plan search cost model: GB/s the other kernels (elementwise, "
             "norms, softmax) move through one rank's device memory "
             "(default 2000)"),
    cl::init(2000.0), cl::cat(category));
cl::opt<double> nvmeGBps(
    "nvme-gbps",
    cl::desc("Plan search cost model: GB/s one rank reads and writes its "
             "swap directory, for plans that offload (default 2)"),
    cl::init(2.0), cl::cat(category));
cl::opt<std::string> hostMemoryBudget(
    "host-memory-budget",
    cl::desc("With --memory-budget: search a device backend's (cuda) plan, "
             "--memory-budget bounding the device's peak and this the host "
             "memory offload may use per rank (64GB); host placements "
             "(optimizer states, --offload-activations=cpu) are tried "
             "before nvme"),
    cl::value_desc("bytes"), cl::cat(category));
cl::opt<double> hostLinkGBps(
    "host-link-gbps",
    cl::desc("Plan search cost model: GB/s between one rank's device and "
             "host memory, each way, with --host-memory-budget (default 25)"),
    cl::init(25.0), cl::cat(category));
cl::opt<double> hostMemoryGBps(
    "host-memory-gbps",
    cl::desc("Plan search cost model: GB/s the host's optimizer step "
             "(host-placed optimizer states on a device backend: "
             "ZeRO-Offload's CPU step) reads and writes host memory, with "
             "--host-memory-budget (default 50)"),
    cl::init(50.0), cl::cat(category));

/// The first flag whose value no pass would accept, as
/// "optimizer=adamm: expected sgd, adam or adamw"; "" when all are valid.
/// Checked before any IR exists, so that a bad value is one line naming the
/// flag (the passes check the same rules for ztrain-opt's pipeline
/// options, where the diagnostic is located in the module).
std::string checkFlagValues() {
  auto real = [](const std::string &flag, double v, bool ok,
                 const char *expected) {
    if (ok && std::isfinite(v))
      return std::string();
    std::string text;
    llvm::raw_string_ostream(text)
        << flag << "=" << llvm::format("%g", v) << ": expected " << expected;
    return text;
  };
  auto integer = [](const std::string &flag, int64_t v, bool ok,
                    const char *expected) {
    if (ok)
      return std::string();
    return flag + "=" + std::to_string(v) + ": expected " + expected;
  };
  // The spellings of the closed choices are llvm::cl's to check (their
  // cl::values); what is left is how the flags combine.
  const bool sgd = flags::optimizer == ztrain::OptimizerKind::sgd;
  const ztrain::Precision precisionValue = flags::precision;
  const bool fp16 = precisionValue == ztrain::Precision::fp16;
  const std::string precision = ztrain::stringify(precisionValue).str();
  const bool reduceGiven = flags::reduceDtype != ztrain::ReduceDtype::param;
  const std::string reduce =
      ztrain::stringify<ztrain::ReduceDtype>(flags::reduceDtype).str();
  const std::string checks[] = {
      memoryBudget.getNumOccurrences() == 0 &&
              precisionValue == ztrain::Precision::automatic
          ? "precision=auto: the plan search chooses the precision; "
            "it needs --memory-budget"
          : "",
      // What train-precision would refuse, as flags.
      fp16 ? integer("initial-scale-power", flags::initialScalePower,
                     flags::initialScalePower >= 0 &&
                         flags::initialScalePower <= 127,
                     "0 to 127 (the scale 2^power must be a finite f32)")
           : "",
      fp16 ? integer("loss-scale-window", flags::lossScaleWindow,
                     flags::lossScaleWindow >= 1, "a number of steps >= 1")
           : "",
      fp16 ? integer("hysteresis", flags::hysteresis, flags::hysteresis >= 1,
                     "a number of overflows >= 1")
           : "",
      fp16 ? real("min-loss-scale", flags::minLossScale,
                  flags::minLossScale > 0 &&
                      flags::minLossScale <=
                          std::ldexp(1.0,
                                     static_cast<int>(std::clamp<int64_t>(
                                         flags::initialScalePower, 0, 127))),
                  "a scale > 0 and <= the initial scale 2^initial-scale-power")
           : "",
      reduceGiven && precisionValue == ztrain::Precision::fp32
          ? "reduce-dtype=" + reduce +
                ": needs --precision=bf16 or fp16 (with fp32 parameters "
                "gradients are reduced in fp32)"
          : "",
      reduceGiven && (precisionValue == ztrain::Precision::bf16 || fp16) &&
              reduce != precision && reduce != "fp32"
          ? "reduce-dtype=" + reduce + ": expected fp32 or " + precision +
                " (the parameters' type) with --precision=" + precision
          : "",
      integer("zero-stage", flags::stage,
              flags::stage >= 0 && flags::stage <= 3, "0, 1, 2 or 3"),
      integer("dp", flags::dp, flags::dp >= 1, "a number of ranks >= 1"),
      integer("dp-shard", flags::dpShard, flags::dpShard >= 0,
              "a number of ranks >= 1 (0: dp / dp-replicate)"),
      integer("dp-replicate", flags::dpReplicate, flags::dpReplicate >= 1,
              "a number of shard groups >= 1"),
      integer("ranks-per-node", flags::ranksPerNode, flags::ranksPerNode >= 0,
              "a number of ranks >= 1 (0: the default layout)"),
      integer("grad-accum-steps", flags::gradAccumSteps,
              flags::gradAccumSteps >= 1 &&
                  flags::gradAccumSteps <= (int64_t(1) << 30),
              "an integer in [1, 2^30]"),
      real("lr", flags::lr, flags::lr >= 0.0, "a finite value >= 0"),
      real("weight-decay", flags::weightDecay, flags::weightDecay >= 0.0,
           "a finite value >= 0"),
      real("clip-grad-norm", flags::clipGradNorm, flags::clipGradNorm >= 0.0,
           "a finite norm >= 0 (0: no clipping)"),
      sgd ? real("momentum", flags::momentum, flags::momentum >= 0.0,
                 "a finite value >= 0")
          : "",
      sgd ? real("dampening", flags::dampening,
                 flags::dampening >= 0.0 && flags::dampening <= 1.0,
                 "a value in [0, 1]")
          : "",
      sgd && flags::nesterov &&
              (flags::momentum <= 0.0 || flags::dampening != 0.0)
          ? std::string("nesterov=true: needs --momentum > 0 and "
                        "--dampening=0 (PyTorch's rule)")
          : "",
      sgd ? ""
          : real("beta1", flags::beta1,
                 flags::beta1 >= 0.0 && flags::beta1 < 1.0,
                 "a value in [0, 1)"),
      sgd ? ""
          : real("beta2", flags::beta2,
                 flags::beta2 >= 0.0 && flags::beta2 < 1.0,
                 "a value in [0, 1)"),
      sgd ? ""
          : real("eps", flags::eps, flags::eps > 0.0, "a finite value > 0"),
      real("offload-ratio", flags::offloadRatio,
           flags::offloadRatio > 0.0 && flags::offloadRatio <= 1.0,
           "a fraction in (0, 1]"),
      real("offload-param-ratio", flags::offloadParamRatio,
           flags::offloadParamRatio > 0.0 && flags::offloadParamRatio <= 1.0,
           "a fraction in (0, 1]"),
      integer("sub-group-size", flags::offloadSubGroupSize,
              flags::offloadSubGroupSize >= 0,
              ">= 0 (elements; 0: whole "
              "states)"),
      integer("offload-buffer-count", flags::offloadBufferCount,
              flags::offloadBufferCount >= 1 && flags::offloadBufferCount <= 16,
              "1 to 16"),
      integer("prefetch-depth", flags::prefetchDepth, flags::prefetchDepth >= 0,
              "an integer >= 0"),
      integer("max-live-bytes", flags::maxLiveBytes, flags::maxLiveBytes >= 0,
              "bytes >= 0 (0: no bound)"),
      integer("bucket-bytes", flags::bucketBytes, flags::bucketBytes >= 0,
              "bytes >= 0 (0: one collective per gradient)"),
      integer("max-tile-bytes", flags::maxTileBytes, flags::maxTileBytes >= 0,
              "bytes >= 0 (0: no tiling)"),
      integer("loss-tile-bytes", flags::lossTileBytes,
              flags::lossTileBytes >= 0, "bytes >= 0 (0: untiled)"),
      // Parameters are placed as stage 3's shards (DeepSpeed's rule);
      // under --memory-budget the search chooses the stage, unless given.
      flags::offloadParam != ztrain::OffloadPlacement::none &&
              flags::stage != 3 &&
              (memoryBudget.getNumOccurrences() == 0 ||
               flags::stage.getNumOccurrences() > 0)
          ? "offload-param=" +
                ztrain::stringify<ztrain::OffloadPlacement>(flags::offloadParam)
                    .str() +
                ": needs ZeRO stage 3 (it places stage 3's parameter "
                "shards); this build is --zero-stage=" +
                std::to_string(flags::stage)
          : "",
  };
  for (const std::string &error : checks)
    if (!error.empty())
      return error;
  return "";
}

int fail(const llvm::Twine &msg) {
  llvm::errs() << "ztrain-compile: error: " << msg << "\n";
  return 1;
}

} // namespace ztrain_compile
