//===- RunConfig.h - --config, the executable's part ------------*- C++ -*-===//
//
// Part of ztrain's runtime (private: not installed).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_CLI_RUNCONFIG_H
#define ZTRT_CLI_RUNCONFIG_H

#include <set>
#include <string>

namespace ztrt {

struct Descriptor;
struct Options;

/// Applies a DeepSpeed JSON config to `opts`; a flag in `given` wins.
void applyRunConfig(const std::string &path, const std::set<std::string> &given,
                    Options &opts);
/// Refuses a config whose compiler keys describe another build.
void checkConfigAgainstBuild(const Descriptor &desc, const Options &opts,
                             const std::string &configPath);

} // namespace ztrt

#endif // ZTRT_CLI_RUNCONFIG_H
