//===- Checkpoint.cpp - Sharded checkpoints: save, resume, consolidate ----===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "io/Checkpoint.h"

#include "step/Context.h"
#include "base/Json.h"
#include "io/Safetensors.h"
#include "base/Support.h"

#include <algorithm>
#include <set>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace ztrt {

namespace {

constexpr const char *kIndexName = "index.json";
constexpr const char *kLatestName = "latest";
constexpr const char *kTagPrefix = "global_step";
constexpr const char *kTempPrefix = ".tmp-";
constexpr const char *kOldPrefix = ".old-";
/// 2: per-rank CRC-32C of every tensor. Version 1 (no checksums) is still
/// read.
constexpr int64_t kIndexVersion = 2;

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

std::string tensorJson(const CheckpointTensor &tensor) {
  const StoredTensorSpec &spec = tensor.spec;
  std::string json =
      format("{\"name\": %s, \"kind\": \"%s\", \"dtype\": "
             "\"%s\", \"shape\": ",
             jsonQuote(spec.name).c_str(), tensor.kindName(),
             elemTypeSafetensorsName(spec.type));
  json += formatShape(spec.shape);
  if (!tensor.masterOf.empty())
    json += ", \"master_of\": " + jsonQuote(tensor.masterOf);
  json += format(", \"storage\": \"%s\", \"elements\": %lld, \"crc32c\": [",
                 storageName(spec), static_cast<long long>(spec.storeElems));
  for (size_t r = 0; r < tensor.crc.size(); ++r)
    json += format("%s\"%08x\"", r ? ", " : "", tensor.crc[r]);
  return json + "]}";
}

/// DIR/index.json: Hugging Face's sharded-checkpoint keys ("metadata" with
/// the total tensor bytes, "weight_map"), then ztrain's own. A ZeRO tensor
/// lives in every rank's file, so its weight_map entry is the list of
/// files in rank order rather than one file name.
std::string indexJson(const std::vector<CheckpointTensor> &tensors,
                      const char *descriptorText,
                      const CheckpointProgress &progress, int64_t ranks) {
  int64_t rankBytes = 0;
  for (const CheckpointTensor &tensor : tensors)
    rankBytes += tensor.spec.storeBytes;
  std::string files;
  for (int64_t r = 0; r < ranks; ++r)
    files += (r ? ", \"" : "\"") + checkpointShardName(r, ranks) + "\"";
  std::string json = format("{\n  \"metadata\": {\"total_size\": %lld},\n"
                            "  \"weight_map\": {",
                            static_cast<long long>(rankBytes * ranks));
  for (size_t i = 0; i < tensors.size(); ++i)
    json += format("%s\n    %s: [%s]", i ? "," : "",
                   jsonQuote(tensors[i].spec.name).c_str(), files.c_str());
  json += tensors.empty() ? "},\n" : "\n  },\n";
  json += format("  \"ztrain\": {\n    \"version\": %lld,\n"
                 "    \"world_size\": %lld,\n    \"files\": [%s],\n"
                 "    \"step\": %lld,\n    \"seed\": %llu,\n"
                 "    \"data\": %s,\n    \"tensors\": [",
                 static_cast<long long>(kIndexVersion),
                 static_cast<long long>(ranks), files.c_str(),
                 static_cast<long long>(progress.step),
                 static_cast<unsigned long long>(progress.seed),
                 jsonQuote(progress.data).c_str());
  for (size_t i = 0; i < tensors.size(); ++i)
    json += (i ? ",\n      " : "\n      ") + tensorJson(tensors[i]);
  json += tensors.empty() ? "],\n" : "\n    ],\n";
  if (const std::optional<LossScaler::State> &ls = progress.lossScaler)
    json += format("    \"loss_scaler\": {\"scale\": %.17g, \"iter\": %lld, "
                   "\"last_overflow_iter\": %lld, \"hysteresis\": %lld, "
                   "\"skipped\": %lld},\n",
                   ls->scale, static_cast<long long>(ls->iter),
                   static_cast<long long>(ls->lastOverflowIter),
                   static_cast<long long>(ls->hysteresis),
                   static_cast<long long>(ls->skipped));
  if (progress.dataPrint)
    json += format("    \"data_size\": %llu,\n    \"data_crc32c\": %lu,\n",
                   static_cast<unsigned long long>(progress.dataPrint->size),
                   static_cast<unsigned long>(progress.dataPrint->crc));
  json += format("    \"data_samples\": %lld,\n",
                 static_cast<long long>(progress.dataSamples));
  if (!progress.dataFormat.empty())
    json += format("    \"data_format\": %s,\n    \"data_order\": %s,\n",
                   jsonQuote(progress.dataFormat).c_str(),
                   jsonQuote(progress.dataOrder).c_str());
  if (progress.gradAccumSteps > 0)
    json += format("    \"grad_accum_steps\": %lld,\n",
                   static_cast<long long>(progress.gradAccumSteps));
  if (!progress.run.empty()) {
    json += "    \"run\": {";
    for (size_t i = 0; i < progress.run.size(); ++i)
      json += (i ? ", " : "") + jsonQuote(progress.run[i].first) + ": " +
              jsonQuote(progress.run[i].second);
    json += "},\n";
  }
  json += "    \"descriptor\": " + jsonQuote(descriptorText) + "\n  }\n}\n";
  return json;
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

/// `text` split at newlines, empty lines dropped (the descriptor parser
/// skips them too).
std::vector<std::string> nonEmptyLines(const std::string &text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      lines.push_back(line);
  return lines;
}

std::string describeStorage(const StoredTensorSpec &spec) {
  return format("%s %s, storage '%s' of %lld elements",
                elemTypeSafetensorsName(spec.type),
                formatShape(spec.shape).c_str(), storageName(spec),
                static_cast<long long>(spec.storeElems));
}

} // namespace

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

namespace {

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

/// Fatal with `what`, the path and errno unless removeTree(path) succeeds.
void removeOrDie(const std::string &path, const char *what) {
  if (!removeTree(path))
    fatal("%s: cannot remove '%s': %s", what, path.c_str(), strerror(errno));
}

} // namespace

void saveCheckpoint(ztrt_ctx &ctx, const Descriptor &desc,
                    const char *descriptorText,
                    const CheckpointProgress &progress, const std::string &root,
                    int64_t keep) {
  const char *what = "--save-checkpoint";
  Communicator &comm = ctx.comm();
  const int rank = comm.rank(), ranks = comm.count();
  const std::string tag = checkpointTag(progress.step);
  const std::string finalDir = joinPath(root, tag);
  const std::string tempDir = joinPath(root, kTempPrefix + tag);
  if (rank == 0) {
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

  // Every rank's checksums to every rank (rank 0 writes them); the gather
  // is also the barrier after which every shard is durable.
  std::vector<uint32_t> all(specs.size() * static_cast<size_t>(ranks));
  comm.allGather(mine.data(), all.data(), static_cast<int64_t>(mine.size()),
                 sizeof(uint32_t));
  if (rank == 0) {
    for (size_t i = 0; i < specs.size(); ++i)
      for (int r = 0; r < ranks; ++r)
        specs[i].crc.push_back(all[static_cast<size_t>(r) * specs.size() + i]);
    std::string json = indexJson(specs, descriptorText, progress, ranks);
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

CheckpointIndex readCheckpointIndex(const std::string &named,
                                    const char *what) {
  const std::string dir = resolveCheckpoint(named, what);
  const std::string path = joinPath(dir, kIndexName);
  struct stat info;
  if (::lstat(path.c_str(), &info) != 0)
    fatal("%s: cannot open '%s': %s (not a checkpoint, or an incomplete "
          "one)",
          what, path.c_str(), strerror(errno));
  // The input rule (a FIFO or a device would block or never end).
  std::vector<char> bytes = readInputFile(path, what);
  std::string text(bytes.begin(), bytes.end());
  auto bad = [&](const std::string &message) {
    fatal("%s: '%s' is not a valid checkpoint index: %s", what, path.c_str(),
          message.c_str());
  };
  JsonValue root;
  std::string error;
  if (!parseJson(text, root, error))
    bad(error);
  const JsonValue *ztrain = root.find("ztrain");
  if (!ztrain || ztrain->kind != JsonValue::Kind::Object)
    bad("no \"ztrain\" object");
  auto integer = [&](const JsonValue &object, const char *key, int64_t min) {
    const JsonValue *value = object.find(key);
    int64_t out;
    if (!value || !value->getInt64(out) || out < min)
      bad(format("\"%s\" is not an integer >= %lld", key,
                 static_cast<long long>(min)));
    return out;
  };
  auto string = [&](const JsonValue &object, const char *key) {
    const JsonValue *value = object.find(key);
    if (!value || value->kind != JsonValue::Kind::String)
      bad(format("\"%s\" is not a string", key));
    return value->text;
  };

  CheckpointIndex index;
  index.dir = dir;
  index.named = named;
  const int64_t version = integer(*ztrain, "version", 0);
  if (version != 1 && version != kIndexVersion)
    bad(format("unsupported version %lld (this runtime reads versions 1 and "
               "%lld)",
               static_cast<long long>(version),
               static_cast<long long>(kIndexVersion)));
  index.worldSize = integer(*ztrain, "world_size", 1);
  index.step = integer(*ztrain, "step", 0);
  const JsonValue *seed = ztrain->find("seed");
  char *end = nullptr;
  errno = 0;
  if (!seed || seed->kind != JsonValue::Kind::Number || seed->text.empty() ||
      seed->text[0] == '-' ||
      (index.seed = std::strtoull(seed->text.c_str(), &end, 10), *end) ||
      errno == ERANGE)
    bad("\"seed\" is not an unsigned 64-bit integer");
  index.data = string(*ztrain, "data");
  if (ztrain->find("data_size") || ztrain->find("data_crc32c"))
    index.dataPrint = std::make_pair(
        static_cast<uint64_t>(integer(*ztrain, "data_size", 0)),
        static_cast<uint32_t>(integer(*ztrain, "data_crc32c", 0)));
  if (ztrain->find("grad_accum_steps"))
    index.gradAccumSteps = integer(*ztrain, "grad_accum_steps", 1);
  if (ztrain->find("data_samples"))
    index.dataSamples = integer(*ztrain, "data_samples", 0);
  if (ztrain->find("data_format"))
    index.dataFormat = string(*ztrain, "data_format");
  if (ztrain->find("data_order"))
    index.dataOrder = string(*ztrain, "data_order");
  index.descriptor = string(*ztrain, "descriptor");
  if (const JsonValue *run = ztrain->find("run")) {
    if (run->kind != JsonValue::Kind::Object)
      bad("\"run\" is not an object");
    for (const auto &[key, value] : run->members) {
      if (value.kind != JsonValue::Kind::String)
        bad(format("\"run\": \"%s\" is not a string", key.c_str()));
      index.run.push_back({key, value.text});
    }
  }
  if (const JsonValue *ls = ztrain->find("loss_scaler")) {
    if (ls->kind != JsonValue::Kind::Object)
      bad("\"loss_scaler\" is not an object");
    LossScaler::State state;
    const JsonValue *scale = ls->find("scale");
    state.scale = scale ? scale->getDouble() : std::nan("");
    if (!(state.scale > 0.0) || !std::isfinite(state.scale))
      bad("\"loss_scaler\": \"scale\" is not a positive number");
    state.iter = integer(*ls, "iter", 0);
    state.lastOverflowIter = integer(*ls, "last_overflow_iter", -1);
    state.hysteresis = integer(*ls, "hysteresis", 1);
    state.skipped = integer(*ls, "skipped", 0);
    index.lossScaler = state;
  }

  // The files are exactly the canonical names, so that an index cannot
  // point outside its directory.
  const JsonValue *files = ztrain->find("files");
  if (!files || files->kind != JsonValue::Kind::Array ||
      static_cast<int64_t>(files->items.size()) != index.worldSize)
    bad("\"files\" is not a list of world_size file names");
  for (int64_t r = 0; r < index.worldSize; ++r)
    if (files->items[r].kind != JsonValue::Kind::String ||
        files->items[r].text != checkpointShardName(r, index.worldSize))
      bad(format("file %lld is not '%s'", static_cast<long long>(r),
                 checkpointShardName(r, index.worldSize).c_str()));

  const JsonValue *tensors = ztrain->find("tensors");
  if (!tensors || tensors->kind != JsonValue::Kind::Array)
    bad("\"tensors\" is not a list");
  for (const JsonValue &entry : tensors->items) {
    if (entry.kind != JsonValue::Kind::Object)
      bad("a tensor entry is not an object");
    CheckpointTensor tensor;
    StoredTensorSpec &spec = tensor.spec;
    spec.name = string(entry, "name");
    std::string where = "tensor '" + spec.name + "'";
    std::string kind = string(entry, "kind");
    if (kind != "param" && kind != "state" && kind != "buffer")
      bad(where + " has kind '" + kind + "' (expected param, state or buffer)");
    tensor.kind = kind == "param"   ? CheckpointTensor::Kind::Param
                  : kind == "state" ? CheckpointTensor::Kind::State
                                    : CheckpointTensor::Kind::Buffer;
    std::string dtype = string(entry, "dtype");
    if (!elemTypeFromSafetensorsName(dtype, &spec.type))
      bad(where + " has dtype '" + dtype +
          "' (expected F32, BF16, F16 or I32)");
    if (const JsonValue *of = entry.find("master_of")) {
      if (of->kind != JsonValue::Kind::String || of->text.empty() ||
          kind != "state" || dtype != "F32")
        bad(where + " has a \"master_of\" that is not the name of its "
                    "parameter (an F32 state's)");
      tensor.masterOf = of->text;
    }
    const JsonValue *shape = entry.find("shape");
    if (!shape || shape->kind != JsonValue::Kind::Array)
      bad(where + " has no \"shape\" list");
    for (const JsonValue &dim : shape->items) {
      int64_t d;
      if (!dim.getInt64(d) || d < 0)
        bad(where + " has a dimension that is not a non-negative integer");
      spec.shape.push_back(d);
    }
    spec.numel = checkedNumel(spec.shape);
    spec.storeElems = integer(entry, "elements", 0);
    if (spec.numel < 0 || spec.numel > (int64_t(1) << 60) ||
        spec.storeElems > (int64_t(1) << 60))
      bad(where + " is too large");
    spec.bytes = spec.numel * spec.elemBytes();
    spec.storeBytes = spec.storeElems * spec.elemBytes();
    std::string storage = string(entry, "storage");
    spec.store = storage == "shard" ? StoreMode::Shard : StoreMode::Full;
    if (storage != storageName(spec))
      bad(format("%s has storage '%s' of %lld elements, which does not fit "
                 "its %lld elements (whole: equal, full: more, or shard)",
                 where.c_str(), storage.c_str(),
                 static_cast<long long>(spec.storeElems),
                 static_cast<long long>(spec.numel)));
    if (std::string problem =
            shardCoverageProblem(kind.c_str(), spec, index.worldSize);
        !problem.empty())
      bad(problem);
    if (version >= 2) {
      const JsonValue *crc = entry.find("crc32c");
      if (!crc || crc->kind != JsonValue::Kind::Array ||
          static_cast<int64_t>(crc->items.size()) != index.worldSize)
        bad(where + " has no \"crc32c\" list of world_size checksums");
      for (const JsonValue &value : crc->items) {
        char *end = nullptr;
        unsigned long parsed =
            value.kind == JsonValue::Kind::String && value.text.size() == 8
                ? std::strtoul(value.text.c_str(), &end, 16)
                : 0;
        if (!end || *end)
          bad(where + " has a checksum that is not 8 hex digits");
        tensor.crc.push_back(static_cast<uint32_t>(parsed));
      }
    }
    for (const CheckpointTensor &other : index.tensors)
      if (other.spec.name == spec.name)
        bad("duplicate " + where);
    index.tensors.push_back(std::move(tensor));
  }
  return index;
}

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

/// A descriptor's records that decide what the steps compute, without the
/// ones that only say how this build lays the model out on its ranks (the
/// grid, storage and memory-space suffixes, gradient buffers, arenas, the
/// host step buffer) or what else it has
/// compiled (its FLOP count, the evaluation function): a checkpoint
/// resumes in any layout of the same model.
/// "input <name> <dtype> <rank> <d0> ..": d0 of a batched input, else -1.
static int64_t inputBatch(const std::string &record) {
  std::istringstream in(record);
  std::string kind, name, dtype;
  int64_t rank = 0, d0 = -1;
  in >> kind >> name >> dtype >> rank;
  if (kind != "input" || rank < 1 || !(in >> d0))
    return -1;
  return d0;
}

int64_t checkpointGlobalBatch(const CheckpointIndex &index) {
  int64_t batch = 1;
  for (const std::string &line : nonEmptyLines(index.descriptor))
    if (int64_t b = inputBatch(line); b >= 0) {
      batch = b;
      break;
    }
  return index.worldSize * batch * std::max<int64_t>(1, index.gradAccumSteps);
}

/// A param or state record without its "[store E full|shard] [space
/// host|nvme]" suffix: how and where this build keeps the tensor, not what
/// it is. Found by position, after the fields every such record has
/// ("param N T R d.. init K S", "state N T R d.. of P [master]"), so that
/// a tensor named `store` or `space` keeps its name.
static std::string withoutPlacement(const std::string &record) {
  std::istringstream in(record);
  std::vector<std::string> words;
  for (std::string w; in >> w;)
    words.push_back(w);
  size_t at = 3; // kind, name, dtype
  int64_t rank = 0;
  if (words.size() <= at ||
      !(std::istringstream(words[at]) >> rank) || rank < 0)
    return record;
  at += 1 + static_cast<size_t>(rank); // the rank and the dimensions
  if (words.size() > at && words[0] == "param" && words[at] == "init")
    at += 3; // init <kind> <scale>
  else if (words.size() > at && words[0] == "state" && words[at] == "of")
    at += 2 + (words.size() > at + 2 && words[at + 2] == "master");
  else
    return record;
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i >= at && (words[i] == "store" || words[i] == "space"))
      break;
    out += (i ? " " : "") + words[i];
  }
  return out;
}

static std::vector<std::string> layoutFreeRecords(const std::string &text) {
  std::vector<std::string> out;
  for (std::string line : nonEmptyLines(text)) {
    std::string kind = line.substr(0, line.find(' '));
    // The batch is not the model: micro-batches per step, and a batched
    // input's batch dimension (its other dimensions are).
    // `logits` is the sampling function's output shape ([B T, V]).
    // Where the tensors live (the host step's staging buffer; a tensor's
    // `space`, below) is layout too: offload changes no bit of what is
    // stored.
    if (kind == "grid" || kind == "grad" || kind == "arena" ||
        kind == "flops" || kind == "eval" || kind == "grad_accum" ||
        kind == "logits" || kind == "host_step_buffer")
      continue;
    if (int64_t b = inputBatch(line); b >= 0) {
      std::istringstream in(line);
      std::string word, rebuilt;
      for (int i = 0; in >> word; ++i)
        rebuilt += (i ? " " : "") + (i == 4 ? std::string("B") : word);
      line = rebuilt;
    }
    if (kind == "param" || kind == "state")
      line = withoutPlacement(line);
    out.push_back(line);
  }
  return out;
}

bool checkpointLayoutMatches(const CheckpointIndex &index,
                             const Descriptor &desc, int64_t ranks) {
  if (index.worldSize != ranks)
    return false;
  for (const CheckpointTensor &want : checkpointTensors(desc)) {
    auto it = std::find_if(index.tensors.begin(), index.tensors.end(),
                           [&](const CheckpointTensor &t) {
                             return t.spec.name == want.spec.name;
                           });
    if (it == index.tensors.end() || it->spec.store != want.spec.store ||
        it->spec.storeElems != want.spec.storeElems)
      return false;
  }
  return true;
}

void checkResumable(const CheckpointIndex &index, const Descriptor &desc,
                    const char *descriptorText, int64_t ranks) {
  const char *dir = index.named.c_str();
  // Another number of ranks or ZeRO stage is resharded on load (a
  // universal checkpoint): the tensors must be the same ones, each with its
  // type and shape; only their storage may differ.
  std::vector<CheckpointTensor> model = checkpointTensors(desc);
  for (const CheckpointTensor &want : model) {
    const char *kind = want.kindName();
    const char *name = want.spec.name.c_str();
    auto it = std::find_if(index.tensors.begin(), index.tensors.end(),
                           [&](const CheckpointTensor &t) {
                             return t.spec.name == want.spec.name;
                           });
    if (it == index.tensors.end())
      fatal("--resume '%s': the checkpoint has no %s '%s', which this model "
            "has",
            dir, kind, name);
    const StoredTensorSpec &have = it->spec;
    if (it->kind != want.kind || have.type != want.spec.type ||
        have.shape != want.spec.shape)
      fatal("--resume '%s': %s '%s' is %s in the checkpoint, this model has "
            "%s",
            dir, kind, name, describeStorage(have).c_str(),
            describeStorage(want.spec).c_str());
  }
  for (const CheckpointTensor &have : index.tensors)
    if (std::none_of(model.begin(), model.end(),
                     [&](const CheckpointTensor &t) {
                       return t.spec.name == have.spec.name;
                     }))
      fatal("--resume '%s': the checkpoint has %s '%s', which this model "
            "does not have",
            dir, have.kindName(), have.spec.name.c_str());
  // The rest of the descriptor (optimizer hyper-parameters, inputs, batch
  // size, loss scaling, clipping, accumulation) decides what the steps
  // compute, so continuing "exactly" needs it unchanged too.
  std::vector<std::string> saved = layoutFreeRecords(index.descriptor),
                           current = layoutFreeRecords(descriptorText);
  // A kind of record only one side has (grad_accum, clip_grad_norm,
  // loss_scale): name it, rather than the records that follow it.
  auto kind = [](const std::string &r) { return r.substr(0, r.find(' ')); };
  auto hasKind = [&](const std::vector<std::string> &records,
                     const std::string &k) {
    return std::any_of(records.begin(), records.end(),
                       [&](const std::string &r) { return kind(r) == k; });
  };
  for (const std::string &r : current)
    if (!hasKind(saved, kind(r)))
      fatal("--resume '%s': this model has descriptor record '%s'; the "
            "checkpoint was written by a build without a '%s' record",
            dir, r.c_str(), kind(r).c_str());
  for (const std::string &r : saved)
    if (!hasKind(current, kind(r)))
      fatal("--resume '%s': the checkpoint has descriptor record '%s'; this "
            "model was built without a '%s' record",
            dir, r.c_str(), kind(r).c_str());
  for (size_t i = 0; i < std::max(saved.size(), current.size()); ++i) {
    const char *a = i < saved.size() ? saved[i].c_str() : "(none)";
    const char *b = i < current.size() ? current[i].c_str() : "(none)";
    if (std::strcmp(a, b) != 0)
      fatal("--resume '%s': descriptor record '%s' in the checkpoint is "
            "'%s' in this model",
            dir, a, b);
  }
  // The same descriptor: a loss_scale record in both or in neither.
  if (desc.lossScale && !index.lossScaler)
    fatal("--resume '%s': the checkpoint has no \"loss_scaler\" state, which "
          "this model's dynamic loss scaling needs",
          dir);
  if (desc.lossScale && index.lossScaler->iter != index.step)
    fatal("--resume '%s': the loss scaler has seen %lld steps, the checkpoint "
          "%lld",
          dir, static_cast<long long>(index.lossScaler->iter),
          static_cast<long long>(index.step));
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
  const int64_t rank = ctx.comm().rank(), ranks = ctx.comm().count();
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
  std::string map;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = format("model-%05zu-of-%05zu.safetensors", s + 1,
                                    shards.size());
    writeSafetensors(joinPath(out, name), shards[s], {{"format", "pt"}});
    for (const SafetensorsWriteTensor &t : shards[s])
      map += format("%s\n    %s: %s", map.empty() ? "" : ",",
                    jsonQuote(t.name).c_str(), jsonQuote(name).c_str());
  }
  const std::string json =
      format("{\n  \"metadata\": {\"total_size\": %lld},\n  \"weight_map\": "
             "{%s\n  }\n}\n",
             static_cast<long long>(total), map.c_str());
  AtomicFile hfIndex(joinPath(out, "model.safetensors.index.json"));
  hfIndex.write(json.data(), json.size());
  hfIndex.commit();
}

DataFingerprint dataFingerprint(const std::string &path) {
  uint64_t size = 0;
  int fd = openInputFile(path, "--data", size);
  DataFingerprint print;
  print.size = size;
  const uint64_t window = std::min<uint64_t>(size, uint64_t(1) << 20);
  std::vector<char> buf(static_cast<size_t>(window));
  readExactly(fd, buf.data(), window, path, "--data");
  print.crc = crc32c(buf.data(), buf.size());
  if (size > window) {
    if (::lseek(fd, static_cast<off_t>(size - window), SEEK_SET) < 0) {
      int err = errno;
      ::close(fd);
      fatal("--data: cannot seek in '%s': %s", path.c_str(),
            std::strerror(err));
    }
    readExactly(fd, buf.data(), window, path, "--data");
    print.crc = crc32c(buf.data(), buf.size(), print.crc);
  }
  ::close(fd);
  return print;
}

void checkResumedData(const CheckpointIndex &index, const std::string &data,
                      const std::string &format, const std::string &order,
                      const std::string &resumeArg) {
  const char *ck = resumeArg.c_str();
  // Text is read as bytes: the same tokens as u8.
  auto bytes = [](const std::string &f) {
    return f == "text" ? std::string("u8") : f;
  };
  if (!data.empty() && !index.dataFormat.empty() &&
      bytes(format) != bytes(index.dataFormat))
    fatal("--resume '%s': the checkpoint read its data as %s, this run "
          "reads '%s' as %s (--data-format=%s continues it)",
          ck, index.dataFormat.c_str(), data.c_str(), format.c_str(),
          index.dataFormat.c_str());
  if (!data.empty() && !index.dataOrder.empty() && order != index.dataOrder)
    fatal("--resume '%s': the checkpoint drew its data windows in %s "
          "order, this run in %s (--data-order=%s continues it)",
          ck, index.dataOrder.c_str(), order.c_str(),
          index.dataOrder.c_str());
  if (!index.data.empty() && data.empty())
    fatal("--resume '%s': the checkpoint was trained on --data '%s'; give "
          "--data (the same file) to continue its data, not synthetic inputs",
          ck, index.data.c_str());
  if (index.data.empty() && !data.empty())
    fatal("--resume '%s': the checkpoint was trained on synthetic inputs, "
          "this run has --data '%s'",
          ck, data.c_str());
  if (data.empty() || !index.dataPrint)
    return;
  DataFingerprint now = dataFingerprint(data);
  if (now.size != index.dataPrint->first || now.crc != index.dataPrint->second)
    fatal("--resume '%s': --data '%s' (%llu bytes) is not the file the "
          "checkpoint was trained on ('%s', %llu bytes%s)",
          ck, data.c_str(), static_cast<unsigned long long>(now.size),
          index.data.c_str(),
          static_cast<unsigned long long>(index.dataPrint->first),
          now.size == index.dataPrint->first ? ", other contents" : "");
}

} // namespace ztrt
