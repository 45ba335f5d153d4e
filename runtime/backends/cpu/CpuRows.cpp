//===- CpuRows.cpp - The cpu backend: normalization, softmax, RoPE --------===//
//
// Part of ztrain's runtime. The cpu backend's row kernels: layer_norm,
// rms_norm, softmax (the f32 rows also from the AVX-512 build; the rows
// themselves in backends/cpu/RowKernels.h) and rotary_embedding, with
// their gradients. Determinism and precision: CpuBackend.cpp's file
// comment.
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/CpuBackendImpl.h"

#include "backends/cpu/RowKernels.h"
#include "backends/cpu/VecMath.h"

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace ztrt {

namespace {

/// Mean and 1/sqrt(biased variance + eps) of one row, two-pass in double.
template <typename T>
void rowMoments(const T *x, int64_t n, double eps, double &mean,
                double &rstd) {
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j)
    sum += ld(x[j]);
  mean = sum / n;
  double sq = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    double d = ld(x[j]) - mean;
    sq += d * d;
  }
  rstd = 1.0 / std::sqrt(sq / n + eps);
}

template <typename T>
inline void layerNormT(const T *x, const T *gamma, const T *beta, T *y,
                       int64_t rows, int64_t cols, double eps) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    double mean, rstd;
    rowMoments(xr, cols, eps, mean, rstd);
    for (int64_t c = 0; c < cols; ++c)
      yr[c] = st<T>((ld(xr[c]) - mean) * rstd * ld(gamma[c]) +
                    ld(beta[c]));
  }
}

template <typename T>
inline void layerNormGradT(const T *dy, const T *x, const T *gamma, T *dx,
                           T *dgamma, T *dbeta, int64_t rows, int64_t cols,
                           double eps) {
  std::vector<double> means(rows), rstds(rows);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols, *dyr = dy + r * cols;
    double mean, rstd;
    rowMoments(xr, cols, eps, mean, rstd);
    means[r] = mean;
    rstds[r] = rstd;
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
    double sumG = 0.0, sumGX = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      double g = static_cast<double>(ld(dyr[c])) * ld(gamma[c]);
      sumG += g;
      sumGX += g * (ld(xr[c]) - mean) * rstd;
    }
    double meanG = sumG / cols, meanGX = sumGX / cols;
    for (int64_t c = 0; c < cols; ++c) {
      double g = static_cast<double>(ld(dyr[c])) * ld(gamma[c]);
      double xhat = (ld(xr[c]) - mean) * rstd;
      dx[r * cols + c] = st<T>(rstd * (g - meanG - xhat * meanGX));
    }
  }
  // Column sums over rows, serially in row order (see CpuBackend.cpp).
  std::vector<double> sumGamma(cols, 0.0), sumBeta(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols, *dyr = dy + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      sumGamma[c] += ld(dyr[c]) * ((ld(xr[c]) - means[r]) * rstds[r]);
      sumBeta[c] += ld(dyr[c]);
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    dgamma[c] = st<T>(sumGamma[c]);
    dbeta[c] = st<T>(sumBeta[c]);
  }
}

// Softmax rows: backends/cpu/RowKernels.h (shared with the wider-ISA build).
template <typename T>
inline void softmaxT(const T *x, T *y, int64_t rows, int64_t cols, bool causal,
                     float *lse = nullptr) {
#pragma omp parallel if (rows * cols >= kParallelElements)
  {
    // bf16 / f16: the float exponentials wait in a per-thread row, not
    // in y, so that they are rounded to T once, after the scale.
    std::vector<float> row(std::is_same_v<T, float> ? 0 : cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      T *yr = y + r * cols;
      float *er;
      if constexpr (std::is_same_v<T, float>)
        er = yr;
      else
        er = row.data();
      // Causal: row i of each [cols x cols] block sees entries 0..i.
      rowkernels::softmaxRow(x + r * cols, yr, er, cols,
                             causal ? r % cols + 1 : cols,
                             lse ? lse + r : nullptr);
    }
  }
}

template <typename T>
inline void softmaxGradT(const T *dy, const T *y, T *dx, int64_t rows,
                         int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r)
    rowkernels::softmaxGradRow(dy + r * cols, y + r * cols, dx + r * cols, cols);
}

/// 1 / sqrt(mean(x^2) + eps) of one row, in double.
template <typename T> inline double rowRstd(const T *x, int64_t n, double eps) {
  double sq = 0.0;
  for (int64_t j = 0; j < n; ++j)
    sq += static_cast<double>(ld(x[j])) * ld(x[j]);
  return 1.0 / std::sqrt(sq / n + eps);
}

template <typename T>
inline void rmsNormT(const T *x, const T *gamma, T *y, int64_t rows,
                     int64_t cols, double eps) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols;
    double rstd = rowRstd(xr, cols, eps);
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = st<T>(ld(xr[c]) * rstd * ld(gamma[c]));
  }
}

template <typename T>
inline void rmsNormGradT(const T *dy, const T *x, const T *gamma, T *dx,
                         T *dgamma, int64_t rows, int64_t cols, double eps) {
  std::vector<double> rstds(rows);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols, *dyr = dy + r * cols;
    double rstd = rowRstd(xr, cols, eps);
    rstds[r] = rstd;
    // dx = rstd * (g - xhat * mean(g * xhat)), g = dy * gamma.
    double sumGX = 0.0;
    for (int64_t c = 0; c < cols; ++c)
      sumGX += static_cast<double>(ld(dyr[c])) * ld(gamma[c]) * ld(xr[c]) *
               rstd;
    double meanGX = sumGX / cols;
    for (int64_t c = 0; c < cols; ++c) {
      double g = static_cast<double>(ld(dyr[c])) * ld(gamma[c]);
      double xhat = ld(xr[c]) * rstd;
      dx[r * cols + c] = st<T>(rstd * (g - xhat * meanGX));
    }
  }
  // Column sums over rows, serially in row order (see CpuBackend.cpp).
  std::vector<double> sum(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols, *dyr = dy + r * cols;
    for (int64_t c = 0; c < cols; ++c)
      sum[c] += ld(dyr[c]) * (ld(xr[c]) * rstds[r]);
  }
  for (int64_t c = 0; c < cols; ++c)
    dgamma[c] = st<T>(sum[c]);
}

template <typename T>
inline void rotaryT(const T *x, T *out, int64_t outer, int64_t seq,
                    int64_t inner, int64_t dim, double theta,
                    const vecmath::RopeScaling &scaling, bool inverse) {
  const int64_t half = dim / 2;
  // The table of one [seq, half] block, shared by every outer and inner.
  std::vector<float> cosT(seq * half), sinT(seq * half);
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t i = 0; i < half; ++i)
      vecmath::ropeCosSin(t, i, dim, theta, scaling, cosT[t * half + i],
                          sinT[t * half + i]);
  const int64_t rows = outer * seq * inner;
#pragma omp parallel for schedule(static) if (rows * dim >= kParallelElements)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t t = (row / inner) % seq;
    const T *xr = x + row * dim;
    T *orow = out + row * dim;
    const float *c = cosT.data() + t * half, *s = sinT.data() + t * half;
    for (int64_t i = 0; i < half; ++i) {
      float lo = ld(xr[i]), hi = ld(xr[i + half]);
      float si = inverse ? -s[i] : s[i];
      orow[i] = st<T>(lo * c[i] - hi * si);
      orow[i + half] = st<T>(hi * c[i] + lo * si);
    }
  }
}

} // namespace

void CpuBackend::layerNorm(DType dtype, const void *x, const void *gamma,
                           const void *beta, void *y, int64_t rows,
                           int64_t cols, double eps) {
  ZTRT_CPU_DISPATCH(dtype, layerNormT<T>(as<T>(x), as<T>(gamma),
                                         as<T>(beta), as<T>(y), rows, cols,
                                         eps));
}

void CpuBackend::layerNormGrad(DType dtype, const void *dy, const void *x,
                               const void *gamma, void *dx, void *dgamma,
                               void *dbeta, int64_t rows, int64_t cols,
                               double eps) {
  ZTRT_CPU_DISPATCH(dtype,
                    layerNormGradT<T>(as<T>(dy), as<T>(x), as<T>(gamma),
                                      as<T>(dx), as<T>(dgamma), as<T>(dbeta),
                                      rows, cols, eps));
}

void CpuBackend::softmax(DType dtype, const void *x, void *y, int64_t rows,
                         int64_t cols, int32_t causal) {
  if (dtype == DType::F32 && avx512Kernels)
    return avx512::softmaxF32(as<float>(x), as<float>(y), rows, cols,
                              causal != 0);
  ZTRT_CPU_DISPATCH(dtype,
                    softmaxT<T>(as<T>(x), as<T>(y), rows, cols, causal != 0));
}

void CpuBackend::softmaxGrad(DType dtype, const void *dy, const void *y,
                             void *dx, int64_t rows, int64_t cols) {
  if (dtype == DType::F32 && avx512Kernels)
    return avx512::softmaxGradF32(as<float>(dy), as<float>(y),
                                  as<float>(dx), rows, cols);
  ZTRT_CPU_DISPATCH(dtype, softmaxGradT<T>(as<T>(dy), as<T>(y), as<T>(dx),
                                           rows, cols));
}

void CpuBackend::softmaxF32(const float *x, float *y, int64_t rows,
                            int64_t cols, bool causal, float *lse) {
  if (avx512Kernels)
    return avx512::softmaxF32(x, y, rows, cols, causal, lse);
  softmaxT<float>(x, y, rows, cols, causal, lse);
}

void CpuBackend::rmsNorm(DType dtype, const void *x, const void *gamma, void *y,
                         int64_t rows, int64_t cols, double eps) {
  ZTRT_CPU_DISPATCH(dtype, rmsNormT<T>(as<T>(x), as<T>(gamma), as<T>(y),
                                       rows, cols, eps));
}

void CpuBackend::rmsNormGrad(DType dtype, const void *dy, const void *x,
                             const void *gamma, void *dx, void *dgamma,
                             int64_t rows, int64_t cols, double eps) {
  ZTRT_CPU_DISPATCH(dtype, rmsNormGradT<T>(as<T>(dy), as<T>(x), as<T>(gamma),
                                           as<T>(dx), as<T>(dgamma), rows,
                                           cols, eps));
}

void CpuBackend::rotaryEmbedding(DType dtype, const void *x, void *out,
                                 int64_t outer, int64_t seq, int64_t inner,
                                 int64_t dim, double theta, double factor,
                                 double low, double high, double original,
                                 int32_t inverse) {
  const vecmath::RopeScaling scaling{factor, low, high, original};
  ZTRT_CPU_DISPATCH(dtype, rotaryT<T>(as<T>(x), as<T>(out), outer, seq,
                                      inner, dim, theta, scaling,
                                      inverse != 0));
}

} // namespace ztrt
