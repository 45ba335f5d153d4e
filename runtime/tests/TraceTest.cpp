//===- TraceTest.cpp - Chrome trace recording and file names --------------===//
//
// The trace of a context driven by hand (kernels, synchronous and
// asynchronous collectives, inline and on the communication thread),
// written and read back with the runtime's own JSON parser; the per-rank
// file names; the event cap. The traces of whole runs (--trace) are
// checked by MainTest and MpiZeroTest.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "report/Trace.h"

#include <functional>
#include <gtest/gtest-spi.h>

#include "ztrt.h"

using namespace ztrt;
using namespace ztrt::test;

TEST(TraceTest, FileNamePerRank) {
  EXPECT_EQ(traceFilePath("trace.json", 0, 1), "trace.json");
  EXPECT_EQ(traceFilePath("trace.json", 0, 2), "trace.rank0.json");
  EXPECT_EQ(traceFilePath("trace.json", 3, 4), "trace.rank3.json");
  EXPECT_EQ(traceFilePath("trace", 1, 2), "trace.rank1");
  EXPECT_EQ(traceFilePath("out/run.v2/trace", 1, 2), "out/run.v2/trace.rank1");
  EXPECT_EQ(traceFilePath("out/run.v2/t.json", 1, 2),
            "out/run.v2/t.rank1.json");
  EXPECT_EQ(traceFilePath("a.tar.gz", 0, 2), "a.tar.rank0.gz");
  EXPECT_EQ(traceFilePath(".trace", 0, 2), ".trace.rank0");
  EXPECT_EQ(traceFilePath("dir/.trace", 0, 2), "dir/.trace.rank0");
}

TEST(TraceTest, NothingIsRecordedWithoutTrace) {
  auto ctx = cpuContext();
  EXPECT_EQ(ctx->trace(), nullptr);
  float x = 1.0f;
  ztrt_scale(ctx.get(), ZTRT_F32, &x, &x, 1, 2.0);
  EXPECT_EQ(ctx->trace(), nullptr);
}

class TraceModeTest : public ::testing::TestWithParam<CommMode> {};

TEST_P(TraceModeTest, KernelsWaitsAndCollectivesOnTheirTracks) {
  TempDir dir;
  auto ctx =
      std::make_unique<ztrt_ctx>(createCpuBackend(), nullptr, GetParam());
  ctx->enableTrace();
  ASSERT_NE(ctx->trace(), nullptr);
  const int64_t n = 1000;
  std::vector<float> a = testValues(n, 1), b(n), c(n);
  ztrt_add(ctx.get(), ZTRT_F32, a.data(), a.data(), b.data(), n);
  int64_t h1 =
      ztrt_all_reduce_start(ctx.get(), ZTRT_F32, b.data(), c.data(), n, 1, 0);
  int64_t h2 =
      ztrt_all_gather_start(ctx.get(), ZTRT_F32, a.data(), b.data(), 10, 0);
  // Meanwhile compute on other buffers: `a` is only read while the
  // all_gather may be reading it.
  std::vector<float> d(n);
  ztrt_mul(ctx.get(), ZTRT_F32, a.data(), a.data(), d.data(), n);
  ztrt_wait(ctx.get(), h2);
  ztrt_wait(ctx.get(), h1);
  ztrt_reduce_scatter(ctx.get(), ZTRT_F32, c.data(), c.data(), n, 0, 0);
  ztrt_copy_2d(ctx.get(), a.data(), c.data(), 10, 8, 16, 8);
  ztrt_bcast(ctx.get(), ZTRT_F32, c.data(), n, 0);
  ctx->trace()->write(dir.path("t.json"), 0, 1);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"t.json"});

  Json trace = readJson(dir.path("t.json"));
  TraceSummary summary = checkTrace(trace, 0);
  EXPECT_EQ(summary.steps, 0);
  EXPECT_EQ(summary.collectives, 4);
  const std::map<std::string, int> expected = {{"add", 1},
                                               {"mul", 1},
                                               {"copy_2d", 1},
                                               {"wait", 2},
                                               {"sync reduce_scatter", 1},
                                               {"sync bcast", 1},
                                               {"all_reduce", 1},
                                               {"all_gather", 1},
                                               {"reduce_scatter", 1},
                                               {"broadcast", 1}};
  EXPECT_EQ(summary.names, expected);

  // The arguments of one collective and of its wait.
  for (const Json &e : (*jsonFind(trace, "traceEvents"))) {
    if (jsonText((*jsonFind(e, "name"))) == "all_gather") {
      const Json *args = jsonFind(e, "args");
      ASSERT_NE(args, nullptr);
      EXPECT_EQ(member(*args, "handle"), h2);
      EXPECT_EQ(member(*args, "elements"), 10);
      EXPECT_EQ(member(*args, "bytes"), 0) << "a world of one moves nothing";
    }
    if (jsonText((*jsonFind(e, "name"))) == "wait" &&
        member(*jsonFind(e, "args"), "handle") == h1) {
      EXPECT_EQ(jsonText((*jsonFind(*jsonFind(e, "args"), "kind"))),
                "all_reduce");
    }
  }
  const Json *other = jsonFind(trace, "otherData");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(member(*other, "dropped_events"), 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, TraceModeTest,
                         ::testing::Values(CommMode::Automatic,
                                           CommMode::Thread),
                         [](const ::testing::TestParamInfo<CommMode> &info) {
                           return info.param == CommMode::Thread ? "Thread"
                                                                 : "Inline";
                         });

TEST(TraceTest, RecordingStopsAtTheCapAndSaysSo) {
  TempDir dir;
  // The real cap (a million events) works the same way; a small one keeps
  // the test's file small.
  EXPECT_EQ(Trace::kMaxEvents, 1000000u);
  Trace trace(Clock::now(), 10);
  const Clock::time_point t = Clock::now();
  for (size_t i = 0; i < 15; ++i)
    trace.kernel("fill", t, t);
  EXPECT_EQ(trace.size(), 10u);
  EXPECT_EQ(trace.droppedEvents(), 5);
  trace.write(dir.path("t.json"), 2, 3);
  Json json = readJson(dir.path("t.json"));
  const Json *events = jsonFind(json, "traceEvents");
  ASSERT_NE(events, nullptr);
  // Six metadata events (process name and order, two thread names and
  // orders), then the recorded ones.
  EXPECT_EQ((*events).size(), 10u + 6u);
  checkTrace(json, 2);
  EXPECT_EQ(member(*jsonFind(json, "otherData"), "dropped_events"), 5);
  EXPECT_EQ(member(*jsonFind(json, "otherData"), "rank"), 2);
}

TEST(TraceTest, EmptyTraceIsValidJson) {
  TempDir dir;
  Trace(Clock::now()).write(dir.path("t.json"), 0, 1);
  TraceSummary summary = checkTrace(readJson(dir.path("t.json")), 0);
  EXPECT_TRUE(summary.names.empty());
}

TEST(TraceTest, UnwritableFileIsOneLine) {
  // No TempDir: the death test's child would die before removing it.
  Trace trace(Clock::now());
  EXPECT_EXIT(trace.write("/nonexistent-ztrt-dir/t.json", 0, 1),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: cannot write '/nonexistent-ztrt-dir/t.json'");
}

namespace {

/// The messages of the gtest failures `f` reports, intercepted.
std::string failuresOf(const std::function<void()> &f) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::
            INTERCEPT_ONLY_CURRENT_THREAD,
        &results);
    f();
  }
  std::string messages;
  for (int i = 0; i < results.size(); ++i)
    messages += results.GetTestPartResult(i).message() + std::string("\n");
  return messages;
}

} // namespace

TEST(TraceTest, TheCheckerCatchesPartialOverlapAndForeignPids) {
  // checkTrace() is the oracle of the --trace tests; it must fail on what
  // Perfetto would show wrongly, and on another rank's file.
  TempDir dir;
  const Clock::time_point t0 = Clock::now();
  Trace trace(t0);
  trace.kernel("a", t0, t0 + std::chrono::microseconds(10));
  trace.kernel("b", t0 + std::chrono::microseconds(5),
               t0 + std::chrono::microseconds(15));
  trace.write(dir.path("t.json"), 0, 1);
  Json json = readJson(dir.path("t.json"));
  EXPECT_NE(failuresOf([&] {
              checkTrace(json, 0);
            }).find("overlaps another partially"),
            std::string::npos);
  EXPECT_NE(failuresOf([&] { checkTrace(json, 1); }).find("pid"),
            std::string::npos);
  // Nested or disjoint is fine.
  Trace good(t0);
  good.kernel("outer", t0, t0 + std::chrono::microseconds(10));
  good.kernel("inner", t0 + std::chrono::microseconds(2),
              t0 + std::chrono::microseconds(10));
  good.kernel("after", t0 + std::chrono::microseconds(10),
              t0 + std::chrono::microseconds(12));
  good.write(dir.path("good.json"), 0, 1);
  checkTrace(readJson(dir.path("good.json")), 0);
}

TEST(TraceTest, OverlappingTransfersGoOnLanesOfTheirOwn) {
  // Swaps in flight together overlap in time; a track's slices must nest
  // or be disjoint, so they spread over as many I/O lanes as are in flight
  // at once, each transfer on the first free one.
  TempDir dir;
  const Clock::time_point t0 = Clock::now();
  auto us = [&](int n) { return t0 + std::chrono::microseconds(n); };
  Trace trace(t0);
  auto io = [&](const char *name, int64_t ticket, int from, int to) {
    TraceEvent e(TraceEvent::Type::Io);
    e.name = name;
    e.value = ticket;
    e.begin = us(from);
    e.end = us(to);
    trace.add(e);
  };
  io("swap_in", 1, 0, 10);  // lane 1
  io("swap_in", 2, 5, 15);  // in flight with 1: lane 2
  io("swap_out", 3, 6, 8);  // with 1 and 2: lane 3
  io("swap_in", 4, 12, 20); // lane 1 is free again (1 ended at 10)
  io("swap_out", 5, 15, 16); // lane 2 ended at 15: free
  trace.write(dir.path("t.json"), 0, 1);
  Json json = readJson(dir.path("t.json"));
  checkTrace(json, 0); // each lane nests
  std::map<int64_t, int64_t> laneOf;
  std::map<int64_t, std::string> names;
  for (const Json &e : (*jsonFind(json, "traceEvents"))) {
    if (jsonText((*jsonFind(e, "ph"))) == "M" &&
        jsonText((*jsonFind(e, "name"))) == "thread_name")
      names[member(e, "tid")] =
          jsonText((*jsonFind(*jsonFind(e, "args"), "name")));
    else if (jsonText((*jsonFind(e, "ph"))) == "X")
      laneOf[member(*jsonFind(e, "args"), "ticket")] = member(e, "tid");
  }
  const std::map<int64_t, int64_t> expectedLanes = {
      {1, kIoTrack}, {2, kIoLaneTracks + 1}, {3, kIoLaneTracks + 2},
      {4, kIoTrack}, {5, kIoLaneTracks + 1}};
  EXPECT_EQ(laneOf, expectedLanes);
  const std::map<int64_t, std::string> expectedNames = {
      {kComputeTrack, "compute"},
      {kCommunicationTrack, "communication"},
      {kIoTrack, "io"},
      {kIoLaneTracks + 1, "io 2"},
      {kIoLaneTracks + 2, "io 3"}};
  EXPECT_EQ(names, expectedNames);
}
