//===- AttentionBackward.cu - Tiled attention backward ---------*- CUDA -*-===//
//
// Part of ztrain's runtime: the adjoint of train.attention for bf16 / f16
// heads of dimension 32 or 64 on the tensor cores, the backward of the
// forward in AttentionForward.cu (whose file comment has the design and
// the numerics): the delta kernel, the key-block and query-block kernels
// (wmma and mma.sync), described at the kernels below, and their launch;
// the tiles and fragments they share with the forward are in
// AttentionTiles.cuh.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/AttentionTiles.cuh"

#include <cmath>
#include <cstdint>

namespace ztrt::cuda {

namespace {

// --- Backward ---------------------------------------------------------------
// FlashAttention-2's backward, without atomics: delta_i = sum(dout_i * out_i)
// per query row first; then one kernel over key blocks (dk, dv: each warp's
// 16 keys against every query tile that sees them) and one over query
// blocks (dq: each warp's 16 rows against every key tile they see). Both
// recompute p = exp(scale * q k^T - lse) from the forward's lse, and
// ds = p * (dp - delta) with dp = dout v^T; p and ds are rounded to T for
// the products on the tensor cores, the accumulators are float fragments
// (no rescaling in the backward, so they stay in registers).

/// delta[row] = sum_c dout[row, c] * out[row, c] in float, a warp per row
/// (a fixed butterfly), the warps striding over the rows.
template <typename T, int D>
__global__ void attentionDeltaKernel(const T *dout, const T *out,
                                     float *delta, int64_t rows) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  for (int64_t row =
           (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) /
           kWarp;
       row < rows; row += warps) { // warp-uniform
    float sum = 0.0f;
    for (int c = lane; c < D; c += kWarp)
      sum += static_cast<float>(dout[row * D + c]) *
             static_cast<float>(out[row * D + c]);
    for (int w = kWarp / 2; w > 0; w /= 2)
      sum += __shfl_xor_sync(kFullMask, sum, w);
    if (lane == 0)
      delta[row] = sum;
  }
}

template <typename T, int D> struct alignas(32) KeyBlockShared {
  // Two buffers of each (the tile of 32 query rows in use and the next
  // one, arriving).
  alignas(32) T queries[2][kKeys * kTileLd<D>];
  alignas(32) T douts[2][kKeys * kTileLd<D>];
  float lse[kKeys], delta[kKeys];
  // Per warp: two 16 x 32 float tiles (s^T and dp^T; before the loop the
  // warp's key and value rows; after it, dk and dv on their way out, one
  // at a time, over both).
  alignas(32) float tiles[kWarps][2][kRowsPerWarp * kScoreLd];
  float rowFactor[kWarps][kRowsPerWarp]; // the scale of dk's or dv's rows
};

/// The tile of 32 query rows from i0 of query head qHead, and of its
/// output gradient, into the buffers (asynchronously: stageRowsAsync).
template <typename T, int D>
__device__ void stageQueryTile(T *queries, T *douts, const T *q,
                               const T *dout, int64_t qHead, int64_t i0,
                               int64_t tq) {
  stageRowsAsync<T, D>(queries, q + qHead * tq * D, i0, kKeys, tq,
                       threadIdx.x, blockDim.x);
  stageRowsAsync<T, D>(douts, dout + qHead * tq * D, i0, kKeys, tq,
                       threadIdx.x, blockDim.x);
}

/// Per warp, 16 keys (r0 .. r0 + 15) of one key / value head: dk and dv,
/// summed over the `groups` query heads that read it (grouped-query), one
/// after the other into the same float accumulators.
template <typename T, int D>
__global__ void __launch_bounds__(kWarps * kWarp, 3)
attentionKeysKernel(const T *q, const T *k, const T *v,
                                    const T *dout, const float *lse,
                                    const float *delta, T *dk, T *dv,
                                    int64_t groups, int64_t tq, int64_t tk,
                                    bool causal, float scale) {
  static_assert(kRowsPerWarp * kScoreLd * 4 >= kRowsPerWarp * kTileLd<D> * 2,
                "a warp's key rows fit one float tile");
  static_assert(2 * kScoreLd >= kOutLd<D>, "dk's rows fit two float tiles");
  __shared__ KeyBlockShared<T, D> sh;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t head = blockIdx.x; // the key / value head
  // (Causal: the first key blocks, which the most queries see, first.)
  const int64_t blockKey0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int64_t key0 = blockKey0 + warp * kRowsPerWarp;
  float *st = sh.tiles[warp][0], *dpt = sh.tiles[warp][1];

  // The warp's keys and values as fragments for the whole loop.
  stageRows<T, D>(reinterpret_cast<T *>(st), k + head * tk * D, key0,
                  kRowsPerWarp, tk, lane, kWarp);
  stageRows<T, D>(reinterpret_cast<T *>(dpt), v + head * tk * D, key0,
                  kRowsPerWarp, tk, lane, kWarp);
  __syncwarp();
  RowsFragment<T> kf[D / 16], vf[D / 16];
  loadRows<T, D>(kf, reinterpret_cast<const T *>(st));
  loadRows<T, D>(vf, reinterpret_cast<const T *>(dpt));
  Accumulator dkf[D / 16], dvf[D / 16];
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dkf[n], 0.0f);
    wmma::fill_fragment(dvf[n], 0.0f);
  }

  const int r = lane / 2, half = lane % 2;
  const int64_t key = key0 + r;
  // Causal: no query before the block's first key sees it.
  const int64_t queryBegin = causal ? blockKey0 / kKeys * kKeys : 0;
  // The query tiles of every member of the group, one sequence: tile t is
  // tile t % perMember of member t / perMember (counted, not divided).
  const int64_t perMember = (tq - queryBegin + kKeys - 1) / kKeys;
  const int64_t tiles = groups * perMember;
  if (tiles > 0)
    stageQueryTile<T, D>(sh.queries[0], sh.douts[0], q, dout, head * groups,
                         queryBegin, tq);
  __pipeline_commit();
  int64_t qHead = head * groups, i0 = queryBegin; // of tile t
  for (int64_t t = 0; t < tiles; ++t) {
    const int buffer = static_cast<int>(t & 1);
    const bool lastOfMember = i0 + kKeys >= tq;
    {
      __syncthreads(); // every warp is done with tile t - 1, the other buffer
      if (t + 1 < tiles)
        stageQueryTile<T, D>(sh.queries[1 - buffer], sh.douts[1 - buffer], q,
                             dout, lastOfMember ? qHead + 1 : qHead,
                             lastOfMember ? queryBegin : i0 + kKeys, tq);
      __pipeline_commit();
      if (threadIdx.x < kKeys) {
        const int64_t i = i0 + threadIdx.x;
        sh.lse[threadIdx.x] = i < tq ? lse[qHead * tq + i] : 0.0f;
        sh.delta[threadIdx.x] = i < tq ? delta[qHead * tq + i] : 0.0f;
      }
      __pipeline_wait_prior(1); // this thread's words of tile t
      __syncthreads();          // and every thread's
      const T *queriesTile = sh.queries[buffer], *doutsTile = sh.douts[buffer];

      // s^T = k q^T and dp^T = v dout^T: 16 keys x 32 queries each.
      rowsTimesTileT<T, D>(kf, queriesTile, st);
      rowsTimesTileT<T, D>(vf, doutsTile, dpt);
      __syncwarp();

      // p^T and ds^T of row r (one key), columns scoreColumn(r, h, 0..15).
      // Query i0 + c sees key `key` for c in [visibleBegin, visibleEnd)
      // (c < tq - i0, key < tk, and when causal c >= key - i0).
      const int visibleBegin = causal ? tileColumns(key - i0) : 0;
      const int visibleEnd = key < tk ? tileColumns(tq - i0) : 0;
      float p[16], ds[16];
      for (int i = 0; i < 16; ++i) {
        const int c = scoreColumn(r, half, i);
        const bool visible = c >= visibleBegin && c < visibleEnd;
        p[i] = visible ? expf(st[r * kScoreLd + c] * scale - sh.lse[c]) : 0.0f;
        ds[i] = p[i] * (dpt[r * kScoreLd + c] - sh.delta[c]);
      }
      __syncwarp(); // every lane has read its tiles before they are replaced
      T *pt = reinterpret_cast<T *>(st), *dst = reinterpret_cast<T *>(dpt);
      for (int i = 0; i < 16; ++i) {
        const int c = scoreColumn(r, half, i);
        pt[r * kProbLd + c] = T(p[i]);
        dst[r * kProbLd + c] = T(ds[i]);
      }
      __syncwarp();

      // dv += p^T dout, dk += ds^T q (scaled at the end).
      addTimesTile<T, D>(dvf, pt, doutsTile);
      addTimesTile<T, D>(dkf, dst, queriesTile);
      __syncwarp();
    }
    qHead = lastOfMember ? qHead + 1 : qHead;
    i0 = lastOfMember ? queryBegin : i0 + kKeys;
  }
  __pipeline_wait_prior(0); // (the last group is empty)

  // Out through the warp's float tiles (16 x D floats: both tiles), which
  // every lane is done reading (the key and value rows, when no tile ran).
  __syncwarp();
  float *stage = sh.tiles[warp][0], *factor = sh.rowFactor[warp];
  for (int which = 0; which < 2; ++which) {
    storeRows<D>(stage, which ? dvf : dkf);
    if (lane < kRowsPerWarp)
      factor[lane] = which ? 1.0f : scale;
    __syncwarp();
    writeRows<T, D>((which ? dv : dk) + head * tk * D, stage, factor, key0,
                    tk, lane);
    __syncwarp();
  }
}

/// The keys kernel with p^T and ds^T in registers (mma.sync): per warp 16
/// keys of one key / value head against tiles of 64 query rows, the same
/// arithmetic per element as attentionKeysKernel (p^T = exp(scale s^T -
/// lse), ds^T = p^T (dp^T - delta), both rounded to T for the products,
/// float accumulators), the layouts as in attentionForwardMmaKernel: the
/// keys' and values' rows are A fragments, the query and dout rows B
/// operands through ldmatrix (as they are for s^T and dp^T, transposed
/// for dv += p^T dout and dk += ds^T q).
template <typename T, int D> struct alignas(16) MmaKeyBlockShared {
  static_assert(D % 32 == 0, "the loops take d in pairs of 16");
  static constexpr int kTile = kMmaKeys * kTileLd<D>;
  // Two buffers of query rows and of dout rows; before the loop the second
  // ones hold the block's key and value rows (bytes, as MmaForwardShared).
  alignas(16) unsigned char bytes[4 * kTile * sizeof(T)];
  float lse[kMmaKeys], delta[kMmaKeys];
  __device__ T *queries(int buffer) {
    return reinterpret_cast<T *>(bytes) + buffer * kTile;
  }
  __device__ T *douts(int buffer) {
    return reinterpret_cast<T *>(bytes) + (2 + buffer) * kTile;
  }
};

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * kWarp)
attentionKeysMmaKernel(const T *q, const T *k, const T *v, const T *dout,
                       const float *lse, const float *delta, T *dk, T *dv,
                       int64_t groups, int64_t tq, int64_t tk, bool causal,
                       float scale) {
  static_assert(kMmaKeys == kBlockRows, "a key block fills a query buffer");
  __shared__ MmaKeyBlockShared<T, D> sh;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int64_t head = blockIdx.x; // the key / value head
  const int64_t blockKey0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int64_t key0 = blockKey0 + warp * kRowsPerWarp;

  // Causal: no query before the block's first key sees it.
  const int64_t queryBegin = causal ? blockKey0 : 0;
  const int64_t perMember = (tq - queryBegin + kMmaKeys - 1) / kMmaKeys;
  const int64_t tiles = groups * perMember;
  auto stageTile = [&](int buffer, int64_t qHead, int64_t i0) {
    stageRowsAsync<T, D>(sh.queries(buffer), q + qHead * tq * D, i0, kMmaKeys,
                         tq, threadIdx.x, blockDim.x);
    stageRowsAsync<T, D>(sh.douts(buffer), dout + qHead * tq * D, i0,
                         kMmaKeys, tq, threadIdx.x, blockDim.x);
  };
  if (tiles > 0)
    stageTile(0, head * groups, queryBegin);
  __pipeline_commit();

  // The block's keys and values through the second buffers into each
  // warp's A fragments.
  stageRows<T, D>(sh.queries(1), k + head * tk * D, blockKey0, kBlockRows, tk,
                  threadIdx.x, blockDim.x);
  stageRows<T, D>(sh.douts(1), v + head * tk * D, blockKey0, kBlockRows, tk,
                  threadIdx.x, blockDim.x);
  __syncthreads();
  tc::FragA kf[D / 16], vf[D / 16];
  loadRowsMma<T, D>(kf, sh.queries(1), warp, lane);
  loadRowsMma<T, D>(vf, sh.douts(1), warp, lane);
  __syncthreads(); // every warp has its rows before the buffers are refilled

  tc::FragC dkf[D / 8], dvf[D / 8];
  for (int n = 0; n < D / 8; ++n)
    dkf[n] = dvf[n] = tc::FragC{};
  // This lane's two keys: g (h = 0) and g + 8 (h = 1).
  const int64_t keyIndex[2] = {key0 + g, key0 + g + 8};

  int64_t qHead = head * groups, i0 = queryBegin; // of tile `tile`
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int buffer = static_cast<int>(tile & 1);
    const bool lastOfMember = i0 + kMmaKeys >= tq;
    __syncthreads(); // every warp is done with tile - 1, the other buffer
    if (tile + 1 < tiles)
      stageTile(1 - buffer, lastOfMember ? qHead + 1 : qHead,
                lastOfMember ? queryBegin : i0 + kMmaKeys);
    __pipeline_commit();
    if (threadIdx.x < kMmaKeys) {
      const int64_t i = i0 + threadIdx.x;
      sh.lse[threadIdx.x] = i < tq ? lse[qHead * tq + i] : 0.0f;
      sh.delta[threadIdx.x] = i < tq ? delta[qHead * tq + i] : 0.0f;
    }
    __pipeline_wait_prior(1); // this thread's words of this tile
    __syncthreads();          // and every thread's
    const T *queriesTile = sh.queries(buffer), *doutsTile = sh.douts(buffer);

    // s^T = k q^T and dp^T = v dout^T: 16 keys x 64 queries, [j] the
    // queries 8j .. 8j + 7.
    tc::FragC st[kMmaKeys / 8], dpt[kMmaKeys / 8];
    mmaTimesTileT<T, D>(st, kf, queriesTile, lane);
    mmaTimesTileT<T, D>(dpt, vf, doutsTile, lane);

    // p^T into st, ds^T into dpt. Query i0 + c sees key `key` for c in
    // [visibleBegin, visibleEnd) (c < tq - i0, key < tk, and when causal
    // c >= key - i0).
    for (int h = 0; h < 2; ++h) {
      const int64_t key = keyIndex[h];
      const int visibleBegin = causal ? tileColumns<kMmaKeys>(key - i0) : 0;
      const int visibleEnd = key < tk ? tileColumns<kMmaKeys>(tq - i0) : 0;
      for (int j = 0; j < kMmaKeys / 8; ++j)
        for (int e = 0; e < 2; ++e) {
          const int c = 8 * j + 2 * t + e;
          const bool visible = c >= visibleBegin && c < visibleEnd;
          float &p = st[j].r[2 * h + e];
          p = visible ? expf(p * scale - sh.lse[c]) : 0.0f;
          float &ds = dpt[j].r[2 * h + e];
          ds = p * (ds - sh.delta[c]);
        }
    }

    // dv += p^T dout, dk += ds^T q (scaled at the end).
    mmaAddTimesTile<T, D>(dvf, st, doutsTile, lane);
    mmaAddTimesTile<T, D>(dkf, dpt, queriesTile, lane);
    qHead = lastOfMember ? qHead + 1 : qHead;
    i0 = lastOfMember ? queryBegin : i0 + kMmaKeys;
  }
  __pipeline_wait_prior(0); // (the last group is empty)

  for (int h = 0; h < 2; ++h) {
    const int64_t key = keyIndex[h];
    if (key >= tk)
      continue;
    for (int n = 0; n < D / 8; ++n)
      for (int e = 0; e < 2; ++e) {
        const int64_t at = (head * tk + key) * D + 8 * n + 2 * t + e;
        dk[at] = T(dkf[n].r[2 * h + e] * scale);
        dv[at] = T(dvf[n].r[2 * h + e] * 1.0f);
      }
  }
}

template <typename T, int D> struct alignas(32) QueryBlockShared {
  // Two buffers of each (the tile in use and the next one, arriving).
  alignas(32) T keys[2][kKeys * kTileLd<D>];
  alignas(32) T values[2][kKeys * kTileLd<D>];
  // Per warp: s and dp (16 x 32 floats each; before the loop the warp's
  // query and dout rows; after it, dq on its way out, over both).
  alignas(32) float tiles[kWarps][2][kRowsPerWarp * kScoreLd];
  float rowFactor[kWarps][kRowsPerWarp]; // dq's scale
};

/// Per warp, 16 query rows of one head: dq.
template <typename T, int D>
__global__ void attentionQueriesKernel(const T *q, const T *k, const T *v,
                                       const T *dout, const float *lse,
                                       const float *delta, T *dq,
                                       int64_t groups, int64_t tq, int64_t tk,
                                       bool causal, float scale) {
  __shared__ QueryBlockShared<T, D> sh;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t head = blockIdx.x, kvHead = head / groups;
  const int64_t blockRow0 = rowBlock(causal) * kBlockRows;
  const int64_t row0 = blockRow0 + warp * kRowsPerWarp;
  const T *kh = k + kvHead * tk * D, *vh = v + kvHead * tk * D;
  float *s = sh.tiles[warp][0], *dp = sh.tiles[warp][1];

  stageRows<T, D>(reinterpret_cast<T *>(s), q + head * tq * D, row0,
                  kRowsPerWarp, tq, lane, kWarp);
  stageRows<T, D>(reinterpret_cast<T *>(dp), dout + head * tq * D, row0,
                  kRowsPerWarp, tq, lane, kWarp);
  __syncwarp();
  RowsFragment<T> qf[D / 16], df[D / 16];
  loadRows<T, D>(qf, reinterpret_cast<const T *>(s));
  loadRows<T, D>(df, reinterpret_cast<const T *>(dp));
  Accumulator dqf[D / 16];
  for (int n = 0; n < D / 16; ++n)
    wmma::fill_fragment(dqf[n], 0.0f);

  const int r = lane / 2, half = lane % 2;
  const int64_t qi = row0 + r;
  const float rowLse = qi < tq ? lse[head * tq + qi] : 0.0f;
  const float rowDelta = qi < tq ? delta[head * tq + qi] : 0.0f;
  const int64_t keysEnd =
      causal && blockRow0 + kBlockRows < tk ? blockRow0 + kBlockRows : tk;
  const int64_t tiles = (keysEnd + kKeys - 1) / kKeys;
  if (tiles > 0) {
    stageRowsAsync<T, D>(sh.keys[0], kh, 0, kKeys, tk, threadIdx.x, blockDim.x);
    stageRowsAsync<T, D>(sh.values[0], vh, 0, kKeys, tk, threadIdx.x,
                         blockDim.x);
  }
  __pipeline_commit();
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t j0 = t * kKeys;
    const int buffer = static_cast<int>(t & 1);
    __syncthreads(); // every warp is done with tile t - 1, the other buffer
    if (t + 1 < tiles) {
      stageRowsAsync<T, D>(sh.keys[1 - buffer], kh, j0 + kKeys, kKeys, tk,
                           threadIdx.x, blockDim.x);
      stageRowsAsync<T, D>(sh.values[1 - buffer], vh, j0 + kKeys, kKeys, tk,
                           threadIdx.x, blockDim.x);
    }
    __pipeline_commit();
    __pipeline_wait_prior(1); // this thread's words of tile t
    __syncthreads();          // and every thread's

    // s = q k^T and dp = dout v^T: 16 rows x 32 keys each.
    rowsTimesTileT<T, D>(qf, sh.keys[buffer], s);
    rowsTimesTileT<T, D>(df, sh.values[buffer], dp);
    __syncwarp();

    // Key j0 + c is visible to row qi for c < visibleEnd (qi < tq,
    // c < tk - j0, and when causal c <= qi - j0).
    const int visibleEnd =
        qi < tq ? tileColumns(causal && qi + 1 < tk ? qi + 1 - j0 : tk - j0)
                : 0;
    float ds[16];
    for (int i = 0; i < 16; ++i) {
      const int c = scoreColumn(r, half, i);
      const float p = c < visibleEnd
                          ? expf(s[r * kScoreLd + c] * scale - rowLse)
                          : 0.0f;
      ds[i] = p * (dp[r * kScoreLd + c] - rowDelta);
    }
    __syncwarp();
    T *dst = reinterpret_cast<T *>(s);
    for (int i = 0; i < 16; ++i)
      dst[r * kProbLd + scoreColumn(r, half, i)] = T(ds[i]);
    __syncwarp();

    // dq += ds k (scaled at the end).
    addTimesTile<T, D>(dqf, dst, sh.keys[buffer]);
    __syncwarp();
  }
  __pipeline_wait_prior(0); // (the last group is empty)

  __syncwarp(); // every lane is done with the tiles (the rows, if no tile ran)
  float *stage = sh.tiles[warp][0], *factor = sh.rowFactor[warp];
  storeRows<D>(stage, dqf);
  if (lane < kRowsPerWarp)
    factor[lane] = scale;
  __syncwarp();
  writeRows<T, D>(dq + head * tq * D, stage, factor, row0, tq, lane);
}

/// The queries kernel (dq) with s, dp and ds in registers (mma.sync): per
/// warp 16 query rows against key tiles of 64, the arithmetic per element
/// of attentionQueriesKernel (p = exp(scale s - lse), ds = p (dp - delta),
/// ds rounded to T for the product, float accumulators), the layouts of
/// attentionForwardMmaKernel (the keys and values as they are for s and
/// dp, the keys transposed for dq += ds k).
template <typename T, int D>
__global__ void __launch_bounds__(kWarps * kWarp)
attentionQueriesMmaKernel(const T *q, const T *k, const T *v, const T *dout,
                          const float *lse, const float *delta, T *dq,
                          int64_t groups, int64_t tq, int64_t tk, bool causal,
                          float scale) {
  __shared__ MmaForwardShared<T, D> sh; // keys and values, two buffers each
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int64_t head = blockIdx.x, kvHead = head / groups;
  const int64_t blockRow0 = rowBlock(causal) * kBlockRows;
  const int64_t row0 = blockRow0 + warp * kRowsPerWarp;
  const T *kh = k + kvHead * tk * D, *vh = v + kvHead * tk * D;

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

  // The block's query and dout rows through the second buffers into each
  // warp's A fragments.
  stageRows<T, D>(sh.keys(1), q + head * tq * D, blockRow0, kBlockRows, tq,
                  threadIdx.x, blockDim.x);
  stageRows<T, D>(sh.values(1), dout + head * tq * D, blockRow0, kBlockRows,
                  tq, threadIdx.x, blockDim.x);
  __syncthreads();
  tc::FragA qf[D / 16], df[D / 16];
  loadRowsMma<T, D>(qf, sh.keys(1), warp, lane);
  loadRowsMma<T, D>(df, sh.values(1), warp, lane);
  __syncthreads(); // every warp has its rows before the buffers are refilled

  tc::FragC dqf[D / 8];
  for (tc::FragC &a : dqf)
    a = tc::FragC{};
  // This lane's two rows: g (h = 0) and g + 8 (h = 1).
  const int64_t rowIndex[2] = {row0 + g, row0 + g + 8};
  float rowLse[2], rowDelta[2];
  for (int h = 0; h < 2; ++h) {
    rowLse[h] = rowIndex[h] < tq ? lse[head * tq + rowIndex[h]] : 0.0f;
    rowDelta[h] = rowIndex[h] < tq ? delta[head * tq + rowIndex[h]] : 0.0f;
  }

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

    // s = q k^T and dp = dout v^T: 16 rows x 64 keys, [j] the keys 8j ..
    // 8j + 7.
    tc::FragC sf[kMmaKeys / 8], dpf[kMmaKeys / 8];
    mmaTimesTileT<T, D>(sf, qf, keysTile, lane);
    mmaTimesTileT<T, D>(dpf, df, valuesTile, lane);

    // ds into dpf. Key j0 + c is visible to row i for c < visibleEnd
    // (i < tq, c < tk - j0, and when causal c <= i - j0).
    for (int h = 0; h < 2; ++h) {
      const int64_t qi = rowIndex[h];
      const int visibleEnd =
          qi < tq ? tileColumns<kMmaKeys>(causal && qi + 1 < tk ? qi + 1 - j0
                                                                : tk - j0)
                  : 0;
      for (int j = 0; j < kMmaKeys / 8; ++j)
        for (int e = 0; e < 2; ++e) {
          const int c = 8 * j + 2 * t + e;
          const float p = c < visibleEnd
                              ? expf(sf[j].r[2 * h + e] * scale - rowLse[h])
                              : 0.0f;
          float &ds = dpf[j].r[2 * h + e];
          ds = p * (ds - rowDelta[h]);
        }
    }

    // dq += ds k (scaled at the end).
    mmaAddTimesTile<T, D>(dqf, dpf, keysTile, lane);
  }
  __pipeline_wait_prior(0); // (the last group is empty)

  for (int h = 0; h < 2; ++h) {
    const int64_t qi = rowIndex[h];
    if (qi >= tq)
      continue;
    for (int n = 0; n < D / 8; ++n)
      for (int e = 0; e < 2; ++e)
        dq[(head * tq + qi) * D + 8 * n + 2 * t + e] =
            T(dqf[n].r[2 * h + e] * scale);
  }
}

template <typename T, int D>
void launchBackward(const T *dout, const T *q, const T *k, const T *v,
                    const T *out, const float *lse, T *dq, T *dk, T *dv,
                    int64_t heads, int64_t groups, int64_t tq, int64_t tk,
                    bool causal, float scale, cudaStream_t stream) {
  float *delta = static_cast<float *>(
      scratch(heads * tq * static_cast<int64_t>(sizeof(float)), stream,
              "attention_grad"));
  const int64_t rows = heads * tq;
  ZTRT_LAUNCH(blocksFor(rows * kWarp), kBlock, 0, stream,
              attentionDeltaKernel<T, D>)
  (dout, out, delta, rows);
  check(cudaGetLastError(), "attention_grad kernel launch");
  const dim3 keyGrid(static_cast<unsigned>(heads / groups),
                     static_cast<unsigned>((tk + kBlockRows - 1) / kBlockRows));
  if (mmaKernels()) {
    ZTRT_LAUNCH(keyGrid, kWarps * kWarp, 0, stream,
                attentionKeysMmaKernel<T, D>)
    (q, k, v, dout, lse, delta, dk, dv, groups, tq, tk, causal, scale);
  } else {
    ZTRT_LAUNCH(keyGrid, kWarps * kWarp, 0, stream, attentionKeysKernel<T, D>)
    (q, k, v, dout, lse, delta, dk, dv, groups, tq, tk, causal, scale);
  }
  check(cudaGetLastError(), "attention_grad kernel launch");
  const dim3 queryGrid(static_cast<unsigned>(heads),
                       static_cast<unsigned>((tq + kBlockRows - 1) / kBlockRows));
  if (mmaKernels()) {
    ZTRT_LAUNCH(queryGrid, kWarps * kWarp, 0, stream,
                attentionQueriesMmaKernel<T, D>)
    (q, k, v, dout, lse, delta, dq, groups, tq, tk, causal, scale);
  } else {
    ZTRT_LAUNCH(queryGrid, kWarps * kWarp, 0, stream,
                attentionQueriesKernel<T, D>)
    (q, k, v, dout, lse, delta, dq, groups, tq, tk, causal, scale);
  }
  check(cudaGetLastError(), "attention_grad kernel launch");
  release(delta, stream);
}

} // namespace

template <typename T>
bool attentionBackward(const T *dout, const T *q, const T *k, const T *v,
                       const T *out, const float *lse, T *dq, T *dk, T *dv,
                       int64_t heads, int64_t groups, int64_t tq, int64_t tk,
                       int64_t d, bool causal, float scale,
                       cudaStream_t stream) {
  if (!tiledShape(heads, tq, tk, d, dout, q, k, v, out, dq, dk, dv))
    return false;
  if (d == 64)
    launchBackward<T, 64>(dout, q, k, v, out, lse, dq, dk, dv, heads, groups,
                          tq, tk, causal, scale, stream);
  else
    launchBackward<T, 32>(dout, q, k, v, out, lse, dq, dk, dv, heads, groups,
                          tq, tk, causal, scale, stream);
  return true;
}

#define ZTRT_INSTANTIATE(T)                                                    \
  template bool attentionBackward<T>(const T *, const T *, const T *,         \
                                     const T *, const T *, const float *, T *, \
                                     T *, T *, int64_t, int64_t, int64_t,     \
                                     int64_t, int64_t, bool, float,           \
                                     cudaStream_t);
ZTRT_INSTANTIATE(bf16)
ZTRT_INSTANTIATE(f16)
#undef ZTRT_INSTANTIATE

} // namespace ztrt::cuda
