//===- CheckpointShards.cpp - Loading shards back, consolidation ----------===//
//
// Part of ztrain's runtime. A checkpoint's shard files read back: into this
// rank's storage on --resume (byte for byte in the same layout, resharded
// from every shard in another), and whole tensors for ztrain-consolidate.
//
//===----------------------------------------------------------------------===//

#include "io/Checkpoint.h"

#include "base/Json.h"
#include "base/Support.h"
#include "io/CheckpointFiles.h"
#include "io/Safetensors.h"
#include "step/Context.h"

#include <algorithm>
#include <cstring>

namespace ztrt {

namespace {


/// The metadata value `key` of a shard file, or "".
std::string metadataValue(const SafetensorsFile &file, const char *key) {
  for (const auto &[name, value] : file.metadata())
    if (name == key)
      return value;
  return "";
}

/// Reads rank `rank`'s shard file of `index` and checks that it belongs to
/// this checkpoint (rank, world size and step in its metadata: a shard left
/// from another save is refused) and holds every tensor of the index as
/// 1-D storage of E elements.
SafetensorsFile readShard(const CheckpointIndex &index, int64_t rank,
                          const char *what) {
  std::string path =
      joinPath(index.dir, checkpointShardName(rank, index.worldSize));
  SafetensorsFile file = SafetensorsFile::read(path, what);
  const char *name = path.c_str();
  std::string expected[3][2] = {
      {"ztrain_rank", std::to_string(rank)},
      {"ztrain_world_size", std::to_string(index.worldSize)},
      {"ztrain_step", std::to_string(index.step)}};
  for (const auto &[key, value] : expected) {
    std::string got = metadataValue(file, key.c_str());
    if (got != value)
      fatal("%s: '%s' has %s '%s' but the index says '%s' (a shard of "
            "another save)",
            what, name, key.c_str(), got.c_str(), value.c_str());
  }
  for (const CheckpointTensor &tensor : index.tensors) {
    const StoredTensorSpec &spec = tensor.spec;
    const SafetensorsTensor *stored = file.find(spec.name);
    if (!stored)
      fatal("%s: '%s' has no tensor '%s'", what, name, spec.name.c_str());
    const char *dtype = elemTypeSafetensorsName(spec.type);
    std::vector<int64_t> shape = {spec.storeElems};
    if (stored->dtype != dtype || stored->shape != shape)
      fatal("%s: '%s': tensor '%s' is %s %s, the index says %s %s", what, name,
            spec.name.c_str(), stored->dtype.c_str(),
            formatShape(stored->shape).c_str(), dtype,
            formatShape(shape).c_str());
  }
  return file;
}

/// Fatal unless every tensor of rank `rank`'s shard `file` has the CRC-32C
/// the index recorded for it (an index of version 1 has none to check).
void checkShardChecksums(const CheckpointIndex &index, int64_t rank,
                         const SafetensorsFile &file, const char *what) {
  std::string path =
      joinPath(index.dir, checkpointShardName(rank, index.worldSize));
  for (const CheckpointTensor &tensor : index.tensors) {
    if (tensor.crc.empty())
      continue;
    const StoredTensorSpec &spec = tensor.spec;
    uint32_t got = crc32c(file.find(spec.name)->data,
                          static_cast<size_t>(spec.storeBytes));
    uint32_t want = tensor.crc[static_cast<size_t>(rank)];
    if (got != want)
      fatal("%s: '%s': tensor '%s' fails its checksum (CRC-32C %08x, the "
            "index says %08x): the file is damaged",
            what, path.c_str(), spec.name.c_str(), got, want);
  }
}

} // namespace

/// Reassembles the tensors `specs` (as the index stores them) whole into
/// `full` (one buffer of spec.bytes each), reading one shard file at a
/// time: a rank's slice of each tensor goes to its place; rank 0's copy of
/// `whole` / `full` storage is taken, as --save does; padding is dropped.
static void assembleTensors(const CheckpointIndex &index,
                            const std::vector<const StoredTensorSpec *> &specs,
                            std::vector<std::vector<char>> &full,
                            const char *what) {
  for (int64_t rank = 0; rank < index.worldSize; ++rank) {
    SafetensorsFile file = readShard(index, rank, what);
    checkShardChecksums(index, rank, file, what);
    for (size_t i = 0; i < specs.size(); ++i) {
      const StoredTensorSpec &spec = *specs[i];
      if (spec.store == StoreMode::Full && rank != 0)
        continue;
      StorageSlice slice = spec.slice(rank);
      std::memcpy(full[i].data() + slice.begin * spec.elemBytes(),
                  file.find(spec.name)->data,
                  static_cast<size_t>(slice.count * spec.elemBytes()));
    }
  }
}

/// Puts checkpoint tensor `i` (storeBytes of `host`) into its storage:
/// device memory, or an nvme-resident tensor's swap file.
static void storeTensor(ztrt_ctx &ctx, const CheckpointTensor &tensor,
                        void *storage, size_t i, const void *host) {
  if (tensor.kind == CheckpointTensor::Kind::State)
    ctx.stateFromHost(i - ctx.params.size(), host, tensor.spec.storeBytes);
  else if (tensor.kind == CheckpointTensor::Kind::Param)
    ctx.paramFromHost(i, host, tensor.spec.storeBytes);
  else
    ctx.backend().copyFromHost(storage, host, tensor.spec.storeBytes);
}

void loadCheckpointShard(ztrt_ctx &ctx, const Descriptor &desc,
                         const CheckpointIndex &index) {
  // This rank's shard (rank % S with a mesh, whose replicate groups all
  // load the same files) and the number of shards.
  const int64_t rank = ctx.shardIndex(), ranks = ctx.shardCount();
  // checkResumable made sure that the index has every tensor of the
  // descriptor with its type and shape.
  std::vector<CheckpointTensor> specs = checkpointTensors(desc);
  std::vector<void *> storage = checkpointStorage(ctx);
  if (checkpointLayoutMatches(index, desc, ranks)) {
    // This rank's storage is its shard file's, byte for byte.
    SafetensorsFile file = readShard(index, rank, "--resume");
    checkShardChecksums(index, rank, file, "--resume");
    for (size_t i = 0; i < specs.size(); ++i)
      storeTensor(ctx, specs[i], storage[i], i,
                  file.find(specs[i].spec.name)->data);
  } else {
    // Resharding (another dp or ZeRO stage): every tensor whole from the
    // checkpoint's shards (as ztrain-consolidate assembles them), then
    // this rank's storage of it under this build's layout, padding zero.
    std::vector<std::vector<char>> full(specs.size());
    std::vector<const StoredTensorSpec *> saved(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      auto it = std::find_if(index.tensors.begin(), index.tensors.end(),
                             [&](const CheckpointTensor &t) {
                               return t.spec.name == specs[i].spec.name;
                             });
      saved[i] = &it->spec;
      full[i].resize(static_cast<size_t>(it->spec.bytes));
    }
    assembleTensors(index, saved, full, "--resume");
    for (size_t i = 0; i < specs.size(); ++i) {
      const StoredTensorSpec &spec = specs[i].spec;
      std::vector<char> mine(static_cast<size_t>(spec.storeBytes), 0);
      StorageSlice slice = spec.slice(rank);
      std::memcpy(mine.data(),
                  full[i].data() + slice.begin * spec.elemBytes(),
                  static_cast<size_t>(slice.count * spec.elemBytes()));
      storeTensor(ctx, specs[i], storage[i], i, mine.data());
    }
  }
  // checkResumable made sure the state is there when the model scales.
  if (ctx.scaler && !ctx.scaler->restore(*index.lossScaler))
    fatal("--resume '%s': the \"loss_scaler\" state (scale %g, hysteresis "
          "%lld, %lld skipped of %lld) is not one this model's loss scaling "
          "reaches",
          index.named.c_str(), index.lossScaler->scale,
          static_cast<long long>(index.lossScaler->hysteresis),
          static_cast<long long>(index.lossScaler->skipped),
          static_cast<long long>(index.lossScaler->iter));
}

void consolidateCheckpoint(const std::string &dir, const std::string &out,
                           ConsolidateType dtype, int64_t maxShardBytes) {
  const char *what = "ztrain-consolidate";
  CheckpointIndex index = readCheckpointIndex(dir, what);
  // What is written: parameters and buffers (a state dict, as --save writes
  // them); with fp32, also the f32 masters, which replace their parameters.
  std::vector<const CheckpointTensor *> parts;
  std::vector<std::vector<char>> full;
  std::vector<int64_t> masterPart; // per part: its master's part, or -1
  for (const CheckpointTensor &tensor : index.tensors) {
    if (tensor.kind == CheckpointTensor::Kind::State)
      continue;
    parts.push_back(&tensor);
    full.emplace_back(static_cast<size_t>(tensor.spec.bytes));
  }
  const size_t written = parts.size();
  masterPart.assign(written, -1);
  if (dtype == ConsolidateType::FP32)
    for (const CheckpointTensor &tensor : index.tensors) {
      if (tensor.masterOf.empty())
        continue;
      size_t p = 0;
      while (p < written && !(parts[p]->kind == CheckpointTensor::Kind::Param &&
                              parts[p]->spec.name == tensor.masterOf))
        ++p;
      if (p == written || parts[p]->spec.shape != tensor.spec.shape)
        fatal("%s: '%s': master state '%s' is of '%s', which is not a "
              "parameter of its shape in the checkpoint",
              what, index.named.c_str(), tensor.spec.name.c_str(),
              tensor.masterOf.c_str());
      masterPart[p] = static_cast<int64_t>(parts.size());
      parts.push_back(&tensor);
      full.emplace_back(static_cast<size_t>(tensor.spec.bytes));
    }
  std::vector<const StoredTensorSpec *> specs;
  for (const CheckpointTensor *part : parts)
    specs.push_back(&part->spec);
  assembleTensors(index, specs, full, what);
  std::vector<SafetensorsWriteTensor> tensors;
  std::vector<std::vector<char>> converted(written);
  for (size_t i = 0; i < written; ++i) {
    const StoredTensorSpec &spec = parts[i]->spec;
    ElemType type = spec.type;
    const char *data = full[i].data();
    if (dtype != ConsolidateType::Own && isFloatType(spec.type)) {
      // fp32: the master when there is one (the unrounded weights), else
      // the tensor widened (exact); bf16: the tensor rounded to bf16.
      ElemType from = spec.type;
      if (masterPart[i] >= 0) {
        data = full[static_cast<size_t>(masterPart[i])].data();
        from = ElemType::F32;
      }
      type = dtype == ConsolidateType::FP32 ? ElemType::F32 : ElemType::BF16;
      if (from != type) {
        converted[i].resize(
            static_cast<size_t>(spec.numel * elemTypeBytes(type)));
        convertElements(from, data, type, converted[i].data(), spec.numel);
        data = converted[i].data();
      }
    }
    tensors.push_back(
        {spec.name, elemTypeSafetensorsName(type), spec.shape, data});
  }
  // The same metadata as --save: "format": "pt" is what Hugging Face
  // loaders look for in PyTorch weights.
  if (maxShardBytes <= 0) {
    writeSafetensors(out, tensors, {{"format", "pt"}});
    return;
  }
  // Hugging Face's sharded layout: consecutive tensors up to the size.
  std::vector<std::vector<SafetensorsWriteTensor>> shards;
  int64_t inShard = 0, total = 0;
  for (const SafetensorsWriteTensor &t : tensors) {
    ElemType type = ElemType::F32;
    elemTypeFromSafetensorsName(t.dtype.c_str(), &type);
    int64_t bytes = elemTypeBytes(type);
    for (int64_t d : t.shape)
      bytes *= d;
    if (shards.empty() || (inShard > 0 && inShard + bytes > maxShardBytes)) {
      shards.emplace_back();
      inShard = 0;
    }
    shards.back().push_back(t);
    inShard += bytes;
    total += bytes;
  }
  makeDirectory(out);
  Json map = Json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = format("model-%05zu-of-%05zu.safetensors", s + 1,
                                    shards.size());
    writeSafetensors(joinPath(out, name), shards[s], {{"format", "pt"}});
    for (const SafetensorsWriteTensor &t : shards[s])
      jsonAppend(map, t.name, name);
  }
  // Hugging Face's sharded-checkpoint index.
  Json hf = {{"metadata", {{"total_size", total}}},
             {"weight_map", std::move(map)}};
  const std::string json = dumpJson(hf) + "\n";
  AtomicFile hfIndex(joinPath(out, "model.safetensors.index.json"));
  hfIndex.write(json.data(), json.size());
  hfIndex.commit();
}

} // namespace ztrt
