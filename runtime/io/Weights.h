//===- Weights.h - Full weights in and out ----------------------*- C++ -*-===//
//
// Part of ztrain's runtime (private: not installed).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_IO_WEIGHTS_H
#define ZTRT_IO_WEIGHTS_H

#include <string>

struct ztrt_ctx;

namespace ztrt {

struct Descriptor;
struct Options;

/// Fills buffers and this rank's parameter storage from the seed or --init.
void initParams(ztrt_ctx &ctx, const Descriptor &desc, const Options &opts);
/// Writes the full parameters and buffers to `path` on rank 0 (collective).
void saveParams(ztrt_ctx &ctx, const Descriptor &desc, const std::string &path);

} // namespace ztrt

#endif // ZTRT_IO_WEIGHTS_H
