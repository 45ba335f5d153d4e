//===- DType.h - Element types of tensors the runtime computes on -*- C++ -*-=//
//
// Part of ztrain's runtime. The element type is data: every kernel and
// collective of ztrt_abi.def takes a ztrt_dtype argument, and the backends
// instantiate each kernel once per type from one template (dispatch()).
//
// bf16 and f16 are storage types. Kernels load them into float, compute in
// float (double where the f32 kernel already accumulates in double), and
// round once when they store a result, so a kernel's bf16 / f16 result is
// the f32 kernel's result on the same (exactly widened) inputs, rounded to
// the storage type: the property runtime/tests/DTypeKernelTest.cpp checks
// bit for bit.
//
// The conversions are pure integer and float arithmetic, the same on the
// host and on a CUDA device (ZTRT_HD), round to nearest even, keep
// infinities, and turn NaN into a quiet NaN of the same sign.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BASE_DTYPE_H
#define ZTRT_BASE_DTYPE_H

#include "ztrt.h"

#include "base/HostDevice.h"

#include <cstdint>
#include <cstring>
#include <utility>

// A translation unit compiled for another instruction set (the AVX-512
// kernels, backends/cpu/IsaKernelsAvx512.cpp) defines ZTRT_DTYPE_INTERNAL: it gets
// its own copy of everything here in an anonymous namespace, so no inline
// conversion it compiles can stand in for the baseline build's.
#ifdef ZTRT_DTYPE_INTERNAL
#define ZTRT_DTYPE_NS_BEGIN namespace {
#define ZTRT_DTYPE_NS_END }
#else
#define ZTRT_DTYPE_NS_BEGIN
#define ZTRT_DTYPE_NS_END
#endif

namespace ztrt {
ZTRT_DTYPE_NS_BEGIN

enum class DType : int32_t {
  F32 = ZTRT_F32,
  BF16 = ZTRT_BF16,
  F16 = ZTRT_F16,
};

/// Bytes of one element.
constexpr int64_t elementBytes(DType type) {
  return type == DType::F32 ? 4 : 2;
}

#ifndef ZTRT_DTYPE_INTERNAL // (defined in DType.cpp, for the baseline build)
/// "f32", "bf16", "f16": the names of the descriptor and of MLIR.
const char *dtypeName(DType type);

/// The DType of a ztrt_dtype argument, or false when `code` names none.
bool dtypeFromCode(int32_t code, DType *type);
#endif

namespace detail {
ZTRT_HD inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
ZTRT_HD inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
} // namespace detail

/// bfloat16: the upper half of a float.
struct bf16 {
  uint16_t bits = 0;

  bf16() = default;
  ZTRT_HD explicit bf16(float f) {
    uint32_t u = detail::floatBits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) { // NaN: keep sign, force quiet.
      bits = static_cast<uint16_t>((u >> 16) | 0x40u);
      return;
    }
    // Round to nearest, ties to even; overflow rounds to infinity.
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<uint16_t>(u >> 16);
  }
  ZTRT_HD explicit operator float() const {
    return detail::bitsFloat(static_cast<uint32_t>(bits) << 16);
  }
  static ZTRT_HD bf16 fromBits(uint16_t b) {
    bf16 v;
    v.bits = b;
    return v;
  }
};

/// IEEE binary16.
struct f16 {
  uint16_t bits = 0;

  f16() = default;
  ZTRT_HD explicit f16(float value) {
    // F. Giesen's float_to_half_fast3_rtne: exact round to nearest even,
    // subnormals included (relies on float addition rounding to nearest,
    // without flushing subnormals: true on the host and in CUDA's default
    // mode).
    uint32_t u = detail::floatBits(value);
    const uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint32_t out;
    if (u >= (127u + 16u) << 23) { // >= 65536 (or inf / NaN)
      out = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
    } else if (u < (113u << 23)) { // result is subnormal or zero
      const uint32_t magicBits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
      float f = detail::bitsFloat(u) + detail::bitsFloat(magicBits);
      out = detail::floatBits(f) - magicBits;
    } else {
      const uint32_t odd = (u >> 13) & 1u;
      u += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu;
      u += odd;
      out = u >> 13;
    }
    bits = static_cast<uint16_t>(out | (sign >> 16));
  }
  ZTRT_HD explicit operator float() const {
    const uint32_t shiftedExp = 0x7c00u << 13;
    uint32_t u = (static_cast<uint32_t>(bits) & 0x7fffu) << 13;
    const uint32_t exp = shiftedExp & u;
    u += (127u - 15u) << 23;
    if (exp == shiftedExp) { // inf / NaN
      u += (128u - 16u) << 23;
    } else if (exp == 0) { // zero / subnormal: renormalize
      u += 1u << 23;
      u = detail::floatBits(detail::bitsFloat(u) - detail::bitsFloat(113u << 23));
    }
    u |= (static_cast<uint32_t>(bits) & 0x8000u) << 16;
    return detail::bitsFloat(u);
  }
  static ZTRT_HD f16 fromBits(uint16_t b) {
    f16 v;
    v.bits = b;
    return v;
  }
};

static_assert(sizeof(bf16) == 2 && sizeof(f16) == 2, "storage types");

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> {
  static constexpr DType value = DType::F32;
};
template <> struct DTypeOf<bf16> {
  static constexpr DType value = DType::BF16;
};
template <> struct DTypeOf<f16> {
  static constexpr DType value = DType::F16;
};

/// Calls fn(T{}) with T the C++ type of `type` (float, bf16, f16): the one
/// place a kernel written over T is instantiated for every element type.
template <typename Fn> decltype(auto) dispatch(DType type, Fn &&fn) {
  switch (type) {
  case DType::BF16:
    return std::forward<Fn>(fn)(bf16{});
  case DType::F16:
    return std::forward<Fn>(fn)(f16{});
  case DType::F32:
    break;
  }
  return std::forward<Fn>(fn)(float{});
}

ZTRT_DTYPE_NS_END
} // namespace ztrt

#endif // ZTRT_BASE_DTYPE_H
