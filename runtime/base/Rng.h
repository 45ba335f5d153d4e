//===- Rng.h - The counter-based generator, host and device -----*- C++ -*-===//
//
// Part of ztrain's runtime.
//
// The core of the runtime's random numbers (step/Init.h): splitmix64's output
// function applied to `key + (counter + 1) * golden`. Pure functions of
// (key, counter), inline and ZTRT_HD so that the cuda backend's dropout
// kernel draws exactly the bits the cpu backend does. The algorithm is
// specified in docs/runtime.md; changing it changes every initial weight and
// every dropout mask.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BASE_RNG_H
#define ZTRT_BASE_RNG_H

#include "base/DType.h" // ZTRT_HD

#include <cstdint>

namespace ztrt {
namespace rng {

/// 2^64 / phi, splitmix64's increment.
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

/// The splitmix64 output finalizer.
ZTRT_HD inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Output number `counter` (0-based) of splitmix64 started at state `key`.
ZTRT_HD inline uint64_t draw(uint64_t key, uint64_t counter) {
  return mix64(key + (counter + 1) * kGolden);
}

/// The top 24 bits of draw(key, counter): uniform24 (step/Init.h) times 2^24.
ZTRT_HD inline uint32_t bits24(uint64_t key, uint64_t counter) {
  return static_cast<uint32_t>(draw(key, counter) >> 40);
}

} // namespace rng
} // namespace ztrt

#endif // ZTRT_BASE_RNG_H
