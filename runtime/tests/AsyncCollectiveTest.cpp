//===- AsyncCollectiveTest.cpp - Start / wait and the comm thread ---------===//
//
// The asynchronous collectives in one process: in a world of one they are
// copies done inline, and with CommMode::Thread the same world of one runs
// them on a communication thread, which exercises the queue (FIFO order,
// handles, waits in any order, shutdown) without an MPI launch. Across real
// ranks they are tested by mpi_collectives.cpp.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "ztrt.h"

#include <cstring>

using namespace ztrt;
using namespace ztrt::test;

namespace {

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  // (memcmp of empty vectors' null data is undefined: UBSan.)
  return a.size() == b.size() &&
         (a.empty() ||
          std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// Inline (the default in a world of one) or on a communication thread.
class AsyncCollectiveTest : public ::testing::TestWithParam<CommMode> {
protected:
  std::unique_ptr<ztrt_ctx> ctx =
      std::make_unique<ztrt_ctx>(createCpuBackend(), nullptr, GetParam());
};

std::string modeName(const ::testing::TestParamInfo<CommMode> &info) {
  return info.param == CommMode::Thread ? "Thread" : "Inline";
}

} // namespace

TEST_P(AsyncCollectiveTest, ModeIsAsRequested) {
  EXPECT_EQ(ctx->commThreaded(), GetParam() == CommMode::Thread);
}

TEST_P(AsyncCollectiveTest, StartAndWaitEqualTheSynchronousCallsBitwise) {
  // Sizes above the cpu backend's OpenMP threshold (2^15) too, and -0.0 /
  // NaN payloads that only a copy keeps.
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(70001)}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<float> in = testValues(static_cast<size_t>(n), 3);
    if (n > 1) {
      uint32_t nanBits = 0x7fc01234;
      std::memcpy(&in[0], &nanBits, 4);
      in[1] = -0.0f;
    }
    for (int32_t mean : {0, 1}) {
      std::vector<float> sync(in.size(), 5.0f), async(in.size(), 6.0f);
      ztrt_all_reduce(ctx.get(), ZTRT_F32, in.data(), sync.data(), n, mean, 0);
      ztrt_wait(ctx.get(), ztrt_all_reduce_start(ctx.get(), ZTRT_F32, in.data(),
                                                 async.data(), n, mean, 0));
      EXPECT_TRUE(sameBits(sync, async)) << "all_reduce mean " << mean;
      EXPECT_TRUE(sameBits(async, in));
      sync.assign(in.size(), 5.0f);
      async.assign(in.size(), 6.0f);
      ztrt_reduce_scatter(ctx.get(), ZTRT_F32, in.data(), sync.data(), n, mean,
                          0);
      ztrt_wait(ctx.get(),
                ztrt_reduce_scatter_start(ctx.get(), ZTRT_F32, in.data(),
                                          async.data(), n, mean, 0));
      EXPECT_TRUE(sameBits(sync, async)) << "reduce_scatter mean " << mean;
    }
    std::vector<float> sync(in.size(), 5.0f), async(in.size(), 6.0f);
    ztrt_all_gather(ctx.get(), ZTRT_F32, in.data(), sync.data(), n, 0);
    ztrt_wait(ctx.get(), ztrt_all_gather_start(ctx.get(), ZTRT_F32, in.data(),
                                               async.data(), n, 0));
    EXPECT_TRUE(sameBits(sync, async)) << "all_gather";
    // In place, as ZeRO gathers its own shard.
    std::vector<float> inPlace = in;
    ztrt_wait(ctx.get(),
              ztrt_all_gather_start(ctx.get(), ZTRT_F32, inPlace.data(),
                                    inPlace.data(), n, 0));
    EXPECT_TRUE(sameBits(inPlace, in)) << "all_gather in place";
  }
}

TEST_P(AsyncCollectiveTest, SeveralInFlightWaitedInAnyOrder) {
  const int64_t n = 50000;
  std::vector<std::vector<float>> ins, outs;
  for (uint32_t i = 0; i < 4; ++i) {
    ins.push_back(testValues(n, 10 + i));
    outs.emplace_back(n, -1.0f);
  }
  int64_t a = ztrt_all_reduce_start(ctx.get(), ZTRT_F32, ins[0].data(),
                                    outs[0].data(), n, 1, 0);
  int64_t b = ztrt_reduce_scatter_start(ctx.get(), ZTRT_F32, ins[1].data(),
                                        outs[1].data(), n, 0, 0);
  int64_t c = ztrt_all_gather_start(ctx.get(), ZTRT_F32, ins[2].data(),
                                    outs[2].data(), n, 0);
  // A synchronous collective queues behind the three (FIFO) and returns
  // only when it is done; the others may or may not be.
  ztrt_all_reduce(ctx.get(), ZTRT_F32, ins[3].data(), outs[3].data(), n, 0, 0);
  EXPECT_TRUE(sameBits(outs[3], ins[3]));
  // Handles are distinct and positive, in start order.
  EXPECT_GT(a, 0);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  // Counted when started, before any wait.
  EXPECT_EQ(ctx->communication(Collective::AllReduce).calls, 2);
  EXPECT_EQ(ctx->communication(Collective::ReduceScatter).calls, 1);
  EXPECT_EQ(ctx->communication(Collective::AllGather).calls, 1);
  // B, then C, then A.
  ztrt_wait(ctx.get(), b);
  EXPECT_TRUE(sameBits(outs[1], ins[1]));
  ztrt_wait(ctx.get(), c);
  EXPECT_TRUE(sameBits(outs[2], ins[2]));
  ztrt_wait(ctx.get(), a);
  EXPECT_TRUE(sameBits(outs[0], ins[0]));
  for (int64_t h : {a, b, c})
    EXPECT_TRUE(ctx->collectiveCompleted(h));
  // Nothing is left outstanding: the end-of-step check passes.
  ctx->requireCollectivesWaited("test");
}

TEST_P(AsyncCollectiveTest, ManyQueuedCollectivesRunInOrder) {
  // Each all_gather copies the previous result onward; had the thread run
  // them out of order, a later one would read a buffer not yet written.
  const int64_t n = 4096;
  std::vector<std::vector<float>> bufs(65, std::vector<float>(n, 0.0f));
  bufs[0] = testValues(n, 7);
  std::vector<int64_t> handles;
  for (size_t i = 1; i < bufs.size(); ++i)
    handles.push_back(ztrt_all_gather_start(
        ctx.get(), ZTRT_F32, bufs[i - 1].data(), bufs[i].data(), n, 0));
  for (size_t i = handles.size(); i-- > 0;)
    ztrt_wait(ctx.get(), handles[i]);
  EXPECT_TRUE(sameBits(bufs.back(), bufs[0]));
}

TEST_P(AsyncCollectiveTest, WaitOnAnUnknownOrWaitedHandleIsFatal) {
  float x = 1.0f, y = 0.0f;
  int64_t h = ztrt_all_reduce_start(ctx.get(), ZTRT_F32, &x, &y, 1, 0, 0);
  ztrt_wait(ctx.get(), h);
  EXPECT_EXIT(ztrt_wait(ctx.get(), h), ::testing::ExitedWithCode(1),
              "^ztrain: error: wait: collective handle " + std::to_string(h) +
                  " was already waited\n$");
  EXPECT_EXIT(ztrt_wait(ctx.get(), 42), ::testing::ExitedWithCode(1),
              "^ztrain: error: wait: unknown collective handle 42 \\(no "
              "collective was started with it\\)\n$");
  EXPECT_EXIT(ztrt_wait(ctx.get(), 0), ::testing::ExitedWithCode(1),
              "wait: unknown collective handle 0");
  EXPECT_EXIT(ztrt_wait(ctx.get(), -1), ::testing::ExitedWithCode(1),
              "wait: unknown collective handle -1");
  EXPECT_EXIT(ztrt_all_reduce_start(ctx.get(), ZTRT_F32, &x, &y, -1, 0, 0),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: all_reduce_start: negative element count "
              "-1\n$");
  EXPECT_EXIT(ztrt_reduce_scatter_start(ctx.get(), ZTRT_F32, &x, &y, -2, 0, 0),
              ::testing::ExitedWithCode(1),
              "reduce_scatter_start: negative element count -2");
  EXPECT_EXIT(ztrt_all_gather_start(ctx.get(), ZTRT_F32, &x, &y, -3, 0),
              ::testing::ExitedWithCode(1),
              "all_gather_start: negative element count -3");
}

TEST_P(AsyncCollectiveTest, ACollectiveNeverWaitedIsFatal) {
  float x = 1.0f, y = 0.0f, z = 0.0f;
  int64_t first = ztrt_all_gather_start(ctx.get(), ZTRT_F32, &x, &y, 1, 0);
  ztrt_reduce_scatter_start(ctx.get(), ZTRT_F32, &x, &z, 1, 0, 0);
  EXPECT_EXIT(ctx->requireCollectivesWaited("step", 3),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: step 3: collective started but never waited "
              "\\(handle " +
                  std::to_string(first) + ", all_gather; 2 outstanding\\)\n$");
  // Waited, they are gone (and the context can be destroyed).
  ztrt_wait(ctx.get(), first);
  ztrt_wait(ctx.get(), first + 1);
  ctx->requireCollectivesWaited("step", 3);
}

TEST_P(AsyncCollectiveTest, DestroyingTheContextFinishesQueuedWork) {
  // The destructor joins the thread after it has performed what was
  // queued, so the buffers are complete (and no thread is left to touch
  // freed memory).
  const int64_t n = 100000;
  std::vector<float> in = testValues(n, 5), out(n, 0.0f);
  ztrt_all_reduce_start(ctx.get(), ZTRT_F32, in.data(), out.data(), n, 0, 0);
  ctx.reset();
  EXPECT_TRUE(sameBits(out, in));
}

TEST_P(AsyncCollectiveTest, OverlapAccounting) {
  const OverlapStats &overlap = ctx->overlap();
  EXPECT_EQ(overlap.commNanos, 0);
  EXPECT_EQ(overlap.exposedNanos, 0);
  EXPECT_EQ(overlap.hiddenFraction(), 0.0) << "no communication: 0";

  // Synchronous collectives hide nothing, and that is structural rather
  // than timing-dependent: the step thread is blocked from before the
  // start until after the end of each collective's execution, so every
  // execution interval lies inside a blocked interval (steady_clock is
  // monotonic), exposed >= comm, and the fraction clamps to exactly 0.
  const int64_t n = 200000;
  std::vector<float> in = testValues(n, 9), out(n);
  for (int i = 0; i < 3; ++i)
    ztrt_all_reduce(ctx.get(), ZTRT_F32, in.data(), out.data(), n, 0, 0);
  EXPECT_GT(overlap.exposedNanos, 0);
  EXPECT_GE(overlap.commNanos, 0);
  EXPECT_GE(overlap.exposedNanos, overlap.commNanos);
  EXPECT_EQ(overlap.hiddenFraction(), 0.0);

  // Asynchronous ones: whatever the scheduling, the numbers stay
  // consistent. (How much is hidden depends on the machine's load; on a
  // 2-core CI box nothing about it can be asserted.)
  int64_t h = ztrt_all_reduce_start(ctx.get(), ZTRT_F32, in.data(), out.data(),
                                    n, 0, 0);
  ztrt_wait(ctx.get(), h);
  EXPECT_GE(overlap.commNanos, 0);
  EXPECT_GE(overlap.hiddenFraction(), 0.0);
  EXPECT_LE(overlap.hiddenFraction(), 1.0);
  if (GetParam() != CommMode::Thread) {
    // Inline, the start itself is blocking time that contains the copy.
    EXPECT_GE(overlap.exposedNanos, overlap.commNanos);
    EXPECT_EQ(overlap.hiddenFraction(), 0.0);
  }
}

TEST(OverlapStatsTest, HiddenFractionIsClampedToZeroOne) {
  OverlapStats s;
  EXPECT_EQ(s.hiddenFraction(), 0.0);
  s.commNanos = 1000;
  s.exposedNanos = 250;
  EXPECT_DOUBLE_EQ(s.hiddenFraction(), 0.75);
  s.exposedNanos = 5000; // Blocked longer than the collectives took.
  EXPECT_EQ(s.hiddenFraction(), 0.0);
  s.exposedNanos = 0;
  EXPECT_EQ(s.hiddenFraction(), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Modes, AsyncCollectiveTest,
                         ::testing::Values(CommMode::Automatic,
                                           CommMode::Thread),
                         modeName);
