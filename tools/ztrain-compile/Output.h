//===- Output.h - what ztrain-compile writes
//--------------------------------===//
//
// Part of the ztrain project.
//
// The IR dumps (--dump-ir-dir), the object file and the link into an
// executable, with nothing left behind on failure or interruption.
// Private to tools/ztrain-compile.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_TOOLS_ZTRAIN_COMPILE_OUTPUT_H
#define ZTRAIN_TOOLS_ZTRAIN_COMPILE_OUTPUT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Support/LogicalResult.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <csignal>
#include <string>

namespace ztrain_compile {
using namespace mlir;

/// Writes the IR after every pass to `<dir>/<NN>-<pass-argument>.mlir`, so
/// a user can inspect each stage of the lowered plan.
class DumpAfterEachPass : public PassInstrumentation {
public:
  explicit DumpAfterEachPass(std::string dir) : dir(std::move(dir)) {}

  void runAfterPass(Pass *pass, Operation *op) override {
    if (!isa<ModuleOp>(op))
      return;
    write(op,
          pass->getArgument().empty() ? pass->getName() : pass->getArgument());
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

/// Emits `llvmModule` as an object file at `path`: without optimization
/// (the step's calls; Output.cpp says why), or with `optimize` at -O2, IR
/// and code generation, for the generated kernels. Neither changes a
/// floating-point result: no fast-math flags, no contraction of separate
/// multiplies and adds (TargetOptions' default allows only llvm.fmuladd,
/// which the compiler never emits).
LogicalResult emitObject(llvm::Module &llvmModule, StringRef path,
                         bool optimize = false);

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
extern LinkTemporaries linkTemporaries;

/// Links `objects` with the runtime into the executable `exe`, or with
/// `relocatable` into one object file (a partial link, `ld -r`).
LogicalResult linkObjects(ArrayRef<std::string> objects, StringRef exe,
                          const char *argv0, bool relocatable = false);

} // namespace ztrain_compile

#endif // ZTRAIN_TOOLS_ZTRAIN_COMPILE_OUTPUT_H
