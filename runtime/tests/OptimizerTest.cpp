//===- OptimizerTest.cpp - SGD and Adam(W) against hand computation -------===//
//
// Values below were computed by hand from the torch.optim formulas (see
// docs/runtime.md); constant gradients keep the arithmetic checkable.
// Tolerance 1e-6 for those: a handful of float roundings of O(1) values.
// The master-weight updates at the end are exact (their own comment).
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "base/DType.h"
#include "ztrt.h"

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

using namespace ztrt;
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

// --- Master-weight updates (mixed precision) --------------------------------
//
// ztrt_sgd_update_master / ztrt_adam_update_master for every gradient type
// and parameter type, against the f32 kernels (ztrt_sgd_update /
// ztrt_adam_update) run on a copy of the master with the gradient widened
// to f32 and copies of the f32 states, over several steps. Tolerance: none
// (bit equality). The master update is defined as that f32 update (the same
// per-element float expressions; widening a 16-bit gradient is exact), and
// the parameter as the new master rounded once to its type, which is what
// ztrt_cast of the reference master computes (DTypeKernelTest checks
// ztrt_cast against base/DType.h bit for bit).

namespace {

const DType kAllTypes[] = {DType::F32, DType::BF16, DType::F16};

template <typename T> int32_t codeOf() {
  return static_cast<int32_t>(DTypeOf<T>::value);
}

template <typename T> uint32_t bitsOf(const T &v) {
  if constexpr (std::is_same_v<T, float>) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof(u));
    return u;
  } else {
    return v.bits;
  }
}

template <typename T>
void expectSameBits(const std::vector<T> &got, const std::vector<T> &want,
                    const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (bitsOf(got[i]) != bitsOf(want[i])) {
      ADD_FAILURE() << what << "[" << i << "]: 0x" << std::hex
                    << bitsOf(got[i]) << ", expected 0x" << bitsOf(want[i])
                    << std::dec << " (" << static_cast<float>(got[i])
                    << " vs " << static_cast<float>(want[i]) << ")";
      ++bad;
    }
}

template <typename T> std::vector<T> rounded(const std::vector<float> &v) {
  std::vector<T> out;
  for (float x : v)
    out.push_back(static_cast<T>(x));
  return out;
}

template <typename T> std::vector<float> widened(const std::vector<T> &v) {
  std::vector<float> out;
  for (const T &x : v)
    out.push_back(static_cast<float>(x));
  return out;
}

// Above the cpu backend's parallel threshold.
constexpr int64_t kMasterElements = 40000;

/// Masters in [-2, 2) with a few values at the edges of the 16-bit types:
/// beyond f16's range (the parameter becomes inf), f16 subnormals, an f32
/// subnormal.
std::vector<float> masterValues() {
  std::vector<float> v = testValues(kMasterElements, 31);
  for (float &x : v)
    x *= 2.0f;
  v[0] = 1e5f;
  v[1] = -7e4f;
  v[2] = 3e-6f;
  v[3] = -1e-40f;
  return v;
}

/// The gradient of one step, in G.
template <typename G> std::vector<G> gradient(int64_t step) {
  std::vector<float> v = testValues(kMasterElements, 40 + uint32_t(step));
  for (float &x : v)
    x *= 0.5f;
  return rounded<G>(v);
}

/// The parameter the master rounds to, through ztrt_cast.
template <typename P>
std::vector<P> castOf(ztrt_ctx *ctx, const std::vector<float> &master) {
  std::vector<P> out(master.size());
  ztrt_cast(ctx, ZTRT_F32, master.data(), out.data(),
            static_cast<int64_t>(master.size()), codeOf<P>());
  return out;
}

struct SgdCase {
  double lr, momentum, dampening, decay;
  int32_t nesterov;
};

template <typename G, typename P>
void checkSgdMaster(ztrt_ctx *ctx, const SgdCase &h) {
  const int64_t n = kMasterElements;
  std::vector<float> master = masterValues(), ref = master;
  std::vector<float> buf(n, 0.0f), refBuf(n, 0.0f);
  std::vector<P> param(n, static_cast<P>(0.0f));
  const bool momentum = h.momentum != 0.0;
  const std::string what = std::string("sgd grad ") +
                           dtypeName(DTypeOf<G>::value) + " param " +
                           dtypeName(DTypeOf<P>::value) + " momentum " +
                           std::to_string(h.momentum) + " nesterov " +
                           std::to_string(h.nesterov);
  for (int64_t step = 1; step <= 4; ++step) {
    ctx->step = step;
    const std::vector<G> grad = gradient<G>(step);
    const std::vector<float> wide = widened(grad);
    ztrt_sgd_update_master(ctx, codeOf<G>(), param.data(), grad.data(),
                           master.data(), momentum ? buf.data() : nullptr, n,
                           h.lr, h.momentum, h.dampening, h.decay, h.nesterov,
                           codeOf<P>());
    ztrt_sgd_update(ctx, ZTRT_F32, ref.data(), wide.data(),
                    momentum ? refBuf.data() : nullptr, n, h.lr, h.momentum,
                    h.dampening, h.decay, h.nesterov);
    const std::string at = what + " step " + std::to_string(step);
    expectSameBits(master, ref, at + ": master");
    expectSameBits(buf, refBuf, at + ": momentum");
    expectSameBits(param, castOf<P>(ctx, ref), at + ": param");
  }
  if constexpr (std::is_same_v<P, f16>) { // the edge value did its job
    EXPECT_TRUE(std::isinf(static_cast<float>(param[0]))) << what;
  }
}

template <typename G, typename P>
void checkAdamMaster(ztrt_ctx *ctx, double decay, int32_t decoupled) {
  const int64_t n = kMasterElements;
  std::vector<float> master = masterValues(), ref = master;
  std::vector<float> m(n, 0.0f), v(n, 0.0f), refM(n, 0.0f), refV(n, 0.0f);
  std::vector<P> param(n, static_cast<P>(0.0f));
  const std::string what = std::string("adam grad ") +
                           dtypeName(DTypeOf<G>::value) + " param " +
                           dtypeName(DTypeOf<P>::value) + " decay " +
                           std::to_string(decay) + " decoupled " +
                           std::to_string(decoupled);
  for (int64_t step = 1; step <= 4; ++step) {
    ctx->step = step;
    const std::vector<G> grad = gradient<G>(step);
    const std::vector<float> wide = widened(grad);
    ztrt_adam_update_master(ctx, codeOf<G>(), param.data(), grad.data(),
                            master.data(), m.data(), v.data(), n, 1e-3, 0.9,
                            0.999, 1e-8, decay, decoupled, codeOf<P>());
    ztrt_adam_update(ctx, ZTRT_F32, ref.data(), wide.data(), refM.data(),
                     refV.data(), n, 1e-3, 0.9, 0.999, 1e-8, decay, decoupled);
    const std::string at = what + " step " + std::to_string(step);
    expectSameBits(master, ref, at + ": master");
    expectSameBits(m, refM, at + ": exp_avg");
    expectSameBits(v, refV, at + ": exp_avg_sq");
    expectSameBits(param, castOf<P>(ctx, ref), at + ": param");
  }
  if constexpr (std::is_same_v<P, f16>) {
    EXPECT_TRUE(std::isinf(static_cast<float>(param[0]))) << what;
  }
}

/// fn(G{}, P{}) for every gradient type G and parameter type P.
template <typename Fn> void forEachTypePair(Fn fn) {
  for (DType gradType : kAllTypes)
    for (DType paramType : kAllTypes)
      dispatch(gradType, [&](auto g) {
        dispatch(paramType, [&](auto p) { fn(g, p); });
      });
}

} // namespace

TEST_F(OptimizerTest, SgdUpdateMasterIsTheF32UpdateOnTheMaster) {
  for (SgdCase h : {SgdCase{0.1, 0.0, 0.0, 0.0, 0},
                    SgdCase{0.05, 0.9, 0.0, 1e-2, 0},
                    SgdCase{0.05, 0.9, 0.1, 0.0, 0},
                    SgdCase{0.01, 0.9, 0.0, 1e-3, 1}})
    forEachTypePair([&](auto g, auto p) {
      checkSgdMaster<decltype(g), decltype(p)>(ctx.get(), h);
    });
}

TEST_F(OptimizerTest, AdamUpdateMasterIsTheF32UpdateOnTheMaster) {
  for (int32_t decoupled : {0, 1})
    for (double decay : {0.0, 0.1})
      forEachTypePair([&](auto g, auto p) {
        checkAdamMaster<decltype(g), decltype(p)>(ctx.get(), decay, decoupled);
      });
}

TEST_F(OptimizerTest, MasterUpdatesRefuseBadArguments) {
  float master = 1.0f, m = 0.0f, v = 0.0f;
  bf16 p(1.0f), g(0.5f);
  ctx->step = 1;
  EXPECT_EXIT(ztrt_sgd_update_master(ctx.get(), ZTRT_BF16, &p, &g, &master,
                                     nullptr, 1, 0.1, 0, 0, 0, 0, 3),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: sgd_update_master: unknown element type code 3 "
              "for param_dtype \\(ztrt_dtype: 0 f32, 1 bf16, 2 f16\\)\n$");
  EXPECT_EXIT(ztrt_adam_update_master(ctx.get(), ZTRT_BF16, &p, &g, &master,
                                      &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0, 1,
                                      -1),
              ::testing::ExitedWithCode(1),
              "adamw_update_master: unknown element type code -1 for "
              "param_dtype");
  EXPECT_EXIT(ztrt_adam_update_master(ctx.get(), ZTRT_BF16, &p, &g, &master,
                                      &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0, 0,
                                      7),
              ::testing::ExitedWithCode(1),
              "adam_update_master: unknown element type code 7 for "
              "param_dtype");
  // The gradient's dtype is the call's dtype.
  EXPECT_EXIT(ztrt_sgd_update_master(ctx.get(), 4, &p, &g, &master, nullptr, 1,
                                     0.1, 0, 0, 0, 0, ZTRT_BF16),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: sgd_update_master: unknown element type code 4 "
              "\\(ztrt_dtype");
  EXPECT_EXIT(ztrt_sgd_update_master(ctx.get(), ZTRT_BF16, &p, &g, &master,
                                     nullptr, 1, 0.1, 0.9, 0, 0, 0, ZTRT_BF16),
              ::testing::ExitedWithCode(1),
              "sgd_update_master: momentum 0.9 needs a momentum buffer");
  EXPECT_EXIT(ztrt_sgd_update_master(ctx.get(), ZTRT_BF16, &p, &g, &master,
                                     nullptr, -2, 0.1, 0, 0, 0, 0, ZTRT_BF16),
              ::testing::ExitedWithCode(1),
              "sgd_update_master: negative element count -2");
  // A 16-bit parameter stored over its master would corrupt it.
  float both[2] = {1.0f, 2.0f};
  EXPECT_EXIT(ztrt_sgd_update_master(ctx.get(), ZTRT_BF16, both, &g, both,
                                     nullptr, 2, 0.1, 0, 0, 0, 0, ZTRT_BF16),
              ::testing::ExitedWithCode(1),
              "sgd_update_master: param \\(bf16\\) overlaps master");
  EXPECT_EXIT(ztrt_adam_update_master(ctx.get(), ZTRT_BF16, both + 1, &g, both,
                                      &m, &v, 2, 0.1, 0.9, 0.999, 1e-8, 0, 1,
                                      ZTRT_F32),
              ::testing::ExitedWithCode(1),
              "adamw_update_master: param \\(f32\\) overlaps master");
  ctx->step = 0;
  EXPECT_EXIT(ztrt_adam_update_master(ctx.get(), ZTRT_BF16, &p, &g, &master,
                                      &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0, 0,
                                      ZTRT_BF16),
              ::testing::ExitedWithCode(1),
              "adam_update_master: called outside a step");
}
