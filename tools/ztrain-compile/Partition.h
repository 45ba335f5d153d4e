//===- Partition.h - a large lowered module compiled in parts -------------===//
//
// Part of the ztrain project.
//
// A lowered model of a million runtime calls takes a minute to translate
// to LLVM IR and generate code for on one core. outline-long-functions has
// cut its step into bounded functions; this splits the module's function
// definitions into parts that are translated and compiled on their own
// threads (each with its own LLVMContext and TargetMachine) into one
// object each, linked together. Private to tools/ztrain-compile.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_TOOLS_ZTRAIN_COMPILE_PARTITION_H
#define ZTRAIN_TOOLS_ZTRAIN_COMPILE_PARTITION_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LogicalResult.h"

#include "llvm/ADT/SmallVector.h"

#include <functional>
#include <string>

namespace ztrain_compile {

/// The number of parts `module` is compiled in: one per `opsPerPart` ops
/// (100,000 by default; at most 16), 1 for a module that cannot be split
/// (anything at its top level but llvm.func and llvm.mlir.global). It depends
/// on the module alone, so that the executable does not depend on the machine
/// that compiled it.
unsigned partitionCount(mlir::ModuleOp module, int64_t opsPerPart);

/// Moves `module`'s function definitions, in order and in runs of about
/// equal size, into `count` - 1 new modules (`module` keeps the first
/// run), and gives each module what its functions refer to: declarations
/// of the functions and globals defined elsewhere (which become external
/// with hidden visibility when they were internal), and its own copy of
/// each internal constant global it reads. Linking the parts' objects
/// gives what the whole module's object gives.
llvm::SmallVector<mlir::OwningOpRef<mlir::ModuleOp>>
splitModule(mlir::ModuleOp module, unsigned count);

/// Moves the generated kernels of train.fused regions (functions named
/// `ztrain_fused.*`) into a module of their own, which is compiled with
/// optimization (Output.h, emitObject): `module` keeps declarations of them
/// (external, hidden), the new module declarations of what they call.
/// Null when `module` has none.
mlir::OwningOpRef<mlir::ModuleOp> splitKernels(mlir::ModuleOp module);

/// Runs `work(i)` for every i < count on up to `threads` threads (0: one
/// per core); success when every call succeeded.
mlir::LogicalResult
runInParallel(unsigned count, unsigned threads,
              const std::function<mlir::LogicalResult(unsigned)> &work);

} // namespace ztrain_compile

#endif // ZTRAIN_TOOLS_ZTRAIN_COMPILE_PARTITION_H
