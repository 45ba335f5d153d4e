//===- CudaOptimizerConformanceTest.cpp - Cuda conformance: optimizer -----===//
//
// Part of ztrain's runtime tests: the cuda conformance suite
// (CudaConformanceTest.cpp's file comment) for the f32 optimizer updates
// and the host step (host-placed and nvme states stepped on the host,
// synchronously or beside the step).
//
//===----------------------------------------------------------------------===//

#include "CudaConformance.h"

using namespace ztrt;
using namespace ztrt::test;

namespace {

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

} // namespace

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

namespace {

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

} // namespace
