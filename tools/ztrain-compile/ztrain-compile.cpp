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
#include "ztrain/Config.h"
#include "ztrain/InitAll.h"
#include "ztrain/InputLimits.h"
#include "ztrain/Pipelines.h"
#include "ztrain/PlanSearch.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/Instructions.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

#include <cmath>
#include <csignal>
#include <cstring>
#include <set>
#include <fcntl.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace mlir;
namespace cl = llvm::cl;

namespace {
enum class Emit { Mlir, Llvm, Obj, Exe };

cl::OptionCategory category("ztrain-compile options");
cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.mlir>"),
                               cl::init("-"), cl::cat(category));
cl::opt<std::string> outputFile("o", cl::desc("Output file"),
                                cl::value_desc("path"), cl::cat(category));
cl::opt<Emit> emit(
    "emit", cl::desc("What to produce"), cl::init(Emit::Exe),
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
// The pipeline options (ztrain-training, ztrain-zero) as top-level flags:
// one per row of PipelineOptions.def, named by its FLAG column.
namespace flags {
#define ZTRAIN_PIPELINE_FLAG(MEMBER, TYPE, DEFAULT, OPTION, FLAG, DESC)        \
  cl::opt<TYPE> MEMBER(FLAG, cl::desc(DESC), cl::init(DEFAULT),                \
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
  auto oneOf = [](const std::string &flag, const std::string &value,
                  std::initializer_list<const char *> allowed) {
    for (const char *a : allowed)
      if (value == a)
        return std::string();
    std::string list;
    size_t i = 0;
    for (const char *a : allowed)
      list += (i++ == 0 ? "" : i == allowed.size() ? " or " : ", ") +
              std::string(a);
    return flag + "=" + value + ": expected " + list;
  };
  auto real = [](const std::string &flag, double v, bool ok,
                 const char *expected) {
    if (ok && std::isfinite(v))
      return std::string();
    std::string text;
    llvm::raw_string_ostream(text) << flag << "=" << llvm::format("%g", v)
                                   << ": expected " << expected;
    return text;
  };
  auto integer = [](const std::string &flag, int64_t v, bool ok,
                    const char *expected) {
    if (ok)
      return std::string();
    return flag + "=" + std::to_string(v) + ": expected " + expected;
  };
  const bool sgd = flags::optimizer == "sgd";
  const std::string checks[] = {
      memoryBudget.getNumOccurrences() > 0
          ? oneOf("precision", flags::precision,
                  {"fp32", "bf16", "fp16", "auto"})
          : flags::precision == "auto"
              ? "precision=auto: the plan search chooses the precision; "
                "it needs --memory-budget"
              : oneOf("precision", flags::precision, {"fp32", "bf16", "fp16"}),
      flags::reduceDtype.empty()
          ? ""
          : oneOf("reduce-dtype", flags::reduceDtype, {"fp32", "bf16", "fp16"}),
      // What train-precision would refuse, as flags.
      flags::precision == "fp16"
          ? integer("initial-scale-power", flags::initialScalePower,
                    flags::initialScalePower >= 0 &&
                        flags::initialScalePower <= 127,
                    "0 to 127 (the scale 2^power must be a finite f32)")
          : "",
      flags::precision == "fp16"
          ? integer("loss-scale-window", flags::lossScaleWindow,
                    flags::lossScaleWindow >= 1, "a number of steps >= 1")
          : "",
      flags::precision == "fp16"
          ? integer("hysteresis", flags::hysteresis, flags::hysteresis >= 1,
                    "a number of overflows >= 1")
          : "",
      flags::precision == "fp16"
          ? real("min-loss-scale", flags::minLossScale,
                 flags::minLossScale > 0 &&
                     flags::minLossScale <=
                         std::ldexp(1.0, static_cast<int>(std::clamp<int64_t>(
                                             flags::initialScalePower, 0, 127))),
                 "a scale > 0 and <= the initial scale 2^initial-scale-power")
          : "",
      !flags::reduceDtype.empty() && flags::precision == "fp32"
          ? "reduce-dtype=" + flags::reduceDtype +
                ": needs --precision=bf16 or fp16 (with fp32 parameters "
                "gradients are reduced in fp32)"
          : "",
      !flags::reduceDtype.empty() &&
              (flags::precision == "bf16" || flags::precision == "fp16") &&
              flags::reduceDtype != flags::precision &&
              flags::reduceDtype != "fp32"
          ? "reduce-dtype=" + flags::reduceDtype + ": expected fp32 or " +
                flags::precision + " (the parameters' type) with --precision=" +
                flags::precision
          : "",
      oneOf("optimizer", flags::optimizer, {"sgd", "adam", "adamw"}),
      oneOf("no-decay", flags::noDecay, {"1d", "none"}),
      oneOf("recompute", flags::recompute, {"none", "full", "selective"}),
      oneOf("offload-optimizer", flags::offloadOptimizer,
            {"none", "cpu", "nvme"}),
      oneOf("offload-param", flags::offloadParam, {"none", "cpu", "nvme"}),
      oneOf("offload-activations", flags::offloadActivations, {"none", "cpu"}),
      integer("zero-stage", flags::stage, flags::stage >= 0 && flags::stage <= 3,
              "0, 1, 2 or 3"),
      integer("dp", flags::dp, flags::dp >= 1, "a number of ranks >= 1"),
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
      sgd ? "" : real("beta1", flags::beta1,
                      flags::beta1 >= 0.0 && flags::beta1 < 1.0,
                      "a value in [0, 1)"),
      sgd ? "" : real("beta2", flags::beta2,
                      flags::beta2 >= 0.0 && flags::beta2 < 1.0,
                      "a value in [0, 1)"),
      sgd ? "" : real("eps", flags::eps, flags::eps > 0.0,
                      "a finite value > 0"),
      real("offload-ratio", flags::offloadRatio,
           flags::offloadRatio > 0.0 && flags::offloadRatio <= 1.0,
           "a fraction in (0, 1]"),
      real("offload-param-ratio", flags::offloadParamRatio,
           flags::offloadParamRatio > 0.0 && flags::offloadParamRatio <= 1.0,
           "a fraction in (0, 1]"),
      integer("sub-group-size", flags::offloadSubGroupSize,
              flags::offloadSubGroupSize >= 0, ">= 0 (elements; 0: whole "
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
      // Parameters are placed as stage 3's shards (DeepSpeed's rule);
      // under --memory-budget the search chooses the stage, unless given.
      flags::offloadParam != "none" && flags::stage != 3 &&
              (memoryBudget.getNumOccurrences() == 0 ||
               flags::stage.getNumOccurrences() > 0)
          ? "offload-param=" + flags::offloadParam +
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

/// Writes the IR after every pass to `<dir>/<NN>-<pass-argument>.mlir`, so
/// a user can inspect each stage of the lowered plan.
class DumpAfterEachPass : public PassInstrumentation {
public:
  explicit DumpAfterEachPass(std::string dir) : dir(std::move(dir)) {}

  void runAfterPass(Pass *pass, Operation *op) override {
    if (!isa<ModuleOp>(op))
      return;
    write(op, pass->getArgument().empty() ? pass->getName()
                                          : pass->getArgument());
  }

  void write(Operation *op, StringRef stage) {
    SmallString<256> path(dir);
    llvm::sys::path::append(
        path, llvm::formatv("{0:D2}-{1}.mlir", index++, stage).str());
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec) {
      llvm::errs() << "ztrain-compile: error: cannot write " << path << ": "
                   << ec.message() << "\n";
      failed = true;
      return;
    }
    op->print(os);
  }

  bool failed = false;
  int index = 0;

private:
  std::string dir;
};

/// Cuts every basic block longer than `limit` instructions into a chain of
/// blocks of at most `limit`. The step is one straight-line block of
/// runtime calls; the fast register allocator's work grows with the
/// square of a block's length (7 s of 11 at 95k ops, minutes at 860k), and
/// is linear in blocks of bounded length.
void splitLongBlocks(llvm::Module &module, unsigned limit) {
  for (llvm::Function &fn : module) {
    std::vector<llvm::BasicBlock *> work;
    for (llvm::BasicBlock &bb : fn)
      work.push_back(&bb);
    for (llvm::BasicBlock *bb : work) {
      std::vector<llvm::Instruction *> insts;
      for (llvm::Instruction &inst : *bb)
        insts.push_back(&inst);
      // From the back, so that each split moves at most `limit`
      // instructions; never before a PHI or an EH pad (the step has
      // neither, but the cut must stay valid for any block).
      for (size_t cut = (insts.size() - 1) / limit * limit; cut > 0;
           cut -= limit)
        if (!insts[cut]->isEHPad() && !llvm::isa<llvm::PHINode>(insts[cut]))
          bb->splitBasicBlock(insts[cut]);
    }
  }
}

/// Emits `llvmModule` as an object file at `path`.
LogicalResult emitObject(llvm::Module &llvmModule, StringRef path) {
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string err;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target) {
    llvm::errs() << "ztrain-compile: error: " << err << "\n";
    return failure();
  }
  llvm::TargetOptions opts;
  // The step is one straight-line block of runtime calls: the kernels, not
  // this code, take the time. Fast instruction selection is linear in the
  // block (SelectionDAG at -O2 took minutes and 7 GB on a 3,600-layer
  // model), and the code it gives runs the same steps in the same time.
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, "generic", "", opts, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::None));
  llvmModule.setDataLayout(tm->createDataLayout());
  llvmModule.setTargetTriple(triple);
  std::error_code ec;
  llvm::ToolOutputFile out(path, ec, llvm::sys::fs::OF_None);
  if (ec) {
    llvm::errs() << "ztrain-compile: error: cannot write " << path << ": "
                 << ec.message() << "\n";
    return failure();
  }
  splitLongBlocks(llvmModule, 1024);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, out.os(), nullptr,
                              llvm::CodeGenFileType::ObjectFile)) {
    llvm::errs() << "ztrain-compile: error: the target cannot emit objects\n";
    return failure();
  }
  pm.run(llvmModule);
  out.keep();
  return success();
}

/// Where the link step writes, as C strings for the signal handler.
struct LinkTemporaries {
  char dir[4096] = {}, object[4096] = {}, executable[4096] = {};
  volatile sig_atomic_t linkerPid = 0;
  /// Makes the directory for `output` and arms the signal handler; false
  /// with `error` when the directory cannot be made.
  bool create(StringRef output, std::string &error);
  /// Removes the object, the executable and the directory (async-signal-safe).
  void removeAll();
};
LinkTemporaries linkTemporaries;

/// Links `object` with the runtime into the executable `exe`.
LogicalResult linkExecutable(StringRef object, StringRef exe,
                             const char *argv0) {
  std::string libDir = runtimeDir;
  if (libDir.empty()) {
    std::string self =
        llvm::sys::fs::getMainExecutable(argv0, (void *)&linkExecutable);
    SmallString<256> dir(llvm::sys::path::parent_path(self));
    llvm::sys::path::append(dir, "..", "lib");
    libDir = std::string(dir);
  }
  SmallString<256> mainLib(libDir);
  llvm::sys::path::append(mainLib, "libztrt_main.a");
  if (!llvm::sys::fs::exists(mainLib)) {
    llvm::errs() << "ztrain-compile: error: runtime library " << mainLib
                 << " not found (use --runtime-dir)\n";
    return failure();
  }
  std::string linker = ZTRAIN_LINKER;
  if (const char *env = std::getenv("ZTRAIN_LINKER"))
    linker = env;
  SmallVector<std::string> args{linker, std::string(object), "-o",
                                std::string(exe), "-L" + libDir,
                                "-lztrt_main", "-lztrt"};
  SmallVector<StringRef> extra;
  StringRef(ZTRAIN_RUNTIME_LINK_ARGS).split(extra, ';', -1, false);
  for (StringRef a : extra)
    args.push_back(a.str());
  // The linker (a compiler driver that runs collect2 and ld, or lld) in a
  // process group of its own, which the signal handler kills whole: killing
  // the driver alone would leave ld writing into the directory. The signals
  // are blocked from before the spawn until its pid is recorded.
  std::vector<char *> argvC;
  for (std::string &a : args)
    argvC.push_back(a.data());
  argvC.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t blocked, previous;
  sigemptyset(&blocked);
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    sigaddset(&blocked, sig);
  sigprocmask(SIG_BLOCK, &blocked, &previous);
  posix_spawnattr_setsigmask(&attr, &previous); // the child's: as ours was
  pid_t pid = 0;
  int spawnError =
      posix_spawnp(&pid, linker.c_str(), nullptr, &attr, argvC.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (spawnError == 0)
    linkTemporaries.linkerPid = pid;
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  if (spawnError != 0) {
    llvm::errs() << "ztrain-compile: error: cannot run the linker " << linker
                 << ": " << std::strerror(spawnError) << "\n";
    return failure();
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  linkTemporaries.linkerPid = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    llvm::errs() << "ztrain-compile: error: linking failed (" << linker
                 << (WIFEXITED(status)
                         ? " exited with " + std::to_string(WEXITSTATUS(status))
                         : " was ended by signal " +
                               std::to_string(WTERMSIG(status)))
                 << ")\n";
    return failure();
  }
  return success();
}

/// The executable is built in a private directory next to `-o` (the same
/// file system, so the final rename is atomic; `<o>.tmp-XXXXXX`) and
/// nothing of it is left when the build fails or is interrupted: on
/// SIGINT, SIGTERM or SIGHUP (unless ignored from the start) the linker's
/// process group is killed and the directory removed before the signal
/// takes its default course.
void LinkTemporaries::removeAll() {
  if (!dir[0])
    return;
  // Every file in it (the object, the executable, a linker's own
  // temporaries), with system calls only: this runs in the signal handler.
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    alignas(8) static char entries[4096];
    for (;;) {
      long n = syscall(SYS_getdents64, fd, entries, sizeof(entries));
      if (n <= 0)
        break;
      for (long at = 0; at < n;) {
        // struct linux_dirent64: ino (8), off (8), reclen (2), type (1),
        // name.
        unsigned short length;
        std::memcpy(&length, entries + at + 16, sizeof(length));
        const char *name = entries + at + 19;
        if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0)
          unlinkat(fd, name, 0);
        at += length;
      }
    }
    close(fd);
  }
  rmdir(dir);
}

void onLinkSignal(int sig) {
  if (pid_t pid = linkTemporaries.linkerPid; pid > 0) {
    kill(-pid, SIGKILL); // its process group: the driver and its children
    waitpid(pid, nullptr, 0);
  }
  linkTemporaries.removeAll();
  signal(sig, SIG_DFL);
  raise(sig);
}

/// The signals ignored when the process started (nohup's SIGHUP; SIGINT in
/// a non-interactive shell's background job), read before main() and
/// InitLLVM install handlers: they stay ignored.
const std::set<int> ignoredAtStart = [] {
  std::set<int> ignored;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current = {};
    if (sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN)
      ignored.insert(sig);
  }
  return ignored;
}();

bool LinkTemporaries::create(StringRef output, std::string &error) {
  // (createUniqueDirectory puts a relative prefix under the system's
  // temporary directory: the directory must be next to -o.)
  SmallString<256> prefix(output);
  llvm::sys::fs::make_absolute(prefix);
  prefix += ".tmp";
  SmallString<256> d;
  if (std::error_code ec = llvm::sys::fs::createUniqueDirectory(prefix, d)) {
    error = "cannot write " + output.str() + ": " + ec.message();
    return false;
  }
  std::string o = (d + "/model.o").str(), e = (d + "/model").str();
  if (o.size() >= sizeof(object)) { // (the longest of the three)
    llvm::sys::fs::remove(d);
    error = "cannot write " + output.str() + ": the path is too long";
    return false;
  }
  std::strcpy(dir, d.c_str());
  std::strcpy(object, o.c_str());
  std::strcpy(executable, e.c_str());
  struct sigaction action = {};
  action.sa_handler = onLinkSignal;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) // one cleanup, not two
    sigaddset(&action.sa_mask, sig);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    if (ignoredAtStart.count(sig)) {
      signal(sig, SIG_IGN);
      continue;
    }
    sigaction(sig, &action, nullptr);
  }
  return true;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "ztrain-compile: compile a model (forward + loss in the train dialect) "
      "into a training executable\n\n"
      "  ztrain-compile model.mlir -o model [--optimizer=adamw --lr=1e-3]\n"
      "  ./model --steps 100 --report report.json\n");

  if ((emit == Emit::Obj || emit == Emit::Exe) && outputFile.empty())
    return fail("-o is required for --emit=obj and --emit=exe");

  // A DeepSpeed config becomes flags, parsed as if given on the command
  // line (so a file and the flags build the same bytes); the command line
  // wins where both set one.
  ztrain::DeepSpeedFlags dsFlags;
  std::set<std::string> fromConfig; // flags the file set
  if (!configFile.empty()) {
    std::string error;
    if (!ztrain::readDeepSpeedConfig(configFile, dsFlags, error))
      return fail(error);
    auto registered = cl::getRegisteredOptions();
    for (const auto &[name, value] : dsFlags.flags) {
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
  }

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
  const bool sgd = flags::optimizer == "sgd";
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
                  (f.sgdOnly ? "an SGD" : "an Adam") +
                  " option; --optimizer=" + flags::optimizer +
                  " does not use it");
  if (flags::stage > 0 && flags::dp.getNumOccurrences() == 0)
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
    if (opt->getNumOccurrences() > 0 && flags::precision != "fp16")
      return fail("--" + opt->ArgStr +
                  " configures fp16's dynamic loss scaling; --precision=" +
                  flags::precision + " has none");
  if (flags::minLossScale.getNumOccurrences() > 0 &&
      flags::precision != "fp16")
    return fail("--min-loss-scale configures fp16's dynamic loss scaling; "
                "--precision=" + flags::precision + " has none");
  if (flags::offloadRatio.getNumOccurrences() > 0 &&
      flags::offloadOptimizer == "none" &&
      memoryBudget.getNumOccurrences() == 0)
    noEffect("offload-ratio", "is the fraction of the optimizer states "
                              "--offload-optimizer places; without it it has "
                              "no effect");
  // (With --memory-budget a ratio bounds what the search tries.)
  if (flags::offloadParamRatio.getNumOccurrences() > 0 &&
      flags::offloadParam == "none" && memoryBudget.getNumOccurrences() == 0)
    noEffect("offload-param-ratio", "is the fraction of the parameters "
                                    "--offload-param places; without it it "
                                    "has no effect");
  if (flags::overlap && flags::dp == 1)
    llvm::errs() << "ztrain-compile: warning: --overlap overlaps "
                    "collectives with compute; at --dp=1 there are none\n";
  for (const auto *opt :
       {&linkGBps, &latencyUs, &deviceTflops, &device16Tflops, &memoryGBps,
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
    if (flags::offloadOptimizer != "nvme")
      noEffect("sub-group-size", "chunks the optimizer states nvme offload "
                                 "swaps; without --offload-optimizer=nvme it "
                                 "has no effect");
    else if (flags::offloadParam == "nvme" && flags::offloadParamRatio >= 1.0)
      noEffect("sub-group-size",
               "chunks the optimizer states of updates whose parameter "
               "stays in memory; with --offload-param=nvme every update "
               "swaps its parameter shard whole with its states, and it has "
               "no effect");
  }
  if (flags::offloadBufferCount.getNumOccurrences() > 0 &&
      flags::offloadOptimizer != "nvme" && flags::offloadParam != "nvme")
    noEffect("offload-buffer-count",
             "sizes the swap buffers of nvme offload; without "
             "--offload-optimizer=nvme or --offload-param=nvme it has no "
             "effect");

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

  // A large model compiles for tens of seconds: say so before starting.
  {
    int64_t ops = 0;
    module->walk([&](Operation *) { ++ops; });
    if (ops >= 100000)
      llvm::errs() << "ztrain-compile: compiling a model of " << ops
                   << " ops\n";
  }

  // The config's batch sizes against the model's: ztrain's micro-batch is
  // the model's batch dimension, not a setting.
  if (dsFlags.microBatch > 0 || dsFlags.trainBatch > 0) {
    func::FuncOp entry = ztrain::train::getEntryFunction(*module);
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
                  llvm::Twine(dsFlags.microBatch) + " but the model's inputs "
                  "have batch " + llvm::Twine(batch) +
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
  }

  // The whole compilation is the named pipelines, exactly what
  // `ztrain-opt --ztrain-training=... [--ztrain-zero=...] --ztrain-to-llvm`
  // runs.
  ztrain::TrainingPipelineOptions training;
#define ZTRAIN_TRAINING_OPTION(MEMBER, ...) training.MEMBER = flags::MEMBER;
#include "ztrain/PipelineOptions.def"
  ztrain::ZeroPipelineOptions zero;
#define ZTRAIN_ZERO_OPTION(MEMBER, ...) zero.MEMBER = flags::MEMBER;
#include "ztrain/PipelineOptions.def"
  if (memoryBudget.getNumOccurrences() > 0) {
    // The dimensions the user set stay set; the others are searched.
    ztrain::PlanSearchRequest request;
    if (!ztrain::parseByteSize(memoryBudget, request.budget))
      return fail("--memory-budget must be a size in bytes (1e10, 16GB, "
                  "16GiB), got '" + memoryBudget + "'");
    request.cost.linkBytesPerSecond = linkGBps * 1e9;
    request.cost.deviceFlopsPerSecond = deviceTflops * 1e12;
    request.cost.device16FlopsPerSecond = device16Tflops * 1e12;
    // --precision=auto: the search chooses fp32 or bf16.
    if (flags::precision == "auto") {
      request.searchPrecision = true;
      training.precision = "fp32";
    }
    request.cost.collectiveLatency = latencyUs * 1e-6;
    request.cost.memoryBytesPerSecond = memoryGBps * 1e9;
    request.cost.nvmeBytesPerSecond = nvmeGBps * 1e9;
    request.cost.hostLinkBytesPerSecond = hostLinkGBps * 1e9;
    request.cost.hostMemoryBytesPerSecond = hostMemoryGBps * 1e9;
    if (hostMemoryBudget.getNumOccurrences() > 0 &&
        !ztrain::parseByteSize(hostMemoryBudget, request.hostBudget))
      return fail("--host-memory-budget must be a size in bytes (1e10, 64GB, "
                  "64GiB), got '" + hostMemoryBudget + "'");
    if (std::string error = ztrain::checkCostModel(request.cost, "--");
        !error.empty())
      return fail(error);
    auto given = [](const cl::Option &o) { return o.getNumOccurrences() > 0; };
    if (given(flags::offloadActivations))
      request.offloadActivations = flags::offloadActivations;
    if (given(flags::stage))
      request.stage = flags::stage;
    if (given(flags::recompute))
      request.recompute = flags::recompute;
    if (given(flags::maxTileBytes))
      request.maxTileBytes = flags::maxTileBytes;
    if (given(flags::overlap))
      request.overlap = flags::overlap;
    if (given(flags::prefetchDepth))
      request.prefetchDepth = flags::prefetchDepth;
    if (given(flags::reshardAfterForward))
      request.reshardAfterForward = flags::reshardAfterForward;
    if (given(flags::offloadOptimizer))
      request.offloadOptimizer = flags::offloadOptimizer;
    if (given(flags::offloadParam))
      request.offloadParam = flags::offloadParam;
    if (given(flags::offloadRatio))
      request.offloadRatio = flags::offloadRatio;
    if (given(flags::offloadParamRatio))
      request.offloadParamRatio = flags::offloadParamRatio;
    FailureOr<ztrain::PlanSearchResult> result =
        ztrain::searchPlan(*module, training, zero, request);
    if (failed(result))
      return 1;
    if (result->chosen < 0)
      return fail("--memory-budget=" + memoryBudget + ": no plan fits " +
                  ztrain::describeNoFit(*result, request));
    ztrain::printPlanSearch(llvm::errs(), *result, request, training, zero);
    ztrain::applyPlanChoice(result->candidates[result->chosen].choice,
                            training, zero);
  }
  PassManager pm(&context);
  pm.enableVerifier(verifyEach);
  ztrain::buildTrainingPipeline(pm, training);
  if (zero.dp != 1 || zero.stage != 0)
    ztrain::buildZeroPipeline(pm, zero);
  else
    ztrain::addZeroOffload(pm, zero); // one process: placement only
  ztrain::buildToLLVMPipeline(pm);

  DumpAfterEachPass *dumper = nullptr;
  if (!dumpIrDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(dumpIrDir))
      return fail("--dump-ir-dir: cannot create " + dumpIrDir + ": " +
                  ec.message());
    if (!llvm::sys::fs::is_directory(dumpIrDir))
      return fail("--dump-ir-dir: " + dumpIrDir + " is not a directory");
    auto owned = std::make_unique<DumpAfterEachPass>(dumpIrDir);
    dumper = owned.get();
    dumper->write(*module, "input");
    pm.addInstrumentation(std::move(owned));
  }
  if (failed(pm.run(*module)) || (dumper && dumper->failed))
    return 1;
  if (!verifyEach && failed(verify(*module)))
    return 1;

  // What one rank will allocate (lower-to-runtime's count, which the
  // executable checks again against the memory it finds).
  if (auto planned =
          (*module)->getAttrOfType<IntegerAttr>("ztrain.planned_bytes")) {
    if (deviceMemory < 0)
      return fail("--device-memory must be >= 0");
    if (deviceMemory > 0 && planned.getInt() > deviceMemory)
      llvm::errs() << "ztrain-compile: warning: the compiled plan needs "
                   << planned.getInt() << " bytes per rank, more than "
                   << "--device-memory=" << deviceMemory
                   << " (use more ranks, a higher ZeRO stage, recompute or "
                      "a smaller batch)\n";
    if (emit != Emit::Mlir)
      (*module)->removeAttr("ztrain.planned_bytes");
  }

  if (emit == Emit::Mlir) {
    auto out = openOutputFile(outputFile, &err);
    if (!out)
      return fail(err);
    module->print(out->os());
    out->keep();
    return 0;
  }

  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(*module, llvmContext, "ztrain_model");
  if (!llvmModule)
    return fail("translation to LLVM IR failed");
  if (!dumpIrDir.empty()) {
    SmallString<256> path(dumpIrDir);
    llvm::sys::path::append(
        path, llvm::formatv("{0:D2}-llvm-ir.ll", dumper->index).str());
    auto out = openOutputFile(path, &err);
    if (!out)
      return fail(err);
    llvmModule->print(out->os(), nullptr);
    out->keep();
  }
  if (emit == Emit::Llvm) {
    auto out = openOutputFile(outputFile, &err);
    if (!out)
      return fail(err);
    llvmModule->print(out->os(), nullptr);
    out->keep();
    return 0;
  }

  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  if (emit == Emit::Obj) {
    // ToolOutputFile removes the file unless keep() ran: no partial output.
    return failed(emitObject(*llvmModule, outputFile)) ? 1 : 0;
  }
  if (!linkTemporaries.create(outputFile, err))
    return fail(err);
  bool ok = succeeded(emitObject(*llvmModule, linkTemporaries.object)) &&
            succeeded(linkExecutable(linkTemporaries.object,
                                     linkTemporaries.executable, argv[0]));
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
