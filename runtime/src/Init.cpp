//===- Init.cpp - Counter-based deterministic random numbers --------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "src/Init.h"

#include <cmath>
#include <cstring>
#include <string>

namespace ztrt {
namespace rng {

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001B3ull;
  }
  return hash;
}

uint64_t streamKey(uint64_t seed, std::string_view tag) {
  // Adding kGolden before mixing keeps seed 0 away from mix64's fixed point 0.
  return mix64(fnv1a64(tag) ^ mix64(seed + kGolden));
}

double uniform24(uint64_t key, uint64_t counter) {
  return static_cast<double>(bits24(key, counter)) * 0x1p-24;
}

double normal(uint64_t key, uint64_t index) {
  // u1 in (0, 1] so that the log is finite; 53 bits each.
  double u1 = static_cast<double>((draw(key, 2 * index) >> 11) + 1) * 0x1p-53;
  double u2 = static_cast<double>(draw(key, 2 * index + 1) >> 11) * 0x1p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint64_t below(uint64_t key, uint64_t counter, uint64_t bound) {
  return static_cast<uint64_t>(
      (static_cast<unsigned __int128>(draw(key, counter)) * bound) >> 64);
}

} // namespace rng

void initParameter(const ParamSpec &spec, uint64_t seed, int64_t begin,
                   int64_t end, void *dst) {
  int64_t n = end - begin;
  if (spec.type == ElemType::I32) {
    int32_t value = spec.init == InitKind::Ones ? 1 : 0;
    int32_t *out = static_cast<int32_t *>(dst);
    for (int64_t i = 0; i < n; ++i)
      out[i] = value;
    return;
  }
  float *out = static_cast<float *>(dst);
  uint64_t key = rng::streamKey(seed, "param/" + spec.name);
  switch (spec.init) {
  case InitKind::Zeros:
  case InitKind::Ones:
    for (int64_t i = 0; i < n; ++i)
      out[i] = spec.init == InitKind::Ones ? 1.0f : 0.0f;
    return;
  case InitKind::Normal:
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(rng::normal(key, begin + i) * spec.scale);
    return;
  case InitKind::Uniform:
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>((2.0 * rng::uniform24(key, begin + i) - 1.0) *
                                  spec.scale);
    return;
  case InitKind::Causal: // buffers only: the descriptor parser refuses it
    break;
  }
}

void initBuffer(const BufferSpec &spec, uint64_t seed, void *dst) {
  const int64_t n = spec.numel;
  const uint64_t key = rng::streamKey(seed, "buffer/" + spec.name);
  const int64_t cols = spec.shape.empty() ? 1 : spec.shape.back();
  const int64_t rows =
      spec.shape.size() < 2 ? 1 : spec.shape[spec.shape.size() - 2];
  auto value = [&](int64_t i) -> double {
    switch (spec.init) {
    case InitKind::Zeros:
      return 0.0;
    case InitKind::Ones:
      return 1.0;
    case InitKind::Normal:
      return rng::normal(key, i) * spec.scale;
    case InitKind::Uniform:
      return (2.0 * rng::uniform24(key, i) - 1.0) * spec.scale;
    case InitKind::Causal:
      return (i % cols) > (i / cols) % rows ? 1.0 : 0.0;
    }
    return 0.0;
  };
  if (spec.type == ElemType::I32) {
    auto *out = static_cast<int32_t *>(dst);
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<int32_t>(value(i));
  } else {
    auto *out = static_cast<float *>(dst);
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(value(i));
  }
}

void initParameterStorage(const ParamSpec &spec, uint64_t seed, int64_t rank,
                          void *dst) {
  StorageSlice slice = spec.slice(rank);
  initParameter(spec, seed, slice.begin, slice.begin + slice.count, dst);
  // Padding is zero whatever the init kind: the compiler relies on it (zero
  // gradients there make every optimizer update of the padding 0).
  std::memset(static_cast<char *>(dst) + slice.count * spec.elemBytes(), 0,
              static_cast<size_t>((spec.storeElems - slice.count) *
                                  spec.elemBytes()));
}

} // namespace ztrt
