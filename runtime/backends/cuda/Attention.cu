//===- Attention.cu - Tiled tensor-core attention ----------------*- CUDA -*-===//
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
//===----------------------------------------------------------------------===//

#include "backends/cuda/DeviceUtil.cuh"
#include "backends/cuda/TensorCore.cuh"

#include <cuda_pipeline.h>
#include <mma.h>
#ifndef ZTRT_CUDA_EMULATOR
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace ztrt::cuda {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kRowsPerWarp = 16; // one fragment's rows
constexpr int kWarps = 4;
constexpr int kBlockRows = kRowsPerWarp * kWarps;
constexpr int kKeys = 32; // keys per tile: two fragments' columns

/// The element type the tensor-core fragments name: CUDA's own bf16 / half
/// (layout-identical to ztrt's storage types); the emulator takes ztrt's.
#ifdef ZTRT_CUDA_EMULATOR
template <typename T> using MmaType = T;
#else
template <typename T>
using MmaType =
    std::conditional_t<std::is_same_v<T, bf16>, __nv_bfloat16, __half>;
#endif

// Shared-memory layouts. A GPU's shared memory has 32 banks of 4 bytes; a
// warp's access is as slow as the most requests one bank gets. Unpadded,
// every tile here has rows a multiple of 128 bytes apart (64 for the
// 16-bit probabilities), so the 16 rows a fragment load or the softmax
// loop touches all start in the same bank: up to 16-way conflicts
// (measured on an H100: the forward at 7 TFLOP/s, docs/cuda.md). Each row
// is padded by 16 bytes, so that 8 consecutive rows start in 8 different
// groups of 4 banks (rows of 144 or 272 bytes: 4 banks apart; of 80 bytes:
// 20 apart), which the 8-row reads of a fragment load (16 bytes per row)
// then spread over all 32 banks; the softmax loops also rotate each lane's
// columns (scoreColumn). Left: the 16-bit stores of the probabilities are
// 2-way conflicts, and a float accumulator store is two wavefronts.
template <int D> constexpr int kTileLd = D + 8; // T elements: +16 bytes
constexpr int kScoreLd = kKeys + 4;             // floats: +16 bytes
constexpr int kProbLd = kKeys + 8;              // T elements, in place of scores
template <int D> constexpr int kOutLd = D + 4;  // floats: +16 bytes

/// Column of a score tile that lane pair (2r, 2r + 1)'s lane `half` visits
/// at step i of 16: the lanes' 16-column windows rotated by r / 4, so that
/// at each step the 32 lanes read 32 different banks of rows kScoreLd
/// floats apart (bank 4r + 16 half + i + r / 4, distinct over r < 16 and
/// half < 2), instead of 16 lanes in one bank.
__device__ inline int scoreColumn(int r, int half, int i) {
  return (half * 16 + i + r / 4) & (kKeys - 1);
}

/// A column bound of a tile of `Width` columns, from an int64 position
/// difference, clamped to [0, Width]: the masks are then one int compare
/// per element.
template <int Width = kKeys> __device__ inline int tileColumns(int64_t v) {
  return static_cast<int>(v < 0 ? 0 : v > Width ? Width : v);
}

/// The block of 64 query rows this block takes. The grids are (heads,
/// row blocks), and blocks start roughly in launch order (x fastest), so
/// every head's block y starts before any head's block y + 1; when causal
/// the last row blocks, which see the most keys, go first, and the short
/// ones fill the tail.
__device__ inline int64_t rowBlock(bool causal) {
  return causal ? static_cast<int64_t>(gridDim.y) - 1 - blockIdx.y
                : static_cast<int64_t>(blockIdx.y);
}

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

/// The 16-byte words of rows [row0, row0 + rows) of a [n, D] head and
/// their places in a staged tile (rows kTileLd<D> apart): `word(from, to,
/// inside)` for each word this thread (`rank` of `threads`) moves, `from`
/// its source (the head's first row when the row is at or past n, which
/// exists whenever a tile is staged, and is then not read), `inside`
/// whether the row is before n.
template <typename T, int D, typename Word>
__device__ void forEachRowWord(T *dst, const T *src, int64_t row0, int rows,
                               int64_t n, int rank, int threads, Word word) {
  constexpr int kPerWord = 16 / sizeof(T);
  constexpr int kRowWords = D / kPerWord, kLdWords = kTileLd<D> / kPerWord;
  using P = Pack<T>;
  for (int w = rank; w < rows * kRowWords; w += threads) {
    const int r = w / kRowWords, c = w % kRowWords;
    const bool inside = row0 + r < n;
    word(reinterpret_cast<const P *>(src + (inside ? row0 + r : 0) * D) + c,
         reinterpret_cast<P *>(dst) + r * kLdWords + c, inside);
  }
}

/// Rows [row0, row0 + rows) of a [n, D] head into `dst` (rows x D, rows
/// kTileLd<D> apart), zeros for rows at or past n; `threads` threads from
/// `rank`, 16 bytes each.
template <typename T, int D>
__device__ void stageRows(T *dst, const T *src, int64_t row0, int rows,
                          int64_t n, int rank, int threads) {
  forEachRowWord<T, D>(dst, src, row0, rows, n, rank, threads,
                       [](const Pack<T> *from, Pack<T> *to, bool inside) {
                         Pack<T> word;
                         if (inside) {
                           word = *from;
                         } else {
                           for (int e = 0; e < Pack<T>::kSize; ++e)
                             word.v[e] = T(0.0f);
                         }
                         *to = word;
                       });
}

/// stageRows without waiting: each 16-byte word is an asynchronous copy
/// (cp.async; rows at or past n are zero-filled, nothing read), in the
/// caller's next commit group, in shared memory once a
/// __pipeline_wait_prior completes that group (and, for other threads'
/// words, after a barrier). The tiles that stream through the kernels'
/// loops are copied this way one tile ahead, into the second of two
/// buffers, so that the loads of tile t + 1 overlap the products of tile t.
template <typename T, int D>
__device__ void stageRowsAsync(T *dst, const T *src, int64_t row0, int rows,
                               int64_t n, int rank, int threads) {
  forEachRowWord<T, D>(dst, src, row0, rows, n, rank, threads,
                       [](const Pack<T> *from, Pack<T> *to, bool inside) {
                         __pipeline_memcpy_async(to, from, sizeof(Pack<T>),
                                                 inside ? 0 : sizeof(Pack<T>));
                       });
}

template <typename T>
using RowsFragment =
    wmma::fragment<wmma::matrix_a, 16, 16, 16, MmaType<T>, wmma::row_major>;
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// A warp's 16 staged rows (16 x D of T, rows kTileLd<D> apart) as D / 16
/// fragments.
template <typename T, int D>
__device__ void loadRows(RowsFragment<T> (&rows)[D / 16], const T *staged) {
  for (int kk = 0; kk < D / 16; ++kk)
    wmma::load_matrix_sync(
        rows[kk], reinterpret_cast<const MmaType<T> *>(staged) + kk * 16,
        kTileLd<D>);
}

/// out (16 x kKeys floats, rows kScoreLd apart) = rows times the transpose
/// of `tile` (kKeys x D of T, staged): 16 rows against a tile of 32, in
/// float.
template <typename T, int D>
__device__ void rowsTimesTileT(const RowsFragment<T> (&rows)[D / 16],
                               const T *tile, float *out) {
  for (int n = 0; n < kKeys / 16; ++n) {
    Accumulator acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < D / 16; ++kk) {
      // tile^T: element (d, j) of the [D, kKeys] operand is tile[j][d].
      wmma::fragment<wmma::matrix_b, 16, 16, 16, MmaType<T>, wmma::col_major>
          b;
      wmma::load_matrix_sync(b,
                             reinterpret_cast<const MmaType<T> *>(tile) +
                                 n * 16 * kTileLd<D> + kk * 16,
                             kTileLd<D>);
      wmma::mma_sync(acc, rows[kk], b, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, kScoreLd, wmma::mem_row_major);
  }
}

/// acc (16 x D) += a (16 x kKeys of T, rows kProbLd apart) times tile
/// (kKeys x D of T, staged), each accumulator in k order.
template <typename T, int D>
__device__ void addTimesTile(Accumulator (&acc)[D / 16], const T *a,
                             const T *tile) {
  using M = MmaType<T>;
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    RowsFragment<T> af;
    wmma::load_matrix_sync(af, reinterpret_cast<const M *>(a) + kk * 16,
                           kProbLd);
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, M, wmma::row_major> b;
      wmma::load_matrix_sync(b,
                             reinterpret_cast<const M *>(tile) +
                                 kk * 16 * kTileLd<D> + n * 16,
                             kTileLd<D>);
      wmma::mma_sync(acc[n], af, b, acc[n]);
    }
  }
}

/// The accumulators into 16 x D floats, rows kOutLd<D> apart.
template <int D>
__device__ void storeRows(float *out, const Accumulator (&acc)[D / 16]) {
  for (int n = 0; n < D / 16; ++n)
    wmma::store_matrix_sync(out + n * 16, acc[n], kOutLd<D>,
                            wmma::mem_row_major);
}

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

/// 16 rows x D of float staged in `rows` (kOutLd<D> apart), each times
/// factor[row], into rows row0.. of a [n, D] head as T: the warp's lanes
/// over consecutive columns (conflict-free reads, coalesced writes).
template <typename T, int D>
__device__ void writeRows(T *dst, const float *rows, const float *factor,
                          int64_t row0, int64_t n, int lane) {
  for (int e = lane; e < kRowsPerWarp * D; e += kWarp) {
    const int r = e / D, c = e % D;
    if (row0 + r < n)
      dst[(row0 + r) * D + c] = T(rows[r * kOutLd<D> + c] * factor[r]);
  }
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

constexpr int kMmaKeys = 64; // keys per tile

template <typename T, int D> struct alignas(16) MmaForwardShared {
  static_assert(D % 32 == 0, "the loops take d in pairs of 16");
  static constexpr int kTile = kMmaKeys * kTileLd<D>;
  // Two buffers of keys, then two of values; before the loop the second
  // value buffer holds the block's query rows. (Bytes: T's default member
  // initializer would make a shared T array dynamically initialized.)
  alignas(16) unsigned char bytes[4 * kTile * sizeof(T)];
  __device__ T *keys(int buffer) {
    return reinterpret_cast<T *>(bytes) + buffer * kTile;
  }
  __device__ T *values(int buffer) {
    return reinterpret_cast<T *>(bytes) + (2 + buffer) * kTile;
  }
};

/// The A operand of a 16 x 16 product from two 16 x 8 accumulators (the
/// columns 0-7 and 8-15 of a 16 x 16 tile), each element rounded to T:
/// the C layout of two adjacent products is the A layout (TensorCore.cuh).
template <typename T>
__device__ inline tc::FragA rowsAsA(const tc::FragC &lo, const tc::FragC &hi) {
  return tc::FragA{{tc::pack<T>(lo.r[0], lo.r[1]), tc::pack<T>(lo.r[2], lo.r[3]),
                    tc::pack<T>(hi.r[0], hi.r[1]), tc::pack<T>(hi.r[2], hi.r[3])}};
}

/// out = a times the transpose of `tile`: a warp's 16 rows (a, 16 x D as A
/// fragments) against the 64 staged rows of `tile` (64 x D of T, rows
/// kTileLd<D> apart), 16 x 64 floats, out[j] the tile's rows 8j .. 8j + 7.
/// The B operand (d x row) is the tile's rows as they are: ldmatrix .x4 of
/// (rows 8j..8j+7) x (d 16kk + 0-7, + 8-15, 16(kk+1) + 0-7, + 8-15) is b0,
/// b1 of kk and of kk + 1.
template <typename T, int D>
__device__ void mmaTimesTileT(tc::FragC (&out)[kMmaKeys / 8],
                              const tc::FragA (&a)[D / 16], const T *tile,
                              int lane) {
  const int mRow = lane % 8, mIndex = lane / 8;
  for (int j = 0; j < kMmaKeys / 8; ++j) {
    out[j] = tc::FragC{};
    for (int kk = 0; kk < D / 16; kk += 2) {
      uint32_t b[4];
      tc::ldmatrixX4(b, tile + (8 * j + mRow) * kTileLd<D> + 16 * kk +
                            8 * mIndex);
      tc::mma<T>(out[j], a[kk], tc::FragB{{b[0], b[1]}}, out[j]);
      tc::mma<T>(out[j], a[kk + 1], tc::FragB{{b[2], b[3]}}, out[j]);
    }
  }
}

/// acc (16 x D floats, acc[n] the columns 8n .. 8n + 7) += p times `tile`:
/// p a warp's 16 x 64 accumulators, rounded to T pairwise as the A
/// operand, 16 columns at a time; the B operand (row x d) through
/// ldmatrix .trans: .x4 of (rows 16kk + 0-7 | 8-15) x (d 8n + 0-7 |
/// 8(n+1) + 0-7) is b0, b1 of n and of n + 1.
template <typename T, int D>
__device__ void mmaAddTimesTile(tc::FragC (&acc)[D / 8],
                                const tc::FragC (&p)[kMmaKeys / 8],
                                const T *tile, int lane) {
  const int mRow = lane % 8, mIndex = lane / 8;
  for (int kk = 0; kk < kMmaKeys / 16; ++kk) {
    const tc::FragA pf = rowsAsA<T>(p[2 * kk], p[2 * kk + 1]);
    for (int n = 0; n < D / 8; n += 2) {
      uint32_t b[4];
      tc::ldmatrixX4Trans(b, tile + (16 * kk + 8 * (mIndex % 2) + mRow) *
                                        kTileLd<D> +
                                 8 * (n + mIndex / 2));
      tc::mma<T>(acc[n], pf, tc::FragB{{b[0], b[1]}}, acc[n]);
      tc::mma<T>(acc[n + 1], pf, tc::FragB{{b[2], b[3]}}, acc[n + 1]);
    }
  }
}

/// A warp's 16 rows of a block's 64 staged rows (`staged`, rows
/// kTileLd<D> apart) as A fragments: ldmatrix .x4 of (rows 0-7 | 8-15) x
/// (columns 16kk + 0-7 | 8-15), in A's register order.
template <typename T, int D>
__device__ void loadRowsMma(tc::FragA (&rows)[D / 16], const T *staged,
                            int warp, int lane) {
  const int mRow = lane % 8, mIndex = lane / 8;
  for (int kk = 0; kk < D / 16; ++kk)
    tc::ldmatrixX4(rows[kk].r, staged + (warp * kRowsPerWarp + mRow +
                                         8 * (mIndex % 2)) *
                                            kTileLd<D> +
                                   16 * kk + 8 * (mIndex / 2));
}

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

/// The kernels a launch uses: the wmma ones, or with
/// ZTRT_CUDA_ATTENTION_KERNEL=mma the register-resident ones (forward, keys
/// and queries; not yet measured on a GPU: docs/cuda.md). Read at every
/// launch, so that a test can switch.
inline bool mmaKernels() {
  const char *kind = std::getenv("ZTRT_CUDA_ATTENTION_KERNEL");
  return kind && std::strcmp(kind, "mma") == 0;
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

/// Whether the tiled kernels take this shape: a head dim they have, grids
/// within CUDA's limits, and 16-byte aligned tensors (their rows are
/// staged 16 bytes at a time; the memory plan may pack a buffer tighter).
template <typename... P>
bool tiledShape(int64_t heads, int64_t tq, int64_t tk, int64_t d,
                P... tensors) {
  constexpr int64_t kMaxGridY = 65535;
  constexpr int64_t kMaxGridX = (int64_t(1) << 31) - 1;
  return (d == 32 || d == 64) && heads > 0 && heads <= kMaxGridX &&
         tq > 0 && tk > 0 &&
         (tq + kBlockRows - 1) / kBlockRows <= kMaxGridY &&
         (tk + kBlockRows - 1) / kBlockRows <= kMaxGridY &&
         aligned16(tensors...);
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

template bool attentionForward<bf16>(const bf16 *, const bf16 *, const bf16 *,
                                     bf16 *, float *, int64_t, int64_t,
                                     int64_t, int64_t, int64_t, bool, float,
                                     cudaStream_t);
template bool attentionForward<f16>(const f16 *, const f16 *, const f16 *,
                                    f16 *, float *, int64_t, int64_t, int64_t,
                                    int64_t, int64_t, bool, float,
                                    cudaStream_t);

} // namespace ztrt::cuda
