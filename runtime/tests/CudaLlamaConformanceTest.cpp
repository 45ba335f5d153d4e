//===- CudaLlamaConformanceTest.cpp - Cuda conformance: Llama kernels -----===//
//
// Part of ztrain's runtime tests: the cuda conformance suite
// (CudaConformanceTest.cpp's file comment) for the kernels of Llama-class
// models (activations, where, dropout, masked_fill, rms_norm, RoPE, the
// max reduction), in f32 against the cpu and in bf16 / f16 against the
// float kernels (CudaDTypeTest).
//
//===----------------------------------------------------------------------===//

#include "CudaConformance.h"

using namespace ztrt;
using namespace ztrt::test;

namespace {

// --- The Llama kernels ------------------------------------------------------

/// An int32 mask of n entries, about 3 in 7 set (to 2 or -1: any non-zero
/// value masks).
std::vector<int32_t> maskValues(size_t n) {
  std::vector<int32_t> m(n);
  for (size_t j = 0; j < n; ++j)
    m[j] = (j * 31) % 7 < 3 ? (j % 2 ? -1 : 2) : 0;
  return m;
}

/// Whether every double that vecmath::ropeCosSin rounds to float for these
/// positions (the power theta^(2i / dim), the cosine and the sine of the
/// float angle) lies farther than 2^-48 of its magnitude from a point
/// halfway between two floats. CUDA's double pow, cos and sin are within 2
/// ulp of double (2^-51 relative), glibc's within 1: where this holds, the
/// two round to the same float, and the table is bitwise the cpu's.
bool ropeTableRoundsRobustly(int64_t seq, int64_t dim, double theta,
                             const vecmath::RopeScaling &scaling = {}) {
  auto robust = [](double v) {
    const float f = static_cast<float>(v);
    if (!std::isfinite(f))
      return false;
    const float next = std::nextafter(f, v >= f ? INFINITY : -INFINITY);
    const double halfway = (static_cast<double>(f) + next) / 2.0;
    return std::fabs(v - halfway) > std::ldexp(std::fabs(v), -48);
  };
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const double power =
        std::pow(static_cast<double>(static_cast<float>(theta)),
                 static_cast<double>(exponent));
    if (!robust(power))
      return false;
    // Llama 3's scaling of it is float arithmetic, the same on both.
    const float inv = vecmath::ropeInvFreq(i, dim, theta, scaling);
    for (int64_t t = 0; t < seq; ++t) {
      const double a = static_cast<float>(t) * inv;
      if (!robust(std::cos(a)) || !robust(std::sin(a)))
        return false;
    }
  }
  return true;
}

TEST_F(CudaConformanceTest, LlamaElementwiseMatchTheCpu) {
  // No FMA contraction on either side, IEEE division and square root, the
  // cpu's formulas (backends/cpu/VecMath.h): sigmoid_grad, sqrt, rsqrt, rsqrt_grad
  // and div are bitwise, special values included. The others call expf:
  // - exp: CUDA's expf is within 2 ulp of exp, glibc's within 1: 3 ulp.
  // - sigmoid = 1 / (1 + e), silu = v / (1 + e): the two e differ by 3 ulp
  //   (3 * 2^-23 relative), 1 + e by no more relatively; with the two
  //   roundings on each side the quotients differ by 5 * 2^-23 relative:
  //   10 ulp (no result is subnormal for these inputs).
  // - silu_grad = dy s (1 + v (1 - s)) cancels near silu'(v) = 0
  //   (v ~ -1.28): s off by 5 * 2^-23 and the roundings bound the
  //   difference by |dy| (15 |v| + 8) 2^-23 <= |dy| (1 + |v|) 2^-19.
  // Measured on the emulator (glibc's expf on both sides): all bitwise,
  // which is its bound.
  const int64_t expUlps = kEmulator ? 0 : 3, sigmoidUlps = kEmulator ? 0 : 10;
  for (size_t n : {size_t(1), size_t(37), (size_t(1) << 16) + 3}) {
    auto a = twin(inputs(n, 1, 4.0f, true)), b = twin(inputs(n, 2, 4.0f, true));
    auto wide = twin(inputs(n, 3, 20.0f, true));
    std::vector<float> magnitudes = inputs(n, 4, 100.0f, true);
    for (float &v : magnitudes)
      v = std::fabs(v);
    auto positive = twin(magnitudes);
    auto out = output(n);
    const int64_t len = static_cast<int64_t>(n);
    const std::string size = " n=" + std::to_string(n);
    using Unary = void (*)(ztrt_ctx *, int32_t, const void *, void *, int64_t);
    using Binary = void (*)(ztrt_ctx *, int32_t, const void *, const void *,
                            void *, int64_t);
    auto unary = [&](Unary f, Twin<float> &x) {
      both([&](ztrt_ctx *c, bool d) {
        f(c, ZTRT_F32, at(x, d), at(out, d), len);
      });
      return fetch(out);
    };
    auto binary = [&](Binary f, Twin<float> &x, Twin<float> &y) {
      both([&](ztrt_ctx *c, bool d) {
        f(c, ZTRT_F32, at(x, d), at(y, d), at(out, d), len);
      });
      return fetch(out);
    };
    for (Twin<float> *x : {&a, &wide, &positive}) {
      const std::string in = (x == &a ? " x" : x == &wide ? " wide" : " |x|");
      expectUlps(unary(ztrt_exp, *x), out.host, expUlps, "exp" + in + size);
      expectUlps(unary(ztrt_sigmoid, *x), out.host, sigmoidUlps,
                 "sigmoid" + in + size);
      expectUlps(unary(ztrt_silu, *x), out.host, sigmoidUlps,
                 "silu" + in + size);
      expectBitwise(unary(ztrt_sqrt, *x), out.host, "sqrt" + in + size);
      expectBitwise(unary(ztrt_rsqrt, *x), out.host, "rsqrt" + in + size);
      std::vector<float> got = binary(ztrt_silu_grad, b, *x);
      const std::vector<float> &v = x->host, &dy = b.host;
      expectUlpsOrBound(
          got, out.host, sigmoidUlps,
          [&](size_t i) {
            return kEmulator ? 0.0
                             : std::fabs(dy[i]) * (1.0 + std::fabs(v[i])) *
                                   std::ldexp(1.0, -19);
          },
          "silu_grad" + in + size);
      expectBitwise(binary(ztrt_sigmoid_grad, b, *x), out.host,
                    "sigmoid_grad" + in + size);
      expectBitwise(binary(ztrt_rsqrt_grad, b, *x), out.host,
                    "rsqrt_grad" + in + size);
      expectBitwise(binary(ztrt_div, *x, b), out.host, "div" + in + size);
    }
    // In place: out aliases an input.
    both([&](ztrt_ctx *c, bool d) {
      ztrt_div(c, ZTRT_F32, at(a, d), at(b, d), at(a, d), len);
    });
    expectBitwise(fetch(a), a.host, "div in place" + size);
  }
}

TEST_F(CudaConformanceTest, ImportedActivationsMatchTheCpu) {
  // The activations the PyTorch importer adds (backends/cpu/VecMath.h, the same
  // expressions on both sides): tanh_grad is arithmetic only, bitwise. The
  // others call erff or expf, which CUDA computes within 2 ulp and glibc
  // within 1: 3 ulp for erf; gelu_erf = 0.5 x (1 + erf(x / sqrt 2))
  // cancels where erf nears -1, so its bound is absolute there, |x| 2^-21
  // (3 ulp of a value below 1, times |x| / 2, with margin); likewise
  // gelu_erf_grad, |dy| (1 + |x|) 2^-20; erf_grad = c exp(-x^2) dy: 3 ulp of
  // exp plus two roundings, 5 ulp; tanh (Cephes, expf for |x| >= 0.625):
  // 1 - 2 / (e + 1) loses at most 2 bits more, 10 ulp. Measured on the
  // emulator (glibc on both sides): bitwise, which is its bound.
  const int64_t erfUlps = kEmulator ? 0 : 3, expUlps = kEmulator ? 0 : 5,
                tanhUlps = kEmulator ? 0 : 10;
  for (size_t n : {size_t(1), size_t(37), (size_t(1) << 16) + 3}) {
    auto a = twin(inputs(n, 5, 4.0f, true)), b = twin(inputs(n, 6, 4.0f, true));
    auto out = output(n);
    const int64_t len = static_cast<int64_t>(n);
    const std::string size = " n=" + std::to_string(n);
    using Unary = void (*)(ztrt_ctx *, int32_t, const void *, void *, int64_t);
    using Binary = void (*)(ztrt_ctx *, int32_t, const void *, const void *,
                            void *, int64_t);
    auto unary = [&](Unary f, Twin<float> &x) {
      both([&](ztrt_ctx *c, bool d) {
        f(c, ZTRT_F32, at(x, d), at(out, d), len);
      });
      return fetch(out);
    };
    auto binary = [&](Binary f, Twin<float> &x, Twin<float> &y) {
      both([&](ztrt_ctx *c, bool d) {
        f(c, ZTRT_F32, at(x, d), at(y, d), at(out, d), len);
      });
      return fetch(out);
    };
    const std::vector<float> &v = a.host, &dy = b.host;
    expectUlps(unary(ztrt_erf, a), out.host, erfUlps, "erf" + size);
    expectUlps(unary(ztrt_tanh, a), out.host, tanhUlps, "tanh" + size);
    expectUlps(binary(ztrt_erf_grad, b, a), out.host, expUlps, "erf_grad" + size);
    expectBitwise(binary(ztrt_tanh_grad, b, a), out.host, "tanh_grad" + size);
    expectUlpsOrBound(
        unary(ztrt_gelu_erf, a), out.host, erfUlps,
        [&](size_t i) {
          return kEmulator ? 0.0 : std::fabs(v[i]) * std::ldexp(1.0, -21);
        },
        "gelu_erf" + size);
    expectUlpsOrBound(
        binary(ztrt_gelu_erf_grad, b, a), out.host, expUlps,
        [&](size_t i) {
          return kEmulator ? 0.0
                           : std::fabs(dy[i]) * (1.0 + std::fabs(v[i])) *
                                 std::ldexp(1.0, -20);
        },
        "gelu_erf_grad" + size);
  }
}

TEST_F(CudaConformanceTest, WhereAndDropoutAreBitwise) {
  // where copies bits; dropout draws the same 24 bits per element (base/Rng.h
  // on both sides) and does one float multiply: bitwise, NaN and inf
  // included, at every rank offset of the counter.
  for (int64_t outer : {int64_t(1), int64_t(7), int64_t(300)}) {
    const int64_t inner = 37, n = outer * inner;
    auto a = twin(inputs(n, 121, 1.0f, n >= 8)),
         b = twin(inputs(n, 122, 1.0f, n >= 8));
    auto mask = twin(maskValues(inner));
    auto out = output(n);
    const std::string what = " n=" + std::to_string(n);
    both([&](ztrt_ctx *c, bool d) {
      ztrt_where(c, ZTRT_F32, at(mask, d), at(a, d), at(b, d), at(out, d),
                 outer, inner);
    });
    expectBitwise(fetch(out), out.host, "where" + what);
    for (int64_t step : {1, 4}) {
      c()->step = g()->step = step;
      c()->seed = g()->seed = 99;
      for (double p : {0.0, 0.1, 0.5, 1.0}) {
        both([&](ztrt_ctx *c, bool d) {
          ztrt_dropout(c, ZTRT_F32, at(a, d), at(out, d), n, 3, p);
        });
        expectBitwise(fetch(out), out.host,
                      "dropout p=" + std::to_string(p) + what);
      }
    }
  }
}

TEST_F(CudaConformanceTest, MaskedFillIsBitwise) {
  // A copy of x's bits or the value rounded to float: no arithmetic.
  struct Case {
    int64_t outer, inner;
  };
  for (Case cs :
       {Case{1, 1}, Case{3, 37}, Case{2 * 3 * 5, 5 * 5}, Case{7, 1000}}) {
    const int64_t n = cs.outer * cs.inner;
    auto x = twin(inputs(n, 120, 1.0f, n >= 8));
    auto mask = twin(maskValues(cs.inner));
    auto out = output(n);
    const std::string what =
        " " + std::to_string(cs.outer) + "x" + std::to_string(cs.inner);
    for (double value : {-HUGE_VAL, 2.5, 0.1}) {
      both([&](ztrt_ctx *c, bool d) {
        ztrt_masked_fill(c, ZTRT_F32, at(x, d), at(mask, d), at(out, d),
                         cs.outer, cs.inner, value);
      });
      expectBitwise(fetch(out), out.host, "masked_fill" + what);
    }
    both([&](ztrt_ctx *c, bool d) {
      ztrt_masked_fill(c, ZTRT_F32, at(x, d), at(mask, d), at(x, d), cs.outer,
                       cs.inner, 0.0);
    });
    expectBitwise(fetch(x), x.host, "masked_fill in place" + what);
  }
}

TEST_F(CudaConformanceTest, RmsNormAndGrad) {
  // Both row paths, as in LayerNormAndGrad.
  for (auto shape : {std::pair<int64_t, int64_t>{1, 1},
                     {7, 16},
                     {5, 33},
                     {64, 1000},
                     {300, 768},
                     {5, 1025},
                     {9, 3000}}) {
    const int64_t rows = shape.first, cols = shape.second;
    auto x = twin(inputs(rows * cols, 140, 3.0f)),
         gamma = twin(inputs(cols, 141)), dy = twin(inputs(rows * cols, 142));
    auto y = output(rows * cols), dx = output(rows * cols),
         dgamma = output(cols);
    const std::string what =
        " " + std::to_string(rows) + "x" + std::to_string(cols);
    both([&](ztrt_ctx *c, bool d) {
      ztrt_rms_norm(c, ZTRT_F32, at(x, d), at(gamma, d), at(y, d), rows, cols,
                    1e-6);
      ztrt_rms_norm_grad(c, ZTRT_F32, at(dy, d), at(x, d), at(gamma, d),
                         at(dx, d), at(dgamma, d), rows, cols, 1e-6);
    });
    // The same double formulas with the sum of squares in another order (a
    // block tree): rstd differs by ~cols 2^-52 relative, and y = x rstd
    // gamma is a product (no cancellation): equal or adjacent floats.
    expectUlps(fetch(y), y.host, 1, "rms_norm" + what);
    // dx = rstd (g - xhat mean(g xhat)) can cancel: where it does, the
    // double difference's error (~1e-15 of terms that are O(1) here) is the
    // bound instead.
    expectUlpsOrAbs(fetch(dx), dx.host, 1, 1e-12, "rms_norm_grad dx" + what);
    // Column sums over rows in double, chunked instead of serial: adjacent
    // floats, or ~rows 2^-53 sum|terms| (< 1e-11 here) near zero.
    expectUlpsOrAbs(fetch(dgamma), dgamma.host, 1, 1e-11,
                    "rms_norm_grad dgamma" + what);
  }
}

TEST_F(CudaConformanceTest, RotaryEmbeddingIsBitwise) {
  // Both backends take cos / sin from vecmath::ropeCosSin (a table of one
  // [seq, dim / 2] block each) and rotate with two float products and a
  // sum, no FMA: bitwise, given the same table. That the table is the same
  // on a GPU is checked for each case (ropeTableRoundsRobustly).
  struct Case {
    int64_t outer, seq, inner, dim;
    double theta;
    vecmath::RopeScaling scaling = {};
  };
  // The last: Llama 3's scaling with wavelengths below 32 / 4, between, and
  // above 32 (each branch of ropeInvFreq).
  for (const Case &cs :
       {Case{1, 1, 1, 2, 10000.0}, Case{2, 7, 3, 16, 10000.0},
        Case{1, 5, 1, 6, 10000.0}, Case{3, 33, 4, 64, 500000.0},
        Case{1, 130, 2, 128, 10000.0},
        Case{2, 40, 2, 64, 500000.0, {8.0, 1.0, 4.0, 32.0}}}) {
    ASSERT_TRUE(ropeTableRoundsRobustly(cs.seq, cs.dim, cs.theta, cs.scaling))
        << "choose other test positions: this table may round differently "
           "on a GPU";
    const int64_t n = cs.outer * cs.seq * cs.inner * cs.dim;
    auto x = twin(inputs(n, 150, 2.0f, n >= 8)), out = output(n);
    const std::string what =
        " [" + std::to_string(cs.outer) + ", " + std::to_string(cs.seq) + ", " +
        std::to_string(cs.inner) + ", " + std::to_string(cs.dim) + "]";
    for (int inverse : {0, 1}) {
      both([&](ztrt_ctx *c, bool d) {
        ztrt_rotary_embedding(c, ZTRT_F32, at(x, d), at(out, d), cs.outer,
                              cs.seq, cs.inner, cs.dim, cs.theta,
                              cs.scaling.factor, cs.scaling.lowFreqFactor,
                              cs.scaling.highFreqFactor,
                              cs.scaling.originalMaxPositions, inverse);
      });
      expectBitwise(fetch(out), out.host,
                    std::string(inverse ? "rotary inverse" : "rotary") + what);
    }
    both([&](ztrt_ctx *c, bool d) {
      ztrt_rotary_embedding(c, ZTRT_F32, at(x, d), at(x, d), cs.outer, cs.seq,
                            cs.inner, cs.dim, cs.theta, cs.scaling.factor,
                            cs.scaling.lowFreqFactor, cs.scaling.highFreqFactor,
                            cs.scaling.originalMaxPositions, 0);
    });
    expectBitwise(fetch(x), x.host, "rotary in place" + what);
  }
}

TEST_F(CudaConformanceTest, MaxReductionAndGradAreBitwise) {
  // max: comparisons only, each output's elements in input order (segments
  // merged in order) under the cpu's rule (NaN wins; of equal values, +0
  // and -0, the first stays): bitwise, NaN and the sign of zero included.
  // reduce_max_grad: the same equality tests, an integer count and one
  // float division dy / ties: bitwise.
  const std::vector<int64_t> shape{6, 70, 3, 33};
  int64_t n = 1;
  for (int64_t v : shape)
    n *= v;
  // Quarters: many ties; signed zeros: every maximum a zero, -0 or +0
  // first; and NaN, infinities among quarters.
  std::vector<float> zeros(n);
  for (int64_t i = 0; i < n; ++i)
    zeros[i] = (i * 2654435761u) % 5 == 0 ? -1.0f : (i * 7) % 3 ? -0.0f : 0.0f;
  std::vector<std::pair<std::string, std::vector<float>>> sets{
      {"quarters", quarters(n, 160)},
      {"signed zeros", zeros},
      {"special", quarters(n, 161, true)}};
  for (auto &[name, values] : sets) {
    auto x = twin(values);
    for (const std::vector<int64_t> &mask :
         std::vector<std::vector<int64_t>>{{0, 0, 0, 0},
                                           {1, 0, 0, 0},
                                           {0, 0, 0, 1},
                                           {1, 1, 1, 0},
                                           {0, 1, 0, 1},
                                           {1, 1, 1, 1},
                                           {1, 0, 1, 1}}) {
      int64_t outN = 1;
      std::string what = " " + name + " mask";
      for (size_t d = 0; d < shape.size(); ++d) {
        outN *= mask[d] ? 1 : shape[d];
        what += std::to_string(mask[d]);
      }
      auto y = output(outN), dy = twin(inputs(outN, 162)), dx = output(n);
      both([&](ztrt_ctx *c, bool d) {
        ztrt_reduce(c, ZTRT_F32, at(x, d), at(y, d), 4, shape.data(),
                    mask.data(), 2);
        ztrt_reduce_max_grad(c, ZTRT_F32, at(dy, d), at(x, d), at(y, d),
                             at(dx, d), 4, shape.data(), mask.data());
      });
      expectBitwise(fetch(y), y.host, "reduce max" + what);
      expectBitwise(fetch(dx), dx.host, "reduce_max_grad" + what);
    }
  }
  // Few outputs, many rows (the segmented path), and everything at once.
  const std::vector<int64_t> bias{8192, 96};
  auto x = twin(quarters(8192 * 96, 163, true)), dx = output(8192 * 96);
  for (const std::vector<int64_t> &mask :
       std::vector<std::vector<int64_t>>{{1, 0}, {1, 1}}) {
    const int64_t outN = mask[1] ? 1 : 96;
    auto y = output(outN), dy = twin(inputs(outN, 164));
    both([&](ztrt_ctx *c, bool d) {
      ztrt_reduce(c, ZTRT_F32, at(x, d), at(y, d), 2, bias.data(), mask.data(),
                  2);
      ztrt_reduce_max_grad(c, ZTRT_F32, at(dy, d), at(x, d), at(y, d),
                           at(dx, d), 2, bias.data(), mask.data());
    });
    expectBitwise(fetch(y), y.host, "reduce max rows");
    expectBitwise(fetch(dx), dx.host, "reduce_max_grad rows");
  }
  // The ABI's meaning, not only agreement: ties share dy, a NaN takes the
  // maximum and no element matches it.
  const int64_t shape2[2] = {2, 4}, rowMask[2] = {0, 1};
  auto small = twin(std::vector<float>{1, 3, 3, 2, 0, NAN, 5, 1});
  auto maxes = output(2), ones = twin(std::vector<float>{1.0f, 1.0f}),
       grads = output(8);
  both([&](ztrt_ctx *c, bool d) {
    ztrt_reduce(c, ZTRT_F32, at(small, d), at(maxes, d), 2, shape2, rowMask, 2);
    ztrt_reduce_max_grad(c, ZTRT_F32, at(ones, d), at(small, d), at(maxes, d),
                         at(grads, d), 2, shape2, rowMask);
  });
  const std::vector<float> gotY = fetch(maxes), gotDx = fetch(grads);
  EXPECT_EQ(gotY[0], 3.0f);
  EXPECT_TRUE(std::isnan(gotY[1]));
  EXPECT_EQ(gotDx, (std::vector<float>{0, 0.5f, 0.5f, 0, 0, 0, 0, 0}));
  expectBitwise(gotDx, grads.host, "reduce_max_grad ties");
}

TYPED_TEST(CudaDTypeTest, LlamaElementwiseAreTheFloatKernelsRounded) {
  // The same float formulas on the widened values, rounded once: bitwise
  // whatever CUDA's expf returns, since both runs call the same one.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  using T = TypeParam;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  for (size_t n : {size_t(1), size_t(37), (size_t(1) << 16) + 3}) {
    std::vector<T> magnitudes = this->values(n, 4, 100.0f, true);
    for (T &v : magnitudes)
      v = T(std::fabs(static_cast<float>(v)));
    auto a = this->pair(this->values(n, 1, 4.0f, true)),
         b = this->pair(this->values(n, 2, 4.0f, true)),
         wide = this->pair(this->values(n, 3, 20.0f, true)),
         positive = this->pair(magnitudes);
    auto out = this->output(n);
    const int64_t len = static_cast<int64_t>(n);
    using Unary = void (*)(ztrt_ctx *, int32_t, const void *, void *, int64_t);
    using Binary = void (*)(ztrt_ctx *, int32_t, const void *, const void *,
                            void *, int64_t);
    for (P *in : {&a, &wide, &positive}) {
      const std::string what = (in == &a      ? " x"
                                : in == &wide ? " wide"
                                              : " |x|") +
                               std::string(" n=") + std::to_string(n);
      for (auto [f, name] : {std::pair<Unary, const char *>{ztrt_exp, "exp"},
                             {ztrt_sigmoid, "sigmoid"},
                             {ztrt_silu, "silu"},
                             {ztrt_sqrt, "sqrt"},
                             {ztrt_rsqrt, "rsqrt"}}) {
        this->each(
            [&](int32_t ty, bool t) { f(x, ty, at(*in, t), at(out, t), len); });
        this->expectRounded(out, name + what);
      }
      for (auto [f, name] :
           {std::pair<Binary, const char *>{ztrt_silu_grad, "silu_grad"},
            {ztrt_sigmoid_grad, "sigmoid_grad"},
            {ztrt_rsqrt_grad, "rsqrt_grad"}}) {
        this->each([&](int32_t ty, bool t) {
          f(x, ty, at(b, t), at(*in, t), at(out, t), len);
        });
        this->expectRounded(out, name + what);
      }
      this->each([&](int32_t ty, bool t) {
        ztrt_div(x, ty, at(*in, t), at(b, t), at(out, t), len);
      });
      this->expectRounded(out, "div" + what);
    }
  }
  for (auto shape : {std::pair<int64_t, int64_t>{1, 1}, {3, 37}, {30, 25}}) {
    const int64_t outer = shape.first, inner = shape.second;
    auto in = this->pair(this->values(outer * inner, 120, 1.0f, true));
    auto out = this->output(outer * inner);
    void *mask = this->upload(maskValues(inner));
    for (double value : {-HUGE_VAL, 2.5, 0.1}) {
      this->each([&](int32_t ty, bool t) {
        ztrt_masked_fill(x, ty, at(in, t), mask, at(out, t), outer, inner,
                         value);
      });
      this->expectRounded(out, "masked_fill");
    }
    auto other = this->pair(this->values(outer * inner, 121, 1.0f, true));
    this->each([&](int32_t ty, bool t) {
      ztrt_where(x, ty, mask, at(in, t), at(other, t), at(out, t), outer,
                 inner);
    });
    this->expectRounded(out, "where");
    x->step = 2;
    for (double p : {0.1, 0.5}) {
      this->each([&](int32_t ty, bool t) {
        ztrt_dropout(x, ty, at(in, t), at(out, t), outer * inner, 1, p);
      });
      this->expectRounded(out, "dropout");
    }
  }
}

TYPED_TEST(CudaDTypeTest, RmsNormAndGradAreTheFloatOnesRounded) {
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  for (auto shape : {std::pair<int64_t, int64_t>{1, 1},
                     {7, 16},
                     {5, 33},
                     {64, 1000},
                     {300, 96}}) {
    const int64_t rows = shape.first, cols = shape.second;
    auto in = this->pair(this->values(rows * cols, 140, 3.0f)),
         gamma = this->pair(this->values(cols, 141)),
         dy = this->pair(this->values(rows * cols, 142));
    auto y = this->output(rows * cols), dx = this->output(rows * cols),
         dgamma = this->output(cols);
    const std::string what =
        " " + std::to_string(rows) + "x" + std::to_string(cols);
    this->each([&](int32_t ty, bool t) {
      ztrt_rms_norm(x, ty, at(in, t), at(gamma, t), at(y, t), rows, cols, 1e-6);
      ztrt_rms_norm_grad(x, ty, at(dy, t), at(in, t), at(gamma, t), at(dx, t),
                         at(dgamma, t), rows, cols, 1e-6);
    });
    this->expectRounded(y, "rms_norm" + what);
    this->expectRounded(dx, "rms_norm_grad dx" + what);
    this->expectRounded(dgamma, "rms_norm_grad dgamma" + what);
  }
}

TYPED_TEST(CudaDTypeTest, RotaryEmbeddingIsTheFloatOneRounded) {
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  struct Case {
    int64_t outer, seq, inner, dim;
    double theta;
  };
  for (const Case &cs :
       {Case{1, 1, 1, 2, 10000.0}, Case{2, 7, 3, 16, 10000.0},
        Case{1, 5, 1, 6, 10000.0}, Case{3, 33, 4, 64, 500000.0}}) {
    const int64_t n = cs.outer * cs.seq * cs.inner * cs.dim;
    auto in = this->pair(this->values(n, 150, 2.0f, n >= 8));
    auto out = this->output(n);
    for (int inverse : {0, 1}) {
      this->each([&](int32_t ty, bool t) {
        ztrt_rotary_embedding(x, ty, at(in, t), at(out, t), cs.outer, cs.seq,
                              cs.inner, cs.dim, cs.theta, 0.0, 1.0, 4.0, 8192.0,
                              inverse);
      });
      this->expectRounded(out, inverse ? "rotary inverse" : "rotary");
    }
    this->each([&](int32_t ty, bool t) {
      ztrt_rotary_embedding(x, ty, at(in, t), at(in, t), cs.outer, cs.seq,
                            cs.inner, cs.dim, cs.theta, 0.0, 1.0, 4.0, 8192.0,
                            0);
    });
    this->expectRounded(in, "rotary in place");
  }
}

TYPED_TEST(CudaDTypeTest, MaxReductionAndGradAreTheFloatOnesRounded) {
  // The maximum of values of T is one of them (rounding it is exact); the
  // ties and the division dy / ties are the float kernel's.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  using T = TypeParam;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  const std::vector<int64_t> shape{6, 70, 3, 33};
  int64_t n = 1;
  for (int64_t v : shape)
    n *= v;
  const std::vector<float> grid = quarters(n, 161, true);
  std::vector<T> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = T(grid[i]);
  auto in = this->pair(values);
  for (const std::vector<int64_t> &mask :
       std::vector<std::vector<int64_t>>{{0, 0, 0, 0},
                                         {1, 0, 0, 0},
                                         {0, 1, 0, 1},
                                         {1, 1, 1, 1},
                                         {1, 0, 1, 1}}) {
    int64_t outN = 1;
    for (size_t d = 0; d < shape.size(); ++d)
      outN *= mask[d] ? 1 : shape[d];
    auto y = this->output(outN), dx = this->output(n);
    auto dy = this->pair(this->values(outN, 162));
    this->each([&](int32_t ty, bool t) {
      ztrt_reduce(x, ty, at(in, t), at(y, t), 4, shape.data(), mask.data(), 2);
      ztrt_reduce_max_grad(x, ty, at(dy, t), at(in, t), at(y, t), at(dx, t), 4,
                           shape.data(), mask.data());
    });
    this->expectRounded(y, "reduce max");
    this->expectRounded(dx, "reduce_max_grad");
  }
}

} // namespace
