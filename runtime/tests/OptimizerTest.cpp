//===- OptimizerTest.cpp - SGD and Adam(W) against hand computation -------===//
//
// Values below were computed by hand from the torch.optim formulas (see
// docs/runtime.md); constant gradients keep the arithmetic checkable.
// Tolerance 1e-6 everywhere: a handful of float roundings of O(1) values.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "ztrt.h"

#include <cmath>

using namespace ztrt::test;

namespace {

class OptimizerTest : public ::testing::Test {
protected:
  std::unique_ptr<ztrt_ctx> ctx = cpuContext();
};

} // namespace

TEST_F(OptimizerTest, PlainSgd) {
  float p = 1.0f, g = 0.5f;
  ctx->step = 1;
  ztrt_sgd_update(ctx.get(), ZTRT_F32, &p, &g, nullptr, 1, 0.1, 0, 0, 0, 0);
  EXPECT_NEAR(p, 0.95, 1e-6);
}

TEST_F(OptimizerTest, SgdMomentumWeightDecay) {
  float p = 1.0f, g = 0.5f, buf = 42.0f; // buf is ignored at step 1
  ctx->step = 1;
  ztrt_sgd_update(ctx.get(), ZTRT_F32, &p, &g, &buf, 1, 0.1, 0.9, 0, 0.01, 0);
  // d = 0.5 + 0.01*1 = 0.51; buf = d; p = 1 - 0.1*0.51
  EXPECT_NEAR(buf, 0.51, 1e-6);
  EXPECT_NEAR(p, 0.949, 1e-6);
  ctx->step = 2;
  ztrt_sgd_update(ctx.get(), ZTRT_F32, &p, &g, &buf, 1, 0.1, 0.9, 0, 0.01, 0);
  // d = 0.5 + 0.01*0.949 = 0.50949; buf = 0.9*0.51 + 0.50949 = 0.96849
  EXPECT_NEAR(buf, 0.96849, 1e-6);
  EXPECT_NEAR(p, 0.949 - 0.096849, 1e-6);
}

TEST_F(OptimizerTest, SgdDampeningAndNesterov) {
  float p = 1.0f, g = 0.5f, buf = 0.0f;
  ctx->step = 1;
  ztrt_sgd_update(ctx.get(), ZTRT_F32, &p, &g, &buf, 1, 0.1, 0.9, 0.5, 0, 1);
  // Step 1: buf = d = 0.5 (no dampening on the first step);
  // nesterov: d = 0.5 + 0.9*0.5 = 0.95; p = 1 - 0.095
  EXPECT_NEAR(buf, 0.5, 1e-6);
  EXPECT_NEAR(p, 0.905, 1e-6);
  ctx->step = 2;
  ztrt_sgd_update(ctx.get(), ZTRT_F32, &p, &g, &buf, 1, 0.1, 0.9, 0.5, 0, 1);
  // buf = 0.9*0.5 + 0.5*0.5 = 0.7; d = 0.5 + 0.9*0.7 = 1.13; p -= 0.113
  EXPECT_NEAR(buf, 0.7, 1e-6);
  EXPECT_NEAR(p, 0.792, 1e-6);
}

TEST_F(OptimizerTest, AdamConstantGradientMovesByLr) {
  // With a constant gradient m_hat = g and v_hat = g^2, so each step moves
  // the parameter by lr * g / (|g| + eps) = lr (up to eps).
  float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
  for (int t = 1; t <= 3; ++t) {
    ctx->step = t;
    ztrt_adam_update(ctx.get(), ZTRT_F32, &p, &g, &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0,
                         0);
  }
  // m3 = 0.5 * (1 - 0.9^3) = 0.1355; v3 = 0.25 * (1 - 0.999^3)
  EXPECT_NEAR(m, 0.1355, 1e-6);
  EXPECT_NEAR(v, 0.25 * 0.002997001, 1e-8);
  EXPECT_NEAR(p, 0.7, 1e-6);
}

TEST_F(OptimizerTest, AdamCoupledWeightDecay) {
  float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
  ctx->step = 1;
  ztrt_adam_update(ctx.get(), ZTRT_F32, &p, &g, &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0.1,
                       0);
  // g' = 0.5 + 0.1*1 = 0.6 enters the moments.
  EXPECT_NEAR(m, 0.06, 1e-7);
  EXPECT_NEAR(v, 0.00036, 1e-9);
  EXPECT_NEAR(p, 0.9, 1e-6);
  ctx->step = 2;
  ztrt_adam_update(ctx.get(), ZTRT_F32, &p, &g, &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0.1,
                       0);
  // g' = 0.59; m = 0.113; v = 0.00070774; m_hat = 0.113/0.19,
  // v_hat = 0.00070774/0.001999; p = 0.9 - 0.1 * m_hat / sqrt(v_hat)
  EXPECT_NEAR(m, 0.113, 1e-6);
  EXPECT_NEAR(v, 0.00070774, 1e-9);
  EXPECT_NEAR(p, 0.9 - 0.1 * (0.113 / 0.19) / std::sqrt(0.00070774 / 0.001999),
              1e-6);
}

TEST_F(OptimizerTest, AdamWDecoupledWeightDecay) {
  float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
  ctx->step = 1;
  ztrt_adam_update(ctx.get(), ZTRT_F32, &p, &g, &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0.1,
                       1);
  // p = 1 * (1 - 0.1*0.1) = 0.99, then the Adam step of lr: 0.89. The
  // gradient itself is not decayed.
  EXPECT_NEAR(m, 0.05, 1e-7);
  EXPECT_NEAR(p, 0.89, 1e-6);
}

TEST_F(OptimizerTest, UpdatesNeedAStep) {
  float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
  EXPECT_EXIT(ztrt_adam_update(ctx.get(), ZTRT_F32, &p, &g, &m, &v, 1, 0.1, 0.9,
                                   0.999, 1e-8, 0, 1),
              ::testing::ExitedWithCode(1),
              "adamw_update: called outside a step");
  ctx->step = 1;
  EXPECT_EXIT(
      ztrt_sgd_update(ctx.get(), ZTRT_F32, &p, &g, nullptr, 1, 0.1, 0.9, 0, 0, 0),
      ::testing::ExitedWithCode(1),
      "sgd_update: momentum 0.9 needs a momentum buffer");
}

TEST_F(OptimizerTest, ZeroPaddingStaysExactlyZero) {
  // ZeRO pads parameters and states with zeros and the compiler pads
  // gradients with zeros; the runtime relies on every update of such an
  // element being exactly +0 (no check per step), with weight decay,
  // momentum, nesterov and Adam's bias correction alike.
  float p = 0.0f, g = 0.0f, buf = 0.0f;
  float q[2] = {}, m[2] = {}, v[2] = {};
  for (int64_t t = 1; t <= 3; ++t) {
    ctx->step = t;
    ztrt_sgd_update(ctx.get(), ZTRT_F32, &p, &g, &buf, 1, 0.1, 0.9, 0.1, 0.01, 1);
    EXPECT_FALSE(std::signbit(p)) << "sgd step " << t;
    EXPECT_EQ(p, 0.0f);
    EXPECT_EQ(buf, 0.0f);
    for (int32_t decoupled : {0, 1}) {
      ztrt_adam_update(ctx.get(), ZTRT_F32, &q[decoupled], &g, &m[decoupled],
                           &v[decoupled], 1, 1e-3, 0.9, 0.999, 1e-8, 0.01,
                           decoupled);
      EXPECT_FALSE(std::signbit(q[decoupled]))
          << "adam decoupled=" << decoupled << " step " << t;
      EXPECT_EQ(q[decoupled], 0.0f);
      EXPECT_EQ(m[decoupled], 0.0f);
      EXPECT_EQ(v[decoupled], 0.0f);
    }
  }
}
