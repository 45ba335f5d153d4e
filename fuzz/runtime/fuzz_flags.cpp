//===- fuzz_flags.cpp - libFuzzer target: the executable's flag parser ----===//
//
// Part of ztrain's fuzz targets (docs/fuzzing.md). Input: a compiled
// model's command line, its arguments separated by NUL bytes (argv[0] is
// added). parseOptions accepts it or refuses it in one line (status 2; 1 for
// a --config file that cannot be read); --help (which prints the usage and
// exits 0) is skipped. A --config file named on it is read from wherever it
// points (a missing one is refused).
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "cli/Options.h"

#include <cmath>

using namespace ztrt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ztrt_fuzz::scratchDir(); // installs the fatal handler
  std::vector<std::string> args{"model"};
  std::string arg;
  for (size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == 0) {
      if (arg == "--help" || arg.compare(0, 7, "--help=") == 0)
        return 0;
      args.push_back(arg);
      arg.clear();
    } else {
      arg += static_cast<char>(data[i]);
    }
  }
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  try {
    Options opts = parseOptions(static_cast<int>(args.size()), argv.data());
    if (opts.steps < 0 || opts.logEvery < 0 || opts.threads < 0 ||
        !std::isfinite(opts.collectiveTimeout) || opts.collectiveTimeout < 0)
      ztrt_fuzz::crash("flags accepted with a value out of range",
                       std::to_string(opts.steps));
  } catch (const ztrt_fuzz::FuzzRefusal &refusal) {
    ztrt_fuzz::checkRefusal(refusal);
  }
  return 0;
}
