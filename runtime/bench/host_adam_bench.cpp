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
// It also prints the step's arithmetic floor ("floor_seconds"): the time
// the same threads take for what torch's formula asks of the divider per
// element, one square root and two divisions (sqrt(v) / c, then
// m / denom), at the vector width the update runs at (AVX-512 where the
// update uses it, SSE2 otherwise), on operands that stay in L1 so no
// memory time is counted: what the divider instructions the update issues
// take by themselves. The update needs these correctly rounded, as torch
// computes them, so it cannot drop them; how close to this floor it runs
// says how much is left to gain without changing its bits.
//
//   ztrt_host_adam_bench ELEMENTS THREADS ITERS [adamw=1]
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/CpuBackend.h"
#include "backends/cpu/IsaKernels.h"
#include "step/Context.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

constexpr int kFloorBlock = 1024; // floats per operand: 8 KiB for both, in L1

#if defined(__x86_64__)
/// sqrt(v) / c, then a / (that + eps), for kFloorBlock elements, `rounds`
/// times; the quotients are summed so that nothing is optimized away.
__attribute__((target("avx512f"))) float floorAvx512(const float *v,
                                                     const float *a, float c,
                                                     int64_t rounds) {
  const __m512 cv = _mm512_set1_ps(c), eps = _mm512_set1_ps(1e-8f);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t r = 0; r < rounds; ++r)
    for (int i = 0; i < kFloorBlock; i += 16) {
      __m512 d = _mm512_div_ps(
          _mm512_maskz_sqrt_ps(0xFFFF, _mm512_loadu_ps(v + i)), cv);
      sum = _mm512_add_ps(
          sum, _mm512_div_ps(_mm512_loadu_ps(a + i), _mm512_add_ps(d, eps)));
    }
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  float total = 0.0f;
  for (float lane : lanes)
    total += lane;
  return total;
}

float floorSse2(const float *v, const float *a, float c, int64_t rounds) {
  const __m128 cv = _mm_set1_ps(c), eps = _mm_set1_ps(1e-8f);
  __m128 sum = _mm_setzero_ps();
  for (int64_t r = 0; r < rounds; ++r)
    for (int i = 0; i < kFloorBlock; i += 4) {
      __m128 d = _mm_div_ps(_mm_sqrt_ps(_mm_loadu_ps(v + i)), cv);
      sum = _mm_add_ps(sum,
                       _mm_div_ps(_mm_loadu_ps(a + i), _mm_add_ps(d, eps)));
    }
  float lanes[4];
  _mm_storeu_ps(lanes, sum);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#else
float floorScalar(const float *v, const float *a, float c, int64_t rounds) {
  float sum = 0.0f;
  for (int64_t r = 0; r < rounds; ++r)
    for (int i = 0; i < kFloorBlock; ++i)
      sum += a[i] / (std::sqrt(v[i]) / c + 1e-8f);
  return sum;
}
#endif

/// Seconds for `threads` threads to do the divider work of n elements
/// (each thread its share, as the update's static schedule splits them;
/// one thread below kParallelElements, as the update).
double floorSeconds(int64_t n, int threads) {
  if (n < ztrt::kParallelElements)
    threads = 1;
  std::vector<float> v(kFloorBlock), a(kFloorBlock);
  for (int i = 0; i < kFloorBlock; ++i) {
    v[i] = 1e-6f * static_cast<float>(i % 97 + 1);
    a[i] = 1e-3f * static_cast<float>(i % 89) - 0.04f;
  }
  const int64_t rounds =
      (n + int64_t(threads) * kFloorBlock - 1) / (int64_t(threads) * kFloorBlock);
  float sink = 0.0f;
  auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
#if defined(__x86_64__)
    sink += ztrt::avx512::enabled()
                ? floorAvx512(v.data(), a.data(), 0.999f, rounds)
                : floorSse2(v.data(), a.data(), 0.999f, rounds);
#else
    sink += floorScalar(v.data(), a.data(), 0.999f, rounds);
#endif
  }
  auto t1 = std::chrono::steady_clock::now();
  if (sink == 12345.0f) // keeps the sum alive
    std::puts("");
  return std::chrono::duration<double>(t1 - t0).count();
}

} // namespace

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
  std::vector<double> floors;
  for (int it = 0; it <= iters; ++it) {
    double t = floorSeconds(n, threads);
    if (it > 0)
      floors.push_back(t);
  }
  std::sort(floors.begin(), floors.end());
  std::printf("{\"elements\": %lld, \"threads\": %d, \"seconds\": %.9f, "
              "\"floor_seconds\": %.9f, \"bytes\": %lld, "
              "\"checksum\": %.6f}\n",
              static_cast<long long>(n), threads, median,
              floors[floors.size() / 2], static_cast<long long>(28 * n),
              static_cast<double>(p[n / 2]));
  return 0;
}
