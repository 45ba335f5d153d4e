//===- DeepSpeedConfig.h - ztrain-compile --config ds_config.json --------===//
//
// Part of the ztrain project.
//
// Reads a DeepSpeed JSON config and says which ztrain-compile flags it
// means (docs/config.md has the table, side by side with DeepSpeed's
// names). The flags are then applied as if given on the command line, so a
// config and the equivalent flags build the same executable byte for byte;
// a flag given on the command line overrides the file.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_TOOLS_DEEPSPEEDCONFIG_H
#define ZTRAIN_TOOLS_DEEPSPEEDCONFIG_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ztrain {

struct DeepSpeedFlags {
  /// (flag name without dashes, value), in the file's order.
  std::vector<std::pair<std::string, std::string>> flags;
  /// The config key each flag came from ("zero_optimization.stage"), for
  /// errors about its value.
  std::vector<std::pair<std::string, std::string>> keys;
  /// The config key that set flag `name`, or "" when none did.
  std::string keyOf(llvm::StringRef name) const {
    for (const auto &[flag, key] : keys)
      if (flag == name)
        return key;
    return "";
  }
  /// train_micro_batch_size_per_gpu and train_batch_size (-1: absent),
  /// checked against the model's batch once it is parsed.
  int64_t microBatch = -1, trainBatch = -1;
  /// Keys the executable reads (scheduler, steps_per_print): the compiler
  /// says so, since it does not act on them.
  std::vector<std::string> forExecutable;
  /// Keys accepted with no effect on what ztrain builds, each with why
  /// (printed as notes).
  std::vector<std::string> notes;
};

/// The flags of the DeepSpeed config at `path`, or false with `error` set
/// to one line (a file that cannot be read or parsed, or the unknown and
/// unsupported keys, all listed).
bool readDeepSpeedConfig(llvm::StringRef path, DeepSpeedFlags &out,
                         std::string &error);

} // namespace ztrain

#endif // ZTRAIN_TOOLS_DEEPSPEEDCONFIG_H
