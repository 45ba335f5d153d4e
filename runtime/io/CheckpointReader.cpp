//===- CheckpointReader.cpp - A checkpoint's index, resume checks ---------===//
//
// Part of ztrain's runtime. Reading and validating index.json, and the
// checks that a checkpoint can continue this model on this data (--resume):
// the same tensors, the same descriptor up to the layout on the ranks, the
// same --data file.
//
//===----------------------------------------------------------------------===//

#include "io/Checkpoint.h"

#include "base/Json.h"
#include "base/Support.h"
#include "io/CheckpointFiles.h"
#include "io/Safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace ztrt {

namespace {


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
  Json root;
  std::string error;
  if (!parseJson(text, root, error))
    bad(error);
  const Json *ztrain = jsonFind(root, "ztrain");
  if (!ztrain || !ztrain->is_object())
    bad("no \"ztrain\" object");
  auto integer = [&](const Json &object, const char *key, int64_t min) {
    const Json *value = jsonFind(object, key);
    int64_t out;
    if (!value || !jsonInt64(*value, out) || out < min)
      bad(format("\"%s\" is not an integer >= %lld", key,
                 static_cast<long long>(min)));
    return out;
  };
  auto string = [&](const Json &object, const char *key) {
    const Json *value = jsonFind(object, key);
    if (!value || !value->is_string())
      bad(format("\"%s\" is not a string", key));
    return jsonText(*value);
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
  if (const Json *mesh = jsonFind(*ztrain, "mesh")) {
    if (!mesh->is_object())
      bad("\"mesh\" is not an object");
    if (integer(*mesh, "shard", 1) != index.worldSize)
      bad("\"mesh\": \"shard\" is not world_size");
    index.replicate = integer(*mesh, "replicate", 1);
  }
  index.step = integer(*ztrain, "step", 0);
  const Json *seed = jsonFind(*ztrain, "seed");
  if (!seed || !seed->is_number_unsigned())
    bad("\"seed\" is not an unsigned 64-bit integer");
  index.seed = seed->get<uint64_t>();
  index.data = string(*ztrain, "data");
  if (jsonFind(*ztrain, "data_size") || jsonFind(*ztrain, "data_crc32c"))
    index.dataPrint = std::make_pair(
        static_cast<uint64_t>(integer(*ztrain, "data_size", 0)),
        static_cast<uint32_t>(integer(*ztrain, "data_crc32c", 0)));
  if (jsonFind(*ztrain, "grad_accum_steps"))
    index.gradAccumSteps = integer(*ztrain, "grad_accum_steps", 1);
  if (jsonFind(*ztrain, "data_samples"))
    index.dataSamples = integer(*ztrain, "data_samples", 0);
  if (jsonFind(*ztrain, "data_format"))
    index.dataFormat = string(*ztrain, "data_format");
  if (jsonFind(*ztrain, "data_order"))
    index.dataOrder = string(*ztrain, "data_order");
  index.descriptor = string(*ztrain, "descriptor");
  if (const Json *run = jsonFind(*ztrain, "run")) {
    if (!run->is_object())
      bad("\"run\" is not an object");
    for (const auto &[key, value] : jsonMembers(*run)) {
      if (!value.is_string())
        bad(format("\"run\": \"%s\" is not a string", key.c_str()));
      index.run.push_back({key, jsonText(value)});
    }
  }
  if (const Json *ls = jsonFind(*ztrain, "loss_scaler")) {
    if (!ls->is_object())
      bad("\"loss_scaler\" is not an object");
    LossScaler::State state;
    const Json *scale = jsonFind(*ls, "scale");
    state.scale = scale ? jsonNumber(*scale) : std::nan("");
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
  const Json *files = jsonFind(*ztrain, "files");
  if (!files || !files->is_array() ||
      static_cast<int64_t>(files->size()) != index.worldSize)
    bad("\"files\" is not a list of world_size file names");
  for (int64_t r = 0; r < index.worldSize; ++r)
    if (!(*files)[r].is_string() ||
        jsonText((*files)[r]) != checkpointShardName(r, index.worldSize))
      bad(format("file %lld is not '%s'", static_cast<long long>(r),
                 checkpointShardName(r, index.worldSize).c_str()));

  const Json *tensors = jsonFind(*ztrain, "tensors");
  if (!tensors || !tensors->is_array())
    bad("\"tensors\" is not a list");
  for (const Json &entry : *tensors) {
    if (!entry.is_object())
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
    if (const Json *of = jsonFind(entry, "master_of")) {
      if (jsonText(*of).empty() || kind != "state" || dtype != "F32")
        bad(where + " has a \"master_of\" that is not the name of its "
                    "parameter (an F32 state's)");
      tensor.masterOf = jsonText(*of);
    }
    const Json *shape = jsonFind(entry, "shape");
    if (!shape || !shape->is_array())
      bad(where + " has no \"shape\" list");
    for (const Json &dim : *shape) {
      int64_t d;
      if (!jsonInt64(dim, d) || d < 0)
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
      const Json *crc = jsonFind(entry, "crc32c");
      if (!crc || !crc->is_array() ||
          static_cast<int64_t>(crc->size()) != index.worldSize)
        bad(where + " has no \"crc32c\" list of world_size checksums");
      for (const Json &value : *crc) {
        char *end = nullptr;
        const std::string &hex = jsonText(value);
        unsigned long parsed =
            hex.size() == 8 ? std::strtoul(hex.c_str(), &end, 16) : 0;
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
  return index.worldSize * index.replicate * batch *
         std::max<int64_t>(1, index.gradAccumSteps);
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
    // stored. Fused elementwise kernels (`fused`) compute the bits the
    // unfused kernels do: how the step runs, not what it computes.
    // The mesh lays the ranks out (a hybrid-sharded checkpoint resumes
    // flat and the other way round).
    if (kind == "grid" || kind == "mesh" || kind == "grad" || kind == "arena" ||
        kind == "flops" || kind == "eval" || kind == "grad_accum" ||
        kind == "logits" || kind == "host_step_buffer" || kind == "fused")
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
