//===- OffloadTest.cpp - zero-offload's runtime side ----------------------===//
//
// A descriptor's `space` placements parse (and bad ones are refused with the
// line); an nvme-resident state round-trips through its swap file whatever
// its size (the file holds whole 4096-byte blocks); the swap entry points
// move whole files into and out of the buffer the step gives, count the
// bytes, and refuse a state that is not on nvme, an unaligned buffer and a
// ztrt_state of a swapped state with one line; swap buffers are accounted
// as host memory, apart from the device's peak.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "step/Context.h"
#include "step/Descriptor.h"
#include "io/SwapIO.h"

#include <cstring>

using namespace ztrt;
using namespace ztrt::test;

TEST(OffloadTest, DescriptorSpaces) {
  Descriptor d = parseDescriptor(
      "ztrain-descriptor 1\n"
      "grid 2\n"
      "param w f32 2 4 3 init zeros 0 store 6 shard\n"
      "state w.m f32 2 4 3 of w store 6 shard space nvme\n"
      "state w.v f32 2 4 3 of w store 6 shard space host\n"
      "state w.x f32 2 4 3 of w store 6 shard\n"
      "state w.y f32 2 4 3 of w space nvme\n");
  ASSERT_EQ(d.states.size(), 4u);
  EXPECT_EQ(d.states[0].space, MemorySpace::Nvme);
  EXPECT_EQ(d.states[0].storeElems, 6);
  EXPECT_EQ(d.states[1].space, MemorySpace::Host);
  EXPECT_EQ(d.states[2].space, MemorySpace::Device);
  EXPECT_EQ(d.states[3].space, MemorySpace::Nvme);
  EXPECT_EQ(d.states[3].storeElems, 12);
  // What the rank allocates leaves the nvme states out (they live in files).
  EXPECT_EQ(plannedBytes(d).modelStates, 24 + 24 + 24);
  // A device backend's start-up check counts its device's bytes only: the
  // host copies of activations and of spilled gradients, and the nvme
  // states' swap buffers (stepped on the host), are host memory; the
  // parameters' swap buffers have a device copy.
  Descriptor arenas = parseDescriptor("ztrain-descriptor 1\n"
                                      "arena activations 64\n"
                                      "arena host_activations 32\n"
                                      "arena host_gradients 16\n"
                                      "arena swap_buffers 4096\n"
                                      "arena state_swap_buffers 8192\n");
  EXPECT_EQ(plannedBytes(arenas).arenas, 64 + 32 + 16 + 4096 + 8192);
  EXPECT_EQ(plannedBytes(arenas, /*deviceOnly=*/true).arenas, 64 + 4096);
  EXPECT_EXIT(parseDescriptor("ztrain-descriptor 1\n"
                              "param w f32 1 4 init zeros 0\n"
                              "state w.m f32 1 4 of w space ssd\n"),
              ::testing::ExitedWithCode(1),
              "line 3.*unknown memory space 'ssd' \\(expected device, host or "
              "nvme\\)");
  EXPECT_EXIT(parseDescriptor("ztrain-descriptor 1\n"
                              "param w f32 1 4 init zeros 0\n"
                              "state w.m f32 1 4 of w space nvme extra\n"),
              ::testing::ExitedWithCode(1), "line 3.*unexpected trailing fields");
}

namespace {

/// A context with `sizes.size()` f32 states, all on nvme under `dir`.
std::unique_ptr<ztrt_ctx> swappedContext(const TempDir &dir,
                                         const std::vector<int64_t> &sizes) {
  auto ctx = cpuContext();
  int64_t total = 0;
  for (int64_t n : sizes)
    total += SwapSpace::roundUp(4 * n);
  ctx->swap = std::make_unique<SwapSpace>(dir.path(""), 0, total);
  for (size_t i = 0; i < sizes.size(); ++i) {
    ctx->states.push_back(nullptr);
    ctx->stateFiles.push_back(
        ctx->swap->createFile("s" + std::to_string(i), 4 * sizes[i]));
    ctx->stateFileBytes.push_back(SwapSpace::roundUp(4 * sizes[i]));
  }
  return ctx;
}

} // namespace

TEST(OffloadTest, StatesRoundTripThroughTheirFiles) {
  TempDir dir;
  // Below, at and above one block, and not a multiple of it.
  const std::vector<int64_t> sizes = {1, 1024, 1025, 70001};
  auto ctx = swappedContext(dir, sizes);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<float> values = testValues(static_cast<size_t>(sizes[i]),
                                           static_cast<uint32_t>(i + 1));
    ctx->stateFromHost(i, values.data(), 4 * sizes[i]);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<float> back(static_cast<size_t>(sizes[i]), -1.0f);
    ctx->stateToHost(i, back.data(), 4 * sizes[i]);
    EXPECT_EQ(back, testValues(static_cast<size_t>(sizes[i]),
                               static_cast<uint32_t>(i + 1)))
        << "state " << i;
  }
  // Initialisation and checkpoints are not the step's swaps.
  EXPECT_EQ(ctx->offload.reads + ctx->offload.writes, 0);
}

TEST(OffloadTest, SwapEntryPointsMoveWholeFilesThroughTheStepsBuffer) {
  TempDir dir;
  const int64_t n = 3000; // 12000 bytes: three blocks
  auto ctx = swappedContext(dir, {n});
  std::vector<float> values = testValues(n, 7);
  ctx->stateFromHost(0, values.data(), 4 * n);
  void *buffer = ctx->allocate(SwapSpace::roundUp(4 * n),
                               ZTRT_CAT_SWAP_BUFFERS, "test");
  ASSERT_EQ(reinterpret_cast<uintptr_t>(buffer) % 4096, 0u);
  ztrt_swap_wait(ctx.get(), ztrt_swap_in(ctx.get(), ZTRT_SWAP_STATE, 0, buffer));
  float *m = static_cast<float *>(buffer);
  EXPECT_EQ(std::memcmp(m, values.data(), 4 * n), 0);
  for (int64_t i = 0; i < n; ++i)
    m[i] = 2.0f * m[i] + 1.0f; // an "update" in the buffer
  ztrt_swap_wait(ctx.get(), ztrt_swap_out(ctx.get(), ZTRT_SWAP_STATE, 0, buffer));
  std::vector<float> back(n);
  ctx->stateToHost(0, back.data(), 4 * n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(back[i], 2.0f * values[i] + 1.0f) << i;
  EXPECT_EQ(ctx->offload.reads, 1);
  EXPECT_EQ(ctx->offload.writes, 1);
  EXPECT_EQ(ctx->offload.readBytes, 12288);
  EXPECT_EQ(ctx->offload.writeBytes, 12288);
  // Host memory: in the total, not in the device's peak.
  EXPECT_EQ(ctx->memory().peak[ZTRT_CAT_SWAP_BUFFERS], 12288);
  EXPECT_EQ(ctx->memory().peakTotal, 12288);
  EXPECT_EQ(ctx->memory().peakDevice, 0);
  ctx->deallocate(buffer, "test");
}

TEST(OffloadTest, AnnouncedUpdatesRunAtTheirCallOnTheCpu) {
  // The compiled step announces an update of nvme states
  // (ztrt_update_async; zero-offload's dist.async_update) and waits for it
  // before their write-back. On the CPU backend host memory is the
  // device's: the update runs at its call, nothing is queued, and the wait
  // is a no-op; the states the write-back then writes are the update's.
  TempDir dir;
  const int64_t n = 3000;
  auto ctx = swappedContext(dir, {n, n});
  ztrt_ctx *x = ctx.get();
  void *m = x->allocate(SwapSpace::roundUp(4 * n), ZTRT_CAT_STATE_SWAP_BUFFERS,
                        "m");
  void *v = x->allocate(SwapSpace::roundUp(4 * n), ZTRT_CAT_STATE_SWAP_BUFFERS,
                        "v");
  ztrt_swap_wait(x, ztrt_swap_in(x, ZTRT_SWAP_STATE, 0, m));
  ztrt_swap_wait(x, ztrt_swap_in(x, ZTRT_SWAP_STATE, 1, v));
  std::vector<float> p = testValues(n, 11), g = testValues(n, 12);
  std::vector<float> rp = p, rm(n), rv(n);
  std::memcpy(rm.data(), m, 4 * n);
  std::memcpy(rv.data(), v, 4 * n);
  x->step = 1;
  // The reference: the same update, not announced.
  ztrt_adam_update(x, ZTRT_F32, rp.data(), g.data(), rm.data(), rv.data(), n,
                   1e-3, 0.9, 0.999, 1e-8, 0.1, 1);
  ztrt_update_async(x, p.data());
  ztrt_adam_update(x, ZTRT_F32, p.data(), g.data(), m, v, n, 1e-3, 0.9,
                   0.999, 1e-8, 0.1, 1);
  EXPECT_EQ(x->pendingHostSteps(), 0u);
  EXPECT_EQ(std::memcmp(p.data(), rp.data(), 4 * n), 0);
  EXPECT_EQ(std::memcmp(m, rm.data(), 4 * n), 0);
  ztrt_update_wait(x, p.data());
  x->requireUpdatesWaited("test");
  ztrt_swap_wait(x, ztrt_swap_out(x, ZTRT_SWAP_STATE, 0, m));
  ztrt_swap_wait(x, ztrt_swap_out(x, ZTRT_SWAP_STATE, 1, v));
  std::vector<float> back(n);
  x->stateToHost(1, back.data(), 4 * n);
  EXPECT_EQ(std::memcmp(back.data(), rv.data(), 4 * n), 0);
  EXPECT_EQ(x->offload.hostSteps, 0);
  EXPECT_EQ(x->offload.asyncHostSteps, 0);
  x->deallocate(m, "m");
  x->deallocate(v, "v");
}

TEST(OffloadTest, MisuseIsOneLine) {
  TempDir dir;
  auto ctx = swappedContext(dir, {100});
  void *buffer = SwapSpace::allocate(4096);
  EXPECT_EXIT(ztrt_swap_in(ctx.get(), ZTRT_SWAP_STATE, 3, buffer), ::testing::ExitedWithCode(1),
              "^ztrain: error: swap_in: optimizer state index 3 out of range "
              "\\[0, 1\\)\n$");
  EXPECT_EXIT(ztrt_swap_out(ctx.get(), ZTRT_SWAP_STATE, 0, static_cast<char *>(buffer) + 64),
              ::testing::ExitedWithCode(1),
              "swap_out: the swap buffer 0x[0-9a-f]+ is not 4096-byte aligned");
  EXPECT_EXIT(ztrt_state(ctx.get(), 0), ::testing::ExitedWithCode(1),
              "state: optimizer state 0 lives on nvme: the step reaches it "
              "through its swap buffer");
  std::free(buffer);

  // A state in memory is not swapped.
  auto plain = cpuContext();
  float m[4] = {};
  plain->states.push_back(m);
  alignas(4096) static char page[4096];
  EXPECT_EXIT(ztrt_swap_in(plain.get(), ZTRT_SWAP_STATE, 0, page), ::testing::ExitedWithCode(1),
              "swap_in: optimizer state 0 does not live on nvme");
  EXPECT_EXIT(ztrt_swap_wait(plain.get(), 1), ::testing::ExitedWithCode(1),
              "swap_wait: no state lives on nvme in this run");
}
