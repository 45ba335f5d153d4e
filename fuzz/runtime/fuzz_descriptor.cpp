//===- fuzz_descriptor.cpp - libFuzzer target: the model descriptor -------===//
//
// Part of ztrain's fuzz targets (docs/fuzzing.md). Input: descriptor text
// (runtime/include/ztrt.h), as a compiled model embeds it and as a
// checkpoint's index.json records it. parseDescriptor accepts it or refuses
// it in one line; an accepted one goes through what main() does with it
// before the first step: the storage check on 1-3 ranks (or its grid), the
// planned bytes, the precision text, every rank's storage slices.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "step/Descriptor.h"

using namespace ztrt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ztrt_fuzz::scratchDir(); // installs the fatal handler
  std::string text(reinterpret_cast<const char *>(data), size);
  try {
    Descriptor desc = parseDescriptor(text.c_str());
    (void)plannedBytes(desc).total();
    (void)plannedBytes(desc, /*deviceOnly=*/true).total();
    (void)precisionText(desc);
    const int64_t grid = desc.gridSize > 0 ? desc.gridSize : 3;
    for (const ParamSpec &p : desc.params)
      for (int64_t r = 0; r < std::min<int64_t>(grid, 4); ++r) {
        StorageSlice s = p.slice(r);
        if (s.count < 0 || s.begin < 0 || s.count > p.storeElems)
          ztrt_fuzz::crash("a storage slice outside the tensor", p.name);
      }
    if (desc.gridSize > 0)
      checkStorage(desc, desc.gridSize);
    else
      for (int64_t ranks = 1; ranks <= 3; ++ranks)
        checkStorage(desc, ranks);
  } catch (const ztrt_fuzz::FuzzRefusal &refusal) {
    ztrt_fuzz::checkRefusal(refusal);
  }
  return 0;
}
