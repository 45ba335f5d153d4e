//===- AttentionForward.cu - Tiled tensor-core attention -------*- CUDA -*-===//
//
// Part of ztrain's runtime: train.attention and its adjoint for bf16 / f16
// heads of dimension 32 or 64 (the backward is described at its kernels).
// The forward is FlashAttention-2's loop (Dao, 2023) on
// the tensor cores through the warp matrix functions (nvcuda::wmma): a
// block takes 64 query rows of one head, 16 per warp; it walks the keys in
// tiles of 32 (up to the block's last row when causal, so the masked half
// is skipped), staging each key and value tile in shared memory; each warp
// computes its 16 x 32 scores in float (q k^T on the tensor cores),
// updates its rows' running max and sum (online softmax, in float), writes
// the tile's unnormalized probabilities as T and adds their product with
// the values to its float output rows (tensor cores again). At the end
// each row is divided by its sum, rounded to T once, and its log-sum-exp
// written. No [T, T] tensor is ever in device memory.
//
// Numerics against the cpu kernel (which keeps the probabilities in float,
// normalized before the product): the probabilities are rounded to T
// before the product with v, as FlashAttention does, and the sums are in
// float; the conformance suite (CudaAttentionTest) states the tolerance.
// Deterministic: every sum has a fixed order (the tensor cores' within a
// tile, the tiles in key order, the two lanes of a row combined by one
// shuffle); no atomics.
//
// The output rows stay in accumulator fragments for the whole loop. Their
// element layout is the hardware's (unspecified), so each tile's per-row
// rescale reaches them through a fragment that holds each element's row
// (fragmentRows: loaded once from a tile of row indices); the rescale
// factors pass through 16 floats of shared memory. The first version
// rescaled the rows in shared memory instead, a store and a load of the
// warp's 16 x D floats per key tile; that, and shared-memory bank
// conflicts, made it 7 TFLOP/s on an H100 (docs/cuda.md).
//
// This file: the forward kernels (wmma and mma.sync) and their launch;
// the backward is in AttentionBackward.cu, what both use in
// AttentionTiles.cuh.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/AttentionTiles.cuh"

#include <cmath>
#include <cstdint>

namespace ztrt::cuda {

namespace {

template <typename T, int D> struct alignas(32) AttentionShared {
  static constexpr int kTile = kKeys * kTileLd<D>;
  static constexpr size_t kTileBytes = 4 * kTile * sizeof(T);
  static constexpr size_t kOutBytes =
      kWarps * kRowsPerWarp * kOutLd<D> * sizeof(float);
  // In the loop: two buffers of the key and of the value tile (T); after
  // it, per warp, the unnormalized output rows (float).
  alignas(32) unsigned char tilesOrOut[kTileBytes > kOutBytes ? kTileBytes
                                                              : kOutBytes];
  // Per warp: the scores (float), then in place the probabilities (T);
  // before the loop, the warp's query rows (T).
  alignas(32) float scores[kWarps][kRowsPerWarp * kScoreLd];
  // Per warp: each row's rescale factor for the tile, then 1 / its sum.
  float rowFactor[kWarps][kRowsPerWarp];

  __device__ T *keys(int buffer) {
    return reinterpret_cast<T *>(tilesOrOut) + buffer * kTile;
  }
  __device__ T *values(int buffer) {
    return reinterpret_cast<T *>(tilesOrOut) + (2 + buffer) * kTile;
  }
  __device__ float *out(int warp) {
    return reinterpret_cast<float *>(tilesOrOut) +
           warp * kRowsPerWarp * kOutLd<D>;
  }
};

/// Which row of its tile each element of an accumulator fragment holds
/// (the same for every fragment of the type): a fragment loaded from a
/// tile whose element (i, j) is i, through `scratch` (16 x 16 floats). The
/// layout is the hardware's, unspecified but fixed per fragment type, so
/// this is how a per-row scale reaches the elements in registers.
__device__ inline void fragmentRows(Accumulator &rows, float *scratch,
                                    int lane) {
  for (int e = lane; e < 16 * 16; e += kWarp)
    scratch[e] = static_cast<float>(e / 16);
  __syncwarp();
  wmma::load_matrix_sync(rows, scratch, 16, wmma::mem_row_major);
  __syncwarp();
}

template <typename T, int D>
__global__ void attentionForwardKernel(const T *q, const T *k, const T *v,
                                       T *out, float *lse, int64_t groups,
                                       int64_t tq, int64_t tk, bool causal,
                                       float scale) {
  __shared__ AttentionShared<T, D> sh;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t head = blockIdx.x, kvHead = head / groups;
  const int64_t blockRow0 = rowBlock(causal) * kBlockRows;
  const int64_t row0 = blockRow0 + warp * kRowsPerWarp;
  const T *qh = q + head * tq * D, *kh = k + kvHead * tk * D,
          *vh = v + kvHead * tk * D;
  float *factor = sh.rowFactor[warp];

  Accumulator rowOf;
  fragmentRows(rowOf, sh.scores[warp], lane);
  // The warp's query rows, as kD / 16 fragments kept for the whole loop.
  T *staged = reinterpret_cast<T *>(sh.scores[warp]);
  stageRows<T, D>(staged, qh, row0, kRowsPerWarp, tq, lane, kWarp);
  __syncwarp();
  RowsFragment<T> qf[D / 16];
  loadRows<T, D>(qf, staged);
  // The unnormalized output rows, in float, in registers for the loop.
  Accumulator acc[D / 16];
  for (int n = 0; n < D / 16; ++n)
    wmma::fill_fragment(acc[n], 0.0f);

  // Lane pair (2r, 2r + 1) owns row r: columns scoreColumn(r, h, 0..15)
  // of a score tile, h = lane % 2.
  const int r = lane / 2, half = lane % 2;
  const int64_t qi = row0 + r;
  float m = -INFINITY, l = 0.0f;
  // Block-uniform (the loop has block barriers): causal rows of this
  // block see no key past its last row.
  const int64_t keysEnd =
      causal && blockRow0 + kBlockRows < tk ? blockRow0 + kBlockRows : tk;
  const int64_t tiles = (keysEnd + kKeys - 1) / kKeys;
  if (tiles > 0) {
    stageRowsAsync<T, D>(sh.keys(0), kh, 0, kKeys, tk, threadIdx.x, blockDim.x);
    stageRowsAsync<T, D>(sh.values(0), vh, 0, kKeys, tk, threadIdx.x,
                         blockDim.x);
  }
  __pipeline_commit();
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t j0 = t * kKeys;
    const int buffer = static_cast<int>(t & 1);
    __syncthreads(); // every warp is done with tile t - 1, the other buffer
    if (t + 1 < tiles) {
      stageRowsAsync<T, D>(sh.keys(1 - buffer), kh, j0 + kKeys, kKeys, tk,
                           threadIdx.x, blockDim.x);
      stageRowsAsync<T, D>(sh.values(1 - buffer), vh, j0 + kKeys, kKeys, tk,
                           threadIdx.x, blockDim.x);
    }
    __pipeline_commit();
    __pipeline_wait_prior(1); // this thread's words of tile t
    __syncthreads();          // and every thread's
    const T *keysTile = sh.keys(buffer), *valuesTile = sh.values(buffer);

    // Scores: 16 x kKeys in float.
    float *s = sh.scores[warp];
    rowsTimesTileT<T, D>(qf, keysTile, s);
    __syncwarp();

    // Online softmax of row r over this tile.
    // Key j0 + c is visible to row qi for c < visibleEnd (c < tk - j0, and
    // when causal c <= qi - j0).
    const int visibleEnd =
        tileColumns(causal && qi + 1 < tk ? qi + 1 - j0 : tk - j0);
    float p[16];
    float tileMax = -INFINITY;
    for (int i = 0; i < 16; ++i) {
      const int c = scoreColumn(r, half, i);
      p[i] = c < visibleEnd ? s[r * kScoreLd + c] * scale : -INFINITY;
      tileMax = fmaxf(tileMax, p[i]);
    }
    tileMax = fmaxf(tileMax, __shfl_xor_sync(kFullMask, tileMax, 1));
    const float mNew = fmaxf(m, tileMax);
    // A row with no visible key yet (none past tq here, but guarded)
    // keeps m = -inf and adds nothing.
    const float base = mNew == -INFINITY ? 0.0f : mNew;
    const float alpha = expf(m - base);
    float sum = 0.0f;
    for (int i = 0; i < 16; ++i) {
      p[i] = expf(p[i] - base);
      sum += p[i];
    }
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    l = l * alpha + sum;
    m = mNew;
    __syncwarp(); // every lane has read its scores before they are replaced
    T *probs = reinterpret_cast<T *>(s);
    for (int i = 0; i < 16; ++i)
      probs[r * kProbLd + scoreColumn(r, half, i)] = T(p[i]);
    if (half == 0)
      factor[r] = alpha;
    __syncwarp();

    // out = out * alpha (per row, in registers) + p v.
    for (int n = 0; n < D / 16; ++n)
      for (int e = 0; e < acc[n].num_elements; ++e)
        acc[n].x[e] *= factor[static_cast<int>(rowOf.x[e])];
    addTimesTile<T, D>(acc, probs, valuesTile);
  }
  __pipeline_wait_prior(0); // (the last group is empty)

  __syncthreads(); // every warp is done with the tiles the rows replace
  if (half == 0) {
    factor[r] = 1.0f / l;
    if (qi < tq)
      lse[head * tq + qi] = m + logf(l);
  }
  storeRows<D>(sh.out(warp), acc);
  __syncwarp();
  writeRows<T, D>(out + head * tq * D, sh.out(warp), factor, row0, tq, lane);
}

// --- The forward with the softmax in registers (mma.sync) -------------------
// FlashAttention-2's forward as its authors wrote it, on TensorCore.cuh's
// mma.sync m16n8k16 and ldmatrix, whose fragment layouts are documented:
// each warp keeps its 16 query rows (A fragments), its 16 x 64 scores and
// its 16 x D output rows (float accumulators) in registers; a lane holds
// two rows' (g and g + 8) columns 2t, 2t + 1 of every 8-column tile, so a
// row's max and sum are its lane's values and two shuffles within the quad
// of lanes that share the row, the rescale of the output rows is a
// multiply per register, and the scores, rounded to T pairwise, are the A
// operand of the product with the values as they are (TensorCore.cuh), with
// no shared-memory round trip. Keys and values stream through shared
// memory in tiles of 64 (cp.async, double-buffered), read by ldmatrix (the
// values transposed). The arithmetic per element is the wmma kernel's
// (scores in float, times scale, the running max and sum in float with
// expf, the probabilities rounded to T for the product), in another order
// within the tensor-core sums.

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * kWarp)
attentionForwardMmaKernel(const T *q, const T *k, const T *v, T *out,
                          float *lse, int64_t groups, int64_t tq, int64_t tk,
                          bool causal, float scale) {
  static_assert(kMmaKeys <= kRowsPerWarp * kWarps,
                "the query rows fit a value buffer");
  __shared__ MmaForwardShared<T, D> sh;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int64_t head = blockIdx.x, kvHead = head / groups;
  const int64_t blockRow0 = rowBlock(causal) * kBlockRows;
  const int64_t row0 = blockRow0 + warp * kRowsPerWarp;
  const T *qh = q + head * tq * D, *kh = k + kvHead * tk * D,
          *vh = v + kvHead * tk * D;

  const int64_t keysEnd =
      causal && blockRow0 + kBlockRows < tk ? blockRow0 + kBlockRows : tk;
  const int64_t tiles = (keysEnd + kMmaKeys - 1) / kMmaKeys;
  if (tiles > 0) {
    stageRowsAsync<T, D>(sh.keys(0), kh, 0, kMmaKeys, tk, threadIdx.x,
                         blockDim.x);
    stageRowsAsync<T, D>(sh.values(0), vh, 0, kMmaKeys, tk, threadIdx.x,
                         blockDim.x);
  }
  __pipeline_commit();

  // The block's query rows, through the second value buffer, into each
  // warp's A fragments: matrices (rows 0-7 | 8-15) x (columns 16kk + 0-7 |
  // 8-15) in A's register order.
  stageRows<T, D>(sh.values(1), qh, blockRow0, kBlockRows, tq, threadIdx.x,
                  blockDim.x);
  __syncthreads();
  tc::FragA qf[D / 16];
  loadRowsMma<T, D>(qf, sh.values(1), warp, lane);
  __syncthreads(); // every warp has its rows before the buffer is refilled

  tc::FragC acc[D / 8];
  for (tc::FragC &a : acc)
    a = tc::FragC{};
  // This lane's two rows: g (h = 0) and g + 8 (h = 1).
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  int64_t rowIndex[2] = {row0 + g, row0 + g + 8};

  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t j0 = tile * kMmaKeys;
    const int buffer = static_cast<int>(tile & 1);
    __syncthreads(); // every warp is done with tile - 1, the other buffer
    if (tile + 1 < tiles) {
      stageRowsAsync<T, D>(sh.keys(1 - buffer), kh, j0 + kMmaKeys, kMmaKeys,
                           tk, threadIdx.x, blockDim.x);
      stageRowsAsync<T, D>(sh.values(1 - buffer), vh, j0 + kMmaKeys,
                           kMmaKeys, tk, threadIdx.x, blockDim.x);
    }
    __pipeline_commit();
    __pipeline_wait_prior(1); // this thread's words of this tile
    __syncthreads();          // and every thread's
    const T *keysTile = sh.keys(buffer), *valuesTile = sh.values(buffer);

    // Scores, 16 x 64 in float: s[j] is keys 8j .. 8j + 7.
    tc::FragC s[kMmaKeys / 8];
    mmaTimesTileT<T, D>(s, qf, keysTile, lane);

    // Online softmax of the lane's two rows over the tile. Key j0 + c is
    // visible to row i for c < visibleEnd (c < tk - j0, and when causal
    // c <= i - j0).
    for (int h = 0; h < 2; ++h) {
      const int64_t qi = rowIndex[h];
      const int visibleEnd = tileColumns<kMmaKeys>(
          causal && qi + 1 < tk ? qi + 1 - j0 : tk - j0);
      float tileMax = -INFINITY;
      for (int j = 0; j < kMmaKeys / 8; ++j)
        for (int e = 0; e < 2; ++e) {
          const int c = 8 * j + 2 * t + e;
          float &x = s[j].r[2 * h + e];
          x = c < visibleEnd ? x * scale : -INFINITY;
          tileMax = fmaxf(tileMax, x);
        }
      tileMax = fmaxf(tileMax, __shfl_xor_sync(kFullMask, tileMax, 1));
      tileMax = fmaxf(tileMax, __shfl_xor_sync(kFullMask, tileMax, 2));
      const float mNew = fmaxf(m[h], tileMax);
      // A row with no visible key yet keeps m = -inf and adds nothing.
      const float base = mNew == -INFINITY ? 0.0f : mNew;
      const float alpha = expf(m[h] - base);
      float sum = 0.0f;
      for (int j = 0; j < kMmaKeys / 8; ++j)
        for (int e = 0; e < 2; ++e) {
          float &x = s[j].r[2 * h + e];
          x = expf(x - base);
          sum += x;
        }
      sum += __shfl_xor_sync(kFullMask, sum, 1);
      sum += __shfl_xor_sync(kFullMask, sum, 2);
      l[h] = l[h] * alpha + sum;
      m[h] = mNew;
      for (tc::FragC &a : acc) {
        a.r[2 * h] *= alpha;
        a.r[2 * h + 1] *= alpha;
      }
    }

    // out += p v (p rounded to T).
    mmaAddTimesTile<T, D>(acc, s, valuesTile, lane);
  }
  __pipeline_wait_prior(0); // (the last group is empty)

  // Each row divided by its sum, rounded to T once; its log-sum-exp.
  T *oh = out + head * tq * D;
  for (int h = 0; h < 2; ++h) {
    const int64_t qi = rowIndex[h];
    if (qi >= tq)
      continue;
    const float inv = 1.0f / l[h];
    for (int n = 0; n < D / 8; ++n)
      for (int e = 0; e < 2; ++e)
        oh[qi * D + 8 * n + 2 * t + e] = T(acc[n].r[2 * h + e] * inv);
    if (t == 0)
      lse[head * tq + qi] = m[h] + logf(l[h]);
  }
}

template <typename T, int D>
void launchForward(const T *q, const T *k, const T *v, T *out, float *lse,
                   int64_t heads, int64_t groups, int64_t tq, int64_t tk,
                   bool causal, float scale, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(heads),
                  static_cast<unsigned>((tq + kBlockRows - 1) / kBlockRows));
  if (mmaKernels()) {
    ZTRT_LAUNCH(grid, kWarps * kWarp, 0, stream,
                attentionForwardMmaKernel<T, D>)
    (q, k, v, out, lse, groups, tq, tk, causal, scale);
  } else {
    ZTRT_LAUNCH(grid, kWarps * kWarp, 0, stream, attentionForwardKernel<T, D>)
    (q, k, v, out, lse, groups, tq, tk, causal, scale);
  }
  check(cudaGetLastError(), "attention kernel launch");
}

} // namespace

template <typename T>
bool attentionForward(const T *q, const T *k, const T *v, T *out, float *lse,
                      int64_t heads, int64_t groups, int64_t tq, int64_t tk,
                      int64_t d, bool causal, float scale,
                      cudaStream_t stream) {
  if (!tiledShape(heads, tq, tk, d, q, k, v, out))
    return false;
  if (d == 64)
    launchForward<T, 64>(q, k, v, out, lse, heads, groups, tq, tk, causal,
                         scale, stream);
  else if (d == 32)
    launchForward<T, 32>(q, k, v, out, lse, heads, groups, tq, tk, causal,
                         scale, stream);
  else
    return false;
  return true;
}

template bool attentionForward<bf16>(const bf16 *, const bf16 *, const bf16 *,
                                     bf16 *, float *, int64_t, int64_t,
                                     int64_t, int64_t, int64_t, bool, float,
                                     cudaStream_t);
template bool attentionForward<f16>(const f16 *, const f16 *, const f16 *,
                                    f16 *, float *, int64_t, int64_t, int64_t,
                                    int64_t, int64_t, bool, float,
                                    cudaStream_t);

} // namespace ztrt::cuda
