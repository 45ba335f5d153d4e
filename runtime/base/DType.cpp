//===- DType.cpp - Element types of tensors the runtime computes on -------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "base/DType.h"

namespace ztrt {

const char *dtypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "f32";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  }
  return "invalid";
}

bool dtypeFromCode(int32_t code, DType *type) {
  switch (code) {
  case ZTRT_F32:
  case ZTRT_BF16:
  case ZTRT_F16:
    *type = static_cast<DType>(code);
    return true;
  }
  return false;
}

} // namespace ztrt
