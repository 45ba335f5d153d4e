//===- ztrain-consolidate.cpp - Full weights from a sharded checkpoint ----===//
//
//   ztrain-consolidate DIR -o FULL.safetensors
//
// Reads the index of the checkpoint DIR names (DIR/latest's, or DIR itself
// when it is one global_step<N> directory) and every rank's shard file,
// each tensor checked against its CRC-32C (written by a model
// executable's --save-checkpoint), reassembles each parameter as its full
// tensor and writes them to one safetensors file that PyTorch and Hugging
// Face loaders read: byte for byte what --save of the same run writes.
// Errors follow the runtime's contract: one `ztrain: error:` line, exit 1
// (2 for command-line mistakes), and no output file.
//
//===----------------------------------------------------------------------===//

#include "src/Checkpoint.h"
#include "src/Support.h"

#include <cstdio>
#include <string>

namespace {

const char kUsage[] =
    "usage: %s DIR -o FULL.safetensors\n"
    "Writes the full parameters and buffers of the sharded checkpoint DIR\n"
    "(a --save-checkpoint directory: the checkpoint its 'latest' names; or\n"
    "one of its global_step<N> directories) to one safetensors file.\n";

} // namespace

int main(int argc, char **argv) {
  std::string dir, out;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf(kUsage, argv[0]);
      return 0;
    }
    if (arg == "-o" || arg == "--output") {
      if (i + 1 >= argc || argv[i + 1][0] == '\0')
        ztrt::usageError("%s needs a file name", arg.c_str());
      out = argv[++i];
    } else if (arg.compare(0, 2, "-o") == 0 && arg.size() > 2) {
      out = arg.substr(2);
    } else if (arg[0] == '-') {
      ztrt::usageError("unknown flag '%s' (try --help)", arg.c_str());
    } else if (dir.empty()) {
      dir = arg;
    } else {
      ztrt::usageError("unexpected argument '%s' (one checkpoint directory)",
                       arg.c_str());
    }
  }
  if (dir.empty() || out.empty())
    ztrt::usageError("need a checkpoint directory and -o FILE (try --help)");
  ztrt::checkOutputPath(out, "-o");
  ztrt::consolidateCheckpoint(dir, out);
  return 0;
}
