//===- Safetensors.cpp - Reading and writing .safetensors files -----------===//
//
// Part of ztrain's runtime. Validation follows the reference implementation
// (huggingface/safetensors): header size bounded, names unique, offsets in
// order, non-overlapping and covering the data section exactly.
//
//===----------------------------------------------------------------------===//

#include "io/Safetensors.h"

#include "base/Json.h"
#include "base/Support.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unistd.h>

// Tensor bytes are written and read as they lie in memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian");

namespace ztrt {

namespace {

// The reference implementation's limit; a larger header is not a real file.
constexpr uint64_t kMaxHeaderBytes = 100000000;

} // namespace

int safetensorsDTypeSize(const std::string &dtype) {
  static const std::pair<const char *, int> sizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const auto &entry : sizes)
    if (dtype == entry.first)
      return entry.second;
  return 0;
}

SafetensorsFile SafetensorsFile::read(const std::string &path,
                                      const char *what) {
  SafetensorsFile file;
  file.filePath = path;
  const char *name = path.c_str();
  auto bad = [&](const std::string &message) {
    fatal("%s: '%s' is not a valid safetensors file: %s", what, name,
          message.c_str());
  };
  // The header length is checked against the file's size before anything
  // else is read: a bogus one costs 8 bytes of reading, not the whole file.
  uint64_t size = 0;
  int fd = openInputFile(path, what, size);
  if (size < 8) {
    ::close(fd);
    bad(format("%llu bytes, too short for the 8-byte header length",
               static_cast<unsigned long long>(size)));
  }
  unsigned char prefix[8];
  readExactly(fd, prefix, 8, path, what);
  uint64_t headerBytes = 0;
  for (int i = 7; i >= 0; --i)
    headerBytes = (headerBytes << 8) | prefix[i];
  if (headerBytes > kMaxHeaderBytes || headerBytes > size - 8) {
    ::close(fd);
    bad(format("header length %llu exceeds the file (%llu bytes)",
               static_cast<unsigned long long>(headerBytes),
               static_cast<unsigned long long>(size)));
  }
  file.contents.resize(static_cast<size_t>(size));
  std::memcpy(file.contents.data(), prefix, 8);
  readExactly(fd, file.contents.data() + 8, size - 8, path, what);
  ::close(fd);
  const std::vector<char> &bytes = file.contents;

  Json header;
  std::string error;
  if (!parseJson(std::string_view(bytes.data() + 8, headerBytes), header,
                 error))
    bad("header is not JSON: " + error);
  if (!header.is_object())
    bad("header is not a JSON object");

  const char *data = bytes.data() + 8 + headerBytes;
  size_t dataBytes = bytes.size() - 8 - headerBytes;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto &[key, value] : jsonMembers(header)) {
    if (key == "__metadata__") {
      if (!value.is_object())
        bad("__metadata__ is not an object");
      for (const auto &[metaKey, metaValue] : jsonMembers(value)) {
        if (!metaValue.is_string())
          bad("__metadata__ value of '" + metaKey + "' is not a string");
        file.meta.emplace_back(metaKey, jsonText(metaValue));
      }
      continue;
    }
    std::string where = "tensor '" + key + "'";
    if (!value.is_object())
      bad(where + " is not an object");
    const Json *dtype = jsonFind(value, "dtype");
    const Json *shape = jsonFind(value, "shape");
    const Json *offsets = jsonFind(value, "data_offsets");
    if (!dtype || !dtype->is_string())
      bad(where + " has no string \"dtype\"");
    int elementBytes = safetensorsDTypeSize(jsonText(*dtype));
    if (elementBytes == 0)
      bad(where + " has unknown dtype '" + jsonText(*dtype) + "'");
    if (!shape || !shape->is_array())
      bad(where + " has no \"shape\" array");
    SafetensorsTensor tensor;
    tensor.name = key;
    tensor.dtype = jsonText(*dtype);
    for (const Json &dim : *shape) {
      int64_t d;
      if (!jsonInt64(dim, d) || d < 0)
        bad(where + " has a shape entry that is not a non-negative integer");
      tensor.shape.push_back(d);
    }
    if (!offsets || !offsets->is_array() || offsets->size() != 2)
      bad(where + " has no \"data_offsets\" [begin, end]");
    int64_t begin, end;
    if (!jsonInt64((*offsets)[0], begin) || !jsonInt64((*offsets)[1], end) ||
        begin < 0 || end < begin)
      bad(where + " has invalid data_offsets");
    if (static_cast<uint64_t>(end) > dataBytes)
      bad(format("%s data_offsets [%lld, %lld] exceed the %zu data bytes",
                 where.c_str(), static_cast<long long>(begin),
                 static_cast<long long>(end), dataBytes));
    int64_t numel = checkedNumel(tensor.shape);
    int64_t expected;
    if (numel < 0 || __builtin_mul_overflow(numel, elementBytes, &expected) ||
        expected != end - begin)
      bad(format(
          "%s data_offsets [%lld, %lld] hold %lld bytes but %s %s "
          "needs %lld",
          where.c_str(), static_cast<long long>(begin),
          static_cast<long long>(end), static_cast<long long>(end - begin),
          tensor.dtype.c_str(), formatShape(tensor.shape).c_str(),
          static_cast<long long>(numel < 0 ? -1 : numel * elementBytes)));
    tensor.data = data + begin;
    tensor.bytes = static_cast<size_t>(end - begin);
    ranges.emplace_back(begin, end);
    file.entries.push_back(std::move(tensor));
  }

  // The data section must be exactly the tensors, each byte owned once.
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto &[begin, end] : ranges) {
    if (begin != covered)
      bad(format("tensor data %s at byte %llu of the data section",
                 begin < covered ? "overlaps" : "leaves a gap",
                 static_cast<unsigned long long>(begin)));
    covered = end;
  }
  if (covered != dataBytes)
    bad(format("data section has %zu bytes but the tensors cover %llu",
               dataBytes, static_cast<unsigned long long>(covered)));
  return file;
}

const SafetensorsTensor *SafetensorsFile::find(const std::string &name) const {
  for (const SafetensorsTensor &tensor : entries)
    if (tensor.name == name)
      return &tensor;
  return nullptr;
}

void writeSafetensors(
    const std::string &path, const std::vector<SafetensorsWriteTensor> &tensors,
    const std::vector<std::pair<std::string, std::string>> &metadata) {
  Json root = Json::object();
  if (!metadata.empty()) {
    Json &meta = root["__metadata__"] = Json::object();
    for (const auto &[key, value] : metadata)
      meta[key] = value;
  }
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const SafetensorsWriteTensor &tensor : tensors) {
    int elementBytes = safetensorsDTypeSize(tensor.dtype);
    int64_t numel = checkedNumel(tensor.shape);
    if (elementBytes == 0 || numel < 0)
      fatal("cannot write '%s': tensor '%s' has dtype %s shape %s",
            path.c_str(), tensor.name.c_str(), tensor.dtype.c_str(),
            formatShape(tensor.shape).c_str());
    uint64_t bytes = static_cast<uint64_t>(numel) * elementBytes;
    root[tensor.name] = {{"dtype", tensor.dtype},
                         {"shape", tensor.shape},
                         {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    sizes.push_back(bytes);
  }
  // Compact, as the reference writer does; padded to 8 bytes with spaces.
  std::string header = dumpJson(root, 0);
  while (header.size() % 8 != 0)
    header += ' ';

  AtomicFile file(path);
  unsigned char length[8];
  uint64_t headerBytes = header.size();
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(headerBytes >> (8 * i));
  file.write(length, sizeof(length));
  file.write(header.data(), header.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    file.write(tensors[i].data, sizes[i]);
  file.commit();
}

} // namespace ztrt
