//===- AttentionTiles.cuh - Tiled attention's shared tiles -----*- CUDA -*-===//
//
// Part of ztrain's runtime (private: not installed). What the tiled
// tensor-core attention kernels of AttentionForward.cu and
// AttentionBackward.cu share: the block and tile shapes, the padded
// shared-memory layouts, staging rows into tiles (cp.async), the wmma and
// mma.sync fragment products, writing rows out, the choice between the
// wmma and the mma.sync kernels, and which shapes the kernels take. In an
// anonymous namespace, as in the original single file: each of the two
// files its own copy.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CUDA_ATTENTIONTILES_CUH
#define ZTRT_BACKENDS_CUDA_ATTENTIONTILES_CUH

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

// --- mma.sync tiles (AttentionForward.cu's register-resident forward, where
// they are described, and AttentionBackward.cu's mma.sync kernels) ----------
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

/// The kernels a launch uses: the wmma ones, or with
/// ZTRT_CUDA_ATTENTION_KERNEL=mma the register-resident ones (forward, keys
/// and queries; not yet measured on a GPU: docs/cuda.md). Read at every
/// launch, so that a test can switch.
inline bool mmaKernels() {
  const char *kind = std::getenv("ZTRT_CUDA_ATTENTION_KERNEL");
  return kind && std::strcmp(kind, "mma") == 0;
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

} // namespace ztrt::cuda

#endif // ZTRT_BACKENDS_CUDA_ATTENTIONTILES_CUH
