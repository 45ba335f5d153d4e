//===- CudaAttentionConformanceTest.cpp - Cuda conformance: attention -----===//
//
// Part of ztrain's runtime tests: the cuda conformance suite
// (CudaConformanceTest.cpp's file comment) for fused attention (the
// composed kernels, the tiled tensor-core ones and grouped heads) and the
// tensor-core fragment layouts the register-resident kernels rely on.
//
//===----------------------------------------------------------------------===//

#include "CudaConformance.h"

using namespace ztrt;
using namespace ztrt::test;

namespace {

// --- Fused attention ------------------------------------------------------
/// ztrt_attention / ztrt_attention_grad on the device against the cpu's,
/// for heads processed in one group (the default scratch) and in groups of
/// two with a ragged last group (AttentionGroupsTest).
class CudaAttentionTest : public CudaConformanceTest {
public:
  using CudaConformanceTest::at;
  using CudaConformanceTest::both;
  using CudaConformanceTest::fetch;
  using CudaConformanceTest::output;
  using CudaConformanceTest::twin;
  struct Shape {
    int64_t heads, tq, tk, d;
    int causal;
    int64_t groups = 1; // query heads per key / value head
  };
  void check(const Shape &s) {
    const int64_t qn = s.heads * s.tq * s.d, kn = s.heads / s.groups * s.tk * s.d,
                  rows = s.heads * s.tq;
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
    auto q = twin(inputs(qn, 90, 3.0f)), k = twin(inputs(kn, 91)),
         v = twin(inputs(kn, 92)), dy = twin(inputs(qn, 93));
    auto out = output(qn), lse = output(rows), dq = output(qn),
         dk = output(kn), dv = output(kn);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_attention(x, ZTRT_F32, at(q, d), at(k, d), at(v, d), at(out, d),
                     at(lse, d), s.heads, s.groups, s.tq, s.tk, s.d, s.causal, scale);
      ztrt_attention_grad(x, ZTRT_F32, at(dy, d), at(q, d), at(k, d),
                          at(v, d), at(out, d), at(lse, d), at(dq, d),
                          at(dk, d), at(dv, d), s.heads, s.groups, s.tq, s.tk, s.d,
                          s.causal, scale);
    });
    const std::string what = " h" + std::to_string(s.heads) + " q" +
                             std::to_string(s.tq) + " k" +
                             std::to_string(s.tk) + " d" +
                             std::to_string(s.d) +
                             (s.causal ? " causal" : "") +
                             (s.groups > 1 ? " groups " +
                                                 std::to_string(s.groups)
                                           : "");
    // The composed kernels' differences (GEMM summation order, expf
    // against the cpu's exp, 8 ulp per softmax entry) through scores of up
    // to ~10: about 1e-6 of O(1) values; a wrong mask, scale, head offset
    // or group boundary moves them by O(0.1). lse is max + log(sum) of the
    // same scores: 1e-5 absolute.
    expectUlpsOrAbs(fetch(out), out.host, 64, 2e-5, "attention out" + what);
    expectUlpsOrAbs(fetch(lse), lse.host, 64, 1e-5, "attention lse" + what);
    // Gradients add a second GEMM over tk or tq terms: 1e-4.
    expectUlpsOrAbs(fetch(dq), dq.host, 64, 1e-4, "attention dq" + what);
    expectUlpsOrAbs(fetch(dk), dk.host, 64, 1e-4, "attention dk" + what);
    expectUlpsOrAbs(fetch(dv), dv.host, 64, 1e-4, "attention dv" + what);
  }

  /// bf16 / f16 on the device are the device's own f32 results on the
  /// widened operands, each rounded once: bitwise.
  template <typename T> void sixteenBit(const Shape &s, int32_t code) {
    const int64_t qn = s.heads * s.tq * s.d, kn = s.heads / s.groups * s.tk * s.d,
                  rows = s.heads * s.tq;
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
    auto widened = [](std::vector<float> x) {
      for (float &e : x)
        e = static_cast<float>(T(e));
      return x;
    };
    auto narrow = [](const std::vector<float> &x) {
      std::vector<T> out;
      for (float e : x)
        out.push_back(T(e));
      return out;
    };
    std::vector<float> qf = widened(inputs(qn, 94, 3.0f)),
                       kf = widened(inputs(kn, 95)),
                       vf = widened(inputs(kn, 96)),
                       dyf = widened(inputs(qn, 97));
    auto q = twin(qf), k = twin(kf), v = twin(vf), dy = twin(dyf);
    auto q16 = twin(narrow(qf)), k16 = twin(narrow(kf)),
         v16 = twin(narrow(vf)), dy16 = twin(narrow(dyf));
    auto out = output(qn), lse = output(rows), dq = output(qn),
         dk = output(kn), dv = output(kn), lse16 = output(rows);
    auto out16 = twin(std::vector<T>(qn)), dq16 = twin(std::vector<T>(qn)),
         dk16 = twin(std::vector<T>(kn)), dv16 = twin(std::vector<T>(kn));
    ztrt_attention(g(), ZTRT_F32, q.dev, k.dev, v.dev, out.dev, lse.dev,
                   s.heads, s.groups, s.tq, s.tk, s.d, s.causal, scale);
    ztrt_attention_grad(g(), ZTRT_F32, dy.dev, q.dev, k.dev, v.dev, out.dev,
                        lse.dev, dq.dev, dk.dev, dv.dev, s.heads, s.groups, s.tq, s.tk,
                        s.d, s.causal, scale);
    ztrt_attention(g(), code, q16.dev, k16.dev, v16.dev, out16.dev,
                   lse16.dev, s.heads, s.groups, s.tq, s.tk, s.d, s.causal, scale);
    ztrt_attention_grad(g(), code, dy16.dev, q16.dev, k16.dev, v16.dev,
                        out16.dev, lse16.dev, dq16.dev, dk16.dev, dv16.dev,
                        s.heads, s.groups, s.tq, s.tk, s.d, s.causal, scale);
    auto expectRounded = [&](const std::vector<T> &got,
                             const std::vector<float> &f32,
                             const char *name) {
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i].bits, T(f32[i]).bits)
            << name << "[" << i << "]: " << static_cast<float>(got[i])
            << " vs " << f32[i];
    };
    expectRounded(fetch(out16), fetch(out), "out");
    expectBitwise(fetch(lse16), fetch(lse), "lse");
    expectRounded(fetch(dq16), fetch(dq), "dq");
    expectRounded(fetch(dk16), fetch(dk), "dk");
    expectRounded(fetch(dv16), fetch(dv), "dv");
  }
};

/// The tiled tensor-core forward (bf16 / f16, head dim 32 or 64) against
/// the cpu's: the cpu keeps the probabilities in float, the kernel rounds
/// them to T before the product with v (|v| < 1 here, so that costs at
/// most 2^-(p+1) of the output, p = T's significant bits) and both round
/// the output once (another ulp between them): 2^-(p-1) absolute. A wrong
/// mask, tile edge, scale or row is off by O(0.1). lse: the same scores
/// summed in another order, in float against double: 1e-4.
template <typename T>
void tiledMatchesTheCpu(CudaAttentionTest &t, const CudaAttentionTest::Shape &s,
                        int32_t code, int bits) {
  const int64_t qn = s.heads * s.tq * s.d, kn = s.heads / s.groups * s.tk * s.d,
                rows = s.heads * s.tq;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  auto narrow = [](const std::vector<float> &x) {
    std::vector<T> out;
    for (float e : x)
      out.push_back(T(e));
    return out;
  };
  auto q = t.twin(narrow(inputs(qn, 98, 3.0f))), k = t.twin(narrow(inputs(kn, 99))),
       v = t.twin(narrow(inputs(kn, 100)));
  auto out = t.twin(std::vector<T>(qn, T(NAN)));
  auto lse = t.output(rows);
  t.both([&](ztrt_ctx *x, bool d) {
    ztrt_attention(x, code, t.at(q, d), t.at(k, d), t.at(v, d), t.at(out, d),
                   t.at(lse, d), s.heads, s.groups, s.tq, s.tk, s.d, s.causal, scale);
  });
  const std::string what = " h" + std::to_string(s.heads) + " q" +
                           std::to_string(s.tq) + " k" + std::to_string(s.tk) +
                           " d" + std::to_string(s.d) +
                           (s.causal ? " causal" : "") +
                           (s.groups > 1 ? " groups " + std::to_string(s.groups)
                                         : "");
  std::vector<T> got = t.fetch(out);
  const double tol = std::ldexp(1.0, -(bits - 1));
  int bad = 0;
  for (int64_t i = 0; i < qn && bad < 5; ++i) {
    const double g = static_cast<float>(got[i]),
                 w = static_cast<float>(out.host[i]);
    if (!(std::fabs(g - w) <= tol) && bad++ < 5)
      ADD_FAILURE() << "tiled attention out" << what << " [" << i
                    << "]: cuda " << g << ", cpu " << w << " (allowed " << tol
                    << ")";
  }
  expectUlpsOrAbs(t.fetch(lse), lse.host, 64, 1e-4, "tiled attention lse" + what);
}

/// The tiled backward against the cpu's: p and ds are rounded to T for the
/// tensor-core products (the cpu keeps them in float) and the sums run in
/// another order, over up to tq or tk terms that partly cancel: each
/// gradient within 2^-(p-3) of its tensor's largest magnitude (3% in bf16,
/// 0.4% in f16). A dropped key tile, a wrong mask or a missing scale
/// leaves some element off by its own size.
template <typename T>
void tiledBackwardMatchesTheCpu(CudaAttentionTest &t,
                                const CudaAttentionTest::Shape &s,
                                int32_t code, int bits) {
  const int64_t qn = s.heads * s.tq * s.d, kn = s.heads / s.groups * s.tk * s.d,
                rows = s.heads * s.tq;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  auto narrow = [](const std::vector<float> &x) {
    std::vector<T> out;
    for (float e : x)
      out.push_back(T(e));
    return out;
  };
  auto q = t.twin(narrow(inputs(qn, 101, 3.0f))),
       k = t.twin(narrow(inputs(kn, 102))), v = t.twin(narrow(inputs(kn, 103))),
       dy = t.twin(narrow(inputs(qn, 104)));
  auto out = t.twin(std::vector<T>(qn, T(NAN))),
       dq = t.twin(std::vector<T>(qn, T(NAN))),
       dk = t.twin(std::vector<T>(kn, T(NAN))),
       dv = t.twin(std::vector<T>(kn, T(NAN)));
  auto lse = t.output(rows);
  t.both([&](ztrt_ctx *x, bool d) {
    ztrt_attention(x, code, t.at(q, d), t.at(k, d), t.at(v, d), t.at(out, d),
                   t.at(lse, d), s.heads, s.groups, s.tq, s.tk, s.d, s.causal, scale);
    ztrt_attention_grad(x, code, t.at(dy, d), t.at(q, d), t.at(k, d),
                        t.at(v, d), t.at(out, d), t.at(lse, d), t.at(dq, d),
                        t.at(dk, d), t.at(dv, d), s.heads, s.groups, s.tq, s.tk, s.d,
                        s.causal, scale);
  });
  const std::string what = " h" + std::to_string(s.heads) + " q" +
                           std::to_string(s.tq) + " k" + std::to_string(s.tk) +
                           " d" + std::to_string(s.d) +
                           (s.causal ? " causal" : "") +
                           (s.groups > 1 ? " groups " + std::to_string(s.groups)
                                         : "");
  auto compare = [&](Twin<T> &x, const char *name) {
    std::vector<T> got = t.fetch(x);
    double largest = 0.0;
    for (const T &w : x.host)
      largest = std::max(largest, std::fabs(static_cast<double>(
                                      static_cast<float>(w))));
    const double tol = std::ldexp(largest, -(bits - 3));
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double g = static_cast<float>(got[i]),
                   w = static_cast<float>(x.host[i]);
      if (!(std::fabs(g - w) <= tol) && bad++ < 5)
        ADD_FAILURE() << "tiled attention " << name << what << " [" << i
                      << "]: cuda " << g << ", cpu " << w << " (allowed "
                      << tol << ")";
    }
  };
  compare(dq, "dq");
  compare(dk, "dk");
  compare(dv, "dv");
}

TEST_F(CudaAttentionTest, TiledBackwardMatchesTheCpu) {
  // (bf16's bound is loose for the small gradients of late keys; f16's,
  // 8x tighter, is what catches a dropped query tile there.)
  // Grouped-query (the last three): each key block sums its group's query
  // heads.
  for (const Shape &s : {Shape{3, 70, 70, 64, 1}, Shape{2, 45, 45, 32, 1},
                         Shape{2, 33, 77, 64, 0}, Shape{2, 77, 33, 32, 0},
                         Shape{1, 130, 130, 32, 1}, Shape{6, 70, 70, 64, 1, 3},
                         Shape{4, 33, 77, 32, 0, 2},
                         Shape{4, 45, 45, 64, 1, 4}}) {
    tiledBackwardMatchesTheCpu<bf16>(*this, s, ZTRT_BF16, 8);
    tiledBackwardMatchesTheCpu<f16>(*this, s, ZTRT_F16, 11);
  }
}

TEST_F(CudaAttentionTest, TiledForwardMatchesTheCpu) {
  // Several blocks of 64 rows, ragged row blocks and key tiles, causal
  // and cross attention, both head dims.
  for (const Shape &s : {Shape{3, 70, 70, 64, 1}, Shape{2, 45, 45, 32, 1},
                         Shape{2, 33, 77, 64, 0}, Shape{2, 77, 33, 64, 0},
                         Shape{1, 130, 130, 64, 1}, Shape{2, 16, 32, 32, 0},
                         Shape{6, 70, 70, 64, 1, 3}, Shape{4, 33, 77, 32, 0, 2}}) {
    tiledMatchesTheCpu<bf16>(*this, s, ZTRT_BF16, 8);
    tiledMatchesTheCpu<f16>(*this, s, ZTRT_F16, 11);
  }
}

/// ZTRT_CUDA_ATTENTION_KERNEL for one scope (the launch reads it each time).
struct AttentionKernelChoice {
  explicit AttentionKernelChoice(const char *kind) {
    setenv("ZTRT_CUDA_ATTENTION_KERNEL", kind, 1);
  }
  ~AttentionKernelChoice() { unsetenv("ZTRT_CUDA_ATTENTION_KERNEL"); }
};

TEST_F(CudaAttentionTest, RegisterResidentKernelsMatchTheCpu) {
  // The mma.sync kernels (softmax in registers, 64-row tiles: the forward
  // and the keys kernel of the backward) on the shapes of
  // TiledForwardMatchesTheCpu and TiledBackwardMatchesTheCpu, held to the
  // same bounds (the same arithmetic per element, another order inside
  // the tensor-core sums).
  AttentionKernelChoice mma("mma");
  for (const Shape &s : {Shape{3, 70, 70, 64, 1}, Shape{2, 45, 45, 32, 1},
                         Shape{2, 33, 77, 64, 0}, Shape{2, 77, 33, 64, 0},
                         Shape{1, 130, 130, 64, 1}, Shape{2, 16, 32, 32, 0},
                         Shape{6, 70, 70, 64, 1, 3}, Shape{4, 33, 77, 32, 0, 2},
                         Shape{1, 200, 200, 32, 1}}) {
    tiledMatchesTheCpu<bf16>(*this, s, ZTRT_BF16, 8);
    tiledMatchesTheCpu<f16>(*this, s, ZTRT_F16, 11);
  }
  for (const Shape &s : {Shape{3, 70, 70, 64, 1}, Shape{2, 45, 45, 32, 1},
                         Shape{2, 33, 77, 64, 0}, Shape{2, 77, 33, 32, 0},
                         Shape{1, 130, 130, 32, 1}, Shape{6, 70, 70, 64, 1, 3},
                         Shape{4, 33, 77, 32, 0, 2},
                         Shape{4, 45, 45, 64, 1, 4},
                         Shape{2, 150, 150, 64, 1, 2}}) {
    tiledBackwardMatchesTheCpu<bf16>(*this, s, ZTRT_BF16, 8);
    tiledBackwardMatchesTheCpu<f16>(*this, s, ZTRT_F16, 11);
  }
  // The same inputs twice: the same bits, forward and backward (every sum
  // has a fixed order; no atomics), grouped and causal.
  const Shape s{6, 150, 150, 64, 1, 3};
  const int64_t qn = s.heads * s.tq * s.d, kn = s.heads / s.groups * s.tk * s.d;
  auto narrow = [](const std::vector<float> &x) {
    std::vector<bf16> out;
    for (float e : x)
      out.push_back(bf16(e));
    return out;
  };
  auto q = twin(narrow(inputs(qn, 111, 3.0f))), k = twin(narrow(inputs(kn, 112))),
       v = twin(narrow(inputs(kn, 113))), dy = twin(narrow(inputs(qn, 114)));
  std::vector<std::vector<uint16_t>> runs[2];
  for (auto &run : runs) {
    auto out = twin(std::vector<bf16>(qn)), dq = twin(std::vector<bf16>(qn)),
         dk = twin(std::vector<bf16>(kn)), dv = twin(std::vector<bf16>(kn));
    auto lse = output(s.heads * s.tq);
    ztrt_attention(g(), ZTRT_BF16, q.dev, k.dev, v.dev, out.dev, lse.dev, s.heads,
                   s.groups, s.tq, s.tk, s.d, s.causal, 0.125);
    ztrt_attention_grad(g(), ZTRT_BF16, dy.dev, q.dev, k.dev, v.dev, out.dev,
                        lse.dev, dq.dev, dk.dev, dv.dev, s.heads, s.groups, s.tq,
                        s.tk, s.d, s.causal, 0.125);
    for (Twin<bf16> *x : {&out, &dq, &dk, &dv}) {
      std::vector<uint16_t> bitsOf;
      for (const bf16 &e : fetch(*x))
        bitsOf.push_back(e.bits);
      run.push_back(bitsOf);
    }
  }
  EXPECT_EQ(runs[0], runs[1]) << "the mma kernels twice on the same inputs";
}

TEST_F(CudaAttentionTest, MatchesTheCpu) {
  check({6, 37, 37, 16, 1});
  check({6, 37, 37, 16, 0});
  check({3, 5, 9, 8, 0});
  check({2, 130, 130, 32, 1});
  // Grouped-query: the key / value heads repeated, the group's dk and dv
  // summed.
  check({12, 7, 7, 8, 1, 3});
  check({4, 5, 9, 8, 0, 4});
}

TEST_F(CudaAttentionTest, SixteenBitIsTheF32PathRoundedOnce) {
  sixteenBit<bf16>({3, 17, 17, 8, 1}, ZTRT_BF16);
  sixteenBit<f16>({3, 5, 9, 8, 0}, ZTRT_F16);
  sixteenBit<bf16>({6, 17, 17, 8, 1, 2}, ZTRT_BF16);
}

/// Scratch for two heads' scores: 5 heads go in groups of 2, 2 and 1.
class CudaAttentionGroupsTest : public CudaAttentionTest {
protected:
  CudaOptions options() const override {
    CudaOptions o;
    o.attentionScratchElements = 2 * 33 * 33;
    return o;
  }
};

TEST_F(CudaAttentionGroupsTest, GroupsOfHeadsMatchTheCpu) {
  check({5, 33, 33, 8, 1});
  check({5, 33, 33, 8, 0});
  // Grouped by 3: groups of 2 heads split a key / value head's 3 query
  // heads between two groups; its float accumulators carry dk and dv
  // across them.
  check({9, 33, 33, 8, 1, 3});
  check({6, 33, 33, 8, 0, 3});
}

} // namespace


/// TensorCore.cuh's mma.sync and ldmatrix against the fragment layouts the
/// PTX ISA documents, which TensorCore.cuh restates and which the kernels
/// that keep their softmax in registers depend on. The expected registers
/// are written here from the ISA's tables, apart from TensorCore.cuh's
/// code. The operands are distinct small integers (a: 0..255, b: 0..127,
/// exact in bf16 and f16), so that every misplaced element shows, and
/// every product and every sum of 16 of them is an integer below 2^24,
/// exact in float in any order: d is compared bitwise, whatever order a
/// tensor core adds in. On the emulator this holds TensorCore.cuh's
/// emulation to the tables; on a GPU, the hardware.
template <typename T> void tensorCoreLayouts(const char *type) {
  uint16_t a[16][16], b[16][8];
  float c[16][8], want[16][8];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      a[i][j] = T(static_cast<float>(i * 16 + j)).bits;
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n)
      b[k][n] = T(static_cast<float>(k * 8 + n)).bits;
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n) {
      c[i][n] = static_cast<float>(i * 8 + n) + 0.5f;
      double sum = c[i][n];
      for (int k = 0; k < 16; ++k)
        sum += static_cast<double>(i * 16 + k) * (k * 8 + n);
      want[i][n] = static_cast<float>(sum);
    }
  uint32_t loaded[4][32][4];
  float d[3][16][8];
  ztrt::cuda::tensorCoreProbe<T>(&a[0][0], &b[0][0], &c[0][0], &loaded[0][0][0],
                                 &d[0][0][0]);
  auto two = [](uint16_t lo, uint16_t hi) {
    return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
  };
  const char *what[4] = {"ldmatrix.x4", "ldmatrix.x4.trans", "ldmatrix.x2",
                         "ldmatrix.x2.trans"};
  int bad = 0;
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    // .x4 of a's quarters (rows 0-7 / 8-15 by cols 0-7 / 8-15, matrices in
    // that order): each register is "row lane / 4, columns 2 (lane % 4)
    // and + 1" of its matrix, which makes them A's a0..a3.
    // .trans: the transposed matrix's, (2t, g) and (2t + 1, g).
    // .x2 of b^T and .x2.trans of b: B's b0, b1.
    uint32_t expect[4][4];
    for (int m = 0; m < 4; ++m) {
      const int r0 = 8 * (m % 2), c0 = 8 * (m / 2);
      expect[0][m] = two(a[r0 + g][c0 + 2 * t], a[r0 + g][c0 + 2 * t + 1]);
      expect[1][m] = two(a[r0 + 2 * t][c0 + g], a[r0 + 2 * t + 1][c0 + g]);
      expect[2][m] = expect[3][m] =
          m < 2 ? two(b[8 * m + 2 * t][g], b[8 * m + 2 * t + 1][g]) : 0u;
    }
    for (int p = 0; p < 4; ++p)
      for (int r = 0; r < 4; ++r)
        if (loaded[p][lane][r] != expect[p][r] && bad++ < 8)
          ADD_FAILURE() << type << " " << what[p] << " lane " << lane
                        << " register " << r << ": 0x" << std::hex
                        << loaded[p][lane][r] << ", the ISA's 0x"
                        << expect[p][r] << std::dec;
  }
  const char *how[3] = {"operands by the documented layouts",
                        "a by ldmatrix.x4, b by ldmatrix.x2 of b^T",
                        "a by ldmatrix.x4, b by ldmatrix.x2.trans"};
  for (int p = 0; p < 3; ++p)
    for (int i = 0; i < 16; ++i)
      for (int n = 0; n < 8; ++n)
        if (bits(d[p][i][n]) != bits(want[i][n]) && bad++ < 16)
          ADD_FAILURE() << type << " mma.m16n8k16, " << how[p] << ": d[" << i
                        << "][" << n << "] = " << d[p][i][n] << ", a b + c = "
                        << want[i][n];
}

TEST_F(CudaConformanceTest, TensorCoreLayoutsAreThePtxIsas) {
  tensorCoreLayouts<bf16>("bf16");
  tensorCoreLayouts<f16>("f16");
}
