//===- Init.cpp - Counter-based deterministic random numbers --------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "step/Init.h"

#include "base/DType.h"
#include "io/Safetensors.h"
#include "base/Support.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

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
  if (spec.type != ElemType::F32) {
    // bf16 / f16: the f32 values an f32 parameter of this name and shape
    // gets (the same stream), each rounded once to the parameter's type.
    ParamSpec wide = spec;
    wide.type = ElemType::F32;
    std::vector<float> values(static_cast<size_t>(n));
    initParameter(wide, seed, begin, end, values.data());
    convertElements(ElemType::F32, values.data(), spec.type, dst, n);
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
  case InitKind::Causal:   // buffers only: the descriptor parser refuses it
  case InitKind::External: // the same
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
    case InitKind::External: // the driver refuses it without --init
      return 0.0;
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

void initMasterStorage(const StateSpec &master, const ParamSpec &param,
                       uint64_t seed, int64_t rank, void *dst) {
  // The master is laid out as its own record says (its storage may differ
  // from the parameter's: ZeRO-1 shards states, not parameters) and holds
  // the f32 values of the parameter's stream.
  ParamSpec wide = param;
  static_cast<StoredTensorSpec &>(wide) = master;
  wide.name = param.name;
  wide.type = ElemType::F32;
  initParameterStorage(wide, seed, rank, dst);
}

std::string loadInitTensor(const ParamSpec &param, const StateSpec *master,
                           const SafetensorsTensor &tensor, int64_t rank,
                           void *paramDst, void *masterDst) {
  ElemType from = ElemType::F32;
  const bool known = elemTypeFromSafetensorsName(tensor.dtype, &from);
  const char *own = elemTypeSafetensorsName(param.type);
  // Accepted: any float dtype (F32, BF16, F16) for a float parameter, so a
  // Hugging Face checkpoint stored in bf16 initializes an f32 model. The
  // parameter takes the values converted to its type; its f32 master, if
  // it has one, takes them widened (exact). A conversion that changes a
  // value is refused where no master holds the file's values: the model
  // would start from other weights than the file's.
  if (!known || (from != param.type &&
                 (!isFloatType(from) || !isFloatType(param.type))))
    return format("tensor '%s' has dtype %s, the model expects %s", param.name.c_str(),
                  tensor.dtype.c_str(),
                  isFloatType(param.type) ? "F32, BF16 or F16" : own);
  if (tensor.shape != param.shape)
    return format("tensor '%s' has shape %s, the model expects %s",
                  param.name.c_str(), formatShape(tensor.shape).c_str(),
                  formatShape(param.shape).c_str());
  const int64_t eb = param.elemBytes();
  const int64_t fromBytes = elemTypeBytes(from);
  StorageSlice slice = param.slice(rank);
  std::memset(paramDst, 0, static_cast<size_t>(param.storeBytes));
  if (from == param.type) {
    std::memcpy(paramDst, tensor.data + slice.begin * eb,
                static_cast<size_t>(slice.count * eb));
  } else {
    // Widening to f32 is exact; anything else is checked on every value,
    // not just this rank's slice, so that all ranks agree.
    // A frozen parameter is never updated: its values are the file's
    // rounded, which is what every use computes with (autocast's cast).
    if (!master && !param.frozen && param.type != ElemType::F32) {
      std::vector<char> converted(static_cast<size_t>(param.bytes));
      int64_t lost = convertElements(from, tensor.data, param.type,
                                     converted.data(), param.numel);
      if (lost > 0)
        return format("tensor '%s' is %s but parameter '%s' is %s and has "
                      "no f32 master: converting it would lose precision "
                      "(%lld of %lld values are not exactly representable "
                      "in %s; store it as %s)",
                      param.name.c_str(), tensor.dtype.c_str(),
                      param.name.c_str(), elemTypeName(param.type),
                      static_cast<long long>(lost),
                      static_cast<long long>(param.numel),
                      elemTypeName(param.type), own);
    }
    // f16's range is f32's up to 65504 (65520 and beyond round to
    // infinity): a finite value there would be an infinite parameter,
    // master or not. Every value, so that all ranks agree.
    if (param.type == ElemType::F16) {
      for (int64_t i = 0; i < param.numel; ++i) {
        float v;
        convertElements(from, tensor.data + i * fromBytes, ElemType::F32, &v,
                        1);
        if (std::isfinite(v) && std::fabs(v) >= 65520.0f)
          return format("tensor '%s' element %lld is %g, beyond f16's range "
                        "(65504): parameter '%s' is f16",
                        param.name.c_str(), static_cast<long long>(i),
                        static_cast<double>(v), param.name.c_str());
      }
    }
    convertElements(from, tensor.data + slice.begin * fromBytes, param.type,
                    paramDst, slice.count);
  }
  if (!master)
    return "";
  StorageSlice mslice = master->slice(rank);
  std::memset(masterDst, 0, static_cast<size_t>(master->storeBytes));
  // Widening bf16 / f16 to f32 is exact; f32 is copied.
  convertElements(from, tensor.data + mslice.begin * fromBytes,
                  ElemType::F32, masterDst, mslice.count);
  return "";
}

} // namespace ztrt
