//===- mpi_mesh.cpp - Hybrid sharding's groups across real ranks ----------===//
//
// A GoogleTest program run under the MPI launcher with 4 ranks (`mpiexec -n
// 4 ztrt_mpi_mesh`; CTest runs it so): the mesh of 2 shard x 2 replicate
// ranks (descriptor `mesh 2 2 2`), on 2 nodes of 2 ranks laid out as
// --ranks-per-node 2 does. Rank r's shard group is {r - r % 2, r - r % 2 + 1}
// (axis 1, on its node), its replicate group {r % 2, r % 2 + 2} (axis 2,
// across the nodes).
//
// Every rank runs every test, making the same collective calls in the same
// order: assertions that could end a test early on one rank only are
// EXPECTs. Each test makes its own context over a duplicate of the world
// (Communicator::split), so that layouts do not leak between tests. Every
// value compared is exact (tolerance 0): sums are taken in the group's rank
// order in float, as the reference here does, and byte counts are integers.
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/CpuBackend.h"
#include "comm/Communicator.h"
#include "io/Checkpoint.h"
#include "io/Safetensors.h"
#include "io/Weights.h"
#include "step/Context.h"
#include "step/Descriptor.h"

#include "ztrt.h"

#include "MpiTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mpi.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace ztrt;

namespace {

Communicator *world = nullptr;
constexpr int kShard = 2, kReplicate = 2, kPerNode = 2;

int rank() { return world->rank(); }

/// A context over a duplicate of the world, its nodes `perNode`
/// consecutive ranks (0: MPI's), hybrid-sharded as 2 x 2 when `mesh`.
std::unique_ptr<ztrt_ctx> context(bool mesh, int perNode = kPerNode) {
  std::unique_ptr<Communicator> dup = world->split(0, world->rank());
  if (perNode > 0)
    dup->setRanksPerNode(perNode);
  auto ctx = std::make_unique<ztrt_ctx>(createCpuBackend(), std::move(dup));
  if (mesh)
    ctx->setMesh(kShard, kReplicate);
  return ctx;
}

float value(int r, int64_t i, uint32_t salt) {
  return ztrt::test::mixedValue(r, i, salt);
}

std::vector<float> values(int r, int64_t n, uint32_t salt) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    out[i] = value(r, i, salt);
  return out;
}

/// The world ranks of this rank's group on `axis`, in the group's order.
std::vector<int> members(int axis) {
  const int r = rank();
  if (axis == 1)
    return {r - r % kShard, r - r % kShard + 1};
  if (axis == 2)
    return {r % kShard, r % kShard + kShard};
  return {0, 1, 2, 3};
}

/// The sum over `axis`' members of their element offset + i, in the
/// group's order, in float; divided by the group's size for a mean.
std::vector<float> reference(int axis, int64_t offset, int64_t n, uint32_t salt,
                             bool mean) {
  const std::vector<int> group = members(axis);
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float sum = value(group[0], offset + i, salt);
    for (size_t s = 1; s < group.size(); ++s)
      sum += value(group[s], offset + i, salt);
    out[i] = mean ? sum / static_cast<float>(group.size()) : sum;
  }
  return out;
}

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using ztrt::test::FailurePrinter;

} // namespace

TEST(MpiMesh, GroupsAndTheirNodes) {
  auto ctx = context(true);
  const int r = rank();
  EXPECT_EQ(ctx->axisComm(0).count(), 4);
  EXPECT_EQ(&ctx->axisComm(0), &ctx->comm());
  EXPECT_EQ(ctx->axisComm(1).count(), kShard);
  EXPECT_EQ(ctx->axisComm(1).rank(), r % kShard);
  EXPECT_EQ(ctx->axisComm(2).count(), kReplicate);
  EXPECT_EQ(ctx->axisComm(2).rank(), r / kShard);
  EXPECT_EQ(ctx->shardIndex(), r % kShard);
  EXPECT_EQ(ctx->shardCount(), kShard);
  EXPECT_EQ(ctx->replicateCount(), kReplicate);
  // The world: 2 nodes of 2 (--ranks-per-node 2); a shard group lies on
  // one node, a replicate group across both.
  EXPECT_EQ(ctx->comm().nodeCount(), 2);
  EXPECT_EQ(ctx->comm().node(), r / kPerNode);
  EXPECT_EQ(ctx->axisComm(1).nodeCount(), 1);
  EXPECT_EQ(ctx->axisComm(1).localCount(), 2);
  EXPECT_EQ(ctx->axisComm(1).localRank(), r % kShard);
  EXPECT_EQ(ctx->axisComm(2).nodeCount(), 2);
  EXPECT_EQ(ctx->axisComm(2).node(), r / kShard);
  EXPECT_EQ(ctx->axisComm(2).localCount(), 1);
  EXPECT_EQ(ctx->axisComm(2).nodeOf(0), 0);
  EXPECT_EQ(ctx->axisComm(2).nodeOf(1), 1);
}

TEST(MpiMesh, WithoutAMeshAxisOneIsTheWorldAndAxisTwoThisRank) {
  auto ctx = context(false);
  EXPECT_EQ(&ctx->axisComm(1), &ctx->comm());
  EXPECT_EQ(ctx->axisComm(2).count(), 1);
  EXPECT_EQ(ctx->shardCount(), 4);
  EXPECT_EQ(ctx->shardIndex(), rank());
  EXPECT_EQ(ctx->replicateCount(), 1);
  // Axis 2 is a copy here.
  std::vector<float> in = values(rank(), 5, 7), out(5);
  ztrt_all_reduce(ctx.get(), ZTRT_F32, in.data(), out.data(), 5, 0, 2);
  EXPECT_TRUE(sameBits(out, in));
}

TEST(MpiMesh, ReductionsSumOverTheAxisGroup) {
  auto ctx = context(true);
  for (int axis : {0, 1, 2})
    for (int64_t n : {int64_t(1), int64_t(5), int64_t(40003)})
      for (int mean : {0, 1}) {
        SCOPED_TRACE("axis " + std::to_string(axis) + " n " +
                     std::to_string(n) + " mean " + std::to_string(mean));
        const uint32_t salt = 100 + static_cast<uint32_t>(axis);
        std::vector<float> in = values(rank(), n, salt), out(n);
        ztrt_all_reduce(ctx.get(), ZTRT_F32, in.data(), out.data(), n, mean,
                        axis);
        EXPECT_TRUE(sameBits(out, reference(axis, 0, n, salt, mean != 0)));
        // Started and waited: the same bits.
        std::vector<float> async(n);
        ztrt_wait(ctx.get(),
                  ztrt_all_reduce_start(ctx.get(), ZTRT_F32, in.data(),
                                        async.data(), n, mean, axis));
        EXPECT_TRUE(sameBits(async, out));
        // reduce_scatter: chunk g of the group's members to its rank g.
        const int64_t groups = static_cast<int64_t>(members(axis).size());
        const int64_t place = ctx->axisComm(axis).rank();
        std::vector<float> chunks = values(rank(), n * groups, salt + 10),
                           mine(n);
        ztrt_reduce_scatter(ctx.get(), ZTRT_F32, chunks.data(), mine.data(), n,
                            mean, axis);
        EXPECT_TRUE(sameBits(
            mine, reference(axis, place * n, n, salt + 10, mean != 0)));
      }
}

TEST(MpiMesh, AllGatherConcatenatesTheAxisGroup) {
  auto ctx = context(true);
  for (int axis : {0, 1, 2}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    const std::vector<int> group = members(axis);
    const int64_t count = 1001;
    std::vector<float> in = values(rank(), count, 200), want;
    for (int m : group) {
      std::vector<float> part = values(m, count, 200);
      want.insert(want.end(), part.begin(), part.end());
    }
    std::vector<float> out(want.size());
    ztrt_all_gather(ctx.get(), ZTRT_F32, in.data(), out.data(), count, axis);
    EXPECT_TRUE(sameBits(out, want));
    // In place, as ZeRO gathers its own shard, and started.
    std::vector<float> inPlace(want.size(), 0.0f);
    const int64_t place = ctx->axisComm(axis).rank();
    std::memcpy(inPlace.data() + place * count, in.data(),
                static_cast<size_t>(count) * sizeof(float));
    ztrt_wait(ctx.get(), ztrt_all_gather_start(ctx.get(), ZTRT_F32,
                                               inPlace.data() + place * count,
                                               inPlace.data(), count, axis));
    EXPECT_TRUE(sameBits(inPlace, want));
  }
}

TEST(MpiMesh, WireBytesSplitByLink) {
  // 4 ranks, 2 per node, shard 2: a shard group is one node's, a replicate
  // group spans both. Per call, with B = count * 4 bytes (f32):
  //   all_gather / reduce_scatter send B to each other member:
  //     axis 1: B intra, 0 inter; axis 2: 0 intra, B inter;
  //     axis 0: B intra (the node's other rank), 2B inter.
  //   all_reduce of n = G * chunk: a reduce-scatter and an all-gather of
  //     the chunk: 2 * chunk * 4 to each other member.
  // Exact (tolerance 0): integer byte counts.
  auto ctx = context(true);
  const int64_t count = 96, bytes = count * 4;
  struct Expect {
    int axis;
    int64_t intra, inter;
  } expects[] = {{1, bytes, 0}, {2, 0, bytes}, {0, bytes, 2 * bytes}};
  for (const Expect &e : expects) {
    SCOPED_TRACE("axis " + std::to_string(e.axis));
    const int64_t groupRanks = e.axis == 0 ? 4 : 2;
    std::vector<float> in(static_cast<size_t>(count * groupRanks), 1.0f),
        out(in.size());
    for (Collective kind : {Collective::AllGather, Collective::ReduceScatter,
                            Collective::AllReduce}) {
      SCOPED_TRACE(collectiveName(kind));
      const CollectiveStats before = ctx->communication(kind);
      int64_t payload = bytes;
      if (kind == Collective::AllGather)
        ztrt_all_gather(ctx.get(), ZTRT_F32, in.data(), out.data(), count,
                        e.axis);
      else if (kind == Collective::ReduceScatter)
        ztrt_reduce_scatter(ctx.get(), ZTRT_F32, in.data(), out.data(), count,
                            0, e.axis);
      else {
        // n = G * count: chunks of `count`, sent twice.
        payload = count * groupRanks * 4;
        ztrt_all_reduce(ctx.get(), ZTRT_F32, in.data(), out.data(),
                        count * groupRanks, 0, e.axis);
      }
      const int64_t factor = kind == Collective::AllReduce ? 2 : 1;
      const CollectiveStats &after = ctx->communication(kind);
      EXPECT_EQ(after.calls - before.calls, 1);
      // The ZeRO volume on the axis' group (collectiveBytes of its ranks).
      EXPECT_EQ(after.bytes - before.bytes,
                collectiveBytes(kind, payload, groupRanks));
      EXPECT_EQ(after.intraNodeWireBytes - before.intraNodeWireBytes,
                factor * e.intra);
      EXPECT_EQ(after.interNodeWireBytes - before.interNodeWireBytes,
                factor * e.inter);
      EXPECT_EQ(after.wireBytes - before.wireBytes,
                factor * (e.intra + e.inter));
    }
  }
  // The communicators' own counters: the same split.
  EXPECT_EQ(ctx->axisComm(1).sentInterNodeBytes(), 0);
  EXPECT_EQ(ctx->axisComm(2).sentIntraNodeBytes(), 0);
  EXPECT_EQ(ctx->comm().sentBytes(), ctx->comm().sentIntraNodeBytes() +
                                         ctx->comm().sentInterNodeBytes());
}

namespace {

const char *kMeshDescriptor = "ztrain-descriptor 1\n"
                              "grid 4\n"
                              "mesh 2 2 2\n"
                              "param w f32 1 7 init zeros 0 store 4 shard\n"
                              "param b f32 1 3 init zeros 0\n";
const char *kFlatDescriptor = "ztrain-descriptor 1\n"
                              "grid 4\n"
                              "param w f32 1 7 init zeros 0 store 2 shard\n"
                              "param b f32 1 3 init zeros 0\n";

/// Allocates `desc`'s parameters in `ctx`; shard s of w holds 10 + its
/// flat indices (padding 0), b holds 1, 2, 3.
void fillParams(ztrt_ctx &ctx, const Descriptor &desc) {
  for (const ParamSpec &spec : desc.params) {
    ctx.params.push_back(
        ctx.allocate(spec.storeBytes, ZTRT_CAT_PARAMETERS, spec.name.c_str()));
    std::vector<float> host(static_cast<size_t>(spec.storeElems), 0.0f);
    StorageSlice slice = spec.slice(ctx.shardIndex());
    for (int64_t i = 0; i < slice.count; ++i)
      host[i] = spec.name == "w" ? 10.0f + static_cast<float>(slice.begin + i)
                                 : static_cast<float>(i + 1);
    ctx.paramFromHost(ctx.params.size() - 1, host.data(), spec.storeBytes);
  }
}

std::vector<float> paramValues(ztrt_ctx &ctx, const Descriptor &desc,
                               size_t i) {
  std::vector<float> host(static_cast<size_t>(desc.params[i].storeElems));
  ctx.paramToHost(i, host.data(), desc.params[i].storeBytes);
  return host;
}

/// A directory every rank names the same (rank 0 makes it).
std::string sharedDir(const char *name) {
  std::string dir = "/tmp/ztrt_mpi_mesh_" + std::string(name) + "_" +
                    std::to_string(static_cast<long long>(getppid()));
  if (rank() == 0)
    std::system(("rm -rf '" + dir + "'").c_str());
  world->barrier();
  return dir;
}

} // namespace

TEST(MpiMesh, CheckpointsAreOneShardGroupsAndResumeEitherLayout) {
  Descriptor mesh = parseDescriptor(kMeshDescriptor);
  const std::string root = sharedDir("checkpoint");
  {
    auto ctx = context(true);
    fillParams(*ctx, mesh);
    CheckpointProgress progress;
    progress.step = 3;
    saveCheckpoint(*ctx, mesh, kMeshDescriptor, progress, root, 0);
  }
  const std::string dir = root + "/global_step3";
  CheckpointIndex index = readCheckpointIndex(root, "test");
  // S = 2 shard files, written by replicate group 0; nothing else.
  EXPECT_EQ(index.worldSize, kShard);
  EXPECT_EQ(index.replicate, kReplicate);
  struct stat st;
  EXPECT_EQ(stat((dir + "/rank-0-of-2.safetensors").c_str(), &st), 0);
  EXPECT_EQ(stat((dir + "/rank-1-of-2.safetensors").c_str(), &st), 0);
  EXPECT_NE(stat((dir + "/rank-2-of-4.safetensors").c_str(), &st), 0);
  // The global batch of the run that wrote it is its 4 ranks'.
  EXPECT_EQ(checkpointGlobalBatch(index), 4);
  {
    // Resumed with the mesh: rank r holds shard r % 2 byte for byte.
    auto ctx = context(true);
    for (const ParamSpec &spec : mesh.params)
      ctx->params.push_back(ctx->allocate(spec.storeBytes, ZTRT_CAT_PARAMETERS,
                                          spec.name.c_str()));
    checkResumable(index, mesh, kMeshDescriptor, 4);
    EXPECT_TRUE(checkpointLayoutMatches(index, mesh, ctx->shardCount()));
    loadCheckpointShard(*ctx, mesh, index);
    std::vector<float> w = paramValues(*ctx, mesh, 0);
    const int s = rank() % kShard;
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t flat = s * 4 + i;
      EXPECT_EQ(w[i], flat < 7 ? 10.0f + static_cast<float>(flat) : 0.0f)
          << "element " << i;
    }
    EXPECT_EQ(paramValues(*ctx, mesh, 1), (std::vector<float>{1, 2, 3}));
  }
  {
    // Resumed flat on the same 4 ranks (shards of 2): resharded.
    Descriptor flat = parseDescriptor(kFlatDescriptor);
    auto ctx = context(false);
    for (const ParamSpec &spec : flat.params)
      ctx->params.push_back(ctx->allocate(spec.storeBytes, ZTRT_CAT_PARAMETERS,
                                          spec.name.c_str()));
    checkResumable(index, flat, kFlatDescriptor, 4);
    EXPECT_FALSE(checkpointLayoutMatches(index, flat, ctx->shardCount()));
    loadCheckpointShard(*ctx, flat, index);
    std::vector<float> w = paramValues(*ctx, flat, 0);
    for (int64_t i = 0; i < 2; ++i) {
      const int64_t at = rank() * 2 + i;
      EXPECT_EQ(w[i], at < 7 ? 10.0f + static_cast<float>(at) : 0.0f)
          << "element " << i;
    }
  }
  world->barrier();
  if (rank() == 0)
    std::system(("rm -rf '" + root + "'").c_str());
}

TEST(MpiMesh, SaveGathersOneShardGroup) {
  Descriptor mesh = parseDescriptor(kMeshDescriptor);
  const std::string dir = sharedDir("save");
  if (rank() == 0)
    ::mkdir(dir.c_str(), 0755);
  world->barrier();
  const std::string path = dir + "/weights.safetensors";
  {
    auto ctx = context(true);
    fillParams(*ctx, mesh);
    saveParams(*ctx, mesh, path);
  }
  if (rank() == 0) {
    SafetensorsFile file = SafetensorsFile::read(path, "test");
    const SafetensorsTensor *w = file.find("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->shape, (std::vector<int64_t>{7}));
    std::vector<float> values(7);
    std::memcpy(values.data(), w->data, sizeof(float) * 7);
    for (int i = 0; i < 7; ++i)
      EXPECT_EQ(values[i], 10.0f + static_cast<float>(i)) << "element " << i;
    std::system(("rm -rf '" + dir + "'").c_str());
  }
  world->barrier();
}

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<Communicator> comm = Communicator::initWorld(&argc, &argv);
  world = comm.get();
  if (world->count() != 4) {
    std::fprintf(stderr, "usage: mpiexec -n 4 %s\n", argv[0]);
    return 2;
  }
  if (world->rank() != 0) {
    ::testing::TestEventListeners &listeners =
        ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(world->rank()));
  }
  int failed = RUN_ALL_TESTS();
  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return anyFailed ? 1 : 0;
}
