//===- fuzz_data.cpp - libFuzzer target: the --data readers ---------------===//
//
// Part of ztrain's fuzz targets (docs/fuzzing.md). Input: one byte that
// picks how the file is read, then the bytes of the file given as --data.
// The byte: bits 0-2 the format (safetensors, text, u16, u32, npy, or auto
// from the name .bin, .npy, .safetensors), bit 3 rank 1 of 2 ranks, bit 4
// sequential windows, bits 5-6 the model's inputs (tokens / targets i32
// [2, 8] with vocabulary 256; the same with vocabulary 50 and ignore -100;
// x f32 [3, 4] and y i32 [3] bound 5; tokens / targets [1, 1]).
// createDataSource accepts the file or refuses it in one line; an accepted
// one fills steps 1, 2 and 10^6 of every input, whose i32 values must be
// ones the input allows.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "io/Data.h"

#include <cstring>

using namespace ztrt;
using ztrt_fuzz::crash;

namespace {

const char *const kDescriptors[] = {
    "ztrain-descriptor 1\n"
    "input tokens i32 2 2 8 bound 256\n"
    "input targets i32 2 2 8 bound 256\n",
    "ztrain-descriptor 1\n"
    "input tokens i32 2 2 8 bound 50\n"
    "input targets i32 2 2 8 bound 50 ignore -100\n",
    "ztrain-descriptor 1\n"
    "input x f32 2 3 4 bound 0\n"
    "input y i32 1 3 bound 5\n",
    "ztrain-descriptor 1\n"
    "input tokens i32 2 1 1 bound 65536\n"
    "input targets i32 2 1 1 bound 65536\n",
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const std::string &dir = ztrt_fuzz::scratchDir();
  static const Descriptor descs[] = {
      parseDescriptor(kDescriptors[0]), parseDescriptor(kDescriptors[1]),
      parseDescriptor(kDescriptors[2]), parseDescriptor(kDescriptors[3])};
  const uint8_t mode = data[0];
  static const struct {
    DataFormat format;
    const char *name;
  } formats[] = {{DataFormat::Safetensors, "data"}, {DataFormat::Text, "data"},
                 {DataFormat::U16, "data"},         {DataFormat::U32, "data"},
                 {DataFormat::Npy, "data"},         {DataFormat::Auto, "data.bin"},
                 {DataFormat::Auto, "data.npy"},
                 {DataFormat::Auto, "data.safetensors"}};
  const auto &format = formats[mode & 7];
  const bool twoRanks = mode & 8;
  const DataOrder order = mode & 16 ? DataOrder::Sequential : DataOrder::Random;
  const Descriptor &desc = descs[(mode >> 5) & 3];
  const std::string path = dir + "/" + format.name;
  ztrt_fuzz::writeFile(path, data + 1, size - 1);
  try {
    std::unique_ptr<DataSource> source =
        createDataSource(desc, path, /*seed=*/7, twoRanks ? 1 : 0,
                         twoRanks ? 2 : 1, format.format, order);
    for (int64_t step : {int64_t(1), int64_t(2), int64_t(1000000)})
      for (size_t i = 0; i < desc.inputs.size(); ++i) {
        const InputSpec &input = desc.inputs[i];
        std::vector<char> buffer(static_cast<size_t>(input.bytes));
        source->fill(step, i, buffer.data());
        if (input.type != ElemType::I32)
          continue;
        for (int64_t e = 0; e < input.numel; ++e) {
          int32_t v;
          std::memcpy(&v, buffer.data() + 4 * e, 4);
          if (!input.allows(v))
            crash("a filled value the input does not allow",
                  input.name + " = " + std::to_string(v));
        }
      }
  } catch (const ztrt_fuzz::FuzzRefusal &refusal) {
    ztrt_fuzz::checkRefusal(refusal);
  }
  ztrt::removeTree(path);
  ztrt_fuzz::checkNothingLeft(dir, {});
  return 0;
}
