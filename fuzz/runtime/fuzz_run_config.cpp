//===- fuzz_run_config.cpp - libFuzzer target: --config JSON --------------===//
//
// Part of ztrain's fuzz targets (docs/fuzzing.md). Input: a DeepSpeed JSON
// config (docs/config.md) given to a compiled model as `--config F`. The
// executable's flag parser reads it (applyRunConfig, then the schedule
// checks) and accepts or refuses it in one line; an accepted one is checked
// against the build (checkConfigAgainstBuild: an AdamW fp32 model with
// micro-batch 4) and its learning-rate schedule evaluated.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "cli/Options.h"
#include "cli/RunConfig.h"
#include "step/Descriptor.h"

#include <cmath>

using namespace ztrt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &dir = ztrt_fuzz::scratchDir();
  const std::string path = dir + "/ds_config.json";
  ztrt_fuzz::writeFile(path, data, size);
  static const Descriptor desc =
      parseDescriptor("ztrain-descriptor 1\n"
                      "param w f32 2 4 4 init normal 0.02\n"
                      "state w.m f32 2 4 4 of w\n"
                      "state w.v f32 2 4 4 of w\n"
                      "input x f32 2 4 4 bound 0\n"
                      "optimizer adamw lr 0.001 beta1 0.9 beta2 0.999\n");
  std::string model = "model", flag = "--config";
  char *argv[] = {model.data(), flag.data(), const_cast<char *>(path.c_str()),
                  nullptr};
  try {
    Options opts = parseOptions(3, argv);
    checkConfigAgainstBuild(desc, opts, path);
    if (!opts.lr.decaySteps) // the driver's default: the run's last step
      opts.lr.decaySteps = 100;
    for (int64_t step : {int64_t(1), int64_t(5), int64_t(1) << 40})
      if (!std::isfinite(opts.lr.at(0.001, step)))
        ztrt_fuzz::crash("a learning rate that is not finite",
                         std::to_string(step));
  } catch (const ztrt_fuzz::FuzzRefusal &refusal) {
    ztrt_fuzz::checkRefusal(refusal);
  }
  ztrt_fuzz::checkNothingLeft(dir, {"ds_config.json"});
  return 0;
}
