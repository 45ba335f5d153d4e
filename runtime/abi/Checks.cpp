//===- Checks.cpp - The entry points' common checks -----------------------===//
//
// Part of ztrain's runtime. Each entry point checks what can be checked
// without touching tensor data (counts, ranks, permutations, masks), names
// itself in any error, and dispatches to the context's backend; collectives
// go through the context's queue (comm/CommQueue.h), which runs them on the
// communication thread. Kernel calls are recorded in the trace when --trace
// is on (a null-pointer test otherwise). Definitions are inside extern "C"
// with the exact types of ztrt.h, so a signature that drifts from
// ztrt_abi.def is a compile error rather than a silent overload.
//
//===----------------------------------------------------------------------===//

#include "abi/Checks.h"

#include "base/Support.h"

namespace ztrt::abi {

// Ranks beyond this are not tensors the compiler emits.
constexpr int64_t kMaxRank = 16;

Backend &backendOf(ztrt_ctx *ctx, const char *op) {
  if (!ctx)
    fatal("%s: null runtime context", op);
  return ctx->backend();
}

void checkCount(const char *op, const char *what, int64_t value) {
  if (value < 0)
    fatal("%s: negative %s %lld", op, what, static_cast<long long>(value));
}

void checkRank(const char *op, int64_t rank, const void *shape) {
  if (rank < 0 || rank > kMaxRank)
    fatal("%s: rank %lld outside [0, %lld]", op, static_cast<long long>(rank),
          static_cast<long long>(kMaxRank));
  if (rank > 0 && !shape)
    fatal("%s: null shape", op);
  const int64_t *dims = static_cast<const int64_t *>(shape);
  for (int64_t d = 0; d < rank; ++d)
    if (dims[d] < 0)
      fatal("%s: negative dimension %lld at dim %lld", op,
            static_cast<long long>(dims[d]), static_cast<long long>(d));
}

DType checkDType(const char *op, int32_t code) {
  DType type;
  if (!dtypeFromCode(code, &type))
    fatal("%s: unknown element type code %d (ztrt_dtype: %d f32, %d bf16, "
          "%d f16)",
          op, code, ZTRT_F32, ZTRT_BF16, ZTRT_F16);
  return type;
}

/// The DType of a ztrt_dtype argument other than the call's dtype (cast's
/// `to`, the master updates' `param_dtype`), named in the error.
DType checkDType(const char *op, const char *argument, int32_t code) {
  DType type;
  if (!dtypeFromCode(code, &type))
    fatal("%s: unknown element type code %d for %s (ztrt_dtype: %d f32, "
          "%d bf16, %d f16)",
          op, code, argument, ZTRT_F32, ZTRT_BF16, ZTRT_F16);
  return type;
}

/// Whether [a, a + aBytes) and [b, b + bBytes) share a byte.
bool overlaps(const void *a, int64_t aBytes, const void *b, int64_t bBytes) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a),
                  y = reinterpret_cast<uintptr_t>(b);
  return aBytes > 0 && bBytes > 0 && x < y + static_cast<uintptr_t>(bBytes) &&
         y < x + static_cast<uintptr_t>(aBytes);
}

} // namespace ztrt::abi
