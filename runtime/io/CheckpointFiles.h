//===- CheckpointFiles.h - A checkpoint's names and files -------*- C++ -*-===//
//
// Part of ztrain's runtime (private: not installed). What the checkpoint's
// files share (Checkpoint.cpp: names and directory layout;
// CheckpointWriter.cpp: saving; CheckpointReader.cpp: the index and the
// resume checks; CheckpointShards.cpp: loading shards back, resharded, and
// consolidation): the names in a checkpoint root and directory, and the
// tensors a descriptor checkpoints. The functions are defined, and
// documented, in Checkpoint.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_IO_CHECKPOINTFILES_H
#define ZTRT_IO_CHECKPOINTFILES_H

#include "io/Checkpoint.h"

#include <cstdint>
#include <string>
#include <vector>

struct ztrt_ctx;

namespace ztrt {

constexpr const char *kIndexName = "index.json";
constexpr const char *kLatestName = "latest";
constexpr const char *kTagPrefix = "global_step";
constexpr const char *kTempPrefix = ".tmp-";
constexpr const char *kOldPrefix = ".old-";
/// 2: per-rank CRC-32C of every tensor. Version 1 (no checksums) is still
/// read.
constexpr int64_t kIndexVersion = 2;

std::string joinPath(const std::string &dir, const std::string &name);
std::vector<CheckpointTensor> checkpointTensors(const Descriptor &desc);
std::vector<void *> checkpointStorage(ztrt_ctx &ctx);
void makeDirectory(const std::string &dir);
int64_t tagStep(const std::string &name);
bool isDirectory(const std::string &path);
bool isFile(const std::string &path);
std::string readLatest(const std::string &root, const char *what);

} // namespace ztrt

#endif // ZTRT_IO_CHECKPOINTFILES_H
