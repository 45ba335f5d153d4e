//===- fuzz_safetensors.cpp - libFuzzer target: .safetensors reader -------===//
//
// Part of ztrain's fuzz targets (docs/fuzzing.md). Input: the bytes of a
// file given as --init or --data. SafetensorsFile::read accepts it or
// refuses it in one line; an accepted file is written back with
// writeSafetensors and read again, which must give the same tensors,
// metadata and bytes.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "io/Safetensors.h"

#include <cstring>

using namespace ztrt;
using ztrt_fuzz::crash;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &dir = ztrt_fuzz::scratchDir();
  const std::string in = dir + "/in.safetensors";
  const std::string out = dir + "/out.safetensors";
  ztrt_fuzz::writeFile(in, data, size);
  try {
    SafetensorsFile file = SafetensorsFile::read(in, "--init");
    for (const SafetensorsTensor &t : file.tensors())
      if (file.find(t.name) != &t)
        crash("two tensors of one name accepted", t.name);
    std::vector<SafetensorsWriteTensor> tensors;
    for (const SafetensorsTensor &t : file.tensors())
      tensors.push_back({t.name, t.dtype, t.shape, t.data});
    writeSafetensors(out, tensors, file.metadata());
    SafetensorsFile back = SafetensorsFile::read(out, "--init");
    if (back.tensors().size() != file.tensors().size() ||
        back.metadata() != file.metadata())
      crash("a written file reads back differently", "tensor count/metadata");
    for (size_t i = 0; i < back.tensors().size(); ++i) {
      const SafetensorsTensor &a = file.tensors()[i], &b = back.tensors()[i];
      if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape ||
          a.bytes != b.bytes || (a.bytes && std::memcmp(a.data, b.data, a.bytes)))
        crash("a written tensor reads back differently", a.name);
    }
  } catch (const ztrt_fuzz::FuzzRefusal &refusal) {
    ztrt_fuzz::checkRefusal(refusal);
  }
  ztrt::removeTree(out);
  ztrt_fuzz::checkNothingLeft(dir, {"in.safetensors"});
  return 0;
}
