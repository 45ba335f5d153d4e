//===- Abi.cpp - The ztrt_* entry points ----------------------------------===//
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

#include "ztrt.h"

#include "step/Context.h"
#include "step/Init.h"
#include "base/Support.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

using namespace ztrt;

namespace {

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

void *binding(const char *op, const std::vector<void *> &list, int64_t index,
              const char *kind) {
  if (index < 0 || index >= static_cast<int64_t>(list.size()))
    fatal("%s: %s index %lld out of range [0, %zu)", op, kind,
          static_cast<long long>(index), list.size());
  return list[index];
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

/// A master-weight update writes the master and the parameter element by
/// element, in parallel: a parameter stored over its master would
/// overwrite master elements not yet updated.
void checkMasterApart(const char *op, const void *param, DType paramType,
                      const void *master, int64_t n) {
  if (overlaps(param, n * elementBytes(paramType), master,
               n * elementBytes(DType::F32)))
    fatal("%s: param (%s) overlaps master", op, dtypeName(paramType));
}

/// Whether a row of one set of `rows` rows of `rowBytes` bytes (the i-th at
/// a + i * aStride) intersects a row of the other. Both lists are sorted by
/// address (strides >= 0), so a merge walk decides it in O(rows): a row
/// that ends before the other list's current row cannot meet any later
/// row of that list. Interleaved layouts (a bucket unpacked into its own
/// gaps) are disjoint although their extents overlap.
bool rowsIntersect(uintptr_t a, int64_t aStride, uintptr_t b, int64_t bStride,
                   int64_t rows, int64_t rowBytes) {
  const uintptr_t length = static_cast<uintptr_t>(rowBytes);
  int64_t i = 0, j = 0;
  while (i < rows && j < rows) {
    const uintptr_t x = a + static_cast<uintptr_t>(i * aStride),
                    y = b + static_cast<uintptr_t>(j * bStride);
    if (x < y + length && y < x + length)
      return true;
    if (x < y)
      ++i;
    else
      ++j;
  }
  return false;
}

/// A collective's request, after the checks every collective entry makes.
CollectiveRequest request(const char *op, ztrt_ctx *ctx, int32_t dtype,
                          Collective kind, const void *in, void *out,
                          int64_t elems, int32_t mean) {
  backendOf(ctx, op);
  CollectiveRequest r;
  r.dtype = checkDType(op, dtype);
  checkCount(op, "element count", elems);
  r.kind = kind;
  r.in = in;
  r.out = out;
  r.elems = elems;
  r.mean = mean != 0;
  return r;
}

// --- Generated kernel entry points -------------------------------------------

/// The name of argument `index` in a space-separated list ("a b out n").
std::string argumentName(const char *names, int index) {
  const char *p = names;
  for (int i = 0; i < index && p; ++i) {
    p = std::strchr(p, ' ');
    if (p)
      ++p;
  }
  if (!p)
    return format("argument %d", index + 1);
  const char *end = std::strchr(p, ' ');
  return end ? std::string(p, end) : std::string(p);
}

/// Every int64 argument of a kernel is a size, an index or a stride: >= 0.
template <typename... Args>
void checkSizes(const char *op, const char *names, Args... args) {
  int index = 0;
  auto one = [&](auto value) {
    if constexpr (std::is_same_v<decltype(value), int64_t>)
      if (value < 0)
        fatal("%s: negative %s %lld", op, argumentName(names, index).c_str(),
              static_cast<long long>(value));
    ++index;
  };
  (one(args), ...);
}

/// A kernel's own checks beyond sizes, by its backend method; none unless
/// specialized below.
template <auto Method> struct KernelChecks {
  template <typename... Args> static void check(const char *, Args...) {}
};

template <> struct KernelChecks<&Backend::matmul> {
  static void check(const char *op, const void *, const void *, void *,
                    int64_t batch, int64_t m, int64_t n, int64_t, int32_t,
                    int32_t, int64_t, int64_t, int64_t strideC) {
    // Output matrices that overlap have no defined result (on the cpu the
    // last one written wins; cuBLAS computes them concurrently).
    if (batch > 1 && m > 0 && n > 0 && strideC < m * n)
      fatal("%s: stride_c %lld is less than m * n = %lld with batch %lld "
            "(results would overwrite each other)",
            op, static_cast<long long>(strideC), static_cast<long long>(m * n),
            static_cast<long long>(batch));
  }
};

template <> struct KernelChecks<&Backend::softmax> {
  static void check(const char *op, const void *, void *, int64_t rows,
                    int64_t cols, int32_t causal) {
    if (causal && cols > 0 && rows % cols != 0)
      fatal("%s: causal rows (%lld) must be whole [%lld x %lld] blocks", op,
            static_cast<long long>(rows), static_cast<long long>(cols),
            static_cast<long long>(cols));
  }
};

/// Causal attention needs tq == tk; the scale is finite and positive.
static void checkAttention(const char *op, int64_t heads, int64_t groups,
                           int64_t tq, int64_t tk, int64_t d, int32_t causal,
                           double scale) {
  if (heads <= 0 || tq <= 0 || tk <= 0 || d <= 0)
    fatal("%s: heads, tq, tk and d must be positive, got %lld, %lld, %lld, "
          "%lld",
          op, static_cast<long long>(heads), static_cast<long long>(tq),
          static_cast<long long>(tk), static_cast<long long>(d));
  if (causal && tq != tk)
    fatal("%s: causal attention needs tq == tk, got %lld and %lld", op,
          static_cast<long long>(tq), static_cast<long long>(tk));
  if (!(std::isfinite(scale) && scale > 0.0))
    fatal("%s: scale must be finite and positive, got %g", op, scale);
  if (groups <= 0 || heads % groups != 0)
    fatal("%s: groups %lld must be positive and divide heads %lld", op,
          static_cast<long long>(groups), static_cast<long long>(heads));
}

template <> struct KernelChecks<&Backend::attention> {
  static void check(const char *op, const void *, const void *, const void *,
                    void *, void *, int64_t heads, int64_t groups, int64_t tq,
                    int64_t tk, int64_t d, int32_t causal, double scale) {
    checkAttention(op, heads, groups, tq, tk, d, causal, scale);
  }
};

template <> struct KernelChecks<&Backend::attentionGrad> {
  static void check(const char *op, const void *, const void *, const void *,
                    const void *, const void *, const void *, void *, void *,
                    void *, int64_t heads, int64_t groups, int64_t tq,
                    int64_t tk, int64_t d, int32_t causal, double scale) {
    checkAttention(op, heads, groups, tq, tk, d, causal, scale);
  }
};

template <> struct KernelChecks<&Backend::transpose> {
  static void check(const char *op, const void *, void *, int64_t rank,
                    const void *xShape, const void *perm) {
    checkRank(op, rank, xShape);
    const int64_t *p = static_cast<const int64_t *>(perm);
    if (rank > 0 && !p)
      fatal("%s: null perm", op);
    std::vector<bool> seen(rank, false);
    for (int64_t d = 0; d < rank; ++d) {
      if (p[d] < 0 || p[d] >= rank || seen[p[d]])
        fatal("%s: perm is not a permutation of [0, %lld) (entry %lld is "
              "%lld)",
              op, static_cast<long long>(rank), static_cast<long long>(d),
              static_cast<long long>(p[d]));
      seen[p[d]] = true;
    }
  }
};

template <> struct KernelChecks<&Backend::reduce> {
  static void check(const char *op, const void *, void *, int64_t rank,
                    const void *xShape, const void *mask, int32_t kind) {
    checkRank(op, rank, xShape);
    if (rank > 0 && !mask)
      fatal("%s: null reduce_mask", op);
    if (kind < 0 || kind > 2)
      fatal("%s: unknown kind %d (0 sum, 1 mean, 2 max)", op, kind);
  }
};

template <> struct KernelChecks<&Backend::reduceMaxGrad> {
  static void check(const char *op, const void *, const void *, const void *,
                    void *, int64_t rank, const void *xShape,
                    const void *mask) {
    checkRank(op, rank, xShape);
    if (rank > 0 && !mask)
      fatal("%s: null reduce_mask", op);
  }
};

template <> struct KernelChecks<&Backend::rotaryEmbedding> {
  static void check(const char *op, const void *, void *, int64_t, int64_t,
                    int64_t, int64_t dim, double theta, double factor,
                    double low, double high, double original, int32_t) {
    if (dim % 2 != 0)
      fatal("%s: dim %lld is odd (RoPE rotates pairs)", op,
            static_cast<long long>(dim));
    if (!(theta > 0.0) || !std::isfinite(theta))
      fatal("%s: theta %g is not a positive finite number", op, theta);
    if (factor != 0.0 && (!(factor >= 1.0) || !std::isfinite(factor)))
      fatal("%s: scaling factor %g is neither 0 (none) nor a finite number "
            ">= 1",
            op, factor);
    if (factor != 0.0 &&
        (!(low > 0.0) || !(high > low) || !std::isfinite(high) ||
         !(original > 0.0) || !std::isfinite(original)))
      fatal("%s: llama3 scaling needs 0 < low_freq_factor < high_freq_factor "
            "and original_max_positions > 0 (got %g, %g, %g)",
            op, low, high, original);
  }
};

template <> struct KernelChecks<&Backend::broadcast> {
  static void check(const char *op, const void *, void *, int64_t rank,
                    const void *outShape, const void *mask, double) {
    checkRank(op, rank, outShape);
    if (rank > 0 && !mask)
      fatal("%s: null bcast_mask", op);
  }
};

/// Checks that need the call's dtype as well; none unless specialized.
template <auto Method> struct TypedKernelChecks {
  template <typename... Args> static void check(const char *, DType, Args...) {}
};

template <> struct TypedKernelChecks<&Backend::cast> {
  static void check(const char *op, DType from, const void *x, void *out,
                    int64_t n, int32_t toCode) {
    const DType to = checkDType(op, "to", toCode);
    // Elements are converted in parallel (threads, a device grid): an
    // output of another type that overlaps the input would overwrite
    // elements not yet read. A cast to the same type is a copy, with
    // memmove semantics on every backend.
    if (to != from &&
        overlaps(x, n * elementBytes(from), out, n * elementBytes(to)))
      fatal("%s: out overlaps x (%s to %s); a cast may be in place only when "
            "to is x's dtype",
            op, dtypeName(from), dtypeName(to));
  }
};

/// The body of every generated kernel entry point.
template <auto Method, typename... Args>
void kernelEntry(const char *op, const char *names, ztrt_ctx *ctx,
                 int32_t dtype, Args... args) {
  Backend &backend = backendOf(ctx, op);
  TraceScope trace(ctx->trace(), op);
  const DType type = checkDType(op, dtype);
  checkSizes(op, names, args...);
  KernelChecks<Method>::check(op, args...);
  TypedKernelChecks<Method>::check(op, type, args...);
  (backend.*Method)(type, args...);
}

// Parameter lists p18..p1 for the tags of a kernel entry, and their names.
#define ZTRT_P_(tag, i) ZTRT_T_(tag) p##i
#define ZTRT_PARAMS_1(a) ZTRT_P_(a, 1)
#define ZTRT_PARAMS_2(a, ...) ZTRT_P_(a, 2), ZTRT_PARAMS_1(__VA_ARGS__)
#define ZTRT_PARAMS_3(a, ...) ZTRT_P_(a, 3), ZTRT_PARAMS_2(__VA_ARGS__)
#define ZTRT_PARAMS_4(a, ...) ZTRT_P_(a, 4), ZTRT_PARAMS_3(__VA_ARGS__)
#define ZTRT_PARAMS_5(a, ...) ZTRT_P_(a, 5), ZTRT_PARAMS_4(__VA_ARGS__)
#define ZTRT_PARAMS_6(a, ...) ZTRT_P_(a, 6), ZTRT_PARAMS_5(__VA_ARGS__)
#define ZTRT_PARAMS_7(a, ...) ZTRT_P_(a, 7), ZTRT_PARAMS_6(__VA_ARGS__)
#define ZTRT_PARAMS_8(a, ...) ZTRT_P_(a, 8), ZTRT_PARAMS_7(__VA_ARGS__)
#define ZTRT_PARAMS_9(a, ...) ZTRT_P_(a, 9), ZTRT_PARAMS_8(__VA_ARGS__)
#define ZTRT_PARAMS_10(a, ...) ZTRT_P_(a, 10), ZTRT_PARAMS_9(__VA_ARGS__)
#define ZTRT_PARAMS_11(a, ...) ZTRT_P_(a, 11), ZTRT_PARAMS_10(__VA_ARGS__)
#define ZTRT_PARAMS_12(a, ...) ZTRT_P_(a, 12), ZTRT_PARAMS_11(__VA_ARGS__)
#define ZTRT_PARAMS_13(a, ...) ZTRT_P_(a, 13), ZTRT_PARAMS_12(__VA_ARGS__)
#define ZTRT_PARAMS_14(a, ...) ZTRT_P_(a, 14), ZTRT_PARAMS_13(__VA_ARGS__)
#define ZTRT_PARAMS_15(a, ...) ZTRT_P_(a, 15), ZTRT_PARAMS_14(__VA_ARGS__)
#define ZTRT_PARAMS_16(a, ...) ZTRT_P_(a, 16), ZTRT_PARAMS_15(__VA_ARGS__)
#define ZTRT_PARAMS_17(a, ...) ZTRT_P_(a, 17), ZTRT_PARAMS_16(__VA_ARGS__)
#define ZTRT_PARAMS_18(a, ...) ZTRT_P_(a, 18), ZTRT_PARAMS_17(__VA_ARGS__)
#define ZTRT_PARAMS(...)                                                       \
  ZTRT_CAT2(ZTRT_PARAMS_, ZTRT_NARGS(__VA_ARGS__))(__VA_ARGS__)
#define ZTRT_NAMES_1(a) p1
#define ZTRT_NAMES_2(a, ...) p2, ZTRT_NAMES_1(__VA_ARGS__)
#define ZTRT_NAMES_3(a, ...) p3, ZTRT_NAMES_2(__VA_ARGS__)
#define ZTRT_NAMES_4(a, ...) p4, ZTRT_NAMES_3(__VA_ARGS__)
#define ZTRT_NAMES_5(a, ...) p5, ZTRT_NAMES_4(__VA_ARGS__)
#define ZTRT_NAMES_6(a, ...) p6, ZTRT_NAMES_5(__VA_ARGS__)
#define ZTRT_NAMES_7(a, ...) p7, ZTRT_NAMES_6(__VA_ARGS__)
#define ZTRT_NAMES_8(a, ...) p8, ZTRT_NAMES_7(__VA_ARGS__)
#define ZTRT_NAMES_9(a, ...) p9, ZTRT_NAMES_8(__VA_ARGS__)
#define ZTRT_NAMES_10(a, ...) p10, ZTRT_NAMES_9(__VA_ARGS__)
#define ZTRT_NAMES_11(a, ...) p11, ZTRT_NAMES_10(__VA_ARGS__)
#define ZTRT_NAMES_12(a, ...) p12, ZTRT_NAMES_11(__VA_ARGS__)
#define ZTRT_NAMES_13(a, ...) p13, ZTRT_NAMES_12(__VA_ARGS__)
#define ZTRT_NAMES_14(a, ...) p14, ZTRT_NAMES_13(__VA_ARGS__)
#define ZTRT_NAMES_15(a, ...) p15, ZTRT_NAMES_14(__VA_ARGS__)
#define ZTRT_NAMES_16(a, ...) p16, ZTRT_NAMES_15(__VA_ARGS__)
#define ZTRT_NAMES_17(a, ...) p17, ZTRT_NAMES_16(__VA_ARGS__)
#define ZTRT_NAMES_18(a, ...) p18, ZTRT_NAMES_17(__VA_ARGS__)
#define ZTRT_PARAM_NAMES(...)                                                  \
  ZTRT_CAT2(ZTRT_NAMES_, ZTRT_NARGS(__VA_ARGS__))(__VA_ARGS__)

} // namespace

extern "C" {

void *ztrt_alloc(ztrt_ctx *ctx, int64_t bytes, int32_t category) {
  backendOf(ctx, "alloc");
  return ctx->allocate(bytes, category, "alloc");
}

void ztrt_free(ztrt_ctx *ctx, void *ptr) {
  backendOf(ctx, "free");
  ctx->deallocate(ptr, "free");
}

void *ztrt_arena(ztrt_ctx *ctx, int64_t index, int64_t bytes,
                 int32_t category) {
  backendOf(ctx, "arena");
  if (index < 0 || index > 64)
    fatal("arena: index %lld out of range [0, 64]",
          static_cast<long long>(index));
  size_t i = static_cast<size_t>(index);
  if (i >= ctx->arenas.size())
    ctx->arenas.resize(i + 1, {nullptr, 0});
  auto &[ptr, size] = ctx->arenas[i];
  if (!ptr) {
    ptr = ctx->allocate(bytes, category, "arena");
    size = bytes;
  } else if (size != bytes) {
    fatal("arena: arena %lld was allocated with %lld bytes, now asked for "
          "%lld",
          static_cast<long long>(index), static_cast<long long>(size),
          static_cast<long long>(bytes));
  }
  return ptr;
}

void *ztrt_param(ztrt_ctx *ctx, int64_t index) {
  backendOf(ctx, "param");
  void *ptr = binding("param", ctx->params, index, "parameter");
  if (!ptr)
    fatal("param: parameter %lld lives on nvme: the step reaches it "
          "through its swap buffer (ztrt_swap_in), not ztrt_param",
          static_cast<long long>(index));
  return ptr;
}

void *ztrt_state(ztrt_ctx *ctx, int64_t index) {
  backendOf(ctx, "state");
  void *ptr = binding("state", ctx->states, index, "optimizer state");
  if (!ptr)
    fatal("state: optimizer state %lld lives on nvme: the step reaches it "
          "through its swap buffer (ztrt_swap_in), not ztrt_state",
          static_cast<long long>(index));
  return ptr;
}

/// The swap file and its bytes of nvme-resident tensor `index` of `kind`
/// (fatal otherwise).
static std::pair<int, int64_t> swapFileOf(ztrt_ctx *ctx, const char *op,
                                          int32_t kind, int64_t index,
                                          const void *buffer) {
  if (kind != ZTRT_SWAP_STATE && kind != ZTRT_SWAP_PARAM)
    fatal("%s: unknown swap kind %d (%d: optimizer state, %d: parameter)", op,
          kind, ZTRT_SWAP_STATE, ZTRT_SWAP_PARAM);
  const bool param = kind == ZTRT_SWAP_PARAM;
  const char *what = param ? "parameter" : "optimizer state";
  const size_t count = param ? ctx->params.size() : ctx->states.size();
  if (index < 0 || index >= static_cast<int64_t>(count))
    fatal("%s: %s index %lld out of range [0, %zu)", op, what,
          static_cast<long long>(index), count);
  size_t i = static_cast<size_t>(index);
  const std::vector<int> &files = param ? ctx->paramFiles : ctx->stateFiles;
  if (!ctx->swap || i >= files.size() || files[i] < 0)
    fatal("%s: %s %lld does not live on nvme (its descriptor record has no "
          "`space nvme`)",
          op, what, static_cast<long long>(index));
  // (A device backend's buffers are device memory; their staging copies
  // are checked for alignment by the context.)
  if (!buffer || (ctx->backend().hostResident() &&
                  reinterpret_cast<uintptr_t>(buffer) %
                      ztrt::SwapSpace::kAlignment))
    fatal("%s: the swap buffer %p is not 4096-byte aligned", op, buffer);
  return {files[i], (param ? ctx->paramFileBytes : ctx->stateFileBytes)[i]};
}

/// Starts one swap of tensor `index` of `kind` through `buffer`, counted
/// and remembered for the trace.
static int64_t startSwap(ztrt_ctx *ctx, const char *op, int32_t kind,
                         int64_t index, const void *buffer, bool write,
                         int64_t offset = 0, int64_t chunkBytes = -1) {
  backendOf(ctx, op);
  auto [file, bytes] = swapFileOf(ctx, op, kind, index, buffer);
  if (chunkBytes >= 0) {
    // A chunk: whole blocks from a block boundary, inside the file.
    const int64_t block = ztrt::SwapSpace::kAlignment;
    const int64_t moved = (chunkBytes + block - 1) / block * block;
    if (offset < 0 || offset % block != 0 || chunkBytes <= 0 ||
        offset + moved > bytes)
      fatal("%s: bytes [%lld, %lld) are not whole %lld-byte blocks within "
            "the %lld-byte swap file",
            op, static_cast<long long>(offset),
            static_cast<long long>(offset + chunkBytes),
            static_cast<long long>(block), static_cast<long long>(bytes));
    bytes = moved;
  }
  ++(write ? ctx->offload.writes : ctx->offload.reads);
  (write ? ctx->offload.writeBytes : ctx->offload.readBytes) += bytes;
  auto begin = ztrt::Clock::now();
  int64_t ticket =
      ctx->startSwap(file, const_cast<void *>(buffer), bytes, write, offset);
  ctx->pendingSwaps[ticket] = {begin, index, bytes, write};
  return ticket;
}

int64_t ztrt_swap_in(ztrt_ctx *ctx, int32_t kind, int64_t index,
                     void *buffer) {
  return startSwap(ctx, "swap_in", kind, index, buffer, /*write=*/false);
}

int64_t ztrt_swap_out(ztrt_ctx *ctx, int32_t kind, int64_t index,
                      const void *buffer) {
  return startSwap(ctx, "swap_out", kind, index, buffer, /*write=*/true);
}

int64_t ztrt_swap_in_chunk(ztrt_ctx *ctx, int32_t kind, int64_t index,
                           void *buffer, int64_t offset, int64_t bytes) {
  return startSwap(ctx, "swap_in_chunk", kind, index, buffer,
                   /*write=*/false, offset, bytes);
}

int64_t ztrt_swap_out_chunk(ztrt_ctx *ctx, int32_t kind, int64_t index,
                            const void *buffer, int64_t offset,
                            int64_t bytes) {
  return startSwap(ctx, "swap_out_chunk", kind, index, buffer,
                   /*write=*/true, offset, bytes);
}

void ztrt_swap_wait(ztrt_ctx *ctx, int64_t ticket) {
  backendOf(ctx, "swap_wait");
  if (!ctx->swap)
    fatal("swap_wait: no state lives on nvme in this run");
  auto begin = ztrt::Clock::now();
  ctx->finishSwap(ticket);
  auto end = ztrt::Clock::now();
  ctx->offload.exposedNanos +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(end - begin)
          .count();
  auto it = ctx->pendingSwaps.find(ticket);
  if (it == ctx->pendingSwaps.end())
    return;
  if (ztrt::Trace *trace = ctx->trace()) {
    ztrt::TraceEvent io(ztrt::TraceEvent::Type::Io);
    io.name = it->second.write ? "swap_out" : "swap_in";
    io.begin = it->second.begin;
    io.end = end;
    io.value = ticket;
    io.elems = it->second.state;
    io.bytes = it->second.bytes;
    trace->add(io);
    ztrt::TraceEvent wait(ztrt::TraceEvent::Type::SwapWait);
    wait.begin = begin;
    wait.end = end;
    wait.value = ticket;
    trace->add(wait);
  }
  ctx->pendingSwaps.erase(it);
}

namespace {
/// A copy of `bytes` of device memory `src` into host memory `dst`, on the
/// copy stream behind the op that made the value (Pa+cpu's activations,
/// gradient spills): counted in `counter`, and over the host link on a
/// device backend; traced as `what`.
int64_t copyToHostStart(ztrt_ctx *ctx, const char *op, const char *what,
                        int64_t ztrt::OffloadStats::*counter, const void *src,
                        void *dst, int64_t bytes) {
  Backend &backend = backendOf(ctx, op);
  checkCount(op, "byte count", bytes);
  ctx->offload.*counter += bytes;
  if (!backend.hostResident())
    ctx->offload.deviceToHostBytes += bytes;
  auto begin = ztrt::Clock::now();
  int64_t ready = backend.recordFence();
  int64_t fence = backend.copyToHostOnCopyStream(dst, src, bytes, ready);
  ctx->noteCopy(ready);
  ctx->noteCopyStart(begin, fence, bytes, what);
  return fence;
}
} // namespace

int64_t ztrt_copy_to_host_start(ztrt_ctx *ctx, const void *src, void *dst,
                                int64_t bytes) {
  return copyToHostStart(ctx, "copy_to_host_start", "activation_to_host",
                         &ztrt::OffloadStats::activationsToHost, src, dst,
                         bytes);
}

int64_t ztrt_spill_gradient_start(ztrt_ctx *ctx, const void *src, void *dst,
                                  int64_t bytes) {
  return copyToHostStart(ctx, "spill_gradient_start", "gradient_to_host",
                         &ztrt::OffloadStats::gradientsToHost, src, dst,
                         bytes);
}

int64_t ztrt_copy_from_host_start(ztrt_ctx *ctx, const void *src, void *dst,
                                  int64_t bytes) {
  Backend &backend = backendOf(ctx, "copy_from_host_start");
  checkCount("copy_from_host_start", "byte count", bytes);
  ctx->offload.activationsFromHost += bytes;
  if (!backend.hostResident())
    ctx->offload.hostToDeviceBytes += bytes;
  // On the copy stream, once the kernels issued so far (the destination
  // buffer's earlier tenants) are done.
  auto begin = ztrt::Clock::now();
  int64_t free = backend.recordFence();
  int64_t fence = backend.copyFromHostOnCopyStream(dst, src, bytes, free);
  ctx->noteCopy(free);
  ctx->noteCopyStart(begin, fence, bytes, "activation_from_host");
  return fence;
}

void ztrt_copy_wait(ztrt_ctx *ctx, int64_t ticket) {
  Backend &backend = backendOf(ctx, "copy_wait");
  // The kernels issued from here on (the reloaded value's readers, or the
  // offloaded buffer's next tenant) wait for the copy on the device.
  backend.waitFenceOnDevice(ticket);
  ctx->noteCopy(ticket);
  // The trace's I/O track (device backends; a host backend's copies were
  // recorded at their start): the copy ran between its start and this
  // wait (it may still run after it: the kernels issued next wait for it
  // on the device).
  auto it = ctx->pendingCopies.find(ticket);
  if (it == ctx->pendingCopies.end() || it->second.empty())
    return;
  if (ztrt::Trace *trace = ctx->trace()) {
    const ztrt_ctx::PendingCopy &copy = it->second.front();
    ztrt::TraceEvent io(ztrt::TraceEvent::Type::Io);
    io.name = copy.name;
    io.begin = copy.begin;
    io.end = ztrt::Clock::now();
    io.value = ticket;
    io.elems = -1;
    io.bytes = copy.bytes;
    trace->add(io);
  }
  it->second.erase(it->second.begin());
  if (it->second.empty())
    ctx->pendingCopies.erase(it);
}

void *ztrt_grad(ztrt_ctx *ctx, int64_t index) {
  backendOf(ctx, "grad");
  void *ptr = binding("grad", ctx->grads, index, "gradient");
  if (!ptr)
    fatal("grad: the gradient of parameter %lld has no persistent buffer "
          "(its descriptor record has 0 elements: the step keeps it in its "
          "arena)",
          static_cast<long long>(index));
  return ptr;
}

void *ztrt_buffer(ztrt_ctx *ctx, int64_t index) {
  backendOf(ctx, "buffer");
  return binding("buffer", ctx->buffers, index, "buffer");
}

void *ztrt_input(ztrt_ctx *ctx, int64_t index) {
  backendOf(ctx, "input");
  return binding("input", ctx->inputs, index, "input");
}

void ztrt_set_loss(ztrt_ctx *ctx, const void *loss) {
  Backend &backend = backendOf(ctx, "set_loss");
  if (!loss)
    fatal("set_loss: null loss buffer");
  // The driver reads the loss after the step's synchronize(); a device
  // backend need not stall its stream in the middle of the step for it.
  backend.copyToHostAtSync(&ctx->loss, loss, sizeof(ctx->loss));
  ctx->lossSet = true;
}

void ztrt_copy(ztrt_ctx *ctx, const void *src, void *dst, int64_t bytes) {
  Backend &backend = backendOf(ctx, "copy");
  TraceScope trace(ctx->trace(), "copy");
  checkCount("copy", "byte count", bytes);
  backend.copy(src, dst, bytes);
}

void ztrt_copy_2d(ztrt_ctx *ctx, const void *src, void *dst, int64_t rows,
                  int64_t row_bytes, int64_t src_stride, int64_t dst_stride) {
  Backend &backend = backendOf(ctx, "copy_2d");
  TraceScope trace(ctx->trace(), "copy_2d");
  checkCount("copy_2d", "row count", rows);
  checkCount("copy_2d", "row size", row_bytes);
  checkCount("copy_2d", "src_stride", src_stride);
  checkCount("copy_2d", "dst_stride", dst_stride);
  if (rows == 0 || row_bytes == 0)
    return;
  if (rows > 1 && dst_stride < row_bytes)
    fatal("copy_2d: dst_stride %lld is less than row_bytes %lld (rows would "
          "overwrite each other)",
          static_cast<long long>(dst_stride),
          static_cast<long long>(row_bytes));
  int64_t srcExtent, dstExtent;
  if (__builtin_mul_overflow(rows - 1, src_stride, &srcExtent) ||
      __builtin_add_overflow(srcExtent, row_bytes, &srcExtent) ||
      __builtin_mul_overflow(rows - 1, dst_stride, &dstExtent) ||
      __builtin_add_overflow(dstExtent, row_bytes, &dstExtent))
    fatal("copy_2d: %lld rows of stride %lld / %lld bytes overflow int64",
          static_cast<long long>(rows), static_cast<long long>(src_stride),
          static_cast<long long>(dst_stride));
  // No row may be read after another has overwritten it, on any backend
  // (a device copies rows in parallel), so source and destination rows
  // must be disjoint; copying a region onto itself is a no-op.
  if (src == dst && src_stride == dst_stride)
    return;
  const uintptr_t from = reinterpret_cast<uintptr_t>(src),
                  to = reinterpret_cast<uintptr_t>(dst);
  if (from < to + static_cast<uint64_t>(dstExtent) &&
      to < from + static_cast<uint64_t>(srcExtent) &&
      rowsIntersect(from, src_stride, to, dst_stride, rows, row_bytes))
    fatal("copy_2d: source and destination rows overlap");
  backend.copy2d(src, dst, rows, row_bytes, src_stride, dst_stride);
}

// Every ZTRT_KERNEL entry of ztrt_abi.def, generated: ztrt_<name>(ctx,
// dtype, p1, ..., pN) -> kernelEntry<&Backend::Method>(...).
#define ZTRT_FN(...)
#define ZTRT_KERNEL(name, method, names, ...)                                  \
  void ztrt_##name(ztrt_ctx *ctx, int32_t dtype,                              \
                   ZTRT_PARAMS(__VA_ARGS__)) {                                 \
    kernelEntry<&Backend::method>(#name, names, ctx, dtype,                   \
                                  ZTRT_PARAM_NAMES(__VA_ARGS__));              \
  }
#include "ztrt_abi.def"
#undef ZTRT_KERNEL
#undef ZTRT_FN

namespace {

/// Loss scaling needs master weights: the plain updates refuse a model that
/// scales its loss (the compiler never emits that).
void requireNoLossScale(ztrt_ctx *ctx, const char *op) {
  if (ctx->scaler)
    fatal("%s: the model scales its loss (descriptor loss_scale) but "
          "updates without an f32 master; loss-scaled updates are the "
          "master-weight forms",
          op);
}

/// What the step's updates multiply gradients by besides the loss scale:
/// the clipping coefficient (1 without clipping) times 1 / K of gradient
/// accumulation (1 without); fatal when the model clips but the step has
/// not computed its norm yet, or accumulates but updates before its
/// boundary.
double clipFactor(ztrt_ctx *ctx, const char *op) {
  if (ctx->accumSteps > 0 && !ctx->boundaryAsked)
    fatal("%s: step %lld updates before ztrt_accumulation_boundary (the "
          "model accumulates gradients: the updates follow the last "
          "micro-batch)",
          op, static_cast<long long>(ctx->step));
  if (!ctx->clipMaxNorm)
    return ctx->accumFactor();
  if (!ctx->clipChecked)
    fatal("%s: step %lld updates before ztrt_clip_grad_norm (the model "
          "clips its gradients: the norm must come first)",
          op, static_cast<long long>(ctx->step));
  return ctx->clipCoef * ctx->accumFactor();
}

/// The master-weight updates: false when the step overflowed (loss
/// scaling; the update is skipped), else `factor` = 1 / the step's loss
/// scale x the clipping coefficient (each 1 when absent).
bool scaledUpdate(ztrt_ctx *ctx, const char *op, double &factor) {
  factor = 1.0;
  if (ctx->scaler) {
    if (!ctx->scaleUpdated)
      fatal("%s: step %lld updates before ztrt_update_loss_scale (the model "
            "scales its loss: the overflow check must come first)",
            op, static_cast<long long>(ctx->step));
    if (ctx->skipUpdates)
      return false;
    factor = 1.0 / ctx->stepScale;
  }
  factor *= clipFactor(ctx, op);
  return true;
}

} // namespace

void ztrt_loss_scale(ztrt_ctx *ctx, void *out) {
  Backend &backend = backendOf(ctx, "loss_scale");
  if (!out)
    fatal("loss_scale: null output buffer");
  if (!ctx->scaler)
    fatal("loss_scale: the model's descriptor has no loss_scale record");
  const float scale = static_cast<float>(ctx->stepScale);
  backend.copyFromHost(out, &scale, sizeof(scale));
}

void ztrt_update_loss_scale(ztrt_ctx *ctx, const void *found) {
  Backend &backend = backendOf(ctx, "update_loss_scale");
  TraceScope trace(ctx->trace(), "update_loss_scale");
  if (!found)
    fatal("update_loss_scale: null flag buffer");
  if (!ctx->scaler)
    fatal("update_loss_scale: the model's descriptor has no loss_scale "
          "record");
  if (ctx->step < 1)
    fatal("update_loss_scale: called outside a step (step counter is %lld)",
          static_cast<long long>(ctx->step));
  if (ctx->scaleUpdated)
    fatal("update_loss_scale: called twice in step %lld",
          static_cast<long long>(ctx->step));
  float flag = 0.0f;
  // The decision is the host's: wait for the flag (one float).
  backend.copyToHost(&flag, found, sizeof(flag));
  ctx->scaleUpdated = true;
  // The flag is the same on every rank (the compiler sums it over the
  // ranks), so every rank takes the same branch.
  switch (ctx->scaler->update(flag != 0.0f)) {
  case ztrt::LossScaler::Outcome::Applied:
    ctx->skipUpdates = false;
    break;
  case ztrt::LossScaler::Outcome::Skipped:
    ctx->skipUpdates = true;
    break;
  case ztrt::LossScaler::Outcome::AtMinimum:
    refuse("step %lld: the gradients overflow at the minimum loss scale %g "
           "(--min-loss-scale); stopping. The loss is probably diverging: "
           "lower the learning rate, or train in bf16",
           static_cast<long long>(ctx->step), ctx->scaler->policy().min);
  }
}

double ztrt_lr(ztrt_ctx *ctx, double compiled) {
  backendOf(ctx, "lr");
  if (ctx->step < 1)
    fatal("lr: called outside a step (step counter is %lld)",
          static_cast<long long>(ctx->step));
  const ztrt::LrSchedule &s = ctx->lrSchedule;
  const double base = s.lr.value_or(compiled);
  if (!(base >= 0.0) || !std::isfinite(base))
    fatal("lr: the learning rate %g is not finite and >= 0", base);
  if (s.kind != ztrt::LrSchedule::Kind::Constant && !s.minLrRatio &&
      s.minLr > base)
    refuse("--min-lr %g exceeds the learning rate %g (the %s schedule decays "
           "from the learning rate to --min-lr)",
           s.minLr, base, ztrt::LrSchedule::kindName(s.kind));
  ctx->stepLr = s.at(compiled, ctx->optimizerStep());
  return ctx->stepLr;
}

void ztrt_set_output(ztrt_ctx *ctx, int32_t dtype, const void *ptr,
                     int64_t n) {
  backendOf(ctx, "set_output");
  checkDType("set_output", dtype);
  checkCount("set_output", "element count", n);
  if (!ptr)
    fatal("set_output: null buffer");
  ctx->output = ptr;
  ctx->outputElems = n;
  ctx->outputType = dtype;
  ctx->outputSet = true;
}

double ztrt_hyper(ztrt_ctx *ctx, int32_t id, double compiled) {
  backendOf(ctx, "hyper");
  if (id < 0 || id >= ZTRT_HYPER_COUNT)
    fatal("hyper: unknown hyper-parameter id %d", id);
  const std::optional<double> &given = ctx->hyperOverrides[id];
  const double v = given.value_or(compiled);
  std::string problem = ztrt::hyperProblem(id, v);
  if (!problem.empty())
    fatal("hyper: %s %g %s", ztrt::hyperFlag(id), v, problem.c_str());
  ctx->hyperSeen[id] = v;
  return v;
}

void ztrt_clip_grad_norm(ztrt_ctx *ctx, const void *sum_sq, double max_norm) {
  Backend &backend = backendOf(ctx, "clip_grad_norm");
  if (!sum_sq)
    fatal("clip_grad_norm: null sum buffer");
  if (!ctx->clipMaxNorm)
    fatal("clip_grad_norm: the model's descriptor has no clip_grad_norm "
          "record");
  if (!(max_norm > 0.0) || !std::isfinite(max_norm))
    fatal("clip_grad_norm: max_norm must be finite and positive, got %g",
          max_norm);
  if (ctx->clipChecked)
    fatal("clip_grad_norm: called twice in step %lld",
          static_cast<long long>(ctx->step));
  if (ctx->scaler && !ctx->scaleUpdated)
    fatal("clip_grad_norm: step %lld computes the norm before "
          "ztrt_update_loss_scale",
          static_cast<long long>(ctx->step));
  float sum = 0.0f;
  backend.copyToHost(&sum, sum_sq, sizeof(sum));
  ctx->clipChecked = true;
  // torch.nn.utils.clip_grad_norm_ in float: norm, then
  // clip_coef = max_norm / (norm + 1e-6), clamped to at most 1.
  float norm = std::sqrt(sum);
  if (ctx->scaler)
    norm = static_cast<float>(norm / ctx->stepScale);
  // Accumulated gradients are sums of K micro-batches: the norm is of
  // their mean.
  if (ctx->accumSteps > 0)
    norm = static_cast<float>(norm * ctx->accumFactor());
  ctx->gradNorm = norm;
  ctx->clipCoef = 1.0;
  if (ctx->skipUpdates || !std::isfinite(norm))
    return; // an overflowed step is skipped; a NaN norm is the loss's to say
  const float coef = static_cast<float>(max_norm) / (norm + 1e-6f);
  if (coef < 1.0f)
    ctx->clipCoef = coef;
}

void ztrt_accumulate_grad(ztrt_ctx *ctx, int32_t dtype, void *acc,
                          const void *x, int64_t n) {
  Backend &backend = backendOf(ctx, "accumulate_grad");
  TraceScope trace(ctx->trace(), "accumulate_grad");
  const DType type = checkDType("accumulate_grad", dtype);
  checkCount("accumulate_grad", "element count", n);
  if (!acc || !x)
    fatal("accumulate_grad: null buffer");
  if (ctx->accumSteps < 1)
    fatal("accumulate_grad: the model's descriptor has no grad_accum record");
  if (ctx->step < 1 || ctx->microStep < 1)
    fatal("accumulate_grad: called outside a step (step counter is %lld)",
          static_cast<long long>(ctx->step));
  if (ctx->boundaryAsked)
    fatal("accumulate_grad: step %lld accumulates after "
          "ztrt_accumulation_boundary",
          static_cast<long long>(ctx->step));
  if (ctx->microStep == 1)
    backend.copy(x, acc, n * elementBytes(type));
  else
    backend.add(type, acc, x, acc, n);
}

int32_t ztrt_accumulation_boundary(ztrt_ctx *ctx) {
  backendOf(ctx, "accumulation_boundary");
  if (ctx->accumSteps < 1)
    fatal("accumulation_boundary: the model's descriptor has no grad_accum "
          "record");
  if (ctx->step < 1)
    fatal("accumulation_boundary: called outside a step (step counter is "
          "%lld)",
          static_cast<long long>(ctx->step));
  if (ctx->boundaryAsked)
    fatal("accumulation_boundary: called twice in micro-batch %lld of step "
          "%lld",
          static_cast<long long>(ctx->microStep),
          static_cast<long long>(ctx->step));
  ctx->boundaryAsked = true;
  return ctx->microStep == ctx->accumSteps ? 1 : 0;
}

// A host step's tile of an optimizer state: `at` elements of `type` on
// (null stays null: SGD without momentum).
static void *tileOf(void *state, int64_t at, DType type) {
  return state ? static_cast<char *>(state) + at * ztrt::elementBytes(type)
               : nullptr;
}

void ztrt_sgd_update(ztrt_ctx *ctx, int32_t dtype, void *param,
                     const void *grad, void *momentum_buf, int64_t n, double lr,
                     double momentum, double dampening, double weight_decay,
                     int32_t nesterov) {
  Backend &backend = backendOf(ctx, "sgd_update");
  TraceScope trace(ctx->trace(), "sgd_update");
  const bool announced = ctx->takeUpdateAsync(param, "sgd_update");
  const DType type = checkDType("sgd_update", dtype);
  checkCount("sgd_update", "element count", n);
  if (momentum != 0.0 && !momentum_buf)
    fatal("sgd_update: momentum %g needs a momentum buffer", momentum);
  if (ctx->step < 1)
    fatal("sgd_update: called outside a step (step counter is %lld)",
          static_cast<long long>(ctx->step));
  requireNoLossScale(ctx, "sgd_update");
  SgdHyper hyper{lr, momentum, dampening, weight_decay, nesterov != 0};
  hyper.gradScale = clipFactor(ctx, "sgd_update");
  if (ctx->hostStep(momentum_buf)) {
    // ZeRO-Offload's CPU step: the states are host memory. (The kernel
    // holds its values: it may run on the host step thread.)
    const int64_t t = ctx->step;
    ctx->runHostStep(
        param, type, grad, type, n, false,
        [=](Backend &cpu, void *p, const void *g, int64_t at, int64_t k) {
          cpu.sgdUpdate(type, p, g, tileOf(momentum_buf, at, type), k, hyper,
                        t);
        },
        "sgd_update", announced);
    return;
  }
  backend.sgdUpdate(type, param, grad, momentum_buf, n, hyper, ctx->step);
  ctx->noteStateAccess(param, n * ztrt::elementBytes(type));
  ctx->noteStateAccess(momentum_buf, n * ztrt::elementBytes(type));
}

void ztrt_adam_update(ztrt_ctx *ctx, int32_t dtype, void *param,
                      const void *grad, void *exp_avg, void *exp_avg_sq,
                      int64_t n, double lr, double beta1, double beta2,
                      double eps, double weight_decay, int32_t decoupled) {
  const char *op = decoupled ? "adamw_update" : "adam_update";
  Backend &backend = backendOf(ctx, op);
  TraceScope trace(ctx->trace(), "adam_update");
  const bool announced = ctx->takeUpdateAsync(param, op);
  const DType type = checkDType(op, dtype);
  checkCount(op, "element count", n);
  if (ctx->step < 1)
    fatal("%s: called outside a step (step counter is %lld)", op,
          static_cast<long long>(ctx->step));
  requireNoLossScale(ctx, op);
  AdamHyper hyper{lr, beta1, beta2, eps, weight_decay, decoupled != 0};
  hyper.gradScale = clipFactor(ctx, op);
  if (ctx->hostStep(exp_avg)) {
    const int64_t t = ctx->step;
    ctx->runHostStep(
        param, type, grad, type, n, false,
        [=](Backend &cpu, void *p, const void *g, int64_t at, int64_t k) {
          cpu.adamUpdate(type, p, g, tileOf(exp_avg, at, type),
                         tileOf(exp_avg_sq, at, type), k, hyper, t);
        },
        op, announced);
    return;
  }
  backend.adamUpdate(type, param, grad, exp_avg, exp_avg_sq, n, hyper,
                     ctx->step);
  ctx->noteStateAccess(param, n * ztrt::elementBytes(type));
  ctx->noteStateAccess(exp_avg, n * ztrt::elementBytes(type));
  ctx->noteStateAccess(exp_avg_sq, n * ztrt::elementBytes(type));
}

void ztrt_sgd_update_master(ztrt_ctx *ctx, int32_t dtype, void *param,
                            const void *grad, void *master, void *momentum_buf,
                            int64_t n, double lr, double momentum,
                            double dampening, double weight_decay,
                            int32_t nesterov, int32_t param_dtype) {
  const char *op = "sgd_update_master";
  Backend &backend = backendOf(ctx, op);
  TraceScope trace(ctx->trace(), op);
  const bool announced = ctx->takeUpdateAsync(param, op);
  const DType gradType = checkDType(op, dtype);
  const DType paramType = checkDType(op, "param_dtype", param_dtype);
  checkCount(op, "element count", n);
  checkMasterApart(op, param, paramType, master, n);
  if (momentum != 0.0 && !momentum_buf)
    fatal("%s: momentum %g needs a momentum buffer", op, momentum);
  if (ctx->step < 1)
    fatal("%s: called outside a step (step counter is %lld)", op,
          static_cast<long long>(ctx->step));
  double unscale = 1.0;
  if (!scaledUpdate(ctx, op, unscale))
    return;
  SgdHyper hyper{lr, momentum, dampening, weight_decay, nesterov != 0};
  hyper.gradScale = unscale;
  if (ctx->hostStep(master)) {
    // The parameter is written only: nothing of it goes down.
    const int64_t t = ctx->optimizerStep();
    ctx->runHostStep(
        param, paramType, grad, gradType, n, true,
        [=](Backend &cpu, void *p, const void *g, int64_t at, int64_t k) {
          cpu.sgdUpdateMaster(
              gradType, paramType, p, g,
              static_cast<float *>(tileOf(master, at, DType::F32)),
              static_cast<float *>(tileOf(momentum_buf, at, DType::F32)), k,
              hyper, t);
        },
        op, announced);
    return;
  }
  backend.sgdUpdateMaster(gradType, paramType, param, grad,
                          static_cast<float *>(master),
                          static_cast<float *>(momentum_buf), n, hyper,
                          ctx->optimizerStep());
  // The parameter receives the new master rounded: written, not read.
  ctx->noteHostAccess(param, 0, n * ztrt::elementBytes(paramType));
  ctx->noteStateAccess(master, n * 4);
  ctx->noteStateAccess(momentum_buf, n * 4);
}

void ztrt_adam_update_master(ztrt_ctx *ctx, int32_t dtype, void *param,
                             const void *grad, void *master, void *exp_avg,
                             void *exp_avg_sq, int64_t n, double lr,
                             double beta1, double beta2, double eps,
                             double weight_decay, int32_t decoupled,
                             int32_t param_dtype) {
  const char *op = decoupled ? "adamw_update_master" : "adam_update_master";
  Backend &backend = backendOf(ctx, op);
  TraceScope trace(ctx->trace(), "adam_update_master");
  const bool announced = ctx->takeUpdateAsync(param, op);
  const DType gradType = checkDType(op, dtype);
  const DType paramType = checkDType(op, "param_dtype", param_dtype);
  checkCount(op, "element count", n);
  checkMasterApart(op, param, paramType, master, n);
  if (ctx->step < 1)
    fatal("%s: called outside a step (step counter is %lld)", op,
          static_cast<long long>(ctx->step));
  double unscale = 1.0;
  if (!scaledUpdate(ctx, op, unscale))
    return;
  AdamHyper hyper{lr, beta1, beta2, eps, weight_decay, decoupled != 0};
  hyper.gradScale = unscale;
  if (ctx->hostStep(master)) {
    const int64_t t = ctx->optimizerStep();
    ctx->runHostStep(
        param, paramType, grad, gradType, n, true,
        [=](Backend &cpu, void *p, const void *g, int64_t at, int64_t k) {
          cpu.adamUpdateMaster(
              gradType, paramType, p, g,
              static_cast<float *>(tileOf(master, at, DType::F32)),
              static_cast<float *>(tileOf(exp_avg, at, DType::F32)),
              static_cast<float *>(tileOf(exp_avg_sq, at, DType::F32)), k,
              hyper, t);
        },
        op, announced);
    return;
  }
  backend.adamUpdateMaster(gradType, paramType, param, grad,
                           static_cast<float *>(master),
                           static_cast<float *>(exp_avg),
                           static_cast<float *>(exp_avg_sq), n, hyper,
                           ctx->optimizerStep());
  ctx->noteHostAccess(param, 0, n * ztrt::elementBytes(paramType));
  for (const void *state : {static_cast<const void *>(master),
                            static_cast<const void *>(exp_avg),
                            static_cast<const void *>(exp_avg_sq)})
    ctx->noteStateAccess(state, n * 4);
}

void ztrt_update_async(ztrt_ctx *ctx, const void *param) {
  backendOf(ctx, "update_async");
  ctx->markUpdateAsync(param, "update_async");
}

void ztrt_update_wait(ztrt_ctx *ctx, const void *param) {
  backendOf(ctx, "update_wait");
  ctx->waitUpdate(param);
}

void ztrt_dropout(ztrt_ctx *ctx, int32_t dtype, const void *x, void *out,
                  int64_t n, int64_t stream, double p) {
  Backend &backend = backendOf(ctx, "dropout");
  TraceScope trace(ctx->trace(), "dropout");
  const DType type = checkDType("dropout", dtype);
  checkCount("dropout", "element count", n);
  if (stream < 0)
    fatal("dropout: stream must be >= 0, got %lld",
          static_cast<long long>(stream));
  if (!(p >= 0.0 && p <= 1.0))
    fatal("dropout: probability must be in [0, 1], got %g", p);
  if (ctx->step < 1)
    fatal("dropout: called outside a step (step counter is %lld)",
          static_cast<long long>(ctx->step));
  // docs/runtime.md, "Dropout": one key per (seed, stream, micro-batch:
  // the step without accumulation); counter = the element's index in the
  // step's global tensor; element drops when its 24 random bits, as a
  // fraction of 2^24, are below p.
  uint64_t key = rng::draw(
      rng::streamKey(ctx->seed, "dropout/" + std::to_string(stream)),
      static_cast<uint64_t>(ctx->accumSteps > 0 ? ctx->microBatch
                                                : ctx->step));
  uint64_t base = static_cast<uint64_t>(ctx->comm().rank()) *
                  static_cast<uint64_t>(n);
  uint32_t threshold = static_cast<uint32_t>(std::ceil(p * 0x1p24));
  float scale = p < 1.0 ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
  backend.dropout(type, x, out, n, key, base, threshold, scale);
}

int64_t ztrt_rank(ztrt_ctx *ctx) {
  backendOf(ctx, "rank");
  return ctx->comm().rank();
}

int64_t ztrt_world_size(ztrt_ctx *ctx) {
  backendOf(ctx, "world_size");
  return ctx->comm().count();
}

void ztrt_all_reduce(ztrt_ctx *ctx, int32_t dtype, const void *in, void *out,
                     int64_t n, int32_t mean) {
  ctx->runCollective(
      request("all_reduce", ctx, dtype, Collective::AllReduce, in, out, n, mean),
      "all_reduce");
}

void ztrt_reduce_scatter(ztrt_ctx *ctx, int32_t dtype, const void *in,
                         void *out, int64_t count, int32_t mean) {
  ctx->runCollective(request("reduce_scatter", ctx, dtype,
                             Collective::ReduceScatter, in, out, count, mean),
                     "reduce_scatter");
}

void ztrt_all_gather(ztrt_ctx *ctx, int32_t dtype, const void *in, void *out,
                     int64_t count) {
  ctx->runCollective(request("all_gather", ctx, dtype, Collective::AllGather,
                             in, out, count, 0),
                     "all_gather");
  // A host-placed parameter's shard crosses the host link once.
  ctx->noteHostAccess(in, count * ztrt::elementBytes(static_cast<DType>(dtype)),
                      0);
}

void ztrt_bcast(ztrt_ctx *ctx, int32_t dtype, void *buf, int64_t n,
                int64_t root) {
  CollectiveRequest r =
      request("bcast", ctx, dtype, Collective::Broadcast, buf, buf, n, 0);
  const int ranks = ctx->comm().count();
  if (root < 0 || root >= ranks)
    fatal("bcast: root %lld out of range [0, %d)", static_cast<long long>(root),
          ranks);
  r.root = static_cast<int>(root);
  ctx->runCollective(r, "bcast");
}

int64_t ztrt_all_reduce_start(ztrt_ctx *ctx, int32_t dtype, const void *in,
                              void *out, int64_t n, int32_t mean) {
  return ctx->startCollective(request("all_reduce_start", ctx, dtype,
                                      Collective::AllReduce, in, out, n, mean));
}

int64_t ztrt_reduce_scatter_start(ztrt_ctx *ctx, int32_t dtype,
                                  const void *in, void *out, int64_t count,
                                  int32_t mean) {
  return ctx->startCollective(request("reduce_scatter_start", ctx, dtype,
                                      Collective::ReduceScatter, in, out,
                                      count, mean));
}

int64_t ztrt_all_gather_start(ztrt_ctx *ctx, int32_t dtype, const void *in,
                              void *out, int64_t count) {
  const int64_t handle = ctx->startCollective(request(
      "all_gather_start", ctx, dtype, Collective::AllGather, in, out, count, 0));
  ctx->noteHostAccess(in, count * ztrt::elementBytes(static_cast<DType>(dtype)),
                      0);
  return handle;
}

void ztrt_wait(ztrt_ctx *ctx, int64_t handle) {
  backendOf(ctx, "wait");
  ctx->waitCollective(handle, "wait");
}

} // extern "C"
