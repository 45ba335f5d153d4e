//===- Data.cpp - Where each step's inputs come from ----------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "src/Data.h"

#include "src/Init.h"
#include "src/Safetensors.h"
#include "src/Support.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ztrt {

DataSource::~DataSource() = default;

namespace {

/// "[N, d1, ..]": the shape a data tensor needs for `shape` [B, d1, ..].
std::string sampleShape(const std::vector<int64_t> &shape) {
  std::string out = "[N";
  for (size_t d = 1; d < shape.size(); ++d)
    out += ", " + std::to_string(shape[d]);
  return out + "]";
}

int64_t elementsPerSample(const InputSpec &input) {
  int64_t n = 1;
  for (size_t d = 1; d < input.shape.size(); ++d)
    n *= input.shape[d];
  return n;
}

/// Which rows of each step's global batch this process fills.
struct Slice {
  int rank = 0;
  int ranks = 1;
  /// The global sample index of local row 0 of `step` for a per-rank batch
  /// of `batch` rows.
  int64_t firstRow(int64_t step, int64_t batch) const {
    return ((step - 1) * ranks + rank) * batch;
  }
};

class SafetensorsData final : public DataSource {
public:
  SafetensorsData(const Descriptor &desc, const std::string &path, Slice slice)
      : inputs(desc.inputs), file(SafetensorsFile::read(path, "--data")),
        slice(slice) {
    const char *file = path.c_str();
    const InputSpec *first = nullptr;
    for (const InputSpec &input : inputs) {
      const char *name = input.name.c_str();
      if (input.shape.empty())
        fatal("--data '%s': input '%s' has rank 0; a data file needs inputs "
              "with a leading batch dimension",
              file, name);
      const SafetensorsTensor *tensor = this->file.find(input.name);
      if (!tensor)
        fatal("--data '%s': no tensor named '%s' (the file needs one tensor "
              "per model input)",
              file, name);
      const char *dtype = elemTypeSafetensorsName(input.type);
      if (tensor->dtype != dtype)
        fatal("--data '%s': tensor '%s' has dtype %s, the input is %s", file,
              name, tensor->dtype.c_str(), dtype);
      std::vector<int64_t> expected = input.shape;
      expected[0] = tensor->shape.empty() ? 0 : tensor->shape[0];
      if (tensor->shape != expected || expected[0] == 0)
        fatal("--data '%s': tensor '%s' has shape %s, the input needs %s "
              "with N > 0 samples",
              file, name, formatShape(tensor->shape).c_str(),
              sampleShape(input.shape).c_str());
      if (first && tensor->shape[0] != samples)
        fatal("--data '%s': tensor '%s' has %lld samples but '%s' has %lld",
              file, name, static_cast<long long>(tensor->shape[0]),
              first->name.c_str(), static_cast<long long>(samples));
      if (!first) {
        first = &input;
        samples = tensor->shape[0];
      }
      if (input.type == ElemType::I32 && input.bound > 0) {
        int32_t value;
        int64_t count = tensor->bytes / static_cast<int64_t>(sizeof(value));
        for (int64_t i = 0; i < count; ++i) {
          std::memcpy(&value, tensor->data + sizeof(value) * i, sizeof(value));
          if (value < 0 || value >= input.bound)
            fatal("--data '%s': input '%s' value %d out of range [0, %lld) "
                  "(sample %lld)",
                  file, name, value, static_cast<long long>(input.bound),
                  static_cast<long long>(i / elementsPerSample(input)));
        }
      }
      rows.push_back(tensor);
    }
  }

  void fill(int64_t step, size_t index, void *dst) const override {
    const InputSpec &input = inputs[index];
    int64_t batch = input.shape[0];
    size_t rowBytes =
        static_cast<size_t>(elementsPerSample(input) * input.elemBytes());
    int64_t first = slice.firstRow(step, batch);
    for (int64_t b = 0; b < batch; ++b) {
      int64_t sample = (first + b) % samples;
      std::memcpy(static_cast<char *>(dst) + b * rowBytes,
                  rows[index]->data + sample * rowBytes, rowBytes);
    }
  }

private:
  std::vector<InputSpec> inputs;
  SafetensorsFile file;
  std::vector<const SafetensorsTensor *> rows;
  int64_t samples = 0;
  Slice slice;
};

class TokenData final : public DataSource {
public:
  TokenData(const Descriptor &desc, const std::string &path, uint64_t seed,
            Slice slice)
      : seed(seed), slice(slice) {
    const char *file = path.c_str();
    const auto &in = desc.inputs;
    if (in.size() != 2 || in[0].type != ElemType::I32 ||
        in[1].type != ElemType::I32 || in[0].shape.size() != 2 ||
        in[0].shape != in[1].shape)
      fatal("--data '%s': a raw token file needs a model with exactly two i32 "
            "inputs (tokens, targets) of equal shape [B, T]",
            file);
    batch = in[0].shape[0];
    window = in[0].shape[1];

    std::vector<char> contents = readInputFile(path, "--data");
    bytes.assign(contents.begin(), contents.end());
    if (static_cast<int64_t>(bytes.size()) < window + 1)
      fatal("--data '%s': %zu bytes, too short for windows of %lld tokens "
            "plus one target",
            file, bytes.size(), static_cast<long long>(window));

    for (const InputSpec &input : in) {
      if (input.bound <= 0 || input.bound > 256)
        continue;
      for (size_t i = 0; i < bytes.size(); ++i)
        if (bytes[i] >= input.bound)
          fatal("--data '%s': input '%s' value %d out of range [0, %lld) "
                "(byte %zu)",
                file, input.name.c_str(), bytes[i],
                static_cast<long long>(input.bound), i);
    }
  }

  void fill(int64_t step, size_t index, void *dst) const override {
    int32_t *out = static_cast<int32_t *>(dst);
    // Input 0 is the window itself, input 1 the same window shifted by one.
    size_t shift = index;
    int64_t first = slice.firstRow(step, batch);
    for (int64_t b = 0; b < batch; ++b) {
      int64_t offset = tokenWindowOffset(seed, first + b, bytes.size(), window);
      for (int64_t j = 0; j < window; ++j)
        out[b * window + j] = bytes[offset + shift + j];
    }
  }

private:
  uint64_t seed;
  Slice slice;
  int64_t batch = 0, window = 0;
  std::vector<unsigned char> bytes;
};

class SyntheticData final : public DataSource {
public:
  SyntheticData(const Descriptor &desc, uint64_t seed, Slice slice)
      : inputs(desc.inputs), slice(slice) {
    for (const InputSpec &input : inputs) {
      if (input.type == ElemType::I32 && input.bound <= 0)
        fatal("input '%s' is i32 with no known bound, so it cannot be "
              "synthesized; it needs --data",
              input.name.c_str());
      keys.push_back(rng::streamKey(seed, "input/" + input.name));
    }
  }

  void fill(int64_t step, size_t index, void *dst) const override {
    const InputSpec &input = inputs[index];
    // Counters continue across steps, so every step sees fresh values and
    // element i of step t is the same wherever it is computed. A batched
    // input's element i is element firstRow * (numel / B) + i of the step's
    // global batch, row-major; an unbatched one is the same on every rank.
    uint64_t base = static_cast<uint64_t>(step - 1) * input.numel;
    if (!input.shape.empty() && input.shape[0] > 0) {
      int64_t batch = input.shape[0];
      base = static_cast<uint64_t>(slice.firstRow(step, batch)) *
             static_cast<uint64_t>(input.numel / batch);
    }
    uint64_t key = keys[index];
    if (input.type == ElemType::F32) {
      float *out = static_cast<float *>(dst);
      for (int64_t i = 0; i < input.numel; ++i)
        out[i] = static_cast<float>(rng::normal(key, base + i));
    } else {
      int32_t *out = static_cast<int32_t *>(dst);
      for (int64_t i = 0; i < input.numel; ++i)
        out[i] = static_cast<int32_t>(rng::below(key, base + i, input.bound));
    }
  }

private:
  std::vector<InputSpec> inputs;
  std::vector<uint64_t> keys;
  Slice slice;
};

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

} // namespace

int64_t tokenWindowOffset(uint64_t seed, int64_t sample, int64_t length,
                          int64_t window) {
  uint64_t key = rng::streamKey(seed, "window");
  return static_cast<int64_t>(
      rng::below(key, static_cast<uint64_t>(sample), length - window));
}

std::unique_ptr<DataSource> createDataSource(const Descriptor &desc,
                                             const std::string &path,
                                             uint64_t seed, int rank,
                                             int ranks) {
  Slice slice{rank, ranks};
  if (path.empty())
    return std::make_unique<SyntheticData>(desc, seed, slice);
  if (endsWith(path, ".safetensors"))
    return std::make_unique<SafetensorsData>(desc, path, slice);
  return std::make_unique<TokenData>(desc, path, seed, slice);
}

} // namespace ztrt
