//===- DeepSpeedConfig.h - ztrain-compile --config ds_config.json --------===//
//
// Part of the ztrain project.
//
// ztrain-compile's side of --config: the file is read by the one reader
// both tools share (runtime/cli/DeepSpeedConfig, linked into this tool),
// which says which ztrain-compile flags it means (docs/config.md has the
// table, side by side with DeepSpeed's names). The flags are then applied
// as if given on the command line, so a config and the equivalent flags
// build the same executable byte for byte; a flag given on the command
// line overrides the file.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_TOOLS_DEEPSPEEDCONFIG_H
#define ZTRAIN_TOOLS_DEEPSPEEDCONFIG_H

#include "cli/DeepSpeedConfig.h"

#include "llvm/ADT/StringRef.h"

#include <string>

namespace ztrain {

/// The settings of a DeepSpeed config: `compileFlags` are this tool's
/// (flag names without dashes, with the key each came from).
using DeepSpeedFlags = ztrt::DeepSpeedConfig;

/// The settings of the DeepSpeed config at `path`, or false with `error`
/// set to one line (a file that cannot be read or parsed, or the unknown
/// and unsupported keys, all listed).
bool readDeepSpeedConfig(llvm::StringRef path, DeepSpeedFlags &out,
                         std::string &error);

} // namespace ztrain

#endif // ZTRAIN_TOOLS_DEEPSPEEDCONFIG_H
