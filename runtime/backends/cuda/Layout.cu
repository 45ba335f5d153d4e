//===- Layout.cu - Transpose, reductions, broadcast, lookups, copies ----===//
//
// Part of ztrain's runtime (cuda backend). The host side (CudaLayout.cpp)
// turns a shape, permutation or mask into a Gather or Reduction plan with
// unit dims dropped and contiguous runs merged; the kernels here only
// decode indices. Index arithmetic is 32-bit when every index fits, which
// makes the divisions several times cheaper.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/DeviceUtil.cuh"

#include <climits>
#include <cmath>
#include <type_traits>

namespace ztrt::cuda {

namespace {

/// Offset in the source of output element `i` (row-major over the plan's
/// shape).
template <typename Index>
__device__ __forceinline__ Index gatherOffset(const Gather &plan, Index i) {
  Index offset = 0;
  for (int d = plan.rank - 1; d >= 0; --d) {
    const Index extent = static_cast<Index>(plan.shape[d]);
    offset += (i % extent) * static_cast<Index>(plan.strides[d]);
    i /= extent;
  }
  return offset;
}

/// 16 bytes moved as one: a gather whose innermost dim is contiguous on both
/// sides copies whole 16-byte words of it (see gather()).
struct alignas(16) Word16 {
  uint32_t w[4];
};

template <typename T, typename Index>
__global__ void gatherKernel(const T *x, T *out, Gather plan, Index n,
                             double factor, bool scaled) {
  for (Index i = static_cast<Index>(globalThread()); i < n;
       i += static_cast<Index>(gridThreads())) {
    const T v = x[gatherOffset(plan, i)];
    if constexpr (std::is_same_v<T, Word16>)
      out[i] = v;
    else
      out[i] = scaled ? static_cast<T>(static_cast<float>(
                            static_cast<double>(static_cast<float>(v)) *
                            factor))
                      : v;
  }
}

template <typename T, typename Index>
void launchGather(const T *x, T *out, const Gather &plan, Index n,
                  double factor, bool scaled, cudaStream_t stream) {
  ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, gatherKernel<T, Index>)
  (x, out, plan, n, factor, scaled);
}

// The combining rules of a reduction (Acc: the accumulator; `ref`: a value
// per output that the rule may compare against). Segments of one output are
// merged in order, which gives the serial result: for sums by construction
// (the same double additions chained), for max because merging a later
// segment keeps the earlier maximum unless the later one is greater or NaN,
// exactly what the serial loop does element by element.
struct SumOp {
  using Acc = double;
  bool mean = false;
  int64_t reduced = 1;
  __device__ Acc init() const { return 0.0; }
  __device__ void add(Acc &a, float v, float) const {
    a += static_cast<double>(v);
  }
  __device__ void merge(Acc &a, Acc b) const { a += b; }
  __device__ float finish(Acc a) const {
    return static_cast<float>(mean ? a / reduced : a);
  }
};

// The cpu's max: NaN-propagating (a NaN replaces the maximum and nothing
// replaces a NaN but another), and an equal value (+0 after -0) does not
// replace the first.
struct MaxOp {
  using Acc = float;
  __device__ Acc init() const { return -INFINITY; }
  __device__ void add(Acc &a, float v, float) const {
    if (v > a || v != v)
      a = v;
  }
  __device__ void merge(Acc &a, Acc b) const { add(a, b, 0.0f); }
  __device__ float finish(Acc a) const { return a; }
};

// How many elements equal the output's maximum (`ref`, y[o]).
struct TiesOp {
  using Acc = int64_t;
  __device__ Acc init() const { return 0; }
  __device__ void add(Acc &a, float v, float ref) const { a += v == ref; }
  __device__ void merge(Acc &a, Acc b) const { a += b; }
  __device__ int64_t finish(Acc a) const { return a; }
};

/// Adds the elements of one output from reduced index `begin` to `end` to
/// `acc`, in input order: an odometer over the reduced dims (at least one:
/// the host plan has a unit dim when nothing is reduced), so only the start
/// is decoded with divisions.
template <typename Op, typename T>
__device__ void reduceRange(const T *x, const Reduction &plan, int64_t base,
                            int64_t begin, int64_t end, const Op &op,
                            typename Op::Acc &acc, float ref) {
  if (begin >= end)
    return;
  if (plan.reducedRank == 1) {
    const int64_t stride = plan.reducedStrides[0];
    for (int64_t r = begin; r < end; ++r)
      op.add(acc, static_cast<float>(x[base + r * stride]), ref);
    return;
  }
  int64_t coord[kMaxDims];
  int64_t offset = 0, rest = begin;
  for (int d = plan.reducedRank - 1; d >= 0; --d) {
    coord[d] = rest % plan.reducedShape[d];
    rest /= plan.reducedShape[d];
    offset += coord[d] * plan.reducedStrides[d];
  }
  const int last = plan.reducedRank - 1;
  for (int64_t r = begin; r < end; ++r) {
    op.add(acc, static_cast<float>(x[base + offset]), ref);
    int d = last;
    ++coord[d];
    offset += plan.reducedStrides[d];
    while (d > 0 && coord[d] == plan.reducedShape[d]) {
      offset -= coord[d] * plan.reducedStrides[d];
      coord[d] = 0;
      --d;
      ++coord[d];
      offset += plan.reducedStrides[d];
    }
  }
}

__device__ int64_t keptOffset(const Reduction &plan, int64_t o) {
  int64_t offset = 0;
  for (int d = plan.keptRank - 1; d >= 0; --d) {
    offset += (o % plan.keptShape[d]) * plan.keptStrides[d];
    o /= plan.keptShape[d];
  }
  return offset;
}

// Thread (segment s, output o), o fastest so that a warp reads neighbouring
// outputs (coalesced when the kept dims are the inner ones, as for bias
// gradients). One segment: the result itself; several: partial results
// that reduceFinishKernel merges in segment order. `ref` (per output) may
// be null.
template <typename Op, typename T, typename Out>
__global__ void reducePartialKernel(const T *x, const T *ref, Out *out,
                                    typename Op::Acc *partial, Reduction plan,
                                    int64_t segments, int64_t segmentLength,
                                    Op op) {
  const int64_t total = segments * plan.outputs;
  for (int64_t t = globalThread(); t < total; t += gridThreads()) {
    const int64_t o = t % plan.outputs, s = t / plan.outputs;
    const int64_t begin = s * segmentLength;
    const int64_t end = min(plan.reduced, begin + segmentLength);
    typename Op::Acc acc = op.init();
    reduceRange(x, plan, keptOffset(plan, o), begin, end, op, acc,
                ref ? static_cast<float>(ref[o]) : 0.0f);
    if (partial)
      partial[t] = acc;
    else
      out[o] = static_cast<Out>(op.finish(acc));
  }
}

template <typename Op, typename Out>
__global__ void reduceFinishKernel(const typename Op::Acc *partial, Out *out,
                                   int64_t outputs, int64_t segments, Op op) {
  for (int64_t o = globalThread(); o < outputs; o += gridThreads()) {
    typename Op::Acc acc = op.init();
    for (int64_t s = 0; s < segments; ++s)
      op.merge(acc, partial[s * outputs + o]);
    out[o] = static_cast<Out>(op.finish(acc));
  }
}

// dx[i] = dy[o] / ties[o] where x[i] equals y[o], else 0; o is x element i's
// output (`toOutput`: x's shape with the output's strides, 0 along the
// reduced dims).
template <typename T, typename Index>
__global__ void maxGradKernel(const T *dy, const T *x, const T *y,
                              const int64_t *ties, T *dx, Gather toOutput,
                              Index n) {
  for (Index i = static_cast<Index>(globalThread()); i < n;
       i += static_cast<Index>(gridThreads())) {
    const Index o = gatherOffset(toOutput, i);
    dx[i] = static_cast<T>(static_cast<float>(x[i]) == static_cast<float>(y[o])
                               ? static_cast<float>(dy[o]) /
                                     static_cast<float>(ties[o])
                               : 0.0f);
  }
}

__global__ void checkIdsKernel(const int32_t *ids, int64_t nIds, int64_t vocab,
                               ErrorSlot *error) {
  for (int64_t i = globalThread(); i < nIds; i += gridThreads())
    if (ids[i] < 0 || ids[i] >= vocab)
      recordError(error, i, ids[i]);
}

template <typename T>
__global__ void embeddingKernel(const T *table, const int32_t *ids, T *out,
                                int64_t nIds, int64_t vocab, int64_t dim,
                                ErrorSlot *error) {
  const int64_t n = nIds * dim;
  for (int64_t k = globalThread(); k < n; k += gridThreads()) {
    const int64_t i = k / dim, j = k % dim;
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab) {
      if (j == 0)
        recordError(error, i, id);
      out[k] = static_cast<T>(0.0f);
      continue;
    }
    out[k] = table[static_cast<int64_t>(id) * dim + j];
  }
}

// One block per position i. Only the first occurrence of an id accumulates
// its row: it collects, chunk by chunk and in index order, the positions
// j >= i with the same id and adds their dy rows into its (exclusively
// owned, zeroed) row of `acc`. Every column therefore receives exactly the
// cpu's float additions in the cpu's order, without atomics. The scans
// compare one id per thread per chunk, O(nIds^2 / blockDim) per call.
// `acc` is the float table itself for T = float, a float scratch table
// otherwise (rounded to T afterwards, once per element).
template <typename T>
__global__ void embeddingGradKernel(const T *dy, const int32_t *ids, float *acc,
                                    int64_t nIds, int64_t vocab, int64_t dim,
                                    ErrorSlot *error) {
  __shared__ int64_t matches[kBlock];
  __shared__ int warpCounts[kBlock / kWarp];
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0)
      recordError(error, i, id);
    return;
  }
  // An earlier occurrence owns the row.
  for (int64_t j0 = 0; j0 < i; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x;
    if (__syncthreads_or(j < i && ids[j] == id))
      return;
  }
  float *row = acc + static_cast<int64_t>(id) * dim;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int64_t j0 = i; j0 < nIds; j0 += blockDim.x) {
    // Compact this chunk's matches, in index order, into `matches`.
    const int64_t j = j0 + threadIdx.x;
    const bool match = j < nIds && ids[j] == id;
    const unsigned ballot = __ballot_sync(kFullMask, match);
    if (lane == 0)
      warpCounts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, count = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x) / kWarp; ++w) {
      before += w < warp ? warpCounts[w] : 0;
      count += warpCounts[w];
    }
    if (match)
      matches[before + __popc(ballot & ((1u << lane) - 1))] = j;
    __syncthreads();
    for (int m = 0; m < count; ++m) {
      const T *src = dy + matches[m] * dim;
      for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
        row[c] = row[c] + static_cast<float>(src[c]);
    }
    __syncthreads();
  }
}

/// out[i] = T(acc[i]): the one rounding of embedding_grad's float sums.
template <typename T>
__global__ void roundKernel(const float *acc, T *out, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = static_cast<T>(acc[i]);
}

template <typename Word>
__global__ void copy2dKernel(const char *src, char *dst, int64_t rows,
                             int64_t words, int64_t srcStride,
                             int64_t dstStride) {
  const int64_t n = rows * words;
  for (int64_t k = globalThread(); k < n; k += gridThreads()) {
    const int64_t r = k / words, w = k % words;
    reinterpret_cast<Word *>(dst + r * dstStride)[w] =
        reinterpret_cast<const Word *>(src + r * srcStride)[w];
  }
}

template <typename Word>
void launchCopy2d(const void *src, void *dst, int64_t rows, int64_t rowBytes,
                  int64_t srcStride, int64_t dstStride, cudaStream_t stream) {
  const int64_t words = rowBytes / static_cast<int64_t>(sizeof(Word));
  ZTRT_LAUNCH(blocksFor(rows * words), kBlock, 0, stream, copy2dKernel<Word>)
  (static_cast<const char *>(src), static_cast<char *>(dst), rows, words,
   srcStride, dstStride);
}

} // namespace

template <typename T>
void gather(const T *x, T *out, const Gather &plan, double factor,
            cudaStream_t stream) {
  int64_t n = 1, span = 1;
  for (int d = 0; d < plan.rank; ++d) {
    n *= plan.shape[d];
    span += (plan.shape[d] - 1) * plan.strides[d];
  }
  if (n <= 0)
    return;
  const bool scaled = factor != 1.0;
  // A copy (no factor) whose innermost dim is contiguous (stride 1) and
  // whose every stride and innermost extent are whole 16-byte words, from
  // and to 16-byte aligned memory, moves words: one index decode per 16
  // bytes instead of per element (the attention heads' [B, T, H, D] <->
  // [B, H, T, D] transposes of GPT-2 small: D = 64). The same bits.
  constexpr int64_t V = 16 / static_cast<int64_t>(sizeof(T));
  const int last = plan.rank - 1;
  bool words = !scaled && plan.rank > 0 && plan.strides[last] == 1 &&
               plan.shape[last] % V == 0 && aligned16(x, out);
  for (int d = 0; words && d < last; ++d)
    words = plan.strides[d] % V == 0;
  if (words) {
    Gather w = plan;
    w.shape[last] /= V;
    for (int d = 0; d < last; ++d)
      w.strides[d] /= V;
    const auto *wx = reinterpret_cast<const Word16 *>(x);
    auto *wout = reinterpret_cast<Word16 *>(out);
    if (n / V <= INT_MAX && span / V <= INT_MAX)
      launchGather(wx, wout, w, static_cast<uint32_t>(n / V), factor, false,
                   stream);
    else
      launchGather(wx, wout, w, n / V, factor, false, stream);
  } else if (n <= INT_MAX && span <= INT_MAX) {
    // Unsigned: i + the grid's stride (< 2^28) never wraps below 2^32.
    launchGather(x, out, plan, static_cast<uint32_t>(n), factor, scaled,
                 stream);
  } else {
    launchGather(x, out, plan, n, factor, scaled, stream);
  }
  check(cudaGetLastError(), "transpose/broadcast kernel launch");
}

namespace {

/// Enqueues the reduction `op` of x into out (one Out per output).
template <typename Op, typename T, typename Out>
void launchReduce(const T *x, const T *ref, Out *out, const Reduction &plan,
                  const Op &op, cudaStream_t stream) {
  // Split each output's sum into segments when there are too few outputs to
  // fill the device (a bias gradient: a few hundred outputs, thousands of
  // rows each): at least 32 elements per segment, at most 1024 segments.
  int64_t segments = 1;
  if (plan.outputs < 65536 && plan.reduced > 64) {
    segments = std::min<int64_t>({(65536 + plan.outputs - 1) / plan.outputs,
                                  (plan.reduced + 31) / 32, 1024});
    segments = std::max<int64_t>(segments, 1);
  }
  const int64_t length =
      segments > 1 ? (plan.reduced + segments - 1) / segments : plan.reduced;
  if (segments > 1)
    segments = (plan.reduced + length - 1) / length;
  using Acc = typename Op::Acc;
  Acc *partial = nullptr;
  if (segments > 1)
    partial = static_cast<Acc *>(
        scratch(segments * plan.outputs * static_cast<int64_t>(sizeof(Acc)),
                stream, "reduce"));
  ZTRT_LAUNCH(blocksFor(segments * plan.outputs), kBlock, 0, stream,
              reducePartialKernel<Op, T, Out>)
  (x, ref, out, partial, plan, segments, length, op);
  if (partial) {
    ZTRT_LAUNCH(blocksFor(plan.outputs), kBlock, 0, stream,
                reduceFinishKernel<Op, Out>)
    (partial, out, plan.outputs, segments, op);
    release(partial, stream);
  }
}

} // namespace

template <typename T>
void reduce(const T *x, T *out, const Reduction &plan, ReduceKind kind,
            cudaStream_t stream) {
  if (plan.outputs <= 0)
    return;
  if (kind == ReduceKind::Max) {
    launchReduce(x, static_cast<const T *>(nullptr), out, plan, MaxOp{},
                 stream);
  } else {
    SumOp op;
    op.mean = kind == ReduceKind::Mean;
    op.reduced = plan.reduced;
    launchReduce(x, static_cast<const T *>(nullptr), out, plan, op, stream);
  }
  check(cudaGetLastError(), "reduce kernel launch");
}

template <typename T>
void reduceMaxGrad(const T *dy, const T *x, const T *y, T *dx,
                   const Reduction &plan, const Gather &toOutput,
                   cudaStream_t stream) {
  const int64_t n = plan.outputs * plan.reduced;
  if (n <= 0)
    return;
  auto *ties = static_cast<int64_t *>(
      scratch(plan.outputs * static_cast<int64_t>(sizeof(int64_t)), stream,
              "reduce_max_grad"));
  launchReduce(x, y, ties, plan, TiesOp{}, stream);
  // Unsigned: i + the grid's stride (< 2^28) never wraps below 2^32.
  if (n <= INT_MAX)
    ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, maxGradKernel<T, uint32_t>)
    (dy, x, y, ties, dx, toOutput, static_cast<uint32_t>(n));
  else
    ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, maxGradKernel<T, int64_t>)
    (dy, x, y, ties, dx, toOutput, n);
  check(cudaGetLastError(), "reduce_max_grad kernel launch");
  release(ties, stream);
}

template <typename T>
void embedding(const T *table, const int32_t *ids, T *out, int64_t nIds,
               int64_t vocab, int64_t dim, ErrorSlot *error,
               cudaStream_t stream) {
  if (nIds <= 0)
    return;
  if (dim <= 0) {
    // Nothing to copy, but the ids are still checked, as on the cpu.
    ZTRT_LAUNCH(blocksFor(nIds), kBlock, 0, stream, checkIdsKernel)
    (ids, nIds, vocab, error);
    check(cudaGetLastError(), "embedding kernel launch");
    return;
  }
  ZTRT_LAUNCH(blocksFor(nIds * dim), kBlock, 0, stream, embeddingKernel)
  (table, ids, out, nIds, vocab, dim, error);
  check(cudaGetLastError(), "embedding kernel launch");
}

template <typename T>
void embeddingGrad(const T *dy, const int32_t *ids, T *dtable, int64_t nIds,
                   int64_t vocab, int64_t dim, ErrorSlot *error,
                   cudaStream_t stream) {
  // Zero bits are +0 in every T: the cpu's fill(0).
  const int64_t n = vocab * dim;
  if (n > 0)
    check(cudaMemsetAsync(dtable, 0, n * sizeof(T), stream),
          "embedding_grad: cudaMemsetAsync");
  if (nIds <= 0)
    return;
  if (nIds > 0x7fffffff)
    check(cudaErrorInvalidConfiguration, "embedding_grad: too many ids");
  // The float sums: in the table itself for float, else in a zeroed float
  // scratch table rounded to T once (the cpu backend's float copy).
  using Acc = float;
  Acc *acc = nullptr;
  if constexpr (std::is_same_v<T, Acc>) {
    acc = dtable;
  } else {
    const int64_t accBytes = n * static_cast<int64_t>(sizeof(Acc));
    acc = static_cast<Acc *>(scratch(accBytes, stream, "embedding_grad"));
    if (n > 0)
      check(cudaMemsetAsync(acc, 0, static_cast<size_t>(accBytes), stream),
            "embedding_grad: cudaMemsetAsync");
  }
  ZTRT_LAUNCH(static_cast<unsigned>(nIds), kBlock, 0, stream,
              embeddingGradKernel)
  (dy, ids, acc, nIds, vocab, dim, error);
  if constexpr (!std::is_same_v<T, Acc>) {
    if (n > 0)
      ZTRT_LAUNCH(blocksFor(n), kBlock, 0, stream, roundKernel)(acc, dtable, n);
    release(acc, stream);
  }
  check(cudaGetLastError(), "embedding_grad kernel launch");
}

void copy2d(const void *src, void *dst, int64_t rows, int64_t rowBytes,
            int64_t srcStride, int64_t dstStride, cudaStream_t stream) {
  if (rows <= 0 || rowBytes <= 0)
    return;
  // The widest word that every row start and length is a multiple of.
  const uint64_t bits = reinterpret_cast<uintptr_t>(src) |
                        reinterpret_cast<uintptr_t>(dst) |
                        static_cast<uint64_t>(rowBytes) |
                        static_cast<uint64_t>(rows > 1 ? srcStride : 0) |
                        static_cast<uint64_t>(rows > 1 ? dstStride : 0);
  if (bits % 16 == 0)
    launchCopy2d<uint4>(src, dst, rows, rowBytes, srcStride, dstStride, stream);
  else if (bits % 8 == 0)
    launchCopy2d<uint2>(src, dst, rows, rowBytes, srcStride, dstStride, stream);
  else if (bits % 4 == 0)
    launchCopy2d<uint32_t>(src, dst, rows, rowBytes, srcStride, dstStride,
                           stream);
  else
    launchCopy2d<uint8_t>(src, dst, rows, rowBytes, srcStride, dstStride,
                          stream);
  check(cudaGetLastError(), "copy_2d kernel launch");
}

#define ZTRT_INSTANTIATE(T)                                                    \
  template void gather<T>(const T *, T *, const Gather &, double,              \
                          cudaStream_t);                                       \
  template void reduce<T>(const T *, T *, const Reduction &, ReduceKind,       \
                          cudaStream_t);                                       \
  template void reduceMaxGrad<T>(const T *, const T *, const T *, T *,         \
                                 const Reduction &, const Gather &,            \
                                 cudaStream_t);                                \
  template void embedding<T>(const T *, const int32_t *, T *, int64_t,         \
                             int64_t, int64_t, ErrorSlot *, cudaStream_t);     \
  template void embeddingGrad<T>(const T *, const int32_t *, T *, int64_t,     \
                                 int64_t, int64_t, ErrorSlot *, cudaStream_t);

ZTRT_INSTANTIATE(float)
ZTRT_INSTANTIATE(ztrt::bf16)
ZTRT_INSTANTIATE(ztrt::f16)

} // namespace ztrt::cuda
