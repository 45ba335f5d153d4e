//===- Kernels.cpp - Entry points: the kernels ----------------------------===//
//
// Part of ztrain's runtime. Every ZTRT_KERNEL entry of ztrt_abi.def,
// generated: the dtype and size checks, the kernel's own checks
// (KernelChecks, TypedKernelChecks), the trace, the backend call; dropout,
// whose entry point draws its random key from the run's seed; and fused,
// which runs a kernel the compiler generated.
//
//===----------------------------------------------------------------------===//

#include "ztrt.h"

#include "abi/Checks.h"
#include "base/Support.h"
#include "step/Context.h"
#include "step/Init.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

using namespace ztrt;
using namespace ztrt::abi;

namespace {

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

/// Every int64 argument of a kernel is a size, an index or a stride: >= 0;
/// except cross-entropy's `ignore`, a label (any value; ztrt_abi.def).
template <typename... Args>
void checkSizes(const char *op, const char *names, Args... args) {
  int index = 0;
  auto one = [&](auto value) {
    if constexpr (std::is_same_v<decltype(value), int64_t>)
      if (value < 0) {
        std::string name = argumentName(names, index);
        if (name != "ignore")
          fatal("%s: negative %s %lld", op, name.c_str(),
                static_cast<long long>(value));
      }
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

/// A loss tile's rows lie inside its labels.
static void checkLossTile(const char *op, int64_t rows, int64_t firstRow,
                          int64_t labelRows) {
  if (firstRow > labelRows || rows > labelRows - firstRow)
    fatal("%s: rows [%lld, %lld) are not inside the %lld labels", op,
          static_cast<long long>(firstRow),
          static_cast<long long>(firstRow + rows),
          static_cast<long long>(labelRows));
}

template <> struct KernelChecks<&Backend::crossEntropyTile> {
  static void check(const char *op, const void *, const void *, void *,
                    int64_t rows, int64_t, int64_t, int64_t firstRow,
                    int64_t labelRows) {
    checkLossTile(op, rows, firstRow, labelRows);
  }
};

template <> struct KernelChecks<&Backend::crossEntropyTileWithGrad> {
  static void check(const char *op, const void *, const void *, const void *,
                    void *, void *, int64_t rows, int64_t, int64_t,
                    int64_t firstRow, int64_t labelRows) {
    checkLossTile(op, rows, firstRow, labelRows);
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

template <> struct TypedKernelChecks<&Backend::matmulAcc> {
  static void check(const char *op, DType dtype, const void *a, const void *b,
                    const void *cIn, void *c, int64_t m, int64_t n, int64_t k,
                    int32_t transA, int32_t transB) {
    (void)transA;
    (void)transB;
    const int64_t cBytes = m * n * 4, elem = elementBytes(dtype);
    if (cIn != c && overlaps(cIn, cBytes, c, cBytes))
      fatal("%s: c overlaps c_in without being it (in place means c == c_in)",
            op);
    if (overlaps(a, m * k * elem, c, cBytes) ||
        overlaps(b, k * n * elem, c, cBytes))
      fatal("%s: c overlaps a or b", op);
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

void ztrt_fused(ztrt_ctx *ctx, const void *name, void *fn, void *fnWide,
                const void *args, int64_t items, int64_t itemElements) {
  Backend &backend = backendOf(ctx, "fused");
  if (!name)
    fatal("fused: null region name");
  // The region's name ("fused:bias_add+gelu") names it in the trace and in
  // errors. The trace keeps the pointer until it writes its file; the
  // compiler's names are constants of the executable, alive for the run.
  const char *op = static_cast<const char *>(name);
  TraceScope trace(ctx->trace(), op);
  if (!fn)
    fatal("%s: null kernel", op);
  checkCount(op, "item count", items);
  if (itemElements < 1)
    fatal("%s: elements per item must be >= 1, got %lld", op,
          static_cast<long long>(itemElements));
  // The backend decides on threads by the region's element count.
  if (items > INT64_MAX / itemElements)
    fatal("%s: %lld items of %lld elements overflow int64", op,
          static_cast<long long>(items), static_cast<long long>(itemElements));
  if (items > 0 && !args)
    fatal("%s: null argument array", op);
  // The kernels arrive as pointers (ztrt_abi.def has no function type),
  // converted back as dlsym's results are (POSIX: the same representation).
  backend.runFused(reinterpret_cast<ztrt_fused_fn>(fn),
                   reinterpret_cast<ztrt_fused_fn>(fnWide),
                   static_cast<void *const *>(args), items, itemElements);
}

} // extern "C"
