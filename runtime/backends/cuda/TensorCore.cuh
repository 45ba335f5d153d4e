//===- TensorCore.cuh - mma.sync and ldmatrix, with their layouts -*- CUDA -*-===//
//
// Part of ztrain's runtime. The two PTX instructions FlashAttention-2's
// register-resident loop is made of, with the fragment layouts the PTX ISA
// documents ("Matrix Fragments for mma.m16n8k16 with floating point type",
// "Warp-level matrix load instruction: ldmatrix"), which nvcuda::wmma
// leaves unspecified. Knowing which lane holds which element is what lets
// a kernel take a row's max and sum over its accumulators with two
// shuffles, and feed the accumulators of q k^T, rounded to 16 bits, to the
// next product as its A operand without a trip through shared memory.
//
// The layouts, for a warp's lane L: g = L / 4 (the "group"), t = L % 4.
// A register holds two 16-bit elements, the lower-indexed in its low half.
//
//   A (16 x 16, row-major), 4 registers: a0 = (g, 2t..2t+1),
//     a1 = (g + 8, 2t..2t+1), a2 = (g, 2t+8..2t+9), a3 = (g + 8, 2t+8..2t+9).
//   B (16 x 8, k x n, "col"), 2 registers: b0 = (k 2t..2t+1, n g),
//     b1 = (k 2t+8..2t+9, n g).
//   C, D (16 x 8 floats), 4 floats: c0, c1 = (g, 2t), (g, 2t+1);
//     c2, c3 = (g + 8, 2t), (g + 8, 2t+1).
//   ldmatrix .x4: lanes 8j..8j+7 give the addresses of rows 0..7 of matrix
//     j (16 bytes each, 16-byte aligned); register j of lane L gets row
//     L / 4 of matrix j, elements 2t, 2t+1; with .trans, elements (2t, L/4)
//     and (2t+1, L/4) of it (the matrix transposed). .x2: matrices 0 and 1
//     (addresses from lanes 0..15).
//
// So the accumulators of two adjacent 16 x 8 products (columns 0..7 and
// 8..15 of a 16 x 16 tile) are, rounded pairwise, exactly the four
// registers of that tile as an A operand (pack(c0, c1), pack(c2, c3) of
// the first are a0, a1; of the second a2, a3).
//
// On the CUDA emulator (ZTRT_CUDA_EMULATOR) both instructions are
// warp-collective functions built on warpGather: every lane contributes its
// registers (or its row address), and each computes its own result from the
// layouts above; the products of the widened 16-bit operands are exact and
// summed into the accumulator in k order, in float (a tensor core's order
// within the 16 is its own, within float accumulation error of this). A
// kernel that gets a layout wrong gets wrong numbers on the emulator too;
// CudaConformanceTest's TensorCoreLayoutsAreThePtxIsas checks that the GPU
// agrees with these layouts, with integer operands whose sums are exact in
// any order.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CUDA_TENSORCORE_CUH
#define ZTRT_BACKENDS_CUDA_TENSORCORE_CUH

#include "backends/cuda/DeviceUtil.cuh"

#ifndef ZTRT_CUDA_EMULATOR
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ztrt::cuda::tc {

/// A 16 x 16 operand A of T (bf16 or f16), row-major, as the warp holds it.
struct FragA {
  uint32_t r[4];
};
/// A 16 x 8 (k x n) operand B.
struct FragB {
  uint32_t r[2];
};
/// A 16 x 8 float accumulator.
struct FragC {
  float r[4];
};

/// Two floats as a register of two T (bf16 or f16), each rounded to
/// nearest even: `lo` in the low half (cvt.rn.bf16x2.f32 / f16x2).
/// The bits are ztrt's bf16 / f16 conversions' (base/DType.h) for every
/// number; a NaN's payload may differ (the instruction's canonical NaN).
template <typename T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, f16>);
#ifdef ZTRT_CUDA_EMULATOR
  return static_cast<uint32_t>(T(lo).bits) |
         static_cast<uint32_t>(T(hi).bits) << 16;
#else
  uint32_t out;
  if constexpr (std::is_same_v<T, bf16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&out, &v, sizeof(out));
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    std::memcpy(&out, &v, sizeof(out));
  }
  return out;
#endif
}

/// The element of a register: `half` 0 the low one.
template <typename T> __device__ inline float unpack(uint32_t reg, int half) {
  return static_cast<float>(
      T::fromBits(static_cast<uint16_t>(half ? reg >> 16 : reg & 0xffffu)));
}

#ifdef ZTRT_CUDA_EMULATOR

} // namespace ztrt::cuda::tc

#include "backends/cuda/emu/Emu.h"

namespace ztrt::cuda::tc {

namespace emu {

// What each lane gathers, per instruction; the emulator's warp exchange
// faults when lanes of a warp meet with different sizes, so the sizes tell
// the instructions apart (lanes that diverge between an mma and an
// ldmatrix, or between ldmatrix and ldmatrix.trans).
constexpr int kLdmatrixBytes = 16, kLdmatrixTransBytes = 17;

/// The warp's 16 x 16 A, 16 x 8 B and 16 x 8 C from each lane's registers.
template <typename T> struct Operands {
  float a[16][16], b[16][8], c[16][8];
};

struct LaneRegisters {
  FragA a;
  FragB b;
  FragC c;
};

template <typename T>
inline void assemble(Operands<T> &op, const unsigned char *all) {
  for (int lane = 0; lane < kWarp; ++lane) {
    LaneRegisters in;
    std::memcpy(&in, all + lane * ::ztrt::cudaemu::kGatherBytes, sizeof(in));
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 2; ++e) {
      op.a[g][2 * t + e] = unpack<T>(in.a.r[0], e);
      op.a[g + 8][2 * t + e] = unpack<T>(in.a.r[1], e);
      op.a[g][2 * t + 8 + e] = unpack<T>(in.a.r[2], e);
      op.a[g + 8][2 * t + 8 + e] = unpack<T>(in.a.r[3], e);
      op.b[2 * t + e][g] = unpack<T>(in.b.r[0], e);
      op.b[2 * t + 8 + e][g] = unpack<T>(in.b.r[1], e);
      op.c[g][2 * t + e] = in.c.r[e];
      op.c[g + 8][2 * t + e] = in.c.r[2 + e];
    }
  }
}

/// ldmatrix: `matrices` 8 x 8 matrices of 16-bit elements from the row
/// addresses of lanes 0 .. 8 matrices - 1.
inline void loadMatrices(uint32_t *r, int matrices, bool trans,
                         const void *row) {
  for (int m = 0; m < matrices; ++m)
    r[m] = 0;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (lane < 8 * matrices && reinterpret_cast<uintptr_t>(row) % 16 != 0)
    ::ztrt::cudaemu::fault("ldmatrix: lane %d's row address %p is not "
                           "16-byte aligned",
                           lane, row);
  // Each lane contributes its row's 16 bytes, read while every lane is at
  // the instruction (a lane that runs ahead and rewrites the rows then
  // cannot change what a lagging lane gets, as on a GPU where the load is
  // the warp's).
  unsigned char mine[kLdmatrixTransBytes] = {}; // (16 bytes of data)
  if (lane < 8 * matrices)
    std::memcpy(mine, row, 16);
  const unsigned char *all = ::ztrt::cudaemu::warpGather(
      mine, trans ? kLdmatrixTransBytes : kLdmatrixBytes);
  if (!all)
    return;
  const int g = lane / 4, t = lane % 4;
  auto element = [&](int matrix, int i, int j) {
    uint16_t v;
    std::memcpy(&v,
                all + (8 * matrix + i) * ::ztrt::cudaemu::kGatherBytes + 2 * j,
                sizeof(v));
    return static_cast<uint32_t>(v);
  };
  for (int m = 0; m < matrices; ++m)
    r[m] = trans ? element(m, 2 * t, g) | element(m, 2 * t + 1, g) << 16
                 : element(m, g, 2 * t) | element(m, g, 2 * t + 1) << 16;
}

} // namespace emu

/// d = a b + c (mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32): every lane
/// of the warp, with its own registers.
template <typename T>
__device__ inline void mma(FragC &d, const FragA &a, const FragB &b,
                           const FragC &c) {
  static_assert(sizeof(emu::LaneRegisters) <= ::ztrt::cudaemu::kGatherBytes);
  const emu::LaneRegisters mine{a, b, c};
  const unsigned char *all =
      ::ztrt::cudaemu::warpGather(&mine, sizeof(mine));
  d = FragC{};
  if (!all)
    return;
  emu::Operands<T> op;
  emu::assemble<T>(op, all);
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int i = g + (e / 2) * 8, j = 2 * t + e % 2;
    float acc = op.c[i][j];
    for (int k = 0; k < 16; ++k)
      acc += op.a[i][k] * op.b[k][j];
    d.r[e] = acc;
  }
}

/// ldmatrix.sync.aligned.m8n8.x4.shared.b16 (and .trans): this lane's row
/// address is `row`.
__device__ inline void ldmatrixX4(uint32_t (&r)[4], const void *row) {
  emu::loadMatrices(r, 4, false, row);
}
__device__ inline void ldmatrixX4Trans(uint32_t (&r)[4], const void *row) {
  emu::loadMatrices(r, 4, true, row);
}
/// .x2: the addresses of lanes 0..15 are used (every lane passes one).
__device__ inline void ldmatrixX2(uint32_t (&r)[2], const void *row) {
  emu::loadMatrices(r, 2, false, row);
}
__device__ inline void ldmatrixX2Trans(uint32_t (&r)[2], const void *row) {
  emu::loadMatrices(r, 2, true, row);
}

#else // nvcc

template <typename T>
__device__ __forceinline__ void mma(FragC &d, const FragA &a, const FragB &b,
                                    const FragC &c) {
  if constexpr (std::is_same_v<T, bf16>)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=f"(d.r[0]), "=f"(d.r[1]), "=f"(d.r[2]), "=f"(d.r[3])
                 : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]),
                   "r"(b.r[0]), "r"(b.r[1]), "f"(c.r[0]), "f"(c.r[1]),
                   "f"(c.r[2]), "f"(c.r[3]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=f"(d.r[0]), "=f"(d.r[1]), "=f"(d.r[2]), "=f"(d.r[3])
                 : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]),
                   "r"(b.r[0]), "r"(b.r[1]), "f"(c.r[0]), "f"(c.r[1]),
                   "f"(c.r[2]), "f"(c.r[3]));
}

__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(sharedAddress(row)));
}
__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4],
                                                const void *row) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, "
      "[%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(sharedAddress(row)));
}
__device__ __forceinline__ void ldmatrixX2(uint32_t (&r)[2], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(sharedAddress(row)));
}
__device__ __forceinline__ void ldmatrixX2Trans(uint32_t (&r)[2],
                                                const void *row) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
      : "=r"(r[0]), "=r"(r[1])
      : "r"(sharedAddress(row)));
}

#endif

} // namespace ztrt::cuda::tc

#endif // ZTRT_BACKENDS_CUDA_TENSORCORE_CUH
