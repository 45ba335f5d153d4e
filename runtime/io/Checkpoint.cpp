//===- Checkpoint.cpp - A checkpoint's names and directory layout ---------===//
//
// Part of ztrain's runtime. The names in a checkpoint root (`latest`,
// global_step<N>) and directory (index.json, the rank shards), and the
// tensors a descriptor checkpoints, for the writer (CheckpointWriter.cpp),
// the reader (CheckpointReader.cpp) and the shard loader
// (CheckpointShards.cpp).
//
//===----------------------------------------------------------------------===//

#include "io/Checkpoint.h"

#include "base/Support.h"
#include "io/CheckpointFiles.h"
#include "step/Context.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>

namespace ztrt {

std::string joinPath(const std::string &dir, const std::string &name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

/// The index's tensor list of a descriptor: parameters, then states, then
/// buffers.
std::vector<CheckpointTensor> checkpointTensors(const Descriptor &desc) {
  using Kind = CheckpointTensor::Kind;
  std::vector<CheckpointTensor> tensors;
  auto add = [&](const StoredTensorSpec &spec, Kind kind) {
    CheckpointTensor tensor;
    tensor.spec = spec;
    tensor.kind = kind;
    tensors.push_back(std::move(tensor));
  };
  for (const ParamSpec &spec : desc.params)
    add(spec, Kind::Param);
  for (const StateSpec &spec : desc.states) {
    add(spec, Kind::State);
    if (spec.master)
      tensors.back().masterOf = spec.of;
  }
  for (const BufferSpec &spec : desc.buffers)
    add(spec, Kind::Buffer);
  return tensors;
}

/// The storage of every checkpoint tensor of `ctx`, in checkpointTensors'
/// order.
std::vector<void *> checkpointStorage(ztrt_ctx &ctx) {
  std::vector<void *> all(ctx.params);
  all.insert(all.end(), ctx.states.begin(), ctx.states.end());
  all.insert(all.end(), ctx.buffers.begin(), ctx.buffers.end());
  return all;
}

/// Creates `dir` unless it exists; fatal if it cannot be made or is not a
/// directory.
void makeDirectory(const std::string &dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    fatal("--save-checkpoint: cannot create directory '%s': %s", dir.c_str(),
          strerror(errno));
  struct stat info;
  if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
    fatal("--save-checkpoint: '%s' is not a directory", dir.c_str());
}

const char *storageName(const StoredTensorSpec &spec) {
  if (spec.store == StoreMode::Shard)
    return "shard";
  return spec.storeElems == spec.numel ? "whole" : "full";
}

std::string checkpointShardName(int64_t rank, int64_t ranks) {
  return format("rank-%lld-of-%lld.safetensors", static_cast<long long>(rank),
                static_cast<long long>(ranks));
}

std::string checkpointTag(int64_t step) {
  return kTagPrefix + std::to_string(step);
}

/// The step of a directory name "global_step<N>", or -1.
int64_t tagStep(const std::string &name) {
  const size_t prefix = std::strlen(kTagPrefix);
  if (name.size() <= prefix || name.compare(0, prefix, kTagPrefix) != 0 ||
      name.size() - prefix > 18)
    return -1;
  for (size_t i = prefix; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9')
      return -1;
  return std::strtoll(name.c_str() + prefix, nullptr, 10);
}

bool isDirectory(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool isFile(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

/// The tag `root`/latest names, "" when there is no such file; fatal when it
/// is not a global_step<N> name.
std::string readLatest(const std::string &root, const char *what) {
  const std::string path = joinPath(root, kLatestName);
  struct stat info;
  if (::lstat(path.c_str(), &info) != 0)
    return "";
  // The input rule (a FIFO or a device would block or never end).
  std::vector<char> text = readInputFile(path, what);
  std::string tag(text.begin(), text.end());
  tag = tag.substr(0, tag.find('\n'));
  if (tagStep(tag) < 0)
    fatal("%s: '%s' does not name a checkpoint (expected global_step<N>, "
          "got '%s')",
          what, path.c_str(), tag.c_str());
  return tag;
}

std::string resolveCheckpoint(const std::string &path, const char *what) {
  std::string tag = readLatest(path, what);
  if (tag.empty())
    return path;
  std::string dir = joinPath(path, tag);
  // Killed between moving an earlier save of this step aside and renaming
  // its replacement into place: the earlier one is complete.
  std::string old = joinPath(path, kOldPrefix + tag);
  if (!isFile(joinPath(dir, kIndexName)) && isFile(joinPath(old, kIndexName)))
    return old;
  return dir;
}

} // namespace ztrt
