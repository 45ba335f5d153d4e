//===- KernelTest.cpp - Every kernel against a naive reference ------------===//
//
// Kernels are called through the C ABI (so the entry points' dispatch is
// covered too) on the cpu backend. References are straightforward double
// loops; gradients are also checked against central finite differences of
// the double reference.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "backends/cpu/IsaKernels.h"
#include "base/DType.h"
#include "ztrt.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <utility>

using namespace ztrt;
using namespace ztrt::test;

namespace {

class KernelTest : public ::testing::Test {
protected:
  std::unique_ptr<ztrt_ctx> ctx = cpuContext();
};

/// Central difference of scalar `loss` w.r.t. every element of `x`, in double.
std::vector<double>
finiteDiff(std::vector<double> x,
           const std::function<double(const std::vector<double> &)> &loss) {
  const double h = 1e-6;
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double saved = x[i];
    x[i] = saved + h;
    double up = loss(x);
    x[i] = saved - h;
    double down = loss(x);
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

std::vector<double> toDouble(const std::vector<float> &v) {
  return std::vector<double>(v.begin(), v.end());
}

double dot(const std::vector<double> &a, const std::vector<double> &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

} // namespace

TEST_F(KernelTest, ElementwiseMatchFloatArithmeticExactly) {
  // Each output is one float operation, so results must be bit-identical.
  const int64_t n = 37;
  auto a = testValues(n, 1), b = testValues(n, 2);
  std::vector<float> out(n);
  ztrt_add(ctx.get(), ZTRT_F32, a.data(), b.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(out[i], a[i] + b[i]);
  ztrt_sub(ctx.get(), ZTRT_F32, a.data(), b.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(out[i], a[i] - b[i]);
  ztrt_mul(ctx.get(), ZTRT_F32, a.data(), b.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(out[i], a[i] * b[i]);
  ztrt_scale(ctx.get(), ZTRT_F32, a.data(), out.data(), n, 0.25);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(out[i], a[i] * 0.25f);
  ztrt_relu(ctx.get(), ZTRT_F32, a.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(out[i], a[i] > 0 ? a[i] : 0.0f);
  ztrt_relu_grad(ctx.get(), ZTRT_F32, b.data(), a.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(out[i], a[i] > 0 ? b[i] : 0.0f);
  ztrt_fill(ctx.get(), ZTRT_F32, out.data(), n, 3.5);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(out[i], 3.5f);
  // In place: out aliases an input.
  std::vector<float> acc = a;
  ztrt_add(ctx.get(), ZTRT_F32, acc.data(), b.data(), acc.data(), n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(acc[i], a[i] + b[i]);
}

TEST_F(KernelTest, BiasAddBroadcastsOverRows) {
  const int64_t rows = 5, cols = 7;
  auto x = testValues(rows * cols, 3), bias = testValues(cols, 4);
  std::vector<float> out(rows * cols);
  ztrt_bias_add(ctx.get(), ZTRT_F32, x.data(), bias.data(), out.data(), rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_EQ(out[r * cols + c], x[r * cols + c] + bias[c]);
}

static double geluRef(double x) {
  return 0.5 * x *
         (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST_F(KernelTest, GeluMatchesTanhApproximation) {
  auto x = testValues(64, 5);
  for (float &v : x)
    v *= 4; // Cover the saturated tails too.
  std::vector<float> y(x.size());
  ztrt_gelu(ctx.get(), ZTRT_F32, x.data(), y.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    // A few float roundings of an O(1) value: 1e-6 is ~8 ulp.
    EXPECT_NEAR(y[i], geluRef(x[i]), 1e-6) << "x = " << x[i];
}

TEST_F(KernelTest, GeluGradMatchesFiniteDifferences) {
  auto x = testValues(64, 6), dy = testValues(64, 7);
  for (float &v : x)
    v *= 4;
  std::vector<float> dx(x.size());
  ztrt_gelu_grad(ctx.get(), ZTRT_F32, dy.data(), x.data(), dx.data(), x.size());
  auto wd = toDouble(dy);
  auto fd = finiteDiff(toDouble(x), [&](const std::vector<double> &v) {
    double s = 0;
    for (size_t i = 0; i < v.size(); ++i)
      s += wd[i] * geluRef(v[i]);
    return s;
  });
  for (size_t i = 0; i < x.size(); ++i)
    // Float evaluation (~1e-7) plus FD truncation/cancellation (~1e-9).
    EXPECT_NEAR(dx[i], fd[i], 2e-6) << "x = " << x[i];
}

static double geluErfRef(double x) {
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

TEST_F(KernelTest, GeluErfMatchesTheExactGelu) {
  auto x = testValues(64, 8);
  for (float &v : x)
    v *= 4;
  std::vector<float> y(x.size());
  ztrt_gelu_erf(ctx.get(), ZTRT_F32, x.data(), y.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    // erff (~1 ulp) and three float roundings of an O(1) value: 1e-6 is
    // ~8 ulp; the tanh form differs from it by up to ~5e-4 here.
    EXPECT_NEAR(y[i], geluErfRef(x[i]), 1e-6) << "x = " << x[i];
}

TEST_F(KernelTest, GeluErfGradMatchesFiniteDifferences) {
  auto x = testValues(64, 9), dy = testValues(64, 10);
  for (float &v : x)
    v *= 4;
  std::vector<float> dx(x.size());
  ztrt_gelu_erf_grad(ctx.get(), ZTRT_F32, dy.data(), x.data(), dx.data(),
                     x.size());
  auto wd = toDouble(dy);
  auto fd = finiteDiff(toDouble(x), [&](const std::vector<double> &v) {
    double s = 0;
    for (size_t i = 0; i < v.size(); ++i)
      s += wd[i] * geluErfRef(v[i]);
    return s;
  });
  for (size_t i = 0; i < x.size(); ++i)
    // Float evaluation (~1e-7) plus FD truncation/cancellation (~1e-9).
    EXPECT_NEAR(dx[i], fd[i], 2e-6) << "x = " << x[i];
}

TEST_F(KernelTest, TanhAndErfMatchTheLibraryAndTheirGradients) {
  auto x = testValues(64, 11), dy = testValues(64, 12);
  for (float &v : x)
    v *= 3;
  std::vector<float> t(x.size()), e(x.size()), dt(x.size()), de(x.size());
  ztrt_tanh(ctx.get(), ZTRT_F32, x.data(), t.data(), x.size());
  ztrt_erf(ctx.get(), ZTRT_F32, x.data(), e.data(), x.size());
  ztrt_tanh_grad(ctx.get(), ZTRT_F32, dy.data(), t.data(), dt.data(), x.size());
  ztrt_erf_grad(ctx.get(), ZTRT_F32, dy.data(), x.data(), de.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double xd = x[i];
    // Cephes tanhf and erff are within ~2 ulp of the double functions
    // (values in [-1, 1]: 2.4e-7); a wrong formula is off by far more.
    EXPECT_NEAR(t[i], std::tanh(xd), 3e-7) << "x = " << x[i];
    EXPECT_NEAR(e[i], std::erf(xd), 3e-7) << "x = " << x[i];
    // The adjoints against their closed forms in double, from the kernel's
    // own forward result for tanh (as the step uses it): a few roundings.
    EXPECT_NEAR(dt[i], dy[i] * (1.0 - double(t[i]) * t[i]), 1e-6);
    EXPECT_NEAR(de[i], dy[i] * 2.0 / std::sqrt(M_PI) * std::exp(-xd * xd), 1e-6);
  }
}

struct MatmulCase {
  int64_t batch, m, n, k;
  bool ta, tb;
  bool shareA, shareB;
};

// Keeps test names stable: gtest would otherwise print the struct's bytes,
// padding included.
void PrintTo(const MatmulCase &p, std::ostream *os) {
  *os << "batch " << p.batch << ", " << p.m << "x" << p.n << "x" << p.k;
}

class MatmulTest : public KernelTest,
                   public ::testing::WithParamInterface<MatmulCase> {};

TEST_P(MatmulTest, MatchesNaiveReference) {
  const MatmulCase p = GetParam();
  int64_t sa = p.shareA ? 0 : p.m * p.k, sb = p.shareB ? 0 : p.k * p.n,
          sc = p.m * p.n;
  auto a = testValues((p.shareA ? 1 : p.batch) * p.m * p.k, 11);
  auto b = testValues((p.shareB ? 1 : p.batch) * p.k * p.n, 12);
  std::vector<float> c(p.batch * sc, -7.0f);
  ztrt_matmul(ctx.get(), ZTRT_F32, a.data(), b.data(), c.data(), p.batch, p.m, p.n,
                  p.k, p.ta, p.tb, sa, sb, sc);
  for (int64_t i = 0; i < p.batch; ++i)
    for (int64_t r = 0; r < p.m; ++r)
      for (int64_t col = 0; col < p.n; ++col) {
        double s = 0;
        for (int64_t j = 0; j < p.k; ++j) {
          float av = p.ta ? a[i * sa + j * p.m + r] : a[i * sa + r * p.k + j];
          float bv =
              p.tb ? b[i * sb + col * p.k + j] : b[i * sb + j * p.n + col];
          s += static_cast<double>(av) * bv;
        }
        // Float accumulation of k products of magnitude <= 1: k * 2^-24
        // relative error bound, and 1e-5 covers k <= 100 with margin.
        EXPECT_NEAR(c[i * sc + r * p.n + col], s, 1e-5)
            << "batch " << i << " at (" << r << ", " << col << ")";
      }
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, MatmulTest,
    ::testing::Values(MatmulCase{1, 5, 7, 3, false, false, false, false},
                      MatmulCase{1, 5, 7, 3, true, false, false, false},
                      MatmulCase{1, 5, 7, 3, false, true, false, false},
                      MatmulCase{1, 5, 7, 3, true, true, false, false},
                      MatmulCase{3, 4, 6, 9, false, false, false, false},
                      MatmulCase{3, 4, 6, 9, true, true, false, false},
                      // Shared B, untransposed A: the single-GEMM path.
                      MatmulCase{4, 3, 5, 8, false, false, false, true},
                      MatmulCase{4, 3, 5, 8, false, true, false, true},
                      // Shared B with transposed A: per-batch GEMMs.
                      MatmulCase{4, 3, 5, 8, true, false, false, true},
                      // Shared A.
                      MatmulCase{3, 6, 2, 5, false, false, true, false},
                      MatmulCase{3, 6, 2, 5, true, true, true, false},
                      MatmulCase{2, 1, 1, 64, false, false, false, false}),
    [](const ::testing::TestParamInfo<MatmulCase> &info) {
      const MatmulCase &p = info.param;
      return "b" + std::to_string(p.batch) + "_" + std::to_string(p.m) + "x" +
             std::to_string(p.n) + "x" + std::to_string(p.k) +
             (p.ta ? "_ta" : "") + (p.tb ? "_tb" : "") +
             (p.shareA ? "_sharedA" : "") + (p.shareB ? "_sharedB" : "");
    });

TEST_F(KernelTest, MatmulWithEmptyInnerDimWritesZeros) {
  std::vector<float> c(6, 5.0f);
  float dummy = 0;
  ztrt_matmul(ctx.get(), ZTRT_F32, &dummy, &dummy, c.data(), 1, 2, 3, 0, 0, 0, 0, 0,
                  6);
  for (float v : c)
    EXPECT_EQ(v, 0.0f);
}

static std::vector<double> layerNormRef(const std::vector<double> &x,
                                        const std::vector<double> &gamma,
                                        const std::vector<double> &beta,
                                        int64_t rows, int64_t cols,
                                        double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c)
      mean += x[r * cols + c] / cols;
    for (int64_t c = 0; c < cols; ++c)
      var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean) / cols;
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] =
          (x[r * cols + c] - mean) / std::sqrt(var + eps) * gamma[c] + beta[c];
  }
  return y;
}

TEST_F(KernelTest, LayerNormMatchesBiasedVarianceReference) {
  const int64_t rows = 6, cols = 10;
  const double eps = 1e-5;
  auto x = testValues(rows * cols, 21), g = testValues(cols, 22),
       b = testValues(cols, 23);
  for (float &v : x)
    v = v * 3 + 1; // Non-zero mean exercises the centring.
  std::vector<float> y(x.size());
  ztrt_layer_norm(ctx.get(), ZTRT_F32, x.data(), g.data(), b.data(), y.data(), rows,
                      cols, eps);
  auto ref =
      layerNormRef(toDouble(x), toDouble(g), toDouble(b), rows, cols, eps);
  for (size_t i = 0; i < y.size(); ++i)
    // Statistics in double, one final rounding: within a few float ulp.
    EXPECT_NEAR(y[i], ref[i], 1e-6);
}

TEST_F(KernelTest, LayerNormGradMatchesFiniteDifferences) {
  const int64_t rows = 4, cols = 6;
  const double eps = 1e-5;
  auto x = testValues(rows * cols, 31), g = testValues(cols, 32),
       b = testValues(cols, 33), dy = testValues(rows * cols, 34);
  std::vector<float> dx(x.size()), dg(cols, 9.0f), db(cols, 9.0f);
  ztrt_layer_norm_grad(ctx.get(), ZTRT_F32, dy.data(), x.data(), g.data(), dx.data(),
                           dg.data(), db.data(), rows, cols, eps);
  auto xd = toDouble(x), gd = toDouble(g), bd = toDouble(b), w = toDouble(dy);
  auto fdX = finiteDiff(xd, [&](const std::vector<double> &v) {
    return dot(w, layerNormRef(v, gd, bd, rows, cols, eps));
  });
  auto fdG = finiteDiff(gd, [&](const std::vector<double> &v) {
    return dot(w, layerNormRef(xd, v, bd, rows, cols, eps));
  });
  auto fdB = finiteDiff(bd, [&](const std::vector<double> &v) {
    return dot(w, layerNormRef(xd, gd, v, rows, cols, eps));
  });
  // Double arithmetic inside, one rounding to float at the end: 1e-5 is
  // generous for O(1) gradients and still catches any formula error.
  for (size_t i = 0; i < dx.size(); ++i)
    EXPECT_NEAR(dx[i], fdX[i], 1e-5) << "dx[" << i << "]";
  for (int64_t c = 0; c < cols; ++c) {
    EXPECT_NEAR(dg[c], fdG[c], 1e-5) << "dgamma[" << c << "]";
    EXPECT_NEAR(db[c], fdB[c], 1e-5) << "dbeta[" << c << "]";
  }
}

static std::vector<double> softmaxRef(const std::vector<double> &x,
                                      int64_t rows, int64_t cols, bool causal) {
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t visible = causal ? r % cols + 1 : cols;
    double sum = 0;
    for (int64_t j = 0; j < visible; ++j)
      sum += std::exp(x[r * cols + j]);
    for (int64_t j = 0; j < visible; ++j)
      y[r * cols + j] = std::exp(x[r * cols + j]) / sum;
  }
  return y;
}

TEST_F(KernelTest, SoftmaxMatchesReference) {
  const int64_t rows = 5, cols = 9;
  auto x = testValues(rows * cols, 41);
  x[3] = 80.0f; // Large logits must not overflow (max subtraction).
  std::vector<float> y(x.size());
  ztrt_softmax(ctx.get(), ZTRT_F32, x.data(), y.data(), rows, cols, 0);
  auto ref = softmaxRef(toDouble(x), rows, cols, false);
  for (size_t i = 0; i < y.size(); ++i)
    // Probabilities in [0, 1], a few float roundings each.
    EXPECT_NEAR(y[i], ref[i], 1e-7);
}

TEST_F(KernelTest, CausalSoftmaxMasksTheFuture) {
  const int64_t T = 4, blocks = 3; // e.g. [batch*heads = 3, T, T] scores
  auto x = testValues(blocks * T * T, 42);
  std::vector<float> y(x.size());
  ztrt_softmax(ctx.get(), ZTRT_F32, x.data(), y.data(), blocks * T, T, 1);
  auto ref = softmaxRef(toDouble(x), blocks * T, T, true);
  for (int64_t r = 0; r < blocks * T; ++r)
    for (int64_t j = 0; j < T; ++j) {
      if (j > r % T)
        EXPECT_EQ(y[r * T + j], 0.0f) << "row " << r << " col " << j;
      else
        EXPECT_NEAR(y[r * T + j], ref[r * T + j], 1e-7);
    }
}

TEST_F(KernelTest, SoftmaxGradMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 5;
  auto x = testValues(rows * cols, 43), dy = testValues(rows * cols, 44);
  std::vector<float> y(x.size()), dx(x.size());
  ztrt_softmax(ctx.get(), ZTRT_F32, x.data(), y.data(), rows, cols, 0);
  ztrt_softmax_grad(ctx.get(), ZTRT_F32, dy.data(), y.data(), dx.data(), rows, cols);
  auto w = toDouble(dy);
  auto fd = finiteDiff(toDouble(x), [&](const std::vector<double> &v) {
    return dot(w, softmaxRef(v, rows, cols, false));
  });
  for (size_t i = 0; i < dx.size(); ++i)
    // y is float-rounded before the kernel sees it: ~1e-7 relative.
    EXPECT_NEAR(dx[i], fd[i], 1e-6);
}

TEST_F(KernelTest, TransposeRanks2To4) {
  struct Case {
    std::vector<int64_t> shape, perm;
  };
  std::vector<Case> cases = {{{3, 5}, {1, 0}},
                             {{3, 5}, {0, 1}},
                             {{2, 3, 4}, {0, 2, 1}},
                             {{2, 3, 4}, {2, 0, 1}},
                             {{2, 3, 4}, {1, 2, 0}},
                             {{2, 3, 4, 5}, {0, 2, 1, 3}},
                             {{2, 3, 4, 5}, {3, 1, 0, 2}}};
  for (const Case &c : cases) {
    int64_t rank = c.shape.size();
    int64_t n = 1;
    for (int64_t d : c.shape)
      n *= d;
    auto x = testValues(n, 51);
    std::vector<float> out(n);
    ztrt_transpose(ctx.get(), ZTRT_F32, x.data(), out.data(), rank, c.shape.data(),
                       c.perm.data());
    // Reference: for each input index, where it lands in the output.
    std::vector<int64_t> idx(rank, 0), outShape(rank);
    for (int64_t d = 0; d < rank; ++d)
      outShape[d] = c.shape[c.perm[d]];
    for (int64_t lin = 0; lin < n; ++lin) {
      int64_t rem = lin;
      for (int64_t d = rank; d-- > 0;) {
        idx[d] = rem % c.shape[d];
        rem /= c.shape[d];
      }
      int64_t o = 0;
      for (int64_t d = 0; d < rank; ++d)
        o = o * outShape[d] + idx[c.perm[d]];
      // Pure data movement: exact.
      ASSERT_EQ(out[o], x[lin]) << "rank " << rank << " element " << lin;
    }
  }
}

/// Naive reduce over mask; returns the kept-dims tensor in order.
static std::vector<double> reduceRef(const std::vector<float> &x,
                                     const std::vector<int64_t> &shape,
                                     const std::vector<int64_t> &mask,
                                     bool mean) {
  int64_t rank = shape.size(), outN = 1, count = 1, n = 1;
  for (int64_t d = 0; d < rank; ++d) {
    n *= shape[d];
    (mask[d] ? count : outN) *= shape[d];
  }
  std::vector<double> out(outN, 0.0);
  for (int64_t lin = 0; lin < n; ++lin) {
    int64_t rem = lin, o = 0, scale = 1;
    for (int64_t d = rank; d-- > 0;) {
      int64_t i = rem % shape[d];
      rem /= shape[d];
      if (!mask[d]) {
        o += i * scale;
        scale *= shape[d];
      }
    }
    out[o] += x[lin];
  }
  if (mean)
    for (double &v : out)
      v /= count;
  return out;
}

TEST_F(KernelTest, ReduceAndBroadcastWithSeveralMasks) {
  std::vector<int64_t> shape = {2, 3, 4};
  std::vector<std::vector<int64_t>> masks = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1},
                                             {1, 0, 1}, {0, 1, 1}, {1, 1, 1},
                                             {0, 0, 0}};
  auto x = testValues(24, 61);
  for (const auto &mask : masks) {
    for (int mean = 0; mean <= 1; ++mean) {
      auto ref = reduceRef(x, shape, mask, mean);
      std::vector<float> out(ref.size());
      ztrt_reduce(ctx.get(), ZTRT_F32, x.data(), out.data(), 3, shape.data(),
                      mask.data(), mean);
      for (size_t i = 0; i < ref.size(); ++i)
        // Double accumulation, one rounding: within one float ulp.
        EXPECT_NEAR(out[i], ref[i], 1e-6)
            << "mask " << mask[0] << mask[1] << mask[2] << " mean " << mean;
    }
    // Broadcast is reduce's adjoint: <reduce(x), y> == <x, broadcast(y)>.
    auto y = testValues(reduceRef(x, shape, mask, false).size(), 62);
    std::vector<float> big(24);
    ztrt_broadcast(ctx.get(), ZTRT_F32, y.data(), big.data(), 3, shape.data(),
                       mask.data(), 0.5);
    auto reduced = reduceRef(x, shape, mask, false);
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < y.size(); ++i)
      lhs += reduced[i] * y[i] * 0.5;
    for (size_t i = 0; i < 24; ++i)
      rhs += static_cast<double>(x[i]) * big[i];
    // Only the float rounding of big[i] differs: 24 terms * 2^-24.
    EXPECT_NEAR(lhs, rhs, 1e-5);
    // And elementwise: each output is its source times the factor.
    for (int64_t lin = 0; lin < 24; ++lin) {
      int64_t idx[3] = {lin / 12, lin / 4 % 3, lin % 4}, src = 0;
      for (int d = 0; d < 3; ++d)
        if (!mask[d])
          src = src * shape[d] + idx[d];
      EXPECT_EQ(big[lin], static_cast<float>(y[src] * 0.5));
    }
  }
}

static double crossEntropyRef(const std::vector<double> &logits,
                              const std::vector<int32_t> &labels, int64_t rows,
                              int64_t classes) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < classes; ++j)
      sum += std::exp(logits[r * classes + j]);
    total += std::log(sum) - logits[r * classes + labels[r]];
  }
  return total / rows;
}

TEST_F(KernelTest, CrossEntropyAndGrad) {
  const int64_t rows = 6, classes = 10;
  auto logits = testValues(rows * classes, 71);
  for (float &v : logits)
    v *= 5;
  std::vector<int32_t> labels = {0, 9, 3, 3, 7, 1};
  float loss = 0;
  ztrt_cross_entropy(ctx.get(), ZTRT_F32, logits.data(), labels.data(), &loss,
                     rows, classes, ZTRT_NO_IGNORE_INDEX);
  auto ld = toDouble(logits);
  // Double log-sum-exp, one rounding of an O(1) mean.
  EXPECT_NEAR(loss, crossEntropyRef(ld, labels, rows, classes), 1e-6);

  float dloss = 2.0f;
  std::vector<float> grad(logits.size());
  ztrt_cross_entropy_grad(ctx.get(), ZTRT_F32, &dloss, logits.data(),
                          labels.data(), grad.data(), rows, classes,
                          ZTRT_NO_IGNORE_INDEX);
  auto fd = finiteDiff(ld, [&](const std::vector<double> &v) {
    return 2.0 * crossEntropyRef(v, labels, rows, classes);
  });
  for (size_t i = 0; i < grad.size(); ++i)
    // O(1/rows) values computed in double and rounded once; FD error ~1e-9.
    EXPECT_NEAR(grad[i], fd[i], 1e-6);
}

TEST_F(KernelTest, CrossEntropyWithGradIsBitwiseTheTwoKernels) {
  // The fused kernel train-fuse-loss makes of the pair: the same
  // expressions in the same order, so the same bits, in f32 and bf16, on
  // rows long enough for the parallel path.
  const int64_t rows = 37, classes = 1500;
  auto logits = testValues(rows * classes, 72);
  for (float &v : logits)
    v *= 6;
  std::vector<int32_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r)
    labels[r] = static_cast<int32_t>((r * 613) % classes);
  const float dloss = 0.75f;
  float loss = 0, fusedLoss = 0;
  std::vector<float> grad(logits.size()), fusedGrad(logits.size());
  ztrt_cross_entropy(ctx.get(), ZTRT_F32, logits.data(), labels.data(), &loss,
                     rows, classes, ZTRT_NO_IGNORE_INDEX);
  ztrt_cross_entropy_grad(ctx.get(), ZTRT_F32, &dloss, logits.data(),
                          labels.data(), grad.data(), rows, classes,
                          ZTRT_NO_IGNORE_INDEX);
  ztrt_cross_entropy_with_grad(
      ctx.get(), ZTRT_F32, logits.data(), labels.data(), &dloss, &fusedLoss,
      fusedGrad.data(), rows, classes, ZTRT_NO_IGNORE_INDEX);
  EXPECT_EQ(std::memcmp(&loss, &fusedLoss, sizeof(float)), 0)
      << loss << " vs " << fusedLoss;
  EXPECT_EQ(std::memcmp(grad.data(), fusedGrad.data(), grad.size() * 4), 0);

  std::vector<ztrt::bf16> l16(logits.size()), g16(logits.size()),
      f16g(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    l16[i] = ztrt::bf16(logits[i]);
  ztrt_cross_entropy(ctx.get(), ZTRT_BF16, l16.data(), labels.data(), &loss,
                     rows, classes, ZTRT_NO_IGNORE_INDEX);
  ztrt_cross_entropy_grad(ctx.get(), ZTRT_BF16, &dloss, l16.data(),
                          labels.data(), g16.data(), rows, classes,
                          ZTRT_NO_IGNORE_INDEX);
  ztrt_cross_entropy_with_grad(ctx.get(), ZTRT_BF16, l16.data(), labels.data(),
                               &dloss, &fusedLoss, f16g.data(), rows, classes,
                               ZTRT_NO_IGNORE_INDEX);
  EXPECT_EQ(std::memcmp(&loss, &fusedLoss, sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(g16.data(), f16g.data(), g16.size() * 2), 0);
  labels[5] = static_cast<int32_t>(classes);
  EXPECT_EXIT(ztrt_cross_entropy_with_grad(ctx.get(), ZTRT_F32, logits.data(),
                                           labels.data(), &dloss, &fusedLoss,
                                           fusedGrad.data(), rows, classes,
                                           ZTRT_NO_IGNORE_INDEX),
              ::testing::ExitedWithCode(1),
              "cross_entropy: label 1500 out of range \\[0, 1500\\) at row 5");
}

TEST_F(KernelTest, CrossEntropyTilesAreTheUntiledRows) {
  // train-tile-loss's tiles: each tile's dlogits rows are bitwise the
  // untiled kernel's (same log-sum-exp, same divisor: the count over all
  // labels), and the tiles' loss shares add up to the loss. The shares are
  // each rounded to float once, so their float sum may differ from the
  // untiled loss (one rounding) by an ulp per addition: tolerance 3 ulps
  // for 3 tiles. With ignore_index, ignored rows in some tiles only.
  const int64_t rows = 41, classes = 1500;
  auto logits = testValues(rows * classes, 74);
  for (float &v : logits)
    v *= 6;
  const float dloss = 0.75f;
  const int64_t bounds[] = {0, 13, 26, rows};
  for (int64_t ignore : {int64_t(ZTRT_NO_IGNORE_INDEX), int64_t(-100)}) {
    std::vector<int32_t> labels(rows);
    for (int64_t r = 0; r < rows; ++r)
      labels[r] = static_cast<int32_t>((r * 613) % classes);
    if (ignore != ZTRT_NO_IGNORE_INDEX)
      labels[2] = labels[3] = labels[30] = -100;
    float loss = 0;
    std::vector<float> grad(logits.size());
    ztrt_cross_entropy_with_grad(ctx.get(), ZTRT_F32, logits.data(),
                                 labels.data(), &dloss, &loss, grad.data(),
                                 rows, classes, ignore);
    float sum = 0;
    for (int t = 0; t < 3; ++t) {
      const int64_t first = bounds[t], n = bounds[t + 1] - bounds[t];
      float share = 0, lossOnly = 0;
      std::vector<float> tileGrad(n * classes);
      ztrt_cross_entropy_tile_with_grad(
          ctx.get(), ZTRT_F32, logits.data() + first * classes, labels.data(),
          &dloss, &share, tileGrad.data(), n, classes, ignore, first, rows);
      ztrt_cross_entropy_tile(ctx.get(), ZTRT_F32,
                              logits.data() + first * classes, labels.data(),
                              &lossOnly, n, classes, ignore, first, rows);
      EXPECT_EQ(std::memcmp(tileGrad.data(), grad.data() + first * classes,
                            tileGrad.size() * 4),
                0)
          << "tile " << t;
      EXPECT_EQ(std::memcmp(&share, &lossOnly, 4), 0)
          << share << " " << lossOnly;
      sum += share;
    }
    EXPECT_NEAR(sum, loss, 3 * (std::nextafter(loss, INFINITY) - loss))
        << "ignore " << ignore;
  }
  std::vector<int32_t> labels(rows, 1);
  float share = 0;
  EXPECT_EXIT(ztrt_cross_entropy_tile(ctx.get(), ZTRT_F32, logits.data(),
                                      labels.data(), &share, 13, classes,
                                      ZTRT_NO_IGNORE_INDEX, 30, rows),
              ::testing::ExitedWithCode(1),
              "cross_entropy_tile: rows \\[30, 43\\) are not inside the 41 "
              "labels");
  labels[40] = -1;
  EXPECT_EXIT(ztrt_cross_entropy_tile(ctx.get(), ZTRT_F32, logits.data(),
                                      labels.data(), &share, 13, classes,
                                      ZTRT_NO_IGNORE_INDEX, 0, rows),
              ::testing::ExitedWithCode(1),
              "cross_entropy: label -1 out of range \\[0, 1500\\) at row 40");
}

TEST_F(KernelTest, CrossEntropyIgnoresRowsLabelledIgnoreIndex) {
  // PyTorch's ignore_index: an ignored row adds nothing and the mean is over
  // the others, so the loss and the other rows' gradient are bitwise those
  // of the same kernels on the rows that count (the same terms summed in
  // the same order, the same divisor); an ignored row's gradient is zero.
  // Its label need not be a class (-100), or may be one (0 as a pad id).
  const int64_t rows = 41, classes = 1500;
  auto logits = testValues(rows * classes, 73);
  for (float &v : logits)
    v *= 6;
  for (int64_t ignore : {int64_t(-100), int64_t(0)}) {
    std::vector<int32_t> labels(rows);
    std::vector<float> kept;
    std::vector<int32_t> keptLabels;
    for (int64_t r = 0; r < rows; ++r) {
      labels[r] = r % 3 == 1 ? static_cast<int32_t>(ignore)
                             : static_cast<int32_t>(1 + (r * 613) % 1499);
      if (labels[r] == ignore)
        continue;
      kept.insert(kept.end(), logits.begin() + r * classes,
                  logits.begin() + (r + 1) * classes);
      keptLabels.push_back(labels[r]);
    }
    const int64_t count = static_cast<int64_t>(keptLabels.size());
    ASSERT_EQ(count, 27);
    const float dloss = 0.75f;
    float loss = 0, fusedLoss = 0, want = 0;
    std::vector<float> grad(logits.size()), fusedGrad(logits.size()),
        wantGrad(kept.size());
    ztrt_cross_entropy(ctx.get(), ZTRT_F32, logits.data(), labels.data(), &loss,
                       rows, classes, ignore);
    ztrt_cross_entropy_grad(ctx.get(), ZTRT_F32, &dloss, logits.data(),
                            labels.data(), grad.data(), rows, classes, ignore);
    ztrt_cross_entropy_with_grad(ctx.get(), ZTRT_F32, logits.data(),
                                 labels.data(), &dloss, &fusedLoss,
                                 fusedGrad.data(), rows, classes, ignore);
    ztrt_cross_entropy(ctx.get(), ZTRT_F32, kept.data(), keptLabels.data(),
                       &want, count, classes, ZTRT_NO_IGNORE_INDEX);
    ztrt_cross_entropy_grad(ctx.get(), ZTRT_F32, &dloss, kept.data(),
                            keptLabels.data(), wantGrad.data(), count, classes,
                            ZTRT_NO_IGNORE_INDEX);
    EXPECT_EQ(std::memcmp(&loss, &want, 4), 0) << loss << " vs " << want;
    EXPECT_EQ(std::memcmp(&fusedLoss, &want, 4), 0);
    EXPECT_EQ(std::memcmp(grad.data(), fusedGrad.data(), grad.size() * 4), 0);
    int64_t k = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float *row = grad.data() + r * classes;
      if (labels[r] == ignore) {
        for (int64_t j = 0; j < classes; ++j)
          ASSERT_TRUE(row[j] == 0.0f && !std::signbit(row[j])) << "row " << r;
        continue;
      }
      EXPECT_EQ(std::memcmp(row, wantGrad.data() + k * classes, classes * 4), 0)
          << "row " << r;
      ++k;
    }
  }
  // Every row ignored: 0 / 0 as PyTorch (NaN), and a zero gradient.
  std::vector<int32_t> none(4, -100);
  std::vector<float> small(40, 1.0f), smallGrad(40, 1.0f);
  float loss = 0;
  const float dloss = 1.0f;
  ztrt_cross_entropy_with_grad(ctx.get(), ZTRT_F32, small.data(), none.data(),
                               &dloss, &loss, smallGrad.data(), 4, 10, -100);
  EXPECT_TRUE(std::isnan(loss));
  for (float g : smallGrad)
    EXPECT_TRUE(g == 0.0f && !std::signbit(g));
  // A label out of range on a row that counts is still an error.
  std::vector<int32_t> bad = {-100, 3, 10, -100};
  EXPECT_EXIT(ztrt_cross_entropy(ctx.get(), ZTRT_F32, small.data(), bad.data(),
                                 &loss, 4, 10, -100),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: cross_entropy: label 10 out of range \\[0, "
              "10\\) at row 2\n$");
}

TEST_F(KernelTest, CrossEntropyRejectsOutOfRangeLabel) {
  std::vector<float> logits(40, 0.0f);
  std::vector<int32_t> labels = {1, 2, 3, 12};
  float loss;
  EXPECT_EXIT(ztrt_cross_entropy(ctx.get(), ZTRT_F32, logits.data(),
                                 labels.data(), &loss, 4, 10,
                                 ZTRT_NO_IGNORE_INDEX),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: cross_entropy: label 12 out of range \\[0, "
              "10\\) at row 3\n$");
}

TEST_F(KernelTest, EmbeddingGatherAndDeterministicScatter) {
  const int64_t vocab = 5, dim = 3;
  auto table = testValues(vocab * dim, 81);
  std::vector<int32_t> ids = {4, 0, 4, 2};
  std::vector<float> out(ids.size() * dim);
  ztrt_embedding(ctx.get(), ZTRT_F32, table.data(), ids.data(), out.data(),
                     ids.size(), vocab, dim);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < dim; ++j)
      EXPECT_EQ(out[i * dim + j], table[ids[i] * dim + j]);

  auto dy = testValues(ids.size() * dim, 82);
  std::vector<float> dtable(vocab * dim, 123.0f);
  ztrt_embedding_grad(ctx.get(), ZTRT_F32, dy.data(), ids.data(), dtable.data(),
                          ids.size(), vocab, dim);
  for (int64_t v = 0; v < vocab; ++v)
    for (int64_t j = 0; j < dim; ++j) {
      float expected = 0.0f; // Same order as the kernel: index order.
      for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] == v)
          expected += dy[i * dim + j];
      EXPECT_EQ(dtable[v * dim + j], expected);
    }
  EXPECT_EXIT(ztrt_embedding(ctx.get(), ZTRT_F32, table.data(),
                                 std::vector<int32_t>{1, 5}.data(), out.data(),
                                 2, vocab, dim),
              ::testing::ExitedWithCode(1),
              "embedding: id 5 out of range \\[0, 5\\) at position 1");
}

TEST_F(KernelTest, EntryPointsRejectMalformedArguments) {
  float buf[4];
  EXPECT_EXIT(ztrt_add(ctx.get(), ZTRT_F32, buf, buf, buf, -1),
              ::testing::ExitedWithCode(1),
              "add: negative n -1");
  int64_t shape[2] = {2, 2}, perm[2] = {0, 0};
  EXPECT_EXIT(ztrt_transpose(ctx.get(), ZTRT_F32, buf, buf, 2, shape, perm),
              ::testing::ExitedWithCode(1),
              "transpose: perm is not a permutation");
  EXPECT_EXIT(ztrt_softmax(ctx.get(), ZTRT_F32, buf, buf, 3, 2, 1),
              ::testing::ExitedWithCode(1), "softmax: causal rows");
  EXPECT_EXIT(ztrt_param(ctx.get(), 0), ::testing::ExitedWithCode(1),
              "param: parameter index 0 out of range \\[0, 0\\)");
  // Batched outputs that overlap (2 x 2 results 3 floats apart).
  float big[16];
  EXPECT_EXIT(ztrt_matmul(ctx.get(), ZTRT_F32, big, big, big, 2, 2, 2, 1, 0, 0, 2,
                              2, 3),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: matmul: stride_c 3 is less than m \\* n "
              "= 4 with batch 2 \\(results would overwrite each other\\)\n$");
}

TEST_F(KernelTest, ResultsDoNotDependOnThreadCount) {
  // Big enough for the parallel paths; every kernel with a reduction.
  const int64_t rows = 512, cols = 128;
  auto x = testValues(rows * cols, 91), dy = testValues(rows * cols, 92),
       g = testValues(cols, 93), b = testValues(cols, 94);
  auto run = [&](int threads) {
    ctx->backend().setThreads(threads);
    std::vector<float> out(4 * rows * cols + 2 * cols);
    float *y = out.data(), *sm = y + rows * cols, *dx = sm + rows * cols,
          *dx2 = dx + rows * cols, *dg = dx2 + rows * cols, *db = dg + cols;
    ztrt_layer_norm(ctx.get(), ZTRT_F32, x.data(), g.data(), b.data(), y, rows, cols,
                        1e-5);
    ztrt_layer_norm_grad(ctx.get(), ZTRT_F32, dy.data(), x.data(), g.data(), dx, dg,
                             db, rows, cols, 1e-5);
    ztrt_softmax(ctx.get(), ZTRT_F32, x.data(), sm, rows, cols, 0);
    ztrt_softmax_grad(ctx.get(), ZTRT_F32, dy.data(), sm, dx2, rows, cols);
    return out;
  };
  auto one = run(1), two = run(2);
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
}

TEST_F(KernelTest, Copy2dMovesRowsBetweenStrides) {
  // Pack 3 rows of 2 floats out of a 3 x 4 matrix (stride 16 bytes) into a
  // dense 3 x 2 block, then unpack them into columns 1..2 of another.
  std::vector<float> src(12);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<float>(i);
  std::vector<float> packed(6, -1.0f);
  ztrt_copy_2d(ctx.get(), src.data(), packed.data(), 3, 8, 16, 8);
  EXPECT_EQ(packed, (std::vector<float>{0, 1, 4, 5, 8, 9}));
  std::vector<float> unpacked(12, -1.0f);
  ztrt_copy_2d(ctx.get(), packed.data(), unpacked.data() + 1, 3, 8, 8, 16);
  EXPECT_EQ(unpacked,
            (std::vector<float>{-1, 0, 1, -1, -1, 4, 5, -1, -1, 8, 9, -1}));
  // Packed on both sides (one block), a stride-0 source (one row
  // repeated), no rows, empty rows, and a region onto itself.
  std::vector<float> dense(12, -1.0f);
  ztrt_copy_2d(ctx.get(), src.data(), dense.data(), 4, 12, 12, 12);
  EXPECT_EQ(dense, src);
  std::vector<float> repeated(6, -1.0f);
  ztrt_copy_2d(ctx.get(), src.data() + 2, repeated.data(), 3, 8, 0, 8);
  EXPECT_EQ(repeated, (std::vector<float>{2, 3, 2, 3, 2, 3}));
  ztrt_copy_2d(ctx.get(), nullptr, nullptr, 0, 8, 8, 8);
  ztrt_copy_2d(ctx.get(), nullptr, nullptr, 5, 0, 8, 8);
  ztrt_copy_2d(ctx.get(), src.data(), src.data(), 3, 8, 16, 16);
  EXPECT_EQ(dense, src);
  // Interleaved in one buffer: even rows to odd rows, disjoint although
  // the two regions' extents overlap.
  std::vector<float> slots = {0, -1, 1, -1, 2, -1};
  ztrt_copy_2d(ctx.get(), slots.data(), slots.data() + 1, 3, 4, 8, 8);
  EXPECT_EQ(slots, (std::vector<float>{0, 0, 1, 1, 2, 2}));
  // Single bytes: row_bytes need not be a multiple of 4.
  const char text[] = "abcdefgh";
  char out[5] = {};
  ztrt_copy_2d(ctx.get(), text, out, 4, 1, 2, 1);
  EXPECT_STREQ(out, "aceg");
}

TEST_F(KernelTest, Copy2dRejectsMalformedArguments) {
  std::vector<float> a(16), b(16);
  using ::testing::ExitedWithCode;
  EXPECT_EXIT(ztrt_copy_2d(ctx.get(), a.data(), b.data(), -1, 4, 4, 4),
              ExitedWithCode(1),
              "^ztrain: error: copy_2d: negative row count -1\n$");
  EXPECT_EXIT(ztrt_copy_2d(ctx.get(), a.data(), b.data(), 2, -4, 4, 4),
              ExitedWithCode(1), "copy_2d: negative row size -4");
  EXPECT_EXIT(ztrt_copy_2d(ctx.get(), a.data(), b.data(), 2, 4, -4, 4),
              ExitedWithCode(1), "copy_2d: negative src_stride -4");
  EXPECT_EXIT(ztrt_copy_2d(ctx.get(), a.data(), b.data(), 2, 4, 4, -8),
              ExitedWithCode(1), "copy_2d: negative dst_stride -8");
  EXPECT_EXIT(ztrt_copy_2d(ctx.get(), a.data(), b.data(), 2, 8, 8, 4),
              ExitedWithCode(1),
              "^ztrain: error: copy_2d: dst_stride 4 is less than row_bytes "
              "8 \\(rows would overwrite each other\\)\n$");
  EXPECT_EXIT(ztrt_copy_2d(ctx.get(), a.data(), a.data() + 2, 2, 16, 16, 16),
              ExitedWithCode(1),
              "^ztrain: error: copy_2d: source and destination rows "
              "overlap\n$");
  // Only the last source row meets the first destination row.
  EXPECT_EXIT(ztrt_copy_2d(ctx.get(), a.data(), a.data() + 6, 2, 8, 24, 8),
              ExitedWithCode(1), "copy_2d: source and destination rows");
  EXPECT_EXIT(ztrt_copy_2d(ctx.get(), a.data(), b.data(), int64_t(1) << 40, 8,
                           int64_t(1) << 40, 8),
              ExitedWithCode(1), "copy_2d: .* overflow int64");
}

// The AVX-512 build of the f32 elementwise and softmax kernels
// (backends/cpu/IsaKernels.h) against the baseline build, bit for bit: the same
// source without FMA contraction must round alike, so ranks on processors
// with and without AVX-512 stay in step. Inputs cover the vector loops'
// tails, the parallel split, and special values (NaN only needs to stay
// NaN: its payload is the hardware's).
