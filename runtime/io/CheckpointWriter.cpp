//===- CheckpointWriter.cpp - Saving a checkpoint -------------------------===//
//
// Part of ztrain's runtime. --save-checkpoint: every rank's shard (one
// shard group's, with a mesh), rank 0's
// index.json, the directory renamed into place and `latest` switched, in
// the crash-safe order Checkpoint.h describes; then the old checkpoints go.
//
//===----------------------------------------------------------------------===//

#include "io/Checkpoint.h"

#include "base/Json.h"
#include "base/Support.h"
#include "io/CheckpointFiles.h"
#include "io/Safetensors.h"
#include "step/Context.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sys/stat.h>

namespace ztrt {

namespace {

Json tensorJson(const CheckpointTensor &tensor) {
  const StoredTensorSpec &spec = tensor.spec;
  Json json = {{"name", spec.name},
               {"kind", tensor.kindName()},
               {"dtype", elemTypeSafetensorsName(spec.type)},
               {"shape", spec.shape}};
  if (!tensor.masterOf.empty())
    json["master_of"] = tensor.masterOf;
  json["storage"] = storageName(spec);
  json["elements"] = spec.storeElems;
  Json crc = Json::array();
  for (uint32_t c : tensor.crc)
    crc.push_back(format("%08x", c));
  json["crc32c"] = std::move(crc);
  return json;
}

/// DIR/index.json: Hugging Face's sharded-checkpoint keys ("metadata" with
/// the total tensor bytes, "weight_map"), then ztrain's own. A ZeRO tensor
/// lives in every rank's file, so its weight_map entry is the list of
/// files in rank order rather than one file name.
std::string indexJson(const std::vector<CheckpointTensor> &tensors,
                      const char *descriptorText,
                      const CheckpointProgress &progress, int64_t ranks,
                      int64_t replicate, bool mesh) {
  int64_t rankBytes = 0;
  for (const CheckpointTensor &tensor : tensors)
    rankBytes += tensor.spec.storeBytes;
  Json files = Json::array();
  for (int64_t r = 0; r < ranks; ++r)
    files.push_back(checkpointShardName(r, ranks));
  Json weightMap = Json::object();
  for (const CheckpointTensor &tensor : tensors)
    jsonAppend(weightMap, tensor.spec.name, files);
  Json z = {{"version", kIndexVersion}, {"world_size", ranks},
            {"files", files},           {"step", progress.step},
            {"seed", progress.seed},    {"data", progress.data}};
  // Hybrid sharding: `ranks` shard files (one shard group's), written by
  // the first of `replicate` groups that held the same shards.
  if (mesh)
    z["mesh"] = {{"shard", ranks}, {"replicate", replicate}};
  Json list = Json::array();
  for (const CheckpointTensor &tensor : tensors)
    list.push_back(tensorJson(tensor));
  z["tensors"] = std::move(list);
  if (const std::optional<LossScaler::State> &ls = progress.lossScaler)
    z["loss_scaler"] = {{"scale", ls->scale},
                        {"iter", ls->iter},
                        {"last_overflow_iter", ls->lastOverflowIter},
                        {"hysteresis", ls->hysteresis},
                        {"skipped", ls->skipped}};
  if (progress.dataPrint) {
    z["data_size"] = progress.dataPrint->size;
    z["data_crc32c"] = progress.dataPrint->crc;
  }
  z["data_samples"] = progress.dataSamples;
  if (!progress.dataFormat.empty()) {
    z["data_format"] = progress.dataFormat;
    z["data_order"] = progress.dataOrder;
  }
  if (progress.gradAccumSteps > 0)
    z["grad_accum_steps"] = progress.gradAccumSteps;
  if (!progress.run.empty()) {
    Json run = Json::object();
    for (const auto &[key, value] : progress.run)
      run[key] = value;
    z["run"] = std::move(run);
  }
  z["descriptor"] = descriptorText;
  Json root = {{"metadata", {{"total_size", rankBytes * ranks}}},
               {"weight_map", std::move(weightMap)},
               {"ztrain", std::move(z)}};
  return dumpJson(root) + "\n";
}

/// Fatal with `what`, the path and errno unless removeTree(path) succeeds.
void removeOrDie(const std::string &path, const char *what) {
  if (!removeTree(path))
    fatal("%s: cannot remove '%s': %s", what, path.c_str(), strerror(errno));
}

/// A writer's part of a save: this rank's shard file (shard `group.rank()`
/// of `group.count()`) committed into `tempDir`, and every tensor of the
/// checkpoint with the CRC-32C of each of the group's files, which the
/// gather over the group exchanges (after it, every file of the group is
/// durable).
std::vector<CheckpointTensor> writeShardFile(ztrt_ctx &ctx,
                                             const Descriptor &desc,
                                             const CheckpointProgress &progress,
                                             Communicator &group,
                                             const std::string &tempDir) {
  const int rank = group.rank(), ranks = group.count();
  Backend &backend = ctx.backend();
  std::vector<CheckpointTensor> specs = checkpointTensors(desc);
  std::vector<void *> storage = checkpointStorage(ctx);
  std::vector<std::vector<char>> host;
  std::vector<SafetensorsWriteTensor> tensors;
  std::vector<uint32_t> mine;
  for (size_t i = 0; i < specs.size(); ++i) {
    const StoredTensorSpec &spec = specs[i].spec;
    host.emplace_back(static_cast<size_t>(spec.storeBytes));
    // States and parameters may live on nvme.
    if (specs[i].kind == CheckpointTensor::Kind::State)
      ctx.stateToHost(i - ctx.params.size(), host.back().data(),
                      spec.storeBytes);
    else if (specs[i].kind == CheckpointTensor::Kind::Param)
      ctx.paramToHost(i, host.back().data(), spec.storeBytes);
    else
      backend.copyToHost(host.back().data(), storage[i], spec.storeBytes);
    mine.push_back(crc32c(host.back().data(), host.back().size()));
  }
  for (size_t i = 0; i < specs.size(); ++i)
    tensors.push_back({specs[i].spec.name,
                       elemTypeSafetensorsName(specs[i].spec.type),
                       {specs[i].spec.storeElems},
                       host[i].data()});
  // writeSafetensors commits atomically: fsync of the file, rename, fsync
  // of the directory.
  writeSafetensors(joinPath(tempDir, checkpointShardName(rank, ranks)),
                   tensors,
                   {{"format", "pt"},
                    {"ztrain_rank", std::to_string(rank)},
                    {"ztrain_world_size", std::to_string(ranks)},
                    {"ztrain_step", std::to_string(progress.step)}});

  // Every file's checksums to every writer (rank 0 writes them).
  std::vector<uint32_t> all(specs.size() * static_cast<size_t>(ranks));
  group.allGather(mine.data(), all.data(), static_cast<int64_t>(mine.size()),
                  sizeof(uint32_t));
  for (size_t i = 0; i < specs.size(); ++i)
    for (int r = 0; r < ranks; ++r)
      specs[i].crc.push_back(all[static_cast<size_t>(r) * specs.size() + i]);
  return specs;
}

} // namespace

void saveCheckpoint(ztrt_ctx &ctx, const Descriptor &desc,
                    const char *descriptorText,
                    const CheckpointProgress &progress, const std::string &root,
                    int64_t keep) {
  const char *what = "--save-checkpoint";
  Communicator &comm = ctx.comm();
  // The files are one shard group's: rank r's shard r % S (the world
  // without a mesh), written by the first replicate group (rank < S); the
  // other groups hold the same bytes.
  Communicator &group = ctx.shardComm();
  const bool writer = ctx.replicateCount() == 1 || ctx.axisComm(2).rank() == 0;
  const std::string tag = checkpointTag(progress.step);
  const std::string finalDir = joinPath(root, tag);
  const std::string tempDir = joinPath(root, kTempPrefix + tag);
  if (comm.rank() == 0) {
    makeDirectory(root);
    lockOutputDirectory(root, what);
    // A save killed earlier may have left its temporary directory; it was
    // never named by `latest`, so it goes.
    removeOrDie(tempDir, what);
    if (::mkdir(tempDir.c_str(), 0755) != 0)
      fatal("%s: cannot create directory '%s': %s", what, tempDir.c_str(),
            strerror(errno));
    syncDirectory(root);
  }
  // The temporary directory exists before any rank writes into it. A rank
  // whose write fails (ENOSPC, EFBIG, EIO) removes it on its way out: a
  // failed save leaves the previous checkpoint and nothing else.
  comm.barrier();
  removeOnFatal(tempDir);
  std::vector<CheckpointTensor> specs;
  if (writer)
    specs = writeShardFile(ctx, desc, progress, group, tempDir);
  if (comm.rank() == 0) {
    std::string json = indexJson(
        specs, descriptorText, progress, ctx.shardCount(), ctx.replicateCount(),
        (desc.hasMesh && !desc.meshSecondary) || ctx.replicateCount() > 1);
    AtomicFile index(joinPath(tempDir, kIndexName));
    index.write(json.data(), json.size());
    index.commit();
    // Into place. A directory of the same step not named by `latest` is a
    // stale one (a run that started over): replace it. One `latest` names
    // (this step saved again) moves aside first and goes only after
    // `latest` is rewritten, so a crash in between leaves it findable.
    const std::string latest = readLatest(root, what);
    const std::string oldDir = joinPath(root, kOldPrefix + tag);
    if (latest == tag && isDirectory(finalDir)) {
      removeOrDie(oldDir, what);
      if (::rename(finalDir.c_str(), oldDir.c_str()) != 0)
        fatal("%s: cannot move '%s' aside: %s", what, finalDir.c_str(),
              strerror(errno));
    } else {
      removeOrDie(finalDir, what);
    }
    if (::rename(tempDir.c_str(), finalDir.c_str()) != 0)
      fatal("%s: cannot rename '%s' to '%s': %s", what, tempDir.c_str(),
            finalDir.c_str(), strerror(errno));
    keepOnFatal(tempDir);
    syncDirectory(root);
    std::string pointer = tag + "\n";
    AtomicFile latestFile(joinPath(root, kLatestName));
    latestFile.write(pointer.data(), pointer.size());
    latestFile.commit();

    // The new checkpoint is the one `latest` names: tidy up. Leftovers of
    // killed saves (temporary directories, temp files of `latest`), then
    // all but the newest `keep` checkpoints.
    std::vector<std::pair<int64_t, std::string>> steps;
    for (const std::string &name : listDirectory(root)) {
      std::string path = joinPath(root, name);
      if (name.compare(0, std::strlen(kTempPrefix), kTempPrefix) == 0 ||
          name.compare(0, std::strlen(kOldPrefix), kOldPrefix) == 0 ||
          name.compare(0, std::strlen(kLatestName) + 5, "latest.tmp.") == 0)
        removeOrDie(path, what);
      else if (int64_t step = tagStep(name); step >= 0 && isDirectory(path))
        steps.push_back({step, path});
    }
    std::sort(steps.begin(), steps.end());
    // The checkpoints past this run's first save when it made it are a
    // run's this one was resumed from an earlier step of (a rollback), or
    // started over: not this run's, they neither count against `keep` nor
    // go, until this run saves the same step (which replaces it, above).
    static std::set<int64_t> abandoned;
    static bool firstSave = true;
    if (firstSave) {
      firstSave = false;
      for (const auto &[step, path] : steps)
        if (step > progress.step)
          abandoned.insert(step);
      if (keep > 0 && !abandoned.empty()) {
        std::string names;
        for (int64_t step : abandoned)
          names += (names.empty() ? "" : ", ") + checkpointTag(step);
        warning("--keep-checkpoints: %s in '%s' %s past this run's step "
                "%lld (a run it was rolled back from): not counted and "
                "not deleted (this run replaces one when it saves that "
                "step)",
                names.c_str(), root.c_str(),
                abandoned.size() == 1 ? "is" : "are",
                static_cast<long long>(progress.step));
      }
    }
    abandoned.erase(progress.step);
    std::vector<std::pair<int64_t, std::string>> mine;
    for (const auto &entry : steps)
      if (!abandoned.count(entry.first))
        mine.push_back(entry);
    if (keep > 0)
      for (size_t i = 0; i + static_cast<size_t>(keep) < mine.size(); ++i)
        if (mine[i].second != finalDir)
          removeOrDie(mine[i].second, what);
    syncDirectory(root);
  }
  // No rank runs ahead (or exits) before the checkpoint is committed.
  comm.barrier();
  keepOnFatal(tempDir);
}

} // namespace ztrt
