//===- Safetensors.h - Reading and writing .safetensors files ---*- C++ -*-===//
//
// The Hugging Face format: an 8-byte little-endian header length N, N bytes
// of JSON header ({"name": {"dtype", "shape", "data_offsets"}, optional
// "__metadata__": {string: string}}), then the tensor bytes, little-endian,
// row-major, back to back. Every malformed file is a fatal error that names
// the file and what is wrong with it.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_IO_SAFETENSORS_H
#define ZTRT_IO_SAFETENSORS_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ztrt {

/// Bytes per element of a safetensors dtype ("F32", "I32", ...), or 0 if
/// the name is not a safetensors dtype.
int safetensorsDTypeSize(const std::string &dtype);

struct SafetensorsTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const char *data = nullptr; // Into the owning SafetensorsFile.
  size_t bytes = 0;
};

/// A whole file read into memory and validated.
class SafetensorsFile {
public:
  /// Reads and validates `path`; fatal on any problem. `what` says which
  /// file this is in error messages (e.g. "--init").
  static SafetensorsFile read(const std::string &path, const char *what);

  const std::string &path() const { return filePath; }
  const std::vector<SafetensorsTensor> &tensors() const { return entries; }
  const std::vector<std::pair<std::string, std::string>> &metadata() const {
    return meta;
  }
  /// The tensor named `name`, or null.
  const SafetensorsTensor *find(const std::string &name) const;

private:
  std::string filePath;
  std::vector<char> contents;
  std::vector<SafetensorsTensor> entries;
  std::vector<std::pair<std::string, std::string>> meta;
};

struct SafetensorsWriteTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void *data; // Host memory, numel * dtype size bytes.
};

/// Writes `tensors` in the given order, atomically (temp file, fsync,
/// rename). The header is padded with spaces to a multiple of 8 bytes so
/// that tensor data is aligned in memory-mapped readers.
void writeSafetensors(
    const std::string &path, const std::vector<SafetensorsWriteTensor> &tensors,
    const std::vector<std::pair<std::string, std::string>> &metadata);

} // namespace ztrt

#endif // ZTRT_IO_SAFETENSORS_H
