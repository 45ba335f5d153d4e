//===- MpiMainTest.cpp - ztrt_main as the ranks of an MPI job -------------===//
//
// Runs the fake model (whose step averages its gradient with
// ztrt_all_reduce) under the MPI launcher found at configure time, and
// once without it: who prints, what the report holds, the traffic numbers,
// reproducibility, and that errors end every rank instead of hanging one.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "base/Json.h"
#include "io/Safetensors.h"

#include <cstring>
#include <regex>

using namespace ztrt;
using namespace ztrt::test;

namespace {

// An MPI job that outlives this is hung (a healthy one takes about a second,
// even oversubscribed).
constexpr int kTimeoutSeconds = 60;
constexpr int kSteps = 5;
// The fake model's gradient: 4 floats, all-reduced once per step.
constexpr int64_t kGradElems = 4;

class MpiMainTest : public ::testing::Test {
protected:
  void SetUp() override { allowMpiJobsHere(); }

  ProcessResult launch(int ranks, std::vector<std::string> args) {
    std::vector<std::string> command = {ZTRT_MPIEXEC, ZTRT_MPIEXEC_NUMPROC_FLAG,
                                        std::to_string(ranks), ZTRT_FAKE_MODEL};
    command.insert(command.end(), args.begin(), args.end());
    ProcessResult r = runProcess(dir, command, kTimeoutSeconds);
    EXPECT_FALSE(r.timedOut) << "the MPI job hung; stderr:\n" << r.err;
    return r;
  }

  TempDir dir;
};

/// The report's "communication" / "all_reduce" record.
const Json &allReduceStats(const Json &holder) {
  const Json *comm = jsonFind(holder, "communication");
  static const Json missing;
  EXPECT_NE(comm, nullptr);
  const Json *stats = comm ? jsonFind(*comm, "all_reduce") : nullptr;
  EXPECT_NE(stats, nullptr);
  return stats ? *stats : missing;
}

/// Checks a report of `ranks` ranks of kSteps steps: structure, per-rank
/// entries, the mean loss and the all-reduce traffic of every rank.
void checkReport(const Json &report, int ranks) {
  EXPECT_EQ(member(report, "world_size"), ranks);
  EXPECT_EQ(member(report, "rank"), 0);
  const Json *steps = jsonFind(report, "steps");
  const Json *perRank = jsonFind(report, "ranks");
  ASSERT_TRUE(steps && steps->size() == kSteps);
  ASSERT_TRUE(perRank && (*perRank).size() == static_cast<size_t>(ranks));

  // One all_reduce of 4 floats per step. Payload 2(N-1)/N * 16 bytes; the
  // cpu backend sends chunks of ceil(4/N) floats to N-1 peers twice.
  const int64_t chunk = (kGradElems + ranks - 1) / ranks;
  const int64_t payload = 2 * (ranks - 1) * kGradElems * 4 / ranks;
  const int64_t wire = 2 * (ranks - 1) * chunk * 4;
  for (int r = 0; r < ranks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const Json &entry = (*perRank)[r];
    EXPECT_EQ(member(entry, "rank"), r);
    ASSERT_EQ((*jsonFind(entry, "losses")).size(), static_cast<size_t>(kSteps));
    ASSERT_EQ((*jsonFind(entry, "time_ms")).size(),
              static_cast<size_t>(kSteps));
    // Every rank holds the full (replicated) model and its own inputs.
    const Json *memory = jsonFind(entry, "memory");
    ASSERT_NE(memory, nullptr);
    EXPECT_EQ(member(*memory, "parameters"), 16);
    EXPECT_EQ(member(*memory, "other"), 128);
    const Json &stats = allReduceStats(entry);
    EXPECT_EQ(member(stats, "calls"), kSteps);
    EXPECT_EQ(member(stats, "bytes"), kSteps * payload);
    EXPECT_EQ(member(stats, "wire_bytes"), kSteps * wire);
    // By link (exact): the job's ranks share one node here.
    EXPECT_EQ(member(stats, "intra_node_wire_bytes"), kSteps * wire);
    EXPECT_EQ(member(stats, "inter_node_wire_bytes"), 0);
  }
  // No mesh record: one shard group of every rank, no compiled node size.
  const Json *mesh = jsonFind(report, "mesh");
  ASSERT_NE(mesh, nullptr);
  EXPECT_EQ(member(*mesh, "shard"), ranks);
  EXPECT_EQ(member(*mesh, "replicate"), 1);
  const Json *perNode = jsonFind(*mesh, "ranks_per_node");
  ASSERT_NE(perNode, nullptr);
  EXPECT_TRUE(perNode->is_null());
  EXPECT_EQ(member(allReduceStats(report), "bytes"), kSteps * payload);

  // The printed loss is the mean of the ranks' losses: summed in rank order
  // in float, divided by N in float. %.9g round-trips floats, so the
  // comparison is exact.
  for (size_t t = 0; t < kSteps; ++t) {
    float sum = 0.0f;
    for (int r = 0; r < ranks; ++r) {
      float loss = static_cast<float>(
          jsonNumber((*jsonFind((*perRank)[r], "losses"))[t]));
      sum = r == 0 ? loss : sum + loss;
    }
    EXPECT_EQ(static_cast<float>(jsonNumber((*steps)[t].at("loss"))),
              sum / static_cast<float>(ranks))
        << "step " << t + 1;
  }
}

} // namespace

TEST_F(MpiMainTest, WorldOfOneWithoutLauncher) {
  ProcessResult r =
      runProcess(dir, {ZTRT_FAKE_MODEL, "--steps=5", "--threads=1", "--report",
                       dir.path("r.json")});
  ASSERT_EQ(r.status, 0) << r.err;
  Json report = readJson(dir.path("r.json"));
  checkReport(report, 1);
  // A world of one moves nothing, but the calls are still counted.
  EXPECT_EQ(member(allReduceStats(report), "wire_bytes"), 0);
}

TEST_F(MpiMainTest, TwoRanksTrainReplicatedAndOnlyRankZeroPrints) {
  ProcessResult r =
      launch(2, {"--steps=5", "--threads=1", "--seed=2", "--save",
                 dir.path("w.safetensors"), "--report", dir.path("r.json")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("ztrain: error"), std::string::npos) << r.err;
  EXPECT_EQ(countLines(r.out), static_cast<size_t>(kSteps)) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex("^step 1/5  loss [0-9.e+-]+  [0-9.]+ ms/step\n")))
      << r.out;
  EXPECT_EQ(dir.entries(),
            (std::vector<std::string>{"r.json", "w.safetensors"}));
  checkReport(readJson(dir.path("r.json")), 2);

  // The same job again gives the same bits: data slices, the averaged
  // gradient and the mean loss are all deterministic.
  ProcessResult again = launch(2, {"--steps=5", "--threads=1", "--seed=2",
                                   "--save", dir.path("w2.safetensors")});
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(readBytes(dir.path("w.safetensors")),
            readBytes(dir.path("w2.safetensors")));
  std::regex times(" [0-9.]+ ms/step");
  EXPECT_EQ(std::regex_replace(r.out, times, ""),
            std::regex_replace(again.out, times, ""));
}

TEST_F(MpiMainTest, FourRanksOversubscribed) {
  ProcessResult r =
      launch(4, {"--steps=5", "--threads=1", "--report", dir.path("r.json")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(countLines(r.out), static_cast<size_t>(kSteps)) << r.out;
  checkReport(readJson(dir.path("r.json")), 4);
}

TEST_F(MpiMainTest, ErrorOnEveryRankEndsTheJob) {
  ProcessResult r = launch(2, {"--data", dir.path("nope.safetensors"),
                               "--report", dir.path("r.json")});
  EXPECT_EQ(r.status, 1) << r.err;
  // Whichever rank aborts first may kill the other before it prints, so at
  // least one of the two lines is there.
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("ztrain: error: \\[rank [01]\\] --data: cannot open '" +
                        dir.path("nope.safetensors") + "'")))
      << r.err;
  EXPECT_TRUE(dir.entries().empty());
}

TEST_F(MpiMainTest, ErrorOnOneRankDoesNotHangTheOthers) {
  // Only rank 0 checks the --save path; it fails while rank 1 already
  // waits for it in the next collective.
  ProcessResult r = launch(2, {"--steps=2", "--threads=1", "--save",
                               dir.path("sub/w.safetensors"), "--report",
                               dir.path("r.json")});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("ztrain: error: [rank 0] --save '" +
                       dir.path("sub/w.safetensors") + "': directory '" +
                       dir.path("sub") + "' does not exist"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("[rank 1]"), std::string::npos) << r.err;
  EXPECT_TRUE(dir.entries().empty());
}
