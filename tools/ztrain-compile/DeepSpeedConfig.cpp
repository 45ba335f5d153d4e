//===- DeepSpeedConfig.cpp - ztrain-compile --config ds_config.json ------===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#include "DeepSpeedConfig.h"

#include "llvm/Support/MemoryBuffer.h"

using namespace llvm;

bool ztrain::readDeepSpeedConfig(StringRef path, DeepSpeedFlags &out,
                                 std::string &error) {
  auto buffer = MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer) {
    error = ("--config: cannot read '" + path +
             "': " + buffer.getError().message())
                .str();
    return false;
  }
  if (!ztrt::parseDeepSpeedConfig((*buffer)->getBuffer().str(), out, error)) {
    error = ("--config '" + path + "': " + error).str();
    return false;
  }
  return true;
}
