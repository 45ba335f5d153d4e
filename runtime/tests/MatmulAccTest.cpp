//===- MatmulAccTest.cpp - The accumulating GEMM --------------------------===//
//
// ztrt_matmul_acc (train.matmul_acc: c = c_in + op(a) op(b), c float) on the
// cpu backend, through the C ABI: against a double reference for every
// transpose and operand dtype, in place and copied, and its refusals.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "base/DType.h"
#include "ztrt.h"

#include <cmath>
#include <cstring>
#include <string>

using namespace ztrt;
using namespace ztrt::test;

namespace {

class MatmulAccTest : public ::testing::Test {
protected:
  std::unique_ptr<ztrt_ctx> ctx = cpuContext();
};

/// op(a) [m, k] and op(b) [k, n] of row-major a, b (as stored, transposed
/// where asked), widened to double.
struct Operands {
  int64_t m, n, k;
  bool ta, tb;
  double a(const std::vector<float> &x, int64_t r, int64_t l) const {
    return ta ? x[l * m + r] : x[r * k + l];
  }
  double b(const std::vector<float> &x, int64_t l, int64_t c) const {
    return tb ? x[c * k + l] : x[l * n + c];
  }
};

/// Checks c against c_in + op(a) op(b) in double, element by element. The
/// float result's error is at most (k + 1) u (|c_in| + sum |a||b|), u =
/// 2^-24, whatever order the library sums in (k products and one addition
/// of c_in, each rounded once): the rigorous bound, as in
/// CudaConformanceTest's matmul test. A wrong operand, transpose or a
/// dropped accumulator is off by O(|c_in| + sum |a||b|).
void expectAccumulated(const std::vector<float> &c,
                       const std::vector<float> &cIn,
                       const std::vector<float> &a, const std::vector<float> &b,
                       const Operands &op, const std::string &what) {
  int bad = 0;
  for (int64_t r = 0; r < op.m; ++r)
    for (int64_t col = 0; col < op.n; ++col) {
      double sum = cIn[r * op.n + col], mag = std::fabs(sum);
      for (int64_t l = 0; l < op.k; ++l) {
        const double p = op.a(a, r, l) * op.b(b, l, col);
        sum += p;
        mag += std::fabs(p);
      }
      const double bound = (op.k + 1) * std::ldexp(1.0, -24) * mag + 1e-30;
      const double got = c[r * op.n + col];
      if (!(std::fabs(got - sum) <= bound) && bad++ < 5)
        ADD_FAILURE() << what << " c[" << r << "][" << col << "] = " << got
                      << ", want " << sum << " within " << bound;
    }
}

/// n values of dtype `t` from floats (rounded once) and back to floats.
std::vector<uint16_t> narrow(const std::vector<float> &x, int32_t t) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (t == ZTRT_BF16) {
      bf16 v(x[i]);
      std::memcpy(&out[i], &v, 2);
    } else {
      f16 v(x[i]);
      std::memcpy(&out[i], &v, 2);
    }
  }
  return out;
}
std::vector<float> widen(const std::vector<uint16_t> &x, int32_t t) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (t == ZTRT_BF16) {
      bf16 v;
      std::memcpy(static_cast<void *>(&v), &x[i], 2);
      out[i] = static_cast<float>(v);
    } else {
      f16 v;
      std::memcpy(static_cast<void *>(&v), &x[i], 2);
      out[i] = static_cast<float>(v);
    }
  }
  return out;
}

TEST_F(MatmulAccTest, F32AddsTheProductInPlaceOrIntoACopy) {
  // k = 300 is more than OpenBLAS's blocking of k on this machine's kernels
  // (so beta = 1 meets partial sums), m and n are not multiples of a
  // vector width.
  const int64_t m = 37, n = 29, k = 300;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Operands op{m, n, k, ta, tb};
      const std::string what =
          std::string("ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0");
      auto a = testValues(m * k, 11), b = testValues(k * n, 12),
           cIn = testValues(m * n, 13);
      std::vector<float> c(m * n, NAN), inPlace = cIn;
      ztrt_matmul_acc(ctx.get(), ZTRT_F32, a.data(), b.data(), cIn.data(),
                      c.data(), m, n, k, ta, tb);
      expectAccumulated(c, cIn, a, b, op, what + " copied");
      ztrt_matmul_acc(ctx.get(), ZTRT_F32, a.data(), b.data(), inPlace.data(),
                      inPlace.data(), m, n, k, ta, tb);
      // The same GEMM on the same accumulator: the same bits.
      EXPECT_EQ(std::memcmp(inPlace.data(), c.data(), c.size() * 4), 0)
          << what << " in place";
    }
}

TEST_F(MatmulAccTest, ChainedTilesSumTheWholeProduct) {
  // train-tile-loss's dW: the head's gradient g^T x over 3 tiles of rows,
  // the first a plain matmul, the others accumulated in place, against
  // g^T x over all rows in double. Bound: each element is the sum of the
  // k = rows products, (k + 2) roundings at most (the tiles' k-sums and
  // two additions of partial sums).
  const int64_t rows = 50, v = 23, cdim = 19;
  auto g = testValues(rows * v, 21), x = testValues(rows * cdim, 22);
  std::vector<float> dw(v * cdim, NAN);
  const int64_t bounds[] = {0, 17, 34, rows};
  ztrt_matmul(ctx.get(), ZTRT_F32, g.data(), x.data(), dw.data(), 1, v, cdim,
              bounds[1], 1, 0, 0, 0, 0);
  for (int t = 1; t < 3; ++t) {
    const int64_t n = bounds[t + 1] - bounds[t];
    ztrt_matmul_acc(ctx.get(), ZTRT_F32, g.data() + bounds[t] * v,
                    x.data() + bounds[t] * cdim, dw.data(), dw.data(), v, cdim,
                    n, 1, 0);
  }
  expectAccumulated(dw, std::vector<float>(v * cdim, 0.0f), g, x,
                    Operands{v, cdim, rows, true, false}, "3 tiles");
}

TEST_F(MatmulAccTest, HalfOperandsAccumulateInFloat) {
  // bf16 / f16 operands: their products are exact in float, so the bound
  // is the f32 one on the operands' values; the accumulator is never
  // rounded to the operands' type (a bf16 store would be off by ~2^-9).
  const int64_t m = 21, n = 33, k = 70;
  for (int32_t t : {int32_t(ZTRT_BF16), int32_t(ZTRT_F16)})
    for (bool ta : {false, true}) {
      const Operands op{m, n, k, ta, !ta};
      auto a16 = narrow(testValues(m * k, 31), t),
           b16 = narrow(testValues(k * n, 32), t);
      auto cIn = testValues(m * n, 33);
      for (float &e : cIn)
        e = e / 3 + 1e-3f; // not representable in bf16 / f16
      std::vector<float> c = cIn;
      ztrt_matmul_acc(ctx.get(), t, a16.data(), b16.data(), c.data(), c.data(),
                      m, n, k, ta, !ta);
      expectAccumulated(c, cIn, widen(a16, t), widen(b16, t), op,
                        std::string(t == ZTRT_BF16 ? "bf16" : "f16") +
                            (ta ? " ta" : " tb"));
    }
}

TEST_F(MatmulAccTest, EmptyProductCopiesTheAccumulator) {
  auto cIn = testValues(12, 41);
  std::vector<float> c(12, NAN);
  ztrt_matmul_acc(ctx.get(), ZTRT_F32, nullptr, nullptr, cIn.data(), c.data(),
                  3, 4, 0, 0, 0);
  EXPECT_EQ(std::memcmp(c.data(), cIn.data(), 48), 0);
}

TEST_F(MatmulAccTest, OverlapsOtherThanInPlaceAreRefused) {
  std::vector<float> buf(64, 1.0f), a(8, 1.0f);
  EXPECT_EXIT(ztrt_matmul_acc(ctx.get(), ZTRT_F32, a.data(), a.data(),
                              buf.data(), buf.data() + 1, 4, 4, 2, 0, 0),
              ::testing::ExitedWithCode(1),
              "matmul_acc: c overlaps c_in without being it");
  EXPECT_EXIT(ztrt_matmul_acc(ctx.get(), ZTRT_F32, buf.data(), a.data(),
                              buf.data() + 4, buf.data() + 4, 4, 4, 2, 0, 0),
              ::testing::ExitedWithCode(1), "matmul_acc: c overlaps a or b");
  EXPECT_EXIT(ztrt_matmul_acc(ctx.get(), ZTRT_F32, a.data(), a.data(),
                              buf.data(), buf.data(), -1, 4, 2, 0, 0),
              ::testing::ExitedWithCode(1), "matmul_acc: negative m -1");
}

} // namespace
