//===- host_adam_bench.cpp - The host optimizer step's throughput ---------===//
//
// Part of the ztrain project.
//
// Runs the runtime's Adam / AdamW update (ztrt_adam_update, the cpu
// backend's kernel: the host step of offloaded optimizer states) on N f32
// elements with T threads, `iters` times after one warm-up, and prints one
// JSON line: seconds per step (median), and the bytes it moves per step
// (parameter, gradient and both moments read; parameter and moments
// written: 28 bytes per element) over that time. bench/host_adam.py runs
// it next to torch.optim.Adam / AdamW and a copy of the same bytes.
//
//   ztrt_host_adam_bench ELEMENTS THREADS ITERS [adamw=1]
//
//===----------------------------------------------------------------------===//

#include "cpu/CpuBackend.h"
#include "src/Context.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char **argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: %s ELEMENTS THREADS ITERS [adamw=1]\n", argv[0]);
    return 2;
  }
  const int64_t n = std::atoll(argv[1]);
  const int threads = std::atoi(argv[2]);
  const int iters = std::atoi(argv[3]);
  const bool adamw = argc < 5 || std::atoi(argv[4]) != 0;
  auto backend = ztrt::createCpuBackend();
  backend->setThreads(threads);
  ztrt_ctx ctx(std::move(backend));
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = 0.01f * static_cast<float>(i % 101) - 0.5f;
    g[i] = 0.001f * static_cast<float>(i % 37) - 0.018f;
  }
  std::vector<double> times;
  for (int it = 0; it <= iters; ++it) {
    ctx.step = it + 1;
    auto t0 = std::chrono::steady_clock::now();
    ztrt_adam_update(&ctx, ZTRT_F32, p.data(), g.data(), m.data(), v.data(), n,
                     1e-3, 0.9, 0.999, 1e-8, adamw ? 0.01 : 0.0, adamw ? 1 : 0);
    auto t1 = std::chrono::steady_clock::now();
    if (it > 0) // the first touches the pages
      times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(times.begin(), times.end());
  double median = times[times.size() / 2];
  std::printf("{\"elements\": %lld, \"threads\": %d, \"seconds\": %.9f, "
              "\"bytes\": %lld, \"checksum\": %.6f}\n",
              static_cast<long long>(n), threads, median,
              static_cast<long long>(28 * n), static_cast<double>(p[n / 2]));
  return 0;
}
