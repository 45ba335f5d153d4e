//===- mpi_collectives.cpp - The collectives across real ranks ------------===//
//
// A GoogleTest program run under the MPI launcher (`mpiexec -n N
// ztrt_mpi_collectives N`; CTest runs it for N = 2 and 4, and once with
// Open MPI forced onto other algorithms). Every rank runs every test, so
// every rank makes the same collective calls in the same order: assertions
// that could end a test early on one rank only are EXPECTs.
//
// Inputs are pure functions of (rank, index), so each rank can compute the
// expected result of every collective itself, with the documented
// arithmetic (sum in rank order in float, mean = sum / N in float), and
// compare bits. Equality with that reference on every rank is the
// determinism contract: the same bits on every rank, in every run, for any
// algorithm MPI picks to move the data.
//
//===----------------------------------------------------------------------===//

#include "cpu/CpuBackend.h"
#include "src/Communicator.h"
#include "src/Context.h"

#include "ztrt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mpi.h>
#include <vector>

using namespace ztrt;

namespace {

ztrt_ctx *ctx = nullptr;
int expectedRanks = 0;

int rank() { return static_cast<int>(ztrt_rank(ctx)); }
int ranks() { return static_cast<int>(ztrt_world_size(ctx)); }

/// Rank `r`'s input element i of buffer `salt`: mixed signs and magnitudes
/// spanning 2^-10 .. 2^10, so that the order of a sum changes its rounding.
float value(int r, int64_t i, uint32_t salt) {
  uint32_t h = static_cast<uint32_t>(r) * 0x9E3779B9u ^
               static_cast<uint32_t>(i) * 0x85EBCA6Bu ^ salt * 0xC2B2AE35u;
  h ^= h >> 16;
  h *= 0x7FEB352Du;
  h ^= h >> 15;
  float unit = static_cast<float>(h >> 8) / 16777216.0f - 0.5f;
  return std::ldexp(unit, static_cast<int>(h % 21) - 10);
}

std::vector<float> values(int r, int64_t n, uint32_t salt) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    out[i] = value(r, i, salt);
  return out;
}

/// out[i] = sum over ranks s of in_s[offset + i], in rank order, in float;
/// divided by N in float for a mean.
std::vector<float> reference(int64_t offset, int64_t n, uint32_t salt,
                             bool mean) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float sum = value(0, offset + i, salt);
    for (int s = 1; s < ranks(); ++s)
      sum += value(s, offset + i, salt);
    out[i] = mean ? sum / static_cast<float>(ranks()) : sum;
  }
  return out;
}

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// The element counts the tests use: empty, fewer elements than ranks, not
/// a multiple of the rank count (padding), and large enough for the cpu
/// backend's OpenMP path (chunks > 2^15 elements).
std::vector<int64_t> sizes() {
  int64_t n = ranks();
  return {0, 1, n - 1, n + 1, 1000, 40000 * n + 3};
}

/// Prints failed assertions of ranks other than 0, prefixed with the rank,
/// instead of every rank's full gtest output.
class FailurePrinter : public ::testing::EmptyTestEventListener {
public:
  explicit FailurePrinter(int rank) : rank(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult &result) override {
    if (result.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank,
                   result.file_name() ? result.file_name() : "?",
                   result.line_number(), result.summary());
  }

private:
  int rank;
};

} // namespace

TEST(MpiCollectives, RankAndWorldSize) {
  EXPECT_EQ(ranks(), expectedRanks);
  EXPECT_GE(rank(), 0);
  EXPECT_LT(rank(), ranks());
}

TEST(MpiCollectives, AllReduceHandComputed) {
  // Rank r contributes (r + 1) * 100 + i: the sum is 50 N (N + 1) + N i and
  // the mean 50 (N + 1) + i, all exact in float.
  const int n = ranks();
  std::vector<float> in(5), sum(5), mean(5);
  for (int i = 0; i < 5; ++i)
    in[i] = static_cast<float>((rank() + 1) * 100 + i);
  ztrt_all_reduce_f32(ctx, in.data(), sum.data(), 5, 0);
  ztrt_all_reduce_f32(ctx, in.data(), mean.data(), 5, 1);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(sum[i], static_cast<float>(50 * n * (n + 1) + n * i)) << i;
    EXPECT_EQ(mean[i], static_cast<float>(50 * (n + 1) + i)) << i;
  }
}

TEST(MpiCollectives, AllReduceSumsInRankOrder) {
  // 1e8 absorbs a 1 (float spacing there is 8), so the order shows: rank
  // values [1e8, 1] give 1e8; [1e8, .., -1e8, 1] with 1s in between give
  // ((1e8 + 1 ..) - 1e8) + 1 = 1 in rank order, but 0 or 2 in a tree or
  // ring order.
  const int n = ranks();
  float mine = 1.0f;
  if (rank() == 0)
    mine = 1e8f;
  else if (n >= 3 && rank() == n - 2)
    mine = -1e8f;
  float out = 0.0f;
  ztrt_all_reduce_f32(ctx, &mine, &out, 1, 0);
  EXPECT_EQ(out, n == 2 ? 1e8f : 1.0f);
}

TEST(MpiCollectives, AllReduceMatchesReferenceBitwise) {
  uint32_t salt = 1;
  for (int64_t n : sizes()) {
    for (int mean : {0, 1}) {
      SCOPED_TRACE("n " + std::to_string(n) + " mean " + std::to_string(mean));
      std::vector<float> expected = reference(0, n, salt, mean);
      std::vector<float> in = values(rank(), n, salt);
      std::vector<float> out(static_cast<size_t>(n), -1.0f);
      ztrt_all_reduce_f32(ctx, in.data(), out.data(), n, mean);
      EXPECT_TRUE(sameBits(out, expected));
      EXPECT_TRUE(sameBits(in, values(rank(), n, salt))) << "input changed";
      // In place.
      ztrt_all_reduce_f32(ctx, in.data(), in.data(), n, mean);
      EXPECT_TRUE(sameBits(in, expected)) << "in place";
      ++salt;
    }
  }
}

TEST(MpiCollectives, ReduceScatterMatchesReferenceBitwise) {
  uint32_t salt = 100;
  for (int64_t count : {int64_t(0), int64_t(1), int64_t(7), int64_t(40000)}) {
    for (int mean : {0, 1}) {
      SCOPED_TRACE("count " + std::to_string(count) + " mean " +
                   std::to_string(mean));
      // Chunk r of the N * count inputs is what rank r receives, reduced.
      std::vector<float> expected =
          reference(rank() * count, count, salt, mean);
      std::vector<float> in = values(rank(), ranks() * count, salt);
      std::vector<float> out(static_cast<size_t>(count), -1.0f);
      ztrt_reduce_scatter_f32(ctx, in.data(), out.data(), count, mean);
      EXPECT_TRUE(sameBits(out, expected));
      // Into the rank's own chunk of the input, as ZeRO does.
      float *own = in.data() + rank() * count;
      ztrt_reduce_scatter_f32(ctx, in.data(), own, count, mean);
      EXPECT_TRUE(sameBits(std::vector<float>(own, own + count), expected))
          << "in place";
      ++salt;
    }
  }
}

TEST(MpiCollectives, AllGatherConcatenatesInRankOrder) {
  uint32_t salt = 200;
  for (int64_t count : {int64_t(0), int64_t(1), int64_t(5), int64_t(40000)}) {
    SCOPED_TRACE("count " + std::to_string(count));
    std::vector<float> expected;
    for (int s = 0; s < ranks(); ++s) {
      std::vector<float> part = values(s, count, salt);
      expected.insert(expected.end(), part.begin(), part.end());
    }
    std::vector<float> in = values(rank(), count, salt);
    std::vector<float> out(static_cast<size_t>(ranks() * count), -1.0f);
    ztrt_all_gather_f32(ctx, in.data(), out.data(), count);
    EXPECT_TRUE(sameBits(out, expected));
    // In place: the rank's own part already sits at its slot.
    std::vector<float> inPlace(out.size(), -1.0f);
    std::copy(in.begin(), in.end(), inPlace.begin() + rank() * count);
    ztrt_all_gather_f32(ctx, inPlace.data() + rank() * count, inPlace.data(),
                        count);
    EXPECT_TRUE(sameBits(inPlace, expected)) << "in place";
    ++salt;
  }
}

TEST(MpiCollectives, GatherToEveryRoot) {
  // The runtime's own gather (the checkpoint's consolidation of shards):
  // root gets every rank's block in rank order, bit for bit; the others'
  // receive buffers stay untouched.
  for (int root = 0; root < ranks(); ++root) {
    SCOPED_TRACE("root " + std::to_string(root));
    const int64_t count = 1001;
    std::vector<float> expected;
    for (int s = 0; s < ranks(); ++s) {
      std::vector<float> part = values(s, count, 400);
      expected.insert(expected.end(), part.begin(), part.end());
    }
    std::vector<float> in = values(rank(), count, 400);
    std::vector<float> out(static_cast<size_t>(ranks() * count), -1.0f);
    ctx->comm().gather(in.data(), out.data(), count, root);
    if (rank() == root)
      EXPECT_TRUE(sameBits(out, expected));
    else
      EXPECT_TRUE(sameBits(out, std::vector<float>(out.size(), -1.0f)));
  }
}

TEST(MpiCollectives, BcastFromEveryRoot) {
  for (int root = 0; root < ranks(); ++root) {
    SCOPED_TRACE("root " + std::to_string(root));
    std::vector<float> buf = values(rank(), 1001, 300);
    ztrt_bcast_f32(ctx, buf.data(), 1001, root);
    EXPECT_TRUE(sameBits(buf, values(root, 1001, 300)));
  }
}

TEST(MpiCollectives, TrafficIsAccounted) {
  const int64_t n = ranks();
  CollectiveStats before[kCollectiveKinds];
  for (int k = 0; k < kCollectiveKinds; ++k)
    before[k] = ctx->communication(static_cast<Collective>(k));
  // 10 elements: not a multiple of 4, so the all_reduce pads to chunks of
  // ceil(10 / N) and sends more than the formula's payload.
  std::vector<float> buf(static_cast<size_t>(10 * n), 1.0f);
  ztrt_all_reduce_f32(ctx, buf.data(), buf.data(), 10, 0);
  ztrt_reduce_scatter_f32(ctx, buf.data(), buf.data(), 3, 0);
  ztrt_all_gather_f32(ctx, buf.data(), buf.data(), 3);
  ztrt_bcast_f32(ctx, buf.data(), 10, 0);

  const int64_t chunk = (10 + n - 1) / n;
  struct Expect {
    Collective kind;
    int64_t bytes, wire;
  };
  const Expect expected[] = {
      {Collective::AllReduce, 2 * (n - 1) * 40 / n, 2 * (n - 1) * chunk * 4},
      {Collective::ReduceScatter, (n - 1) * 12, (n - 1) * 12},
      {Collective::AllGather, (n - 1) * 12, (n - 1) * 12},
      // Only the root sends, to each of the N-1 others.
      {Collective::Broadcast, 40, rank() == 0 ? (n - 1) * 40 : 0},
  };
  for (const Expect &e : expected) {
    const CollectiveStats &now = ctx->communication(e.kind);
    const CollectiveStats &old = before[static_cast<int>(e.kind)];
    EXPECT_EQ(now.calls - old.calls, 1) << collectiveName(e.kind);
    EXPECT_EQ(now.bytes - old.bytes, e.bytes) << collectiveName(e.kind);
    EXPECT_EQ(now.wireBytes - old.wireBytes, e.wire) << collectiveName(e.kind);
  }
}

TEST(MpiCollectives, EveryRankHoldsTheSameBits) {
  // Independent of the code under test: MPI's own allgather of each rank's
  // all-reduce result, compared bitwise across ranks.
  const int64_t n = 4099;
  std::vector<float> in = values(rank(), n, 400), out(n);
  ztrt_all_reduce_f32(ctx, in.data(), out.data(), n, 1);
  std::vector<float> all(static_cast<size_t>(n * ranks()));
  MPI_Allgather(out.data(), static_cast<int>(n), MPI_FLOAT, all.data(),
                static_cast<int>(n), MPI_FLOAT, MPI_COMM_WORLD);
  for (int s = 1; s < ranks(); ++s)
    EXPECT_EQ(std::memcmp(all.data(), all.data() + s * n, n * sizeof(float)), 0)
        << "rank " << s << " differs from rank 0";
}

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<Communicator> world = Communicator::initWorld(&argc, &argv);
  if (argc != 2 || (expectedRanks = std::atoi(argv[1])) < 1) {
    std::fprintf(stderr, "usage: mpiexec -n N %s N\n", argv[0]);
    return 2;
  }
  if (world->rank() != 0) {
    ::testing::TestEventListeners &listeners =
        ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(world->rank()));
  }
  ztrt_ctx context(createCpuBackend(), std::move(world));
  ctx = &context;
  int failed = RUN_ALL_TESTS();
  // Succeed only if every rank passed; a failure on one rank alone must
  // still fail the job whatever exit status the launcher reports.
  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return anyFailed ? 1 : 0;
}
