//===- AttentionKernelTest.cpp - Fused attention on the cpu backend -------===//
//
// Part of ztrain's runtime tests. ztrt_attention / ztrt_attention_grad
// against (1) the composed form built from the runtime's own kernels
// (matmul, scale, softmax, matmul, and their adjoints in train-autodiff's
// order): bitwise in f32, the contract that lets a model switch to the
// fused op without changing a bit; (2) a double-precision reference from
// the definition; (3) bf16 / f16: the f32 kernel on the widened operands,
// each result rounded once, bit for bit.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "base/DType.h"
#include "ztrt.h"

#include <cmath>
#include <cstring>
#include <vector>

using namespace ztrt;
using namespace ztrt::test;

namespace {

struct Shape {
  int64_t heads, tq, tk, d;
  bool causal;
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(d)); }
  size_t qn() const { return static_cast<size_t>(heads * tq * d); }
  size_t kn() const { return static_cast<size_t>(heads * tk * d); }
  size_t pn() const { return static_cast<size_t>(heads * tq * tk); }
};

struct Grads {
  std::vector<float> dq, dk, dv;
};

class AttentionKernelTest : public ::testing::TestWithParam<Shape> {
protected:
  std::unique_ptr<ztrt_ctx> ctx = cpuContext();

  void SetUp() override {
    const Shape s = GetParam();
    q = testValues(s.qn(), 11);
    k = testValues(s.kn(), 12);
    v = testValues(s.kn(), 13);
    dy = testValues(s.qn(), 14);
    // Scores of a few units: softmax rows neither flat nor one-hot.
    for (float &x : q)
      x *= 3.0f;
  }

  void fused(std::vector<float> &out, std::vector<float> &lse, Grads &g) {
    const Shape s = GetParam();
    out.assign(s.qn(), 0.0f);
    lse.assign(static_cast<size_t>(s.heads * s.tq), 0.0f);
    ztrt_attention(ctx.get(), ZTRT_F32, q.data(), k.data(), v.data(),
                   out.data(), lse.data(), s.heads, 1, s.tq, s.tk, s.d, s.causal,
                   s.scale());
    g.dq.assign(s.qn(), 0.0f);
    g.dk.assign(s.kn(), 0.0f);
    g.dv.assign(s.kn(), 0.0f);
    ztrt_attention_grad(ctx.get(), ZTRT_F32, dy.data(), q.data(), k.data(),
                        v.data(), out.data(), lse.data(), g.dq.data(),
                        g.dk.data(), g.dv.data(), s.heads, 1, s.tq, s.tk, s.d,
                        s.causal, s.scale());
  }

  /// The composed model's kernels: what train-autodiff lowers the
  /// matmul / scale / softmax / matmul form to.
  void composed(std::vector<float> &out, Grads &g) {
    const Shape s = GetParam();
    const int64_t qn = s.tq * s.d, kn = s.tk * s.d, pn = s.tq * s.tk;
    std::vector<float> sc(s.pn()), p(s.pn()), dp(s.pn()), ds(s.pn());
    ztrt_matmul(ctx.get(), ZTRT_F32, q.data(), k.data(), sc.data(), s.heads,
                s.tq, s.tk, s.d, 0, 1, qn, kn, pn);
    ztrt_scale(ctx.get(), ZTRT_F32, sc.data(), sc.data(), s.pn(), s.scale());
    ztrt_softmax(ctx.get(), ZTRT_F32, sc.data(), p.data(), s.heads * s.tq,
                 s.tk, s.causal);
    out.assign(s.qn(), 0.0f);
    ztrt_matmul(ctx.get(), ZTRT_F32, p.data(), v.data(), out.data(), s.heads,
                s.tq, s.d, s.tk, 0, 0, pn, kn, qn);
    g.dq.assign(s.qn(), 0.0f);
    g.dk.assign(s.kn(), 0.0f);
    g.dv.assign(s.kn(), 0.0f);
    ztrt_matmul(ctx.get(), ZTRT_F32, dy.data(), v.data(), dp.data(), s.heads,
                s.tq, s.tk, s.d, 0, 1, qn, kn, pn);
    ztrt_matmul(ctx.get(), ZTRT_F32, p.data(), dy.data(), g.dv.data(),
                s.heads, s.tk, s.d, s.tq, 1, 0, pn, qn, kn);
    ztrt_softmax_grad(ctx.get(), ZTRT_F32, dp.data(), p.data(), ds.data(),
                      s.heads * s.tq, s.tk);
    ztrt_scale(ctx.get(), ZTRT_F32, ds.data(), ds.data(), s.pn(), s.scale());
    ztrt_matmul(ctx.get(), ZTRT_F32, ds.data(), k.data(), g.dq.data(),
                s.heads, s.tq, s.d, s.tk, 0, 0, pn, kn, qn);
    ztrt_matmul(ctx.get(), ZTRT_F32, ds.data(), q.data(), g.dk.data(),
                s.heads, s.tk, s.d, s.tq, 1, 0, pn, qn, kn);
  }

  std::vector<float> q, k, v, dy;
};

void expectBitwise(const std::vector<float> &a, const std::vector<float> &b,
                   const char *what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
        << what << "[" << i << "]: " << a[i] << " vs " << b[i];
}

TEST_P(AttentionKernelTest, F32IsBitwiseTheComposedForm) {
  std::vector<float> out, lse, ref;
  Grads g, gr;
  fused(out, lse, g);
  composed(ref, gr);
  expectBitwise(out, ref, "out");
  expectBitwise(g.dq, gr.dq, "dq");
  expectBitwise(g.dk, gr.dk, "dk");
  expectBitwise(g.dv, gr.dv, "dv");
}

TEST_P(AttentionKernelTest, MatchesTheDefinitionInDouble) {
  const Shape s = GetParam();
  std::vector<float> out, lse;
  Grads g;
  fused(out, lse, g);
  std::vector<double> dq(s.qn(), 0.0), dk(s.kn(), 0.0), dv(s.kn(), 0.0);
  for (int64_t h = 0; h < s.heads; ++h) {
    const float *qh = q.data() + h * s.tq * s.d, *kh = k.data() + h * s.tk * s.d,
                *vh = v.data() + h * s.tk * s.d, *dyh = dy.data() + h * s.tq * s.d;
    for (int64_t i = 0; i < s.tq; ++i) {
      const int64_t visible = s.causal ? i + 1 : s.tk;
      std::vector<double> p(visible), dp(visible);
      double max = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        double dot = 0.0;
        for (int64_t c = 0; c < s.d; ++c)
          dot += static_cast<double>(qh[i * s.d + c]) * kh[j * s.d + c];
        p[j] = dot * s.scale();
        max = std::max(max, p[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < visible; ++j)
        sum += std::exp(p[j] - max);
      // lse: O(1..10) values; float rounding (6e-8 relative) plus the
      // kernel's exp (a few float ulp per term): 1e-5 absolute.
      EXPECT_NEAR(lse[h * s.tq + i], max + std::log(sum), 1e-5)
          << "lse h" << h << " i" << i;
      double dot = 0.0; // sum_j p dp
      for (int64_t j = 0; j < visible; ++j) {
        p[j] = std::exp(p[j] - max) / sum;
        dp[j] = 0.0;
        for (int64_t c = 0; c < s.d; ++c)
          dp[j] += static_cast<double>(dyh[i * s.d + c]) * vh[j * s.d + c];
        dot += p[j] * dp[j];
      }
      for (int64_t c = 0; c < s.d; ++c) {
        double o = 0.0;
        for (int64_t j = 0; j < visible; ++j)
          o += p[j] * vh[j * s.d + c];
        // Sums of O(1) products in float: 1e-5 relative to the row's scale
        // (a wrong mask or scale moves outputs by O(0.1)).
        EXPECT_NEAR(out[(h * s.tq + i) * s.d + c], o, 1e-5)
            << "out h" << h << " i" << i << " c" << c;
      }
      for (int64_t j = 0; j < visible; ++j) {
        const double ds = p[j] * (dp[j] - dot) * s.scale();
        for (int64_t c = 0; c < s.d; ++c) {
          dq[(h * s.tq + i) * s.d + c] += ds * kh[j * s.d + c];
          dk[(h * s.tk + j) * s.d + c] += ds * qh[i * s.d + c];
          dv[(h * s.tk + j) * s.d + c] += p[j] * dyh[i * s.d + c];
        }
      }
    }
  }
  // Gradients: sums over up to tk float products of O(1) terms: 1e-4
  // absolute (float GEMMs over 40 terms; a dropped term is O(0.01..1)).
  for (size_t i = 0; i < s.qn(); ++i)
    ASSERT_NEAR(g.dq[i], dq[i], 1e-4) << "dq " << i;
  for (size_t i = 0; i < s.kn(); ++i) {
    ASSERT_NEAR(g.dk[i], dk[i], 1e-4) << "dk " << i;
    ASSERT_NEAR(g.dv[i], dv[i], 1e-4) << "dv " << i;
  }
}

template <typename T> std::vector<T> rounded(std::vector<float> &x) {
  std::vector<T> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = T(x[i]);
    x[i] = static_cast<float>(out[i]); // the f32 run sees the same values
  }
  return out;
}

template <typename T>
void expectRoundedOnce(const std::vector<T> &got, const std::vector<float> &f32,
                       const char *what) {
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i].bits, T(f32[i]).bits)
        << what << "[" << i << "]: " << static_cast<float>(got[i]) << " vs "
        << f32[i];
}

template <typename T> void sixteenBit(AttentionKernelTest &t, Shape s,
                                      int32_t code, ztrt_ctx *ctx) {
  (void)t;
  std::vector<float> q = testValues(s.qn(), 21), k = testValues(s.kn(), 22),
                     v = testValues(s.kn(), 23), dy = testValues(s.qn(), 24);
  std::vector<T> q16 = rounded<T>(q), k16 = rounded<T>(k),
                 v16 = rounded<T>(v), dy16 = rounded<T>(dy);
  std::vector<T> out16(s.qn()), dq16(s.qn()), dk16(s.kn()), dv16(s.kn());
  std::vector<float> lse16(s.heads * s.tq), out(s.qn()), lse(s.heads * s.tq),
      dq(s.qn()), dk(s.kn()), dv(s.kn());
  ztrt_attention(ctx, code, q16.data(), k16.data(), v16.data(), out16.data(),
                 lse16.data(), s.heads, 1, s.tq, s.tk, s.d, s.causal, s.scale());
  ztrt_attention(ctx, ZTRT_F32, q.data(), k.data(), v.data(), out.data(),
                 lse.data(), s.heads, 1, s.tq, s.tk, s.d, s.causal, s.scale());
  expectRoundedOnce(out16, out, "out");
  expectBitwise(lse16, lse, "lse");
  ztrt_attention_grad(ctx, code, dy16.data(), q16.data(), k16.data(),
                      v16.data(), out16.data(), lse16.data(), dq16.data(),
                      dk16.data(), dv16.data(), s.heads, 1, s.tq, s.tk, s.d,
                      s.causal, s.scale());
  ztrt_attention_grad(ctx, ZTRT_F32, dy.data(), q.data(), k.data(), v.data(),
                      out.data(), lse.data(), dq.data(), dk.data(), dv.data(),
                      s.heads, 1, s.tq, s.tk, s.d, s.causal, s.scale());
  expectRoundedOnce(dq16, dq, "dq");
  expectRoundedOnce(dk16, dk, "dk");
  expectRoundedOnce(dv16, dv, "dv");
}

TEST_P(AttentionKernelTest, SixteenBitIsTheF32KernelRoundedOnce) {
  sixteenBit<bf16>(*this, GetParam(), ZTRT_BF16, ctx.get());
  sixteenBit<f16>(*this, GetParam(), ZTRT_F16, ctx.get());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionKernelTest,
    ::testing::Values(Shape{6, 37, 37, 16, true}, Shape{6, 37, 37, 16, false},
                      Shape{3, 5, 9, 8, false}, Shape{1, 1, 1, 4, true},
                      // Long enough rows for the parallel softmax path.
                      Shape{2, 200, 200, 32, true}),
    [](const ::testing::TestParamInfo<Shape> &info) {
      const Shape &s = info.param;
      return "h" + std::to_string(s.heads) + "_q" + std::to_string(s.tq) +
             "_k" + std::to_string(s.tk) + "_d" + std::to_string(s.d) +
             (s.causal ? "_causal" : "");
    });

/// Grouped-query attention: `heads` query heads, heads / groups key / value
/// heads, query head h reading h / groups. Against the same op on the
/// repeated heads (what train.broadcast + reshape feed it), with dk and dv
/// the repeated heads' gradients summed by ztrt_reduce (the broadcast's
/// adjoint): bitwise, for every dtype.
template <typename T>
void groupedIsTheRepeatedHeads(int32_t code, int64_t heads, int64_t groups,
                               int64_t tq, int64_t tk, int64_t d,
                               bool causal) {
  auto ctx = cpuContext();
  const int64_t kvHeads = heads / groups, qn = heads * tq * d,
                kn = kvHeads * tk * d, head = tk * d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto values = [](int64_t n, uint64_t seed, float by) {
    std::vector<float> f = testValues(n, seed);
    std::vector<T> out(n);
    for (int64_t i = 0; i < n; ++i)
      out[i] = T(f[i] * by);
    return out;
  };
  std::vector<T> q = values(qn, 31, 3.0f), k = values(kn, 32, 1.0f),
                 v = values(kn, 33, 1.0f), dy = values(qn, 34, 1.0f);
  std::vector<T> kr(heads * head), vr(heads * head);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < head; ++i) {
      kr[h * head + i] = k[h / groups * head + i];
      vr[h * head + i] = v[h / groups * head + i];
    }
  std::vector<T> out(qn), outR(qn), dq(qn), dqR(qn), dk(kn), dv(kn),
      dkR(heads * head), dvR(heads * head), dkSum(kn), dvSum(kn);
  std::vector<float> lse(heads * tq), lseR(heads * tq);
  ztrt_attention(ctx.get(), code, q.data(), k.data(), v.data(), out.data(),
                 lse.data(), heads, groups, tq, tk, d, causal, scale);
  ztrt_attention(ctx.get(), code, q.data(), kr.data(), vr.data(), outR.data(),
                 lseR.data(), heads, 1, tq, tk, d, causal, scale);
  ztrt_attention_grad(ctx.get(), code, dy.data(), q.data(), k.data(),
                      v.data(), out.data(), lse.data(), dq.data(), dk.data(),
                      dv.data(), heads, groups, tq, tk, d, causal, scale);
  ztrt_attention_grad(ctx.get(), code, dy.data(), q.data(), kr.data(),
                      vr.data(), outR.data(), lseR.data(), dqR.data(),
                      dkR.data(), dvR.data(), heads, 1, tq, tk, d, causal,
                      scale);
  const int64_t shape[3] = {kvHeads, groups, head}, mask[3] = {0, 1, 0};
  ztrt_reduce(ctx.get(), code, dkR.data(), dkSum.data(), 3, shape, mask, 0);
  ztrt_reduce(ctx.get(), code, dvR.data(), dvSum.data(), 3, shape, mask, 0);
  auto same = [](const auto &a, const auto &b, const char *what) {
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])), 0)
        << what;
  };
  same(out, outR, "out");
  same(lse, lseR, "lse");
  same(dq, dqR, "dq");
  same(dk, dkSum, "dk");
  same(dv, dvSum, "dv");
  // The sum is not a copy of one member: the group's gradients differ.
  ASSERT_NE(std::memcmp(dk.data(), dkR.data(), head * sizeof(T)), 0);
}

TEST(AttentionGroupedTest, GroupedIsTheRepeatedHeadsBitwise) {
  // 2 batches x 2 key / value heads x 3 query heads each; causal, and
  // cross attention with more keys than queries.
  groupedIsTheRepeatedHeads<float>(ZTRT_F32, 12, 3, 7, 7, 8, true);
  groupedIsTheRepeatedHeads<float>(ZTRT_F32, 12, 3, 5, 9, 8, false);
  groupedIsTheRepeatedHeads<float>(ZTRT_F32, 4, 4, 33, 33, 16, true);
  groupedIsTheRepeatedHeads<bf16>(ZTRT_BF16, 12, 3, 7, 7, 8, true);
  groupedIsTheRepeatedHeads<f16>(ZTRT_F16, 8, 2, 6, 6, 16, true);
}

TEST(AttentionAbiTest, GroupsMustDivideHeads) {
  auto ctx = cpuContext();
  std::vector<float> x(6 * 3 * 4), out(x.size()), lse(18);
  EXPECT_EXIT(ztrt_attention(ctx.get(), ZTRT_F32, x.data(), x.data(),
                             x.data(), out.data(), lse.data(), 6, 4, 3, 3, 4, 0,
                             0.5),
              ::testing::ExitedWithCode(1),
              "attention: groups 4 must be positive and divide heads 6");
  EXPECT_EXIT(ztrt_attention(ctx.get(), ZTRT_F32, x.data(), x.data(),
                             x.data(), out.data(), lse.data(), 6, 0, 3, 3, 4, 0,
                             0.5),
              ::testing::ExitedWithCode(1),
              "attention: groups 0 must be positive and divide heads 6");
}

TEST(AttentionAbiTest, CausalCrossAttentionIsRefused) {
  auto ctx = cpuContext();
  std::vector<float> x(2 * 3 * 4), y(2 * 5 * 4), out(x.size()), lse(6);
  EXPECT_EXIT(ztrt_attention(ctx.get(), ZTRT_F32, x.data(), y.data(),
                             y.data(), out.data(), lse.data(), 2, 1, 3, 5, 4, 1,
                             0.5),
              ::testing::ExitedWithCode(1),
              "attention: causal attention needs tq == tk, got 3 and 5");
  EXPECT_EXIT(ztrt_attention(ctx.get(), ZTRT_F32, x.data(), x.data(),
                             x.data(), out.data(), lse.data(), 2, 1, 3, 3, 4, 0,
                             std::nan("")),
              ::testing::ExitedWithCode(1),
              "attention: scale must be finite and positive");
  EXPECT_EXIT(ztrt_attention(ctx.get(), ZTRT_F32, x.data(), x.data(),
                             x.data(), out.data(), lse.data(), 2, 1, 3, 0, 4, 0,
                             0.5),
              ::testing::ExitedWithCode(1),
              "attention: heads, tq, tk and d must be positive, got 2, 3, 0, 4");
}

} // namespace
