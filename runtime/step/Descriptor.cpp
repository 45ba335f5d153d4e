//===- Descriptor.cpp - The model descriptor the compiler embeds ----------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "step/Descriptor.h"
#include "base/DType.h"

#include "base/Support.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

namespace ztrt {

int64_t elemTypeBytes(ElemType type) {
  switch (type) {
  case ElemType::F32:
    return elementBytes(DType::F32);
  case ElemType::BF16:
    return elementBytes(DType::BF16);
  case ElemType::F16:
    return elementBytes(DType::F16);
  case ElemType::I32:
    return static_cast<int64_t>(sizeof(int32_t));
  }
  return 0;
}

std::string precisionText(const Descriptor &desc) {
  bool f32 = false, bf16 = false, f16 = false, masters = false;
  for (const ParamSpec &p : desc.params) {
    f32 = f32 || p.type == ElemType::F32;
    bf16 = bf16 || p.type == ElemType::BF16;
    f16 = f16 || p.type == ElemType::F16;
  }
  for (const StateSpec &st : desc.states)
    masters = masters || st.master;
  std::string text;
  for (auto [has, name] :
       {std::pair{bf16, "bf16"}, std::pair{f16, "f16"}, std::pair{f32, "f32"}})
    if (has)
      text += (text.empty() ? "" : "+") + std::string(name);
  if (text.empty() || text == "f32")
    return "fp32";
  if (masters)
    text += ", f32 master weights";
  return text;
}

const char *elemTypeName(ElemType type) {
  switch (type) {
  case ElemType::F32:
    return "f32";
  case ElemType::BF16:
    return "bf16";
  case ElemType::F16:
    return "f16";
  case ElemType::I32:
    break;
  }
  return "i32";
}

const char *elemTypeSafetensorsName(ElemType type) {
  switch (type) {
  case ElemType::F32:
    return "F32";
  case ElemType::BF16:
    return "BF16";
  case ElemType::F16:
    return "F16";
  case ElemType::I32:
    break;
  }
  return "I32";
}

bool elemTypeFromSafetensorsName(const std::string &name, ElemType *type) {
  static const std::pair<const char *, ElemType> kNames[] = {
      {"F32", ElemType::F32},
      {"I32", ElemType::I32},
      {"BF16", ElemType::BF16},
      {"F16", ElemType::F16}};
  for (const auto &[text, value] : kNames)
    if (name == text) {
      *type = value;
      return true;
    }
  return false;
}

namespace {

float loadFloat(ElemType type, const void *src, int64_t i) {
  switch (type) {
  case ElemType::BF16:
    return static_cast<float>(static_cast<const bf16 *>(src)[i]);
  case ElemType::F16:
    return static_cast<float>(static_cast<const f16 *>(src)[i]);
  default:
    return static_cast<const float *>(src)[i];
  }
}

void storeFloat(ElemType type, void *dst, int64_t i, float value) {
  switch (type) {
  case ElemType::BF16:
    static_cast<bf16 *>(dst)[i] = bf16(value);
    return;
  case ElemType::F16:
    static_cast<f16 *>(dst)[i] = f16(value);
    return;
  default:
    static_cast<float *>(dst)[i] = value;
    return;
  }
}

} // namespace

int64_t convertElements(ElemType from, const void *src, ElemType to, void *dst,
                        int64_t n) {
  int64_t changed = 0;
  for (int64_t i = 0; i < n; ++i) {
    float value = loadFloat(from, src, i);
    storeFloat(to, dst, i, value);
    float back = loadFloat(to, dst, i);
    // A bitwise comparison would count -0 == 0 as equal anyway (both are
    // kept); NaN stays NaN (quieted), which is not a loss of precision.
    if (back != value && !(std::isnan(back) && std::isnan(value)))
      ++changed;
    else if (back == 0.0f && std::signbit(back) != std::signbit(value))
      ++changed;
  }
  return changed;
}

StorageSlice StoredTensorSpec::slice(int64_t rank) const {
  if (store == StoreMode::Full)
    return {0, numel};
  // A rank whose window starts past the end stores padding only; testing
  // that first keeps rank * storeElems from overflowing.
  if (rank > 0 && storeElems > numel / rank)
    return {numel, 0};
  int64_t begin = rank * storeElems;
  return {begin, std::min(storeElems, numel - begin)};
}

std::string shardCoverageProblem(const char *kind, const StoredTensorSpec &spec,
                                 int64_t ranks) {
  // E * N >= n, written as E >= ceil(n / N) so that it cannot overflow.
  if (spec.store == StoreMode::Full ||
      spec.storeElems >= (spec.numel + ranks - 1) / ranks)
    return "";
  return format("%s '%s' has %lld elements, but shards of %lld on %lld "
                "ranks hold only %lld",
                kind, spec.name.c_str(), static_cast<long long>(spec.numel),
                static_cast<long long>(spec.storeElems),
                static_cast<long long>(ranks),
                static_cast<long long>(spec.storeElems * ranks));
}

void checkStorage(const Descriptor &desc, int64_t worldRanks) {
  const int64_t ranks = desc.shardRanks(worldRanks);
  for (const ParamSpec &spec : desc.params)
    if (std::string problem = shardCoverageProblem("param", spec, ranks);
        !problem.empty())
      fatal("descriptor: %s", problem.c_str());
  for (const StateSpec &spec : desc.states)
    if (std::string problem = shardCoverageProblem("state", spec, ranks);
        !problem.empty())
      fatal("descriptor: %s", problem.c_str());
}

namespace {

// Ranks beyond this are a corrupt descriptor rather than a model.
constexpr int64_t kMaxRank = 16;

class LineParser {
public:
  LineParser(std::string line, int lineNumber)
      : line(std::move(line)), lineNumber(lineNumber) {}

  [[noreturn]] void error(const std::string &what) const {
    fatal("descriptor line %d: %s: '%s'", lineNumber, what.c_str(),
          line.c_str());
  }

  bool atEnd() const { return pos >= line.size(); }

  /// The next word without consuming it ("" at the end).
  std::string peek() const {
    if (atEnd())
      return "";
    size_t space = line.find(' ', pos);
    return line.substr(pos, space == std::string::npos ? std::string::npos
                                                       : space - pos);
  }

  std::string word(const char *what) {
    if (atEnd())
      error(std::string("missing ") + what);
    size_t space = line.find(' ', pos);
    std::string out = line.substr(
        pos, space == std::string::npos ? std::string::npos : space - pos);
    pos = space == std::string::npos ? line.size() : space + 1;
    if (out.empty())
      error(std::string("empty ") + what +
            " (fields are separated by one "
            "space)");
    return out;
  }

  int64_t integer(const char *what) {
    std::string text = word(what);
    errno = 0;
    char *end = nullptr;
    long long value = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || value < 0)
      error(std::string("bad ") + what + " '" + text + "'");
    return value;
  }

  /// An int32 value, negative allowed (a label).
  int64_t signedInteger(const char *what) {
    std::string text = word(what);
    errno = 0;
    char *end = nullptr;
    long long value = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || value < INT32_MIN || value > INT32_MAX)
      error(std::string("bad ") + what + " '" + text + "'");
    return value;
  }

  double number(const char *what) {
    std::string text = word(what);
    char *end = nullptr;
    double value = std::strtod(text.c_str(), &end);
    if (*end != '\0' || !std::isfinite(value))
      error(std::string("bad ") + what + " '" + text + "'");
    return value;
  }

  void keyword(const char *expected) {
    if (word(expected) != expected)
      error(std::string("expected '") + expected + "'");
  }

  void end() const {
    if (!atEnd())
      error("unexpected trailing fields");
  }

  /// A dtype word: f32 or i32, and bf16 or f16 where `sixteen` is set
  /// (parameters, states and gradients).
  ElemType dtype(bool sixteen) {
    std::string type = word("dtype");
    if (type == "f32")
      return ElemType::F32;
    if (type == "i32")
      return ElemType::I32;
    if (sixteen && type == "bf16")
      return ElemType::BF16;
    if (sixteen && type == "f16")
      return ElemType::F16;
    error("unknown dtype '" + type + "' (expected f32" +
          (sixteen ? ", bf16, f16 or i32)" : " or i32)"));
  }

  /// `<name> <dtype> <rank> <d0> .. <dn-1>`, shared by all records; bf16
  /// and f16 only where `sixteen` is set.
  void tensor(TensorSpec &spec, bool sixteen) {
    spec.name = word("name");
    spec.type = dtype(sixteen);
    int64_t rank = integer("rank");
    if (rank > kMaxRank)
      error("rank " + std::to_string(rank) + " is too large");
    for (int64_t d = 0; d < rank; ++d)
      spec.shape.push_back(integer("dimension"));
    spec.numel = checkedNumel(spec.shape);
    if (spec.numel < 0 || spec.numel > (int64_t(1) << 60))
      error("tensor '" + spec.name + "' is too large");
    spec.bytes = spec.numel * spec.elemBytes();
  }

  /// An init kind word; `causal` only where `buffer` is set.
  InitKind initKind(bool buffer) {
    std::string init = word("init kind");
    if (init == "zeros")
      return InitKind::Zeros;
    if (init == "ones")
      return InitKind::Ones;
    if (init == "normal")
      return InitKind::Normal;
    if (init == "uniform")
      return InitKind::Uniform;
    if (init == "causal" && buffer)
      return InitKind::Causal;
    if (init == "external" && buffer)
      return InitKind::External;
    error("unknown init kind '" + init + "' (expected zeros, ones, normal" +
          (buffer ? ", uniform, causal or external)" : " or uniform)"));
  }

  /// The optional `store <E> full|shard` suffix of a param or state record,
  /// then the end of the line. Without it a rank stores the whole tensor.
  void storage(StoredTensorSpec &spec, MemorySpace *space = nullptr,
               bool *frozen = nullptr) {
    spec.store = StoreMode::Full;
    spec.storeElems = spec.numel;
    if (!atEnd() && peek() == "store") {
      word("field");
      spec.storeElems = integer("storage size");
      if (spec.storeElems > (int64_t(1) << 60))
        error("storage of '" + spec.name + "' is too large");
      std::string mode = word("storage mode");
      if (mode == "shard")
        spec.store = StoreMode::Shard;
      else if (mode != "full")
        error("unknown storage mode '" + mode + "' (expected full or shard)");
      if (spec.store == StoreMode::Full && spec.storeElems < spec.numel)
        error("full storage of '" + spec.name + "' has " +
              std::to_string(spec.storeElems) + " elements, fewer than its " +
              std::to_string(spec.numel));
    }
    spec.storeBytes = spec.storeElems * spec.elemBytes();
    // A state's `space host|nvme` (zero-offload; absent: device).
    if (space && !atEnd() && peek() == "space") {
      word("field");
      std::string where = word("memory space");
      if (where == "device")
        *space = MemorySpace::Device;
      else if (where == "host")
        *space = MemorySpace::Host;
      else if (where == "nvme")
        *space = MemorySpace::Nvme;
      else
        error("unknown memory space '" + where +
              "' (expected device, host or nvme)");
    }
    // A parameter's `frozen` (not trained).
    if (frozen && !atEnd() && peek() == "frozen") {
      word("field");
      *frozen = true;
    }
    if (!atEnd())
      error("unexpected trailing fields");
    end();
  }

private:
  std::string line;
  int lineNumber;
  size_t pos = 0;
};

} // namespace

namespace {

/// What parseDescriptor has read so far.
struct DescriptorReader {
  Descriptor desc;
  std::set<std::string> names;
  /// Sharded records are checked against the grid once every record is
  /// read (the grid record may come after them); the line is kept for the
  /// error.
  struct Sharded {
    LineParser line;
    bool isParam;
    size_t index;
  };
  std::vector<Sharded> sharded;
  /// The mesh record's line, checked against the grid at the end.
  std::optional<LineParser> meshLine;

  void uniqueName(LineParser &p, const std::string &name) {
    if (!names.insert(name).second)
      p.error("duplicate name '" + name + "'");
  }

  void param(LineParser &p) {
    ParamSpec spec;
    p.tensor(spec, /*sixteen=*/true);
    p.keyword("init");
    spec.init = p.initKind(false);
    spec.scale = p.number("init scale");
    p.storage(spec, &spec.space, &spec.frozen);
    if (spec.type == ElemType::I32 &&
        (spec.init == InitKind::Normal || spec.init == InitKind::Uniform))
      p.error("i32 parameter '" + spec.name + "' cannot have a random init");
    uniqueName(p, spec.name);
    if (spec.store == StoreMode::Shard)
      sharded.push_back({p, true, desc.params.size()});
    desc.params.push_back(std::move(spec));
  }

  void buffer(LineParser &p) {
    BufferSpec spec;
    p.tensor(spec, /*sixteen=*/false);
    p.keyword("init");
    spec.init = p.initKind(true);
    spec.scale = p.number("init scale");
    // No storage suffix: the whole tensor on every rank.
    spec.storeElems = spec.numel;
    spec.storeBytes = spec.bytes;
    p.end();
    if (spec.type == ElemType::I32 &&
        (spec.init == InitKind::Normal || spec.init == InitKind::Uniform))
      p.error("i32 buffer '" + spec.name + "' cannot have a random init");
    if (spec.init == InitKind::Causal && spec.shape.size() < 2)
      p.error("buffer '" + spec.name + "' with init causal needs rank >= 2");
    uniqueName(p, spec.name);
    desc.buffers.push_back(std::move(spec));
  }

  void state(LineParser &p) {
    StateSpec spec;
    p.tensor(spec, /*sixteen=*/true);
    p.keyword("of");
    spec.of = p.word("parameter name");
    if (p.peek() == "master") {
      p.word("master");
      spec.master = true;
    }
    p.storage(spec, &spec.space);
    for (size_t i = 0; i < desc.params.size(); ++i)
      if (desc.params[i].name == spec.of)
        spec.paramIndex = static_cast<int64_t>(i);
    if (spec.paramIndex < 0)
      p.error("state '" + spec.name + "' is of unknown parameter '" + spec.of +
              "'");
    if (desc.params[spec.paramIndex].frozen)
      p.error("state '" + spec.name + "' is of frozen parameter '" + spec.of +
              "' (frozen parameters are not trained)");
    uniqueName(p, spec.name);
    if (spec.master) {
      ParamSpec &param = desc.params[spec.paramIndex];
      if (spec.type != ElemType::F32)
        p.error("master state '" + spec.name + "' must be f32, not " +
                elemTypeName(spec.type));
      if (param.type != ElemType::BF16 && param.type != ElemType::F16)
        p.error("master state '" + spec.name + "' is of " +
                elemTypeName(param.type) + " parameter '" + spec.of +
                "' (masters belong to bf16 or f16 parameters)");
      if (spec.shape != param.shape)
        p.error("master state '" + spec.name + "' has shape " +
                formatShape(spec.shape) + ", its parameter '" + spec.of + "' " +
                formatShape(param.shape));
      if (param.masterIndex >= 0)
        p.error("parameter '" + spec.of + "' has a second master state '" +
                spec.name + "'");
      param.masterIndex = static_cast<int64_t>(desc.states.size());
    }
    if (spec.store == StoreMode::Shard)
      sharded.push_back({p, false, desc.states.size()});
    desc.states.push_back(std::move(spec));
  }

  void input(LineParser &p) {
    InputSpec spec;
    p.tensor(spec, /*sixteen=*/false);
    p.keyword("bound");
    spec.bound = p.integer("bound");
    if (!p.atEnd() && p.peek() == "ignore") {
      p.word("field");
      spec.hasIgnore = true;
      spec.ignore = p.signedInteger("ignored label");
    }
    p.end();
    if (spec.type == ElemType::F32 && spec.bound != 0)
      p.error("f32 input '" + spec.name + "' cannot have a bound");
    uniqueName(p, spec.name);
    desc.inputs.push_back(std::move(spec));
  }

  void grad(LineParser &p) {
    // One per parameter, in parameter order, so ztrt_grad(i) pairs with
    // ztrt_param(i).
    std::string of = p.word("parameter name");
    GradSpec spec;
    spec.elements = p.integer("gradient elements");
    bool typed = !p.atEnd();
    if (typed)
      spec.type = p.dtype(/*sixteen=*/true);
    p.end();
    size_t next = desc.grads.size();
    if (next >= desc.params.size() || desc.params[next].name != of)
      p.error("gradient record for '" + of + "' out of order (expected " +
              (next < desc.params.size() ? "'" + desc.params[next].name + "'"
                                         : std::string("no more")) +
              ", one per parameter in parameter order)");
    if (spec.elements < 0)
      p.error("gradient of '" + of +
              "' must have >= 0 elements (0: the "
              "step keeps it in its arena)");
    if (spec.elements > (int64_t(1) << 60))
      p.error("gradient of '" + of + "' is too large");
    // Absent (hand-written descriptors): the parameter's own type.
    if (!typed)
      spec.type = desc.params[next].type;
    else if (spec.type == ElemType::I32)
      p.error("gradient of '" + of + "' cannot be i32");
    spec.paramIndex = static_cast<int64_t>(next);
    desc.grads.push_back(spec);
  }

  /// The records of one value each (arena, grid, loss scaling, clipping,
  /// flops, logits, eval, fused kernels, accumulation, host step buffer);
  /// false for a kind that is none of them.
  bool single(LineParser &p, const std::string &kind) {
    if (kind == "arena") {
      std::string name = p.word("arena name");
      int64_t bytes = p.integer("arena bytes");
      p.end();
      if (bytes > (int64_t(1) << 60))
        p.error("arena '" + name + "' is too large");
      desc.arenas.emplace_back(name, bytes);
    } else if (kind == "grid") {
      desc.gridSize = p.integer("grid size");
      p.end();
      if (desc.gridSize < 1)
        p.error("grid size must be >= 1");
    } else if (kind == "mesh") {
      const int64_t shard = p.integer("mesh shard size");
      const int64_t replicate = p.integer("mesh replicate size");
      const int64_t perNode = p.integer("mesh ranks per node");
      // hpZ's groups: the states stay sharded over every rank.
      const bool secondary = p.peek() == "secondary";
      if (secondary)
        p.keyword("secondary");
      p.end();
      if (desc.hasMesh)
        p.error("second mesh record");
      if (shard < 1 || replicate < 1)
        p.error("mesh shard and replicate sizes must be >= 1");
      if (perNode < 1)
        p.error("mesh ranks per node must be >= 1");
      if (shard > (int64_t(1) << 31) / replicate)
        p.error("mesh of " + std::to_string(shard) + " x " +
                std::to_string(replicate) + " ranks is too large");
      desc.hasMesh = true;
      desc.meshShard = shard;
      desc.meshReplicate = replicate;
      desc.meshRanksPerNode = perNode;
      desc.meshSecondary = secondary;
      meshLine = p;
    } else if (kind == "loss_scale") {
      LossScalePolicy policy;
      p.keyword("init");
      policy.init = p.number("initial loss scale");
      p.keyword("window");
      policy.window = p.integer("loss scale window");
      p.keyword("hysteresis");
      policy.hysteresis = p.integer("hysteresis");
      p.keyword("min");
      policy.min = p.number("minimum loss scale");
      p.end();
      if (desc.lossScale)
        p.error("second loss_scale record");
      if (!(policy.init >= 1.0 && policy.init <= 0x1p127))
        p.error("initial loss scale must be in [1, 2^127]");
      if (!(policy.min > 0.0 && policy.min <= policy.init))
        p.error("minimum loss scale must be in (0, initial scale]");
      if (policy.window < 1 || policy.hysteresis < 1)
        p.error("loss scale window and hysteresis must be >= 1");
      desc.lossScale = policy;
    } else if (kind == "clip_grad_norm") {
      double maxNorm = p.number("max norm");
      p.end();
      if (desc.clipGradNorm)
        p.error("second clip_grad_norm record");
      if (!(maxNorm > 0.0))
        p.error("max norm must be positive");
      desc.clipGradNorm = maxNorm;
    } else if (kind == "flops") {
      int64_t flops = p.integer("flops");
      p.end();
      if (flops < 0)
        p.error("flops must be >= 0");
      desc.flopsPerStep = flops;
    } else if (kind == "logits") {
      TensorSpec spec;
      p.tensor(spec, /*sixteen=*/true);
      p.end();
      if (desc.logits)
        p.error("second logits record");
      desc.logits = spec;
    } else if (kind == "eval") {
      p.end();
      if (desc.hasEval)
        p.error("second eval record");
      desc.hasEval = true;
    } else if (kind == "fused") {
      int64_t kernels = p.integer("fused kernel count");
      p.end();
      if (desc.fusedKernels)
        p.error("second fused record");
      if (kernels < 1)
        p.error("fused kernel count must be >= 1");
      desc.fusedKernels = kernels;
    } else if (kind == "grad_accum") {
      int64_t steps = p.integer("micro-batches");
      p.end();
      if (desc.gradAccumSteps)
        p.error("second grad_accum record");
      if (steps < 1)
        p.error("micro-batches per step must be >= 1");
      desc.gradAccumSteps = steps;
    } else if (kind == "host_step_buffer") {
      int64_t bytes = p.integer("bytes");
      p.end();
      if (desc.hostStepBuffer)
        p.error("second host_step_buffer record");
      if (bytes < 1)
        p.error("host step buffer bytes must be >= 1");
      desc.hostStepBuffer = bytes;
    } else {
      return false;
    }
    return true;
  }
};

} // namespace

Descriptor parseDescriptor(const char *text) {
  if (!text)
    fatal("descriptor: the model has no ztrain_descriptor");
  DescriptorReader r;
  Descriptor &desc = r.desc;
  std::string all(text);
  size_t start = 0;
  int lineNumber = 0;
  bool sawHeader = false;
  while (start < all.size()) {
    size_t newline = all.find('\n', start);
    std::string line =
        all.substr(start, newline == std::string::npos ? std::string::npos
                                                       : newline - start);
    start = newline == std::string::npos ? all.size() : newline + 1;
    ++lineNumber;
    if (line.empty())
      continue;
    LineParser p(line, lineNumber);
    std::string kind = p.word("record kind");
    if (!sawHeader) {
      if (kind != "ztrain-descriptor")
        p.error("expected 'ztrain-descriptor 1' first");
      if (p.integer("version") != 1)
        p.error("unsupported descriptor version");
      p.end();
      sawHeader = true;
      continue;
    }
    if (kind == "param")
      r.param(p);
    else if (kind == "buffer")
      r.buffer(p);
    else if (kind == "state")
      r.state(p);
    else if (kind == "input")
      r.input(p);
    else if (kind == "grad")
      r.grad(p);
    else if (kind == "optimizer")
      // Free text: everything after "optimizer ".
      desc.optimizer = line.size() > 10 ? line.substr(10) : std::string();
    else if (!r.single(p, kind))
      p.error("unknown record kind '" + kind + "'");
  }
  if (!sawHeader)
    fatal("descriptor: empty (expected 'ztrain-descriptor 1')");
  if (r.meshLine) {
    if (desc.gridSize == 0)
      r.meshLine->error("a mesh record needs a grid record (the ranks it "
                        "lays out)");
    if (desc.meshShard * desc.meshReplicate != desc.gridSize)
      r.meshLine->error(
          "mesh of " + std::to_string(desc.meshShard) + " shard x " +
          std::to_string(desc.meshReplicate) + " replicate ranks is " +
          std::to_string(desc.meshShard * desc.meshReplicate) +
          " ranks, the grid has " + std::to_string(desc.gridSize));
  }
  if (desc.gridSize > 0) {
    // Shards split a tensor over the shard group: the mesh's shard ranks.
    const int64_t shards = desc.shardRanks(desc.gridSize);
    for (const DescriptorReader::Sharded &s : r.sharded) {
      std::string problem =
          s.isParam
              ? shardCoverageProblem("param", desc.params[s.index], shards)
              : shardCoverageProblem("state", desc.states[s.index], shards);
      if (!problem.empty())
        s.line.error(problem);
    }
  }
  return std::move(desc);
}

PlannedBytes plannedBytes(const Descriptor &desc, bool deviceOnly) {
  PlannedBytes planned;
  for (const ParamSpec &spec : desc.params)
    if (spec.space != MemorySpace::Nvme && // in its swap file
        !(deviceOnly && spec.space == MemorySpace::Host))
      planned.modelStates += spec.storeBytes;
  for (const StateSpec &spec : desc.states)
    if (spec.space != MemorySpace::Nvme && // in its swap file, not in memory
        !(deviceOnly && spec.space == MemorySpace::Host))
      planned.modelStates += spec.storeBytes;
  for (const GradSpec &spec : desc.grads)
    planned.modelStates += spec.bytes();
  for (const InputSpec &spec : desc.inputs)
    planned.inputs += spec.bytes;
  for (const BufferSpec &spec : desc.buffers)
    planned.buffers += spec.bytes;
  for (const auto &[name, bytes] : desc.arenas)
    if (!(deviceOnly && isHostArena(name))) // host memory there
      planned.arenas += bytes;
  return planned;
}

} // namespace ztrt
