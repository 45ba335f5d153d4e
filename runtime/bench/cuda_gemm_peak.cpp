//===- cuda_gemm_peak.cpp - The GPU's measured float32 GEMM peak ----------===//
//
// Part of ztrain's runtime (built with the cuda backend). bench/gpu_step.py
// divides a training step's achieved FLOP/s by this number (MFU against
// the measured peak, not a datasheet one):
//
//   ztrt_cuda_gemm_peak [N] [REPEATS]
//
// times C = A B for N x N float32 matrices (default 8192) through the cuda
// backend's own f32 matmul (cuBLAS sgemm with TF32 off: the precision the
// step runs at), REPEATS GEMMs per trial after a warm-up, best of 5 trials,
// and prints one JSON line:
//
//   {"device": "...", "n": 8192, "repeats": 10, "ms": 21.9, "tflops": 50.2}
//
// Exit status 2, with the reason, when there is no usable GPU.
//
//===----------------------------------------------------------------------===//

#include "cuda/CudaBackend.h"
#include "src/Context.h"

#include "ztrt.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace ztrt;

int main(int argc, char **argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 10;
  if (n <= 0 || repeats <= 0) {
    std::fprintf(stderr, "usage: %s [N > 0] [REPEATS > 0]\n", argv[0]);
    return 2;
  }
  std::string why;
  if (cudaDeviceCount(&why) == 0) {
    std::fprintf(stderr, "ztrt_cuda_gemm_peak: no CUDA device: %s\n",
                 why.c_str());
    return 2;
  }
  ztrt_ctx ctx(createCudaBackend(CudaOptions{}));
  const int64_t bytes = n * n * 4;
  void *a = ztrt_alloc(&ctx, bytes, ZTRT_CAT_OTHER);
  void *b = ztrt_alloc(&ctx, bytes, ZTRT_CAT_OTHER);
  void *c = ztrt_alloc(&ctx, bytes, ZTRT_CAT_OTHER);
  // Values do not change a GEMM's speed; finite ones keep it honest.
  ztrt_fill(&ctx, ZTRT_F32, a, n * n, 0.5);
  ztrt_fill(&ctx, ZTRT_F32, b, n * n, 0.25);
  ztrt_matmul(&ctx, ZTRT_F32, a, b, c, 1, n, n, n, 0, 0, 0, 0, 0);
  ctx.synchronize();
  double best = 1e300;
  for (int trial = 0; trial < 5; ++trial) {
    const auto begin = std::chrono::steady_clock::now();
    for (int r = 0; r < repeats; ++r)
      ztrt_matmul(&ctx, ZTRT_F32, a, b, c, 1, n, n, n, 0, 0, 0, 0, 0);
    ctx.synchronize();
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - begin)
                          .count() /
                      repeats;
    best = std::min(best, ms);
  }
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  std::printf("{\"device\": \"%s\", \"n\": %lld, \"repeats\": %d, \"ms\": "
              "%.4f, \"tflops\": %.3f}\n",
              cudaDeviceDescription(0).c_str(), static_cast<long long>(n),
              repeats, best, flops / (best * 1e-3) / 1e12);
  return 0;
}
