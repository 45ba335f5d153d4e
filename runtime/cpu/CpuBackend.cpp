//===- CpuBackend.cpp - The host-memory backend ---------------------------===//
//
// Part of ztrain's runtime.
//
// Determinism: OpenMP loops split only independent work (elements, or whole
// rows whose reductions stay inside one thread); every reduction across rows
// runs serially in index order. Results are therefore bitwise identical for
// any OpenMP thread count. OpenBLAS's sgemm is deterministic for a fixed
// thread count.
//
// Precision: per-row statistics (layer-norm mean and variance, softmax and
// log-sum-exp sums, reductions) are accumulated in double and rounded once;
// elementwise formulas are evaluated in float in PyTorch's order.
//
//===----------------------------------------------------------------------===//

#include "cpu/CpuBackend.h"

#include "cpu/VecMath.h"
#include "src/Communicator.h"
#include "src/Support.h"

#include <algorithm>
#include <fstream>
#include <cblas.h>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <malloc.h>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ztrt {

namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelElements = 1 << 15;
// Alignment of every allocation: a cache line, enough for any vector ISA.
constexpr int64_t kAlignment = 64;

/// Row-major walk over a tensor shape one innermost row at a time, mapping
/// each row to an offset in a second tensor through per-dim strides (0 for
/// dims the second tensor does not have). Rows are decoded independently,
/// so callers may process them in parallel.
class RowWalker {
public:
  RowWalker(int64_t rank, const int64_t *shape,
            const std::vector<int64_t> &strides) {
    if (rank == 0)
      return; // One row of one element.
    inner = shape[rank - 1];
    innerStride = strides[rank - 1];
    for (int64_t d = 0; d + 1 < rank; ++d) {
      outerShape.push_back(shape[d]);
      outerStrides.push_back(strides[d]);
      rows *= shape[d];
    }
  }

  /// Offset in the second tensor of the first element of row `row`.
  int64_t offset(int64_t row) const {
    int64_t result = 0;
    for (size_t d = outerShape.size(); d-- > 0;) {
      result += (row % outerShape[d]) * outerStrides[d];
      row /= outerShape[d];
    }
    return result;
  }

  int64_t rows = 1;
  int64_t inner = 1;
  int64_t innerStride = 0;

private:
  std::vector<int64_t> outerShape, outerStrides;
};

/// out (contiguous, walk.rows x walk.inner) = the elements of x the walk
/// maps each row to, times `factor`: the gather behind transpose and
/// broadcast.
void gatherRows(const RowWalker &walk, const float *x, float *out,
                double factor) {
  int64_t inner = walk.inner, step = walk.innerStride;
#pragma omp parallel for schedule(static) if (walk.rows * inner >=             \
                                              kParallelElements)
  for (int64_t row = 0; row < walk.rows; ++row) {
    const float *src = x + walk.offset(row);
    float *dst = out + row * inner;
    if (factor == 1.0)
      for (int64_t j = 0; j < inner; ++j)
        dst[j] = src[j * step];
    else
      for (int64_t j = 0; j < inner; ++j)
        dst[j] = static_cast<float>(src[j * step] * factor);
  }
}

/// Row-major element strides of `shape`.
std::vector<int64_t> contiguousStrides(int64_t rank, const int64_t *shape) {
  std::vector<int64_t> strides(rank);
  int64_t stride = 1;
  for (int64_t d = rank; d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

/// log(sum(exp(x))) of one row, max-shifted.
double logSumExp(const float *x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j)
    max = std::max(max, x[j]);
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j)
    sum += std::exp(static_cast<double>(x[j]) - max);
  return max + std::log(sum);
}

void checkLabels(const char *op, const int32_t *labels, int64_t rows,
                 int64_t classes) {
  for (int64_t r = 0; r < rows; ++r)
    if (labels[r] < 0 || labels[r] >= classes)
      fatal("%s: label %d out of range [0, %lld) at row %lld", op, labels[r],
            static_cast<long long>(classes), static_cast<long long>(r));
}

void checkIds(const char *op, const int32_t *ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      fatal("%s: id %d out of range [0, %lld) at position %lld", op, ids[i],
            static_cast<long long>(vocab), static_cast<long long>(i));
}

class CpuBackend final : public Backend {
public:
  const char *name() const override { return "cpu"; }
  std::string deviceName() const override {
    // /proc/cpuinfo's first "model name" (Linux); the name alone elsewhere.
    std::ifstream info("/proc/cpuinfo");
    std::string line;
    while (std::getline(info, line))
      if (line.compare(0, 10, "model name") == 0) {
        size_t colon = line.find(':');
        if (colon != std::string::npos && colon + 2 <= line.size())
          return line.substr(colon + 2);
      }
    return "host CPU";
  }

  void setThreads(int threads) override {
    openblas_set_num_threads(threads);
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
  }

  int threads() const override {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return openblas_get_num_threads();
#endif
  }

  void adoptThreads(int threads) override {
    // OpenMP's thread count is a per-thread setting: a thread that never
    // set it uses the process default (all cores), not the count the step
    // thread was given.
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
  }

  void *allocate(int64_t bytes) override {
    if (bytes > std::numeric_limits<int64_t>::max() - kAlignment)
      return nullptr;
    // aligned_alloc needs a multiple of the alignment; rounding 0 up to one
    // line also makes every pointer distinct.
    int64_t rounded = (std::max<int64_t>(bytes, 1) + kAlignment - 1) /
                      kAlignment * kAlignment;
    return std::aligned_alloc(kAlignment, static_cast<size_t>(rounded));
  }

  void deallocate(void *ptr) override { std::free(ptr); }

  void copyFromHost(void *dst, const void *hostSrc, int64_t bytes) override {
    if (bytes > 0)
      std::memcpy(dst, hostSrc, static_cast<size_t>(bytes));
  }

  void copyToHost(void *hostDst, const void *src, int64_t bytes) override {
    if (bytes > 0)
      std::memcpy(hostDst, src, static_cast<size_t>(bytes));
  }

  void copy(const void *src, void *dst, int64_t bytes) override {
    // memmove: the compiler may copy a buffer onto an overlapping view.
    if (bytes > 0)
      std::memmove(dst, src, static_cast<size_t>(bytes));
  }

  void copy2d(const void *src, void *dst, int64_t rows, int64_t rowBytes,
              int64_t srcStride, int64_t dstStride) override {
    if (rows <= 0 || rowBytes <= 0)
      return;
    const char *from = static_cast<const char *>(src);
    char *to = static_cast<char *>(dst);
    // Packed on both sides: one block.
    if (srcStride == rowBytes && dstStride == rowBytes) {
      std::memcpy(to, from, static_cast<size_t>(rows * rowBytes));
      return;
    }
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(to + r * dstStride, from + r * srcStride,
                  static_cast<size_t>(rowBytes));
  }

  void fill(float *out, int64_t n, double value) override {
    float v = static_cast<float>(value);
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      out[i] = v;
  }

  void add(const float *a, const float *b, float *out, int64_t n) override {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      out[i] = a[i] + b[i];
  }

  void sub(const float *a, const float *b, float *out, int64_t n) override {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      out[i] = a[i] - b[i];
  }

  void mul(const float *a, const float *b, float *out, int64_t n) override {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      out[i] = a[i] * b[i];
  }

  void scale(const float *x, float *out, int64_t n, double factor) override {
    float f = static_cast<float>(factor);
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      out[i] = x[i] * f;
  }

  void biasAdd(const float *x, const float *bias, float *out, int64_t rows,
               int64_t cols) override {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        out[r * cols + c] = x[r * cols + c] + bias[c];
  }

  void relu(const float *x, float *out, int64_t n) override {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      out[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }

  void reluGrad(const float *dy, const float *x, float *dx,
                int64_t n) override {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
  }

  // PyTorch's GeluKernel.cpp (approximate='tanh'), evaluated in float; the
  // formulas are shared with the cuda backend (VecMath.h).
  void gelu(const float *x, float *out, int64_t n) override {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      out[i] = vecmath::gelu(x[i]);
  }

  void geluGrad(const float *dy, const float *x, float *dx,
                int64_t n) override {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      dx[i] = vecmath::geluGrad(dy[i], x[i]);
  }

  void matmul(const float *a, const float *b, float *c, int64_t batch,
              int64_t m, int64_t n, int64_t k, bool transA, bool transB,
              int64_t strideA, int64_t strideB, int64_t strideC) override {
    if (batch == 0 || m == 0 || n == 0)
      return;
    if (k == 0) {
      // An empty sum; BLAS implementations disagree on touching C here.
      for (int64_t i = 0; i < batch; ++i)
        fill(c + i * strideC, m * n, 0.0);
      return;
    }
    int64_t lda = transA ? m : k, ldb = transB ? k : n, ldc = n;
    // A shared B and back-to-back, untransposed A_i / C_i are the rows of
    // one (batch * m) x k matrix: a single GEMM instead of `batch` small ones.
    if (batch > 1 && strideB == 0 && !transA && strideA == m * k &&
        strideC == m * n) {
      m *= batch;
      batch = 1;
    }
    if (std::max({m, n, k, lda, ldb}) > INT_MAX)
      fatal("matmul_f32: %lld x %lld x %lld is too large for BLAS",
            static_cast<long long>(m), static_cast<long long>(n),
            static_cast<long long>(k));
    for (int64_t i = 0; i < batch; ++i)
      cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                  transB ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                  static_cast<int>(n), static_cast<int>(k), 1.0f,
                  a + i * strideA, static_cast<int>(lda), b + i * strideB,
                  static_cast<int>(ldb), 0.0f, c + i * strideC,
                  static_cast<int>(ldc));
  }

  void layerNorm(const float *x, const float *gamma, const float *beta,
                 float *y, int64_t rows, int64_t cols, double eps) override {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x + r * cols;
      float *yr = y + r * cols;
      double mean, rstd;
      rowMoments(xr, cols, eps, mean, rstd);
      for (int64_t c = 0; c < cols; ++c)
        yr[c] = static_cast<float>((xr[c] - mean) * rstd * gamma[c] + beta[c]);
    }
  }

  void layerNormGrad(const float *dy, const float *x, const float *gamma,
                     float *dx, float *dgamma, float *dbeta, int64_t rows,
                     int64_t cols, double eps) override {
    std::vector<double> means(rows), rstds(rows);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x + r * cols, *dyr = dy + r * cols;
      double mean, rstd;
      rowMoments(xr, cols, eps, mean, rstd);
      means[r] = mean;
      rstds[r] = rstd;
      // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
      double sumG = 0.0, sumGX = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        double g = static_cast<double>(dyr[c]) * gamma[c];
        sumG += g;
        sumGX += g * (xr[c] - mean) * rstd;
      }
      double meanG = sumG / cols, meanGX = sumGX / cols;
      for (int64_t c = 0; c < cols; ++c) {
        double g = static_cast<double>(dyr[c]) * gamma[c];
        double xhat = (xr[c] - mean) * rstd;
        dx[r * cols + c] =
            static_cast<float>(rstd * (g - meanG - xhat * meanGX));
      }
    }
    // Column sums over rows, serially in row order (see file comment).
    std::vector<double> sumGamma(cols, 0.0), sumBeta(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x + r * cols, *dyr = dy + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        sumGamma[c] += dyr[c] * ((xr[c] - means[r]) * rstds[r]);
        sumBeta[c] += dyr[c];
      }
    }
    for (int64_t c = 0; c < cols; ++c) {
      dgamma[c] = static_cast<float>(sumGamma[c]);
      dbeta[c] = static_cast<float>(sumBeta[c]);
    }
  }

  void softmax(const float *x, float *y, int64_t rows, int64_t cols,
               bool causal) override {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x + r * cols;
      float *yr = y + r * cols;
      // Causal: row i of each [cols x cols] block sees entries 0..i.
      int64_t visible = causal ? r % cols + 1 : cols;
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < visible; ++j)
        max = std::max(max, xr[j]);
      double sum = 0.0;
      for (int64_t j = 0; j < visible; ++j) {
        yr[j] = std::exp(xr[j] - max);
        sum += yr[j];
      }
      float inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < visible; ++j)
        yr[j] *= inv;
      for (int64_t j = visible; j < cols; ++j)
        yr[j] = 0.0f;
    }
  }

  void softmaxGrad(const float *dy, const float *y, float *dx, int64_t rows,
                   int64_t cols) override {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const float *dyr = dy + r * cols, *yr = y + r * cols;
      double dot = 0.0;
      for (int64_t j = 0; j < cols; ++j)
        dot += static_cast<double>(dyr[j]) * yr[j];
      float d = static_cast<float>(dot);
      for (int64_t j = 0; j < cols; ++j)
        dx[r * cols + j] = yr[j] * (dyr[j] - d);
    }
  }

  void transpose(const float *x, float *out, int64_t rank,
                 const int64_t *xShape, const int64_t *perm) override {
    std::vector<int64_t> xStrides = contiguousStrides(rank, xShape);
    std::vector<int64_t> outShape(rank), srcStrides(rank);
    for (int64_t d = 0; d < rank; ++d) {
      outShape[d] = xShape[perm[d]];
      srcStrides[d] = xStrides[perm[d]];
    }
    gatherRows(RowWalker(rank, outShape.data(), srcStrides), x, out, 1.0);
  }

  void reduce(const float *x, float *out, int64_t rank, const int64_t *xShape,
              const int64_t *mask, bool mean) override {
    // Output strides over the input's dims, 0 where a dim is reduced.
    std::vector<int64_t> outStrides(rank);
    int64_t outElements = 1, reduced = 1;
    for (int64_t d = rank; d-- > 0;) {
      if (mask[d]) {
        outStrides[d] = 0;
        reduced *= xShape[d];
      } else {
        outStrides[d] = outElements;
        outElements *= xShape[d];
      }
    }
    // Serial, in input order: each output's sum has one fixed order.
    std::vector<double> acc(outElements, 0.0);
    RowWalker walk(rank, xShape, outStrides);
    for (int64_t row = 0; row < walk.rows; ++row) {
      const float *src = x + row * walk.inner;
      double *dst = acc.data() + walk.offset(row);
      if (walk.innerStride == 0) {
        double sum = 0.0;
        for (int64_t j = 0; j < walk.inner; ++j)
          sum += src[j];
        *dst += sum;
      } else {
        for (int64_t j = 0; j < walk.inner; ++j)
          dst[j] += src[j];
      }
    }
    for (int64_t i = 0; i < outElements; ++i)
      out[i] = static_cast<float>(mean ? acc[i] / reduced : acc[i]);
  }

  void broadcast(const float *x, float *out, int64_t rank,
                 const int64_t *outShape, const int64_t *mask,
                 double factor) override {
    // x's strides over the output's dims, 0 along broadcast dims.
    std::vector<int64_t> srcStrides(rank);
    int64_t stride = 1;
    for (int64_t d = rank; d-- > 0;) {
      srcStrides[d] = mask[d] ? 0 : stride;
      if (!mask[d])
        stride *= outShape[d];
    }
    gatherRows(RowWalker(rank, outShape, srcStrides), x, out, factor);
  }

  void crossEntropy(const float *logits, const int32_t *labels, float *loss,
                    int64_t rows, int64_t classes) override {
    checkLabels("cross_entropy", labels, rows, classes);
    std::vector<double> rowLoss(rows);
#pragma omp parallel for schedule(static) if (rows * classes >=                \
                                              kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = logits + r * classes;
      rowLoss[r] = logSumExp(xr, classes) - xr[labels[r]];
    }
    double sum = 0.0;
    for (int64_t r = 0; r < rows; ++r)
      sum += rowLoss[r];
    loss[0] = static_cast<float>(sum / rows);
  }

  void crossEntropyGrad(const float *dloss, const float *logits,
                        const int32_t *labels, float *dlogits, int64_t rows,
                        int64_t classes) override {
    checkLabels("cross_entropy_grad", labels, rows, classes);
    double scale = static_cast<double>(dloss[0]) / rows;
#pragma omp parallel for schedule(static) if (rows * classes >=                \
                                              kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = logits + r * classes;
      float *dr = dlogits + r * classes;
      double lse = logSumExp(xr, classes);
      for (int64_t j = 0; j < classes; ++j) {
        double p = std::exp(xr[j] - lse);
        dr[j] = static_cast<float>((p - (j == labels[r] ? 1.0 : 0.0)) * scale);
      }
    }
  }

  void embedding(const float *table, const int32_t *ids, float *out,
                 int64_t nIds, int64_t vocab, int64_t dim) override {
    checkIds("embedding", ids, nIds, vocab);
#pragma omp parallel for schedule(static) if (nIds * dim >= kParallelElements)
    for (int64_t i = 0; i < nIds; ++i)
      std::memcpy(out + i * dim, table + ids[i] * dim, dim * sizeof(float));
  }

  void embeddingGrad(const float *dy, const int32_t *ids, float *dtable,
                     int64_t nIds, int64_t vocab, int64_t dim) override {
    checkIds("embedding_grad", ids, nIds, vocab);
    fill(dtable, vocab * dim, 0.0);
    // Index order, serially: repeated ids accumulate deterministically.
    for (int64_t i = 0; i < nIds; ++i) {
      float *dst = dtable + ids[i] * dim;
      const float *src = dy + i * dim;
      for (int64_t j = 0; j < dim; ++j)
        dst[j] += src[j];
    }
  }

  // torch.optim.SGD's single-tensor path: every scalar is rounded to float
  // before it meets a tensor, as PyTorch's CPU kernels do.
  void sgdUpdate(float *param, const float *grad, float *momentumBuf, int64_t n,
                 const SgdHyper &hyper, int64_t step) override {
    const float negLr = static_cast<float>(-hyper.lr);
    const float momentum = static_cast<float>(hyper.momentum);
    const float keep = static_cast<float>(1.0 - hyper.dampening);
    const float decay = static_cast<float>(hyper.weightDecay);
    const bool useMomentum = hyper.momentum != 0.0, first = step == 1;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i) {
      float d = grad[i];
      if (decay != 0.0f)
        d = d + decay * param[i];
      if (useMomentum) {
        float buf = first ? d : momentumBuf[i] * momentum + keep * d;
        momentumBuf[i] = buf;
        d = hyper.nesterov ? d + momentum * buf : buf;
      }
      param[i] = param[i] + negLr * d;
    }
  }

  // torch.optim.Adam / AdamW (1.13) single-tensor path; bias corrections in
  // double as Python computes them, then rounded to float.
  void adamUpdate(float *param, const float *grad, float *expAvg,
                  float *expAvgSq, int64_t n, const AdamHyper &hyper,
                  int64_t step) override {
    const double t = static_cast<double>(step);
    const double bias1 = 1.0 - std::pow(hyper.beta1, t);
    const double bias2 = 1.0 - std::pow(hyper.beta2, t);
    const float negStepSize = static_cast<float>(-(hyper.lr / bias1));
    const float bias2Sqrt = static_cast<float>(std::sqrt(bias2));
    const float beta1 = static_cast<float>(hyper.beta1);
    const float beta2 = static_cast<float>(hyper.beta2);
    const float oneMinusBeta1 = static_cast<float>(1.0 - hyper.beta1);
    const float oneMinusBeta2 = static_cast<float>(1.0 - hyper.beta2);
    const float eps = static_cast<float>(hyper.eps);
    const float decay = static_cast<float>(hyper.weightDecay);
    const float shrink = static_cast<float>(1.0 - hyper.lr * hyper.weightDecay);
    const bool decoupled = hyper.decoupled;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i) {
      float g = grad[i];
      float p = param[i];
      if (decoupled)
        p = p * shrink;
      else if (decay != 0.0f)
        g = g + decay * p;
      float m = expAvg[i] * beta1 + oneMinusBeta1 * g;
      float v = expAvgSq[i] * beta2 + oneMinusBeta2 * g * g;
      expAvg[i] = m;
      expAvgSq[i] = v;
      float denom = std::sqrt(v) / bias2Sqrt + eps;
      param[i] = p + negStepSize * m / denom;
    }
  }

  // Collectives: MPI moves the data (Communicator), the sums are ours, so the
  // result is the same on every rank and for any MPI algorithm.

  int64_t allReduce(Communicator &comm, const float *in, float *out, int64_t n,
                    bool mean) override {
    const int64_t ranks = comm.count();
    if (ranks == 1) {
      copy(in, out, n * 4);
      return 0;
    }
    // Reduce-scatter chunks of ceil(n / N), then all-gather them. When n is
    // not a multiple of N the input is padded with zeros, which add nothing
    // to any sum; the padded buffer then also receives the gathered result.
    const int64_t chunk = (n + ranks - 1) / ranks;
    const int64_t padded = chunk * ranks;
    std::vector<float> pad;
    const float *send = in;
    if (padded != n) {
      pad.assign(static_cast<size_t>(padded), 0.0f);
      copy(in, pad.data(), n * 4);
      send = pad.data();
    }
    std::vector<float> mine(static_cast<size_t>(chunk));
    int64_t sent = reduceScatter(comm, send, mine.data(), chunk, mean);
    // `in` has been read completely, so gathering into `out` is safe even
    // when it is `in`.
    if (padded == n) {
      comm.allGather(mine.data(), out, chunk);
    } else {
      comm.allGather(mine.data(), pad.data(), chunk);
      copy(pad.data(), out, n * 4);
    }
    return sent + (ranks - 1) * chunk * 4;
  }

  int64_t reduceScatter(Communicator &comm, const float *in, float *out,
                        int64_t count, bool mean) override {
    const int64_t ranks = comm.count();
    if (ranks == 1) {
      copy(in, out, count * 4);
      return 0;
    }
    // Block s of `received` is rank s's chunk for this rank. `in` is read
    // completely before `out` is written, so the two may overlap.
    std::vector<float> received(static_cast<size_t>(ranks * count));
    comm.allToAll(in, received.data(), count);
    const float *blocks = received.data();
    const float divisor = static_cast<float>(ranks);
#pragma omp parallel for schedule(static) if (count >= kParallelElements)
    for (int64_t i = 0; i < count; ++i) {
      float sum = blocks[i];
      for (int64_t s = 1; s < ranks; ++s)
        sum += blocks[s * count + i];
      out[i] = mean ? sum / divisor : sum;
    }
    return (ranks - 1) * count * 4;
  }

  int64_t allGather(Communicator &comm, const float *in, float *out,
                    int64_t count) override {
    const int64_t ranks = comm.count();
    if (ranks == 1) {
      copy(in, out, count * 4);
      return 0;
    }
    // MPI forbids overlapping send and receive buffers, so a gather in place
    // (`in` inside `out`, as ZeRO does with its own shard) goes through a
    // copy of `in`.
    std::vector<float> staged;
    auto address = [](const float *p) {
      return reinterpret_cast<uintptr_t>(p);
    };
    if (address(in) < address(out + ranks * count) &&
        address(out) < address(in + count)) {
      staged.assign(in, in + count);
      in = staged.data();
    }
    comm.allGather(in, out, count);
    return (ranks - 1) * count * 4;
  }

  int64_t bcast(Communicator &comm, float *buf, int64_t n, int root) override {
    comm.broadcast(buf, n, root);
    return comm.rank() == root ? (comm.count() - 1) * n * 4 : 0;
  }

private:
  /// Mean and 1/sqrt(biased variance + eps) of one row, two-pass in double.
  static void rowMoments(const float *x, int64_t n, double eps, double &mean,
                         double &rstd) {
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j)
      sum += x[j];
    mean = sum / n;
    double sq = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      double d = x[j] - mean;
      sq += d * d;
    }
    rstd = 1.0 / std::sqrt(sq / n + eps);
  }
};

} // namespace

std::unique_ptr<Backend> createCpuBackend() {
  // A step frees and re-allocates the same activation buffers every time.
  // glibc serves large blocks with mmap and returns freed heap to the OS,
  // so each step would page-fault its activations in again (measured ~3% of
  // a GPT step in the kernel zeroing pages). Keep blocks up to glibc's
  // maximum mmap threshold on the heap, and the heap mapped. The compiler's
  // static memory plan will replace this with one arena.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return std::make_unique<CpuBackend>();
}

} // namespace ztrt
