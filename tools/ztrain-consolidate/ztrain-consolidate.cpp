//===- ztrain-consolidate.cpp - Full weights from a sharded checkpoint ----===//
//
//   ztrain-consolidate DIR -o FULL.safetensors [--dtype=fp32|bf16]
//
// Reads the index of the checkpoint DIR names (DIR/latest's, or DIR itself
// when it is one global_step<N> directory) and every rank's shard file,
// each tensor checked against its CRC-32C (written by a model
// executable's --save-checkpoint), reassembles each parameter as its full
// tensor and writes them to one safetensors file that PyTorch and Hugging
// Face loaders read: byte for byte what --save of the same run writes
// (each tensor in its own dtype), or, with --dtype, every floating-point
// tensor in f32 (a 16-bit parameter from its f32 master state when the
// checkpoint has one) or rounded to bf16.
// Errors follow the runtime's contract: one `ztrain: error:` line, exit 1
// (2 for command-line mistakes), and no output file.
//
//===----------------------------------------------------------------------===//

#include "io/Checkpoint.h"
#include "base/Support.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

const char kUsage[] =
    "usage: %s DIR -o FULL.safetensors [--dtype=fp32|bf16]\n"
    "       %s DIR -o OUTDIR --max-shard-size=BYTES [--dtype=fp32|bf16]\n"
    "Writes the full parameters and buffers of the sharded checkpoint DIR\n"
    "(a --save-checkpoint directory: the checkpoint its 'latest' names; or\n"
    "one of its global_step<N> directories) to one safetensors file.\n"
    "\n"
    "  --dtype=fp32   write every floating-point tensor as F32; a bf16 / f16\n"
    "                 parameter is written from its f32 master copy when the\n"
    "                 checkpoint has one (mixed precision), else widened\n"
    "  --dtype=bf16   round every floating-point tensor to BF16\n"
    "  (default: each tensor in its own dtype, as --save writes it; i32\n"
    "  tensors are always I32)\n"
    "  --max-shard-size=BYTES  write a Hugging Face sharded checkpoint into\n"
    "                 OUTDIR instead: model-0000i-of-0000N.safetensors of at\n"
    "                 most BYTES (5000000000, 5GB, 4GiB) of tensors each, and\n"
    "                 model.safetensors.index.json (tensor -> file)\n";

} // namespace

int main(int argc, char **argv) {
  std::string dir, out;
  int64_t maxShard = 0;
  ztrt::ConsolidateType dtype = ztrt::ConsolidateType::Own;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf(kUsage, argv[0], argv[0]);
      return 0;
    }
    if (arg == "--dtype" || arg.compare(0, 8, "--dtype=") == 0) {
      std::string value;
      if (arg == "--dtype") {
        if (i + 1 >= argc)
          ztrt::usageError("--dtype needs a value (fp32 or bf16)");
        value = argv[++i];
      } else {
        value = arg.substr(8);
      }
      if (value == "fp32")
        dtype = ztrt::ConsolidateType::FP32;
      else if (value == "bf16")
        dtype = ztrt::ConsolidateType::BF16;
      else
        ztrt::usageError("--dtype: '%s' is not fp32 or bf16", value.c_str());
      continue;
    }
    if (arg.compare(0, 17, "--max-shard-size=") == 0) {
      int64_t v = 0;
      if (!ztrt::parseByteCount(arg.substr(17), v))
        ztrt::usageError("--max-shard-size: '%s' is not a number of bytes > 0 "
                         "(5000000000, 5GB, 4GiB)",
                         arg.c_str() + 17);
      maxShard = v;
      continue;
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
  if (maxShard > 0)
    ztrt::checkOutputDirectory(out, "-o");
  else
    ztrt::checkOutputPath(out, "-o");
  ztrt::consolidateCheckpoint(dir, out, dtype, maxShard);
  return 0;
}
