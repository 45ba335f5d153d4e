//===- CudaMixedPrecisionConformanceTest.cpp - Cuda: mixed precision ------===//
//
// Part of ztrain's runtime tests: the cuda conformance suite
// (CudaConformanceTest.cpp's file comment) for mixed precision: ztrt_cast,
// the master-weight updates, loss scaling, the gradients' norm and
// gradient accumulation, bitwise the cpu's.
//
//===----------------------------------------------------------------------===//

#include "CudaConformance.h"

using namespace ztrt;
using namespace ztrt::test;

namespace {

// --- Mixed precision: ztrt_cast and the master-weight updates -------------
//
// Against the cpu backend on the same inputs (the cpu's own results are
// checked against base/DType.h and the f32 updates in DTypeKernelTest and
// OptimizerTest). Tolerance: none, bit equality, NaNs included.

const DType kAllTypes[] = {DType::F32, DType::BF16, DType::F16};

int32_t codeOf(DType type) { return static_cast<int32_t>(type); }

template <typename T> uint32_t rawBits(const T &v) {
  if constexpr (std::is_same_v<T, float>)
    return bits(v);
  else
    return v.bits;
}

template <typename T>
void expectSameBits(const std::vector<T> &got, const std::vector<T> &want,
                    const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (rawBits(got[i]) != rawBits(want[i])) {
      ADD_FAILURE() << what << "[" << i << "]: cuda 0x" << std::hex
                    << rawBits(got[i]) << ", cpu 0x" << rawBits(want[i])
                    << std::dec;
      ++bad;
    }
}

/// The sources of a cast from T: every bit pattern of a 16-bit type; for
/// f32, inputs() with its special values (NaN, +-inf, an f32 subnormal,
/// -FLT_MAX) plus ties and subnormals of the 16-bit types, values around
/// f16's overflow boundary, and NaNs with payloads.
template <typename T> std::vector<T> castSources() {
  if constexpr (std::is_same_v<T, float>) {
    std::vector<float> v = inputs(size_t(1) << 16, 170, 8.0f, true);
    const uint32_t patterns[] = {0x3f808000u, 0x3f818000u, 0x3f801000u,
                                 0x3f803000u, 0x33800000u, 0x33000000u,
                                 0x33c00000u, 0x477fefffu, 0x477ff000u,
                                 0xc77ff000u, 0x7f7f8000u, 0x7fc12345u,
                                 0xff800001u, 0x7fa00000u, 0x00000001u};
    for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); ++i)
      std::memcpy(&v[17 + 3 * i], &patterns[i], sizeof(float));
    return v;
  } else {
    std::vector<T> all(65536);
    for (uint32_t b = 0; b < 65536; ++b)
      all[b] = T::fromBits(static_cast<uint16_t>(b));
    return all;
  }
}

TEST_F(CudaConformanceTest, CastIsBitwiseTheCpus) {
  // Both backends convert each element with base/DType.h's code (ZTRT_HD:
  // the same integer and float operations on the device, without FTZ), one
  // rounding per element, and copy when the types are equal: bitwise, NaN
  // bits included (the conversions make them; no arithmetic does).
  for (DType from : kAllTypes)
    for (DType to : kAllTypes)
      dispatch(from, [&](auto fromTag) {
        using F = decltype(fromTag);
        dispatch(to, [&](auto toTag) {
          using U = decltype(toTag);
          auto x = twin(castSources<F>());
          auto out = twin(std::vector<U>(x.host.size(), U(NAN)));
          const int64_t n = static_cast<int64_t>(x.host.size());
          both([&](ztrt_ctx *c, bool d) {
            ztrt_cast(c, codeOf(from), at(x, d), at(out, d), n, codeOf(to));
          });
          expectSameBits(fetch(out), out.host,
                         std::string("cast ") + dtypeName(from) + " to " +
                             dtypeName(to));
        });
      });
  // The same type in place and overlapping (memmove semantics; the cuda
  // copy goes through scratch).
  auto x = twin(castSources<float>());
  const int64_t n = static_cast<int64_t>(x.host.size());
  both([&](ztrt_ctx *c, bool d) {
    ztrt_cast(c, ZTRT_F32, at(x, d), at(x, d), n, ZTRT_F32);
    ztrt_cast(c, ZTRT_F32, at(x, d),
              static_cast<float *>(at(x, d)) + 1, n - 1, ZTRT_F32);
  });
  expectSameBits(fetch(x), x.host, "cast f32 to f32, overlapping");
}

TEST_F(CudaConformanceTest, MasterWeightUpdatesAreBitwiseTheCpus) {
  // The float kernels' per-element expressions (bitwise the cpu's, see
  // OptimizerUpdatesAreBitwise) on the float master and states, the
  // gradient widened exactly, the parameter rounded once with DType.h's
  // conversion: bitwise, over three steps, every gradient and parameter
  // type. Masters include values beyond f16's range and f16 subnormals.
  const int64_t n = 4099;
  std::vector<float> masters = inputs(n, 171, 2.0f);
  masters[0] = 1e5f;
  masters[1] = -7e4f;
  masters[2] = 3e-6f;
  struct Sgd {
    double lr, momentum, dampening, decay;
    int nesterov;
  };
  for (DType gradType : kAllTypes)
    for (DType paramType : kAllTypes)
      dispatch(gradType, [&](auto gradTag) {
        using G = decltype(gradTag);
        dispatch(paramType, [&](auto paramTag) {
          using P = decltype(paramTag);
          const std::string types = std::string(" grad ") +
                                    dtypeName(gradType) + " param " +
                                    dtypeName(paramType);
          auto gradients = [&](int64_t t) {
            std::vector<float> v = inputs(n, 180 + static_cast<uint32_t>(t));
            std::vector<G> out(n);
            for (int64_t i = 0; i < n; ++i)
              out[i] = static_cast<G>(v[i] * 0.5f);
            return out;
          };
          for (Sgd h : {Sgd{0.1, 0.0, 0.0, 0.0, 0},
                        Sgd{0.05, 0.9, 0.0, 1e-2, 0},
                        Sgd{0.05, 0.9, 0.1, 0.0, 0},
                        Sgd{0.01, 0.9, 0.0, 1e-3, 1}}) {
            auto master = twin(masters),
                 buf = twin(std::vector<float>(n, 0.0f));
            auto param = twin(std::vector<P>(n, P(NAN)));
            for (int64_t t = 1; t <= 3; ++t) {
              auto grad = twin(gradients(t));
              c()->step = g()->step = t;
              both([&](ztrt_ctx *x, bool d) {
                ztrt_sgd_update_master(
                    x, codeOf(gradType), at(param, d), at(grad, d),
                    at(master, d), h.momentum != 0.0 ? at(buf, d) : nullptr,
                    n, h.lr, h.momentum, h.dampening, h.decay, h.nesterov,
                    codeOf(paramType));
              });
            }
            expectSameBits(fetch(master), master.host, "sgd master" + types);
            expectSameBits(fetch(buf), buf.host, "sgd momentum" + types);
            expectSameBits(fetch(param), param.host, "sgd param" + types);
          }
          for (int decoupled : {0, 1})
            for (double decay : {0.0, 0.1}) {
              auto master = twin(masters), m = twin(std::vector<float>(n, 0.0f)),
                   v = twin(std::vector<float>(n, 0.0f));
              auto param = twin(std::vector<P>(n, P(NAN)));
              for (int64_t t = 1; t <= 3; ++t) {
                auto grad = twin(gradients(t));
                c()->step = g()->step = t;
                both([&](ztrt_ctx *x, bool d) {
                  ztrt_adam_update_master(x, codeOf(gradType), at(param, d),
                                          at(grad, d), at(master, d), at(m, d),
                                          at(v, d), n, 1e-3, 0.9, 0.999, 1e-8,
                                          decay, decoupled, codeOf(paramType));
                });
              }
              expectSameBits(fetch(master), master.host,
                             "adam master" + types);
              expectSameBits(fetch(m), m.host, "adam exp_avg" + types);
              expectSameBits(fetch(v), v.host, "adam exp_avg_sq" + types);
              expectSameBits(fetch(param), param.host, "adam param" + types);
            }
        });
      });
}

// Dynamic loss scaling on the device: the overflow flag (found_nonfinite:
// carried through, set by any NaN or infinity of any type, in place), and
// the master updates with the unscale and skip of a loss-scaled step, read
// by ztrt_update_loss_scale from device memory. Tolerance: none (the flag is
// 0 or 1; the updates are the cpu's per-element float expressions).
TEST_F(CudaConformanceTest, LossScalingIsTheCpus) {
  const int64_t n = 70001;
  for (DType type : kAllTypes)
    dispatch(type, [&](auto tag) {
      using T = decltype(tag);
      std::vector<T> values(n);
      std::vector<float> v = inputs(n, 190);
      for (int64_t i = 0; i < n; ++i)
        values[i] = static_cast<T>(v[i]);
      for (float bad : {0.0f, INFINITY, -INFINITY, NAN})
        for (float earlier : {0.0f, 1.0f}) {
          std::vector<T> x = values;
          if (bad != 0.0f)
            x[n - 3] = static_cast<T>(bad);
          auto xs = twin(x);
          auto in = twin(std::vector<float>{earlier});
          auto out = output(1);
          both([&](ztrt_ctx *ctx, bool d) {
            ztrt_found_nonfinite(ctx, codeOf(type), at(xs, d), n, at(in, d),
                                 at(out, d));
          });
          const float want = (bad != 0.0f || earlier != 0.0f) ? 1.0f : 0.0f;
          EXPECT_EQ(out.host[0], want) << dtypeName(type);
          EXPECT_EQ(fetch(out)[0], want) << dtypeName(type) << " bad " << bad
                                         << " earlier " << earlier;
          // In place.
          both([&](ztrt_ctx *ctx, bool d) {
            ztrt_found_nonfinite(ctx, codeOf(type), at(xs, d), n, at(in, d),
                                 at(in, d));
          });
          EXPECT_EQ(fetch(in)[0], want);
        }
    });

  // Three steps at scale 1024 with hysteresis 1: clean, overflow
  // (skipped), clean at 512. f16 gradients, f16 parameters.
  const int64_t m = 4099;
  std::vector<float> masters = inputs(m, 191, 2.0f);
  auto master = twin(masters), mom = twin(std::vector<float>(m, 0.0f)),
       var = twin(std::vector<float>(m, 0.0f));
  auto param = twin(std::vector<f16>(m, f16(NAN)));
  for (ztrt_ctx *x : {c(), g()})
    x->scaler.emplace(LossScalePolicy{1024.0, 1000, 1, 1.0});
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<float> gv = inputs(m, 200 + static_cast<uint32_t>(t));
    std::vector<f16> gh(m);
    for (int64_t i = 0; i < m; ++i)
      gh[i] = f16(gv[i] * 8.0f);
    auto grad = twin(gh);
    auto flag = twin(std::vector<float>{t == 2 ? 1.0f : 0.0f});
    both([&](ztrt_ctx *x, bool d) {
      x->step = t;
      x->stepScale = x->scaler->scale();
      x->scaleUpdated = x->skipUpdates = false;
      ztrt_update_loss_scale(x, at(flag, d));
      ztrt_adam_update_master(x, ZTRT_F16, at(param, d), at(grad, d),
                              at(master, d), at(mom, d), at(var, d), m, 1e-3,
                              0.9, 0.999, 1e-8, 0.01, 1, ZTRT_F16);
    });
    EXPECT_EQ(g()->skipUpdates, t == 2);
  }
  EXPECT_EQ(g()->scaler->scale(), 512.0);
  expectSameBits(fetch(master), master.host, "loss-scaled adam master");
  expectSameBits(fetch(mom), mom.host, "loss-scaled adam exp_avg");
  expectSameBits(fetch(var), var.host, "loss-scaled adam exp_avg_sq");
  expectSameBits(fetch(param), param.host, "loss-scaled adam param");
}

// The sum of squares of clipping: double accumulation on both sides, in
// another order (one block of threads vs fixed chunks), so equal up to the
// rounding of the f32 result: one f32 ulp (2^-23 relative).
TEST_F(CudaConformanceTest, GradSqNormIsTheCpusUpToOrder) {
  const int64_t n = 100003;
  for (DType type : kAllTypes)
    dispatch(type, [&](auto tag) {
      using T = decltype(tag);
      std::vector<float> v = inputs(n, 192);
      std::vector<T> x(n);
      for (int64_t i = 0; i < n; ++i)
        x[i] = static_cast<T>(v[i]);
      auto xs = twin(x);
      auto in = twin(std::vector<float>{0.5f});
      auto out = output(1);
      both([&](ztrt_ctx *ctx, bool d) {
        ztrt_grad_sq_norm(ctx, codeOf(type), at(xs, d), n, at(in, d),
                          at(out, d));
      });
      const float got = fetch(out)[0], want = out.host[0];
      EXPECT_LE(std::fabs(got - want), std::fabs(want) * 0x1p-23)
          << dtypeName(type);
    });
}

// Gradient accumulation: a copy, then in-place adds (one float add per
// element, rounded once): bitwise the cpu's, 16-bit sums included.
TEST_F(CudaConformanceTest, AccumulateGradIsBitwiseTheCpus) {
  const int64_t n = (1 << 16) + 5;
  for (DType type : kAllTypes)
    dispatch(type, [&](auto tag) {
      using T = decltype(tag);
      auto acc = twin(std::vector<T>(n, static_cast<T>(7.0f)));
      std::vector<Twin<T>> micro;
      for (int m = 0; m < 3; ++m) {
        std::vector<float> v = inputs(n, 300 + m);
        std::vector<T> x(n);
        for (int64_t i = 0; i < n; ++i)
          x[i] = static_cast<T>(v[i]);
        micro.push_back(twin(x));
      }
      both([&](ztrt_ctx *ctx, bool d) {
        ctx->accumSteps = 3;
        ctx->step = 1;
        for (int m = 1; m <= 3; ++m) {
          ctx->microStep = m;
          ctx->boundaryAsked = false;
          ztrt_accumulate_grad(ctx, codeOf(type), at(acc, d),
                               at(micro[m - 1], d), n);
        }
      });
      std::vector<T> got = fetch(acc);
      EXPECT_EQ(0, std::memcmp(got.data(), acc.host.data(), n * sizeof(T)))
          << dtypeName(type);
    });
}

} // namespace
