//===- Data.h - Where each step's inputs come from --------------*- C++ -*-===//
//
// Three sources, chosen by --data (documented in docs/runtime.md):
//  - a .safetensors file with one tensor [S, d1..] per input [B, d1..]; step t
//    row b is sample ((t-1)*B + b) mod S;
//  - a token file (bytes of text, little-endian uint16 / uint32 token ids as
//    nanoGPT's train.bin, or a 1-D .npy array), memory-mapped, for a
//    language model with inputs (tokens, targets), both i32 [B, T]: row b of
//    step t is a window at a deterministic offset drawn from
//    (seed, (t-1)*B + b); the format comes from --data-format or the name;
//  - no file: synthetic values from (seed, step, input name).
// With R ranks, B is the per-rank batch and the global batch of a step is
// R*B rows: rank r fills global rows [r*B, (r+1)*B), where global row g of
// step t is what row g of a single process with batch R*B gets (so (t-1)*B
// above becomes (t-1)*R*B + r*B). Inputs of rank 0 have no batch dimension
// and are the same on every rank.
// Everything is validated when the source is created (shapes, dtypes, i32
// values against the input's bound), so a bad file fails before step 1.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_IO_DATA_H
#define ZTRT_IO_DATA_H

#include "step/Descriptor.h"

#include <cstdint>
#include <memory>
#include <string>

namespace ztrt {

class DataSource {
public:
  virtual ~DataSource();
  /// Writes the values of input `index` for 1-based step `step` into host
  /// memory `dst` (the input's size in bytes).
  virtual void fill(int64_t step, size_t index, void *dst) const = 0;
};

/// How --data is read (--data-format). Auto picks by the file's extension:
/// .safetensors, .npy, .bin (nanoGPT's uint16 token ids), a text extension
/// (.txt, .md, .json, ... : bytes as tokens); any other name is refused.
enum class DataFormat { Auto, Safetensors, Text, U8, U16, U32, Npy };
const char *dataFormatName(DataFormat format);
/// False for a name that is not a format.
bool parseDataFormat(const std::string &name, DataFormat &out);
/// The format `path` is read in (fatal when Auto cannot tell).
DataFormat resolveDataFormat(const std::string &path, DataFormat format,
                             const char *flag = "--data");

/// The windows of a token file: drawn from the seed (nanoGPT's random
/// batches), or in file order (sample s starts at token s*T, wrapping).
enum class DataOrder { Random, Sequential };

/// The source for `path` (empty: synthetic) of rank `rank` of `ranks`; fatal
/// on any invalid file. Micro-batch u's local row 0 is global sample
/// ((u - 1) ranks + rank) B + rowShift: a run resumed with another global
/// batch shifts its samples so that they continue where the checkpoint's
/// stopped. `flag` names the file in messages (--data, --eval-data).
std::unique_ptr<DataSource> createDataSource(const Descriptor &desc,
                                             const std::string &path,
                                             uint64_t seed, int rank = 0,
                                             int ranks = 1,
                                             DataFormat format = DataFormat::Auto,
                                             DataOrder order = DataOrder::Random,
                                             int64_t rowShift = 0,
                                             const char *flag = "--data");

/// The offset in [0, length - window - 1] of sample `sample`'s token window.
int64_t tokenWindowOffset(uint64_t seed, int64_t sample, int64_t length,
                          int64_t window);

} // namespace ztrt

#endif // ZTRT_IO_DATA_H
