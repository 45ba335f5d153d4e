//===- IsaKernelTest.cpp - Instruction-set variants and generated kernels ===//
//
// The cpu backend's AVX-512 copies of its kernels against the baseline
// build, bit for bit (ZTRT_CPU_ISA chooses), and the entry point that runs
// kernels the compiler generated (ztrt_fused, CpuBackend::runFused): its
// chunking, its ISA choice, its trace and its argument checks. Split from
// KernelTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "backends/cpu/IsaKernels.h"
#include "base/DType.h"
#include "ztrt.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <utility>

using namespace ztrt;
using namespace ztrt::test;

namespace {

bool sameBits(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

std::vector<float> isaTestValues(size_t n, uint32_t seed) {
  const float special[] = {0.0f,   -0.0f,  1.0f,     -1.0f,     0.625f, -0.625f,
                           87.0f,  -87.0f, -87.5f,   -104.0f,   1e-40f, -1e-40f,
                           3e38f,  -3e38f, INFINITY, -INFINITY, NAN,    20.0f,
                           -20.0f, 9.0f,   -9.0f,    1e-7f};
  std::vector<float> v(n);
  uint32_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    // Mostly |x| < 16, every 50th a special value.
    v[i] = i % 50 == 0
               ? special[(i / 50) % (sizeof(special) / 4)]
               : (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * 32.0f;
  }
  return v;
}

class ScopedIsa {
public:
  explicit ScopedIsa(const char *isa) {
    const char *old = std::getenv("ZTRT_CPU_ISA");
    had = old != nullptr;
    if (had)
      saved = old;
    if (isa)
      setenv("ZTRT_CPU_ISA", isa, 1);
    else
      unsetenv("ZTRT_CPU_ISA");
  }
  ~ScopedIsa() {
    if (had)
      setenv("ZTRT_CPU_ISA", saved.c_str(), 1);
    else
      unsetenv("ZTRT_CPU_ISA");
  }

private:
  bool had = false;
  std::string saved;
};

} // namespace

TEST(IsaKernelTest, IsaKernelsAreBitwiseTheBaseline) {
  std::unique_ptr<Backend> wide, base;
  {
    ScopedIsa isa(nullptr);
    wide = createCpuBackend();
  }
  {
    ScopedIsa isa("baseline");
    base = createCpuBackend();
  }
  if (wide->deviceName().find("AVX-512 kernels") == std::string::npos)
    GTEST_SKIP() << "no AVX-512 kernels here: " << wide->deviceName();
  ASSERT_EQ(base->deviceName().find("AVX-512"), std::string::npos);
  const size_t n = 40013; // above the parallel threshold, odd tail
  const std::vector<float> x = isaTestValues(n, 1), y = isaTestValues(n, 2);
  std::vector<float> a(n), b(n);
  auto expectSame = [&](const char *what) {
    for (size_t i = 0; i < n; ++i)
      if (!sameBits(a[i], b[i])) {
        ADD_FAILURE() << what << "[" << i << "] of x=" << x[i] << ", y=" << y[i]
                      << ": " << a[i] << " (AVX-512) vs " << b[i]
                      << " (baseline)";
        return;
      }
  };
#define ZTRT_UNARY(method, Name, expr)                                         \
  wide->method(DType::F32, x.data(), a.data(), n);                             \
  base->method(DType::F32, x.data(), b.data(), n);                             \
  expectSame(#method);
#define ZTRT_BINARY(method, Name, expr)                                        \
  wide->method(DType::F32, x.data(), y.data(), a.data(), n);                   \
  base->method(DType::F32, x.data(), y.data(), b.data(), n);                   \
  expectSame(#method);
#include "backends/Elementwise.def"
  wide->scale(DType::F32, x.data(), a.data(), n, 0.17677669529663687);
  base->scale(DType::F32, x.data(), b.data(), n, 0.17677669529663687);
  expectSame("scale");

  // Softmax rows of every tail length against the 8 lanes and 16-wide
  // vectors, plain and causal, finite inputs (attention scores).
  for (int64_t cols : {1, 7, 8, 13, 16, 64, 100, 256}) {
    const int64_t rows = static_cast<int64_t>(n) / cols;
    const size_t m = static_cast<size_t>(rows * cols);
    std::vector<float> s(m), g(m);
    for (size_t i = 0; i < m; ++i) {
      s[i] = std::isfinite(x[i]) ? x[i] : 1.0f;
      g[i] = std::isfinite(y[i]) ? y[i] : -1.0f;
    }
    for (int32_t causal : {0, 1}) {
      wide->softmax(DType::F32, s.data(), a.data(), rows, cols, causal);
      base->softmax(DType::F32, s.data(), b.data(), rows, cols, causal);
      std::fill(a.begin() + m, a.end(), 0.0f);
      std::fill(b.begin() + m, b.end(), 0.0f);
      expectSame(causal ? "causal softmax" : "softmax");
    }
    std::vector<float> p(a.begin(), a.begin() + m);
    wide->softmaxGrad(DType::F32, g.data(), p.data(), a.data(), rows, cols);
    base->softmaxGrad(DType::F32, g.data(), p.data(), b.data(), rows, cols);
    expectSame("softmax_grad");
  }

  // Optimizer updates: parameter, gradient and states from the same value
  // set (second moments made non-negative, as they are in training), each
  // variant at the first step and a later one (bias corrections, SGD's
  // first-step momentum), in place on copies of the same inputs.
  std::vector<float> v2 = isaTestValues(n, 3);
  for (float &e : v2)
    e = std::fabs(e);
  struct Copies {
    std::vector<float> p, m, v;
  };
  auto compareAll = [&](const char *what, const Copies &w, const Copies &bb) {
    a = w.p, b = bb.p;
    expectSame(what);
    a = w.m, b = bb.m;
    expectSame(what);
    a = w.v, b = bb.v;
    expectSame(what);
  };
  for (int64_t step : {1, 7}) {
    for (bool decoupled : {false, true})
      for (double decay : {0.0, 0.01})
        for (double gradScale : {1.0, 1.0 / 1024}) {
          AdamHyper h{1e-3, 0.9, 0.999, 1e-8, decay, decoupled, gradScale};
          Copies w{x, y, v2}, bb{x, y, v2};
          wide->adamUpdate(DType::F32, w.p.data(), y.data(), w.m.data(),
                           w.v.data(), n, h, step);
          base->adamUpdate(DType::F32, bb.p.data(), y.data(), bb.m.data(),
                           bb.v.data(), n, h, step);
          compareAll(decoupled ? "adamw" : "adam", w, bb);
        }
    for (double momentum : {0.0, 0.9})
      for (bool nesterov : {false, true}) {
        SgdHyper h{0.05, momentum, 0.1, 0.01, nesterov, 0.5};
        Copies w{x, y, {}}, bb{x, y, {}};
        wide->sgdUpdate(DType::F32, w.p.data(), v2.data(), w.m.data(), n, h,
                        step);
        base->sgdUpdate(DType::F32, bb.p.data(), v2.data(), bb.m.data(), n, h,
                        step);
        a = w.p, b = bb.p;
        expectSame("sgd");
        a = w.m, b = bb.m;
        expectSame("sgd momentum");
      }
  }

  // The master-weight forms of bf16 parameters (mixed precision): the f32
  // master and states, a bf16 or f32 gradient, the bf16 parameter written
  // rounded; all of them bitwise (the parameters as raw bits).
  std::vector<bf16> gradBf16(n);
  for (size_t i = 0; i < n; ++i)
    gradBf16[i] = bf16(y[i]);
  // NaN stays NaN (its payload is the hardware's), all else bit for bit.
  auto sameParams = [&](const char *what, const std::vector<bf16> &p,
                        const std::vector<bf16> &q) {
    for (size_t i = 0; i < n; ++i)
      if (!sameBits(static_cast<float>(p[i]), static_cast<float>(q[i]))) {
        ADD_FAILURE() << what << ": bf16 parameter [" << i << "] "
                      << static_cast<float>(p[i]) << " (AVX-512) vs "
                      << static_cast<float>(q[i]) << " (baseline)";
        return;
      }
  };
  for (DType gradType : {DType::BF16, DType::F32}) {
    const void *grad = gradType == DType::BF16
                           ? static_cast<const void *>(gradBf16.data())
                           : static_cast<const void *>(y.data());
    for (int64_t step : {1, 7}) {
      AdamHyper h{1e-3, 0.9, 0.999, 1e-8, 0.01, true, 1.0 / 256};
      Copies w{x, x, v2}, bb{x, x, v2};
      std::vector<bf16> pw(n), pb(n);
      wide->adamUpdateMaster(gradType, DType::BF16, pw.data(), grad, w.p.data(),
                             w.m.data(), w.v.data(), n, h, step);
      base->adamUpdateMaster(gradType, DType::BF16, pb.data(), grad,
                             bb.p.data(), bb.m.data(), bb.v.data(), n, h, step);
      compareAll("adamw master", w, bb);
      sameParams("adamw master", pw, pb);
      SgdHyper sh{0.05, 0.9, 0.1, 0.01, false, 1.0};
      Copies sw{x, x, {}}, sb{x, x, {}};
      wide->sgdUpdateMaster(gradType, DType::BF16, pw.data(), grad, sw.p.data(),
                            sw.m.data(), n, sh, step);
      base->sgdUpdateMaster(gradType, DType::BF16, pb.data(), grad, sb.p.data(),
                            sb.m.data(), n, sh, step);
      a = sw.p, b = sb.p;
      expectSame("sgd master");
      a = sw.m, b = sb.m;
      expectSame("sgd master momentum");
      sameParams("sgd master", pw, pb);
    }
  }
}

// The kernels ztrain-compile --fuse=elementwise generates run through
// ztrt_fused and Backend::runFused. These stand-ins record what they were
// asked to compute, or compute a region the unfused kernels compute too.
namespace {

/// What countItems saw: how often each item was computed, and every call's
/// [begin, end).
struct FusedCalls {
  explicit FusedCalls(int64_t items) : counts(static_cast<size_t>(items)) {}
  std::vector<std::atomic<int>> counts;
  std::mutex mutex;
  std::vector<std::pair<int64_t, int64_t>> calls;
};

/// args[0] is a FusedCalls. Atomic counts: an item given to two threads at
/// once is counted twice, not lost in a race.
void countItems(void *const *args, int64_t begin, int64_t end) {
  auto *seen = static_cast<FusedCalls *>(args[0]);
  for (int64_t i = begin; i < end; ++i)
    seen->counts[static_cast<size_t>(i)].fetch_add(1);
  std::lock_guard<std::mutex> lock(seen->mutex);
  seen->calls.emplace_back(begin, end);
}

/// args[0] is an int: which build of a kernel ran.
void markBaseline(void *const *args, int64_t, int64_t) {
  *static_cast<int *>(args[0]) = 1;
}
void markWide(void *const *args, int64_t, int64_t) {
  *static_cast<int *>(args[0]) = 2;
}

/// bias_add followed by relu as one row region: args are x, bias and out
/// (rows x kBiasReluCols floats); an item is a row.
constexpr int64_t kBiasReluCols = 10007;
void biasRelu(void *const *args, int64_t begin, int64_t end) {
  const float *x = static_cast<const float *>(args[0]),
              *bias = static_cast<const float *>(args[1]);
  float *out = static_cast<float *>(args[2]);
  for (int64_t r = begin; r < end; ++r)
    for (int64_t c = 0; c < kBiasReluCols; ++c) {
      const float v = x[r * kBiasReluCols + c] + bias[c];
      out[r * kBiasReluCols + c] = v < 0.0f ? 0.0f : v;
    }
}

void *kernelAddress(ztrt_fused_fn fn) { return reinterpret_cast<void *>(fn); }

} // namespace

TEST(FusedKernelTest, RunFusedCoversEveryItemOnceInContiguousChunks) {
  std::unique_ptr<Backend> cpu = createCpuBackend();
  const int before = cpu->threads();
  struct Region {
    int64_t items, itemElements;
  };
  // Flat regions below and above the parallel threshold, and a row region
  // with fewer rows than threads.
  for (Region region : {Region{0, 1}, Region{1, 1}, Region{7, 1},
                        Region{int64_t(1) << 16, 1}, Region{3, 70000}})
    for (int threads = 1; threads <= 4; ++threads) {
      SCOPED_TRACE(::testing::Message()
                   << region.items << " items of " << region.itemElements
                   << " elements, " << threads << " threads");
      cpu->setThreads(threads);
      FusedCalls seen(region.items);
      void *args[] = {&seen};
      cpu->runFused(countItems, nullptr, args, region.items,
                    region.itemElements);
      for (int64_t i = 0; i < region.items; ++i)
        ASSERT_EQ(seen.counts[static_cast<size_t>(i)].load(), 1)
            << "item " << i;
      // One chunk per thread of the team, the first items % team threads
      // one item longer, none empty; a region under the threshold in one
      // call.
      int64_t team = 1;
#ifdef _OPENMP
      if (region.items * region.itemElements >= kParallelElements)
        team = threads;
#endif
      std::vector<std::pair<int64_t, int64_t>> expected;
      const int64_t q = region.items / team, r = region.items % team;
      for (int64_t t = 0; t < team; ++t) {
        const int64_t b = t * q + std::min(t, r),
                      e = (t + 1) * q + std::min(t + 1, r);
        if (b < e)
          expected.emplace_back(b, e);
      }
      std::sort(seen.calls.begin(), seen.calls.end());
      EXPECT_EQ(seen.calls, expected);
    }
  cpu->setThreads(before);
}

TEST(FusedKernelTest, WideKernelRunsOnlyWhereAvx512KernelsDo) {
  std::unique_ptr<Backend> native, baseline;
  bool wideHere = false;
  {
    ScopedIsa isa(nullptr);
    native = createCpuBackend();
    wideHere = avx512::enabled();
  }
  {
    ScopedIsa isa("baseline");
    baseline = createCpuBackend();
    EXPECT_FALSE(avx512::enabled());
  }
  // The same switch as the runtime's own AVX-512 kernels.
  EXPECT_EQ(native->deviceName().find("AVX-512 kernels") != std::string::npos,
            wideHere);
  auto ran = [](Backend &backend, ztrt_fused_fn wide) {
    int mark = 0;
    void *args[] = {&mark};
    backend.runFused(markBaseline, wide, args, 1, 1);
    return mark;
  };
  EXPECT_EQ(ran(*native, markWide), wideHere ? 2 : 1);
  EXPECT_EQ(ran(*native, nullptr), 1);
  EXPECT_EQ(ran(*baseline, markWide), 1);
  EXPECT_EQ(ran(*baseline, nullptr), 1);
}

TEST(FusedKernelTest, EntryPointRunsTheRegionAndNamesItInTheTrace) {
  // bias_add + relu fused into one row region computes the bits of the two
  // kernels, whatever the split into chunks (5 rows, above the parallel
  // threshold: up to 4 threads take 1 or 2 rows).
  const int64_t rows = 5, cols = kBiasReluCols;
  const std::vector<float> x = testValues(rows * cols, 71),
                           bias = testValues(cols, 72);
  auto ctx = cpuContext();
  std::vector<float> want(rows * cols);
  ztrt_bias_add(ctx.get(), ZTRT_F32, x.data(), bias.data(), want.data(), rows,
                cols);
  ztrt_relu(ctx.get(), ZTRT_F32, want.data(), want.data(), rows * cols);
  ctx->enableTrace();
  const int before = ctx->backend().threads();
  for (int threads = 1; threads <= 4; ++threads) {
    ctx->backend().setThreads(threads);
    std::vector<float> got(rows * cols, NAN);
    void *args[] = {const_cast<float *>(x.data()),
                    const_cast<float *>(bias.data()), got.data()};
    ztrt_fused(ctx.get(), "fused:bias_add+relu", kernelAddress(biasRelu),
               nullptr, args, rows, cols);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
        << threads << " threads";
  }
  ctx->backend().setThreads(before);
  // No items: the kernel is not called, and needs no arguments.
  ztrt_fused(ctx.get(), "fused:empty", kernelAddress(markBaseline), nullptr,
             nullptr, 0, 1);

  TempDir dir;
  ctx->trace()->write(dir.path("t.json"), 0, 1);
  TraceSummary summary = checkTrace(readJson(dir.path("t.json")), 0);
  EXPECT_EQ(summary.names["fused:bias_add+relu"], 4);
  EXPECT_EQ(summary.names["fused:empty"], 1);
}

TEST(FusedKernelTest, EntryPointRejectsMalformedArguments) {
  auto ctx = cpuContext();
  float x[4] = {};
  void *args[] = {x};
  void *fn = kernelAddress(markBaseline);
  using ::testing::ExitedWithCode;
  EXPECT_EXIT(ztrt_fused(ctx.get(), nullptr, fn, nullptr, args, 4, 1),
              ExitedWithCode(1), "^ztrain: error: fused: null region name\n$");
  EXPECT_EXIT(ztrt_fused(ctx.get(), "fused:relu", nullptr, fn, args, 4, 1),
              ExitedWithCode(1), "^ztrain: error: fused:relu: null kernel\n$");
  EXPECT_EXIT(ztrt_fused(ctx.get(), "fused:relu", fn, nullptr, args, -1, 1),
              ExitedWithCode(1),
              "^ztrain: error: fused:relu: negative item count -1\n$");
  EXPECT_EXIT(ztrt_fused(ctx.get(), "fused:relu", fn, nullptr, args, 4, 0),
              ExitedWithCode(1),
              "^ztrain: error: fused:relu: elements per item must be >= 1, "
              "got 0\n$");
  EXPECT_EXIT(ztrt_fused(ctx.get(), "fused:relu", fn, nullptr, nullptr, 4, 1),
              ExitedWithCode(1),
              "^ztrain: error: fused:relu: null argument array\n$");
  EXPECT_EXIT(ztrt_fused(ctx.get(), "fused:relu", fn, nullptr, args,
                         int64_t(1) << 40, int64_t(1) << 24),
              ExitedWithCode(1),
              "^ztrain: error: fused:relu: 1099511627776 items of 16777216 "
              "elements overflow int64\n$");
  EXPECT_EXIT(ztrt_fused(nullptr, "fused:relu", fn, nullptr, args, 4, 1),
              ExitedWithCode(1),
              "^ztrain: error: fused: null runtime context\n$");
}
