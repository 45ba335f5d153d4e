//===- cuda_gemm_peak.cpp - The GPU's measured float32 GEMM peak ----------===//
//
// Part of ztrain's runtime (built with the cuda backend). bench/gpu_step.py
// divides a training step's achieved FLOP/s by this number (MFU against
// the measured peak, not a datasheet one):
//
//   ztrt_cuda_gemm_peak [N] [REPEATS] [f32|bf16|f16]
//
// times C = A B for N x N matrices (default 8192) of the given type
// (default f32) through the cuda backend's own matmul, the one a step
// runs: f32 is cuBLAS sgemm with TF32 off, bf16 / f16 cublasGemmEx with
// 16-bit operands and float accumulation (tensor cores). REPEATS GEMMs per
// trial after a warm-up, best of 5 trials; one JSON line:
//
//   {"device": "...", "dtype": "f32", "n": 8192, "repeats": 10, "ms": 21.9,
//    "tflops": 50.2}
//
// The operands are uniform random in [-1, 1) (a fixed seed), not constants:
// a GEMM on zeros or on repeated values can run faster than on real data
// (less switching power, so higher clocks).
//
// Exit status 2, with the reason, when there is no usable GPU.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/CudaBackend.h"
#include "step/Context.h"

#include "ztrt.h"

#include "base/DType.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace ztrt;

int main(int argc, char **argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 10;
  const std::string type = argc > 3 ? argv[3] : "f32";
  const bool known = type == "f32" || type == "bf16" || type == "f16";
  const ztrt_dtype dtype = type == "bf16"  ? ZTRT_BF16
                           : type == "f16" ? ZTRT_F16
                                           : ZTRT_F32;
  if (n <= 0 || repeats <= 0 || !known) {
    std::fprintf(stderr, "usage: %s [N > 0] [REPEATS > 0] [f32|bf16|f16]\n",
                 argv[0]);
    return 2;
  }
  std::string why;
  if (cudaDeviceCount(&why) == 0) {
    std::fprintf(stderr, "ztrt_cuda_gemm_peak: no CUDA device: %s\n",
                 why.c_str());
    return 2;
  }
  ztrt_ctx ctx(createCudaBackend(CudaOptions{}));
  const int64_t elemBytes = dtype == ZTRT_F32 ? 4 : 2;
  const int64_t bytes = n * n * elemBytes;
  void *a = ztrt_alloc(&ctx, bytes, ZTRT_CAT_OTHER);
  void *b = ztrt_alloc(&ctx, bytes, ZTRT_CAT_OTHER);
  void *c = ztrt_alloc(&ctx, bytes, ZTRT_CAT_OTHER);
  {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<unsigned char> host(bytes);
    for (void *dst : {a, b}) {
      for (int64_t i = 0; i < n * n; ++i) {
        const float x = u(rng);
        if (dtype == ZTRT_F32)
          std::memcpy(&host[i * 4], &x, 4);
        else {
          const uint16_t bits = dtype == ZTRT_BF16 ? bf16(x).bits : f16(x).bits;
          std::memcpy(&host[i * 2], &bits, 2);
        }
      }
      ctx.backend().copyFromHost(dst, host.data(), bytes);
    }
  }
  ztrt_matmul(&ctx, dtype, a, b, c, 1, n, n, n, 0, 0, 0, 0, 0);
  ctx.synchronize();
  double best = 1e300;
  for (int trial = 0; trial < 5; ++trial) {
    const auto begin = std::chrono::steady_clock::now();
    for (int r = 0; r < repeats; ++r)
      ztrt_matmul(&ctx, dtype, a, b, c, 1, n, n, n, 0, 0, 0, 0, 0);
    ctx.synchronize();
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - begin)
                          .count() /
                      repeats;
    best = std::min(best, ms);
  }
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  std::printf("{\"device\": \"%s\", \"dtype\": \"%s\", \"n\": %lld, \"repeats\": %d, \"ms\": "
              "%.4f, \"tflops\": %.3f}\n",
              cudaDeviceDescription(0).c_str(), type.c_str(),
              static_cast<long long>(n),
              repeats, best, flops / (best * 1e-3) / 1e12);
  return 0;
}
