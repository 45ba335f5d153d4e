//===- CollectiveTest.cpp - Collectives in a world of one, traffic
//---------===//
//
// What needs no MPI launch: in a world of one every collective is an exact
// copy and moves no bytes; the traffic formulas for larger worlds; argument
// checks; and how a process decides whether it is part of an MPI job. The
// collectives across real ranks are tested by mpi_collectives.cpp under the
// launcher.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "comm/Communicator.h"

#include "ztrt.h"

#include <cmath>
#include <cstring>
#include <limits>

using namespace ztrt;
using namespace ztrt::test;

namespace {

/// Values whose bits a copy must keep and any arithmetic would disturb:
/// -0.0 (0 + -0 = +0), a NaN with a payload, denormals, infinities.
std::vector<float> trickyValues() {
  uint32_t nanBits = 0x7fc01234;
  float nan;
  std::memcpy(&nan, &nanBits, 4);
  return {-0.0f,
          nan,
          std::numeric_limits<float>::denorm_min(),
          -std::numeric_limits<float>::infinity(),
          1.0f / 3.0f,
          -7.5f};
}

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

} // namespace

TEST(CollectiveTest, WorldOfOneIsACopy) {
  auto ctx = cpuContext();
  EXPECT_EQ(ztrt_rank(ctx.get()), 0);
  EXPECT_EQ(ztrt_world_size(ctx.get()), 1);
  const std::vector<float> in = trickyValues();
  const int64_t n = static_cast<int64_t>(in.size());
  for (int32_t mean : {0, 1}) {
    std::vector<float> out(in.size(), 42.0f);
    ztrt_all_reduce(ctx.get(), ZTRT_F32, in.data(), out.data(), n, mean, 0);
    EXPECT_TRUE(sameBits(out, in)) << "all_reduce mean=" << mean;
    out.assign(in.size(), 42.0f);
    ztrt_reduce_scatter(ctx.get(), ZTRT_F32, in.data(), out.data(), n, mean, 0);
    EXPECT_TRUE(sameBits(out, in)) << "reduce_scatter mean=" << mean;
  }
  std::vector<float> out(in.size(), 42.0f);
  ztrt_all_gather(ctx.get(), ZTRT_F32, in.data(), out.data(), n, 0);
  EXPECT_TRUE(sameBits(out, in));
  out = in;
  ztrt_bcast(ctx.get(), ZTRT_F32, out.data(), n, 0);
  EXPECT_TRUE(sameBits(out, in));
  // In place, as ZeRO calls them.
  out = in;
  ztrt_all_reduce(ctx.get(), ZTRT_F32, out.data(), out.data(), n, 1, 0);
  ztrt_all_gather(ctx.get(), ZTRT_F32, out.data(), out.data(), n, 0);
  EXPECT_TRUE(sameBits(out, in));
}

TEST(CollectiveTest, WorldOfOneGatherIsACopy) {
  Communicator world;
  const std::vector<float> in = trickyValues();
  std::vector<float> out(in.size(), 42.0f);
  world.gather(in.data(), out.data(), static_cast<int64_t>(in.size()),
               sizeof(in[0]), 0);
  EXPECT_TRUE(sameBits(out, in));
}

TEST(CollectiveTest, WorldOfOneCountsCallsButNoBytes) {
  auto ctx = cpuContext();
  std::vector<float> buf(10, 1.0f);
  ztrt_all_reduce(ctx.get(), ZTRT_F32, buf.data(), buf.data(), 10, 0, 0);
  ztrt_all_reduce(ctx.get(), ZTRT_F32, buf.data(), buf.data(), 3, 1, 0);
  ztrt_reduce_scatter(ctx.get(), ZTRT_F32, buf.data(), buf.data(), 10, 0, 0);
  ztrt_all_gather(ctx.get(), ZTRT_F32, buf.data(), buf.data(), 0, 0);
  for (auto [kind, calls] : {std::pair{Collective::AllReduce, 2},
                             {Collective::ReduceScatter, 1},
                             {Collective::AllGather, 1},
                             {Collective::Broadcast, 0}}) {
    const CollectiveStats &stats = ctx->communication(kind);
    EXPECT_EQ(stats.calls, calls) << collectiveName(kind);
    EXPECT_EQ(stats.bytes, 0) << collectiveName(kind);
    EXPECT_EQ(stats.wireBytes, 0) << collectiveName(kind);
  }
}

/// The payload of n f32 elements, in bytes.
int64_t f32(int64_t n) { return n * elementBytes(DType::F32); }

TEST(CollectiveTest, TrafficFormulas) {
  // all_reduce of n floats: 2(N-1)/N * 4n bytes, rounded down.
  EXPECT_EQ(collectiveBytes(Collective::AllReduce, f32(1000), 2), 4000);
  EXPECT_EQ(collectiveBytes(Collective::AllReduce, f32(1000), 4), 6000);
  EXPECT_EQ(collectiveBytes(Collective::AllReduce, f32(10), 3), 53); // 53.33
  // reduce_scatter / all_gather of N * count floats: (N-1) * 4count.
  EXPECT_EQ(collectiveBytes(Collective::ReduceScatter, f32(250), 4), 3000);
  EXPECT_EQ(collectiveBytes(Collective::AllGather, f32(250), 4), 3000);
  EXPECT_EQ(collectiveBytes(Collective::AllGather, f32(7), 2), 28);
  // broadcast of n floats: 4n, whatever N (> 1).
  EXPECT_EQ(collectiveBytes(Collective::Broadcast, f32(100), 2), 400);
  EXPECT_EQ(collectiveBytes(Collective::Broadcast, f32(100), 8), 400);
  // Nothing moves in a world of one.
  for (Collective kind : {Collective::AllReduce, Collective::ReduceScatter,
                          Collective::AllGather, Collective::Broadcast})
    EXPECT_EQ(collectiveBytes(kind, f32(100), 1), 0) << collectiveName(kind);
  // The payload's element size counts: half the bytes in bf16.
  EXPECT_EQ(collectiveBytes(Collective::AllReduce, 1000 * elementBytes(DType::BF16), 2), 2000);
  // ZeRO's identity: all_reduce = reduce_scatter + all_gather of n / N each.
  EXPECT_EQ(collectiveBytes(Collective::AllReduce, f32(4096), 8),
            collectiveBytes(Collective::ReduceScatter, f32(512), 8) +
                collectiveBytes(Collective::AllGather, f32(512), 8));
}

TEST(CollectiveTest, ArgumentErrors) {
  auto ctx = cpuContext();
  float x = 0.0f;
  EXPECT_EXIT(ztrt_all_reduce(ctx.get(), ZTRT_F32, &x, &x, -1, 0, 0),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: all_reduce: negative element count -1\n$");
  EXPECT_EXIT(ztrt_reduce_scatter(ctx.get(), ZTRT_F32, &x, &x, -2, 0, 0),
              ::testing::ExitedWithCode(1),
              "reduce_scatter: negative element count -2");
  EXPECT_EXIT(ztrt_all_gather(ctx.get(), ZTRT_F32, &x, &x, -3, 0),
              ::testing::ExitedWithCode(1),
              "all_gather: negative element count -3");
  EXPECT_EXIT(ztrt_bcast(ctx.get(), ZTRT_F32, &x, 1, 1), ::testing::ExitedWithCode(1),
              "^ztrain: error: bcast: root 1 out of range \\[0, 1\\)\n$");
}

TEST(CollectiveTest, MeshAxisIsChecked) {
  // Exact messages (one line, naming the op).
  auto ctx = cpuContext();
  float x = 0.0f;
  EXPECT_EXIT(ztrt_all_gather(ctx.get(), ZTRT_F32, &x, &x, 1, 3),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: all_gather: mesh axis 3 is not 0 \\(all "
              "ranks\\), 1 \\(the shard group\\) or 2 \\(the replicate "
              "group\\)\n$");
  EXPECT_EXIT(ztrt_all_reduce_start(ctx.get(), ZTRT_F32, &x, &x, 1, 0, -1),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: all_reduce_start: mesh axis -1 is not 0");
  EXPECT_EXIT(ztrt_reduce_scatter(ctx.get(), ZTRT_F32, &x, &x, 1, 0, 7),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: reduce_scatter: mesh axis 7 is not 0");
}

TEST(CollectiveTest, EveryAxisIsTheWorldInAWorldOfOne) {
  // A world of one: each axis' group is this rank; every collective is a
  // copy that moves no bytes (exact).
  auto ctx = cpuContext();
  for (int axis = 0; axis < kMeshAxes; ++axis) {
    EXPECT_EQ(&ctx->axisComm(axis), &ctx->comm()) << "axis " << axis;
    std::vector<float> in = {1.5f, -2.0f, 3.25f}, out(3, 0.0f);
    ztrt_all_reduce(ctx.get(), ZTRT_F32, in.data(), out.data(), 3, 1, axis);
    EXPECT_EQ(out, in) << "axis " << axis;
  }
  EXPECT_EQ(ctx->shardCount(), 1);
  EXPECT_EQ(ctx->shardIndex(), 0);
  EXPECT_EQ(ctx->replicateCount(), 1);
  const CollectiveStats &stats = ctx->communication(Collective::AllReduce);
  EXPECT_EQ(stats.wireBytes, 0);
  EXPECT_EQ(stats.intraNodeWireBytes, 0);
  EXPECT_EQ(stats.interNodeWireBytes, 0);
  // A mesh of one rank is allowed; any other is refused.
  ctx->setMesh(1, 1);
  EXPECT_EXIT(ctx->setMesh(2, 1), ::testing::ExitedWithCode(1),
              "^ztrain: error: mesh: 2 shard x 1 replicate ranks do not make "
              "the 1 ranks of the job\n$");
}

TEST(CollectiveTest, LaunchedByMpiReadsTheLaunchersVariables) {
  const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"};
  for (const char *name : names)
    ASSERT_EQ(std::getenv(name), nullptr) << "the test runs under a launcher";
  EXPECT_FALSE(launchedByMpi());
  for (const char *name : names) {
    setenv(name, "0", 1);
    EXPECT_TRUE(launchedByMpi()) << name;
    unsetenv(name);
  }
  // Without a launcher the world is one process and MPI stays untouched.
  int argc = 1;
  char program[] = "test";
  char *args[] = {program, nullptr};
  char **argv = args;
  std::unique_ptr<Communicator> world = Communicator::initWorld(&argc, &argv);
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->count(), 1);
  EXPECT_EQ(world->gatherToRoot("text"), std::vector<std::string>{"text"});
}
