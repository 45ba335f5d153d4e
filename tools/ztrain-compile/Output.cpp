//===- Output.cpp - what ztrain-compile writes
//------------------------------===//
//
// Part of the ztrain project.
//
// The object file and the link into an executable (Output.h).
//
//===----------------------------------------------------------------------===//

#include "Output.h"
#include "Flags.h"

#include "ztrain/Config.h"

#include "llvm/IR/Instructions.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ztrain_compile {

/// Cuts every basic block longer than `limit` instructions into a chain of
/// blocks of at most `limit`. The step is one straight-line block of
/// runtime calls; the fast register allocator's work grows with the
/// square of a block's length (7 s of 11 at 95k ops, minutes at 860k), and
/// is linear in blocks of bounded length.
static void splitLongBlocks(llvm::Module &module, unsigned limit) {
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

LogicalResult emitObject(llvm::Module &llvmModule, StringRef path,
                         bool optimize) {
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
      optimize ? llvm::CodeGenOptLevel::Default : llvm::CodeGenOptLevel::None));
  llvmModule.setDataLayout(tm->createDataLayout());
  llvmModule.setTargetTriple(triple);
  if (optimize) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(tm.get());
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2)
        .run(llvmModule, mam);
  }
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
                              llvm::CodeGenFileType::ObjectFile,
                              // translateModuleToLLVMIR verified it
                              /*DisableVerify=*/true)) {
    llvm::errs() << "ztrain-compile: error: the target cannot emit objects\n";
    return failure();
  }
  pm.run(llvmModule);
  out.keep();
  return success();
}

LinkTemporaries linkTemporaries;

/// Links `objects` with the runtime into the executable `exe`, or with
/// `relocatable` into one object file (a partial link, `ld -r`).
LogicalResult linkObjects(ArrayRef<std::string> objects, StringRef exe,
                          const char *argv0, bool relocatable) {
  std::string libDir = runtimeDir;
  if (libDir.empty()) {
    std::string self =
        llvm::sys::fs::getMainExecutable(argv0, (void *)&linkObjects);
    SmallString<256> dir(llvm::sys::path::parent_path(self));
    llvm::sys::path::append(dir, "..", "lib");
    libDir = std::string(dir);
  }
  SmallString<256> mainLib(libDir);
  llvm::sys::path::append(mainLib, "libztrt_main.a");
  if (!relocatable && !llvm::sys::fs::exists(mainLib)) {
    llvm::errs() << "ztrain-compile: error: runtime library " << mainLib
                 << " not found (use --runtime-dir)\n";
    return failure();
  }
  std::string linker = ZTRAIN_LINKER;
  if (const char *env = std::getenv("ZTRAIN_LINKER"))
    linker = env;
  SmallVector<std::string> args{linker};
  if (relocatable)
    args.append({"-r", "-nostdlib"});
  args.append(objects.begin(), objects.end());
  args.append({"-o", std::string(exe)});
  if (!relocatable) {
    args.append({"-L" + libDir, "-lztrt_main", "-lztrt"});
    SmallVector<StringRef> extra;
    StringRef(ZTRAIN_RUNTIME_LINK_ARGS).split(extra, ';', -1, false);
    for (StringRef a : extra)
      args.push_back(a.str());
  }
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
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
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

static void onLinkSignal(int sig) {
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
static const std::set<int> ignoredAtStart = [] {
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

} // namespace ztrain_compile
