//===- LlamaKernelTest.cpp - The f32 kernels of Llama-class models --------===//
//
// Part of ztrain's runtime tests. Each kernel against a reference written
// from its definition (double precision where the kernel accumulates in
// double), plus the properties the end-to-end gradient checks cannot see:
// ties and NaN in the max reduction, RoPE's inverse undoing it, the mask
// broadcast of masked_fill and where, dropout's mask against its
// definition. The 16-bit instantiations are checked against
// these f32 kernels bit for bit in DTypeKernelTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "backends/cpu/VecMath.h"
#include "ztrt.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

using namespace ztrt::test;

namespace {

class LlamaKernelTest : public ::testing::Test {
protected:
  std::unique_ptr<ztrt_ctx> ctx = cpuContext();
};

TEST_F(LlamaKernelTest, ActivationsFollowPyTorchsFloatFormulas) {
  auto x = testValues(1000, 71);
  std::vector<float> out(x.size());
  for (float &v : x)
    v *= 6.0f;
  ztrt_silu(ctx.get(), ZTRT_F32, x.data(), out.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    // The same float expression as PyTorch's CPU kernel: bitwise.
    ASSERT_EQ(out[i], x[i] / (1.0f + std::exp(-x[i]))) << "silu at " << x[i];
  ztrt_sigmoid(ctx.get(), ZTRT_F32, x.data(), out.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(out[i], 1.0f / (1.0f + std::exp(-x[i]))) << "sigmoid";
  ztrt_exp(ctx.get(), ZTRT_F32, x.data(), out.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(out[i], std::exp(x[i])) << "exp";
  std::vector<float> pos(x.size()), dy = testValues(x.size(), 72);
  for (size_t i = 0; i < x.size(); ++i)
    pos[i] = std::fabs(x[i]) + 0.01f;
  ztrt_sqrt(ctx.get(), ZTRT_F32, pos.data(), out.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(out[i], std::sqrt(pos[i])) << "sqrt";
  ztrt_rsqrt(ctx.get(), ZTRT_F32, pos.data(), out.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    // An IEEE division of a correctly rounded sqrt, not an approximation.
    ASSERT_EQ(out[i], 1.0f / std::sqrt(pos[i])) << "rsqrt";
  ztrt_div(ctx.get(), ZTRT_F32, x.data(), pos.data(), out.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(out[i], x[i] / pos[i]) << "div";
  // Gradients against the derivative in double: a few float roundings of
  // O(1) values, so 1e-5 relative (a formula error would be O(1)).
  ztrt_silu_grad(ctx.get(), ZTRT_F32, dy.data(), x.data(), out.data(),
                 x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double s = 1.0 / (1.0 + std::exp(-(double)x[i]));
    double ref = dy[i] * s * (1.0 + x[i] * (1.0 - s));
    ASSERT_NEAR(out[i], ref, 1e-5 * (1.0 + std::fabs(ref))) << "silu_grad";
  }
  ztrt_rsqrt(ctx.get(), ZTRT_F32, pos.data(), out.data(), x.size());
  std::vector<float> y = out;
  ztrt_rsqrt_grad(ctx.get(), ZTRT_F32, dy.data(), y.data(), out.data(),
                  x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double ref = -0.5 * dy[i] * std::pow((double)pos[i], -1.5);
    ASSERT_NEAR(out[i], ref, 1e-5 * (1.0 + std::fabs(ref))) << "rsqrt_grad";
  }
}

TEST_F(LlamaKernelTest, MaxReductionSharesTiesAndPropagatesNaN) {
  // Rows of [2, 4]: max over the last dim.
  const int64_t shape[] = {2, 4}, mask[] = {0, 1};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {1, 3, 3, 2, -1, nan, 5, 0}, y(2), dx(8);
  ztrt_reduce(ctx.get(), ZTRT_F32, x.data(), y.data(), 2, shape, mask, 2);
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_TRUE(std::isnan(y[1])) << "torch.amax propagates NaN";
  std::vector<float> dy = {1.0f, 1.0f};
  ztrt_reduce_max_grad(ctx.get(), ZTRT_F32, dy.data(), x.data(), y.data(),
                       dx.data(), 2, shape, mask);
  // Two elements tie at 3: each gets half (torch.amax's backward).
  EXPECT_EQ(dx[0], 0.0f);
  EXPECT_EQ(dx[1], 0.5f);
  EXPECT_EQ(dx[2], 0.5f);
  EXPECT_EQ(dx[3], 0.0f);
  // Over the first dim: column maxima.
  const int64_t mask0[] = {1, 0};
  std::vector<float> z = {1, 7, -3, 2, 4, 7, -5, 9}, col(4);
  ztrt_reduce(ctx.get(), ZTRT_F32, z.data(), col.data(), 2, shape, mask0, 2);
  EXPECT_EQ(col, (std::vector<float>{4, 7, -3, 9}));
  std::vector<float> dcol = {1, 2, 3, 4}, dz(8);
  ztrt_reduce_max_grad(ctx.get(), ZTRT_F32, dcol.data(), z.data(), col.data(),
                       dz.data(), 2, shape, mask0);
  EXPECT_EQ(dz, (std::vector<float>{0, 1, 3, 0, 1, 1, 0, 4}));
}

TEST_F(LlamaKernelTest, RMSNormMatchesDoubleReference) {
  const int64_t rows = 5, cols = 33;
  auto x = testValues(rows * cols, 73), g = testValues(cols, 74);
  std::vector<float> y(x.size());
  ztrt_rms_norm(ctx.get(), ZTRT_F32, x.data(), g.data(), y.data(), rows, cols,
                1e-6);
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c)
      sq += (double)x[r * cols + c] * x[r * cols + c];
    double rstd = 1.0 / std::sqrt(sq / cols + 1e-6);
    for (int64_t c = 0; c < cols; ++c) {
      double ref = x[r * cols + c] * rstd * g[c];
      // Computed in double, rounded once: within half a float ulp.
      EXPECT_EQ(y[r * cols + c], static_cast<float>(ref)) << r << "," << c;
    }
  }
}

TEST_F(LlamaKernelTest, RotaryRotatesPairsByPositionAndInverseUndoesIt) {
  // [outer 2, seq 5, inner 3, dim 8].
  const int64_t outer = 2, seq = 5, inner = 3, dim = 8, half = 4;
  const int64_t n = outer * seq * inner * dim;
  auto x = testValues(n, 75);
  std::vector<float> y(n), back(n);
  ztrt_rotary_embedding(ctx.get(), ZTRT_F32, x.data(), y.data(), outer, seq,
                        inner, dim, 10000.0, 0.0, 1.0, 4.0, 8192.0, 0);
  for (int64_t row = 0; row < outer * seq * inner; ++row) {
    int64_t t = (row / inner) % seq;
    for (int64_t i = 0; i < half; ++i) {
      // Hugging Face's float32 frequencies, then the angle in double.
      float inv = 1.0f / std::pow(10000.0f, (float)(2 * i) / (float)dim);
      double a = static_cast<float>(t) * inv;
      double lo = x[row * dim + i], hi = x[row * dim + i + half];
      double c = std::cos(a), s = std::sin(a);
      // Two products and a sum of O(1) values in float, and the float
      // power may differ from the double one by an ulp: 1e-6.
      EXPECT_NEAR(y[row * dim + i], lo * c - hi * s, 1e-6);
      EXPECT_NEAR(y[row * dim + i + half], hi * c + lo * s, 1e-6);
    }
    if (t == 0) {
      for (int64_t i = 0; i < dim; ++i)
        // Position 0 is the identity rotation, exactly.
        EXPECT_EQ(y[row * dim + i], x[row * dim + i]);
    }
  }
  ztrt_rotary_embedding(ctx.get(), ZTRT_F32, y.data(), back.data(), outer,
                        seq, inner, dim, 10000.0, 0.0, 1.0, 4.0, 8192.0, 1);
  for (int64_t i = 0; i < n; ++i)
    // A rotation and its transpose in float: a few ulps of O(1) values.
    EXPECT_NEAR(back[i], x[i], 1e-6) << i;
}

TEST_F(LlamaKernelTest, Llama3ScalingStretchesOnlyTheLongWavelengths) {
  // transformers' llama3 rule with factor 8, low 1, high 4 and an original
  // context of 64: wavelengths (2 pi / inv) under 16 keep inv, over 64 take
  // inv / 8, and those between blend the two (strictly between them).
  const int64_t dim = 16;
  const double theta = 10000.0;
  using ztrt::vecmath::RopeScaling;
  namespace vecmath = ztrt::vecmath;
  const RopeScaling none{}, llama3{8.0, 1.0, 4.0, 64.0};
  int below = 0, between = 0, above = 0;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float inv = vecmath::ropeInvFreq(i, dim, theta, none);
    const float scaled = vecmath::ropeInvFreq(i, dim, theta, llama3);
    const double wavelen = 2.0 * M_PI / inv;
    if (wavelen < 16.0) {
      EXPECT_EQ(scaled, inv) << i;
      ++below;
    } else if (wavelen > 64.0) {
      EXPECT_EQ(scaled, inv / 8.0f) << i;
      ++above;
    } else {
      EXPECT_LT(scaled, inv) << i;
      EXPECT_GT(scaled, inv / 8.0f) << i;
      ++between;
    }
  }
  EXPECT_GT(below, 0);
  EXPECT_GT(between, 0);
  EXPECT_GT(above, 0);
  // Through the ABI: the scaled rotation is the table's, and factor 0 is
  // bitwise no scaling whatever the other three say.
  const int64_t seq = 40, n = seq * dim;
  auto x = testValues(n, 31);
  std::vector<float> plain(n), one(n), y(n);
  ztrt_rotary_embedding(ctx.get(), ZTRT_F32, x.data(), plain.data(), 1, seq, 1,
                        dim, theta, 0.0, 1.0, 4.0, 8192.0, 0);
  ztrt_rotary_embedding(ctx.get(), ZTRT_F32, x.data(), one.data(), 1, seq, 1,
                        dim, theta, 0.0, 2.0, 3.0, 64.0, 0);
  EXPECT_EQ(std::memcmp(plain.data(), one.data(), n * sizeof(float)), 0);
  ztrt_rotary_embedding(ctx.get(), ZTRT_F32, x.data(), y.data(), 1, seq, 1,
                        dim, theta, 8.0, 1.0, 4.0, 64.0, 0);
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t i = 0; i < dim / 2; ++i) {
      float c, s;
      vecmath::ropeCosSin(t, i, dim, theta, llama3, c, s);
      const float lo = x[t * dim + i], hi = x[t * dim + i + dim / 2];
      EXPECT_EQ(y[t * dim + i], lo * c - hi * s) << t << "," << i;
      EXPECT_EQ(y[t * dim + i + dim / 2], hi * c + lo * s) << t << "," << i;
    }
  EXPECT_NE(std::memcmp(plain.data(), y.data(), n * sizeof(float)), 0);
}

TEST_F(LlamaKernelTest, Llama3ScalingIsTorchsFloat32Table) {
  // transformers' _compute_llama3_parameters on CPU torch 1.13 (float32;
  // python/ztrain/ir.py llama3_inv_freq is the same statements), printed
  // with float.hex(): two configurations whose original context is not a
  // power of two or whose blend is wide, so that every rounding of the
  // rule (the reciprocals of scalar / tensor, the true divisions of
  // tensor / scalar) shows. Regenerate with
  //   inv = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
  //   [float(v).hex() for v in llama3_inv_freq(torch, inv, scaling)]
  struct Case {
    double theta;
    ztrt::vecmath::RopeScaling scaling;
    std::vector<float> want;
  };
  const Case cases[] = {
      {10000.0,
       {32.0, 1.0, 4.0, 8192.0},
       {
      0x1.0p+0f, 0x1.7ff222p-1f, 0x1.1feb34p-1f,
      0x1.afd136p-2f, 0x1.43d136p-2f, 0x1.e5a846p-3f,
      0x1.6c310ep-3f, 0x1.111aeep-3f, 0x1.99999ap-4f,
      0x1.33281ap-4f, 0x1.ccab84p-5f, 0x1.59742ap-5f,
      0x1.030dc6p-5f, 0x1.84869ep-6f, 0x1.235a72p-6f,
      0x1.b4f7e4p-7f, 0x1.47ae14p-7f, 0x1.eb736p-8f,
      0x1.708938p-8f, 0x1.145ceep-8f, 0x1.9e7c7p-9f,
      0x1.b75436p-10f, 0x1.aa182ep-11f, 0x1.7937fp-12f,
      0x1.0f44ecp-13f, 0x1.892918p-16f, 0x1.26d42cp-16f,
      0x1.ba2e4ap-17f, 0x1.4b96cp-17f, 0x1.f1502ap-18f,
      0x1.74eea6p-18f, 0x1.17a8e4p-18f,
       }},
      {500000.0,
       {4.0, 1.0, 2.0, 6000.0},
       {
      0x1.0p+0f, 0x1.53c38cp-1f, 0x1.c2ef78p-2f,
      0x1.2b3dc6p-2f, 0x1.8d276p-3f, 0x1.078d4p-3f,
      0x1.5dc95ap-4f, 0x1.d03ccep-5f, 0x1.34119p-5f,
      0x1.98de92p-6f, 0x1.0f5386p-6f, 0x1.681adap-7f,
      0x1.ddee9ep-8f, 0x1.3d2804p-8f, 0x1.a4ee4p-9f,
      0x1.175482p-9f, 0x1.7c4272p-11f, 0x1.ec07d4p-13f,
      0x1.46831ap-13f, 0x1.b15902p-14f, 0x1.1f91fp-14f,
      0x1.7da9e8p-15f, 0x1.fa8b86p-16f, 0x1.5024d6p-16f,
      0x1.be2188p-17f, 0x1.280d96p-17f, 0x1.88ec2p-18f,
      0x1.04be68p-18f, 0x1.5a0f4ep-19f, 0x1.cb4a9ap-20f,
      0x1.30c94ep-20f, 0x1.94836p-21f,
       }},
  };
  for (const Case &cs : cases)
    for (int64_t i = 0; i < 32; ++i)
      EXPECT_EQ(ztrt::vecmath::ropeInvFreq(i, 64, cs.theta, cs.scaling),
                cs.want[i])
          << "theta " << cs.theta << " pair " << i;
}

TEST_F(LlamaKernelTest, MaskedFillBroadcastsTheMaskOverLeadingDims) {
  const int64_t outer = 3, inner = 4;
  std::vector<float> x = testValues(outer * inner, 76), out(outer * inner);
  std::vector<int32_t> mask = {0, 1, 0, 7};
  ztrt_masked_fill(ctx.get(), ZTRT_F32, x.data(), mask.data(), out.data(),
                   outer, inner, -INFINITY);
  for (int64_t r = 0; r < outer; ++r)
    for (int64_t j = 0; j < inner; ++j)
      EXPECT_EQ(out[r * inner + j], mask[j] ? -INFINITY : x[r * inner + j]);
}

TEST_F(LlamaKernelTest, ReluKeepsNaNAsPyTorch) {
  // torch.relu (clamp_min) keeps NaN, and threshold_backward passes dy at
  // NaN (NaN <= 0 is false): NaN data must not become zeros and train on.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float x[4] = {nan, -1.0f, 0.0f, 2.0f}, dy[4] = {5.0f, 6.0f, 7.0f, 8.0f};
  float y[4], dx[4];
  ztrt_relu(ctx.get(), ZTRT_F32, x, y, 4);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 2.0f);
  ztrt_relu_grad(ctx.get(), ZTRT_F32, dy, x, dx, 4);
  EXPECT_EQ(dx[0], 5.0f);
  EXPECT_EQ(dx[1], 0.0f);
  EXPECT_EQ(dx[2], 0.0f); // the gradient at 0 is 0, as in PyTorch
  EXPECT_EQ(dx[3], 8.0f);
}

TEST_F(LlamaKernelTest, WhereSelectsWithABroadcastMask) {
  const int64_t outer = 3, inner = 4;
  std::vector<float> a = testValues(outer * inner, 77),
                     b = testValues(outer * inner, 78), out(outer * inner);
  std::vector<int32_t> mask = {0, 1, -3, 0};
  ztrt_where(ctx.get(), ZTRT_F32, mask.data(), a.data(), b.data(), out.data(),
             outer, inner);
  for (int64_t r = 0; r < outer; ++r)
    for (int64_t j = 0; j < inner; ++j)
      EXPECT_EQ(out[r * inner + j], mask[j] ? a[r * inner + j] : b[r * inner + j]);
}

// The mask of train.dropout, restated from docs/runtime.md ("Dropout") with
// the generator written out here (splitmix64), not taken from base/Rng.h.
static bool droppedByDefinition(uint64_t seed, int64_t stream, int64_t step,
                                uint64_t index, double p) {
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const uint64_t golden = 0x9E3779B97F4A7C15ull;
  std::string tag = "dropout/" + std::to_string(stream);
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : tag)
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  uint64_t streamKey = mix(h ^ mix(seed + golden));
  uint64_t key = mix(streamKey + (static_cast<uint64_t>(step) + 1) * golden);
  uint64_t bits = mix(key + (index + 1) * golden) >> 40;
  return static_cast<double>(bits) * 0x1p-24 < p;
}

TEST_F(LlamaKernelTest, DropoutFollowsItsDefinition) {
  const int64_t n = 20000;
  std::vector<float> x = testValues(n, 79), out(n);
  const double p = 0.3;
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (uint64_t seed : {0ull, 12345ull}) {
    ctx->seed = seed;
    for (int64_t step : {1, 2}) {
      ctx->step = step;
      for (int64_t stream : {0, 5}) {
        ztrt_dropout(ctx.get(), ZTRT_F32, x.data(), out.data(), n, stream, p);
        int64_t dropped = 0;
        for (int64_t i = 0; i < n; ++i) {
          bool drop = droppedByDefinition(seed, stream, step, i, p);
          dropped += drop;
          // One float multiply, by 0 or by the rounded 1 / (1 - p): bitwise.
          ASSERT_EQ(out[i], x[i] * (drop ? 0.0f : scale)) << i;
        }
        // Binomial(20000, 0.3): sd 65; 6 sd is a wrong rate, not chance.
        EXPECT_NEAR(static_cast<double>(dropped), p * n, 6 * 65.0);
      }
    }
  }
}

TEST_F(LlamaKernelTest, DropoutMasksDifferByStepStreamAndSeedOnly) {
  const int64_t n = 4096;
  std::vector<float> ones(n, 1.0f), a(n), b(n);
  auto run = [&](uint64_t seed, int64_t step, int64_t stream,
                 std::vector<float> &out) {
    ctx->seed = seed;
    ctx->step = step;
    ztrt_dropout(ctx.get(), ZTRT_F32, ones.data(), out.data(), n, stream, 0.5);
  };
  run(1, 1, 0, a);
  run(1, 1, 0, b);
  EXPECT_EQ(a, b) << "same seed, step and stream: same mask";
  for (auto [seed, step, stream] :
       {std::tuple{2ull, 1, 0}, std::tuple{1ull, 2, 0}, std::tuple{1ull, 1, 1}}) {
    run(seed, step, stream, b);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i)
      differ += a[i] != b[i];
    // Independent masks at p = 0.5 differ in half the elements (sd 32).
    EXPECT_NEAR(static_cast<double>(differ), n / 2.0, 6 * 32.0)
        << "seed " << seed << " step " << step << " stream " << stream;
  }
  // p = 0 keeps everything as is, p = 1 drops everything (NaN still
  // propagates through the multiply by 0, as in PyTorch).
  ctx->step = 1;
  std::vector<float> x = testValues(n, 80);
  x[7] = std::numeric_limits<float>::quiet_NaN();
  ztrt_dropout(ctx.get(), ZTRT_F32, x.data(), a.data(), n, 0, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (i != 7) {
      ASSERT_EQ(a[i], x[i]);
    }
  }
  EXPECT_TRUE(std::isnan(a[7]));
  ztrt_dropout(ctx.get(), ZTRT_F32, x.data(), a.data(), n, 0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    if (i != 7) {
      ASSERT_EQ(a[i], 0.0f);
    }
  }
  EXPECT_TRUE(std::isnan(a[7]));
}

TEST_F(LlamaKernelTest, BadArgumentsAreNamed) {
  float x[8] = {}, y[8] = {};
  EXPECT_EXIT(ztrt_rotary_embedding(ctx.get(), ZTRT_F32, x, y, 1, 1, 1, 7,
                                    10000.0, 0.0, 1.0, 4.0, 8192.0, 0),
              ::testing::ExitedWithCode(1), "rotary_embedding: dim 7 is odd");
  EXPECT_EXIT(ztrt_rotary_embedding(ctx.get(), ZTRT_F32, x, y, 1, 1, 1, 8,
                                    -1.0, 0.0, 1.0, 4.0, 8192.0, 0),
              ::testing::ExitedWithCode(1),
              "rotary_embedding: theta -1 is not a positive finite number");
  EXPECT_EXIT(ztrt_rotary_embedding(ctx.get(), ZTRT_F32, x, y, 1, 1, 1, 8,
                                    10000.0, 0.5, 1.0, 4.0, 8192.0, 0),
              ::testing::ExitedWithCode(1),
              "rotary_embedding: scaling factor 0.5 is neither 0 \\(none\\) nor a "
              "finite number >= 1");
  EXPECT_EXIT(ztrt_rotary_embedding(ctx.get(), ZTRT_F32, x, y, 1, 1, 1, 8,
                                    10000.0, 8.0, 4.0, 4.0, 8192.0, 0),
              ::testing::ExitedWithCode(1),
              "rotary_embedding: llama3 scaling needs 0 < low_freq_factor < "
              "high_freq_factor and original_max_positions > 0 \\(got 4, 4, "
              "8192\\)");
  const int64_t shape[] = {8}, mask[] = {1};
  EXPECT_EXIT(ztrt_reduce(ctx.get(), ZTRT_F32, x, y, 1, shape, mask, 3),
              ::testing::ExitedWithCode(1), "reduce: unknown kind 3");
  EXPECT_EXIT(ztrt_masked_fill(ctx.get(), ZTRT_F32, x, nullptr, y, -1, 8, 0.0),
              ::testing::ExitedWithCode(1), "masked_fill: negative outer -1");
  EXPECT_EXIT(ztrt_dropout(ctx.get(), ZTRT_F32, x, y, 8, 0, 0.5),
              ::testing::ExitedWithCode(1),
              "dropout: called outside a step \\(step counter is 0\\)");
  ctx->step = 1;
  EXPECT_EXIT(ztrt_dropout(ctx.get(), ZTRT_F32, x, y, 8, 0, 1.5),
              ::testing::ExitedWithCode(1),
              "dropout: probability must be in \\[0, 1\\], got 1.5");
  EXPECT_EXIT(ztrt_dropout(ctx.get(), ZTRT_F32, x, y, 8, -2, 0.5),
              ::testing::ExitedWithCode(1), "dropout: stream must be >= 0, got -2");
  EXPECT_EXIT(ztrt_dropout(ctx.get(), ZTRT_F32, x, y, -8, 0, 0.5),
              ::testing::ExitedWithCode(1), "dropout: negative element count -8");
}

} // namespace
