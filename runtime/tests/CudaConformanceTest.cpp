//===- CudaConformanceTest.cpp - The cuda backend against the cpu one -----===//
//
// Every kernel, copy and collective of the cuda backend, called through the
// C ABI on device memory, against the cpu backend on the same inputs in
// host memory. Each comparison states its tolerance and why, next to the
// assertion: the cuda backend evaluates the cpu's float expressions in the
// same order (bitwise equal), except where it sums in another order
// (cuBLAS, the double row sums, NCCL) or uses CUDA's exp / log.
//
// Without a usable GPU every test is skipped, saying why (GTEST_SKIP: CTest
// shows them as "Skipped", not "Passed").
//
//===----------------------------------------------------------------------===//

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

using namespace ztrt;
using namespace ztrt::test;

namespace {

/// The emulator runs the kernels on the host with glibc's libm, so the few
/// tolerances that exist for CUDA's own math functions are 0 there.
#ifdef ZTRT_CUDA_EMULATOR
constexpr bool kEmulator = true;
#else
constexpr bool kEmulator = false;
#endif

/// Why this machine cannot run the suite; empty when it can.
const std::string &noGpuReason() {
  static const std::string reason = [] {
    std::string why;
    return cudaDeviceCount(&why) > 0 ? std::string() : "no CUDA device: " + why;
  }();
  return reason;
}

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

/// Distance in units in the last place (adjacent floats are 1 apart, +0
/// and -0 are 0 apart); both NaN is 0, one NaN is "infinitely" far.
int64_t ulps(float a, float b) {
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
void expectBitwise(const std::vector<float> &got,
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

void expectUlps(const std::vector<float> &got, const std::vector<float> &want,
                int64_t maxUlps, const std::string &what) {
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
void expectUlpsOrAbs(const std::vector<float> &got,
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
void expectUlpsOrBound(const std::vector<float> &got,
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
std::vector<float> inputs(size_t n, uint32_t seed, float scale = 1.0f,
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

TEST_F(CudaConformanceTest, ElementwiseIsBitwiseTheCpus) {
  // One float operation (or the shared gelu formulas, VecMath.h) per
  // element, no FMA contraction on either side: bitwise equal, also for
  // the special values (NaN compared as NaN).
  for (size_t n : {size_t(1), size_t(37), size_t(1) << 20}) {
    auto a = twin(inputs(n, 1, 4.0f, true)), b = twin(inputs(n, 2, 4.0f, true));
    auto out = output(n);
    const int64_t len = static_cast<int64_t>(n);
    const std::string size = " n=" + std::to_string(n);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_add(x, ZTRT_F32, at(a, d), at(b, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "add" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_sub(x, ZTRT_F32, at(a, d), at(b, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "sub" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_mul(x, ZTRT_F32, at(a, d), at(b, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "mul" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_scale(x, ZTRT_F32, at(a, d), at(out, d), len, -0.3);
    });
    expectBitwise(fetch(out), out.host, "scale" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_fill(x, ZTRT_F32, at(out, d), len, 0.1);
    });
    expectBitwise(fetch(out), out.host, "fill" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_relu(x, ZTRT_F32, at(a, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "relu" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_relu_grad(x, ZTRT_F32, at(b, d), at(a, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "relu_grad" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_gelu(x, ZTRT_F32, at(a, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "gelu" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_gelu_grad(x, ZTRT_F32, at(b, d), at(a, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "gelu_grad" + size);
    // In place: out aliases an input.
    both([&](ztrt_ctx *x, bool d) {
      ztrt_add(x, ZTRT_F32, at(a, d), at(b, d), at(a, d), len);
    });
    expectBitwise(fetch(a), a.host, "add in place" + size);
  }
}

TEST_F(CudaConformanceTest, ElementwiseOnUnalignedViewsIsBitwise) {
  // The memory-bound kernels load and store 16 bytes at a time where every
  // pointer is 16-byte aligned (backends/cuda/DeviceUtil.cuh, forEachPacked) and go
  // element by element otherwise: views 1-3 floats into a buffer, each
  // operand at its own offset, take the second path, the aligned ones the
  // first, with a tail. Either way the cpu's bits, and nothing outside the
  // view is written (the NaN poison around it stays).
  const size_t n = 1003;
  auto a = twin(inputs(n + 3, 1, 4.0f, true)),
       b = twin(inputs(n + 3, 2, 4.0f, true)),
       bias = twin(inputs(n + 3, 4));
  const int64_t len = static_cast<int64_t>(n);
  for (int64_t oa : {0, 1, 3})
    for (int64_t oo : {0, 2}) {
      const std::string what =
          " a+" + std::to_string(oa) + " out+" + std::to_string(oo);
      auto view = [](Twin<float> &t, bool d, int64_t off) {
        return static_cast<float *>(at(t, d)) + off;
      };
      auto out = output(n + 3);
      both([&](ztrt_ctx *x, bool d) {
        ztrt_add(x, ZTRT_F32, view(a, d, oa), view(b, d, 0), view(out, d, oo),
                 len);
      });
      expectBitwise(fetch(out), out.host, "add" + what);
      out = output(n + 3);
      both([&](ztrt_ctx *x, bool d) {
        ztrt_scale(x, ZTRT_F32, view(a, d, oa), view(out, d, oo), len, -0.3);
      });
      expectBitwise(fetch(out), out.host, "scale" + what);
      out = output(n + 3);
      both([&](ztrt_ctx *x, bool d) {
        ztrt_gelu(x, ZTRT_F32, view(a, d, oa), view(out, d, oo), len);
      });
      expectBitwise(fetch(out), out.host, "gelu" + what);
      out = output(n + 3);
      both([&](ztrt_ctx *x, bool d) {
        ztrt_bias_add(x, ZTRT_F32, view(a, d, oa), view(bias, d, 1),
                      view(out, d, oo), 59, 17);
      });
      expectBitwise(fetch(out), out.host, "bias_add" + what);
    }
}

TEST_F(CudaConformanceTest, BiasAddIsBitwise) {
  // One float addition per element.
  for (auto shape : {std::pair<int64_t, int64_t>{1, 1}, {5, 7}, {1000, 768}}) {
    const int64_t rows = shape.first, cols = shape.second;
    auto x = twin(inputs(rows * cols, 3)), bias = twin(inputs(cols, 4));
    auto out = output(rows * cols);
    both([&](ztrt_ctx *c, bool d) {
      ztrt_bias_add(c, ZTRT_F32, at(x, d), at(bias, d), at(out, d), rows, cols);
    });
    expectBitwise(fetch(out), out.host, "bias_add");
  }
}

TEST_F(CudaConformanceTest, OptimizerUpdatesAreBitwise) {
  // The cpu's per-element float expressions, scalars rounded on the host
  // the same way, IEEE sqrt and division: bitwise, over three steps (the
  // first step's momentum rule, then the general one), every flag.
  const int64_t n = 4099;
  struct Sgd {
    double lr, momentum, dampening, decay;
    int nesterov;
  };
  for (Sgd h : {Sgd{0.1, 0.0, 0.0, 0.0, 0}, Sgd{0.05, 0.9, 0.0, 1e-2, 0},
                Sgd{0.05, 0.9, 0.1, 0.0, 0}, Sgd{0.01, 0.9, 0.0, 1e-3, 1}}) {
    auto p = twin(inputs(n, 5)), buf = twin(std::vector<float>(n, 0.0f));
    for (int64_t t = 1; t <= 3; ++t) {
      auto grad = twin(inputs(n, 10 + static_cast<uint32_t>(t)));
      c()->step = g()->step = t;
      both([&](ztrt_ctx *x, bool d) {
        ztrt_sgd_update(x, ZTRT_F32, at(p, d), at(grad, d), at(buf, d), n, h.lr,
                        h.momentum, h.dampening, h.decay, h.nesterov);
      });
    }
    expectBitwise(fetch(p), p.host, "sgd param");
    expectBitwise(fetch(buf), buf.host, "sgd momentum");
  }
  for (int decoupled : {0, 1})
    for (double decay : {0.0, 0.1}) {
      auto p = twin(inputs(n, 6)), m = twin(std::vector<float>(n, 0.0f)),
           v = twin(std::vector<float>(n, 0.0f));
      for (int64_t t = 1; t <= 3; ++t) {
        auto grad = twin(inputs(n, 20 + static_cast<uint32_t>(t)));
        c()->step = g()->step = t;
        both([&](ztrt_ctx *x, bool d) {
          ztrt_adam_update(x, ZTRT_F32, at(p, d), at(grad, d), at(m, d),
                           at(v, d), n, 1e-3, 0.9, 0.999, 1e-8, decay,
                           decoupled);
        });
      }
      expectBitwise(fetch(p), p.host, "adam param");
      expectBitwise(fetch(m), m.host, "adam exp_avg");
      expectBitwise(fetch(v), v.host, "adam exp_avg_sq");
    }
}

/// Three Adam steps of a parameter whose states the cuda context allocates
/// in `category`, against the cpu's: the update must run on the host (the
/// host step), bitwise the cpu's, moving exactly its bytes over the link.
/// With a host step buffer smaller than the update's 8 bytes per element,
/// it goes in tiles of half the buffer.
void CudaConformanceTest::expectHostStep(int32_t category,
                                         int64_t bufferBytes) {
  const int64_t n = 4099;
  ztrt_ctx *x = g();
  x->hostStepBufferBytes = bufferBytes;
  x->hostStepBuffer = x->allocate(bufferBytes, ZTRT_CAT_HOST_STEP_BUFFERS,
                                  "host step buffer");
  const int64_t deviceBytes = x->memory().currentDevice;
  auto hostState = [&] {
    void *state = x->allocate(n * 4, category, "state");
    std::memset(state, 0, n * 4);
    return state;
  };
  void *m = hostState(), *v = hostState();
  // Host memory: not the device's bytes.
  EXPECT_EQ(x->memory().currentDevice, deviceBytes);
  std::vector<float> cm(n, 0.0f), cv(n, 0.0f);
  auto p = twin(inputs(n, 6));
  for (int64_t t = 1; t <= 3; ++t) {
    auto grad = twin(inputs(n, 20 + static_cast<uint32_t>(t)));
    c()->step = x->step = t;
    ztrt_adam_update(c(), ZTRT_F32, p.host.data(), grad.host.data(), cm.data(),
                     cv.data(), n, 1e-3, 0.9, 0.999, 1e-8, 0.1, 1);
    ztrt_adam_update(x, ZTRT_F32, p.dev, grad.dev, m, v, n, 1e-3, 0.9, 0.999,
                     1e-8, 0.1, 1);
  }
  expectBitwise(fetch(p), p.host, "host-step adam param");
  x->backend().synchronize();
  auto read = [&](const void *state) {
    std::vector<float> out(n);
    std::memcpy(out.data(), state, n * 4);
    return out;
  };
  expectBitwise(read(m), cm, "host-step adam exp_avg");
  expectBitwise(read(v), cv, "host-step adam exp_avg_sq");
  // Per step: gradient and parameter down, parameter up (4 bytes each);
  // nothing of the states.
  EXPECT_EQ(x->offload.deviceToHostBytes, 3 * n * 8);
  EXPECT_EQ(x->offload.hostToDeviceBytes, 3 * n * 4);
}

TEST_F(CudaConformanceTest, HostPlacedStatesStepOnTheHost) {
  // ZeRO-Offload's CPU step: with its states in host memory
  // (ZTRT_CAT_HOST_STATES) the cuda context runs an update on the host,
  // with the cpu backend's kernel: the gradient (and, without a master, the
  // parameter) comes down through the host step buffer, the parameter goes
  // back up. Bitwise the cpu's (the device's kernel is too, above), and
  // exactly those bytes cross the host link.
  expectHostStep(ZTRT_CAT_HOST_STATES);
}

TEST_F(CudaConformanceTest, NvmeStatesStepOnTheHost) {
  // ZeRO-Infinity's CPU step: an nvme state's swap buffer
  // (ZTRT_CAT_STATE_SWAP_BUFFERS) is pinned, page-aligned host memory (the
  // I/O engine reads and writes it with O_DIRECT), and the update on it
  // runs on the host, as for host-placed states.
  ztrt_ctx *x = g();
  void *buffer = x->allocate(8192, ZTRT_CAT_STATE_SWAP_BUFFERS, "swap");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer) % 4096, 0u);
  EXPECT_TRUE(x->mappedHost(buffer));
  EXPECT_TRUE(x->hostStep(static_cast<char *>(buffer) + 4096));
  expectHostStep(ZTRT_CAT_STATE_SWAP_BUFFERS);
}

TEST_F(CudaConformanceTest, LargeHostStepsGoInTiles) {
  // Room for two tiles of 16 elements (gradient and parameter, 8 bytes
  // each): 4099 elements go in 257 tiles, alternating halves, each tile's
  // upload on the copy stream while the next tile comes down and steps.
  // The same bits and bytes as one piece. (The shuffled emulator run
  // delays stream work at random: with a half reused before its upload
  // ran, this fails in every run; with 1000-element tiles it rarely did.)
  expectHostStep(ZTRT_CAT_HOST_STATES, 2 * 16 * 8);
}

TEST_F(CudaConformanceTest, AsynchronousHostStepsRunBesideTheStep) {
  // ztrt_update_async: a host step that reads a spilled gradient runs on
  // the host step thread while the step goes on; ztrt_update_wait makes
  // the parameter's next reader (here a scale kernel issued right after)
  // see its upload. Three parameters, one of them larger than the buffer
  // (tiles), three steps: the same bits and host-link bytes as the
  // synchronous host step (the cpu's update), every update asynchronous.
  // (On the emulator's randomly delayed streams, a wait that does not make
  // the compute stream wait for the upload fails the scaled copies.)
  ztrt_ctx *x = g();
  const std::vector<int64_t> sizes = {4099, 37, 1000};
  int64_t total = 0;
  for (int64_t n : sizes)
    total += n;
  // 4099 elements: 9 tiles of 512.
  std::vector<HostStepParam> params =
      hostStepParams(sizes, 40, ZTRT_CAT_HOST_STATES, 2 * 512 * 4);
  char *spilled = static_cast<char *>(
      x->allocate(total * 4, ZTRT_CAT_HOST_GRADIENTS, "host_gradients"));
  for (int64_t t = 1; t <= 3; ++t) {
    c()->step = x->step = t;
    char *at = spilled;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = sizes[i];
      HostStepParam &q = params[i];
      auto grad = twin(inputs(n, 60 + static_cast<uint32_t>(10 * t + i)));
      ztrt_adam_update(c(), ZTRT_F32, q.p.host.data(), grad.host.data(),
                       q.cm.data(), q.cv.data(), n, 1e-3, 0.9, 0.999, 1e-8,
                       0.1, 1);
      // As the compiled step does: the gradient spilled on the copy
      // stream, its wait, then the update.
      int64_t ticket = ztrt_spill_gradient_start(x, grad.dev, at, n * 4);
      ztrt_copy_wait(x, ticket);
      ztrt_update_async(x, q.p.dev);
      ztrt_adam_update(x, ZTRT_F32, q.p.dev, at, q.m, q.v, n, 1e-3, 0.9,
                       0.999, 1e-8, 0.1, 1);
      at += n * 4;
    }
    EXPECT_EQ(x->pendingHostSteps(), sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      HostStepParam &q = params[i];
      const int64_t n = sizes[i];
      ztrt_update_wait(x, q.p.dev);
      ztrt_scale(c(), ZTRT_F32, q.p.host.data(), q.out.host.data(), n, 2.0);
      ztrt_scale(x, ZTRT_F32, q.p.dev, q.out.dev, n, 2.0);
      expectBitwise(fetch(q.out), q.out.host,
                    "the reader after update_wait, step " + std::to_string(t));
    }
    EXPECT_EQ(x->pendingHostSteps(), 0u);
    x->requireUpdatesWaited("test");
  }
  x->backend().synchronize();
  for (size_t i = 0; i < sizes.size(); ++i) {
    HostStepParam &q = params[i];
    const int64_t n = sizes[i];
    expectBitwise(fetch(q.p), q.p.host, "async host-step param");
    std::vector<float> m(n), v(n);
    std::memcpy(m.data(), q.m, n * 4);
    std::memcpy(v.data(), q.v, n * 4);
    expectBitwise(m, q.cm, "async host-step exp_avg");
    expectBitwise(v, q.cv, "async host-step exp_avg_sq");
  }
  EXPECT_EQ(x->offload.hostSteps, 9);
  EXPECT_EQ(x->offload.asyncHostSteps, 9);
  // Per step: each parameter down and up, the gradients spilled (4 bytes
  // an element each way); nothing of the states.
  EXPECT_EQ(x->offload.deviceToHostBytes, 3 * total * 8);
  EXPECT_EQ(x->offload.hostToDeviceBytes, 3 * total * 4);
}

TEST_F(CudaConformanceTest, AsynchronousHostStepsStageDeviceGradients) {
  // nvme-placed states (their swap buffers, pinned host memory): the
  // gradient stays on the device and the host step thread stages it
  // itself, after the kernel that made it, which the step issued right
  // before the update. One host step in flight, as zero-offload schedules
  // them: each is waited before the next update, and the states its wait
  // hands back (what a swap-out then writes) and the parameter's reader
  // see the new values. Three steps: the same bits and host-link bytes as
  // the cpu's update. (On the emulator's randomly delayed streams, staging
  // the gradient before its kernel ran, or a wait that returns before the
  // states are written, fails the comparisons.)
  ztrt_ctx *x = g();
  const std::vector<int64_t> sizes = {4099, 37, 1000};
  int64_t total = 0;
  for (int64_t n : sizes)
    total += n;
  // Gradient and parameter staged: 8 bytes an element; 4099 elements are
  // 9 tiles of 512.
  std::vector<HostStepParam> params =
      hostStepParams(sizes, 140, ZTRT_CAT_STATE_SWAP_BUFFERS, 2 * 512 * 8);
  // Each parameter's gradient, made on the device by a kernel.
  std::vector<Twin<float>> grads;
  for (int64_t n : sizes)
    grads.push_back(output(n));
  for (int64_t t = 1; t <= 3; ++t) {
    c()->step = x->step = t;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = sizes[i];
      HostStepParam &q = params[i];
      Twin<float> &grad = grads[i];
      // The gradient, made by a kernel right before the update.
      auto source = twin(inputs(n, 160 + static_cast<uint32_t>(10 * t + i)));
      ztrt_scale(c(), ZTRT_F32, source.host.data(), grad.host.data(), n,
                 0.5);
      ztrt_scale(x, ZTRT_F32, source.dev, grad.dev, n, 0.5);
      ztrt_adam_update(c(), ZTRT_F32, q.p.host.data(), grad.host.data(),
                       q.cm.data(), q.cv.data(), n, 1e-3, 0.9, 0.999, 1e-8,
                       0.1, 1);
      ztrt_update_async(x, q.p.dev);
      ztrt_adam_update(x, ZTRT_F32, q.p.dev, grad.dev, q.m, q.v, n, 1e-3,
                       0.9, 0.999, 1e-8, 0.1, 1);
      EXPECT_EQ(x->pendingHostSteps(), 1u);
      ztrt_update_wait(x, q.p.dev);
      std::vector<float> m(n), v(n);
      std::memcpy(m.data(), q.m, n * 4);
      std::memcpy(v.data(), q.v, n * 4);
      const std::string at = ", step " + std::to_string(t);
      expectBitwise(m, q.cm, "exp_avg after update_wait" + at);
      expectBitwise(v, q.cv, "exp_avg_sq after update_wait" + at);
      ztrt_scale(c(), ZTRT_F32, q.p.host.data(), q.out.host.data(), n, 2.0);
      ztrt_scale(x, ZTRT_F32, q.p.dev, q.out.dev, n, 2.0);
      expectBitwise(fetch(q.out), q.out.host,
                    "the reader after update_wait" + at);
      x->backend().synchronize(); // (source is freed here)
    }
    x->requireUpdatesWaited("test");
  }
  EXPECT_EQ(x->offload.hostSteps, 9);
  EXPECT_EQ(x->offload.asyncHostSteps, 9);
  // Per step: each gradient down, each parameter down and up (4 bytes an
  // element each); nothing of the states.
  EXPECT_EQ(x->offload.deviceToHostBytes, 3 * total * 8);
  EXPECT_EQ(x->offload.hostToDeviceBytes, 3 * total * 4);
}

TEST_F(CudaConformanceTest, AsynchronousHostStepMisuseIsOneLine) {
  ztrt_ctx *x = g();
  const int64_t n = 64;
  x->hostStepBufferBytes = n * 4;
  x->hostStepBuffer = x->allocate(n * 4, ZTRT_CAT_HOST_STEP_BUFFERS, "hs");
  void *spilled = x->allocate(n * 4, ZTRT_CAT_HOST_GRADIENTS, "hg");
  void *m = x->allocate(n * 4, ZTRT_CAT_HOST_STATES, "m");
  void *v = x->allocate(n * 4, ZTRT_CAT_HOST_STATES, "v");
  std::memset(m, 0, n * 4);
  std::memset(v, 0, n * 4);
  std::memset(spilled, 0, n * 4);
  auto p = twin(inputs(n, 3)), q = twin(inputs(n, 4));
  x->step = 1;
  // The update that follows is of another parameter.
  EXPECT_EXIT(
      {
        ztrt_update_async(x, q.dev);
        ztrt_adam_update(x, ZTRT_F32, p.dev, spilled, m, v, n, 1e-3, 0.9,
                         0.999, 1e-8, 0.0, 0);
      },
      ::testing::ExitedWithCode(1),
      "adam_update: ztrt_update_async named the parameter at 0x[0-9a-f]+, "
      "the update is of the parameter at 0x[0-9a-f]+");
  // A step that ends with a started update not waited.
  EXPECT_EXIT(
      {
        ztrt_update_async(x, p.dev);
        ztrt_adam_update(x, ZTRT_F32, p.dev, spilled, m, v, n, 1e-3, 0.9,
                         0.999, 1e-8, 0.0, 0);
        x->requireUpdatesWaited("step 1");
      },
      ::testing::ExitedWithCode(1),
      "step 1: the adam_update of the parameter at 0x[0-9a-f]+ ran "
      "asynchronously but was never waited \\(ztrt_update_wait; 1 "
      "outstanding\\)");
  // An announced update that runs on the device (its states are device
  // memory) uses the announcement up too: the next one and the step's end
  // are fine.
  auto dm = twin(std::vector<float>(n, 0.0f)), dv = twin(std::vector<float>(n, 0.0f));
  ztrt_update_async(x, p.dev);
  ztrt_adam_update(x, ZTRT_F32, p.dev, q.dev, dm.dev, dv.dev, n, 1e-3, 0.9,
                   0.999, 1e-8, 0.0, 0);
  ztrt_update_async(x, q.dev);
  ztrt_adam_update(x, ZTRT_F32, q.dev, p.dev, dm.dev, dv.dev, n, 1e-3, 0.9,
                   0.999, 1e-8, 0.0, 0);
  x->requireUpdatesWaited("step 1");
  EXPECT_EQ(x->pendingHostSteps(), 0u);
}

TEST_F(CudaConformanceTest, MatmulMatchesUpToSummationOrder) {
  // cuBLAS and OpenBLAS sum the k products in different orders (blocking,
  // tensor-core tiles). Each order's error is at most (k-1) u sum|a||b|
  // (u = 2^-24), so the two differ by at most 2 k u sum_l |a_il||b_lj|:
  // a rigorous bound, checked per element. TF32 would exceed it by ~2^13.
  struct Case {
    int64_t batch, m, n, k;
    int ta, tb;
    int64_t sa, sb; // -1: packed (m*k / k*n)
  };
  std::vector<Case> cases;
  for (int ta : {0, 1})
    for (int tb : {0, 1}) {
      cases.push_back({1, 33, 65, 127, ta, tb, -1, -1});
      cases.push_back({3, 17, 9, 31, ta, tb, -1, -1});
      cases.push_back({4, 8, 16, 12, ta, tb, 0, -1}); // shared A
      cases.push_back({4, 8, 16, 12, ta, tb, -1, 0}); // shared B
    }
  cases.push_back({1, 256, 512, 1024, 0, 0, -1, -1});
  for (const Case &cs : cases) {
    const int64_t sa = cs.sa < 0 ? cs.m * cs.k : cs.sa;
    const int64_t sb = cs.sb < 0 ? cs.k * cs.n : cs.sb;
    const int64_t sc = cs.m * cs.n;
    // A stride of 0 shares one matrix across the batch.
    auto a =
        twin(inputs(static_cast<size_t>(sa ? cs.batch * sa : cs.m * cs.k), 30));
    auto b =
        twin(inputs(static_cast<size_t>(sb ? cs.batch * sb : cs.k * cs.n), 31));
    auto out = output(static_cast<size_t>(cs.batch * sc));
    both([&](ztrt_ctx *x, bool d) {
      ztrt_matmul(x, ZTRT_F32, at(a, d), at(b, d), at(out, d), cs.batch, cs.m,
                  cs.n, cs.k, cs.ta, cs.tb, sa, sb, sc);
    });
    std::vector<float> got = fetch(out);
    const std::string what =
        "matmul batch=" + std::to_string(cs.batch) +
        " m=" + std::to_string(cs.m) + " n=" + std::to_string(cs.n) +
        " k=" + std::to_string(cs.k) + " ta=" + std::to_string(cs.ta) +
        " tb=" + std::to_string(cs.tb) + " sa=" + std::to_string(sa) +
        " sb=" + std::to_string(sb);
    int bad = 0;
    for (int64_t i = 0; i < cs.batch && bad < 5; ++i)
      for (int64_t r = 0; r < cs.m; ++r)
        for (int64_t col = 0; col < cs.n; ++col) {
          double mag = 0.0;
          for (int64_t l = 0; l < cs.k; ++l) {
            const float av =
                a.host[i * sa + (cs.ta ? l * cs.m + r : r * cs.k + l)];
            const float bv =
                b.host[i * sb + (cs.tb ? col * cs.k + l : l * cs.n + col)];
            mag += std::fabs(static_cast<double>(av) * bv);
          }
          const size_t e = static_cast<size_t>(i * sc + r * cs.n + col);
          const double bound = 2.0 * cs.k * std::ldexp(1.0, -24) * mag + 1e-30;
          if (!(std::fabs(static_cast<double>(got[e]) - out.host[e]) <=
                bound) &&
              bad++ < 5)
            ADD_FAILURE() << what << " C[" << i << "][" << r << "][" << col
                          << "]: cuda " << got[e] << ", cpu " << out.host[e]
                          << ", bound " << bound;
        }
  }
}

TEST_F(CudaConformanceTest, MatmulDoesNotUseTF32) {
  // A = 1 + 2^-20 everywhere, B = 1, k = 16: every partial sum
  // j (1 + 2^-20), j <= 16, is a float, so any summation order gives
  // exactly 16 + 2^-16. TF32 keeps 10 mantissa bits: it would round A to 1
  // and give 16.
  const int64_t m = 128, n = 128, k = 16;
  const float one = 1.0f + std::ldexp(1.0f, -20);
  auto a = twin(std::vector<float>(m * k, one)),
       b = twin(std::vector<float>(k * n, 1.0f));
  auto out = output(m * n);
  ztrt_matmul(g(), ZTRT_F32, a.dev, b.dev, out.dev, 1, m, n, k, 0, 0, 0, 0, 0);
  const float exact = 16.0f + std::ldexp(1.0f, -16);
  for (float v : fetch(out))
    ASSERT_EQ(v, exact) << "cuBLAS rounded float32 inputs (TF32 tensor cores?)";
}

TEST_F(CudaConformanceTest, MatmulWithEmptyInnerDimWritesZeros) {
  // Exact: an empty sum is +0 on both sides.
  auto a = twin(std::vector<float>(1, 0.0f)),
       b = twin(std::vector<float>(1, 0.0f));
  auto out = output(2 * 3 * 4);
  both([&](ztrt_ctx *x, bool d) {
    ztrt_matmul(x, ZTRT_F32, at(a, d), at(b, d), at(out, d), 2, 3, 4, 0, 0, 0,
                0, 0, 12);
  });
  expectBitwise(fetch(out), out.host, "matmul k=0");
}

TEST_F(CudaConformanceTest, LayerNormAndGrad) {
  // Rows of up to 1024 go to a warp each, longer ones to a block each
  // (backends/cuda/Rows.cu, kWarpRowCols): both paths, and rows past 8 per block.
  for (auto shape : {std::pair<int64_t, int64_t>{1, 1},
                     {7, 16},
                     {64, 1000},
                     {300, 768},
                     {3, 1024},
                     {5, 1025},
                     {9, 3000}}) {
    const int64_t rows = shape.first, cols = shape.second;
    auto x = twin(inputs(rows * cols, 40, 3.0f)),
         gamma = twin(inputs(cols, 41)), beta = twin(inputs(cols, 42)),
         dy = twin(inputs(rows * cols, 43));
    auto y = output(rows * cols), dx = output(rows * cols),
         dgamma = output(cols), dbeta = output(cols);
    const std::string what =
        " " + std::to_string(rows) + "x" + std::to_string(cols);
    both([&](ztrt_ctx *c, bool d) {
      ztrt_layer_norm(c, ZTRT_F32, at(x, d), at(gamma, d), at(beta, d),
                      at(y, d), rows, cols, 1e-5);
      ztrt_layer_norm_grad(c, ZTRT_F32, at(dy, d), at(x, d), at(gamma, d),
                           at(dx, d), at(dgamma, d), at(dbeta, d), rows, cols,
                           1e-5);
    });
    // The same double formulas with the row sums in another order: mean
    // and rstd differ by ~1e-15 relative, so the floats y rounds to are
    // equal or adjacent; where (x - mean) rstd gamma + beta cancels to
    // almost 0 that difference (~1e-14 absolute here) is the bound instead.
    expectUlpsOrAbs(fetch(y), y.host, 1, 1e-12, "layer_norm" + what);
    // dx = rstd * (g - mean(g) - xhat * mean(g xhat)) can cancel: where it
    // does, the double difference's rounding (~1e-15 of the terms, O(1)
    // here) is the bound instead.
    expectUlpsOrAbs(fetch(dx), dx.host, 1, 1e-12, "layer_norm_grad dx" + what);
    // Column sums over rows in double, chunked instead of serial: adjacent
    // floats, or ~rows * 2^-53 * sum|terms| (< 1e-11 here) near zero.
    expectUlpsOrAbs(fetch(dgamma), dgamma.host, 1, 1e-11, "dgamma" + what);
    expectUlpsOrAbs(fetch(dbeta), dbeta.host, 1, 1e-11, "dbeta" + what);
  }
}

TEST_F(CudaConformanceTest, SoftmaxCausalOrNotAndGrad) {
  for (int causal : {0, 1})
    for (auto shape :
         {std::pair<int64_t, int64_t>{8, 8}, {3 * 64, 64}, {2 * 257, 257}}) {
      // Causal rows are whole [cols x cols] blocks; plain ones need not be.
      const int64_t rows = !causal && shape.first == 8 ? 5 : shape.first;
      const int64_t cols = shape.second;
      auto x = twin(inputs(rows * cols, 50, 6.0f)),
           dy = twin(inputs(rows * cols, 51));
      auto y = output(rows * cols), dx = output(rows * cols);
      const std::string what = (causal ? " causal " : " ") +
                               std::to_string(rows) + "x" +
                               std::to_string(cols);
      both([&](ztrt_ctx *c, bool d) {
        ztrt_softmax(c, ZTRT_F32, at(x, d), at(y, d), rows, cols, causal);
        ztrt_softmax_grad(c, ZTRT_F32, at(dy, d), at(y, d), at(dx, d), rows,
                          cols);
      });
      std::vector<float> got = fetch(y);
      // CUDA's expf is within 2 ulp, glibc's within 1: each exp differs by
      // <= 3 ulp, the double row sums (and so the float 1/sum) by as much,
      // the product by one more rounding: 8 ulp bounds it.
      expectUlps(got, y.host, 8, "softmax" + what);
      // Masked entries are exactly zero on both sides.
      if (causal) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = r % cols + 1; j < cols; ++j)
            ASSERT_EQ(bits(got[r * cols + j]), 0u) << what << " masked " << r;
      }
      // softmax_grad on each side's own y would compound the softmax
      // difference; given the same y (the cpu's) it is y * (dy - d) with
      // d = float(dot in double): the two d are equal or adjacent, so the
      // results differ by at most |y| (ulp(d) + ulp(dy - d)) plus their own
      // rounding: within 2^-22 |y| (|dy| + |d|).
      g()->backend().copyFromHost(y.dev, y.host.data(), rows * cols * 4);
      ztrt_softmax_grad(g(), ZTRT_F32, dy.dev, y.dev, dx.dev, rows, cols);
      std::vector<float> gotDx = fetch(dx);
      for (int64_t r = 0; r < rows; ++r) {
        double dot = 0.0;
        for (int64_t j = 0; j < cols; ++j)
          dot +=
              static_cast<double>(dy.host[r * cols + j]) * y.host[r * cols + j];
        for (int64_t j = 0; j < cols; ++j) {
          const size_t e = static_cast<size_t>(r * cols + j);
          const double tol = std::ldexp(
              std::fabs(y.host[e]) * (std::fabs(dy.host[e]) + std::fabs(dot)),
              -22);
          if (!(std::fabs(static_cast<double>(gotDx[e]) - dx.host[e]) <= tol))
            FAIL() << "softmax_grad" << what << " [" << e << "]: cuda "
                   << gotDx[e] << ", cpu " << dx.host[e];
        }
      }
    }
}

TEST_F(CudaConformanceTest, TransposeAndBroadcastAreBitwise) {
  // Pure data movement (broadcast's factor: one double product rounded to
  // float on both sides).
  struct Case {
    std::vector<int64_t> shape, perm;
  };
  for (const Case &cs : {Case{{3, 5}, {1, 0}}, Case{{2, 3, 4}, {2, 0, 1}},
                         Case{{2, 64, 4, 16}, {0, 2, 1, 3}},
                         Case{{3, 1, 5, 2}, {3, 2, 1, 0}}, Case{{7}, {0}}}) {
    int64_t n = 1;
    for (int64_t v : cs.shape)
      n *= v;
    auto x = twin(inputs(n, 60)), out = output(n);
    both([&](ztrt_ctx *c, bool d) {
      ztrt_transpose(c, ZTRT_F32, at(x, d), at(out, d),
                     static_cast<int64_t>(cs.shape.size()), cs.shape.data(),
                     cs.perm.data());
    });
    expectBitwise(fetch(out), out.host, "transpose");
  }
  const std::vector<int64_t> shape{3, 4, 5, 2};
  for (const std::vector<int64_t> &mask :
       std::vector<std::vector<int64_t>>{{0, 0, 0, 0},
                                         {1, 0, 0, 0},
                                         {0, 0, 0, 1},
                                         {1, 0, 1, 0},
                                         {0, 1, 1, 0},
                                         {1, 1, 1, 1},
                                         {1, 1, 0, 1}})
    for (double factor : {1.0, 0.125, -3.3}) {
      int64_t inN = 1;
      for (size_t d = 0; d < shape.size(); ++d)
        inN *= mask[d] ? 1 : shape[d];
      auto x = twin(inputs(inN, 61, 1.0f, inN >= 8)),
           out = output(3 * 4 * 5 * 2);
      both([&](ztrt_ctx *c, bool d) {
        ztrt_broadcast(c, ZTRT_F32, at(x, d), at(out, d), 4, shape.data(),
                       mask.data(), factor);
      });
      expectBitwise(fetch(out), out.host, "broadcast");
    }
}

TEST_F(CudaConformanceTest, ReduceSumsInDouble) {
  // Both sum in double and round once; the cuda backend splits long sums
  // into chunks. The double sums differ by ~R 2^-53 sum|x|: adjacent
  // floats, or that much absolute where the sum cancels to ~0.
  const std::vector<int64_t> shape{6, 70, 3, 33};
  int64_t n = 1;
  for (int64_t v : shape)
    n *= v;
  auto x = twin(inputs(n, 70));
  for (const std::vector<int64_t> &mask :
       std::vector<std::vector<int64_t>>{{0, 0, 0, 0},
                                         {1, 0, 0, 0},
                                         {0, 0, 0, 1},
                                         {1, 1, 1, 0},
                                         {0, 1, 0, 1},
                                         {1, 1, 1, 1},
                                         {1, 0, 1, 1}})
    for (int mean : {0, 1}) {
      int64_t outN = 1;
      for (size_t d = 0; d < shape.size(); ++d)
        outN *= mask[d] ? 1 : shape[d];
      auto out = output(outN);
      both([&](ztrt_ctx *c, bool d) {
        ztrt_reduce(c, ZTRT_F32, at(x, d), at(out, d), 4, shape.data(),
                    mask.data(), mean);
      });
      expectUlpsOrAbs(fetch(out), out.host, 1, 1e-11, "reduce");
    }
  // A bias gradient's shape: few outputs, many rows (the chunked path).
  const std::vector<int64_t> bias{8192, 96}, rowMask{1, 0};
  auto y = twin(inputs(8192 * 96, 71)), out = output(96);
  both([&](ztrt_ctx *c, bool d) {
    ztrt_reduce(c, ZTRT_F32, at(y, d), at(out, d), 2, bias.data(),
                rowMask.data(), 0);
  });
  expectUlpsOrAbs(fetch(out), out.host, 1, 1e-10, "reduce rows");
}

TEST_F(CudaConformanceTest, CrossEntropyAndGrad) {
  const int64_t rows = 300, classes = 1000;
  std::vector<int32_t> labelValues(rows);
  for (int64_t r = 0; r < rows; ++r)
    labelValues[r] = static_cast<int32_t>((r * 7919) % classes);
  auto logits = twin(inputs(rows * classes, 80, 8.0f)),
       dloss = twin(std::vector<float>{0.7f});
  auto labels = twin(labelValues);
  auto loss = output(1), dlogits = output(rows * classes);
  both([&](ztrt_ctx *c, bool d) {
    ztrt_cross_entropy(c, ZTRT_F32, at(logits, d), at(labels, d), at(loss, d),
                       rows, classes);
    ztrt_cross_entropy_grad(c, ZTRT_F32, at(dloss, d), at(logits, d),
                            at(labels, d), at(dlogits, d), rows, classes);
  });
  // Log-sum-exp and the mean in double with CUDA's exp / log (within 1-2
  // ulp of double): the float results are equal or adjacent; p - 1 for the
  // label's entry may cancel to ~1e-16 absolute.
  expectUlps(fetch(loss), loss.host, 1, "cross_entropy");
  expectUlpsOrAbs(fetch(dlogits), dlogits.host, 1, 1e-12, "cross_entropy_grad");
}

TEST_F(CudaConformanceTest, CrossEntropyWithGradIsTheTwoKernels) {
  // On the device: bitwise the device's two kernels (one log-sum-exp per
  // row instead of two, the same expressions), hence the cpu's tolerance.
  const int64_t rows = 300, classes = 1000;
  std::vector<int32_t> labelValues(rows);
  for (int64_t r = 0; r < rows; ++r)
    labelValues[r] = static_cast<int32_t>((r * 7919) % classes);
  auto logits = twin(inputs(rows * classes, 81, 8.0f)),
       dloss = twin(std::vector<float>{0.7f});
  auto labels = twin(labelValues);
  auto loss = output(1), dlogits = output(rows * classes),
       fusedLoss = output(1), fusedGrad = output(rows * classes);
  ztrt_cross_entropy(g(), ZTRT_F32, logits.dev, labels.dev, loss.dev, rows,
                     classes);
  ztrt_cross_entropy_grad(g(), ZTRT_F32, dloss.dev, logits.dev, labels.dev,
                          dlogits.dev, rows, classes);
  both([&](ztrt_ctx *c, bool d) {
    ztrt_cross_entropy_with_grad(c, ZTRT_F32, at(logits, d), at(labels, d),
                                 at(dloss, d), at(fusedLoss, d),
                                 at(fusedGrad, d), rows, classes);
  });
  expectBitwise(fetch(fusedLoss), fetch(loss), "cross_entropy_with_grad loss");
  expectBitwise(fetch(fusedGrad), fetch(dlogits),
                "cross_entropy_with_grad dlogits");
  expectUlps(fetch(fusedLoss), fusedLoss.host, 1, "cross_entropy_with_grad");
  expectUlpsOrAbs(fetch(fusedGrad), fusedGrad.host, 1, 1e-12,
                  "cross_entropy_with_grad");
}

TEST_F(CudaConformanceTest, OutOfRangeLabelIsTheCpusError) {
  // The kernel records the first bad row; the error surfaces, with the cpu
  // backend's message, at the next synchronization.
  const int64_t rows = 6, classes = 10;
  auto logits = twin(inputs(rows * classes, 81));
  auto labels = twin(std::vector<int32_t>{1, 2, 3, 12, 0, -4});
  auto loss = output(1);
  EXPECT_EXIT(
      {
        ztrt_cross_entropy(g(), ZTRT_F32, logits.dev, labels.dev, loss.dev,
                           rows, classes);
        g()->synchronize();
      },
      ::testing::ExitedWithCode(1),
      "ztrain: error: cross_entropy: label 12 out of range \\[0, 10\\) at row "
      "3\n");
  auto dlogits = output(rows * classes);
  auto dloss = twin(std::vector<float>{1.0f});
  EXPECT_EXIT(
      {
        ztrt_cross_entropy_grad(g(), ZTRT_F32, dloss.dev, logits.dev,
                                labels.dev, dlogits.dev, rows, classes);
        std::vector<float> host(rows * classes);
        g()->backend().copyToHost(host.data(), dlogits.dev, rows * classes * 4);
      },
      ::testing::ExitedWithCode(1),
      "cross_entropy_grad: label 12 out of range \\[0, 10\\) at row 3");
}

TEST_F(CudaConformanceTest, EmbeddingAndDeterministicGradAreBitwise) {
  // Gather: copies. Grad: zero, then each row the float sum of its dy rows
  // in index order, exactly the cpu's additions in the cpu's order.
  const int64_t vocab = 50, dim = 300, nIds = 1000;
  std::vector<int32_t> idValues(nIds);
  for (int64_t i = 0; i < nIds; ++i)
    idValues[i] = static_cast<int32_t>((i * i * 31 + 7) % 37); // repeats, gaps
  idValues[5] = 49;
  auto table = twin(inputs(vocab * dim, 90)), dy = twin(inputs(nIds * dim, 91));
  auto ids = twin(idValues);
  auto out = output(nIds * dim), dtable = output(vocab * dim);
  both([&](ztrt_ctx *c, bool d) {
    ztrt_embedding(c, ZTRT_F32, at(table, d), at(ids, d), at(out, d), nIds,
                   vocab, dim);
    ztrt_embedding_grad(c, ZTRT_F32, at(dy, d), at(ids, d), at(dtable, d), nIds,
                        vocab, dim);
  });
  expectBitwise(fetch(out), out.host, "embedding");
  expectBitwise(fetch(dtable), dtable.host, "embedding_grad");
  // Every id the same: one row sums all of dy.
  auto same = twin(std::vector<int32_t>(nIds, 3));
  both([&](ztrt_ctx *c, bool d) {
    ztrt_embedding_grad(c, ZTRT_F32, at(dy, d), at(same, d), at(dtable, d),
                        nIds, vocab, dim);
  });
  expectBitwise(fetch(dtable), dtable.host, "embedding_grad one id");
  auto bad = twin(std::vector<int32_t>{0, 1, -1, 60});
  EXPECT_EXIT(
      {
        ztrt_embedding(g(), ZTRT_F32, table.dev, bad.dev, out.dev, 4, vocab,
                       dim);
        g()->synchronize();
      },
      ::testing::ExitedWithCode(1),
      "embedding: id -1 out of range \\[0, 50\\) at position 2");
  EXPECT_EXIT(
      {
        ztrt_embedding_grad(g(), ZTRT_F32, dy.dev, bad.dev, dtable.dev, 4,
                            vocab, dim);
        g()->synchronize();
      },
      ::testing::ExitedWithCode(1),
      "embedding_grad: id -1 out of range \\[0, 50\\) at position 2");
}

TEST_F(CudaConformanceTest, CopiesAreBitwise) {
  std::vector<float> values = inputs(1000, 100, 1.0f, true);
  auto src = twin(values), dst = output(1000);
  both(
      [&](ztrt_ctx *c, bool d) { ztrt_copy(c, at(src, d), at(dst, d), 4000); });
  expectBitwise(fetch(dst), dst.host, "copy");
  // An overlapping copy has memmove semantics.
  both([&](ztrt_ctx *c, bool d) {
    ztrt_copy(c, at(src, d), static_cast<char *>(at(src, d)) + 40, 3000);
  });
  expectBitwise(fetch(src), src.host, "copy onto an overlapping view");
  struct Case {
    int64_t rows, rowBytes, srcStride, dstStride;
  };
  for (const Case &cs :
       {Case{10, 16, 48, 16}, Case{10, 16, 16, 48}, Case{7, 12, 0, 12},
        Case{5, 3, 7, 9}, Case{40, 100, 100, 100}, Case{1, 4000, 0, 0}}) {
    auto from = twin(values), to = output(1000);
    both([&](ztrt_ctx *c, bool d) {
      ztrt_copy_2d(c, at(from, d), at(to, d), cs.rows, cs.rowBytes,
                   cs.srcStride, cs.dstStride);
    });
    expectBitwise(fetch(to), to.host,
                  "copy_2d rows=" + std::to_string(cs.rows) +
                      " bytes=" + std::to_string(cs.rowBytes));
  }
}

TEST_F(CudaConformanceTest, MemoryIsAccountedAsOnTheCpu) {
  // The context accounts categories whatever the backend.
  void *a = ztrt_alloc(g(), 1000, ZTRT_CAT_PARAMETERS);
  void *b = ztrt_alloc(g(), 0, ZTRT_CAT_ACTIVATIONS);
  void *e = ztrt_alloc(g(), 0, ZTRT_CAT_ACTIVATIONS);
  EXPECT_NE(b, e) << "zero-byte allocations must be distinct";
  EXPECT_EQ(g()->memory().current[ZTRT_CAT_PARAMETERS], 1000);
  ztrt_free(g(), a);
  ztrt_free(g(), b);
  ztrt_free(g(), e);
  ztrt_free(g(), nullptr);
  EXPECT_EQ(g()->memory().current[ZTRT_CAT_PARAMETERS], 0);
  EXPECT_EQ(g()->memory().peak[ZTRT_CAT_PARAMETERS], 1000);
  EXPECT_EXIT(ztrt_alloc(g(), int64_t(1) << 50, ZTRT_CAT_ACTIVATIONS),
              ::testing::ExitedWithCode(1),
              "alloc: out of cuda memory allocating 1125899906842624 bytes");
}

TEST_F(CudaConformanceTest, LossArrivesAtSynchronize) {
  auto loss = twin(std::vector<float>{2.5f});
  g()->loss = 0.0f;
  ztrt_set_loss(g(), loss.dev);
  g()->synchronize();
  EXPECT_EQ(g()->loss, 2.5f);
}

TEST_F(CudaConformanceTest, SameInputsTwiceGiveTheSameBits) {
  // Determinism: no atomics on floats, fixed reduction trees, one cuBLAS
  // handle on one stream.
  auto run = [&] {
    auto x = twin(inputs(512 * 768, 110)), w = twin(inputs(768 * 768, 111)),
         gamma = twin(inputs(768, 112));
    auto ids = twin(std::vector<int32_t>(512, 7));
    auto h = output(512 * 768), dx = output(512 * 768), dg = output(768),
         db = output(768), bias = output(768), dt = output(20 * 768);
    ztrt_matmul(g(), ZTRT_F32, x.dev, w.dev, h.dev, 1, 512, 768, 768, 0, 1, 0,
                0, 0);
    ztrt_layer_norm_grad(g(), ZTRT_F32, h.dev, x.dev, gamma.dev, dx.dev, dg.dev,
                         db.dev, 512, 768, 1e-5);
    const int64_t shape[2] = {512, 768}, mask[2] = {1, 0};
    ztrt_reduce(g(), ZTRT_F32, dx.dev, bias.dev, 2, shape, mask, 0);
    ztrt_embedding_grad(g(), ZTRT_F32, dx.dev, ids.dev, dt.dev, 512, 20, 768);
    std::vector<float> all = fetch(h);
    for (auto *t : {&dx, &dg, &db, &bias, &dt}) {
      std::vector<float> v = fetch(*t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  std::vector<float> first = run(), second = run();
  expectBitwise(second, first, "second run");
}

// --- The Llama kernels ------------------------------------------------------

/// Values on a grid of quarters in [-1, 1] (ties in every max reduction,
/// -0 among them), special values included when asked.
std::vector<float> quarters(size_t n, uint32_t seed, bool special = false) {
  std::vector<float> v = inputs(n, seed, 1.0f, special);
  for (float &x : v)
    if (std::isfinite(x))
      x = std::round(x * 4.0f) / 4.0f;
  return v;
}

/// An int32 mask of n entries, about 3 in 7 set (to 2 or -1: any non-zero
/// value masks).
std::vector<int32_t> maskValues(size_t n) {
  std::vector<int32_t> m(n);
  for (size_t j = 0; j < n; ++j)
    m[j] = (j * 31) % 7 < 3 ? (j % 2 ? -1 : 2) : 0;
  return m;
}

/// Whether every double that vecmath::ropeCosSin rounds to float for these
/// positions (the power theta^(2i / dim), the cosine and the sine of the
/// float angle) lies farther than 2^-48 of its magnitude from a point
/// halfway between two floats. CUDA's double pow, cos and sin are within 2
/// ulp of double (2^-51 relative), glibc's within 1: where this holds, the
/// two round to the same float, and the table is bitwise the cpu's.
bool ropeTableRoundsRobustly(int64_t seq, int64_t dim, double theta,
                             const vecmath::RopeScaling &scaling = {}) {
  auto robust = [](double v) {
    const float f = static_cast<float>(v);
    if (!std::isfinite(f))
      return false;
    const float next = std::nextafter(f, v >= f ? INFINITY : -INFINITY);
    const double halfway = (static_cast<double>(f) + next) / 2.0;
    return std::fabs(v - halfway) > std::ldexp(std::fabs(v), -48);
  };
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const double power =
        std::pow(static_cast<double>(static_cast<float>(theta)),
                 static_cast<double>(exponent));
    if (!robust(power))
      return false;
    // Llama 3's scaling of it is float arithmetic, the same on both.
    const float inv = vecmath::ropeInvFreq(i, dim, theta, scaling);
    for (int64_t t = 0; t < seq; ++t) {
      const double a = static_cast<float>(t) * inv;
      if (!robust(std::cos(a)) || !robust(std::sin(a)))
        return false;
    }
  }
  return true;
}

TEST_F(CudaConformanceTest, LlamaElementwiseMatchTheCpu) {
  // No FMA contraction on either side, IEEE division and square root, the
  // cpu's formulas (backends/cpu/VecMath.h): sigmoid_grad, sqrt, rsqrt, rsqrt_grad
  // and div are bitwise, special values included. The others call expf:
  // - exp: CUDA's expf is within 2 ulp of exp, glibc's within 1: 3 ulp.
  // - sigmoid = 1 / (1 + e), silu = v / (1 + e): the two e differ by 3 ulp
  //   (3 * 2^-23 relative), 1 + e by no more relatively; with the two
  //   roundings on each side the quotients differ by 5 * 2^-23 relative:
  //   10 ulp (no result is subnormal for these inputs).
  // - silu_grad = dy s (1 + v (1 - s)) cancels near silu'(v) = 0
  //   (v ~ -1.28): s off by 5 * 2^-23 and the roundings bound the
  //   difference by |dy| (15 |v| + 8) 2^-23 <= |dy| (1 + |v|) 2^-19.
  // Measured on the emulator (glibc's expf on both sides): all bitwise,
  // which is its bound.
  const int64_t expUlps = kEmulator ? 0 : 3, sigmoidUlps = kEmulator ? 0 : 10;
  for (size_t n : {size_t(1), size_t(37), (size_t(1) << 16) + 3}) {
    auto a = twin(inputs(n, 1, 4.0f, true)), b = twin(inputs(n, 2, 4.0f, true));
    auto wide = twin(inputs(n, 3, 20.0f, true));
    std::vector<float> magnitudes = inputs(n, 4, 100.0f, true);
    for (float &v : magnitudes)
      v = std::fabs(v);
    auto positive = twin(magnitudes);
    auto out = output(n);
    const int64_t len = static_cast<int64_t>(n);
    const std::string size = " n=" + std::to_string(n);
    using Unary = void (*)(ztrt_ctx *, int32_t, const void *, void *, int64_t);
    using Binary = void (*)(ztrt_ctx *, int32_t, const void *, const void *,
                            void *, int64_t);
    auto unary = [&](Unary f, Twin<float> &x) {
      both([&](ztrt_ctx *c, bool d) {
        f(c, ZTRT_F32, at(x, d), at(out, d), len);
      });
      return fetch(out);
    };
    auto binary = [&](Binary f, Twin<float> &x, Twin<float> &y) {
      both([&](ztrt_ctx *c, bool d) {
        f(c, ZTRT_F32, at(x, d), at(y, d), at(out, d), len);
      });
      return fetch(out);
    };
    for (Twin<float> *x : {&a, &wide, &positive}) {
      const std::string in = (x == &a ? " x" : x == &wide ? " wide" : " |x|");
      expectUlps(unary(ztrt_exp, *x), out.host, expUlps, "exp" + in + size);
      expectUlps(unary(ztrt_sigmoid, *x), out.host, sigmoidUlps,
                 "sigmoid" + in + size);
      expectUlps(unary(ztrt_silu, *x), out.host, sigmoidUlps,
                 "silu" + in + size);
      expectBitwise(unary(ztrt_sqrt, *x), out.host, "sqrt" + in + size);
      expectBitwise(unary(ztrt_rsqrt, *x), out.host, "rsqrt" + in + size);
      std::vector<float> got = binary(ztrt_silu_grad, b, *x);
      const std::vector<float> &v = x->host, &dy = b.host;
      expectUlpsOrBound(
          got, out.host, sigmoidUlps,
          [&](size_t i) {
            return kEmulator ? 0.0
                             : std::fabs(dy[i]) * (1.0 + std::fabs(v[i])) *
                                   std::ldexp(1.0, -19);
          },
          "silu_grad" + in + size);
      expectBitwise(binary(ztrt_sigmoid_grad, b, *x), out.host,
                    "sigmoid_grad" + in + size);
      expectBitwise(binary(ztrt_rsqrt_grad, b, *x), out.host,
                    "rsqrt_grad" + in + size);
      expectBitwise(binary(ztrt_div, *x, b), out.host, "div" + in + size);
    }
    // In place: out aliases an input.
    both([&](ztrt_ctx *c, bool d) {
      ztrt_div(c, ZTRT_F32, at(a, d), at(b, d), at(a, d), len);
    });
    expectBitwise(fetch(a), a.host, "div in place" + size);
  }
}

TEST_F(CudaConformanceTest, ImportedActivationsMatchTheCpu) {
  // The activations the PyTorch importer adds (backends/cpu/VecMath.h, the same
  // expressions on both sides): tanh_grad is arithmetic only, bitwise. The
  // others call erff or expf, which CUDA computes within 2 ulp and glibc
  // within 1: 3 ulp for erf; gelu_erf = 0.5 x (1 + erf(x / sqrt 2))
  // cancels where erf nears -1, so its bound is absolute there, |x| 2^-21
  // (3 ulp of a value below 1, times |x| / 2, with margin); likewise
  // gelu_erf_grad, |dy| (1 + |x|) 2^-20; erf_grad = c exp(-x^2) dy: 3 ulp of
  // exp plus two roundings, 5 ulp; tanh (Cephes, expf for |x| >= 0.625):
  // 1 - 2 / (e + 1) loses at most 2 bits more, 10 ulp. Measured on the
  // emulator (glibc on both sides): bitwise, which is its bound.
  const int64_t erfUlps = kEmulator ? 0 : 3, expUlps = kEmulator ? 0 : 5,
                tanhUlps = kEmulator ? 0 : 10;
  for (size_t n : {size_t(1), size_t(37), (size_t(1) << 16) + 3}) {
    auto a = twin(inputs(n, 5, 4.0f, true)), b = twin(inputs(n, 6, 4.0f, true));
    auto out = output(n);
    const int64_t len = static_cast<int64_t>(n);
    const std::string size = " n=" + std::to_string(n);
    using Unary = void (*)(ztrt_ctx *, int32_t, const void *, void *, int64_t);
    using Binary = void (*)(ztrt_ctx *, int32_t, const void *, const void *,
                            void *, int64_t);
    auto unary = [&](Unary f, Twin<float> &x) {
      both([&](ztrt_ctx *c, bool d) {
        f(c, ZTRT_F32, at(x, d), at(out, d), len);
      });
      return fetch(out);
    };
    auto binary = [&](Binary f, Twin<float> &x, Twin<float> &y) {
      both([&](ztrt_ctx *c, bool d) {
        f(c, ZTRT_F32, at(x, d), at(y, d), at(out, d), len);
      });
      return fetch(out);
    };
    const std::vector<float> &v = a.host, &dy = b.host;
    expectUlps(unary(ztrt_erf, a), out.host, erfUlps, "erf" + size);
    expectUlps(unary(ztrt_tanh, a), out.host, tanhUlps, "tanh" + size);
    expectUlps(binary(ztrt_erf_grad, b, a), out.host, expUlps, "erf_grad" + size);
    expectBitwise(binary(ztrt_tanh_grad, b, a), out.host, "tanh_grad" + size);
    expectUlpsOrBound(
        unary(ztrt_gelu_erf, a), out.host, erfUlps,
        [&](size_t i) {
          return kEmulator ? 0.0 : std::fabs(v[i]) * std::ldexp(1.0, -21);
        },
        "gelu_erf" + size);
    expectUlpsOrBound(
        binary(ztrt_gelu_erf_grad, b, a), out.host, expUlps,
        [&](size_t i) {
          return kEmulator ? 0.0
                           : std::fabs(dy[i]) * (1.0 + std::fabs(v[i])) *
                                 std::ldexp(1.0, -20);
        },
        "gelu_erf_grad" + size);
  }
}

TEST_F(CudaConformanceTest, WhereAndDropoutAreBitwise) {
  // where copies bits; dropout draws the same 24 bits per element (base/Rng.h
  // on both sides) and does one float multiply: bitwise, NaN and inf
  // included, at every rank offset of the counter.
  for (int64_t outer : {int64_t(1), int64_t(7), int64_t(300)}) {
    const int64_t inner = 37, n = outer * inner;
    auto a = twin(inputs(n, 121, 1.0f, n >= 8)),
         b = twin(inputs(n, 122, 1.0f, n >= 8));
    auto mask = twin(maskValues(inner));
    auto out = output(n);
    const std::string what = " n=" + std::to_string(n);
    both([&](ztrt_ctx *c, bool d) {
      ztrt_where(c, ZTRT_F32, at(mask, d), at(a, d), at(b, d), at(out, d),
                 outer, inner);
    });
    expectBitwise(fetch(out), out.host, "where" + what);
    for (int64_t step : {1, 4}) {
      c()->step = g()->step = step;
      c()->seed = g()->seed = 99;
      for (double p : {0.0, 0.1, 0.5, 1.0}) {
        both([&](ztrt_ctx *c, bool d) {
          ztrt_dropout(c, ZTRT_F32, at(a, d), at(out, d), n, 3, p);
        });
        expectBitwise(fetch(out), out.host,
                      "dropout p=" + std::to_string(p) + what);
      }
    }
  }
}

TEST_F(CudaConformanceTest, MaskedFillIsBitwise) {
  // A copy of x's bits or the value rounded to float: no arithmetic.
  struct Case {
    int64_t outer, inner;
  };
  for (Case cs :
       {Case{1, 1}, Case{3, 37}, Case{2 * 3 * 5, 5 * 5}, Case{7, 1000}}) {
    const int64_t n = cs.outer * cs.inner;
    auto x = twin(inputs(n, 120, 1.0f, n >= 8));
    auto mask = twin(maskValues(cs.inner));
    auto out = output(n);
    const std::string what =
        " " + std::to_string(cs.outer) + "x" + std::to_string(cs.inner);
    for (double value : {-HUGE_VAL, 2.5, 0.1}) {
      both([&](ztrt_ctx *c, bool d) {
        ztrt_masked_fill(c, ZTRT_F32, at(x, d), at(mask, d), at(out, d),
                         cs.outer, cs.inner, value);
      });
      expectBitwise(fetch(out), out.host, "masked_fill" + what);
    }
    both([&](ztrt_ctx *c, bool d) {
      ztrt_masked_fill(c, ZTRT_F32, at(x, d), at(mask, d), at(x, d), cs.outer,
                       cs.inner, 0.0);
    });
    expectBitwise(fetch(x), x.host, "masked_fill in place" + what);
  }
}

TEST_F(CudaConformanceTest, RmsNormAndGrad) {
  // Both row paths, as in LayerNormAndGrad.
  for (auto shape : {std::pair<int64_t, int64_t>{1, 1},
                     {7, 16},
                     {5, 33},
                     {64, 1000},
                     {300, 768},
                     {5, 1025},
                     {9, 3000}}) {
    const int64_t rows = shape.first, cols = shape.second;
    auto x = twin(inputs(rows * cols, 140, 3.0f)),
         gamma = twin(inputs(cols, 141)), dy = twin(inputs(rows * cols, 142));
    auto y = output(rows * cols), dx = output(rows * cols),
         dgamma = output(cols);
    const std::string what =
        " " + std::to_string(rows) + "x" + std::to_string(cols);
    both([&](ztrt_ctx *c, bool d) {
      ztrt_rms_norm(c, ZTRT_F32, at(x, d), at(gamma, d), at(y, d), rows, cols,
                    1e-6);
      ztrt_rms_norm_grad(c, ZTRT_F32, at(dy, d), at(x, d), at(gamma, d),
                         at(dx, d), at(dgamma, d), rows, cols, 1e-6);
    });
    // The same double formulas with the sum of squares in another order (a
    // block tree): rstd differs by ~cols 2^-52 relative, and y = x rstd
    // gamma is a product (no cancellation): equal or adjacent floats.
    expectUlps(fetch(y), y.host, 1, "rms_norm" + what);
    // dx = rstd (g - xhat mean(g xhat)) can cancel: where it does, the
    // double difference's error (~1e-15 of terms that are O(1) here) is the
    // bound instead.
    expectUlpsOrAbs(fetch(dx), dx.host, 1, 1e-12, "rms_norm_grad dx" + what);
    // Column sums over rows in double, chunked instead of serial: adjacent
    // floats, or ~rows 2^-53 sum|terms| (< 1e-11 here) near zero.
    expectUlpsOrAbs(fetch(dgamma), dgamma.host, 1, 1e-11,
                    "rms_norm_grad dgamma" + what);
  }
}

TEST_F(CudaConformanceTest, RotaryEmbeddingIsBitwise) {
  // Both backends take cos / sin from vecmath::ropeCosSin (a table of one
  // [seq, dim / 2] block each) and rotate with two float products and a
  // sum, no FMA: bitwise, given the same table. That the table is the same
  // on a GPU is checked for each case (ropeTableRoundsRobustly).
  struct Case {
    int64_t outer, seq, inner, dim;
    double theta;
    vecmath::RopeScaling scaling = {};
  };
  // The last: Llama 3's scaling with wavelengths below 32 / 4, between, and
  // above 32 (each branch of ropeInvFreq).
  for (const Case &cs :
       {Case{1, 1, 1, 2, 10000.0}, Case{2, 7, 3, 16, 10000.0},
        Case{1, 5, 1, 6, 10000.0}, Case{3, 33, 4, 64, 500000.0},
        Case{1, 130, 2, 128, 10000.0},
        Case{2, 40, 2, 64, 500000.0, {8.0, 1.0, 4.0, 32.0}}}) {
    ASSERT_TRUE(ropeTableRoundsRobustly(cs.seq, cs.dim, cs.theta, cs.scaling))
        << "choose other test positions: this table may round differently "
           "on a GPU";
    const int64_t n = cs.outer * cs.seq * cs.inner * cs.dim;
    auto x = twin(inputs(n, 150, 2.0f, n >= 8)), out = output(n);
    const std::string what =
        " [" + std::to_string(cs.outer) + ", " + std::to_string(cs.seq) + ", " +
        std::to_string(cs.inner) + ", " + std::to_string(cs.dim) + "]";
    for (int inverse : {0, 1}) {
      both([&](ztrt_ctx *c, bool d) {
        ztrt_rotary_embedding(c, ZTRT_F32, at(x, d), at(out, d), cs.outer,
                              cs.seq, cs.inner, cs.dim, cs.theta,
                              cs.scaling.factor, cs.scaling.lowFreqFactor,
                              cs.scaling.highFreqFactor,
                              cs.scaling.originalMaxPositions, inverse);
      });
      expectBitwise(fetch(out), out.host,
                    std::string(inverse ? "rotary inverse" : "rotary") + what);
    }
    both([&](ztrt_ctx *c, bool d) {
      ztrt_rotary_embedding(c, ZTRT_F32, at(x, d), at(x, d), cs.outer, cs.seq,
                            cs.inner, cs.dim, cs.theta, cs.scaling.factor,
                            cs.scaling.lowFreqFactor, cs.scaling.highFreqFactor,
                            cs.scaling.originalMaxPositions, 0);
    });
    expectBitwise(fetch(x), x.host, "rotary in place" + what);
  }
}

TEST_F(CudaConformanceTest, MaxReductionAndGradAreBitwise) {
  // max: comparisons only, each output's elements in input order (segments
  // merged in order) under the cpu's rule (NaN wins; of equal values, +0
  // and -0, the first stays): bitwise, NaN and the sign of zero included.
  // reduce_max_grad: the same equality tests, an integer count and one
  // float division dy / ties: bitwise.
  const std::vector<int64_t> shape{6, 70, 3, 33};
  int64_t n = 1;
  for (int64_t v : shape)
    n *= v;
  // Quarters: many ties; signed zeros: every maximum a zero, -0 or +0
  // first; and NaN, infinities among quarters.
  std::vector<float> zeros(n);
  for (int64_t i = 0; i < n; ++i)
    zeros[i] = (i * 2654435761u) % 5 == 0 ? -1.0f : (i * 7) % 3 ? -0.0f : 0.0f;
  std::vector<std::pair<std::string, std::vector<float>>> sets{
      {"quarters", quarters(n, 160)},
      {"signed zeros", zeros},
      {"special", quarters(n, 161, true)}};
  for (auto &[name, values] : sets) {
    auto x = twin(values);
    for (const std::vector<int64_t> &mask :
         std::vector<std::vector<int64_t>>{{0, 0, 0, 0},
                                           {1, 0, 0, 0},
                                           {0, 0, 0, 1},
                                           {1, 1, 1, 0},
                                           {0, 1, 0, 1},
                                           {1, 1, 1, 1},
                                           {1, 0, 1, 1}}) {
      int64_t outN = 1;
      std::string what = " " + name + " mask";
      for (size_t d = 0; d < shape.size(); ++d) {
        outN *= mask[d] ? 1 : shape[d];
        what += std::to_string(mask[d]);
      }
      auto y = output(outN), dy = twin(inputs(outN, 162)), dx = output(n);
      both([&](ztrt_ctx *c, bool d) {
        ztrt_reduce(c, ZTRT_F32, at(x, d), at(y, d), 4, shape.data(),
                    mask.data(), 2);
        ztrt_reduce_max_grad(c, ZTRT_F32, at(dy, d), at(x, d), at(y, d),
                             at(dx, d), 4, shape.data(), mask.data());
      });
      expectBitwise(fetch(y), y.host, "reduce max" + what);
      expectBitwise(fetch(dx), dx.host, "reduce_max_grad" + what);
    }
  }
  // Few outputs, many rows (the segmented path), and everything at once.
  const std::vector<int64_t> bias{8192, 96};
  auto x = twin(quarters(8192 * 96, 163, true)), dx = output(8192 * 96);
  for (const std::vector<int64_t> &mask :
       std::vector<std::vector<int64_t>>{{1, 0}, {1, 1}}) {
    const int64_t outN = mask[1] ? 1 : 96;
    auto y = output(outN), dy = twin(inputs(outN, 164));
    both([&](ztrt_ctx *c, bool d) {
      ztrt_reduce(c, ZTRT_F32, at(x, d), at(y, d), 2, bias.data(), mask.data(),
                  2);
      ztrt_reduce_max_grad(c, ZTRT_F32, at(dy, d), at(x, d), at(y, d),
                           at(dx, d), 2, bias.data(), mask.data());
    });
    expectBitwise(fetch(y), y.host, "reduce max rows");
    expectBitwise(fetch(dx), dx.host, "reduce_max_grad rows");
  }
  // The ABI's meaning, not only agreement: ties share dy, a NaN takes the
  // maximum and no element matches it.
  const int64_t shape2[2] = {2, 4}, rowMask[2] = {0, 1};
  auto small = twin(std::vector<float>{1, 3, 3, 2, 0, NAN, 5, 1});
  auto maxes = output(2), ones = twin(std::vector<float>{1.0f, 1.0f}),
       grads = output(8);
  both([&](ztrt_ctx *c, bool d) {
    ztrt_reduce(c, ZTRT_F32, at(small, d), at(maxes, d), 2, shape2, rowMask, 2);
    ztrt_reduce_max_grad(c, ZTRT_F32, at(ones, d), at(small, d), at(maxes, d),
                         at(grads, d), 2, shape2, rowMask);
  });
  const std::vector<float> gotY = fetch(maxes), gotDx = fetch(grads);
  EXPECT_EQ(gotY[0], 3.0f);
  EXPECT_TRUE(std::isnan(gotY[1]));
  EXPECT_EQ(gotDx, (std::vector<float>{0, 0.5f, 0.5f, 0, 0, 0, 0, 0}));
  expectBitwise(gotDx, grads.host, "reduce_max_grad ties");
}

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

TYPED_TEST(CudaDTypeTest, ElementwiseAreTheFloatKernelsRounded) {
  ztrt_ctx *x = this->g();
  for (size_t n : {size_t(1), size_t(37), size_t(1) << 16}) {
    auto a = this->pair(this->values(n, 1, 4.0f, true)),
         b = this->pair(this->values(n, 2, 4.0f, true));
    auto out = this->output(n);
    const int64_t len = static_cast<int64_t>(n);
    const std::string size = " n=" + std::to_string(n);
    using P = decltype(a);
    auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
    this->each([&](int32_t ty, bool t) {
      ztrt_add(x, ty, at(a, t), at(b, t), at(out, t), len);
    });
    this->expectRounded(out, "add" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_sub(x, ty, at(a, t), at(b, t), at(out, t), len);
    });
    this->expectRounded(out, "sub" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_mul(x, ty, at(a, t), at(b, t), at(out, t), len);
    });
    this->expectRounded(out, "mul" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_scale(x, ty, at(a, t), at(out, t), len, -0.3);
    });
    this->expectRounded(out, "scale" + size);
    this->each(
        [&](int32_t ty, bool t) { ztrt_fill(x, ty, at(out, t), len, 0.1); });
    this->expectRounded(out, "fill" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_relu(x, ty, at(a, t), at(out, t), len);
    });
    this->expectRounded(out, "relu" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_relu_grad(x, ty, at(b, t), at(a, t), at(out, t), len);
    });
    this->expectRounded(out, "relu_grad" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_gelu(x, ty, at(a, t), at(out, t), len);
    });
    this->expectRounded(out, "gelu" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_gelu_grad(x, ty, at(b, t), at(a, t), at(out, t), len);
    });
    this->expectRounded(out, "gelu_grad" + size);
    // In place: out aliases an input.
    this->each([&](int32_t ty, bool t) {
      ztrt_add(x, ty, at(a, t), at(b, t), at(a, t), len);
    });
    this->expectRounded(a, "add in place" + size);
  }
  for (auto shape : {std::pair<int64_t, int64_t>{1, 1}, {5, 7}, {300, 96}}) {
    const int64_t rows = shape.first, cols = shape.second;
    auto in = this->pair(this->values(rows * cols, 3)),
         bias = this->pair(this->values(cols, 4));
    auto out = this->output(rows * cols);
    this->each([&](int32_t ty, bool t) {
      ztrt_bias_add(x, ty, TestFixture::at(in, t), TestFixture::at(bias, t),
                    TestFixture::at(out, t), rows, cols);
    });
    this->expectRounded(out, "bias_add");
  }
}

TYPED_TEST(CudaDTypeTest, OptimizerUpdatesAreTheFloatUpdatesRounded) {
  // Each step separately: the T states after a step are rounded, so the
  // next step's float run starts from them widened (resync). Three steps:
  // the first step's momentum rule, then the general one.
  ztrt_ctx *x = this->g();
  const int64_t n = 4099;
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  struct Sgd {
    double lr, momentum, dampening, decay;
    int nesterov;
  };
  for (Sgd h : {Sgd{0.1, 0.0, 0.0, 0.0, 0}, Sgd{0.05, 0.9, 0.0, 1e-2, 0},
                Sgd{0.05, 0.9, 0.1, 0.0, 0}, Sgd{0.01, 0.9, 0.0, 1e-3, 1}}) {
    auto p = this->pair(this->values(n, 5)),
         buf = this->pair(std::vector<TypeParam>(n, TypeParam(0.0f)));
    for (int64_t step = 1; step <= 3; ++step) {
      auto grad = this->pair(this->values(n, 10 + static_cast<uint32_t>(step)));
      x->step = step;
      this->each([&](int32_t ty, bool t) {
        ztrt_sgd_update(x, ty, at(p, t), at(grad, t), at(buf, t), n, h.lr,
                        h.momentum, h.dampening, h.decay, h.nesterov);
      });
      const std::string what = " step " + std::to_string(step);
      this->expectRounded(p, "sgd param" + what);
      this->expectRounded(buf, "sgd momentum" + what);
      this->resync(p);
      this->resync(buf);
    }
  }
  for (int decoupled : {0, 1})
    for (double decay : {0.0, 0.1}) {
      auto p = this->pair(this->values(n, 6)),
           m = this->pair(std::vector<TypeParam>(n, TypeParam(0.0f))),
           v = this->pair(std::vector<TypeParam>(n, TypeParam(0.0f)));
      for (int64_t step = 1; step <= 3; ++step) {
        auto grad =
            this->pair(this->values(n, 20 + static_cast<uint32_t>(step)));
        x->step = step;
        this->each([&](int32_t ty, bool t) {
          ztrt_adam_update(x, ty, at(p, t), at(grad, t), at(m, t), at(v, t), n,
                           1e-3, 0.9, 0.999, 1e-8, decay, decoupled);
        });
        const std::string what = " step " + std::to_string(step);
        this->expectRounded(p, "adam param" + what);
        this->expectRounded(m, "adam exp_avg" + what);
        this->expectRounded(v, "adam exp_avg_sq" + what);
        for (P *s : {&p, &m, &v})
          this->resync(*s);
      }
    }
}

TYPED_TEST(CudaDTypeTest, MatmulIsTheFloatMatmulRounded) {
  // bf16 / f16: cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F (float
  // products and sums, C rounded once); float: cublasSgemmStridedBatched.
  // The emulator implements both as the same float loop in k order, so
  // the T result is the float result rounded: bitwise. A GPU runs other
  // kernels for the two (16-bit tensor-core tiles, another k blocking), so
  // the float sums differ by up to the summation-order bound of
  // MatmulMatchesUpToSummationOrder, 2 k u sum|a b| (u = 2^-24), and the
  // two roundings to T by one more spacing of T: that is the GPU's
  // tolerance.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  struct Case {
    int64_t batch, m, n, k;
    int ta, tb;
    int64_t sa, sb; // -1: packed (m*k / k*n)
  };
  std::vector<Case> cases;
  for (int ta : {0, 1})
    for (int tb : {0, 1}) {
      cases.push_back({1, 33, 65, 127, ta, tb, -1, -1});
      cases.push_back({3, 17, 9, 31, ta, tb, -1, -1});
      cases.push_back({4, 8, 16, 12, ta, tb, 0, -1}); // shared A
      cases.push_back({4, 8, 16, 12, ta, tb, -1, 0}); // shared B
    }
  cases.push_back({1, 128, 96, 256, 0, 0, -1, -1});
  cases.push_back({2, 3, 4, 0, 0, 0, -1, -1}); // k = 0: zeros
  for (const Case &cs : cases) {
    const int64_t sa = cs.sa < 0 ? cs.m * cs.k : cs.sa;
    const int64_t sb = cs.sb < 0 ? cs.k * cs.n : cs.sb;
    const int64_t sc = cs.m * cs.n;
    // A stride of 0 shares one matrix across the batch.
    auto a = this->pair(this->values(static_cast<size_t>(std::max<int64_t>(
                                         sa ? cs.batch * sa : cs.m * cs.k, 1)),
                                     30));
    auto b = this->pair(this->values(static_cast<size_t>(std::max<int64_t>(
                                         sb ? cs.batch * sb : cs.k * cs.n, 1)),
                                     31));
    auto out = this->output(static_cast<size_t>(cs.batch * sc));
    this->each([&](int32_t ty, bool t) {
      ztrt_matmul(x, ty, at(a, t), at(b, t), at(out, t), cs.batch, cs.m, cs.n,
                  cs.k, cs.ta, cs.tb, sa, sb, sc);
    });
    const std::string what =
        "matmul batch=" + std::to_string(cs.batch) +
        " m=" + std::to_string(cs.m) + " n=" + std::to_string(cs.n) +
        " k=" + std::to_string(cs.k) + " ta=" + std::to_string(cs.ta) +
        " tb=" + std::to_string(cs.tb) + " sa=" + std::to_string(sa) +
        " sb=" + std::to_string(sb);
    if (kEmulator) {
      this->expectRounded(out, what);
      continue;
    }
    const std::vector<TypeParam> got =
        this->template download<TypeParam>(out.t, out.host.size());
    const std::vector<float> ref =
        this->template download<float>(out.f, out.host.size());
    const double spacing = std::ldexp(1.0, 1 - precisionBits<TypeParam>());
    int bad = 0;
    for (int64_t i = 0; i < cs.batch && bad < 5; ++i)
      for (int64_t r = 0; r < cs.m; ++r)
        for (int64_t col = 0; col < cs.n; ++col) {
          double mag = 0.0;
          for (int64_t l = 0; l < cs.k; ++l) {
            const float av = static_cast<float>(
                a.host[i * sa + (cs.ta ? l * cs.m + r : r * cs.k + l)]);
            const float bv = static_cast<float>(
                b.host[i * sb + (cs.tb ? col * cs.k + l : l * cs.n + col)]);
            mag += std::fabs(static_cast<double>(av) * bv);
          }
          const size_t e = static_cast<size_t>(i * sc + r * cs.n + col);
          const double want =
              static_cast<float>(static_cast<TypeParam>(ref[e]));
          // The float sums' difference, then each side's rounding to T
          // (relative spacing, or T's smallest subnormal near zero).
          const double order = 2.0 * cs.k * std::ldexp(1.0, -24) * mag;
          const double bound = order + spacing * (std::fabs(want) + order) +
                               static_cast<float>(TypeParam::fromBits(1));
          if (!(std::fabs(static_cast<float>(got[e]) - want) <= bound) &&
              bad++ < 5)
            ADD_FAILURE() << dtypeName(TestFixture::kType) << " " << what
                          << " C[" << e << "]: " << static_cast<float>(got[e])
                          << ", float kernel rounded " << want << ", bound "
                          << bound;
        }
  }
}

TYPED_TEST(CudaDTypeTest, LayerNormAndGradAreTheFloatOnesRounded) {
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  for (auto shape :
       {std::pair<int64_t, int64_t>{1, 1}, {7, 16}, {64, 1000}, {300, 96}}) {
    const int64_t rows = shape.first, cols = shape.second;
    auto in = this->pair(this->values(rows * cols, 40, 3.0f)),
         gamma = this->pair(this->values(cols, 41)),
         beta = this->pair(this->values(cols, 42)),
         dy = this->pair(this->values(rows * cols, 43));
    auto y = this->output(rows * cols), dx = this->output(rows * cols),
         dgamma = this->output(cols), dbeta = this->output(cols);
    const std::string what =
        " " + std::to_string(rows) + "x" + std::to_string(cols);
    this->each([&](int32_t ty, bool t) {
      ztrt_layer_norm(x, ty, at(in, t), at(gamma, t), at(beta, t), at(y, t),
                      rows, cols, 1e-5);
      ztrt_layer_norm_grad(x, ty, at(dy, t), at(in, t), at(gamma, t), at(dx, t),
                           at(dgamma, t), at(dbeta, t), rows, cols, 1e-5);
    });
    this->expectRounded(y, "layer_norm" + what);
    this->expectRounded(dx, "layer_norm_grad dx" + what);
    this->expectRounded(dgamma, "dgamma" + what);
    this->expectRounded(dbeta, "dbeta" + what);
  }
}

TYPED_TEST(CudaDTypeTest, SoftmaxAndGradAreTheFloatOnesRounded) {
  // For T != float the kernel keeps no exponential in y (it computes each
  // again for the store), so y holds only final, once-rounded values.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  for (int causal : {0, 1})
    for (auto shape :
         {std::pair<int64_t, int64_t>{8, 8}, {3 * 64, 64}, {2 * 257, 257}}) {
      const int64_t rows = !causal && shape.first == 8 ? 5 : shape.first;
      const int64_t cols = shape.second;
      auto in = this->pair(this->values(rows * cols, 50, 6.0f)),
           dy = this->pair(this->values(rows * cols, 51));
      auto y = this->output(rows * cols), dx = this->output(rows * cols);
      const std::string what = (causal ? " causal " : " ") +
                               std::to_string(rows) + "x" +
                               std::to_string(cols);
      this->each([&](int32_t ty, bool t) {
        ztrt_softmax(x, ty, at(in, t), at(y, t), rows, cols, causal);
      });
      this->expectRounded(y, "softmax" + what);
      // softmax_grad on the same y: the T side's, widened for float.
      this->resync(y);
      this->each([&](int32_t ty, bool t) {
        ztrt_softmax_grad(x, ty, at(dy, t), at(y, t), at(dx, t), rows, cols);
      });
      this->expectRounded(dx, "softmax_grad" + what);
    }
}

TYPED_TEST(CudaDTypeTest, LayoutKernelsAreTheFloatOnesRounded) {
  // transpose and broadcast with factor 1 move T's bits (which the float
  // run's rounding gives back exactly); broadcast's factor and reduce's
  // double sums are rounded once.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  struct Case {
    std::vector<int64_t> shape, perm;
  };
  for (const Case &cs : {Case{{3, 5}, {1, 0}}, Case{{2, 3, 4}, {2, 0, 1}},
                         Case{{2, 64, 4, 16}, {0, 2, 1, 3}},
                         Case{{3, 1, 5, 2}, {3, 2, 1, 0}}, Case{{7}, {0}}}) {
    int64_t n = 1;
    for (int64_t v : cs.shape)
      n *= v;
    auto in = this->pair(this->values(n, 60, 1.0f, n >= 8)),
         out = this->output(n);
    this->each([&](int32_t ty, bool t) {
      ztrt_transpose(x, ty, at(in, t), at(out, t),
                     static_cast<int64_t>(cs.shape.size()), cs.shape.data(),
                     cs.perm.data());
    });
    this->expectRounded(out, "transpose");
  }
  const std::vector<int64_t> shape{3, 4, 5, 2};
  const std::vector<std::vector<int64_t>> masks{
      {0, 0, 0, 0}, {1, 0, 0, 0}, {0, 0, 0, 1}, {1, 0, 1, 0},
      {0, 1, 1, 0}, {1, 1, 1, 1}, {1, 1, 0, 1}};
  for (const std::vector<int64_t> &mask : masks)
    for (double factor : {1.0, 0.125, -3.3}) {
      int64_t inN = 1;
      for (size_t d = 0; d < shape.size(); ++d)
        inN *= mask[d] ? 1 : shape[d];
      auto in = this->pair(this->values(inN, 61, 1.0f, inN >= 8)),
           out = this->output(3 * 4 * 5 * 2);
      this->each([&](int32_t ty, bool t) {
        ztrt_broadcast(x, ty, at(in, t), at(out, t), 4, shape.data(),
                       mask.data(), factor);
      });
      this->expectRounded(out, "broadcast");
    }
  const std::vector<int64_t> big{6, 70, 3, 33};
  int64_t n = 1;
  for (int64_t v : big)
    n *= v;
  auto in = this->pair(this->values(n, 70));
  for (const std::vector<int64_t> &mask : masks)
    for (int mean : {0, 1}) {
      int64_t outN = 1;
      for (size_t d = 0; d < big.size(); ++d)
        outN *= mask[d] ? 1 : big[d];
      auto out = this->output(outN);
      this->each([&](int32_t ty, bool t) {
        ztrt_reduce(x, ty, at(in, t), at(out, t), 4, big.data(), mask.data(),
                    mean);
      });
      this->expectRounded(out, "reduce");
    }
  // A bias gradient's shape: few outputs, many rows (the chunked path).
  const std::vector<int64_t> bias{8192, 96}, rowMask{1, 0};
  auto rowsIn = this->pair(this->values(8192 * 96, 71)), out = this->output(96);
  this->each([&](int32_t ty, bool t) {
    ztrt_reduce(x, ty, at(rowsIn, t), at(out, t), 2, bias.data(),
                rowMask.data(), 0);
  });
  this->expectRounded(out, "reduce rows");
}

TYPED_TEST(CudaDTypeTest, CrossEntropyAndGradAreTheFloatOnesRounded) {
  // The loss is one float for every dtype: the T kernel's must be the float
  // kernel's, bit for bit (the same double sums of the same widened
  // logits). dloss is a float too.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  const int64_t rows = 300, classes = 1000;
  std::vector<int32_t> labelValues(rows);
  for (int64_t r = 0; r < rows; ++r)
    labelValues[r] = static_cast<int32_t>((r * 7919) % classes);
  void *labels = this->upload(labelValues);
  void *dloss = this->upload(std::vector<float>{0.7f});
  void *lossT = this->upload(std::vector<float>{NAN});
  void *lossF = this->upload(std::vector<float>{NAN});
  auto logits = this->pair(this->values(rows * classes, 80, 8.0f));
  auto dlogits = this->output(rows * classes);
  this->each([&](int32_t ty, bool t) {
    ztrt_cross_entropy(x, ty, at(logits, t), labels, t ? lossT : lossF, rows,
                       classes);
    ztrt_cross_entropy_grad(x, ty, dloss, at(logits, t), labels, at(dlogits, t),
                            rows, classes);
  });
  const float gotLoss = this->template download<float>(lossT, 1)[0];
  const float refLoss = this->template download<float>(lossF, 1)[0];
  EXPECT_EQ(bits(gotLoss), bits(refLoss))
      << dtypeName(TestFixture::kType) << " cross_entropy: " << gotLoss
      << ", float kernel " << refLoss;
  this->expectRounded(dlogits, "cross_entropy_grad");
}

TYPED_TEST(CudaDTypeTest, CrossEntropyWithGradIsTheFloatOneRounded) {
  // The fused loss and adjoint in T against the float kernel: the loss bit
  // for bit, the gradient the float one rounded once (as the pair above).
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  const int64_t rows = 300, classes = 1000;
  std::vector<int32_t> labelValues(rows);
  for (int64_t r = 0; r < rows; ++r)
    labelValues[r] = static_cast<int32_t>((r * 7919) % classes);
  void *labels = this->upload(labelValues);
  void *dloss = this->upload(std::vector<float>{0.7f});
  void *lossT = this->upload(std::vector<float>{NAN});
  void *lossF = this->upload(std::vector<float>{NAN});
  auto logits = this->pair(this->values(rows * classes, 82, 8.0f));
  auto dlogits = this->output(rows * classes);
  this->each([&](int32_t ty, bool t) {
    ztrt_cross_entropy_with_grad(x, ty, at(logits, t), labels, dloss,
                                 t ? lossT : lossF, at(dlogits, t), rows,
                                 classes);
  });
  const float gotLoss = this->template download<float>(lossT, 1)[0];
  const float refLoss = this->template download<float>(lossF, 1)[0];
  EXPECT_EQ(bits(gotLoss), bits(refLoss))
      << dtypeName(TestFixture::kType) << " cross_entropy_with_grad: "
      << gotLoss << ", float kernel " << refLoss;
  this->expectRounded(dlogits, "cross_entropy_with_grad");
}

TYPED_TEST(CudaDTypeTest, EmbeddingAndGradAreTheFloatOnesRounded) {
  // embedding copies rows of T; embedding_grad accumulates in a float
  // scratch table in index order (the float kernel's additions in its
  // order) and rounds each element once.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  const int64_t vocab = 50, dim = 300, nIds = 1000;
  std::vector<int32_t> idValues(nIds);
  for (int64_t i = 0; i < nIds; ++i)
    idValues[i] = static_cast<int32_t>((i * i * 31 + 7) % 37); // repeats, gaps
  idValues[5] = 49;
  void *ids = this->upload(idValues);
  void *same = this->upload(std::vector<int32_t>(nIds, 3));
  auto table = this->pair(this->values(vocab * dim, 90, 1.0f, true)),
       dy = this->pair(this->values(nIds * dim, 91));
  auto out = this->output(nIds * dim), dtable = this->output(vocab * dim);
  this->each([&](int32_t ty, bool t) {
    ztrt_embedding(x, ty, at(table, t), ids, at(out, t), nIds, vocab, dim);
    ztrt_embedding_grad(x, ty, at(dy, t), ids, at(dtable, t), nIds, vocab, dim);
  });
  this->expectRounded(out, "embedding");
  this->expectRounded(dtable, "embedding_grad");
  // Every id the same: one row sums all of dy.
  this->each([&](int32_t ty, bool t) {
    ztrt_embedding_grad(x, ty, at(dy, t), same, at(dtable, t), nIds, vocab,
                        dim);
  });
  this->expectRounded(dtable, "embedding_grad one id");
}

TYPED_TEST(CudaDTypeTest, LlamaElementwiseAreTheFloatKernelsRounded) {
  // The same float formulas on the widened values, rounded once: bitwise
  // whatever CUDA's expf returns, since both runs call the same one.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  using T = TypeParam;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  for (size_t n : {size_t(1), size_t(37), (size_t(1) << 16) + 3}) {
    std::vector<T> magnitudes = this->values(n, 4, 100.0f, true);
    for (T &v : magnitudes)
      v = T(std::fabs(static_cast<float>(v)));
    auto a = this->pair(this->values(n, 1, 4.0f, true)),
         b = this->pair(this->values(n, 2, 4.0f, true)),
         wide = this->pair(this->values(n, 3, 20.0f, true)),
         positive = this->pair(magnitudes);
    auto out = this->output(n);
    const int64_t len = static_cast<int64_t>(n);
    using Unary = void (*)(ztrt_ctx *, int32_t, const void *, void *, int64_t);
    using Binary = void (*)(ztrt_ctx *, int32_t, const void *, const void *,
                            void *, int64_t);
    for (P *in : {&a, &wide, &positive}) {
      const std::string what = (in == &a      ? " x"
                                : in == &wide ? " wide"
                                              : " |x|") +
                               std::string(" n=") + std::to_string(n);
      for (auto [f, name] : {std::pair<Unary, const char *>{ztrt_exp, "exp"},
                             {ztrt_sigmoid, "sigmoid"},
                             {ztrt_silu, "silu"},
                             {ztrt_sqrt, "sqrt"},
                             {ztrt_rsqrt, "rsqrt"}}) {
        this->each(
            [&](int32_t ty, bool t) { f(x, ty, at(*in, t), at(out, t), len); });
        this->expectRounded(out, name + what);
      }
      for (auto [f, name] :
           {std::pair<Binary, const char *>{ztrt_silu_grad, "silu_grad"},
            {ztrt_sigmoid_grad, "sigmoid_grad"},
            {ztrt_rsqrt_grad, "rsqrt_grad"}}) {
        this->each([&](int32_t ty, bool t) {
          f(x, ty, at(b, t), at(*in, t), at(out, t), len);
        });
        this->expectRounded(out, name + what);
      }
      this->each([&](int32_t ty, bool t) {
        ztrt_div(x, ty, at(*in, t), at(b, t), at(out, t), len);
      });
      this->expectRounded(out, "div" + what);
    }
  }
  for (auto shape : {std::pair<int64_t, int64_t>{1, 1}, {3, 37}, {30, 25}}) {
    const int64_t outer = shape.first, inner = shape.second;
    auto in = this->pair(this->values(outer * inner, 120, 1.0f, true));
    auto out = this->output(outer * inner);
    void *mask = this->upload(maskValues(inner));
    for (double value : {-HUGE_VAL, 2.5, 0.1}) {
      this->each([&](int32_t ty, bool t) {
        ztrt_masked_fill(x, ty, at(in, t), mask, at(out, t), outer, inner,
                         value);
      });
      this->expectRounded(out, "masked_fill");
    }
    auto other = this->pair(this->values(outer * inner, 121, 1.0f, true));
    this->each([&](int32_t ty, bool t) {
      ztrt_where(x, ty, mask, at(in, t), at(other, t), at(out, t), outer,
                 inner);
    });
    this->expectRounded(out, "where");
    x->step = 2;
    for (double p : {0.1, 0.5}) {
      this->each([&](int32_t ty, bool t) {
        ztrt_dropout(x, ty, at(in, t), at(out, t), outer * inner, 1, p);
      });
      this->expectRounded(out, "dropout");
    }
  }
}

TYPED_TEST(CudaDTypeTest, RmsNormAndGradAreTheFloatOnesRounded) {
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  for (auto shape : {std::pair<int64_t, int64_t>{1, 1},
                     {7, 16},
                     {5, 33},
                     {64, 1000},
                     {300, 96}}) {
    const int64_t rows = shape.first, cols = shape.second;
    auto in = this->pair(this->values(rows * cols, 140, 3.0f)),
         gamma = this->pair(this->values(cols, 141)),
         dy = this->pair(this->values(rows * cols, 142));
    auto y = this->output(rows * cols), dx = this->output(rows * cols),
         dgamma = this->output(cols);
    const std::string what =
        " " + std::to_string(rows) + "x" + std::to_string(cols);
    this->each([&](int32_t ty, bool t) {
      ztrt_rms_norm(x, ty, at(in, t), at(gamma, t), at(y, t), rows, cols, 1e-6);
      ztrt_rms_norm_grad(x, ty, at(dy, t), at(in, t), at(gamma, t), at(dx, t),
                         at(dgamma, t), rows, cols, 1e-6);
    });
    this->expectRounded(y, "rms_norm" + what);
    this->expectRounded(dx, "rms_norm_grad dx" + what);
    this->expectRounded(dgamma, "rms_norm_grad dgamma" + what);
  }
}

TYPED_TEST(CudaDTypeTest, RotaryEmbeddingIsTheFloatOneRounded) {
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  struct Case {
    int64_t outer, seq, inner, dim;
    double theta;
  };
  for (const Case &cs :
       {Case{1, 1, 1, 2, 10000.0}, Case{2, 7, 3, 16, 10000.0},
        Case{1, 5, 1, 6, 10000.0}, Case{3, 33, 4, 64, 500000.0}}) {
    const int64_t n = cs.outer * cs.seq * cs.inner * cs.dim;
    auto in = this->pair(this->values(n, 150, 2.0f, n >= 8));
    auto out = this->output(n);
    for (int inverse : {0, 1}) {
      this->each([&](int32_t ty, bool t) {
        ztrt_rotary_embedding(x, ty, at(in, t), at(out, t), cs.outer, cs.seq,
                              cs.inner, cs.dim, cs.theta, 0.0, 1.0, 4.0, 8192.0,
                              inverse);
      });
      this->expectRounded(out, inverse ? "rotary inverse" : "rotary");
    }
    this->each([&](int32_t ty, bool t) {
      ztrt_rotary_embedding(x, ty, at(in, t), at(in, t), cs.outer, cs.seq,
                            cs.inner, cs.dim, cs.theta, 0.0, 1.0, 4.0, 8192.0,
                            0);
    });
    this->expectRounded(in, "rotary in place");
  }
}

TYPED_TEST(CudaDTypeTest, MaxReductionAndGradAreTheFloatOnesRounded) {
  // The maximum of values of T is one of them (rounding it is exact); the
  // ties and the division dy / ties are the float kernel's.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  using T = TypeParam;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  const std::vector<int64_t> shape{6, 70, 3, 33};
  int64_t n = 1;
  for (int64_t v : shape)
    n *= v;
  const std::vector<float> grid = quarters(n, 161, true);
  std::vector<T> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = T(grid[i]);
  auto in = this->pair(values);
  for (const std::vector<int64_t> &mask :
       std::vector<std::vector<int64_t>>{{0, 0, 0, 0},
                                         {1, 0, 0, 0},
                                         {0, 1, 0, 1},
                                         {1, 1, 1, 1},
                                         {1, 0, 1, 1}}) {
    int64_t outN = 1;
    for (size_t d = 0; d < shape.size(); ++d)
      outN *= mask[d] ? 1 : shape[d];
    auto y = this->output(outN), dx = this->output(n);
    auto dy = this->pair(this->values(outN, 162));
    this->each([&](int32_t ty, bool t) {
      ztrt_reduce(x, ty, at(in, t), at(y, t), 4, shape.data(), mask.data(), 2);
      ztrt_reduce_max_grad(x, ty, at(dy, t), at(in, t), at(y, t), at(dx, t), 4,
                           shape.data(), mask.data());
    });
    this->expectRounded(y, "reduce max");
    this->expectRounded(dx, "reduce_max_grad");
  }
}

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

/// The collectives in a world of one, through the copy path (plain) and
/// through a one-rank NCCL communicator (Nccl): bit-exact copies, as the
/// cpu backend's.
class CudaCollectiveTest : public CudaConformanceTest,
                           public ::testing::WithParamInterface<bool> {
protected:
  CudaOptions options() const override {
    CudaOptions o;
    o.ncclInWorldOfOne = GetParam();
    return o;
  }
};

TEST_P(CudaCollectiveTest, EnqueuedAndCopiesBitwise) {
  EXPECT_TRUE(g()->commEnqueued());
  EXPECT_FALSE(g()->commThreaded());
  const int64_t n = (1 << 18) + 3;
  std::vector<float> values = inputs(n, 120, 1.0f, true);
  values[1] = -0.0f;
  uint32_t payload = 0x7fc01234u; // a NaN with a payload, copied as is
  std::memcpy(&values[2], &payload, 4);
  for (int kind = 0; kind < 3; ++kind)
    for (int mean : {0, 1}) {
      auto in = twin(values), out = output(n);
      both([&](ztrt_ctx *c, bool d) {
        if (kind == 0)
          ztrt_all_reduce(c, ZTRT_F32, at(in, d), at(out, d), n, mean);
        else if (kind == 1)
          ztrt_reduce_scatter(c, ZTRT_F32, at(in, d), at(out, d), n, mean);
        else
          ztrt_all_gather(c, ZTRT_F32, at(in, d), at(out, d), n);
      });
      std::vector<float> got = fetch(out);
      ASSERT_EQ(std::memcmp(got.data(), values.data(), n * 4), 0)
          << "collective " << kind << " mean " << mean << " is not a copy";
      // In place.
      both([&](ztrt_ctx *c, bool d) {
        const int64_t h =
            kind == 0 ? ztrt_all_reduce_start(c, ZTRT_F32, at(in, d), at(in, d),
                                              n, mean)
            : kind == 1
                ? ztrt_reduce_scatter_start(c, ZTRT_F32, at(in, d), at(in, d),
                                            n, mean)
                : ztrt_all_gather_start(c, ZTRT_F32, at(in, d), at(in, d), n);
        ztrt_wait(c, h);
      });
      got = fetch(in);
      ASSERT_EQ(std::memcmp(got.data(), values.data(), n * 4), 0);
    }
  auto buf = twin(values);
  ztrt_bcast(g(), ZTRT_F32, buf.dev, n, 0);
  std::vector<float> got = fetch(buf);
  EXPECT_EQ(std::memcmp(got.data(), values.data(), n * 4), 0);
}

TEST_P(CudaCollectiveTest, SeveralInFlightOrderedAgainstCompute) {
  // Each input is written by a kernel just before its collective starts and
  // each output read by a kernel just after its wait: the events must
  // order them (a missing wait would read stale data).
  const int64_t n = 1 << 20;
  std::vector<Twin<float>> ins, outs;
  std::vector<int64_t> handles;
  for (int i = 0; i < 4; ++i) {
    ins.push_back(output(n));
    outs.push_back(output(n));
  }
  for (int i = 0; i < 4; ++i) {
    ztrt_fill(g(), ZTRT_F32, ins[i].dev, n, 1.0 + i);
    handles.push_back(
        ztrt_all_reduce_start(g(), ZTRT_F32, ins[i].dev, outs[i].dev, n, 0));
  }
  for (int i : {2, 0, 3, 1}) {
    ztrt_wait(g(), handles[i]);
    ztrt_scale(g(), ZTRT_F32, outs[i].dev, outs[i].dev, n, 2.0);
  }
  g()->synchronize();
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(g()->collectiveCompleted(handles[i]));
    std::vector<float> got = fetch(outs[i]);
    for (float v : got)
      ASSERT_EQ(v, 2.0f * (1.0f + i)) << "collective " << i;
  }
  // Overlap accounting comes from the device's events at synchronize.
  const OverlapStats &overlap = g()->overlap();
  EXPECT_GT(overlap.commNanos, 0);
  EXPECT_GE(overlap.exposedNanos, 0);
  EXPECT_GE(overlap.hiddenFraction(), 0.0);
  EXPECT_LE(overlap.hiddenFraction(), 1.0);
  EXPECT_EQ(g()->communication(Collective::AllReduce).calls, 4);
  EXPECT_EQ(g()->communication(Collective::AllReduce).bytes, 0); // world of one
}

TEST_P(CudaCollectiveTest, UnwaitedCollectiveIsFatal) {
  auto in = output(16);
  ztrt_all_gather_start(g(), ZTRT_F32, in.dev, in.dev, 16);
  EXPECT_EXIT(g()->requireCollectivesWaited("step", 1),
              ::testing::ExitedWithCode(1),
              "step 1: collective started but never waited");
  EXPECT_EXIT(ztrt_wait(g(), 42), ::testing::ExitedWithCode(1),
              "unknown collective handle 42");
}

TEST_P(CudaCollectiveTest, SixteenBitCollectivesAreCopies) {
  // bf16 and f16 in a world of one: every collective is a bit-exact copy
  // of 2-byte elements (NCCL's ncclBfloat16 / ncclFloat16 in the Nccl
  // variant), whatever the bits (NaN payloads, infinities, subnormals).
  const int64_t n = (1 << 16) + 3;
  std::vector<uint16_t> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = static_cast<uint16_t>(i * 40503u);
  for (int32_t ty : {ZTRT_BF16, ZTRT_F16}) {
    for (int kind = 0; kind < 3; ++kind)
      for (int mean : {0, 1}) {
        auto in = twin(values), out = twin(std::vector<uint16_t>(n, 0xffff));
        if (kind == 0)
          ztrt_all_reduce(g(), ty, in.dev, out.dev, n, mean);
        else if (kind == 1)
          ztrt_reduce_scatter(g(), ty, in.dev, out.dev, n, mean);
        else
          ztrt_all_gather(g(), ty, in.dev, out.dev, n);
        std::vector<uint16_t> got = fetch(out);
        ASSERT_EQ(std::memcmp(got.data(), values.data(), n * sizeof(uint16_t)),
                  0)
            << "dtype " << ty << " collective " << kind << " mean " << mean
            << " is not a copy";
      }
    auto buf = twin(values);
    ztrt_bcast(g(), ty, buf.dev, n, 0);
    std::vector<uint16_t> got = fetch(buf);
    EXPECT_EQ(std::memcmp(got.data(), values.data(), n * sizeof(uint16_t)), 0);
  }
  // A world of one moves nothing over the wire, whatever the dtype.
  EXPECT_EQ(g()->communication(Collective::AllReduce).wireBytes, 0);
}

INSTANTIATE_TEST_SUITE_P(Transport, CudaCollectiveTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return info.param ? "Nccl" : "Copy";
                         });

TEST(CudaBackendTest, CublasAndNcclLoadWithEveryFunction) {
  // dlopen and dlsym only (no GPU needed): the paths CMake recorded work
  // and every function the backend calls is there.
  int major = 0, version = 0;
  ASSERT_EQ(cuda::cublas().getProperty(MAJOR_VERSION, &major),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_GE(major, 11);
  ASSERT_EQ(cuda::nccl().getVersion(&version), ncclSuccess);
  EXPECT_GE(version, 21000) << "NCCL 2.10 or newer";
}

TEST(CudaBackendTest, DeviceCountSaysWhyThereIsNone) {
  std::string reason;
  const int count = cudaDeviceCount(&reason);
  if (count > 0)
    GTEST_SKIP() << count << " CUDA device(s) present";
  EXPECT_FALSE(reason.empty());
  EXPECT_NE(reason.find("cudaGetDeviceCount"), std::string::npos) << reason;
}

TEST(CudaBackendTest, NoDeviceIsOneLine) {
  std::string reason;
  if (cudaDeviceCount(&reason) > 0)
    GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EXIT(selectCudaDevice(CommunicatorParams{}),
              ::testing::ExitedWithCode(1),
              "ztrain: error: --backend cuda: no CUDA device: "
              "cudaGetDeviceCount returned");
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
