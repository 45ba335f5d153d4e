//===- LossScalerTest.cpp - Dynamic loss scaling --------------------------===//
//
// The scaler's sequence of scales against DeepSpeed's DynamicLossScaler
// (deepspeed/runtime/fp16/loss_scaler.py, update_scale), derived by hand
// from its rules for chosen overflow patterns, and against a line-by-line
// transcription of that Python for long random patterns; the runtime entry
// points (ztrt_loss_scale, ztrt_update_loss_scale, ztrt_found_nonfinite)
// and the skip / unscale of the master-weight updates. Tolerance: none: the
// scales are powers of two and every comparison is exact.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "step/Context.h"
#include "base/DType.h"
#include "step/LossScaler.h"
#include "step/LrSchedule.h"
#include "ztrt.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace ztrt;
using namespace ztrt::test;

namespace {

using Outcome = LossScaler::Outcome;

/// DeepSpeed's update_scale, transcribed (consecutive_hysteresis=False,
/// raise_error_at_min_scale=True); returns false where it raises.
struct DeepSpeedScaler {
  double cur_scale;
  int64_t cur_iter = 0, last_overflow_iter = -1;
  double scale_factor = 2.0;
  int64_t scale_window;
  double min_scale;
  int64_t delayed_shift, cur_hysteresis;

  DeepSpeedScaler(double init, int64_t window, double min, int64_t shift)
      : cur_scale(init), scale_window(window), min_scale(min),
        delayed_shift(shift), cur_hysteresis(shift) {}

  bool update_scale(bool overflow) {
    if (overflow) {
      if (delayed_shift == 1 || cur_hysteresis == 1) {
        if (cur_scale == min_scale)
          return false; // raise Exception("Current loss scale already at minimum")
        cur_scale = std::max(cur_scale / scale_factor, min_scale);
      } else {
        cur_hysteresis -= 1;
      }
      last_overflow_iter = cur_iter;
    } else {
      if ((cur_iter - last_overflow_iter) % scale_window == 0) {
        cur_hysteresis = delayed_shift;
        cur_scale *= scale_factor;
      }
    }
    cur_iter += 1;
    return true;
  }
};

} // namespace

TEST(LossScalerTest, DoublesAfterAWindowOfCleanSteps) {
  LossScaler s({16.0, 3, 2, 1.0});
  // Steps 1-3 clean: the third completes the window.
  std::vector<double> used;
  for (int i = 0; i < 7; ++i) {
    used.push_back(s.scale());
    EXPECT_EQ(s.update(false), Outcome::Applied);
  }
  EXPECT_EQ(used, (std::vector<double>{16, 16, 16, 32, 32, 32, 64}));
  EXPECT_EQ(s.state().skipped, 0);
  EXPECT_EQ(s.state().iter, 7);
}

TEST(LossScalerTest, HysteresisThenHalvingDownToTheMinimum) {
  // Derived by hand from update_scale: init 16, window 3, hysteresis 2,
  // min 1. O = overflow, . = clean.
  //   iter:     0  1  2  3  4  5  6  7  8  9 10 11
  //   overflow: O  O  .  .  .  O  .  O  O  O  O  O
  //   scale:   16 16  8  8  8 16 16 16  8  4  2  1   (the one each step used)
  // iter 0 spends the hysteresis; iter 1 halves; iters 2-4 are a clean
  // window since the overflow at 1 (4 - 1 = 3): doubles, refills the
  // hysteresis; iter 5 spends it; iter 6 clean (no window); 7-10 halve;
  // iter 11 overflows at the minimum: DeepSpeed raises.
  LossScaler s({16.0, 3, 2, 1.0});
  const bool overflow[] = {1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1};
  const double scales[] = {16, 16, 8, 8, 8, 16, 16, 16, 8, 4, 2, 1};
  const Outcome outcomes[] = {Outcome::Skipped,   Outcome::Skipped,
                              Outcome::Applied,   Outcome::Applied,
                              Outcome::Applied,   Outcome::Skipped,
                              Outcome::Applied,   Outcome::Skipped,
                              Outcome::Skipped,   Outcome::Skipped,
                              Outcome::Skipped,   Outcome::AtMinimum};
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(s.scale(), scales[i]) << "iter " << i;
    EXPECT_EQ(s.update(overflow[i]), outcomes[i]) << "iter " << i;
  }
  // At the minimum nothing moved: the run stops there.
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.state().iter, 11);
  EXPECT_EQ(s.state().skipped, 7);
}

TEST(LossScalerTest, NeverBelowTheMinimum) {
  // A minimum that is not a power-of-two step of the initial scale: the
  // last halving stops at it (max(scale / 2, min)).
  LossScaler s({16.0, 1000, 1, 3.0});
  const double scales[] = {16, 8, 4};
  for (double want : scales) {
    EXPECT_EQ(s.scale(), want);
    EXPECT_EQ(s.update(true), Outcome::Skipped);
  }
  EXPECT_EQ(s.scale(), 3.0); // max(4 / 2, 3)
  EXPECT_EQ(s.update(true), Outcome::AtMinimum);
}

TEST(LossScalerTest, MatchesDeepSpeedOnRandomOverflowPatterns) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t window = 1 + trial % 7, hysteresis = 1 + trial % 3;
    const double p = 0.05 + 0.4 * ((trial * 37) % 10) / 10.0;
    std::bernoulli_distribution overflowing(p);
    LossScaler ours({65536.0, window, hysteresis, 1.0});
    DeepSpeedScaler theirs(65536.0, window, 1.0, hysteresis);
    for (int iter = 0; iter < 400; ++iter) {
      ASSERT_EQ(ours.scale(), theirs.cur_scale)
          << "trial " << trial << " iter " << iter;
      const bool overflow = overflowing(rng);
      const bool goesOn = theirs.update_scale(overflow);
      const Outcome o = ours.update(overflow);
      ASSERT_EQ(o == Outcome::AtMinimum, !goesOn)
          << "trial " << trial << " iter " << iter;
      if (!goesOn)
        break;
      ASSERT_EQ(o, overflow ? Outcome::Skipped : Outcome::Applied);
      ASSERT_EQ(ours.state().lastOverflowIter, theirs.last_overflow_iter);
      ASSERT_EQ(ours.state().hysteresis, theirs.cur_hysteresis);
    }
  }
}

TEST(LossScalerTest, RestoreContinuesAndRefusesUnreachableStates) {
  LossScaler a({1024.0, 4, 2, 1.0});
  const bool pattern[] = {1, 1, 0, 1, 0, 0, 0, 0, 1, 0};
  for (bool o : pattern)
    a.update(o);
  LossScaler b({1024.0, 4, 2, 1.0});
  ASSERT_TRUE(b.restore(a.state()));
  for (bool o : {false, true, true, false, false, false, false}) {
    EXPECT_EQ(a.update(o), b.update(o));
    EXPECT_EQ(a.scale(), b.scale());
  }
  LossScaler::State bad = a.state();
  bad.scale = 0.5; // below the minimum
  EXPECT_FALSE(b.restore(bad));
  bad = a.state();
  bad.hysteresis = 3; // more than the policy's
  EXPECT_FALSE(b.restore(bad));
  bad = a.state();
  bad.skipped = bad.iter + 1;
  EXPECT_FALSE(b.restore(bad));
  bad = a.state();
  bad.scale = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(b.restore(bad));
}

// --- The entry points ------------------------------------------------------

TEST(LossScaleAbiTest, FoundNonfiniteChecksEveryType) {
  auto ctx = cpuContext();
  const float zero = 0.0f, one = 1.0f;
  float out = -1.0f;
  // Above the cpu backend's parallel threshold, the bad element last.
  const int64_t n = 70000;
  std::vector<float> x(n, 1.5f);
  ztrt_found_nonfinite(ctx.get(), ZTRT_F32, x.data(), n, &zero, &out);
  EXPECT_EQ(out, 0.0f);
  ztrt_found_nonfinite(ctx.get(), ZTRT_F32, x.data(), n, &one, &out);
  EXPECT_EQ(out, 1.0f) << "an earlier overflow carries through";
  for (float bad : {std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    x[n - 1] = bad;
    out = -1.0f;
    ztrt_found_nonfinite(ctx.get(), ZTRT_F32, x.data(), n, &zero, &out);
    EXPECT_EQ(out, 1.0f) << bad;
  }
  // The largest finite values are finite.
  std::vector<f16> h(n, f16(65504.0f));
  std::vector<bf16> b(n, bf16(3.0e38f));
  ztrt_found_nonfinite(ctx.get(), ZTRT_F16, h.data(), n, &zero, &out);
  EXPECT_EQ(out, 0.0f);
  ztrt_found_nonfinite(ctx.get(), ZTRT_BF16, b.data(), n, &zero, &out);
  EXPECT_EQ(out, 0.0f);
  h[12345] = f16(1.0e5f); // beyond f16: inf
  b[54321] = bf16(std::nanf(""));
  ztrt_found_nonfinite(ctx.get(), ZTRT_F16, h.data(), n, &zero, &out);
  EXPECT_EQ(out, 1.0f);
  // In place: found_out may be found_in.
  float flag = 0.0f;
  ztrt_found_nonfinite(ctx.get(), ZTRT_BF16, b.data(), n, &flag, &flag);
  EXPECT_EQ(flag, 1.0f);
}

namespace {

/// One Adam master update of `grad` (f16) under the context's scaler state.
struct AdamMaster {
  std::vector<f16> param;
  std::vector<float> master, m, v;
  explicit AdamMaster(int64_t n)
      : param(n, f16(0.0f)), master(n), m(n, 0.0f), v(n, 0.0f) {
    for (int64_t i = 0; i < n; ++i)
      master[i] = 0.25f * static_cast<float>(i % 17) - 2.0f;
  }
  void step(ztrt_ctx *ctx, const std::vector<f16> &grad) {
    ztrt_adam_update_master(ctx, ZTRT_F16, param.data(), grad.data(),
                            master.data(), m.data(), v.data(),
                            static_cast<int64_t>(grad.size()), 1e-3, 0.9,
                            0.999, 1e-8, 0.01, 1, ZTRT_F16);
  }
};

} // namespace

TEST(LossScaleAbiTest, UpdatesUnscaleSkipAndCountOnlyAppliedSteps) {
  const int64_t n = 1000;
  std::vector<f16> grad(n), scaled(n);
  for (int64_t i = 0; i < n; ++i) {
    grad[i] = f16(0.001f * static_cast<float>(i % 31) - 0.015f);
    // x 256 is exact in f16 for these magnitudes (no overflow, no
    // subnormal change).
    scaled[i] = f16(static_cast<float>(grad[i]) * 256.0f);
  }
  // Reference: no loss scaling, steps 1 and 2 on `grad`.
  auto plain = cpuContext();
  AdamMaster want(n);
  plain->step = 1;
  want.step(plain.get(), grad);
  plain->step = 2;
  want.step(plain.get(), grad);

  // Scaled: step 1 applied at scale 256, step 2 overflows (skipped), step 3
  // applied: Adam's t must be 2 there, as the reference's second step.
  auto ctx = cpuContext();
  ctx->scaler.emplace(LossScalePolicy{256.0, 1000, 1, 1.0});
  AdamMaster got(n);
  const float clean = 0.0f, overflow = 1.0f;
  float seed = 0.0f;
  for (int64_t t = 1; t <= 3; ++t) {
    ctx->step = t;
    ctx->stepScale = ctx->scaler->scale();
    ctx->scaleUpdated = ctx->skipUpdates = false;
    ztrt_loss_scale(ctx.get(), &seed);
    EXPECT_EQ(seed, t == 3 ? 128.0f : 256.0f);
    ztrt_update_loss_scale(ctx.get(), t == 2 ? &overflow : &clean);
    std::vector<f16> g = scaled;
    if (t == 3) // the scale halved: the gradient comes out halved too
      for (f16 &x : g)
        x = f16(static_cast<float>(x) * 0.5f);
    got.step(ctx.get(), g);
    EXPECT_EQ(ctx->skipUpdates, t == 2);
  }
  EXPECT_EQ(ctx->scaler->state().skipped, 1);
  // Bit for bit: unscaling by a power of two is exact.
  EXPECT_EQ(0, std::memcmp(got.master.data(), want.master.data(),
                           n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(got.m.data(), want.m.data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(got.v.data(), want.v.data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(got.param.data(), want.param.data(),
                           n * sizeof(f16)));
}

TEST(LossScaleAbiTest, SgdSeesTheUnscaledGradient) {
  // SGD is linear in the gradient (Adam nearly scale-invariant): a missing
  // or wrong unscale changes every element here.
  const int64_t n = 257;
  std::vector<f16> grad(n), scaled(n);
  for (int64_t i = 0; i < n; ++i) {
    grad[i] = f16(0.01f * static_cast<float>(i % 13) - 0.06f);
    scaled[i] = f16(static_cast<float>(grad[i]) * 1024.0f);
  }
  auto run = [&](ztrt_ctx *ctx, const std::vector<f16> &g) {
    std::vector<float> master(n, 0.5f), buf(n, 0.0f);
    std::vector<f16> param(n);
    ctx->step = 1;
    ztrt_sgd_update_master(ctx, ZTRT_F16, param.data(), g.data(),
                           master.data(), buf.data(), n, 0.1, 0.9, 0.0, 0.0,
                           0, ZTRT_F16);
    return master;
  };
  auto plain = cpuContext();
  std::vector<float> want = run(plain.get(), grad);
  auto ctx = cpuContext();
  ctx->scaler.emplace(LossScalePolicy{1024.0, 1000, 2, 1.0});
  ctx->step = 1;
  ctx->stepScale = 1024.0;
  const float clean = 0.0f;
  ztrt_update_loss_scale(ctx.get(), &clean);
  std::vector<float> got = run(ctx.get(), scaled);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), n * sizeof(float)));
  EXPECT_NE(want[0], 0.5f);
}

TEST(LossScaleAbiTest, RefusesMisuse) {
  auto ctx = cpuContext();
  float flag = 0.0f, out = 0.0f;
  ctx->step = 1;
  EXPECT_EXIT(ztrt_loss_scale(ctx.get(), &out), ::testing::ExitedWithCode(1),
              "loss_scale: the model's descriptor has no loss_scale record");
  EXPECT_EXIT(ztrt_update_loss_scale(ctx.get(), &flag),
              ::testing::ExitedWithCode(1),
              "update_loss_scale: the model's descriptor has no loss_scale");
  ctx->scaler.emplace(LossScalePolicy{4.0, 10, 1, 4.0});
  ctx->stepScale = 4.0;
  std::vector<f16> p(2), g(2);
  std::vector<float> master(2), m(2), v(2);
  EXPECT_EXIT(ztrt_adam_update_master(ctx.get(), ZTRT_F16, p.data(), g.data(),
                                      master.data(), m.data(), v.data(), 2,
                                      1e-3, 0.9, 0.999, 1e-8, 0, 0, ZTRT_F16),
              ::testing::ExitedWithCode(1),
              "adam_update_master: step 1 updates before "
              "ztrt_update_loss_scale");
  std::vector<float> pf(2), gf(2), mf(2), vf(2);
  EXPECT_EXIT(ztrt_adam_update(ctx.get(), ZTRT_F32, pf.data(), gf.data(),
                               mf.data(), vf.data(), 2, 1e-3, 0.9, 0.999, 1e-8,
                               0, 0),
              ::testing::ExitedWithCode(1),
              "adam_update: the model scales its loss");
  // An overflow at the minimum scale (4) ends the run, naming the step.
  const float overflow = 1.0f;
  EXPECT_EXIT(ztrt_update_loss_scale(ctx.get(), &overflow),
              ::testing::ExitedWithCode(1),
              "step 1: the gradients overflow at the minimum loss scale 4");
  ztrt_update_loss_scale(ctx.get(), &flag);
  EXPECT_EXIT(ztrt_update_loss_scale(ctx.get(), &flag),
              ::testing::ExitedWithCode(1),
              "update_loss_scale: called twice in step 1");
}

// --- Gradient clipping -----------------------------------------------------
//
// ztrt_grad_sq_norm: the squares summed in double and rounded once, the
// same bits for any thread count (fixed chunks summed in order); checked
// against a double sum of the same values, whose rounding to f32 it must
// equal exactly (both sums are exact in double here: the inputs have few
// significant bits). ztrt_clip_grad_norm: torch.nn.utils.clip_grad_norm_'s
// coefficient, in float.

TEST(GradClipAbiTest, SumOfSquaresIsExactAndThreadIndependent) {
  auto ctx = cpuContext();
  const int64_t n = 100003; // several chunks, above the parallel threshold
  std::vector<f16> x(n);
  double want = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = f16(0.125f * static_cast<float>(i % 17) - 1.0f);
    const double v = static_cast<float>(x[i]);
    want += v * v;
  }
  const float in = 2.0f;
  float out1 = 0.0f, out2 = 0.0f;
  ctx->backend().setThreads(1);
  ztrt_grad_sq_norm(ctx.get(), ZTRT_F16, x.data(), n, &in, &out1);
  ctx->backend().setThreads(2);
  ztrt_grad_sq_norm(ctx.get(), ZTRT_F16, x.data(), n, &in, &out2);
  EXPECT_EQ(out1, static_cast<float>(want + 2.0));
  EXPECT_EQ(0, std::memcmp(&out1, &out2, sizeof(float)));
  // In place, and an infinity carries through.
  x[7] = f16(std::numeric_limits<float>::infinity());
  float acc = 1.0f;
  ztrt_grad_sq_norm(ctx.get(), ZTRT_F16, x.data(), n, &acc, &acc);
  EXPECT_TRUE(std::isinf(acc));
}

TEST(GradClipAbiTest, CoefficientIsTorchs) {
  auto ctx = cpuContext();
  ctx->clipMaxNorm = 0.5;
  const int64_t n = 4;
  // norm 2 > 0.5: coefficient 0.5 / (2 + 1e-6) in float.
  std::vector<float> g{1.0f, 1.0f, 1.0f, 1.0f}, p(n, 0.0f), ref(n, 0.0f);
  float sum = 0.0f;
  const float zero = 0.0f;
  ctx->step = 1;
  ztrt_grad_sq_norm(ctx.get(), ZTRT_F32, g.data(), n, &zero, &sum);
  ztrt_clip_grad_norm(ctx.get(), &sum, 0.5);
  EXPECT_EQ(ctx->gradNorm, 2.0);
  const float coef = 0.5f / (2.0f + 1e-6f);
  EXPECT_EQ(ctx->clipCoef, static_cast<double>(coef));
  ztrt_sgd_update(ctx.get(), ZTRT_F32, p.data(), g.data(), nullptr, n, 1.0, 0,
                  0, 0, 0);
  for (float v : p)
    EXPECT_EQ(v, -coef); // p - lr * (g * coef)
  // Within the norm: the gradients are untouched.
  auto ctx2 = cpuContext();
  ctx2->clipMaxNorm = 5.0;
  ctx2->step = 1;
  ztrt_clip_grad_norm(ctx2.get(), &sum, 5.0);
  EXPECT_EQ(ctx2->clipCoef, 1.0);
  // Misuse: an update before the norm, the norm twice, no record.
  auto ctx3 = cpuContext();
  ctx3->clipMaxNorm = 1.0;
  ctx3->step = 1;
  EXPECT_EXIT(ztrt_sgd_update(ctx3.get(), ZTRT_F32, p.data(), g.data(),
                              nullptr, n, 1.0, 0, 0, 0, 0),
              ::testing::ExitedWithCode(1),
              "sgd_update: step 1 updates before ztrt_clip_grad_norm");
  ztrt_clip_grad_norm(ctx3.get(), &sum, 1.0);
  EXPECT_EXIT(ztrt_clip_grad_norm(ctx3.get(), &sum, 1.0),
              ::testing::ExitedWithCode(1), "called twice in step 1");
  auto ctx4 = cpuContext();
  EXPECT_EXIT(ztrt_clip_grad_norm(ctx4.get(), &sum, 1.0),
              ::testing::ExitedWithCode(1), "no clip_grad_norm record");
}

// --- Gradient accumulation (ztrt_accumulate_grad, _boundary) --------------

TEST(GradAccumAbiTest, FirstMicroBatchOverwritesTheOthersAdd) {
  auto ctx = cpuContext();
  ctx->accumSteps = 3;
  ctx->step = 1;
  std::vector<float> acc{99.0f, 99.0f}, x{1.5f, -2.0f};
  for (int64_t m = 1; m <= 3; ++m) {
    ctx->microStep = m;
    ctx->boundaryAsked = false;
    ztrt_accumulate_grad(ctx.get(), ZTRT_F32, acc.data(), x.data(), 2);
    // The stale 99 never enters: m copies of x, exactly.
    EXPECT_EQ(acc[0], 1.5f * static_cast<float>(m));
    EXPECT_EQ(acc[1], -2.0f * static_cast<float>(m));
    EXPECT_EQ(ztrt_accumulation_boundary(ctx.get()), m == 3 ? 1 : 0);
  }
  // The updates take the mean: SGD with lr 1 moves by the sum x 1/K (the
  // factor in float, as the kernel applies every gradient factor).
  float p = 0.0f;
  ztrt_sgd_update(ctx.get(), ZTRT_F32, &p, acc.data(), nullptr, 1, 1.0, 0, 0,
                  0, 0);
  EXPECT_EQ(p, -(4.5f * static_cast<float>(1.0 / 3.0)));
}

TEST(GradAccumAbiTest, Bf16SumRoundsEveryAdd) {
  // bf16 keeps 8 significant bits: from 256 on, adding 1 is a tie that
  // rounds to even and the sum stalls (why --reduce-dtype=fp32 exists).
  auto ctx = cpuContext();
  ctx->accumSteps = 512;
  ctx->step = 1;
  bf16 acc(0.0f);
  const bf16 one(1.0f);
  for (int64_t m = 1; m <= 512; ++m) {
    ctx->microStep = m;
    ctx->boundaryAsked = false;
    ztrt_accumulate_grad(ctx.get(), ZTRT_BF16, &acc, &one, 1);
  }
  EXPECT_EQ(static_cast<float>(acc), 256.0f);
}

TEST(GradAccumAbiTest, MisuseIsFatal) {
  std::vector<float> acc(2), x(2, 1.0f);
  auto none = cpuContext();
  none->step = 1;
  EXPECT_EXIT(ztrt_accumulate_grad(none.get(), ZTRT_F32, acc.data(), x.data(),
                                   2),
              ::testing::ExitedWithCode(1), "no grad_accum record");
  EXPECT_EXIT(ztrt_accumulation_boundary(none.get()),
              ::testing::ExitedWithCode(1), "no grad_accum record");
  auto ctx = cpuContext();
  ctx->accumSteps = 2;
  ctx->step = 1;
  float p = 0.0f;
  EXPECT_EXIT(ztrt_sgd_update(ctx.get(), ZTRT_F32, &p, x.data(), nullptr, 1,
                              1.0, 0, 0, 0, 0),
              ::testing::ExitedWithCode(1),
              "updates before ztrt_accumulation_boundary");
  ztrt_accumulation_boundary(ctx.get());
  EXPECT_EXIT(ztrt_accumulation_boundary(ctx.get()),
              ::testing::ExitedWithCode(1), "called twice");
  EXPECT_EXIT(ztrt_accumulate_grad(ctx.get(), ZTRT_F32, acc.data(), x.data(),
                                   2),
              ::testing::ExitedWithCode(1), "accumulates after");
}

TEST(GradAccumAbiTest, ClippingSeesTheMeanGradient) {
  auto ctx = cpuContext();
  ctx->accumSteps = 4;
  ctx->clipMaxNorm = 1.0;
  ctx->step = 1;
  ctx->microStep = 4;
  ztrt_accumulation_boundary(ctx.get());
  // A sum of 4 micro-batch gradients with norm 8: the mean's norm is 2.
  const float sum = 64.0f;
  ztrt_clip_grad_norm(ctx.get(), &sum, 1.0);
  EXPECT_EQ(ctx->gradNorm, 2.0);
}

// --- Learning-rate schedules (step/LrSchedule.h) ----------------------------
// Hand-computed points of each schedule; exact where the arithmetic is
// (powers of two, cos(pi/2) = 6e-17 aside: 1e-15 relative there).

TEST(LrScheduleTest, WarmupThenDecayToTheFloor) {
  LrSchedule s;
  EXPECT_EQ(s.at(0.5, 1), 0.5); // constant, the compiled rate
  s.lr = 0.25;
  EXPECT_EQ(s.at(0.5, 7), 0.25); // --lr replaces it
  s.warmup = 4;
  EXPECT_EQ(s.at(0.5, 1), 0.0625); // 0.25 * 1/4
  EXPECT_EQ(s.at(0.5, 4), 0.25);
  EXPECT_EQ(s.at(0.5, 5), 0.25);
  s.kind = LrSchedule::Kind::Cosine;
  s.minLr = 0.05;
  s.decaySteps = 12; // decay over steps 5..12 (p = (t - 4) / 8)
  EXPECT_EQ(s.at(0.5, 4), 0.25);                      // p = 0 after warmup
  EXPECT_NEAR(s.at(0.5, 8), 0.15, 0.15 * 1e-15);      // p = 1/2: midpoint
  EXPECT_EQ(s.at(0.5, 12), 0.05);                     // p = 1: the floor
  EXPECT_EQ(s.at(0.5, 40), 0.05);                     // and it stays
  s.kind = LrSchedule::Kind::Linear;
  EXPECT_EQ(s.at(0.5, 6), 0.05 + 0.2 * 0.75);         // p = 1/4
  LrSchedule::Kind k;
  EXPECT_TRUE(LrSchedule::parseKind("cosine", k));
  EXPECT_EQ(k, LrSchedule::Kind::Cosine);
  EXPECT_FALSE(LrSchedule::parseKind("Cosine", k));
}
