//===- Data.cpp - Where each step's inputs come from ----------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "io/Data.h"

#include "step/Init.h"
#include "io/Safetensors.h"
#include "base/Support.h"

#include <cerrno>
#include <cstdio>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

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
  /// Added to every sample index (createDataSource's `rowShift`).
  int64_t shift = 0;
  /// The flag that named the file (--data or --eval-data), for messages.
  const char *flag = "--data";
  /// The global sample index of local row 0 of `step` for a per-rank batch
  /// of `batch` rows.
  int64_t firstRow(int64_t step, int64_t batch) const {
    return ((step - 1) * ranks + rank) * batch + shift;
  }
};

class SafetensorsData final : public DataSource {
public:
  SafetensorsData(const Descriptor &desc, const std::string &path, Slice slice)
      : inputs(desc.inputs), file(SafetensorsFile::read(path, slice.flag)),
        slice(slice) {
    const char *flag = slice.flag;
    const char *file = path.c_str();
    const InputSpec *first = nullptr;
    for (const InputSpec &input : inputs) {
      const char *name = input.name.c_str();
      if (input.shape.empty())
        fatal("%s '%s': input '%s' has rank 0; a data file needs inputs "
              "with a leading batch dimension", flag,
              file, name);
      const SafetensorsTensor *tensor = this->file.find(input.name);
      if (!tensor)
        fatal("%s '%s': no tensor named '%s' (the file needs one tensor "
              "per model input)", flag,
              file, name);
      const char *dtype = elemTypeSafetensorsName(input.type);
      if (tensor->dtype != dtype)
        fatal("%s '%s': tensor '%s' has dtype %s, the input is %s", flag, file,
              name, tensor->dtype.c_str(), dtype);
      std::vector<int64_t> expected = input.shape;
      expected[0] = tensor->shape.empty() ? 0 : tensor->shape[0];
      if (tensor->shape != expected || expected[0] == 0)
        fatal("%s '%s': tensor '%s' has shape %s, the input needs %s "
              "with N > 0 samples", flag,
              file, name, formatShape(tensor->shape).c_str(),
              sampleShape(input.shape).c_str());
      if (first && tensor->shape[0] != samples)
        fatal("%s '%s': tensor '%s' has %lld samples but '%s' has %lld", flag,
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
          if (!input.allows(value))
            fatal("%s '%s': input '%s' value %d out of range [0, %lld)%s "
                  "(sample %lld)",
                  flag, file, name, value, static_cast<long long>(input.bound),
                  input.hasIgnore ? format(" and not the ignored label %lld",
                                           static_cast<long long>(input.ignore))
                                        .c_str()
                                  : "",
                  static_cast<long long>(i / elementsPerSample(input)));
        }
      }
      rows.push_back(tensor);
    }
    // Fewer samples than one global batch: every step repeats rows (rank
    // 0 says so once; the numbers are still right, the data is just thin).
    const int64_t global =
        inputs.empty() || inputs[0].shape.empty()
            ? 0
            : inputs[0].shape[0] * static_cast<int64_t>(slice.ranks);
    if (slice.rank == 0 && samples > 0 && samples < global)
      warning("%s '%s': %lld samples, fewer than a global batch of %lld "
              "rows: each step repeats samples",
              flag, file, static_cast<long long>(samples),
              static_cast<long long>(global));
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

/// A read-only memory map of a whole regular file (openInputFile's checks):
/// pages are read when touched, so a rank reads the windows it uses (and
/// the validation pass), never a copy of the file.
class MappedFile {
public:
  MappedFile(const std::string &path, const char *what) {
    uint64_t size = 0;
    int fd = openInputFile(path, what, size);
    bytes = static_cast<size_t>(size);
    if (bytes > 0) {
      void *p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        fatal("%s: cannot map '%s': %s", what, path.c_str(), std::strerror(err));
      }
      base = static_cast<const unsigned char *>(p);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (base)
      ::munmap(const_cast<unsigned char *>(base), bytes);
  }
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  const unsigned char *data() const { return base; }
  size_t size() const { return bytes; }

private:
  const unsigned char *base = nullptr;
  size_t bytes = 0;
};

/// The 1-D token array of a NumPy .npy file: where its data starts and the
/// width of a token; fatal on anything else (a header ztrain cannot read, a
/// type that is not an unsigned or non-negative integer, more than one
/// dimension, Fortran order, a size that disagrees with the shape).
struct NpyTokens {
  size_t offset = 0;
  int width = 0;
  bool isSigned = false;
};

NpyTokens parseNpy(const MappedFile &file, const std::string &path,
                   const char *flag) {
  const char *name = path.c_str();
  const unsigned char *d = file.data();
  const size_t n = file.size();
  if (n < 10 || std::memcmp(d, "\x93NUMPY", 6) != 0)
    fatal("%s '%s': not a NumPy .npy file (no \\x93NUMPY magic)", flag, name);
  const int major = d[6];
  size_t headerLen = 0, start = 0;
  if (major == 1) {
    headerLen = d[8] | (size_t(d[9]) << 8);
    start = 10;
  } else if ((major == 2 || major == 3) && n >= 12) {
    headerLen = d[8] | (size_t(d[9]) << 8) | (size_t(d[10]) << 16) |
                (size_t(d[11]) << 24);
    start = 12;
  } else {
    fatal("%s '%s': .npy format version %d is not one ztrain reads (1, "
          "2 or 3)", flag,
          name, major);
  }
  if (headerLen > n - start)
    fatal("%s '%s': .npy header of %zu bytes runs past the end of the "
          "file", flag,
          name, headerLen);
  std::string header(reinterpret_cast<const char *>(d + start), headerLen);
  // The value of `key` in the header's Python dict literal, from the first
  // non-space character after its colon.
  auto valueOf = [&](const char *key) -> size_t {
    std::string k = std::string("'") + key + "'";
    size_t at = header.find(k);
    if (at != std::string::npos)
      at = header.find(':', at + k.size());
    if (at != std::string::npos)
      at = header.find_first_not_of(' ', at + 1);
    if (at == std::string::npos)
      fatal("%s '%s': .npy header has no %s: %s", flag, name, k.c_str(),
            header.c_str());
    return at;
  };
  auto delimited = [&](const char *key, char open, char close) {
    size_t at = valueOf(key);
    size_t end = header[at] == open ? header.find(close, at + 1)
                                    : std::string::npos;
    if (end == std::string::npos)
      fatal("%s '%s': malformed .npy header: %s", flag, name, header.c_str());
    return header.substr(at + 1, end - at - 1);
  };
  NpyTokens t;
  t.offset = start + headerLen;
  const std::string descr = delimited("descr", '\'', '\'');
  if (descr == "|u1" || descr == "u1" || descr == "<u1")
    t.width = 1;
  else if (descr == "<u2")
    t.width = 2;
  else if (descr == "<u4")
    t.width = 4;
  else if (descr == "<i4") {
    t.width = 4;
    t.isSigned = true;
  } else
    fatal("%s '%s': .npy tokens of type '%s'; ztrain reads uint8, "
          "little-endian uint16, uint32 or int32 token arrays", flag,
          name, descr.c_str());
  if (header.compare(valueOf("fortran_order"), 5, "False") != 0)
    fatal("%s '%s': a Fortran-order .npy array; save it in C order", flag, name);
  const std::string shape = delimited("shape", '(', ')');
  char *end = nullptr;
  errno = 0;
  unsigned long long count = std::strtoull(shape.c_str(), &end, 10);
  while (end && *end == ' ')
    ++end;
  if (end && *end == ',')
    ++end;
  while (end && *end == ' ')
    ++end;
  if (shape.empty() || errno || !end || *end != '\0')
    fatal("%s '%s': .npy shape (%s) is not one dimension of tokens", flag, name,
          shape.c_str());
  if (count != (n - t.offset) / t.width || (n - t.offset) % t.width)
    fatal("%s '%s': .npy shape (%s) needs %llu bytes of tokens, the file "
          "holds %zu", flag,
          name, shape.c_str(), count * t.width, n - t.offset);
  return t;
}

/// Token streams for a language model with inputs (tokens, targets), both
/// i32 [B, T]: row b of a step is a window of T + 1 tokens at a
/// deterministic offset drawn from (seed, its global sample index), the
/// targets the tokens shifted by one (nanoGPT's get_batch).
class TokenData final : public DataSource {
public:
  /// `named`: the format came from the file's name (auto), not a flag.
  TokenData(const Descriptor &desc, const std::string &path, DataFormat format,
            uint64_t seed, Slice slice, DataOrder order, bool named)
      : seed(seed), slice(slice), order(order), file(path, slice.flag) {
    const char *flag = slice.flag;
    const char *name = path.c_str();
    const auto &in = desc.inputs;
    if (in.size() != 2 || in[0].type != ElemType::I32 ||
        in[1].type != ElemType::I32 || in[0].shape.size() != 2 ||
        in[0].shape != in[1].shape)
      fatal("%s '%s': a token file needs a model with exactly two i32 "
            "inputs (tokens, targets) of equal shape [B, T]", flag,
            name);
    batch = in[0].shape[0];
    window = in[0].shape[1];
    switch (format) {
    case DataFormat::Text:
    case DataFormat::U8:
      width = 1;
      break;
    case DataFormat::U16:
      width = 2;
      break;
    case DataFormat::U32:
      width = 4;
      break;
    case DataFormat::Npy: {
      NpyTokens t = parseNpy(file, path, flag);
      offset = t.offset;
      width = t.width;
      isSigned = t.isSigned;
      break;
    }
    default:
      fatal("%s '%s': not a token format", flag, name);
    }
    const size_t payload = file.size() - offset;
    if (payload % width)
      fatal("%s '%s': %zu bytes is not a whole number of %d-byte tokens "
            "(--data-format=%s)", flag,
            name, payload, width, dataFormatName(format));
    length = static_cast<int64_t>(payload / width);
    const char *unit = width == 1 ? "bytes" : "tokens";
    if (length < window + 1)
      fatal("%s '%s': %lld %s, too short for windows of %lld tokens "
            "plus one target", flag,
            name, static_cast<long long>(length), unit,
            static_cast<long long>(window));

    // Windows start at offsets 0 .. length - window - 1: fewer of them than
    // rows in a global batch means every step repeats windows (65 tokens
    // for windows of 64 is one window in every row).
    const int64_t windows = length - window;
    const int64_t global = batch * static_cast<int64_t>(slice.ranks);
    if (slice.rank == 0 && windows < global)
      warning("%s '%s': %lld %s hold %lld distinct window%s of %lld tokens "
              "plus a target, fewer than a global batch of %lld rows: each "
              "step repeats windows",
              flag, name, static_cast<long long>(length), unit,
              static_cast<long long>(windows), windows == 1 ? "" : "s",
              static_cast<long long>(window), static_cast<long long>(global));

    // Every token against the vocabulary, once, before step 1: a file read
    // with the wrong width fails here rather than training on garbage.
    int64_t bound = 0;
    for (const InputSpec &input : in)
      if (input.bound > 0 && (bound == 0 || input.bound < bound))
        bound = input.bound;
    for (int64_t i = 0; i < length; ++i) {
      const int64_t v = token(i);
      if (v < 0 || (bound > 0 && v >= bound)) {
        const InputSpec &input = in[0].bound > 0 && in[0].bound == bound ? in[0] : in[1];
        fatal("%s '%s': input '%s' value %lld out of range [0, %lld) "
              "(%s %lld)%s", flag,
              name, input.name.c_str(), static_cast<long long>(v),
              static_cast<long long>(bound), width == 1 ? "byte" : "token",
              static_cast<long long>(i),
              width == 1 && format != DataFormat::Npy
                  ? ""
                  : "; is the token width right (--data-format)?");
      }
    }
    // A .bin of uint32 ids read as nanoGPT's uint16: the high halves of
    // little-endian ids below 65536 are every second uint16, all 0. Real
    // uint16 text of this length never is; a flag says which it is.
    if (named && format == DataFormat::U16 && length >= 256) {
      bool oddZero = true, evenNonzero = false;
      for (int64_t i = 0; i < length && oddZero; ++i)
        if (i % 2)
          oddZero = token(i) == 0;
        else
          evenNonzero = evenNonzero || token(i) != 0;
      if (oddZero && evenNonzero)
        fatal("%s '%s': every second uint16 token is 0, as in uint32 "
              "token ids read as uint16 (.bin is nanoGPT's uint16); give "
              "--data-format=u32, or --data-format=u16 if these are uint16", flag,
              name);
    }
  }

  void fill(int64_t step, size_t index, void *dst) const override {
    int32_t *out = static_cast<int32_t *>(dst);
    // Input 0 is the window itself, input 1 the same window shifted by one.
    int64_t shift = static_cast<int64_t>(index);
    int64_t first = slice.firstRow(step, batch);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t sample = first + b;
      int64_t at = order == DataOrder::Sequential
                       ? static_cast<int64_t>(
                             (static_cast<uint64_t>(sample) *
                              static_cast<uint64_t>(window)) %
                             static_cast<uint64_t>(length - window))
                       : tokenWindowOffset(seed, sample, length, window);
      for (int64_t j = 0; j < window; ++j)
        out[b * window + j] = static_cast<int32_t>(token(at + shift + j));
    }
  }

private:
  int64_t token(int64_t i) const {
    const unsigned char *p = file.data() + offset + static_cast<size_t>(i) * width;
    switch (width) {
    case 1:
      return p[0];
    case 2:
      return p[0] | (int64_t(p[1]) << 8);
    default: {
      uint32_t v = p[0] | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) |
                   (uint32_t(p[3]) << 24);
      return isSigned ? int64_t(int32_t(v)) : int64_t(v);
    }
    }
  }

  uint64_t seed;
  Slice slice;
  DataOrder order;
  MappedFile file;
  size_t offset = 0;
  int width = 1;
  bool isSigned = false;
  int64_t batch = 0, window = 0, length = 0;
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

const char *dataFormatName(DataFormat format) {
  switch (format) {
  case DataFormat::Auto:
    return "auto";
  case DataFormat::Safetensors:
    return "safetensors";
  case DataFormat::Text:
    return "text";
  case DataFormat::U8:
    return "u8";
  case DataFormat::U16:
    return "u16";
  case DataFormat::U32:
    return "u32";
  case DataFormat::Npy:
    return "npy";
  }
  return "?";
}

bool parseDataFormat(const std::string &name, DataFormat &out) {
  for (DataFormat f : {DataFormat::Auto, DataFormat::Safetensors,
                       DataFormat::Text, DataFormat::U8, DataFormat::U16,
                       DataFormat::U32, DataFormat::Npy})
    if (name == dataFormatName(f)) {
      out = f;
      return true;
    }
  return false;
}

DataFormat resolveDataFormat(const std::string &path, DataFormat format,
                             const char *flag) {
  if (format != DataFormat::Auto)
    return format;
  std::string lower = path;
  for (char &c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (endsWith(lower, ".safetensors"))
    return DataFormat::Safetensors;
  if (endsWith(lower, ".npy"))
    return DataFormat::Npy;
  // nanoGPT's prepare.py writes train.bin / val.bin as uint16 tokens.
  if (endsWith(lower, ".bin"))
    return DataFormat::U16;
  for (const char *ext : {".txt", ".text", ".md", ".rst", ".csv", ".tsv",
                          ".json", ".jsonl", ".xml", ".html"})
    if (endsWith(lower, ext))
      return DataFormat::Text;
  fatal("%s '%s': cannot tell the format from the name; give "
        "--data-format=safetensors, text (bytes as tokens), u16 or u32 "
        "(little-endian token ids, as nanoGPT's .bin), or npy", flag,
        path.c_str());
}

std::unique_ptr<DataSource> createDataSource(const Descriptor &desc,
                                             const std::string &path,
                                             uint64_t seed, int rank,
                                             int ranks, DataFormat format,
                                             DataOrder order,
                                             int64_t rowShift,
                                             const char *flag) {
  Slice slice{rank, ranks, rowShift, flag};
  if (path.empty())
    return std::make_unique<SyntheticData>(desc, seed, slice);
  // The file first: a missing or unreadable one is named as such, whatever
  // its name says.
  { uint64_t size = 0; ::close(openInputFile(path, flag, size)); }
  DataFormat resolved = resolveDataFormat(path, format, flag);
  if (resolved == DataFormat::Safetensors)
    return std::make_unique<SafetensorsData>(desc, path, slice);
  return std::make_unique<TokenData>(desc, path, resolved, seed, slice,
                                     order, format == DataFormat::Auto);
}

} // namespace ztrt
