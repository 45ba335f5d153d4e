//===- InputLimits.h - Checks on input text before MLIR parses it -*- C++ -*-===//
//
// Part of the ztrain project.
//
// MLIR's parser descends recursively into nested attributes and types: a
// file nesting brackets 10,000 deep overflows the stack (SIGSEGV) before
// any diagnostic. The tools check the nesting depth of their input text
// first and refuse a deeper file with a located error.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_INPUTLIMITS_H
#define ZTRAIN_INPUTLIMITS_H

#include "mlir/Support/LLVM.h"

namespace llvm {
class MemoryBuffer;
class raw_ostream;
} // namespace llvm

namespace ztrain {

/// The deepest bracket nesting ztrain's tools parse. Real IR nests a few
/// levels (tensor<...> inside an array inside a dictionary); this leaves
/// room for any of it while staying far inside an 8 MiB stack.
constexpr unsigned kMaxNestingDepth = 256;

/// Scans `buffer` for (, [, {, < nesting (outside string literals and //
/// comments; `->` does not close a `<`). Deeper than `maxDepth`: prints
/// "<file>:<line>:<col>: error: ..." at the first bracket past the limit to
/// `os` and fails.
mlir::LogicalResult checkNestingDepth(const llvm::MemoryBuffer &buffer,
                                      llvm::raw_ostream &os,
                                      unsigned maxDepth = kMaxNestingDepth);

} // namespace ztrain

#endif // ZTRAIN_INPUTLIMITS_H
