//===- swap_io_bench.cpp - Throughput of the swap I/O engine --------------===//
//
// Part of the ztrain project.
//
// Writes then reads back `total` bytes through SwapSpace (the NVMe offload
// engine, io/SwapIO.h) in transfers of `block` bytes with `depth` of them
// in flight, over `files` files (tensors), and prints one JSON line with
// the write and read throughput. bench/swap_io.py runs it next to fio.
// A new transfer goes in as soon as any one completes (`any`, fio's way),
// or only once the oldest has (`fifo`, the way a step waits for its uses).
//
//   ztrt_swap_io_bench DIR TOTAL_BYTES BLOCK_BYTES DEPTH [FILES] [direct=1]
//                      [any|fifo]
//
//===----------------------------------------------------------------------===//

#include "io/SwapIO.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

using namespace ztrt;

namespace {

double seconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Moves every block of every file, `depth` transfers in flight.
/// Each buffer serves one transfer at a time: a finished transfer's
/// buffer takes the next one.
double pass(SwapSpace &swap, const std::vector<int> &files, int64_t perFile,
            int64_t block, unsigned depth,
            const std::vector<void *> &buffers, bool write, bool any) {
  std::deque<std::pair<int64_t, void *>> inFlight; // ticket, buffer
  std::vector<void *> idle(buffers.begin(), buffers.end());
  auto retire = [&] {
    if (any) {
      int64_t done = swap.waitAny();
      for (auto it = inFlight.begin(); it != inFlight.end(); ++it)
        if (it->first == done) {
          idle.push_back(it->second);
          inFlight.erase(it);
          return;
        }
      std::fprintf(stderr, "waitAny returned an unknown ticket\n");
      std::exit(1);
    }
    swap.wait(inFlight.front().first);
    idle.push_back(inFlight.front().second);
    inFlight.pop_front();
  };
  double start = seconds();
  for (int f : files)
    for (int64_t off = 0; off < perFile; off += block) {
      if (inFlight.size() == depth)
        retire();
      void *buf = idle.back();
      idle.pop_back();
      inFlight.push_back({write ? swap.write(f, buf, block, off)
                                : swap.read(f, buf, block, off),
                          buf});
    }
  while (!inFlight.empty())
    retire();
  return seconds() - start;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s DIR TOTAL_BYTES BLOCK_BYTES DEPTH [FILES] "
                         "[DIRECT]\n",
                 argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t total = std::atoll(argv[2]);
  const int64_t block = SwapSpace::roundUp(std::atoll(argv[3]));
  const unsigned depth = static_cast<unsigned>(std::atoi(argv[4]));
  const int nfiles = argc > 5 ? std::atoi(argv[5]) : 4;
  const bool direct = argc > 6 ? std::atoi(argv[6]) != 0 : true;
  const std::string order = argc > 7 ? argv[7] : "any";
  if (order != "any" && order != "fifo") {
    std::fprintf(stderr, "order must be any or fifo, got '%s'\n",
                 order.c_str());
    return 2;
  }
  const bool any = order == "any";
  if (total <= 0 || block <= 0 || depth == 0 || nfiles <= 0) {
    std::fprintf(stderr, "sizes, depth and files must be positive\n");
    return 2;
  }
  const int64_t perFile = (total / nfiles + block - 1) / block * block;
  SwapSpace swap(dir, 0, perFile * nfiles, depth, direct);
  std::vector<int> files;
  for (int i = 0; i < nfiles; ++i)
    files.push_back(swap.createFile("tensor" + std::to_string(i), perFile));
  // One buffer per transfer in flight (a pinned-buffer pool of depth
  // buffers, as the offload plan will size it).
  std::vector<void *> buffers;
  for (unsigned i = 0; i < depth; ++i) {
    buffers.push_back(SwapSpace::allocate(block));
    std::memset(buffers.back(), static_cast<int>(i + 1), block);
  }
  double w = pass(swap, files, perFile, block, depth, buffers, true, any);
  // Drop nothing from the page cache by hand: with O_DIRECT it holds none
  // of the files; without it the read below is partly a cache read (said
  // in the output).
  double r = pass(swap, files, perFile, block, depth, buffers, false, any);
  const double bytes = static_cast<double>(perFile) * nfiles;
  std::printf("{\"engine\": \"%s\", \"direct\": %s, \"bytes\": %.0f, "
              "\"block\": %lld, \"depth\": %u, \"order\": \"%s\", "
              "\"write_gbps\": %.3f, \"read_gbps\": %.3f}\n",
              swap.asynchronous() ? "io_uring" : "pread/pwrite",
              swap.direct() ? "true" : "false", bytes,
              static_cast<long long>(block), depth, order.c_str(),
              bytes / w / 1e9,
              bytes / r / 1e9);
  for (void *b : buffers)
    std::free(b);
  return 0;
}
