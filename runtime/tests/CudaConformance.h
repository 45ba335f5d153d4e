//===- CudaConformance.h - Cuda conformance fixtures ------------*- C++ -*-===//
//
// Part of ztrain's runtime tests (private to the cuda conformance suite).
// What its files share: the comparisons and their tolerances, the inputs,
// the CudaConformanceTest fixture (both backends, twin tensors) and the
// bf16 / f16 fixture CudaDTypeTest. In namespace ztrt::test, not an
// anonymous namespace: gtest requires every TEST_F of a suite to use one
// fixture class, and the suites' tests are in several files.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_TESTS_CUDACONFORMANCE_H
#define ZTRT_TESTS_CUDACONFORMANCE_H

#include "TestUtil.h"

#include "backends/cpu/VecMath.h"
#include "backends/cuda/CudaBackend.h"
#include "backends/cuda/Kernels.h"
#include "backends/cuda/Libraries.h"
#include "ztrt.h"

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <type_traits>

namespace ztrt::test {

/// The emulator runs the kernels on the host with glibc's libm, so the few
/// tolerances that exist for CUDA's own math functions are 0 there.
#ifdef ZTRT_CUDA_EMULATOR
constexpr bool kEmulator = true;
#else
constexpr bool kEmulator = false;
#endif

/// Why this machine cannot run the suite; empty when it can.
inline const std::string &noGpuReason() {
  static const std::string reason = [] {
    std::string why;
    return cudaDeviceCount(&why) > 0 ? std::string() : "no CUDA device: " + why;
  }();
  return reason;
}

inline uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

/// Distance in units in the last place (adjacent floats are 1 apart, +0
/// and -0 are 0 apart); both NaN is 0, one NaN is "infinitely" far.
inline int64_t ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  auto ordered = [](float v) {
    int32_t i = static_cast<int32_t>(bits(v));
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i
                 : static_cast<int64_t>(i);
  };
  return std::llabs(ordered(a) - ordered(b));
}

/// Same bits, or both NaN (the payload of a NaN produced by arithmetic is
/// the hardware's: x86 propagates an operand's, CUDA makes a canonical one).
inline void expectBitwise(const std::vector<float> &got,
                   const std::vector<float> &want, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (bits(got[i]) != bits(want[i]) &&
        !(std::isnan(got[i]) && std::isnan(want[i]))) {
      ADD_FAILURE() << what << "[" << i << "]: cuda " << got[i] << " (0x"
                    << std::hex << bits(got[i]) << "), cpu " << want[i]
                    << " (0x" << bits(want[i]) << std::dec << ")";
      ++bad;
    }
}

inline void expectUlps(const std::vector<float> &got,
                       const std::vector<float> &want, int64_t maxUlps,
                       const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (ulps(got[i], want[i]) > maxUlps) {
      ADD_FAILURE() << what << "[" << i << "]: cuda " << got[i] << ", cpu "
                    << want[i] << ", " << ulps(got[i], want[i])
                    << " ulp apart (allowed " << maxUlps << ")";
      ++bad;
    }
}

/// |got - want| <= maxUlps ulp of want, or <= absTol.
inline void expectUlpsOrAbs(const std::vector<float> &got,
                     const std::vector<float> &want, int64_t maxUlps,
                     double absTol, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (ulps(got[i], want[i]) > maxUlps &&
        !(std::fabs(static_cast<double>(got[i]) - want[i]) <= absTol)) {
      ADD_FAILURE() << what << "[" << i << "]: cuda " << got[i] << ", cpu "
                    << want[i] << " (allowed " << maxUlps << " ulp or "
                    << absTol << ")";
      ++bad;
    }
}

/// |got - want| <= maxUlps ulp, or <= bound(i), a bound per element.
inline void expectUlpsOrBound(const std::vector<float> &got,
                       const std::vector<float> &want, int64_t maxUlps,
                       const std::function<double(size_t)> &bound,
                       const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (ulps(got[i], want[i]) > maxUlps &&
        !(std::fabs(static_cast<double>(got[i]) - want[i]) <= bound(i))) {
      ADD_FAILURE() << what << "[" << i << "]: cuda " << got[i] << ", cpu "
                    << want[i] << " (allowed " << maxUlps << " ulp or "
                    << bound(i) << ")";
      ++bad;
    }
}

/// Inputs in [-scale, scale) plus, optionally, the special values.
inline std::vector<float> inputs(size_t n, uint32_t seed, float scale = 1.0f,
                          bool special = false) {
  std::vector<float> v = testValues(n, seed);
  for (float &x : v)
    x *= scale;
  if (special && n >= 8) {
    const float s[] = {0.0f,
                       -0.0f,
                       INFINITY,
                       -INFINITY,
                       NAN,
                       FLT_MIN,
                       1e-40f /* denormal */,
                       -FLT_MAX};
    for (size_t i = 0; i < 8; ++i)
      v[i * (n / 8)] = s[i];
  }
  return v;
}

/// A tensor on both backends: `host` is what the cpu backend computes on
/// and in, `dev` its copy in the cuda backend's memory.
template <typename T> struct Twin {
  std::vector<T> host;
  void *dev = nullptr;
};

class CudaConformanceTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (!noGpuReason().empty())
      GTEST_SKIP() << noGpuReason();
    cuda = std::make_unique<ztrt_ctx>(createCudaBackend(options()));
    cpu = cpuContext();
  }
  virtual CudaOptions options() const { return CudaOptions{}; }

  ztrt_ctx *c() { return cpu.get(); }
  ztrt_ctx *g() { return cuda.get(); }

  template <typename T> Twin<T> twin(std::vector<T> values) {
    Twin<T> t;
    t.host = std::move(values);
    const int64_t bytes = static_cast<int64_t>(t.host.size() * sizeof(T));
    t.dev = ztrt_alloc(g(), bytes, ZTRT_CAT_OTHER);
    g()->backend().copyFromHost(t.dev, t.host.data(), bytes);
    return t;
  }
  /// An output: NaNs on both sides, so that an element a kernel forgets to
  /// write shows up.
  Twin<float> output(size_t n) { return twin(std::vector<float>(n, NAN)); }

  /// A parameter of the host step tests: its values on both sides, an
  /// output for its next reader, its two Adam moments in host memory of
  /// `category` (zero) and the cpu reference's.
  struct HostStepParam {
    Twin<float> p, out;
    void *m, *v;
    std::vector<float> cm, cv;
  };
  /// One per size (seeds seed, seed + 1, ...), and the host step buffer of
  /// `bufferBytes` the runtime stages through.
  std::vector<HostStepParam> hostStepParams(const std::vector<int64_t> &sizes,
                                            uint32_t seed, int category,
                                            int64_t bufferBytes) {
    ztrt_ctx *x = g();
    x->hostStepBufferBytes = bufferBytes;
    x->hostStepBuffer = x->allocate(bufferBytes, ZTRT_CAT_HOST_STEP_BUFFERS,
                                    "host step");
    std::vector<HostStepParam> params;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = sizes[i];
      HostStepParam q{twin(inputs(n, seed + static_cast<uint32_t>(i))),
                      output(n), x->allocate(n * 4, category, "exp_avg"),
                      x->allocate(n * 4, category, "exp_avg_sq"),
                      std::vector<float>(n, 0.0f),
                      std::vector<float>(n, 0.0f)};
      std::memset(q.m, 0, n * 4);
      std::memset(q.v, 0, n * 4);
      params.push_back(std::move(q));
    }
    return params;
  }

  template <typename T> std::vector<T> fetch(const Twin<T> &t) {
    std::vector<T> out(t.host.size());
    g()->backend().copyToHost(out.data(), t.dev,
                              static_cast<int64_t>(out.size() * sizeof(T)));
    return out;
  }

  void expectHostStep(int32_t category, int64_t bufferBytes = 4099 * 8);

  /// Pointer of `t` on one side.
  template <typename T> static void *at(Twin<T> &t, bool dev) {
    return dev ? t.dev : static_cast<void *>(t.host.data());
  }

  /// Runs `op(ctx, dev)` on the cpu (dev = false) and the cuda backend.
  void both(const std::function<void(ztrt_ctx *, bool)> &op) {
    op(c(), false);
    op(g(), true);
  }

  std::unique_ptr<ztrt_ctx> cpu, cuda;
};

/// Values on a grid of quarters in [-1, 1] (ties in every max reduction,
/// -0 among them), special values included when asked.
inline std::vector<float> quarters(size_t n, uint32_t seed,
                                   bool special = false) {
  std::vector<float> v = inputs(n, seed, 1.0f, special);
  for (float &x : v)
    if (std::isfinite(x))
      x = std::round(x * 4.0f) / 4.0f;
  return v;
}

// --- bf16 and f16
// --------------------------------------------------------------
//
// Every kernel of the cuda backend for T = bf16 and f16 against the same
// backend's float kernel on the widened inputs. Inputs are drawn as values
// of T (float test data rounded to T, so exactly representable), the T
// kernel runs on them and the float kernel on the same values widened to
// float (exact), and the T result must equal static_cast<T>(float result)
// bit for bit: a tolerance of 0 ulp of T. That is exact, not hopeful: every
// kernel widens its inputs exactly, evaluates the float kernel's float (or
// double) expressions with the same launch geometry, so in the same order,
// and rounds once when it stores (base/DType.h, backends/cuda/Kernels.h). The one
// exception is matmul on a GPU (MatmulIsTheFloatMatmulRounded says why);
// on the emulator it is bitwise too.

/// Bits of T in an order where adjacent values are 1 apart (+0 and -0: 0).
template <typename T> int32_t orderedBits(T v) {
  const int32_t magnitude = v.bits & 0x7fff;
  return (v.bits & 0x8000) ? -magnitude : magnitude;
}

template <typename T> bool isNan(T v) {
  return std::isnan(static_cast<float>(v));
}

/// Significant bits of T (bf16: 8, f16: 11).
template <typename T> int precisionBits() {
  return std::is_same_v<T, bf16> ? 8 : 11;
}

template <typename T> class CudaDTypeTest : public CudaConformanceTest {
protected:
  static constexpr DType kType = DTypeOf<T>::value;
  static constexpr int32_t kCode = static_cast<int32_t>(kType);

  /// A tensor of T values twice on the device: as T (`t`, what the T
  /// kernel reads and writes) and widened to float (`f`, the float
  /// kernel's).
  struct Pair {
    std::vector<T> host;
    void *t = nullptr, *f = nullptr;
  };

  /// n values of T: inputs() rounded to T, special values included when
  /// asked (they round to 0, inf or a quiet NaN of T where T has no such
  /// value).
  static std::vector<T> values(size_t n, uint32_t seed, float scale = 1.0f,
                               bool special = false) {
    std::vector<float> v = inputs(n, seed, scale, special);
    std::vector<T> out(n);
    for (size_t i = 0; i < n; ++i)
      out[i] = static_cast<T>(v[i]);
    return out;
  }

  static std::vector<float> widen(const std::vector<T> &v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      out[i] = static_cast<float>(v[i]);
    return out;
  }

  template <typename U> void *upload(const std::vector<U> &host) {
    const int64_t bytes = static_cast<int64_t>(host.size() * sizeof(U));
    void *dev = ztrt_alloc(g(), bytes, ZTRT_CAT_OTHER);
    g()->backend().copyFromHost(dev, host.data(), bytes);
    return dev;
  }

  template <typename U> std::vector<U> download(const void *dev, size_t n) {
    std::vector<U> out(n);
    g()->backend().copyToHost(out.data(), dev,
                              static_cast<int64_t>(n * sizeof(U)));
    return out;
  }

  Pair pair(std::vector<T> host) {
    Pair p;
    p.host = std::move(host);
    p.t = upload(p.host);
    p.f = upload(widen(p.host));
    return p;
  }
  /// An output: NaNs on both sides, so that an element a kernel forgets to
  /// write shows up.
  Pair output(size_t n) { return pair(std::vector<T>(n, T(NAN))); }

  /// The float side set to the T side's current values (after an update
  /// in place, the next step's inputs are the T state, widened).
  void resync(Pair &p) {
    std::vector<T> now = download<T>(p.t, p.host.size());
    const std::vector<float> wide = widen(now);
    g()->backend().copyFromHost(
        p.f, wide.data(), static_cast<int64_t>(wide.size() * sizeof(float)));
    p.host = std::move(now);
  }

  static void *at(Pair &p, bool t) { return t ? p.t : p.f; }

  /// Runs op(dtype, t) for T (t = true), then for float (t = false).
  void each(const std::function<void(int32_t, bool)> &op) {
    op(kCode, true);
    op(ZTRT_F32, false);
  }

  /// The T result is the float result rounded to T, bit for bit, or both
  /// NaN: the sign and payload of a NaN that arithmetic produces are the
  /// hardware's (CUDA makes a canonical one; x86 propagates an operand's,
  /// and the host compiler may order a commutative operation's operands
  /// differently in the T and the float instantiation).
  void expectRounded(const Pair &p, const std::string &what) {
    const std::vector<T> got = download<T>(p.t, p.host.size());
    const std::vector<float> ref = download<float>(p.f, p.host.size());
    const std::string name = std::string(dtypeName(kType)) + " " + what;
    size_t bad = 0;
    for (size_t i = 0; i < got.size() && bad < 5; ++i) {
      const T want = static_cast<T>(ref[i]);
      if (got[i].bits != want.bits && !(isNan(got[i]) && isNan(want))) {
        ADD_FAILURE() << name << "[" << i << "]: " << static_cast<float>(got[i])
                      << " (0x" << std::hex << got[i].bits << "), float kernel "
                      << ref[i] << " rounded: " << static_cast<float>(want)
                      << " (0x" << want.bits << std::dec << ")";
        ++bad;
      }
    }
  }
};

struct DTypeName {
  template <typename T> static std::string GetName(int) {
    return dtypeName(DTypeOf<T>::value);
  }
};
using SixteenBitTypes = ::testing::Types<bf16, f16>;
TYPED_TEST_SUITE(CudaDTypeTest, SixteenBitTypes, DTypeName);

} // namespace ztrt::test

#endif // ZTRT_TESTS_CUDACONFORMANCE_H
