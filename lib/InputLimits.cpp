//===- InputLimits.cpp - Checks on input text before MLIR parses it -------===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#include "ztrain/InputLimits.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

LogicalResult ztrain::checkNestingDepth(const llvm::MemoryBuffer &buffer,
                                        llvm::raw_ostream &os,
                                        unsigned maxDepth) {
  llvm::StringRef text = buffer.getBuffer();
  unsigned depth = 0;
  for (size_t i = 0, n = text.size(); i < n; ++i) {
    char c = text[i];
    if (c == '"') { // a string literal, with \ escapes
      for (++i; i < n && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && text[i + 1] == '/') { // a comment
      while (i < n && text[i] != '\n')
        ++i;
      continue;
    }
    if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > maxDepth) {
        llvm::SourceMgr sources;
        sources.AddNewSourceBuffer(
            llvm::MemoryBuffer::getMemBuffer(text, buffer.getBufferIdentifier(),
                                             /*RequiresNullTerminator=*/false),
            llvm::SMLoc());
        sources.PrintMessage(
            os, llvm::SMLoc::getFromPointer(text.data() + i),
            llvm::SourceMgr::DK_Error,
            "brackets nest more than " + llvm::Twine(maxDepth) +
                " deep here; ztrain refuses such input rather than overflow "
                "the parser's stack");
        return failure();
      }
    } else if (c == ')' || c == ']' || c == '}' ||
               (c == '>' && (i == 0 || text[i - 1] != '-'))) {
      if (depth > 0)
        --depth;
    }
  }
  return success();
}
