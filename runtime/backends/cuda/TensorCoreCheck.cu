//===- TensorCoreCheck.cu - TensorCore.cuh's layouts, run once ----*- CUDA -*-===//
//
// Part of ztrain's runtime, for the conformance suite: one warp runs each
// instruction of TensorCore.cuh on operands the test chose and writes what
// every lane got, so that the test can hold the GPU (and the emulator) to
// the layouts TensorCore.cuh documents. Not on any training path.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/Kernels.h"
#include "backends/cuda/TensorCore.cuh"

namespace ztrt::cuda {

namespace {

constexpr int kLd = 24; // shared rows: 48 bytes, 16-byte aligned

struct alignas(16) ProbeShared {
  alignas(16) uint16_t a[16 * kLd];
  alignas(16) uint16_t b[16 * kLd]; // b, k rows
  alignas(16) uint16_t bt[8 * kLd]; // b^T, n rows
};

/// a: 16 x 16, b: 16 x 8 (k x n), both row-major 16-bit bits; c: 16 x 8.
/// loaded[m][lane][r]: register r of `lane` after ldmatrix m (0: .x4 of a's
/// four 8 x 8 quarters in A-operand order; 1: the same, .trans; 2: .x2 of
/// b's columns as rows (b^T, 8 x 16); 3: .x2.trans of b's two 8 x 8
/// halves, k 0..7 and 8..15). d[p]: a b + c (p 0: operands from the
/// documented layout, read by each lane from global memory; 1: a through
/// ldmatrix .x4 and b through .x2 of b^T; 2: b through .x2.trans).
template <typename T>
__global__ void tensorCoreProbeKernel(const uint16_t *a, const uint16_t *b,
                                      const float *c, uint32_t *loaded,
                                      float *d) {
  __shared__ ProbeShared sh;
  uint16_t *as = sh.a, *bs = sh.b, *bts = sh.bt;
  const int lane = static_cast<int>(threadIdx.x);
  const int g = lane / 4, t = lane % 4;
  for (int e = lane; e < 16 * 16; e += kWarp)
    as[e / 16 * kLd + e % 16] = a[e];
  for (int e = lane; e < 16 * 8; e += kWarp) {
    bs[e / 8 * kLd + e % 8] = b[e];
    bts[e % 8 * kLd + e / 8] = b[e];
  }
  __syncwarp();

  auto pair = [](const uint16_t *p, int stride, int i, int j, bool trans) {
    // Elements (i, j) and (i, j + 1), or (i, j) and (i + 1, j) when trans.
    const uint16_t lo = p[i * stride + j];
    const uint16_t hi = trans ? p[(i + 1) * stride + j] : p[i * stride + j + 1];
    return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
  };
  tc::FragC cf;
  for (int e = 0; e < 4; ++e)
    cf.r[e] = c[(g + (e / 2) * 8) * 8 + 2 * t + e % 2];

  // The documented layout, element by element.
  tc::FragA af;
  af.r[0] = pair(a, 16, g, 2 * t, false);
  af.r[1] = pair(a, 16, g + 8, 2 * t, false);
  af.r[2] = pair(a, 16, g, 2 * t + 8, false);
  af.r[3] = pair(a, 16, g + 8, 2 * t + 8, false);
  tc::FragB bf;
  bf.r[0] = pair(b, 8, 2 * t, g, true);
  bf.r[1] = pair(b, 8, 2 * t + 8, g, true);
  tc::FragC df;
  tc::mma<T>(df, af, bf, cf);
  for (int e = 0; e < 4; ++e)
    d[(g + (e / 2) * 8) * 8 + 2 * t + e % 2] = df.r[e];

  // Through ldmatrix: lane l names row l % 8 of matrix l / 8.
  const int m = lane / 8, row = lane % 8;
  const uint16_t *quarter = as + (row + 8 * (m % 2)) * kLd + 8 * (m / 2);
  tc::FragA al, alt;
  tc::ldmatrixX4(al.r, quarter);
  tc::ldmatrixX4Trans(alt.r, quarter);
  uint32_t bl[2], blt[2];
  tc::ldmatrixX2(bl, bts + row * kLd + 8 * (m % 2));
  tc::ldmatrixX2Trans(blt, bs + (row + 8 * (m % 2)) * kLd);
  for (int r = 0; r < 4; ++r) {
    loaded[(0 * kWarp + lane) * 4 + r] = al.r[r];
    loaded[(1 * kWarp + lane) * 4 + r] = alt.r[r];
    loaded[(2 * kWarp + lane) * 4 + r] = r < 2 ? bl[r] : 0u;
    loaded[(3 * kWarp + lane) * 4 + r] = r < 2 ? blt[r] : 0u;
  }
  tc::FragB b1{{bl[0], bl[1]}}, b2{{blt[0], blt[1]}};
  tc::mma<T>(df, al, b1, cf);
  for (int e = 0; e < 4; ++e)
    d[128 + (g + (e / 2) * 8) * 8 + 2 * t + e % 2] = df.r[e];
  tc::mma<T>(df, al, b2, cf);
  for (int e = 0; e < 4; ++e)
    d[256 + (g + (e / 2) * 8) * 8 + 2 * t + e % 2] = df.r[e];
}

} // namespace

template <typename T>
void tensorCoreProbe(const uint16_t *a, const uint16_t *b, const float *c,
                     uint32_t *loaded, float *d) {
  uint16_t *da = nullptr, *db = nullptr;
  float *dc = nullptr, *dd = nullptr;
  uint32_t *dl = nullptr;
  check(cudaMalloc(reinterpret_cast<void **>(&da), 256 * sizeof(uint16_t)),
        "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void **>(&db), 128 * sizeof(uint16_t)),
        "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void **>(&dc), 128 * sizeof(float)),
        "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void **>(&dd), 3 * 128 * sizeof(float)),
        "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void **>(&dl),
                   4 * kWarp * 4 * sizeof(uint32_t)),
        "cudaMalloc");
  check(cudaMemcpy(da, a, 256 * sizeof(uint16_t), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  check(cudaMemcpy(db, b, 128 * sizeof(uint16_t), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  check(cudaMemcpy(dc, c, 128 * sizeof(float), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  ZTRT_LAUNCH(1, kWarp, 0, nullptr, tensorCoreProbeKernel<T>)
  (da, db, dc, dl, dd);
  check(cudaGetLastError(), "tensor-core probe launch");
  check(cudaDeviceSynchronize(), "tensor-core probe");
  check(cudaMemcpy(d, dd, 3 * 128 * sizeof(float), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  check(cudaMemcpy(loaded, dl, 4 * kWarp * 4 * sizeof(uint32_t),
                   cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  for (void *p : {static_cast<void *>(da), static_cast<void *>(db),
                  static_cast<void *>(dc), static_cast<void *>(dd),
                  static_cast<void *>(dl)})
    check(cudaFree(p), "cudaFree");
}

template void tensorCoreProbe<bf16>(const uint16_t *, const uint16_t *,
                                    const float *, uint32_t *, float *);
template void tensorCoreProbe<f16>(const uint16_t *, const uint16_t *,
                                   const float *, uint32_t *, float *);

} // namespace ztrt::cuda
