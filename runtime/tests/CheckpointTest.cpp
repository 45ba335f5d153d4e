//===- CheckpointTest.cpp - Sharded checkpoints, resume, consolidation ----===//
//
// End to end with the fake models: training K steps, checkpointing and
// resuming for M more is bitwise the same as K + M steps straight (final
// weights and every step's loss), in a world of one and under the MPI
// launcher with ZeRO stage 2 and 3 storage; consolidating the shards gives
// the bytes --save writes. In process: the index, the resume checks and the
// consolidation errors, each one line.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "io/Checkpoint.h"
#include "base/DType.h"
#include "step/Descriptor.h"
#include "base/Json.h"
#include "io/Safetensors.h"
#include "base/Support.h"

#include <cstring>
#include <regex>
#include <sys/stat.h>

using namespace ztrt;
using namespace ztrt::test;

namespace {

// As in MpiMainTest: a healthy job takes about a second.
constexpr int kTimeoutSeconds = 60;

/// Runs `model` with `args`, under the launcher with `ranks` ranks (a lone
/// process for 0); expects success.
ProcessResult run(const TempDir &dir, const std::string &model, int ranks,
                  std::vector<std::string> args) {
  std::vector<std::string> command = {model};
  if (ranks > 0)
    command.insert(command.begin(), {ZTRT_MPIEXEC, ZTRT_MPIEXEC_NUMPROC_FLAG,
                                     std::to_string(ranks)});
  command.insert(command.end(), args.begin(), args.end());
  ProcessResult r = runProcess(dir, command, kTimeoutSeconds);
  EXPECT_FALSE(r.timedOut) << "the job hung; stderr:\n" << r.err;
  return r;
}

std::string zeroModel(int stage, int ranks) {
  return std::string(ZTRT_FAKE_ZERO_MODEL_DIR) + "/ztrt_fake_zero" +
         std::to_string(stage) + "_np" + std::to_string(ranks);
}

/// The report's (step, loss) pairs, the loss as its %.9g literal: equal
/// literals are equal floats, so comparing them is bitwise.
std::vector<std::pair<std::string, std::string>>
reportLosses(const std::string &path) {
  std::vector<std::pair<std::string, std::string>> out;
  Json report = readJson(path);
  const Json *steps = jsonFind(report, "steps");
  EXPECT_NE(steps, nullptr);
  if (steps)
    for (const Json &step : *steps)
      out.emplace_back(jsonFind(step, "step")->dump(),
                       jsonFind(step, "loss")->dump());
  return out;
}

/// The `ztrain: error:` lines of a job's stderr (the launcher adds its own
/// abort notice around them).
std::vector<std::string> errorLines(const std::string &err) {
  std::vector<std::string> lines;
  std::regex line("ztrain: error: [^\n]*");
  for (auto it = std::sregex_iterator(err.begin(), err.end(), line);
       it != std::sregex_iterator(); ++it)
    lines.push_back(it->str());
  return lines;
}

/// Trains `model` 2K steps straight, and K steps + checkpoint + K resumed
/// steps; the final weights and every step's loss must agree bitwise,
/// since the resumed run must compute exactly what the straight one did.
void expectResumeIsExact(const TempDir &dir, const std::string &model,
                         int ranks, int64_t k) {
  std::string half = std::to_string(k), all = std::to_string(2 * k);
  ProcessResult straight =
      run(dir, model, ranks,
          {"--steps", all, "--seed=5", "--threads=1", "--save",
           dir.path("straight.safetensors"), "--report", dir.path("s.json")});
  ASSERT_EQ(straight.status, 0) << straight.err;
  ProcessResult first =
      run(dir, model, ranks,
          {"--steps", half, "--seed=5", "--threads=1", "--save-checkpoint",
           dir.path("ck"), "--report", dir.path("a.json")});
  ASSERT_EQ(first.status, 0) << first.err;
  ProcessResult resumed =
      run(dir, model, ranks,
          {"--steps", half, "--resume", dir.path("ck"), "--threads=1", "--save",
           dir.path("resumed.safetensors"), "--report", dir.path("b.json")});
  ASSERT_EQ(resumed.status, 0) << resumed.err;

  std::string want = readBytes(dir.path("straight.safetensors"));
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(readBytes(dir.path("resumed.safetensors")), want);
  auto losses = reportLosses(dir.path("a.json"));
  auto more = reportLosses(dir.path("b.json"));
  losses.insert(losses.end(), more.begin(), more.end());
  EXPECT_EQ(losses, reportLosses(dir.path("s.json")));
  // Progress lines count on from the checkpoint, against the new total.
  EXPECT_NE(resumed.out.find("step " + std::to_string(k + 1) + "/" + all),
            std::string::npos)
      << resumed.out;
}

} // namespace

TEST(CheckpointTest, ResumeInAWorldOfOneIsExact) {
  TempDir dir;
  expectResumeIsExact(dir, ZTRT_FAKE_MODEL, 0, 10);

  // One directory per saved step, and the pointer to the newest.
  EXPECT_EQ(readBytes(dir.path("ck/latest")), "global_step10\n");
  EXPECT_EQ(readBytes(dir.path("ck/") + checkpointTag(10) + "/index.json"),
            readBytes(dir.path("ck/global_step10/index.json")));
  // The index: Hugging Face's keys, then what resuming needs.
  Json index = readJson(dir.path("ck/global_step10/index.json"));
  const Json *ztrain = jsonFind(index, "ztrain");
  ASSERT_NE(ztrain, nullptr);
  int64_t value = -1;
  EXPECT_TRUE(jsonInt64(*jsonFind(*ztrain, "step"), value) && value == 10);
  EXPECT_TRUE(jsonInt64(*jsonFind(*ztrain, "world_size"), value) && value == 1);
  EXPECT_EQ(jsonFind(*ztrain, "seed")->dump(), "5");
  EXPECT_NE(jsonFind(index, "metadata"), nullptr);
  const Json *map = jsonFind(index, "weight_map");
  ASSERT_NE(map, nullptr);
  ASSERT_NE(jsonFind(*map, "w.momentum_buffer"), nullptr);
  EXPECT_EQ(jsonText((*jsonFind(*map, "w")).at(0)), "rank-0-of-1.safetensors");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{
                               "a.json", "b.json", "ck", "resumed.safetensors",
                               "s.json", "straight.safetensors"}));

  // The shard holds the parameter and its momentum buffer as stored.
  SafetensorsFile shard = SafetensorsFile::read(
      dir.path("ck/global_step10/rank-0-of-1.safetensors"), "test");
  ASSERT_EQ(shard.tensors().size(), 2u);
  EXPECT_EQ(shard.tensors()[1].name, "w.momentum_buffer");
  EXPECT_EQ(shard.tensors()[1].shape, (std::vector<int64_t>{4}));
}

TEST(CheckpointTest, CheckpointEveryKeepsEachStepAndPointsLatestAtTheEnd) {
  // Checkpoints at steps 4 and 8 and the end of the run (10) each get a
  // directory; `latest` names the last, whose files are exactly those of a
  // run that checkpoints once at the end.
  TempDir dir;
  ASSERT_EQ(run(dir, ZTRT_FAKE_MODEL, 0,
                {"--steps=10", "--save-checkpoint", dir.path("every"),
                 "--checkpoint-every=4", "--threads=1"})
                .status,
            0);
  ASSERT_EQ(
      run(dir, ZTRT_FAKE_MODEL, 0,
          {"--steps=10", "--save-checkpoint", dir.path("once"), "--threads=1"})
          .status,
      0);
  EXPECT_EQ(listDirectory(dir.path("every")).size(), 4u);
  for (const char *step : {"global_step4", "global_step8", "global_step10"})
    EXPECT_FALSE(readBytes(dir.path("every/") + step + "/index.json").empty())
        << step;
  EXPECT_EQ(readBytes(dir.path("every/latest")), "global_step10\n");
  for (const char *name : {"index.json", "rank-0-of-1.safetensors"})
    EXPECT_EQ(readBytes(dir.path("every/global_step10/") + name),
              readBytes(dir.path("once/global_step10/") + name))
        << name;

  // --keep-checkpoints 2: the two newest stay; leftovers of a killed save
  // (its temporary directory, a temp file of `latest`) go at the next save.
  ASSERT_EQ(mkdir(dir.path("kept").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(dir.path("kept/.tmp-global_step99").c_str(), 0755), 0);
  writeBytes(dir.path("kept/latest.tmp.12345"), "global_step99\n");
  ASSERT_EQ(run(dir, ZTRT_FAKE_MODEL, 0,
                {"--steps=10", "--save-checkpoint", dir.path("kept"),
                 "--checkpoint-every=3", "--keep-checkpoints=2",
                 "--threads=1"})
                .status,
            0);
  std::vector<std::string> kept = listDirectory(dir.path("kept"));
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"global_step10", "global_step9",
                                            "latest"}));
}

TEST(CheckpointTest, ResumeFollowsLatestAndRefusesAMalformedOne) {
  TempDir dir;
  ASSERT_EQ(run(dir, ZTRT_FAKE_MODEL, 0,
                {"--steps=4", "--save-checkpoint", dir.path("ck"),
                 "--checkpoint-every=2", "--threads=1"})
                .status,
            0);
  EXPECT_EQ(resolveCheckpoint(dir.path("ck"), "t"),
            dir.path("ck/global_step4"));
  EXPECT_EQ(readCheckpointIndex(dir.path("ck"), "t").step, 4);
  // A step directory is a checkpoint too.
  EXPECT_EQ(readCheckpointIndex(dir.path("ck/global_step2"), "t").step, 2);
  writeBytes(dir.path("ck/latest"), "../elsewhere\n");
  EXPECT_EXIT(readCheckpointIndex(dir.path("ck"), "--resume"),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: --resume: '[^']*/ck/latest' does not name a "
              "checkpoint \\(expected global_step<N>, got '../elsewhere'\\)\n$");
}

TEST(CheckpointTest, Crc32cIsTheCastagnoliCrc) {
  // The standard check value of CRC-32C ("123456789"), and continuation.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("56789", 5, crc32c("1234", 4)), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // Lengths around the 8-byte hardware step agree with a bitwise reference.
  std::string bytes;
  for (int i = 0; i < 37; ++i)
    bytes.push_back(static_cast<char>(i * 37 + 11));
  for (size_t n = 0; n <= bytes.size(); ++n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; ++i) {
      c ^= static_cast<unsigned char>(bytes[i]);
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    EXPECT_EQ(crc32c(bytes.data(), n), ~c) << n;
  }
}

/// ZeRO stage 2 (padded full parameter, sharded momentum) and stage 3 (both
/// sharded) on two ranks.
class MpiCheckpointTest : public ::testing::TestWithParam<int> {
protected:
  void SetUp() override { allowMpiJobsHere(); }
  TempDir dir;
};

TEST_P(MpiCheckpointTest, ResumeIsExactAndShardsConsolidate) {
  const std::string model = zeroModel(GetParam(), 2);
  expectResumeIsExact(dir, model, 2, 10);

  // Each rank's file holds its raw storage: E elements per tensor.
  const int64_t chunk = 3, padded = 6; // See tests/CMakeLists.txt.
  for (int r = 0; r < 2; ++r) {
    SafetensorsFile shard = SafetensorsFile::read(
        dir.path("ck/global_step10/rank-" + std::to_string(r) +
                 "-of-2.safetensors"),
        "t");
    EXPECT_EQ(shard.find("w")->shape,
              (std::vector<int64_t>{GetParam() == 2 ? padded : chunk}));
    EXPECT_EQ(shard.find("w.momentum_buffer")->shape,
              (std::vector<int64_t>{chunk}));
  }

  // The consolidated checkpoint is what --save of the same run writes.
  ProcessResult saved = run(dir, model, 2,
                            {"--steps=7", "--save-checkpoint", dir.path("ck7"),
                             "--save", dir.path("saved7.safetensors")});
  ASSERT_EQ(saved.status, 0) << saved.err;
  consolidateCheckpoint(dir.path("ck7"), dir.path("full7.safetensors"));
  EXPECT_EQ(readBytes(dir.path("full7.safetensors")),
            readBytes(dir.path("saved7.safetensors")));
}

TEST_P(MpiCheckpointTest, OtherLayoutsReshardAndMissingShardsAreOneLine) {
  const int stage = GetParam();
  ASSERT_EQ(run(dir, zeroModel(stage, 2), 2,
                {"--steps=2", "--save-checkpoint", dir.path("ck")})
                .status,
            0);
  consolidateCheckpoint(dir.path("ck"), dir.path("full.safetensors"));
  // Another number of ranks, and the same ranks at the other stage: the
  // tensors are resharded on load, so 0 further steps save exactly the
  // checkpoint's parameters.
  ProcessResult wider =
      run(dir, zeroModel(stage, 4), 4,
          {"--resume", dir.path("ck"), "--steps=0", "--save",
           dir.path("wider.safetensors")});
  ASSERT_EQ(wider.status, 0) << wider.err;
  EXPECT_EQ(readBytes(dir.path("wider.safetensors")),
            readBytes(dir.path("full.safetensors")));
  ProcessResult other =
      run(dir, zeroModel(5 - stage, 2), 2,
          {"--resume", dir.path("ck"), "--steps=0", "--save",
           dir.path("other.safetensors")});
  ASSERT_EQ(other.status, 0) << other.err;
  EXPECT_EQ(readBytes(dir.path("other.safetensors")),
            readBytes(dir.path("full.safetensors")));
  // A shard missing on rank 1 only: rank 1 names it, the job ends.
  ASSERT_EQ(
      unlink(dir.path("ck/global_step2/rank-1-of-2.safetensors").c_str()), 0);
  ProcessResult missing =
      run(dir, zeroModel(stage, 2), 2, {"--resume", dir.path("ck")});
  EXPECT_NE(missing.status, 0);
  EXPECT_EQ(errorLines(missing.err),
            std::vector<std::string>{
                "ztrain: error: [rank 1] --resume: cannot open '" +
                dir.path("ck") +
                "/global_step2/rank-1-of-2.safetensors': No such file or "
                "directory"});
}

INSTANTIATE_TEST_SUITE_P(Stages, MpiCheckpointTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int> &info) {
                           return "Stage" + std::to_string(info.param);
                         });

namespace {

// fake_zero_model.c's descriptor at stage 3 on two ranks.
const char kStage3[] = "ztrain-descriptor 1\n"
                       "grid 2\n"
                       "param w f32 2 4 1 init normal 0.5 store 3 shard\n"
                       "state w.momentum_buffer f32 2 4 1 of w store 3 shard\n"
                       "input x f32 2 8 4 bound 0\n"
                       "optimizer sgd lr=0.1 momentum=0.5\n";

/// Writes a two-rank checkpoint of kStage3 at step 4 into `dir` without
/// running a model: the index the runtime writes and shards with known
/// values (w = 1..4, then the padding; momentum = -1..-4).
void writeFakeCheckpoint(const std::string &dir) {
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  const float w[2][3] = {{1, 2, 3}, {4, 0, 0}};
  const float m[2][3] = {{-1, -2, -3}, {-4, 0, 0}};
  for (int r = 0; r < 2; ++r)
    writeSafetensors(
        dir + "/" + checkpointShardName(r, 2),
        {{"w", "F32", {3}, w[r]}, {"w.momentum_buffer", "F32", {3}, m[r]}},
        {{"format", "pt"},
         {"ztrain_rank", std::to_string(r)},
         {"ztrain_world_size", "2"},
         {"ztrain_step", "4"}});
  std::string tensors =
      "[{\"name\": \"w\", \"kind\": \"param\", \"dtype\": \"F32\", "
      "\"shape\": [4, 1], \"storage\": \"shard\", \"elements\": 3}, "
      "{\"name\": \"w.momentum_buffer\", \"kind\": \"state\", \"dtype\": "
      "\"F32\", \"shape\": [4, 1], \"storage\": \"shard\", \"elements\": 3}]";
  writeBytes(dir + "/index.json",
             "{\"metadata\": {\"total_size\": 48}, \"weight_map\": {}, "
             "\"ztrain\": {\"version\": 1, \"world_size\": 2, \"files\": "
             "[\"rank-0-of-2.safetensors\", \"rank-1-of-2.safetensors\"], "
             "\"step\": 4, \"seed\": 18446744073709551615, \"data\": \"\", "
             "\"tensors\": " +
                 tensors + ", \"descriptor\": " + jsonQuote(kStage3) + "}}");
}

} // namespace

TEST(CheckpointTest, IndexReadsBack) {
  TempDir dir;
  writeFakeCheckpoint(dir.path("ck"));
  CheckpointIndex index = readCheckpointIndex(dir.path("ck"), "test");
  EXPECT_EQ(index.worldSize, 2);
  EXPECT_EQ(index.step, 4);
  EXPECT_EQ(index.seed, 18446744073709551615ull);
  EXPECT_EQ(index.descriptor, kStage3);
  ASSERT_EQ(index.tensors.size(), 2u);
  EXPECT_EQ(index.tensors[0].kind, CheckpointTensor::Kind::Param);
  EXPECT_EQ(index.tensors[1].kind, CheckpointTensor::Kind::State);
  EXPECT_EQ(index.tensors[1].spec.shape, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(index.tensors[1].spec.store, StoreMode::Shard);
  EXPECT_EQ(index.tensors[1].spec.storeElems, 3);
}

TEST(CheckpointTest, ResumeChecksNameBothValues) {
  TempDir dir;
  writeFakeCheckpoint(dir.path("ck"));
  CheckpointIndex index = readCheckpointIndex(dir.path("ck"), "test");
  // Death tests re-run the test in a child with a TempDir of its own, so the
  // patterns match any directory.
  const std::string prefix = "^ztrain: error: --resume '[^']*/ck': ";
  Descriptor desc = parseDescriptor(kStage3);
  checkResumable(index, desc, kStage3, 2); // Passes.

  using ::testing::ExitedWithCode;
  // Another number of ranks: resharded on load, not refused.
  checkResumable(index, desc, kStage3, 4);
  EXPECT_TRUE(checkpointLayoutMatches(index, desc, 2));
  EXPECT_FALSE(checkpointLayoutMatches(index, desc, 4));
  // A parameter of another shape: named with both shapes and storages,
  // before the descriptor text (which differs too) is compared.
  std::string wide = "ztrain-descriptor 1\n"
                     "param w f32 2 5 1 init normal 0.5 store 3 shard\n"
                     "state w.momentum_buffer f32 2 5 1 of w store 3 shard\n";
  EXPECT_EXIT(
      checkResumable(index, parseDescriptor(wide.c_str()), wide.c_str(), 2),
      ExitedWithCode(1),
      prefix + "param 'w' is F32 \\[4, 1\\], storage 'shard' of 3 "
               "elements in the checkpoint, this model has F32 "
               "\\[5, 1\\], storage 'shard' of 3 elements\n$");
  // A state the checkpoint lacks.
  std::string extra =
      std::string(kStage3) + "state w.v f32 2 4 1 of w store 3 shard\n";
  EXPECT_EXIT(
      checkResumable(index, parseDescriptor(extra.c_str()), extra.c_str(), 2),
      ExitedWithCode(1),
      prefix + "the checkpoint has no state 'w.v', which this model "
               "has\n$");
  // The same tensors, another learning rate.
  std::string lr =
      std::regex_replace(std::string(kStage3), std::regex("lr=0.1"), "lr=0.2");
  EXPECT_EXIT(checkResumable(index, parseDescriptor(lr.c_str()), lr.c_str(), 2),
              ExitedWithCode(1),
              prefix + "descriptor record 'optimizer sgd lr=0.1 "
                       "momentum=0.5' in the checkpoint is 'optimizer sgd "
                       "lr=0.2 momentum=0.5' in this model\n$");
}

TEST(CheckpointTest, WhereTensorsLiveIsLayout) {
  TempDir dir;
  writeFakeCheckpoint(dir.path("ck"));
  CheckpointIndex index = readCheckpointIndex(dir.path("ck"), "test");
  // The same model with its state on nvme and its parameter in host
  // memory, stepped through a host step buffer: resumes (offload changes
  // no stored bit), as on another stage (no store suffix) does.
  std::string offloaded =
      "ztrain-descriptor 1\n"
      "grid 2\n"
      "param w f32 2 4 1 init normal 0.5 store 3 shard space host\n"
      "state w.momentum_buffer f32 2 4 1 of w store 3 shard space nvme\n"
      "input x f32 2 8 4 bound 0\n"
      "optimizer sgd lr=0.1 momentum=0.5\n"
      "host_step_buffer 4096\n";
  checkResumable(index, parseDescriptor(offloaded.c_str()), offloaded.c_str(),
                 2);
  std::string unsharded =
      "ztrain-descriptor 1\n"
      "param w f32 2 4 1 init normal 0.5 space nvme\n"
      "state w.momentum_buffer f32 2 4 1 of w space nvme\n"
      "input x f32 2 8 4 bound 0\n"
      "optimizer sgd lr=0.1 momentum=0.5\n";
  checkResumable(index, parseDescriptor(unsharded.c_str()), unsharded.c_str(),
                 1);
  // What precedes the suffixes still counts: another initialization.
  std::string scale = std::regex_replace(offloaded, std::regex("normal 0.5"),
                                         "normal 0.25");
  EXPECT_EXIT(
      checkResumable(index, parseDescriptor(scale.c_str()), scale.c_str(), 2),
      ::testing::ExitedWithCode(1),
      "descriptor record 'param w f32 2 4 1 init normal 0.5' in the "
      "checkpoint is 'param w f32 2 4 1 init normal 0.25' in this model\n$");
}

TEST(CheckpointTest, AFusedBuildResumesAnUnfusedCheckpoint) {
  // --fuse=elementwise changes how the step computes, not a bit of what:
  // the `fused` record is not compared (nor is the arena it shrinks).
  TempDir dir;
  writeFakeCheckpoint(dir.path("ck"));
  CheckpointIndex index = readCheckpointIndex(dir.path("ck"), "test");
  std::string fused = std::string(kStage3) + "arena activations 64\nfused 2\n";
  checkResumable(index, parseDescriptor(fused.c_str()), fused.c_str(), 2);
}

TEST(CheckpointTest, ConsolidationReassemblesAndRefusesBadShards) {
  TempDir dir;
  const std::string ck = dir.path("ck"), out = dir.path("full.safetensors");
  writeFakeCheckpoint(ck);
  consolidateCheckpoint(ck, out);
  SafetensorsFile full = SafetensorsFile::read(out, "test");
  ASSERT_EQ(full.tensors().size(), 1u); // Parameters only.
  const SafetensorsTensor &w = full.tensors()[0];
  EXPECT_EQ(w.shape, (std::vector<int64_t>{4, 1}));
  const float expected[4] = {1, 2, 3, 4};
  ASSERT_EQ(w.bytes, sizeof(expected));
  EXPECT_EQ(std::memcmp(w.data, expected, sizeof(expected)), 0);
  ASSERT_EQ(unlink(out.c_str()), 0);

  using ::testing::ExitedWithCode;
  const std::string shard1 = ck + "/rank-1-of-2.safetensors";
  // Death tests re-run the test in a child with a TempDir of its own, so the
  // patterns match any directory.
  const std::string shard1Pattern = "[^']*/ck/rank-1-of-2.safetensors";
  std::string good = readBytes(shard1);
  // Each failure is one line, and leaves neither the output nor a
  // temporary behind.
  auto fails = [&](const std::string &pattern) {
    EXPECT_EXIT(consolidateCheckpoint(ck, out), ExitedWithCode(1),
                "^ztrain: error: ztrain-consolidate: " + pattern + "\n$");
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"ck"});
  };
  writeBytes(shard1, good.substr(0, good.size() - 4));
  fails("'" + shard1Pattern + "' is not a valid safetensors file: .*");
  writeSafetensors(
      shard1, {{"w", "F32", {3}, expected}},
      {{"ztrain_rank", "1"}, {"ztrain_world_size", "2"}, {"ztrain_step", "3"}});
  fails("'" + shard1Pattern +
        "' has ztrain_step '3' but the index says '4' \\(a "
        "shard of another save\\)");
  ASSERT_EQ(unlink(shard1.c_str()), 0);
  EXPECT_EXIT(consolidateCheckpoint(ck, out), ExitedWithCode(1),
              "^ztrain: error: ztrain-consolidate: cannot open '" +
                  shard1Pattern + "': No such file or directory\n$");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ck"});
  ASSERT_EQ(unlink((ck + "/index.json").c_str()), 0);
  EXPECT_EXIT(consolidateCheckpoint(ck, out), ExitedWithCode(1),
              "^ztrain: error: ztrain-consolidate: cannot open '[^']*/ck"
              "/index.json': No such file or directory \\(not a "
              "checkpoint, or an incomplete one\\)\n$");
}

namespace {

const char kMixed[] = "ztrain-descriptor 1\n"
                      "grid 2\n"
                      "param w bf16 2 4 1 init normal 0.5 store 3 shard\n"
                      "param b f16 1 2 init zeros 0\n"
                      "grad w 3 f32\n"
                      "grad b 2 f16\n"
                      "state w.master f32 2 4 1 of w master store 3 shard\n"
                      "optimizer sgd lr=0.1\n";

/// A 2-rank checkpoint of kMixed: bf16 `w` sharded (3 per rank) with its
/// f32 master, f16 `b` whole; masters hold values bf16 cannot, so that
/// consolidating from them differs from widening the parameter.
void writeMixedCheckpoint(const std::string &dir) {
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  const float master[2][3] = {{1.0f + 0x1p-9f, 2.0f, -3.0f + 0x1p-10f},
                              {4.0f, 0, 0}};
  uint16_t w[2][3];
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 3; ++i)
      w[r][i] = bf16(master[r][i]).bits;
  const uint16_t b[2] = {f16(0.5f).bits, f16(-1.0f + 0x1p-10f).bits};
  std::string tensors;
  std::vector<uint32_t> crcW, crcM, crcB;
  for (int r = 0; r < 2; ++r) {
    writeSafetensors(dir + "/" + checkpointShardName(r, 2),
                     {{"w", "BF16", {3}, w[r]},
                      {"b", "F16", {2}, b},
                      {"w.master", "F32", {3}, master[r]}},
                     {{"format", "pt"},
                      {"ztrain_rank", std::to_string(r)},
                      {"ztrain_world_size", "2"},
                      {"ztrain_step", "4"}});
    crcW.push_back(crc32c(w[r], 6));
    crcM.push_back(crc32c(master[r], 12));
    crcB.push_back(crc32c(b, 4));
  }
  auto crcs = [](const std::vector<uint32_t> &c) {
    return format("[\"%08x\", \"%08x\"]", c[0], c[1]);
  };
  tensors =
      "[{\"name\": \"w\", \"kind\": \"param\", \"dtype\": \"BF16\", "
      "\"shape\": [4, 1], \"storage\": \"shard\", \"elements\": 3, "
      "\"crc32c\": " + crcs(crcW) + "}, "
      "{\"name\": \"b\", \"kind\": \"param\", \"dtype\": \"F16\", "
      "\"shape\": [2], \"storage\": \"whole\", \"elements\": 2, "
      "\"crc32c\": " + crcs(crcB) + "}, "
      "{\"name\": \"w.master\", \"kind\": \"state\", \"dtype\": \"F32\", "
      "\"shape\": [4, 1], \"master_of\": \"w\", \"storage\": \"shard\", "
      "\"elements\": 3, \"crc32c\": " + crcs(crcM) + "}]";
  writeBytes(dir + "/index.json",
             "{\"metadata\": {\"total_size\": 44}, \"weight_map\": {}, "
             "\"ztrain\": {\"version\": 2, \"world_size\": 2, \"files\": "
             "[\"rank-0-of-2.safetensors\", \"rank-1-of-2.safetensors\"], "
             "\"step\": 4, \"seed\": 1, \"data\": \"\", "
             "\"tensors\": " +
                 tensors + ", \"descriptor\": " + jsonQuote(kMixed) + "}}");
}

} // namespace

TEST(CheckpointTest, MixedPrecisionIndexReadsBackAndResumeChecksDtypes) {
  TempDir dir;
  writeMixedCheckpoint(dir.path("ck"));
  CheckpointIndex index = readCheckpointIndex(dir.path("ck"), "test");
  ASSERT_EQ(index.tensors.size(), 3u);
  EXPECT_EQ(index.tensors[0].spec.type, ElemType::BF16);
  EXPECT_EQ(index.tensors[0].spec.storeBytes, 6);
  EXPECT_EQ(index.tensors[1].spec.type, ElemType::F16);
  EXPECT_EQ(index.tensors[2].spec.type, ElemType::F32);
  EXPECT_EQ(index.tensors[2].masterOf, "w");
  EXPECT_EQ(index.tensors[0].masterOf, "");
  Descriptor desc = parseDescriptor(kMixed);
  checkResumable(index, desc, kMixed, 2); // Passes.
  // The same model with an f32 `w` cannot resume it: named with both types.
  std::string f32 = kMixed;
  f32.replace(f32.find("param w bf16"), 12, "param w f32");
  f32.replace(f32.find("grad w 3 f32\n"), 13, "grad w 3\n");
  f32.replace(f32.find(" master store"), 7, "");
  Descriptor wide = parseDescriptor(f32.c_str());
  EXPECT_EXIT(checkResumable(index, wide, f32.c_str(), 2),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: --resume '[^']*/ck': param 'w' is BF16 \\[4, "
              "1\\], storage 'shard' of 3 elements in the checkpoint, this "
              "model has F32 \\[4, 1\\], storage 'shard' of 3 elements\n$");
}

// Exact, no tolerance: each output is a copy, an exact widening, or one
// round to nearest even of the stored values.
TEST(CheckpointTest, ConsolidateDtypes) {
  TempDir dir;
  const std::string ck = dir.path("ck");
  writeMixedCheckpoint(ck);
  const float master[4] = {1.0f + 0x1p-9f, 2.0f, -3.0f + 0x1p-10f, 4.0f};
  const float bvals[2] = {0.5f, -1.0f + 0x1p-10f};

  // Own dtypes: bf16 w (the master rounded), f16 b, no states.
  consolidateCheckpoint(ck, dir.path("own.safetensors"));
  SafetensorsFile own = SafetensorsFile::read(dir.path("own.safetensors"), "t");
  ASSERT_EQ(own.tensors().size(), 2u);
  const SafetensorsTensor *w = own.find("w");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->dtype, "BF16");
  EXPECT_EQ(w->shape, (std::vector<int64_t>{4, 1}));
  ASSERT_EQ(w->bytes, 8u);
  for (int i = 0; i < 4; ++i) {
    uint16_t bits;
    std::memcpy(&bits, w->data + 2 * i, 2);
    EXPECT_EQ(bits, bf16(master[i]).bits) << i;
  }
  EXPECT_EQ(own.find("b")->dtype, "F16");

  // fp32: w from its master (not the widened bf16), b widened.
  consolidateCheckpoint(ck, dir.path("fp32.safetensors"),
                        ConsolidateType::FP32);
  SafetensorsFile fp32 =
      SafetensorsFile::read(dir.path("fp32.safetensors"), "t");
  ASSERT_EQ(fp32.tensors().size(), 2u); // The master is not a tensor of its own.
  w = fp32.find("w");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->dtype, "F32");
  ASSERT_EQ(w->bytes, 16u);
  EXPECT_EQ(std::memcmp(w->data, master, 16), 0);
  const SafetensorsTensor *b = fp32.find("b");
  EXPECT_EQ(b->dtype, "F32");
  ASSERT_EQ(b->bytes, 8u);
  EXPECT_EQ(std::memcmp(b->data, bvals, 8), 0);

  // bf16: every floating tensor rounded to bf16.
  consolidateCheckpoint(ck, dir.path("bf16.safetensors"),
                        ConsolidateType::BF16);
  SafetensorsFile half =
      SafetensorsFile::read(dir.path("bf16.safetensors"), "t");
  b = half.find("b");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->dtype, "BF16");
  uint16_t bits[2];
  std::memcpy(bits, b->data, 4);
  EXPECT_EQ(bits[0], bf16(0.5f).bits);
  // -1 + 2^-10 is exact in f16 and rounds to -1 in bf16.
  EXPECT_EQ(bits[1], bf16(-1.0f).bits);
  EXPECT_EQ(half.find("w")->dtype, "BF16");
  EXPECT_EQ(std::memcmp(half.find("w")->data, own.find("w")->data, 8), 0);
}
