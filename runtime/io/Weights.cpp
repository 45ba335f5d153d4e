//===- Weights.cpp - Full weights in (--init) and out (--save) ------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "io/Weights.h"

#include "base/Json.h"
#include "base/Support.h"
#include "cli/Options.h"
#include "io/Safetensors.h"
#include "step/Context.h"
#include "step/Descriptor.h"
#include "step/Init.h"

#include <algorithm>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

namespace ztrt {

namespace {

/// Copies `bytes` of backend memory to a host vector.
std::vector<char> toHost(Backend &backend, const void *src, int64_t bytes) {
  std::vector<char> host(static_cast<size_t>(bytes));
  backend.copyToHost(host.data(), src, bytes);
  return host;
}

/// Fatal, naming the file and the tensor, unless the --init tensor has the
/// model's dtype and shape.
void checkInitTensor(const char *path, const SafetensorsTensor &tensor,
                     const TensorSpec &spec) {
  const char *dtype = elemTypeSafetensorsName(spec.type);
  if (tensor.dtype != dtype)
    fatal("--init '%s': tensor '%s' has dtype %s, the model expects %s", path,
          spec.name.c_str(), tensor.dtype.c_str(), dtype);
  if (tensor.shape != spec.shape)
    fatal("--init '%s': tensor '%s' has shape %s, the model expects %s", path,
          spec.name.c_str(), formatShape(tensor.shape).c_str(),
          formatShape(spec.shape).c_str());
}

/// The tensors --init names: one safetensors file, or a Hugging Face
/// sharded checkpoint (its model.safetensors.index.json, or a directory
/// with that index or a model.safetensors), each shard read once.
class InitTensors {
public:
  explicit InitTensors(const std::string &path) {
    struct stat info;
    std::string index = path;
    if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
      std::string dir = path + "/";
      if (::access((dir + "model.safetensors.index.json").c_str(), F_OK) == 0)
        index = dir + "model.safetensors.index.json";
      else if (::access((dir + "model.safetensors").c_str(), F_OK) == 0)
        index = dir + "model.safetensors";
      else
        fatal("--init '%s': a directory without model.safetensors.index.json "
              "or model.safetensors",
              path.c_str());
    }
    if (index.size() < 5 || index.compare(index.size() - 5, 5, ".json") != 0) {
      files.push_back(SafetensorsFile::read(index, "--init"));
      return;
    }
    // {"weight_map": {"tensor": "file.safetensors", ...}}: the files are
    // names in the index's directory.
    std::vector<char> text = readInputFile(index, "--init");
    Json root;
    std::string error;
    if (!parseJson(std::string_view(text.data(), text.size()), root, error))
      fatal("--init '%s': not JSON: %s", index.c_str(), error.c_str());
    const Json *map = jsonFind(root, "weight_map");
    if (!map || !map->is_object())
      fatal("--init '%s': no \"weight_map\" object (a Hugging Face "
            "sharded-checkpoint index)",
            index.c_str());
    const size_t slash = index.find_last_of('/');
    const std::string dir =
        slash == std::string::npos ? std::string() : index.substr(0, slash + 1);
    std::vector<std::string> names;
    for (const auto &[tensor, value] : jsonMembers(*map)) {
      const std::string &file = jsonText(value);
      if (file.empty() || file.find('/') != std::string::npos || file == "." ||
          file == "..")
        fatal("--init '%s': \"weight_map\" entry '%s' is not a file name in "
              "the index's directory",
              index.c_str(), tensor.c_str());
      auto it = std::find(names.begin(), names.end(), file);
      size_t at = it - names.begin();
      if (it == names.end()) {
        names.push_back(file);
        files.push_back(SafetensorsFile::read(dir + file, "--init"));
      }
      fileOf.emplace_back(tensor, at);
    }
  }
  /// The tensor named `name`, or null: in the one file, or in the file the
  /// index maps it to (which must hold it).
  const SafetensorsTensor *find(const std::string &name) const {
    if (fileOf.empty())
      return files.front().find(name);
    for (const auto &[tensor, at] : fileOf)
      if (tensor == name) {
        const SafetensorsTensor *t = files[at].find(name);
        if (!t)
          fatal("--init '%s': the index maps '%s' to it, but it has no such "
                "tensor",
                files[at].path().c_str(), name.c_str());
        return t;
      }
    return nullptr;
  }

private:
  std::vector<SafetensorsFile> files;
  std::vector<std::pair<std::string, size_t>> fileOf;
};

} // namespace

/// Fills every buffer, and every parameter's storage on this rank, from the
/// seed or from the
/// --init file (which holds full tensors: each rank takes its slice). Every
/// rank computes exactly its own elements, so replicas and shards start
/// consistent without communication. A rank's shard of a sharded tensor is
/// its place in its shard group (rank % shard with a mesh: the replicate
/// groups hold the same shards).
void initParams(ztrt_ctx &ctx, const Descriptor &desc, const Options &opts) {
  Backend &backend = ctx.backend();
  const int64_t rank = ctx.shardIndex();
  // Buffers: the --init file's tensor of that name when it has one (a
  // state dict with persistent buffers), else the buffer's rule.
  std::optional<InitTensors> initFile;
  if (!opts.init.empty())
    initFile.emplace(opts.init);
  for (size_t i = 0; i < desc.buffers.size(); ++i) {
    const BufferSpec &spec = desc.buffers[i];
    const SafetensorsTensor *tensor =
        initFile ? initFile->find(spec.name) : nullptr;
    if (tensor) {
      checkInitTensor(opts.init.c_str(), *tensor, spec);
      backend.copyFromHost(ctx.buffers[i], tensor->data, spec.bytes);
      continue;
    }
    if (spec.init == InitKind::External)
      fatal("buffer '%s' has no rule (init external): its values come from "
            "the --init file the importer wrote%s",
            spec.name.c_str(),
            opts.init.empty() ? "; pass --init FILE"
                              : (" and '" + opts.init + "' has no tensor of that name")
                                    .c_str());
    std::vector<char> host(static_cast<size_t>(spec.bytes));
    initBuffer(spec, opts.seed, host.data());
    backend.copyFromHost(ctx.buffers[i], host.data(), spec.bytes);
  }
  // A 16-bit parameter's master state starts as the f32 values the
  // parameter is the rounding of (other states stay zero).
  auto masterOf = [&](const ParamSpec &spec) -> const StateSpec * {
    return spec.masterIndex >= 0 ? &desc.states[spec.masterIndex] : nullptr;
  };
  if (opts.init.empty()) {
    for (size_t i = 0; i < desc.params.size(); ++i) {
      const ParamSpec &spec = desc.params[i];
      std::vector<char> host(static_cast<size_t>(spec.storeBytes));
      initParameterStorage(spec, opts.seed, rank, host.data());
      ctx.paramFromHost(i, host.data(), spec.storeBytes);
      if (const StateSpec *master = masterOf(spec)) {
        std::vector<char> wide(static_cast<size_t>(master->storeBytes));
        initMasterStorage(*master, spec, opts.seed, rank, wide.data());
        ctx.stateFromHost(static_cast<size_t>(spec.masterIndex), wide.data(),
                          master->storeBytes);
      }
    }
    return;
  }
  const InitTensors &file = *initFile;
  const char *path = opts.init.c_str();
  for (size_t i = 0; i < desc.params.size(); ++i) {
    const ParamSpec &spec = desc.params[i];
    const SafetensorsTensor *tensor = file.find(spec.name);
    if (!tensor)
      fatal("--init '%s': no tensor named '%s'", path, spec.name.c_str());
    const StateSpec *master = masterOf(spec);
    std::vector<char> host(static_cast<size_t>(spec.storeBytes));
    std::vector<char> wide(master ? static_cast<size_t>(master->storeBytes)
                                  : 0);
    std::string problem =
        loadInitTensor(spec, master, *tensor, rank, host.data(), wide.data());
    if (!problem.empty())
      fatal("--init '%s': %s", path, problem.c_str());
    ctx.paramFromHost(i, host.data(), spec.storeBytes);
    if (master)
      ctx.stateFromHost(static_cast<size_t>(spec.masterIndex), wide.data(),
                        master->storeBytes);
  }
}

/// Writes the full parameters, then the buffers, to `path` on rank 0, as one
/// process holding them would: padding dropped, shards gathered to rank 0
/// in rank order (within its shard group, with a mesh: every shard group
/// gathers its own, rank 0's is written).
/// Every rank calls it: the gathers of sharded parameters are collective.
void saveParams(ztrt_ctx &ctx, const Descriptor &desc,
                const std::string &path) {
  Backend &backend = ctx.backend();
  Communicator &comm = ctx.shardComm();
  const bool root = ctx.comm().rank() == 0;
  std::vector<std::vector<char>> host;
  for (size_t i = 0; i < desc.params.size(); ++i) {
    const ParamSpec &spec = desc.params[i];
    if (spec.store == StoreMode::Full) {
      // The tensor is the first numel elements; the padding stays behind.
      if (root) {
        host.emplace_back(static_cast<size_t>(spec.storeBytes));
        ctx.paramToHost(i, host.back().data(), spec.storeBytes);
        host.back().resize(static_cast<size_t>(spec.bytes));
      }
      continue;
    }
    std::vector<char> shard(static_cast<size_t>(spec.storeBytes));
    ctx.paramToHost(i, shard.data(), spec.storeBytes);
    // Every shard group's first rank receives its group's gather.
    std::vector<char> all(comm.rank() == 0
                              ? static_cast<size_t>(comm.count()) *
                                    static_cast<size_t>(spec.storeBytes)
                              : 0);
    // Shards concatenated in rank order are the flat tensor followed by the
    // padding (checkStorage: E * N >= numel). The gather moves elements as
    // bits, without converting them.
    comm.gather(shard.data(), all.data(), spec.storeElems, spec.elemBytes(),
                0);
    if (root) {
      all.resize(static_cast<size_t>(spec.bytes));
      host.push_back(std::move(all));
    }
  }
  if (!root)
    return;
  // Then the buffers, as a state dict holds persistent buffers: every rank
  // has the whole tensor.
  for (size_t i = 0; i < desc.buffers.size(); ++i)
    host.push_back(toHost(backend, ctx.buffers[i], desc.buffers[i].bytes));
  std::vector<SafetensorsWriteTensor> tensors;
  for (size_t i = 0; i < desc.params.size(); ++i) {
    const ParamSpec &spec = desc.params[i];
    tensors.push_back({spec.name, elemTypeSafetensorsName(spec.type),
                       spec.shape, host[i].data()});
  }
  for (size_t i = 0; i < desc.buffers.size(); ++i) {
    const BufferSpec &spec = desc.buffers[i];
    tensors.push_back({spec.name, elemTypeSafetensorsName(spec.type),
                       spec.shape, host[desc.params.size() + i].data()});
  }
  // "format": "pt" is what Hugging Face loaders look for in PyTorch weights.
  writeSafetensors(path, tensors, {{"format", "pt"}});
}

} // namespace ztrt
