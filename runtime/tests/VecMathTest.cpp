//===- VecMathTest.cpp - Vectorizable math against libm --------------------===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/VecMath.h"

#include <cmath>
#include <gtest/gtest.h>
#include <limits>

namespace {

// Float epsilon; the Cephes algorithms are documented at ~2 ulp.
constexpr double kUlp = 5.960464477539063e-08;

TEST(VecMath, TanhMatchesLibmToAFewUlp) {
  double worst = 0.0;
  for (double xd = -20.0; xd <= 20.0; xd += 1.0 / 4096) {
    float x = static_cast<float>(xd);
    double want = std::tanh(static_cast<double>(x));
    double got = ztrt::vecmath::tanh(x);
    worst = std::max(worst, std::fabs(got - want) /
                                std::max(std::fabs(want), 1e-30));
  }
  // 4 ulp: twice the measured worst case (2.4 ulp near |x| = 0.65, where the
  // two branches meet), far below what a wrong coefficient would give.
  EXPECT_LE(worst, 4 * kUlp);
}

TEST(VecMath, TanhSpecialValues) {
  EXPECT_EQ(ztrt::vecmath::tanh(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(ztrt::vecmath::tanh(-0.0f)));
  EXPECT_EQ(ztrt::vecmath::tanh(1e-30f), 1e-30f); // tanh(x) = x below ulp
  EXPECT_EQ(ztrt::vecmath::tanh(100.0f), 1.0f);
  EXPECT_EQ(ztrt::vecmath::tanh(-100.0f), -1.0f);
  EXPECT_EQ(ztrt::vecmath::tanh(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_TRUE(std::isnan(
      ztrt::vecmath::tanh(std::numeric_limits<float>::quiet_NaN())));
}

TEST(VecMath, ExpNonPositiveMatchesLibm) {
  double worst = 0.0;
  for (double xd = -87.0; xd <= 0.0; xd += 1.0 / 1024) {
    float x = static_cast<float>(xd);
    double want = std::exp(static_cast<double>(x));
    worst = std::max(worst,
                     std::fabs(ztrt::vecmath::expNonPositive(x) - want) / want);
  }
  EXPECT_LE(worst, 4 * kUlp); // same bound and reason as for tanh
}

// Softmax's exponential: expNonPositive down to -87, exactly 0 below (as
// libm's expf is for x < -103.97, and for -inf: masked scores), NaN stays
// NaN.
TEST(VecMath, ExpShiftedIsZeroBelowTheClamp) {
  using ztrt::vecmath::expShifted;
  for (float x : {0.0f, -1.0f, -50.5f, -87.0f})
    EXPECT_EQ(expShifted(x), ztrt::vecmath::expNonPositive(x)) << x;
  EXPECT_EQ(expShifted(0.0f), 1.0f);
  for (float x : {-87.001f, -100.0f, -1e30f,
                  -std::numeric_limits<float>::infinity()})
    EXPECT_EQ(expShifted(x), 0.0f) << x;
  EXPECT_TRUE(std::isnan(expShifted(std::numeric_limits<float>::quiet_NaN())));
}

} // namespace
