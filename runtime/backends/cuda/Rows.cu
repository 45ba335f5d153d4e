//===- Rows.cu - Layer norm, RMS norm, softmax, cross-entropy -----------===//
//
// Part of ztrain's runtime (cuda backend). Per-row statistics in double,
// rounded once, with the cpu backend's formulas (backends/cpu/CpuRows.cpp, CpuLosses.cpp); only
// the order of the double sums differs (a block or warp tree instead of a
// serial loop), which changes a float result only when the double sums
// round to different floats. exp and log are CUDA's (within 1-2 ulp of
// glibc's; the cpu's softmax uses vecmath::expShifted, a few ulp), the one
// other source of difference.
//
// Geometry: layer norm and RMS norm use a block per row (rows are the model
// width, hundreds to thousands of columns); softmax and cross-entropy a warp
// per row (attention rows are the sequence length). Column sums over rows
// (dgamma, dbeta) and the mean over rows of cross-entropy are two-stage:
// fixed chunks of rows, then the chunks in order. Everything is a fixed
// tree for given sizes: deterministic.
//
// Element types: inputs are loaded as float (ldf) or float widened to double
// (ldd); each output element is stored once, as the float the f32 kernel
// stores, rounded to T. Softmax never keeps an intermediate in y (it
// computes each exponential again for the store), so no T rounding sits
// between two float steps. The loss of cross-entropy and its dloss are one
// float whatever T.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/DeviceUtil.cuh"
#include "ztrt.h" // ZTRT_NO_IGNORE_INDEX

#include <cmath>

namespace ztrt::cuda {

namespace {

template <typename T> __device__ __forceinline__ double ldd(const T &v) {
  return static_cast<double>(static_cast<float>(v));
}
template <typename T> __device__ __forceinline__ float ldf(const T &v) {
  return static_cast<float>(v);
}

constexpr int kRowsPerBlock = kBlock / kWarp;

/// The row handled by this warp in a warp-per-row launch.
__device__ __forceinline__ int64_t warpRow() {
  return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
}

inline unsigned warpRowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

/// The threads that work on one row of a norm kernel. Rows of up to
/// kWarpRowCols elements go to one warp each (eight rows per block): the
/// row sums are warp shuffles, with no __syncthreads. Longer rows get a
/// block each. A block per row of GPT-2 small's 768 took 41 us per layer
/// norm of 8192 rows on an H100, five times its memory traffic's time,
/// waiting on the block's barriers (docs/cuda.md, "Where the time goes").
/// Both sum each row in double in a fixed tree, so either is deterministic
/// and within the cpu's serial double sum's last float bit.
constexpr int64_t kWarpRowCols = 1024;

struct BlockTeam {
  int64_t row;
  __device__ BlockTeam() : row(blockIdx.x) {}
  __device__ int rank() const { return threadIdx.x; }
  __device__ int size() const { return blockDim.x; }
  __device__ double sum(double v, double *shared) const {
    return blockSum(v, shared);
  }
};

struct WarpTeam {
  int64_t row;
  __device__ WarpTeam() : row(warpRow()) {}
  __device__ int rank() const { return threadIdx.x % kWarp; }
  __device__ int size() const { return kWarp; }
  __device__ double sum(double v, double *) const { return warpSum(v); }
};

/// Mean and 1/sqrt(biased variance + eps) of a row, two-pass in double (the
/// cpu's rowMoments); every thread of the team gets them.
template <typename Team, typename T>
__device__ void rowMoments(const Team &team, const T *xr, int64_t cols,
                           double eps, double *shared, double &mean,
                           double &rstd) {
  double sum = 0.0;
  for (int64_t c = team.rank(); c < cols; c += team.size())
    sum += ldd(xr[c]);
  mean = team.sum(sum, shared) / cols;
  double sq = 0.0;
  for (int64_t c = team.rank(); c < cols; c += team.size()) {
    double d = ldd(xr[c]) - mean;
    sq += d * d;
  }
  rstd = 1.0 / sqrt(team.sum(sq, shared) / cols + eps);
}

template <typename Team, typename T>
__global__ void layerNormKernel(const T *x, const T *gamma, const T *beta, T *y,
                                int64_t rows, int64_t cols, double eps) {
  __shared__ double shared[kWarp];
  const Team team;
  if (team.row >= rows)
    return; // A whole warp (rows are warp-uniform) or, for blocks, none.
  const int64_t row = team.row;
  const T *xr = x + row * cols;
  T *yr = y + row * cols;
  double mean, rstd;
  rowMoments(team, xr, cols, eps, shared, mean, rstd);
  for (int64_t c = team.rank(); c < cols; c += team.size())
    yr[c] = static_cast<T>(static_cast<float>(
        (ldd(xr[c]) - mean) * rstd * ldd(gamma[c]) + ldd(beta[c])));
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma; the
// row's mean and rstd are kept for the column sums.
template <typename Team, typename T>
__global__ void layerNormGradRowsKernel(const T *dy, const T *x, const T *gamma,
                                        T *dx, double *stats, int64_t rows,
                                        int64_t cols, double eps) {
  __shared__ double shared[kWarp];
  const Team team;
  if (team.row >= rows)
    return; // A whole warp (rows are warp-uniform) or, for blocks, none.
  const int64_t row = team.row;
  const T *xr = x + row * cols, *dyr = dy + row * cols;
  double mean, rstd;
  rowMoments(team, xr, cols, eps, shared, mean, rstd);
  double sumG = 0.0, sumGX = 0.0;
  for (int64_t c = team.rank(); c < cols; c += team.size()) {
    double g = ldd(dyr[c]) * ldd(gamma[c]);
    sumG += g;
    sumGX += g * (ldd(xr[c]) - mean) * rstd;
  }
  const double meanG = team.sum(sumG, shared) / cols;
  const double meanGX = team.sum(sumGX, shared) / cols;
  for (int64_t c = team.rank(); c < cols; c += team.size()) {
    double g = ldd(dyr[c]) * ldd(gamma[c]);
    double xhat = (ldd(xr[c]) - mean) * rstd;
    dx[row * cols + c] =
        static_cast<T>(static_cast<float>(rstd * (g - meanG - xhat * meanGX)));
  }
  if (team.rank() == 0) {
    stats[2 * row] = mean;
    stats[2 * row + 1] = rstd;
  }
}

// Column sums of dy * xhat and dy over a chunk of rows, in row order.
template <typename T>
__global__ void layerNormGradColumnsKernel(const T *dy, const T *x,
                                           const double *stats, double *partial,
                                           int64_t rows, int64_t cols,
                                           int64_t chunkRows) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (c >= cols)
    return;
  const int64_t begin = chunk * chunkRows;
  const int64_t end = min(rows, begin + chunkRows);
  double sumGamma = 0.0, sumBeta = 0.0;
  for (int64_t r = begin; r < end; ++r) {
    double d = ldd(dy[r * cols + c]);
    sumGamma += d * ((ldd(x[r * cols + c]) - stats[2 * r]) * stats[2 * r + 1]);
    sumBeta += d;
  }
  const int64_t chunks = gridDim.y;
  partial[chunk * cols + c] = sumGamma;
  partial[(chunks + chunk) * cols + c] = sumBeta;
}

// v[0] + v[stride] + ... + v[(count - 1) stride], added in that order. The
// loads of a group are issued before its additions, so a thread waits for
// memory once per group rather than once per term: these kernels have a
// thread per column only (768 threads for GPT-2 small's width), and one
// load in flight per thread left an H100 idle for 0.15 ms per call.
__device__ __forceinline__ double sumInOrder(const double *v, int64_t stride,
                                             int64_t count) {
  constexpr int kGroup = 16;
  double sum = 0.0;
  int64_t k = 0;
  for (; k + kGroup <= count; k += kGroup) {
    double terms[kGroup];
    ZTRT_UNROLL
    for (int j = 0; j < kGroup; ++j)
      terms[j] = v[(k + j) * stride];
    ZTRT_UNROLL
    for (int j = 0; j < kGroup; ++j)
      sum += terms[j];
  }
  for (; k < count; ++k)
    sum += v[k * stride];
  return sum;
}

template <typename T>
__global__ void layerNormGradFinishKernel(const double *partial, T *dgamma,
                                          T *dbeta, int64_t cols,
                                          int64_t chunks) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols)
    return;
  const double sumGamma = sumInOrder(partial + c, cols, chunks);
  const double sumBeta = sumInOrder(partial + chunks * cols + c, cols, chunks);
  dgamma[c] = static_cast<T>(static_cast<float>(sumGamma));
  dbeta[c] = static_cast<T>(static_cast<float>(sumBeta));
}

/// 1 / sqrt(mean(x^2) + eps) of a row in double (the cpu's rowRstd: each
/// square is exact in double); every thread of the team gets it.
template <typename Team, typename T>
__device__ double rowRstd(const Team &team, const T *xr, int64_t cols,
                          double eps, double *shared) {
  double sq = 0.0;
  for (int64_t c = team.rank(); c < cols; c += team.size())
    sq += ldd(xr[c]) * ldd(xr[c]);
  return 1.0 / sqrt(team.sum(sq, shared) / cols + eps);
}

template <typename Team, typename T>
__global__ void rmsNormKernel(const T *x, const T *gamma, T *y, int64_t rows,
                              int64_t cols, double eps) {
  __shared__ double shared[kWarp];
  const Team team;
  if (team.row >= rows)
    return; // A whole warp (rows are warp-uniform) or, for blocks, none.
  const int64_t row = team.row;
  const T *xr = x + row * cols;
  T *yr = y + row * cols;
  const double rstd = rowRstd(team, xr, cols, eps, shared);
  for (int64_t c = team.rank(); c < cols; c += team.size())
    yr[c] =
        static_cast<T>(static_cast<float>(ldd(xr[c]) * rstd * ldd(gamma[c])));
}

// dx = rstd * (g - xhat * mean(g * xhat)), g = dy * gamma, xhat = x * rstd;
// the row's rstd is kept for the column sums.
template <typename Team, typename T>
__global__ void rmsNormGradRowsKernel(const T *dy, const T *x, const T *gamma,
                                      T *dx, double *rstds, int64_t rows,
                                      int64_t cols, double eps) {
  __shared__ double shared[kWarp];
  const Team team;
  if (team.row >= rows)
    return; // A whole warp (rows are warp-uniform) or, for blocks, none.
  const int64_t row = team.row;
  const T *xr = x + row * cols, *dyr = dy + row * cols;
  const double rstd = rowRstd(team, xr, cols, eps, shared);
  double sumGX = 0.0;
  for (int64_t c = team.rank(); c < cols; c += team.size())
    sumGX += ldd(dyr[c]) * ldd(gamma[c]) * ldd(xr[c]) * rstd;
  const double meanGX = team.sum(sumGX, shared) / cols;
  for (int64_t c = team.rank(); c < cols; c += team.size()) {
    double g = ldd(dyr[c]) * ldd(gamma[c]);
    double xhat = ldd(xr[c]) * rstd;
    dx[row * cols + c] =
        static_cast<T>(static_cast<float>(rstd * (g - xhat * meanGX)));
  }
  if (team.rank() == 0)
    rstds[row] = rstd;
}

// Column sums of dy * xhat over a chunk of rows, in row order.
template <typename T>
__global__ void rmsNormGradColumnsKernel(const T *dy, const T *x,
                                         const double *rstds, double *partial,
                                         int64_t rows, int64_t cols,
                                         int64_t chunkRows) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (c >= cols)
    return;
  const int64_t begin = chunk * chunkRows;
  const int64_t end = min(rows, begin + chunkRows);
  double sum = 0.0;
  for (int64_t r = begin; r < end; ++r)
    sum += ldd(dy[r * cols + c]) * (ldd(x[r * cols + c]) * rstds[r]);
  partial[chunk * cols + c] = sum;
}

template <typename T>
__global__ void rmsNormGradFinishKernel(const double *partial, T *dgamma,
                                        int64_t cols, int64_t chunks) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols)
    return;
  const double sum = sumInOrder(partial + c, cols, chunks);
  dgamma[c] = static_cast<T>(static_cast<float>(sum));
}

// Causal: row i of each [cols x cols] block sees entries 0..i; the rest are
// exactly 0. exp in float, the row sum in double, then one float scale.
// With lse, also each row's max + log(sum), rounded once to float.
template <typename T>
__global__ void softmaxKernel(const T *x, T *y, int64_t rows, int64_t cols,
                              bool causal, float *lse) {
  const int64_t row = warpRow();
  if (row >= rows)
    return; // The whole warp: rows are warp-uniform.
  const int lane = threadIdx.x % kWarp;
  const T *xr = x + row * cols;
  T *yr = y + row * cols;
  const int64_t visible = causal ? row % cols + 1 : cols;
  float max = -INFINITY;
  for (int64_t j = lane; j < visible; j += kWarp)
    max = fmaxf(max, ldf(xr[j]));
  max = warpMax(max);
  double sum = 0.0;
  for (int64_t j = lane; j < visible; j += kWarp)
    sum += static_cast<double>(expf(ldf(xr[j]) - max));
  sum = warpSum(sum);
  if (lse && lane == 0)
    lse[row] = static_cast<float>(static_cast<double>(max) + log(sum));
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = lane; j < cols; j += kWarp)
    yr[j] = static_cast<T>(j < visible ? expf(ldf(xr[j]) - max) * inv : 0.0f);
}

template <typename T>
__global__ void softmaxGradKernel(const T *dy, const T *y, T *dx, int64_t rows,
                                  int64_t cols) {
  const int64_t row = warpRow();
  if (row >= rows)
    return;
  const int lane = threadIdx.x % kWarp;
  const T *dyr = dy + row * cols, *yr = y + row * cols;
  double dot = 0.0;
  for (int64_t j = lane; j < cols; j += kWarp)
    dot += ldd(dyr[j]) * ldd(yr[j]);
  const float d = static_cast<float>(warpSum(dot));
  for (int64_t j = lane; j < cols; j += kWarp)
    dx[row * cols + j] = static_cast<T>(ldf(yr[j]) * (ldf(dyr[j]) - d));
}

/// log(sum(exp(x))) of a row in double, max-shifted (the cpu's
/// logSumExp); every lane of the warp gets it.
template <typename T>
__device__ double warpLogSumExp(const T *xr, int64_t n, int lane) {
  float max = -INFINITY;
  for (int64_t j = lane; j < n; j += kWarp)
    max = fmaxf(max, ldf(xr[j]));
  max = warpMax(max);
  double sum = 0.0;
  for (int64_t j = lane; j < n; j += kWarp)
    sum += exp(ldd(xr[j]) - static_cast<double>(max));
  return static_cast<double>(max) + log(warpSum(sum));
}

/// One row of cross_entropy_grad from its log-sum-exp:
/// dloss / count * (softmax - onehot), p in double, rounded once.
template <typename T>
__device__ void crossEntropyGradRow(const T *xr, T *dr, int64_t classes,
                                    double lse, int32_t label, double scale,
                                    int lane) {
  for (int64_t j = lane; j < classes; j += kWarp) {
    double p = exp(ldd(xr[j]) - lse);
    dr[j] = static_cast<T>(
        static_cast<float>((p - (j == label ? 1.0 : 0.0)) * scale));
  }
}

/// How many rows count (are not labelled `ignore`), as a double (exact up
/// to 2^53): one block, each thread a strided share, then the block tree.
__global__ void countRowsKernel(const int32_t *labels, int64_t rows,
                                int64_t ignore, double *count) {
  __shared__ double shared[kWarp];
  double n = 0.0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x)
    n += labels[i] != ignore ? 1.0 : 0.0;
  n = blockSum(n, shared);
  if (threadIdx.x == 0)
    count[0] = n;
}

/// The divisor of the mean: the rows that count (countRowsKernel's), or
/// all of them when none is ignored (`count` null).
__device__ double meanDivisor(const double *count, int64_t rows) {
  return count ? count[0] : static_cast<double>(rows);
}

/// Each row's loss term (lse - x[label]) and, with dlogits, its gradient
/// row from the same log-sum-exp (cross_entropy_with_grad: train-fuse-loss).
/// An ignored row's term and gradient row are zero (the whole warp returns
/// together: the row is the warp's).
template <typename T>
__global__ void crossEntropyRowsKernel(const T *logits, const int32_t *labels,
                                       double *rowLoss, int64_t rows,
                                       int64_t classes, ErrorSlot *error,
                                       const float *dloss, T *dlogits,
                                       int64_t ignore, const double *count) {
  const int64_t row = warpRow();
  if (row >= rows)
    return;
  const int lane = threadIdx.x % kWarp;
  const T *xr = logits + row * classes;
  const int32_t label = labels[row];
  if (label == ignore) {
    if (lane == 0)
      rowLoss[row] = 0.0;
    if (dlogits)
      for (int64_t j = lane; j < classes; j += kWarp)
        dlogits[row * classes + j] = static_cast<T>(0.0f);
    return;
  }
  const double lse = warpLogSumExp(xr, classes, lane);
  const bool valid = label >= 0 && label < classes;
  if (lane == 0) {
    if (!valid)
      recordError(error, row, label);
    rowLoss[row] = valid ? lse - ldd(xr[label]) : 0.0;
  }
  if (dlogits)
    crossEntropyGradRow(
        xr, dlogits + row * classes, classes, lse, label,
        static_cast<double>(dloss[0]) / meanDivisor(count, rows), lane);
}

// Mean over rows: one block, each thread a strided share in row order, then
// the block tree. The loss is one float whatever the logits' type. Ignored
// rows hold 0.0 and are not in `count`.
__global__ void meanKernel(const double *values, float *out, int64_t n,
                           const double *count) {
  __shared__ double shared[kWarp];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    sum += values[i];
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    out[0] = static_cast<float>(sum / meanDivisor(count, n));
}

template <typename T>
__global__ void crossEntropyGradKernel(const float *dloss, const T *logits,
                                       const int32_t *labels, T *dlogits,
                                       int64_t rows, int64_t classes,
                                       ErrorSlot *error, int64_t ignore,
                                       const double *count) {
  const int64_t row = warpRow();
  if (row >= rows)
    return;
  const int lane = threadIdx.x % kWarp;
  const T *xr = logits + row * classes;
  T *dr = dlogits + row * classes;
  const int32_t label = labels[row];
  if (label == ignore) {
    for (int64_t j = lane; j < classes; j += kWarp)
      dr[j] = static_cast<T>(0.0f);
    return;
  }
  const double scale = static_cast<double>(dloss[0]) / meanDivisor(count, rows);
  const double lse = warpLogSumExp(xr, classes, lane);
  if (lane == 0 && !(label >= 0 && label < classes))
    recordError(error, row, label);
  crossEntropyGradRow(xr, dr, classes, lse, label, scale, lane);
}

/// Threads of a block per row for layer norm: enough warps for the row,
/// at most kBlock.
int rowThreads(int64_t cols) {
  int64_t warps = (cols + kWarp - 1) / kWarp;
  return static_cast<int>(std::min<int64_t>(warps, kBlock / kWarp) * kWarp);
}

/// Launches the norm row kernel KERNEL<Team, T>(args...) with the team for
/// rows of `cols` (kWarpRowCols). A macro because the emulator's launch
/// takes the kernel's name, not a pointer.
#define ZTRT_LAUNCH_ROWS(KERNEL, rows, cols, stream, ...)                      \
  do {                                                                         \
    if ((cols) <= kWarpRowCols)                                                \
      ZTRT_LAUNCH(warpRowBlocks(rows), kBlock, 0, stream,                      \
                  KERNEL<WarpTeam, T>)(__VA_ARGS__);                           \
    else                                                                       \
      ZTRT_LAUNCH(static_cast<unsigned>(rows), rowThreads(cols), 0, stream,    \
                  KERNEL<BlockTeam, T>)(__VA_ARGS__);                          \
  } while (false)

void checkGrid(int64_t blocks, const char *op) {
  if (blocks > 0x7fffffff)
    check(cudaErrorInvalidConfiguration, op);
}

/// Chunks of rows for the column sums of a norm's gradient: at least 32
/// rows each, at most 256 of them (enough threads for the column sums, and
/// the partial sums stay within 2 KiB per column and sum).
int64_t columnChunks(int64_t rows) {
  return std::min<int64_t>(256, (rows + 31) / 32);
}

} // namespace

template <typename T>
void layerNorm(const T *x, const T *gamma, const T *beta, T *y, int64_t rows,
               int64_t cols, double eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0)
    return;
  checkGrid(rows, "layer_norm: too many rows");
  ZTRT_LAUNCH_ROWS(layerNormKernel, rows, cols, stream, x, gamma, beta, y, rows,
                   cols, eps);
  check(cudaGetLastError(), "layer_norm kernel launch");
}

template <typename T>
void layerNormGrad(const T *dy, const T *x, const T *gamma, T *dx, T *dgamma,
                   T *dbeta, int64_t rows, int64_t cols, double eps,
                   cudaStream_t stream) {
  if (cols <= 0)
    return;
  if (rows <= 0) {
    // Empty column sums: zeros, as on the cpu.
    fill(dgamma, cols, 0.0f, stream);
    fill(dbeta, cols, 0.0f, stream);
    return;
  }
  checkGrid(rows, "layer_norm_grad: too many rows");
  const int64_t chunks = columnChunks(rows);
  const int64_t chunkRows = (rows + chunks - 1) / chunks;
  auto *stats = static_cast<double *>(
      scratch(rows * 2 * sizeof(double), stream, "layer_norm_grad"));
  auto *partial = static_cast<double *>(
      scratch(2 * chunks * cols * sizeof(double), stream, "layer_norm_grad"));
  ZTRT_LAUNCH_ROWS(layerNormGradRowsKernel, rows, cols, stream, dy, x, gamma, dx,
                   stats, rows, cols, eps);
  const unsigned columnBlocks =
      static_cast<unsigned>((cols + kBlock - 1) / kBlock);
  ZTRT_LAUNCH(dim3(columnBlocks, static_cast<unsigned>(chunks)), kBlock, 0,
              stream, layerNormGradColumnsKernel)
  (dy, x, stats, partial, rows, cols, chunkRows);
  ZTRT_LAUNCH(columnBlocks, kBlock, 0, stream, layerNormGradFinishKernel)
  (partial, dgamma, dbeta, cols, chunks);
  check(cudaGetLastError(), "layer_norm_grad kernel launch");
  release(partial, stream);
  release(stats, stream);
}

template <typename T>
void rmsNorm(const T *x, const T *gamma, T *y, int64_t rows, int64_t cols,
             double eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0)
    return;
  checkGrid(rows, "rms_norm: too many rows");
  ZTRT_LAUNCH_ROWS(rmsNormKernel, rows, cols, stream, x, gamma, y, rows, cols,
                   eps);
  check(cudaGetLastError(), "rms_norm kernel launch");
}

template <typename T>
void rmsNormGrad(const T *dy, const T *x, const T *gamma, T *dx, T *dgamma,
                 int64_t rows, int64_t cols, double eps, cudaStream_t stream) {
  if (cols <= 0)
    return;
  if (rows <= 0) {
    // Empty column sums: zeros, as on the cpu.
    fill(dgamma, cols, 0.0f, stream);
    return;
  }
  checkGrid(rows, "rms_norm_grad: too many rows");
  const int64_t chunks = columnChunks(rows);
  const int64_t chunkRows = (rows + chunks - 1) / chunks;
  auto *rstds = static_cast<double *>(
      scratch(rows * sizeof(double), stream, "rms_norm_grad"));
  auto *partial = static_cast<double *>(
      scratch(chunks * cols * sizeof(double), stream, "rms_norm_grad"));
  ZTRT_LAUNCH_ROWS(rmsNormGradRowsKernel, rows, cols, stream, dy, x, gamma, dx,
                   rstds, rows, cols, eps);
  const unsigned columnBlocks =
      static_cast<unsigned>((cols + kBlock - 1) / kBlock);
  ZTRT_LAUNCH(dim3(columnBlocks, static_cast<unsigned>(chunks)), kBlock, 0,
              stream, rmsNormGradColumnsKernel)
  (dy, x, rstds, partial, rows, cols, chunkRows);
  ZTRT_LAUNCH(columnBlocks, kBlock, 0, stream, rmsNormGradFinishKernel)
  (partial, dgamma, cols, chunks);
  check(cudaGetLastError(), "rms_norm_grad kernel launch");
  release(partial, stream);
  release(rstds, stream);
}

template <typename T>
void softmax(const T *x, T *y, int64_t rows, int64_t cols, bool causal,
             cudaStream_t stream, float *lse) {
  if (rows <= 0 || cols <= 0)
    return;
  ZTRT_LAUNCH(warpRowBlocks(rows), kBlock, 0, stream, softmaxKernel)
  (x, y, rows, cols, causal, lse);
  check(cudaGetLastError(), "softmax kernel launch");
}

template <typename T>
void softmaxGrad(const T *dy, const T *y, T *dx, int64_t rows, int64_t cols,
                 cudaStream_t stream) {
  if (rows <= 0 || cols <= 0)
    return;
  ZTRT_LAUNCH(warpRowBlocks(rows), kBlock, 0, stream, softmaxGradKernel)
  (dy, y, dx, rows, cols);
  check(cudaGetLastError(), "softmax_grad kernel launch");
}

template <typename T>
void crossEntropy(const T *logits, const int32_t *labels, float *loss,
                  int64_t rows, int64_t classes, int64_t ignore,
                  ErrorSlot *error, cudaStream_t stream, int64_t firstRow,
                  int64_t labelRows) {
  crossEntropyWithGrad(logits, labels, static_cast<const float *>(nullptr),
                       loss, static_cast<T *>(nullptr), rows, classes, ignore,
                       error, stream, firstRow, labelRows);
}

/// With an ignored label, or a tile of a longer label array (the divisor is
/// not the tile's rows), the rows that count, on the device (scratch the
/// caller releases); null otherwise (the mean is over all rows).
static double *countRows(const int32_t *labels, int64_t rows, int64_t ignore,
                         cudaStream_t stream, const char *op,
                         bool tile = false) {
  if (ignore == ZTRT_NO_IGNORE_INDEX && !tile)
    return nullptr;
  auto *count = static_cast<double *>(scratch(sizeof(double), stream, op));
  ZTRT_LAUNCH(1, kBlock, 0, stream, countRowsKernel)
  (labels, rows, ignore, count);
  return count;
}

template <typename T>
void crossEntropyGrad(const float *dloss, const T *logits,
                      const int32_t *labels, T *dlogits, int64_t rows,
                      int64_t classes, int64_t ignore, ErrorSlot *error,
                      cudaStream_t stream) {
  if (rows <= 0)
    return;
  double *count = countRows(labels, rows, ignore, stream, "cross_entropy_grad");
  ZTRT_LAUNCH(warpRowBlocks(rows), kBlock, 0, stream, crossEntropyGradKernel)
  (dloss, logits, labels, dlogits, rows, classes, error, ignore,
   static_cast<const double *>(count));
  check(cudaGetLastError(), "cross_entropy_grad kernel launch");
  if (count)
    release(count, stream);
}

template <typename T>
void crossEntropyWithGrad(const T *logits, const int32_t *labels,
                          const float *dloss, float *loss, T *dlogits,
                          int64_t rows, int64_t classes, int64_t ignore,
                          ErrorSlot *error, cudaStream_t stream,
                          int64_t firstRow, int64_t labelRows) {
  // No rows: the mean of nothing, NaN, as on the cpu (0 / 0).
  auto *rowLoss = static_cast<double *>(scratch(
      std::max<int64_t>(rows, 1) * sizeof(double), stream, "cross_entropy"));
  // A tile's divisor counts every label, its sum only its own rows.
  double *count = countRows(labels, labelRows, ignore, stream, "cross_entropy",
                            labelRows != rows);
  if (rows > 0)
    ZTRT_LAUNCH(warpRowBlocks(rows), kBlock, 0, stream, crossEntropyRowsKernel)
  (logits, labels + firstRow, rowLoss, rows, classes, error, dloss, dlogits,
   ignore, static_cast<const double *>(count));
  ZTRT_LAUNCH(1, kBlock, 0, stream, meanKernel)
  (rowLoss, loss, rows, static_cast<const double *>(count));
  check(cudaGetLastError(), "cross_entropy kernel launch");
  if (count)
    release(count, stream);
  release(rowLoss, stream);
}

#define ZTRT_INSTANTIATE(T)                                                    \
  template void crossEntropyWithGrad<T>(                                       \
      const T *, const int32_t *, const float *, float *, T *, int64_t,        \
      int64_t, int64_t, ErrorSlot *, cudaStream_t, int64_t, int64_t);          \
  template void layerNorm<T>(const T *, const T *, const T *, T *, int64_t,    \
                             int64_t, double, cudaStream_t);                   \
  template void layerNormGrad<T>(const T *, const T *, const T *, T *, T *,    \
                                 T *, int64_t, int64_t, double, cudaStream_t); \
  template void rmsNorm<T>(const T *, const T *, T *, int64_t, int64_t,        \
                           double, cudaStream_t);                              \
  template void rmsNormGrad<T>(const T *, const T *, const T *, T *, T *,      \
                               int64_t, int64_t, double, cudaStream_t);        \
  template void softmax<T>(const T *, T *, int64_t, int64_t, bool,             \
                           cudaStream_t, float *);                             \
  template void softmaxGrad<T>(const T *, const T *, T *, int64_t, int64_t,    \
                               cudaStream_t);                                  \
  template void crossEntropy<T>(const T *, const int32_t *, float *, int64_t,  \
                                int64_t, int64_t, ErrorSlot *, cudaStream_t,   \
                                int64_t, int64_t);                             \
  template void crossEntropyGrad<T>(const float *, const T *, const int32_t *, \
                                    T *, int64_t, int64_t, int64_t,            \
                                    ErrorSlot *, cudaStream_t);

ZTRT_INSTANTIATE(float)
ZTRT_INSTANTIATE(ztrt::bf16)
ZTRT_INSTANTIATE(ztrt::f16)

} // namespace ztrt::cuda
