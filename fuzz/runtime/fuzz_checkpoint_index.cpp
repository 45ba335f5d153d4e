//===- fuzz_checkpoint_index.cpp - libFuzzer target: checkpoint index.json ===//
//
// Part of ztrain's fuzz targets (docs/fuzzing.md). Input: the bytes of a
// checkpoint's index.json (docs/runtime.md), read as --resume and
// ztrain-consolidate read it. readCheckpointIndex accepts it or refuses it in
// one line; an accepted one goes on as a resume does: its descriptor is
// parsed, the checkpoint's global batch computed, and the checkpoint checked
// against the model its own descriptor describes (checkResumable,
// checkpointLayoutMatches, checkResumedData).
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "io/Checkpoint.h"

using namespace ztrt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &dir = ztrt_fuzz::scratchDir();
  ztrt_fuzz::writeFile(dir + "/index.json", data, size);
  try {
    CheckpointIndex index = readCheckpointIndex(dir, "--resume");
    (void)checkpointGlobalBatch(index);
    Descriptor desc = parseDescriptor(index.descriptor.c_str());
    (void)checkpointLayoutMatches(index, desc, index.worldSize);
    checkResumable(index, desc, index.descriptor.c_str(), index.worldSize);
    checkResumedData(index, "", index.dataFormat, index.dataOrder, dir);
  } catch (const ztrt_fuzz::FuzzRefusal &refusal) {
    ztrt_fuzz::checkRefusal(refusal);
  }
  ztrt_fuzz::checkNothingLeft(dir, {"index.json"});
  return 0;
}
