//===- DTypeKernelTest.cpp - bf16 / f16 kernels against f32 ---------------===//
//
// Every kernel of ztrt_abi.def, called through its ztrt_* entry point with
// dtype bf16 and f16, against the same entry point in f32 on the widened
// inputs (cpu backend).
//
// Tolerance: none, except for bf16 GEMMs through oneDNN, which sum in their
// own order (expectBf16MatmulUpToOrder states the bound). Inputs are drawn as values exactly representable in the
// 16-bit type, so widening them to float is exact; each kernel computes in
// float (double where the f32 kernel does) and rounds once when it stores
// an output (base/DType.h). The 16-bit result must therefore be the f32
// result rounded to the 16-bit type, bit for bit. A kernel that rounded an
// intermediate to the storage type, or accumulated in it, fails here.
//
// The conversions themselves are checked exhaustively where that is
// possible (all 65536 bit patterns of each type) and against an
// independent reference on float patterns.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "backends/cpu/OneDnnGemm.h"
#include "base/DType.h"
#include "ztrt.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

using namespace ztrt;
using namespace ztrt::test;

namespace {

float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// --- Conversions -----------------------------------------------------------

TEST(DTypeTest, NamesSizesAndCodes) {
  EXPECT_STREQ(dtypeName(DType::F32), "f32");
  EXPECT_STREQ(dtypeName(DType::BF16), "bf16");
  EXPECT_STREQ(dtypeName(DType::F16), "f16");
  EXPECT_EQ(elementBytes(DType::F32), 4);
  EXPECT_EQ(elementBytes(DType::BF16), 2);
  EXPECT_EQ(elementBytes(DType::F16), 2);
  DType type;
  EXPECT_TRUE(dtypeFromCode(ZTRT_BF16, &type));
  EXPECT_EQ(type, DType::BF16);
  EXPECT_FALSE(dtypeFromCode(3, &type));
  EXPECT_FALSE(dtypeFromCode(-1, &type));
}

/// The nearest representable value of a type whose finite values are
/// `values` (sorted), ties to the one with an even last bit: the
/// definition of round-to-nearest-even, computed the slow way.
template <typename T> uint16_t nearestEven(float x, const std::vector<T> &all) {
  // `all`: every finite non-negative value of T, ascending by bits.
  float a = std::fabs(x);
  size_t lo = 0, hi = all.size() - 1;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (static_cast<float>(all[mid]) <= a)
      lo = mid;
    else
      hi = mid;
  }
  double dlo = a - static_cast<double>(static_cast<float>(all[lo]));
  double dhi = static_cast<double>(static_cast<float>(all[hi])) - a;
  uint16_t bits;
  if (static_cast<float>(all[hi]) <= a)
    bits = all[hi].bits; // at or above the largest finite value
  else if (dlo < dhi || (dlo == dhi && (all[lo].bits & 1) == 0))
    bits = all[lo].bits;
  else
    bits = all[hi].bits;
  return static_cast<uint16_t>(bits | (std::signbit(x) ? 0x8000 : 0));
}

template <typename T> std::vector<T> finiteNonNegative(uint16_t infBits) {
  std::vector<T> all;
  for (uint32_t b = 0; b < infBits; ++b)
    all.push_back(T::fromBits(static_cast<uint16_t>(b)));
  return all;
}

TEST(DTypeTest, Bf16WidensExactlyAndRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    bf16 v = bf16::fromBits(static_cast<uint16_t>(b));
    float f = static_cast<float>(v);
    ASSERT_EQ(floatToBits(f), b << 16) << b;
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(bf16(f)))) << b;
    } else {
      ASSERT_EQ(bf16(f).bits, b) << b;
    }
  }
}

TEST(DTypeTest, F16WidensExactlyAndRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    f16 v = f16::fromBits(static_cast<uint16_t>(b));
    float f = static_cast<float>(v);
    const uint32_t exp = (b >> 10) & 0x1f, mant = b & 0x3ff;
    double expected =
        exp == 0 ? std::ldexp(static_cast<double>(mant), -24)
                 : std::ldexp(static_cast<double>(mant | 0x400), exp - 25);
    if (exp == 31) {
      ASSERT_TRUE(mant ? std::isnan(f) : std::isinf(f)) << b;
    } else {
      ASSERT_EQ(static_cast<double>(std::fabs(f)), expected) << b;
    }
    ASSERT_EQ(std::signbit(f), (b & 0x8000) != 0) << b;
    if (!std::isnan(f)) {
      ASSERT_EQ(f16(f).bits, b) << b;
    }
  }
}

/// Float patterns that stress rounding: every exponent, with mantissas at,
/// just below and just above the 16-bit types' halfway points, plus a
/// pseudo-random sample.
std::vector<float> roundingProbes() {
  std::vector<float> probes;
  for (uint32_t exp = 0; exp < 255; ++exp)
    for (uint32_t low : {0x0000u, 0x0fffu, 0x1000u, 0x1001u, 0x2000u, 0x7fffu,
                         0x8000u, 0x8001u, 0xffffu, 0x17fffu, 0x18000u})
      for (uint32_t high : {0u, 1u, 0x2au, 0x7fu})
        probes.push_back(bitsToFloat((exp << 23) | (high << 16) | low));
  uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    float f = bitsToFloat(state & 0x7fffffffu);
    if (!std::isnan(f))
      probes.push_back(f);
  }
  return probes;
}

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  std::vector<bf16> all = finiteNonNegative<bf16>(0x7f80);
  for (float x : roundingProbes())
    for (float v : {x, -x}) {
      uint16_t expected;
      // Half an ulp above the largest bf16 (0x7f7f, odd) or more: infinity.
      if (std::fabs(v) >= std::ldexp(511.0f, 119)) {
        expected = static_cast<uint16_t>(0x7f80 | (std::signbit(v) ? 0x8000 : 0));
      } else {
        expected = nearestEven(v, all);
      }
      ASSERT_EQ(bf16(v).bits, expected) << v;
    }
}

TEST(DTypeTest, F16RoundsToNearestEvenWithSubnormals) {
  std::vector<f16> all = finiteNonNegative<f16>(0x7c00);
  for (float x : roundingProbes())
    for (float v : {x, -x}) {
      uint16_t expected;
      if (std::fabs(v) >= 65520.0f) // half an ulp above 65504: infinity
        expected = static_cast<uint16_t>(0x7c00 | (std::signbit(v) ? 0x8000 : 0));
      else
        expected = nearestEven(v, all);
      ASSERT_EQ(f16(v).bits, expected) << v;
    }
}

TEST(DTypeTest, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(bf16(inf).bits, 0x7f80);
  EXPECT_EQ(bf16(-inf).bits, 0xff80);
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(nan))));
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(-nan))));
  // A signalling-looking NaN whose payload sits in the low half must not
  // round to infinity.
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(bitsToFloat(0x7f800001u)))));
  EXPECT_EQ(f16(inf).bits, 0x7c00);
  EXPECT_EQ(f16(-inf).bits, 0xfc00);
  EXPECT_TRUE(std::isnan(static_cast<float>(f16(nan))));
  EXPECT_EQ(f16(-0.0f).bits, 0x8000);
  EXPECT_EQ(f16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(f16(5.9604645e-8f).bits, 0x0001); // smallest subnormal
  EXPECT_EQ(f16(2.9802322e-8f).bits, 0x0000); // half of it: ties to even 0
}

// --- Kernels ---------------------------------------------------------------

template <typename T> constexpr int32_t codeOf() {
  return static_cast<int32_t>(DTypeOf<T>::value);
}

/// n values in [lo, hi) exactly representable in T, and their widened
/// float copy.
template <typename T> struct Data {
  std::vector<T> t;
  std::vector<float> f;
  Data() = default;
  Data(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
    std::vector<float> raw = testValues(n, seed);
    for (float r : raw) {
      T v(lo + (r + 1.0f) * 0.5f * (hi - lo));
      t.push_back(v);
      f.push_back(static_cast<float>(v));
    }
  }
  /// An output buffer of n elements.
  static Data zeros(size_t n) {
    Data d;
    d.t.assign(n, T(0.0f));
    d.f.assign(n, 0.0f);
    return d;
  }
};

template <typename T>
void expectRoundedF32(const std::vector<T> &got, const std::vector<float> &f32,
                      const char *what) {
  ASSERT_EQ(got.size(), f32.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i].bits, T(f32[i]).bits)
        << what << " element " << i << ": got " << static_cast<float>(got[i])
        << ", f32 result " << f32[i];
}

template <typename T> class DTypeKernelTest : public ::testing::Test {
protected:
  void SetUp() override {
    ctx = cpuContext();
    ctx->step = 1;
  }
  static constexpr int32_t kT = codeOf<T>();
  std::unique_ptr<ztrt_ctx> ctx;
};

using StorageTypes = ::testing::Types<bf16, f16>;
TYPED_TEST_SUITE(DTypeKernelTest, StorageTypes);

TYPED_TEST(DTypeKernelTest, Elementwise) {
  using T = TypeParam;
  ztrt_ctx *ctx = this->ctx.get();
  const int64_t n = 40000; // above the parallel threshold
  Data<T> a(n, 1), b(n, 2), out = Data<T>::zeros(n);
  ztrt_add(ctx, this->kT, a.t.data(), b.t.data(), out.t.data(), n);
  ztrt_add(ctx, ZTRT_F32, a.f.data(), b.f.data(), out.f.data(), n);
  expectRoundedF32(out.t, out.f, "add");
  ztrt_sub(ctx, this->kT, a.t.data(), b.t.data(), out.t.data(), n);
  ztrt_sub(ctx, ZTRT_F32, a.f.data(), b.f.data(), out.f.data(), n);
  expectRoundedF32(out.t, out.f, "sub");
  ztrt_mul(ctx, this->kT, a.t.data(), b.t.data(), out.t.data(), n);
  ztrt_mul(ctx, ZTRT_F32, a.f.data(), b.f.data(), out.f.data(), n);
  expectRoundedF32(out.t, out.f, "mul");
  ztrt_scale(ctx, this->kT, a.t.data(), out.t.data(), n, 0.3);
  ztrt_scale(ctx, ZTRT_F32, a.f.data(), out.f.data(), n, 0.3);
  expectRoundedF32(out.t, out.f, "scale");
  ztrt_relu(ctx, this->kT, a.t.data(), out.t.data(), n);
  ztrt_relu(ctx, ZTRT_F32, a.f.data(), out.f.data(), n);
  expectRoundedF32(out.t, out.f, "relu");
  ztrt_relu_grad(ctx, this->kT, b.t.data(), a.t.data(), out.t.data(), n);
  ztrt_relu_grad(ctx, ZTRT_F32, b.f.data(), a.f.data(), out.f.data(), n);
  expectRoundedF32(out.t, out.f, "relu_grad");
  ztrt_gelu(ctx, this->kT, a.t.data(), out.t.data(), n);
  ztrt_gelu(ctx, ZTRT_F32, a.f.data(), out.f.data(), n);
  expectRoundedF32(out.t, out.f, "gelu");
  ztrt_gelu_grad(ctx, this->kT, b.t.data(), a.t.data(), out.t.data(), n);
  ztrt_gelu_grad(ctx, ZTRT_F32, b.f.data(), a.f.data(), out.f.data(), n);
  expectRoundedF32(out.t, out.f, "gelu_grad");
  ztrt_fill(ctx, this->kT, out.t.data(), n, 0.1);
  ztrt_fill(ctx, ZTRT_F32, out.f.data(), n, 0.1);
  expectRoundedF32(out.t, out.f, "fill");
  // In place (out aliases an input).
  Data<T> acc = a;
  ztrt_add(ctx, this->kT, acc.t.data(), b.t.data(), acc.t.data(), n);
  ztrt_add(ctx, ZTRT_F32, acc.f.data(), b.f.data(), acc.f.data(), n);
  expectRoundedF32(acc.t, acc.f, "add in place");
  const int64_t rows = 37, cols = 29;
  Data<T> x(rows * cols, 3), bias(cols, 4), y = Data<T>::zeros(rows * cols);
  ztrt_bias_add(ctx, this->kT, x.t.data(), bias.t.data(), y.t.data(), rows,
                cols);
  ztrt_bias_add(ctx, ZTRT_F32, x.f.data(), bias.f.data(), y.f.data(), rows,
                cols);
  expectRoundedF32(y.t, y.f, "bias_add");
}

TYPED_TEST(DTypeKernelTest, LlamaElementwise) {
  using T = TypeParam;
  ztrt_ctx *ctx = this->ctx.get();
  const int64_t n = 40000; // above the parallel threshold
  Data<T> a(n, 21, -4.0f, 4.0f), b(n, 22), pos(n, 23, 0.25f, 4.0f),
      out = Data<T>::zeros(n);
  using Unary = void (*)(ztrt_ctx *, int32_t, const void *, void *, int64_t);
  using Binary = void (*)(ztrt_ctx *, int32_t, const void *, const void *,
                          void *, int64_t);
  struct U {
    const char *name;
    Unary fn;
    Data<T> *x;
  };
  for (U u : {U{"silu", ztrt_silu, &a}, U{"sigmoid", ztrt_sigmoid, &a},
              U{"exp", ztrt_exp, &a}, U{"sqrt", ztrt_sqrt, &pos},
              U{"rsqrt", ztrt_rsqrt, &pos}}) {
    u.fn(ctx, this->kT, u.x->t.data(), out.t.data(), n);
    u.fn(ctx, ZTRT_F32, u.x->f.data(), out.f.data(), n);
    expectRoundedF32(out.t, out.f, u.name);
  }
  struct B {
    const char *name;
    Binary fn;
    Data<T> *x, *y;
  };
  for (B g : {B{"silu_grad", ztrt_silu_grad, &b, &a},
              B{"sigmoid_grad", ztrt_sigmoid_grad, &b, &pos},
              B{"rsqrt_grad", ztrt_rsqrt_grad, &b, &pos},
              B{"div", ztrt_div, &a, &pos}}) {
    g.fn(ctx, this->kT, g.x->t.data(), g.y->t.data(), out.t.data(), n);
    g.fn(ctx, ZTRT_F32, g.x->f.data(), g.y->f.data(), out.f.data(), n);
    expectRoundedF32(out.t, out.f, g.name);
  }
  const int64_t outer = 40, inner = 1000; // = n
  std::vector<int32_t> mask(inner);
  for (int64_t j = 0; j < inner; ++j)
    mask[j] = (j * 7) % 3 == 0;
  ztrt_masked_fill(ctx, this->kT, a.t.data(), mask.data(), out.t.data(), outer,
                   inner, -1.5);
  ztrt_masked_fill(ctx, ZTRT_F32, a.f.data(), mask.data(), out.f.data(),
                   outer, inner, -1.5);
  expectRoundedF32(out.t, out.f, "masked_fill");
  // where copies bits; dropout multiplies in float and rounds once, with the
  // same mask for every dtype (it depends on positions, not values).
  ztrt_where(ctx, this->kT, mask.data(), a.t.data(), b.t.data(), out.t.data(),
             outer, inner);
  ztrt_where(ctx, ZTRT_F32, mask.data(), a.f.data(), b.f.data(), out.f.data(),
             outer, inner);
  expectRoundedF32(out.t, out.f, "where");
  ctx->step = 3;
  ctx->seed = 11;
  for (double p : {0.1, 0.5}) {
    ztrt_dropout(ctx, this->kT, a.t.data(), out.t.data(), n, 2, p);
    ztrt_dropout(ctx, ZTRT_F32, a.f.data(), out.f.data(), n, 2, p);
    expectRoundedF32(out.t, out.f, "dropout");
  }
}

TYPED_TEST(DTypeKernelTest, RMSNormAndRotary) {
  using T = TypeParam;
  ztrt_ctx *ctx = this->ctx.get();
  const int64_t rows = 48, cols = 64;
  Data<T> x(rows * cols, 24, -4.0f, 4.0f), g(cols, 25), dy(rows * cols, 26);
  Data<T> y = Data<T>::zeros(rows * cols), dx = Data<T>::zeros(rows * cols),
          dg = Data<T>::zeros(cols);
  ztrt_rms_norm(ctx, this->kT, x.t.data(), g.t.data(), y.t.data(), rows, cols,
                1e-6);
  ztrt_rms_norm(ctx, ZTRT_F32, x.f.data(), g.f.data(), y.f.data(), rows, cols,
                1e-6);
  expectRoundedF32(y.t, y.f, "rms_norm");
  ztrt_rms_norm_grad(ctx, this->kT, dy.t.data(), x.t.data(), g.t.data(),
                     dx.t.data(), dg.t.data(), rows, cols, 1e-6);
  ztrt_rms_norm_grad(ctx, ZTRT_F32, dy.f.data(), x.f.data(), g.f.data(),
                     dx.f.data(), dg.f.data(), rows, cols, 1e-6);
  expectRoundedF32(dx.t, dx.f, "rms_norm_grad dx");
  expectRoundedF32(dg.t, dg.f, "rms_norm_grad dgamma");
  // [outer 2, seq 6, inner 4 heads, dim 64 (= cols / 1)] = 48 rows of 64.
  for (int32_t inverse : {0, 1}) {
    ztrt_rotary_embedding(ctx, this->kT, x.t.data(), y.t.data(), 2, 6, 4, 64,
                          10000.0, 0.0, 1.0, 4.0, 8192.0, inverse);
    ztrt_rotary_embedding(ctx, ZTRT_F32, x.f.data(), y.f.data(), 2, 6, 4, 64,
                          10000.0, 0.0, 1.0, 4.0, 8192.0, inverse);
    expectRoundedF32(y.t, y.f, inverse ? "rotary inverse" : "rotary");
  }
}

/// A bf16 GEMM through oneDNN (backends/cpu/OneDnnGemm.h) sums its f32 products in
/// its own order, not OpenBLAS's: its result is the exact product sum,
/// computed in f32 in some order (error at most k 2^-24 sum |a b|, the
/// standard bound for a k-term f32 sum of exact products), rounded once to
/// bf16 (half an ulp more). Checked against the sum in double.
void expectBf16MatmulUpToOrder(const std::vector<bf16> &a,
                               const std::vector<bf16> &b,
                               const std::vector<bf16> &got, int64_t batch,
                               int64_t m, int64_t n, int64_t k, bool ta,
                               bool tb, int64_t sa, int64_t sb, int64_t sc) {
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t col = 0; col < n; ++col) {
        double exact = 0.0, magnitude = 0.0;
        for (int64_t q = 0; q < k; ++q) {
          const double x = static_cast<float>(
                           a[i * sa + (ta ? q * m + r : r * k + q)]),
                       y = static_cast<float>(
                           b[i * sb + (tb ? col * k + q : q * n + col)]);
          exact += x * y;
          magnitude += std::fabs(x * y);
        }
        const double v = static_cast<float>(got[i * sc + r * n + col]);
        const double sumBound = static_cast<double>(k) * 0x1p-24 * magnitude;
        const double ulp = std::ldexp(1.0, std::ilogb(std::fabs(exact) +
                                                      sumBound + 1e-30) -
                                               7);
        ASSERT_LE(std::fabs(v - exact), sumBound + 0.5 * ulp)
            << "batch " << i << " [" << r << ", " << col << "] of " << m
            << "x" << n << "x" << k;
      }
}

TYPED_TEST(DTypeKernelTest, Matmul) {
  using T = TypeParam;
  ztrt_ctx *ctx = this->ctx.get();
  struct Case {
    int64_t batch, m, n, k;
    int32_t ta, tb;
    bool shareB;
  };
  for (Case c : {Case{1, 17, 23, 64, 0, 0, false},
                 Case{1, 9, 5, 300, 1, 0, false},
                 Case{1, 8, 12, 7, 0, 1, false},
                 Case{3, 6, 7, 5, 1, 1, false},
                 Case{4, 5, 6, 8, 0, 0, true}}) {
    const int64_t sa = c.m * c.k, sb = c.shareB ? 0 : c.k * c.n,
                  sc = c.m * c.n;
    Data<T> a(c.batch * sa, 5), b(c.shareB ? c.k * c.n : c.batch * sb, 6);
    Data<T> out = Data<T>::zeros(c.batch * sc);
    ztrt_matmul(ctx, this->kT, a.t.data(), b.t.data(), out.t.data(), c.batch,
                c.m, c.n, c.k, c.ta, c.tb, sa, sb, sc);
    ztrt_matmul(ctx, ZTRT_F32, a.f.data(), b.f.data(), out.f.data(), c.batch,
                c.m, c.n, c.k, c.ta, c.tb, sa, sb, sc);
    if constexpr (std::is_same_v<T, bf16>)
      if (onednn::bf16GemmEnabled()) {
        expectBf16MatmulUpToOrder(a.t, b.t, out.t, c.batch, c.m, c.n, c.k,
                                  c.ta, c.tb, sa, sb, sc);
        continue;
      }
    expectRoundedF32(out.t, out.f, "matmul");
  }
  // k = 0: an empty sum is zero in every type.
  Data<T> out(6, 7);
  T dummy(0.0f);
  ztrt_matmul(ctx, this->kT, &dummy, &dummy, out.t.data(), 1, 2, 3, 0, 0, 0,
              0, 0, 0);
  for (const T &v : out.t)
    EXPECT_EQ(v.bits, T(0.0f).bits);
}

TYPED_TEST(DTypeKernelTest, NormalizationAndSoftmax) {
  using T = TypeParam;
  ztrt_ctx *ctx = this->ctx.get();
  const int64_t rows = 48, cols = 48;
  Data<T> x(rows * cols, 8, -4.0f, 4.0f), g(cols, 9), bta(cols, 10),
      dy(rows * cols, 11);
  Data<T> y = Data<T>::zeros(rows * cols);
  ztrt_layer_norm(ctx, this->kT, x.t.data(), g.t.data(), bta.t.data(),
                  y.t.data(), rows, cols, 1e-5);
  ztrt_layer_norm(ctx, ZTRT_F32, x.f.data(), g.f.data(), bta.f.data(),
                  y.f.data(), rows, cols, 1e-5);
  expectRoundedF32(y.t, y.f, "layer_norm");
  Data<T> dx = Data<T>::zeros(rows * cols), dg = Data<T>::zeros(cols),
          db = Data<T>::zeros(cols);
  ztrt_layer_norm_grad(ctx, this->kT, dy.t.data(), x.t.data(), g.t.data(),
                       dx.t.data(), dg.t.data(), db.t.data(), rows, cols, 1e-5);
  ztrt_layer_norm_grad(ctx, ZTRT_F32, dy.f.data(), x.f.data(), g.f.data(),
                       dx.f.data(), dg.f.data(), db.f.data(), rows, cols, 1e-5);
  expectRoundedF32(dx.t, dx.f, "layer_norm_grad dx");
  expectRoundedF32(dg.t, dg.f, "layer_norm_grad dgamma");
  expectRoundedF32(db.t, db.f, "layer_norm_grad dbeta");
  for (int32_t causal : {0, 1}) {
    ztrt_softmax(ctx, this->kT, x.t.data(), y.t.data(), rows, cols, causal);
    ztrt_softmax(ctx, ZTRT_F32, x.f.data(), y.f.data(), rows, cols, causal);
    expectRoundedF32(y.t, y.f, causal ? "causal softmax" : "softmax");
  }
  // The gradient from the 16-bit probabilities and their widened copy.
  for (size_t i = 0; i < y.t.size(); ++i)
    y.f[i] = static_cast<float>(y.t[i]);
  ztrt_softmax_grad(ctx, this->kT, dy.t.data(), y.t.data(), dx.t.data(), rows,
                    cols);
  ztrt_softmax_grad(ctx, ZTRT_F32, dy.f.data(), y.f.data(), dx.f.data(), rows,
                    cols);
  expectRoundedF32(dx.t, dx.f, "softmax_grad");
}

TYPED_TEST(DTypeKernelTest, Layout) {
  using T = TypeParam;
  ztrt_ctx *ctx = this->ctx.get();
  const int64_t shape[] = {3, 4, 5, 6}, perm[] = {2, 0, 3, 1};
  const int64_t n = 3 * 4 * 5 * 6;
  Data<T> x(n, 12), out = Data<T>::zeros(n);
  ztrt_transpose(ctx, this->kT, x.t.data(), out.t.data(), 4, shape, perm);
  ztrt_transpose(ctx, ZTRT_F32, x.f.data(), out.f.data(), 4, shape, perm);
  expectRoundedF32(out.t, out.f, "transpose");
  const int64_t mask[] = {1, 0, 1, 0};
  Data<T> red = Data<T>::zeros(4 * 6);
  for (int32_t kind : {0, 1, 2}) {
    ztrt_reduce(ctx, this->kT, x.t.data(), red.t.data(), 4, shape, mask, kind);
    ztrt_reduce(ctx, ZTRT_F32, x.f.data(), red.f.data(), 4, shape, mask, kind);
    expectRoundedF32(red.t, red.f,
                     kind == 0 ? "reduce sum" : kind == 1 ? "reduce mean"
                                                           : "reduce max");
  }
  // The max's adjoint, from the 16-bit maxima (exact in float).
  Data<T> dred(4 * 6, 14), dxm = Data<T>::zeros(n);
  ztrt_reduce_max_grad(ctx, this->kT, dred.t.data(), x.t.data(), red.t.data(),
                       dxm.t.data(), 4, shape, mask);
  ztrt_reduce_max_grad(ctx, ZTRT_F32, dred.f.data(), x.f.data(), red.f.data(),
                       dxm.f.data(), 4, shape, mask);
  expectRoundedF32(dxm.t, dxm.f, "reduce_max_grad");
  Data<T> small(4 * 6, 13), big = Data<T>::zeros(n);
  for (double factor : {1.0, 0.125, 1.0 / 3.0}) {
    ztrt_broadcast(ctx, this->kT, small.t.data(), big.t.data(), 4, shape, mask,
                   factor);
    ztrt_broadcast(ctx, ZTRT_F32, small.f.data(), big.f.data(), 4, shape, mask,
                   factor);
    expectRoundedF32(big.t, big.f, "broadcast");
  }
}

TYPED_TEST(DTypeKernelTest, LossAndLookups) {
  using T = TypeParam;
  ztrt_ctx *ctx = this->ctx.get();
  const int64_t rows = 33, classes = 50;
  Data<T> logits(rows * classes, 14, -6.0f, 6.0f);
  std::vector<int32_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r)
    labels[r] = static_cast<int32_t>((r * 7) % classes);
  // The loss is one float in every dtype: it equals the f32 loss exactly.
  float lossT = 0, lossF = 0;
  ztrt_cross_entropy(ctx, this->kT, logits.t.data(), labels.data(), &lossT,
                     rows, classes, ZTRT_NO_IGNORE_INDEX);
  ztrt_cross_entropy(ctx, ZTRT_F32, logits.f.data(), labels.data(), &lossF,
                     rows, classes, ZTRT_NO_IGNORE_INDEX);
  EXPECT_EQ(floatToBits(lossT), floatToBits(lossF));
  float dloss = 0.75f;
  Data<T> dl = Data<T>::zeros(rows * classes);
  ztrt_cross_entropy_grad(ctx, this->kT, &dloss, logits.t.data(), labels.data(),
                          dl.t.data(), rows, classes, ZTRT_NO_IGNORE_INDEX);
  ztrt_cross_entropy_grad(ctx, ZTRT_F32, &dloss, logits.f.data(), labels.data(),
                          dl.f.data(), rows, classes, ZTRT_NO_IGNORE_INDEX);
  expectRoundedF32(dl.t, dl.f, "cross_entropy_grad");

  const int64_t vocab = 11, dim = 13, nIds = 40;
  Data<T> table(vocab * dim, 15), dy(nIds * dim, 16);
  std::vector<int32_t> ids(nIds);
  for (int64_t i = 0; i < nIds; ++i)
    ids[i] = static_cast<int32_t>((i * 5) % vocab); // repeated ids
  Data<T> rows_ = Data<T>::zeros(nIds * dim);
  ztrt_embedding(ctx, this->kT, table.t.data(), ids.data(), rows_.t.data(),
                 nIds, vocab, dim);
  ztrt_embedding(ctx, ZTRT_F32, table.f.data(), ids.data(), rows_.f.data(),
                 nIds, vocab, dim);
  expectRoundedF32(rows_.t, rows_.f, "embedding");
  Data<T> dtable = Data<T>::zeros(vocab * dim);
  ztrt_embedding_grad(ctx, this->kT, dy.t.data(), ids.data(), dtable.t.data(),
                      nIds, vocab, dim);
  ztrt_embedding_grad(ctx, ZTRT_F32, dy.f.data(), ids.data(), dtable.f.data(),
                      nIds, vocab, dim);
  // Repeated ids accumulate in float and round once: one rounding, not one
  // per occurrence.
  expectRoundedF32(dtable.t, dtable.f, "embedding_grad");
}

TYPED_TEST(DTypeKernelTest, OptimizerUpdates) {
  using T = TypeParam;
  ztrt_ctx *ctx = this->ctx.get();
  const int64_t n = 1000;
  Data<T> grad(n, 17, -0.5f, 0.5f);
  // Each step starts both sides from the 16-bit state: after a step the
  // f32 side's buffers are re-widened from the 16-bit ones.
  auto resync = [](Data<T> &d) {
    for (size_t i = 0; i < d.t.size(); ++i)
      d.f[i] = static_cast<float>(d.t[i]);
  };
  for (int32_t nesterov : {0, 1}) {
    Data<T> p(n, 18), buf = Data<T>::zeros(n);
    for (int64_t step = 1; step <= 3; ++step) {
      ctx->step = step;
      ztrt_sgd_update(ctx, this->kT, p.t.data(), grad.t.data(), buf.t.data(),
                      n, 0.1, 0.9, 0.0, 0.01, nesterov);
      ztrt_sgd_update(ctx, ZTRT_F32, p.f.data(), grad.f.data(), buf.f.data(),
                      n, 0.1, 0.9, 0.0, 0.01, nesterov);
      expectRoundedF32(p.t, p.f, "sgd param");
      expectRoundedF32(buf.t, buf.f, "sgd momentum");
      resync(p);
      resync(buf);
    }
  }
  for (int32_t decoupled : {0, 1}) {
    Data<T> p(n, 19), m = Data<T>::zeros(n), v = Data<T>::zeros(n);
    for (int64_t step = 1; step <= 3; ++step) {
      ctx->step = step;
      ztrt_adam_update(ctx, this->kT, p.t.data(), grad.t.data(), m.t.data(),
                       v.t.data(), n, 1e-3, 0.9, 0.999, 1e-8, 0.1, decoupled);
      ztrt_adam_update(ctx, ZTRT_F32, p.f.data(), grad.f.data(), m.f.data(),
                       v.f.data(), n, 1e-3, 0.9, 0.999, 1e-8, 0.1, decoupled);
      expectRoundedF32(p.t, p.f, "adam param");
      expectRoundedF32(m.t, m.f, "adam exp_avg");
      expectRoundedF32(v.t, v.f, "adam exp_avg_sq");
      resync(p);
      resync(m);
      resync(v);
    }
  }
}

TYPED_TEST(DTypeKernelTest, CollectivesInAWorldOfOneCopy) {
  using T = TypeParam;
  ztrt_ctx *ctx = this->ctx.get();
  const int64_t n = 100;
  Data<T> x(n, 20), out = Data<T>::zeros(n);
  ztrt_all_reduce(ctx, this->kT, x.t.data(), out.t.data(), n, 1, 0);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(out.t[i].bits, x.t[i].bits);
  // The traffic counters see 2-byte elements (nothing moves in a world of
  // one, so only the call is counted).
  EXPECT_EQ(ctx->communication(Collective::AllReduce).calls, 1);
}

// --- Casts (ztrt_cast) ------------------------------------------------------
//
// Tolerance: none. A cast is defined as base/DType.h's conversion of each
// element: the same type keeps the bits; otherwise the element is widened
// to float (exact) and rounded once to the destination. The conversions
// themselves are checked against an independent reference above
// (DTypeTest); here every (from, to) pair of the kernel must reproduce them
// bit for bit, NaNs included (their bits come from the conversions, not
// from arithmetic).

const DType kAllTypes[] = {DType::F32, DType::BF16, DType::F16};

int32_t code(DType type) { return static_cast<int32_t>(type); }

template <typename T> uint32_t bitsOf(const T &v) {
  if constexpr (std::is_same_v<T, float>)
    return floatToBits(v);
  else
    return v.bits;
}

/// base/DType.h's conversion of one element from T to U.
template <typename T, typename U> U convert(const T &v) {
  if constexpr (std::is_same_v<T, U>)
    return v;
  else
    return static_cast<U>(static_cast<float>(v));
}

/// f32 values a cast must get right: ties of bf16 and f16 (to even, both
/// ways), f16 subnormals and their ties, f32 subnormals, the f16 overflow
/// boundary and values far beyond it, +-inf, NaNs (quiet, signalling,
/// negative, with payloads), then the rounding probes above.
std::vector<float> castProbes() {
  std::vector<float> probes = {
      0.0f, -0.0f, 1.0f, -1.0f, 0.1f, -3.14159f,
      // bf16 ties: 1 + 2^-8 (to 1, even) and 1 + 3 * 2^-8 (to 1 + 2^-6).
      bitsToFloat(0x3f808000u), bitsToFloat(0x3f818000u),
      bitsToFloat(0xbf808000u), bitsToFloat(0x3f808001u),
      // f16 ties: 1 + 2^-11 (to 1) and 1 + 3 * 2^-11 (to 1 + 2^-9).
      1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -(1.0f + 0x1p-11f),
      // f16 subnormals: the smallest, half of it (ties to 0), 1.5 and 2.5
      // of it (ties to 2), the largest, the smallest normal.
      0x1p-24f, 0x1p-25f, 1.5f * 0x1p-24f, 2.5f * 0x1p-24f, -0x1p-25f,
      1023 * 0x1p-24f, 0x1p-14f, 0x1p-26f,
      // f32 subnormals (bf16 keeps their top bits; f16 makes them 0).
      1e-40f, -1e-40f, bitsToFloat(0x00000001u), bitsToFloat(0x00400000u),
      std::numeric_limits<float>::min(),
      // f16's largest finite (65504), the last value rounding to it, the
      // tie that goes to inf (65520), and beyond.
      65504.0f, 65519.0f, 65519.99f, 65520.0f, -65520.0f, 1e5f, 1e38f,
      std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
      // bf16's overflow boundary (half an ulp above its largest finite).
      std::ldexp(511.0f, 119), std::ldexp(1021.0f, 118),
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(),
      -std::numeric_limits<float>::quiet_NaN(), bitsToFloat(0x7f800001u),
      bitsToFloat(0xff800001u), bitsToFloat(0x7fc12345u),
      bitsToFloat(0x7fa00000u)};
  for (float v : roundingProbes())
    probes.push_back(v);
  return probes;
}

/// The values a cast from T is checked on: every bit pattern of a 16-bit
/// type, castProbes() for f32.
template <typename T> std::vector<T> castSources() {
  if constexpr (std::is_same_v<T, float>) {
    return castProbes();
  } else {
    std::vector<T> all;
    for (uint32_t b = 0; b < 65536; ++b)
      all.push_back(T::fromBits(static_cast<uint16_t>(b)));
    return all;
  }
}

/// What an output starts as, so that an element the kernel does not write
/// shows up (except where the conversion happens to give the same bits).
template <typename U> U sentinel() {
  if constexpr (std::is_same_v<U, float>)
    return bitsToFloat(0x55555555u);
  else
    return U::fromBits(0x5555);
}

TEST(DTypeCastTest, EveryPairIsTheScalarConversionBitForBit) {
  auto ctx = cpuContext();
  for (DType from : kAllTypes)
    for (DType to : kAllTypes)
      dispatch(from, [&](auto fromTag) {
        using T = decltype(fromTag);
        dispatch(to, [&](auto toTag) {
          using U = decltype(toTag);
          // 65536 16-bit sources, ~210k f32 probes: above the parallel
          // threshold either way.
          const std::vector<T> x = castSources<T>();
          const int64_t n = static_cast<int64_t>(x.size());
          std::vector<U> out(x.size(), sentinel<U>());
          ztrt_cast(ctx.get(), code(from), x.data(), out.data(), n, code(to));
          const std::string what = std::string("cast ") + dtypeName(from) +
                                   " to " + dtypeName(to);
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(bitsOf(out[i]), bitsOf(convert<T, U>(x[i])))
                << what << " of 0x" << std::hex << bitsOf(x[i]);
        });
      });
}

template <typename U> uint32_t castOne(ztrt_ctx *ctx, float v) {
  U out;
  ztrt_cast(ctx, ZTRT_F32, &v, &out, 1, code(DTypeOf<U>::value));
  return bitsOf(out);
}

TEST(DTypeCastTest, RoundsToNearestEvenKeepsNaNAndOverflowsToInf) {
  // The probes' intended results, stated independently of DType.h.
  auto ctx = cpuContext();
  ztrt_ctx *c = ctx.get();
  EXPECT_EQ(castOne<bf16>(c, bitsToFloat(0x3f808000u)), 0x3f80u); // tie, even
  EXPECT_EQ(castOne<bf16>(c, bitsToFloat(0x3f818000u)), 0x3f82u); // tie, up
  EXPECT_EQ(castOne<bf16>(c, bitsToFloat(0x3f808001u)), 0x3f81u); // above
  EXPECT_EQ(castOne<bf16>(c, 1e-40f), 0x0001u); // bf16 keeps f32 subnormals
  EXPECT_EQ(castOne<bf16>(c, std::ldexp(511.0f, 119)), 0x7f80u); // to inf
  EXPECT_EQ(castOne<f16>(c, 1.0f + 0x1p-11f), 0x3c00u);     // tie, even
  EXPECT_EQ(castOne<f16>(c, 1.0f + 3 * 0x1p-11f), 0x3c02u); // tie, up
  EXPECT_EQ(castOne<f16>(c, 0x1p-24f), 0x0001u);  // smallest subnormal
  EXPECT_EQ(castOne<f16>(c, 0x1p-25f), 0x0000u);  // its half: ties to 0
  EXPECT_EQ(castOne<f16>(c, 1.5f * 0x1p-24f), 0x0002u);
  EXPECT_EQ(castOne<f16>(c, -0x1p-25f), 0x8000u); // -0
  EXPECT_EQ(castOne<f16>(c, 65519.0f), 0x7bffu);  // 65504
  EXPECT_EQ(castOne<f16>(c, 65520.0f), 0x7c00u);  // inf
  EXPECT_EQ(castOne<f16>(c, -1e5f), 0xfc00u);     // -inf
  EXPECT_EQ(castOne<f16>(c, 1e-40f), 0x0000u);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(castOne<f16>(c, -inf), 0xfc00u);
  EXPECT_EQ(castOne<bf16>(c, inf), 0x7f80u);
  EXPECT_TRUE(std::isnan(static_cast<float>(
      bf16::fromBits(static_cast<uint16_t>(castOne<bf16>(c, NAN))))));
  // A NaN whose payload is only in the low half stays NaN (not inf).
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16::fromBits(
      static_cast<uint16_t>(castOne<bf16>(c, bitsToFloat(0x7f800001u)))))));
  EXPECT_EQ(castOne<f16>(c, -NAN), 0xfe00u);
  // bf16 -> f16 rounds once, from the exact widening: 1 + 2^-7 is exact
  // in both; 65536 (bf16 0x4780) overflows f16.
  bf16 b = bf16::fromBits(0x3f81);
  f16 h;
  ztrt_cast(c, ZTRT_BF16, &b, &h, 1, ZTRT_F16);
  EXPECT_EQ(h.bits, 0x3c08u);
  b = bf16::fromBits(0x4780);
  ztrt_cast(c, ZTRT_BF16, &b, &h, 1, ZTRT_F16);
  EXPECT_EQ(h.bits, 0x7c00u);
}

TEST(DTypeCastTest, RoundTripsThroughF32) {
  // bf16 -> f32 -> bf16 is the identity on every pattern but signalling
  // NaNs, which DType.h returns quieted (bit 6 set, sign and payload
  // kept). f16 -> f32 -> f16 is the identity but for NaNs, which come back
  // as f16's quiet NaN of the same sign.
  auto ctx = cpuContext();
  std::vector<bf16> b = castSources<bf16>(), b2(b.size());
  std::vector<f16> h = castSources<f16>(), h2(h.size());
  std::vector<float> wide(b.size());
  const int64_t n = static_cast<int64_t>(b.size());
  ztrt_cast(ctx.get(), ZTRT_BF16, b.data(), wide.data(), n, ZTRT_F32);
  ztrt_cast(ctx.get(), ZTRT_F32, wide.data(), b2.data(), n, ZTRT_BF16);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t bits = b[i].bits;
    const bool signalling =
        (bits & 0x7f80) == 0x7f80 && (bits & 0x7f) != 0 && !(bits & 0x40);
    ASSERT_EQ(b2[i].bits, signalling ? bits | 0x40 : bits) << std::hex << bits;
  }
  ztrt_cast(ctx.get(), ZTRT_F16, h.data(), wide.data(), n, ZTRT_F32);
  ztrt_cast(ctx.get(), ZTRT_F32, wide.data(), h2.data(), n, ZTRT_F16);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t bits = h[i].bits;
    const bool nan = (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0;
    ASSERT_EQ(h2[i].bits, nan ? (bits & 0x8000) | 0x7e00 : bits)
        << std::hex << bits;
  }
}

TEST(DTypeCastTest, SameTypeIsACopyInPlaceOrOverlapping) {
  auto ctx = cpuContext();
  std::vector<float> x = castProbes();
  const std::vector<float> original = x;
  const int64_t n = static_cast<int64_t>(x.size());
  ztrt_cast(ctx.get(), ZTRT_F32, x.data(), x.data(), n, ZTRT_F32);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(floatToBits(x[i]), floatToBits(original[i])) << i;
  // Shifted by one element: memmove semantics.
  ztrt_cast(ctx.get(), ZTRT_F32, x.data(), x.data() + 1, n - 1, ZTRT_F32);
  for (int64_t i = 1; i < n; ++i)
    ASSERT_EQ(floatToBits(x[i]), floatToBits(original[i - 1])) << i;
}

TEST(DTypeCastTest, BadArgumentsAreRefusedByName) {
  auto ctx = cpuContext();
  float a[4] = {};
  bf16 h[4];
  EXPECT_EXIT(ztrt_cast(ctx.get(), ZTRT_F32, a, h, 4, 3),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: cast: unknown element type code 3 for to "
              "\\(ztrt_dtype: 0 f32, 1 bf16, 2 f16\\)\n$");
  EXPECT_EXIT(ztrt_cast(ctx.get(), ZTRT_BF16, h, a, 4, -1),
              ::testing::ExitedWithCode(1),
              "cast: unknown element type code -1 for to");
  EXPECT_EXIT(ztrt_cast(ctx.get(), 5, a, h, 4, ZTRT_BF16),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: cast: unknown element type code 5 "
              "\\(ztrt_dtype");
  EXPECT_EXIT(ztrt_cast(ctx.get(), ZTRT_F32, a, h, -1, ZTRT_BF16),
              ::testing::ExitedWithCode(1), "cast: negative n -1");
  // An in-place cast between types would overwrite unread elements.
  EXPECT_EXIT(ztrt_cast(ctx.get(), ZTRT_F32, a, a, 4, ZTRT_BF16),
              ::testing::ExitedWithCode(1),
              "cast: out overlaps x \\(f32 to bf16\\); a cast may be in "
              "place only when to is x's dtype");
  EXPECT_EXIT(ztrt_cast(ctx.get(), ZTRT_BF16, h, h + 1, 2, ZTRT_F32),
              ::testing::ExitedWithCode(1), "cast: out overlaps x");
}

TEST(DTypeKernelErrors, UnknownDTypeIsRefusedByName) {
  auto ctx = cpuContext();
  float a = 1.0f;
  EXPECT_EXIT(ztrt_add(ctx.get(), 7, &a, &a, &a, 1),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: add: unknown element type code 7 \\(ztrt_dtype: "
              "0 f32, 1 bf16, 2 f16\\)\n$");
  EXPECT_EXIT(ztrt_all_gather(ctx.get(), -1, &a, &a, 1, 0),
              ::testing::ExitedWithCode(1), "all_gather: unknown element type");
  EXPECT_EXIT(ztrt_matmul(ctx.get(), ZTRT_BF16, &a, &a, &a, 1, 1, 1, -2, 0, 0,
                          0, 0, 0),
              ::testing::ExitedWithCode(1), "matmul: negative k -2");
}

} // namespace
