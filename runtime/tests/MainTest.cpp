//===- MainTest.cpp - End-to-end tests of ztrt_main -----------------------===//
//
// Runs the fake model executable (fake_model.c linked with libztrt_main) as
// a child process and checks its exit status, output and files.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "base/DType.h"
#include "step/Init.h"
#include "base/Json.h"
#include "io/Safetensors.h"
#ifdef ZTRT_HAVE_CUDA
#include "backends/cuda/CudaBackend.h"
#endif

#include <cstring>
#include <regex>
#include <unistd.h>

using namespace ztrt;
using namespace ztrt::test;

namespace {

using Result = ProcessResult;

Result run(const TempDir &dir, std::vector<std::string> args) {
  args.insert(args.begin(), ZTRT_FAKE_MODEL);
  return runProcess(dir, std::move(args));
}

} // namespace

TEST(MainTest, TrainsLogsSavesAndReports) {
  TempDir dir;
  Result r =
      run(dir, {"--steps", "40", "--seed=1", "--log-every=10", "--save",
                dir.path("w.safetensors"), "--report", dir.path("r.json")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(countLines(r.out), 4u) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex("^step 10/40  loss [0-9.e+-]+  [0-9.]+ ms/step\n")))
      << r.out;
  EXPECT_NE(r.out.find("step 40/40  loss"), std::string::npos);
  EXPECT_EQ(dir.entries(),
            (std::vector<std::string>{"r.json", "w.safetensors"}));

  Json report = readJson(dir.path("r.json"));
  const Json *steps = jsonFind(report, "steps");
  ASSERT_TRUE(steps && steps->size() == 40);
  EXPECT_EQ(member((*steps)[0], "step"), 1);
  double first = jsonNumber((*steps)[0].at("loss"));
  double last = jsonNumber((*steps)[39].at("loss"));
  // Noise-free linear regression with momentum converges geometrically.
  EXPECT_LT(last, first * 1e-3) << first << " -> " << last;
  EXPECT_GE(jsonNumber((*steps)[0].at("time_ms")), 0.0);

  const Json *memory = jsonFind(report, "memory");
  ASSERT_NE(memory, nullptr);
  // Live at the end: w (16 B), its momentum buffer (16 B), input x (128 B).
  EXPECT_EQ(member(*memory, "parameters"), 16);
  EXPECT_EQ(member(*memory, "optimizer_states"), 16);
  EXPECT_EQ(member(*memory, "other"), 128);
  EXPECT_EQ(member(*memory, "activations"), 0);
  EXPECT_EQ(member(*memory, "gradients"), 0);
  // Peak: everything above plus 4 * 32 B + 4 B activations and 16 B grads.
  EXPECT_EQ(member(*memory, "peak"), 16 + 16 + 128 + 132 + 16);
  const Json *peaks = jsonFind(*memory, "peak_by_category");
  ASSERT_NE(peaks, nullptr);
  EXPECT_EQ(member(*peaks, "activations"), 132);
  EXPECT_EQ(member(*peaks, "gradients"), 16);
  EXPECT_GE(member(report, "threads"), 1);
  const Json *params = jsonFind(report, "params");
  ASSERT_TRUE(params && (*params).size() == 1);
  EXPECT_EQ(jsonText((*jsonFind((*params)[0], "name"))), "w");
  EXPECT_EQ(jsonText((*jsonFind((*params)[0], "dtype"))), "f32");

  SafetensorsFile saved =
      SafetensorsFile::read(dir.path("w.safetensors"), "test");
  const SafetensorsTensor *w = saved.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{4, 1}));
  const float *values = reinterpret_cast<const float *>(w->data);
  const float expected[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  for (int i = 0; i < 4; ++i)
    // Converged to the true weights; loss < 1e-3 of start bounds the error.
    EXPECT_NEAR(values[i], expected[i], 0.05);
}

TEST(MainTest, SameSeedIsBitwiseReproducible) {
  TempDir dir;
  for (const char *name : {"a", "b"})
    ASSERT_EQ(run(dir, {"--steps=7", "--seed=3", "--save",
                        dir.path(std::string(name) + ".safetensors")})
                  .status,
              0);
  ASSERT_EQ(
      run(dir, {"--steps=7", "--seed=4", "--save", dir.path("c.safetensors")})
          .status,
      0);
  std::string a = readBytes(dir.path("a.safetensors"));
  EXPECT_EQ(a, readBytes(dir.path("b.safetensors")));
  EXPECT_NE(a, readBytes(dir.path("c.safetensors")));
}

TEST(MainTest, InitFileRoundTripsThroughSave) {
  TempDir dir;
  std::vector<float> w = {0.25f, -1.0f, 2.0f, 8.0f};
  writeSafetensors(dir.path("init.safetensors"),
                   {{"w", "F32", {4, 1}, w.data()}}, {});
  Result r = run(dir, {"--steps=0", "--init", dir.path("init.safetensors"),
                       "--save", dir.path("out.safetensors")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  SafetensorsFile out = SafetensorsFile::read(dir.path("out.safetensors"), "t");
  ASSERT_NE(out.find("w"), nullptr);
  EXPECT_EQ(0, std::memcmp(out.find("w")->data, w.data(), 16));
}

TEST(MainTest, DataFileAndLogEvery) {
  TempDir dir;
  std::vector<float> x(20 * 4);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(i % 7) - 3.0f;
  writeSafetensors(dir.path("x.safetensors"), {{"x", "F32", {20, 4}, x.data()}},
                   {});
  Result r = run(dir, {"--steps=5", "--log-every=2", "--threads=1", "--data",
                       dir.path("x.safetensors")});
  ASSERT_EQ(r.status, 0) << r.err;
  // Steps 2 and 4, and always the last one.
  EXPECT_EQ(countLines(r.out), 3u) << r.out;
  EXPECT_NE(r.out.find("step 5/5"), std::string::npos) << r.out;
}

TEST(MainTest, NonFiniteLossStopsTheRunUnlessAllowed) {
  TempDir dir;
  // Weights of 1e30 overflow the squared error to infinity in float.
  std::vector<float> w(4, 1e30f);
  writeSafetensors(dir.path("init.safetensors"),
                   {{"w", "F32", {4, 1}, w.data()}}, {});
  // By default the run stops at the first non-finite loss, naming it.
  Result stopped = run(dir, {"--steps=2", "--init", dir.path("init.safetensors"),
                             "--report", dir.path("r.json")});
  EXPECT_EQ(stopped.status, 1);
  EXPECT_EQ(stopped.err, "ztrain: error: step 1: the loss is infinite; "
                         "stopping (--allow-nonfinite-loss trains on)\n");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"init.safetensors"});
  // --allow-nonfinite-loss trains on and reports it.
  Result r = run(dir, {"--steps=2", "--init", dir.path("init.safetensors"),
                       "--report", dir.path("r.json"),
                       "--allow-nonfinite-loss"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("step 1/2  loss (inf|nan)")))
      << r.out;
  Json report = readJson(dir.path("r.json"));
  // JSON has no inf / nan literals: the loss is null.
  EXPECT_TRUE(report.at("steps").at(0).at("loss").is_null());
}

TEST(MainTest, BadFlagExits2WithOneLine) {
  TempDir dir;
  Result r =
      run(dir, {"--steps=3", "--learning-rate=0.1", "--save",
                dir.path("w.safetensors")});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "ztrain: error: unknown flag '--learning-rate' (try --help)\n");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(MainTest, CudaBackendWithoutAGpuIsOneLine) {
  // Where the cuda backend can run, the fake model could not (it passes a
  // host array to a kernel): the GPU runs are test/e2e/test_cuda.py's.
  std::string expected =
      "--backend cuda: this executable was built without CUDA support";
#ifdef ZTRT_HAVE_CUDA
  std::string reason;
  if (cudaDeviceCount(&reason) > 0)
    GTEST_SKIP() << "a CUDA device is present";
  expected = "ztrain: error: --backend cuda: no CUDA device: " + reason + "\n";
#endif
  TempDir dir;
  Result r = run(dir, {"--backend", "cuda", "--save", dir.path("w.safetensors"),
                       "--report", dir.path("r.json")});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(countLines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  EXPECT_TRUE(dir.entries().empty());
}

TEST(MainTest, WrongShapedInitNamesTheTensor) {
  TempDir dir;
  std::vector<float> w(3, 1.0f);
  writeSafetensors(dir.path("init.safetensors"),
                   {{"w", "F32", {3, 1}, w.data()}}, {});
  Result r =
      run(dir, {"--init", dir.path("init.safetensors"), "--save",
                dir.path("w.safetensors"), "--report", dir.path("r.json")});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(countLines(r.err), 1u);
  EXPECT_NE(r.err.find("tensor 'w' has shape [3, 1], the model expects "
                       "[4, 1]"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"init.safetensors"});
}

TEST(MainTest, MissingDataFileNamesIt) {
  TempDir dir;
  Result r =
      run(dir, {"--data", dir.path("nope.safetensors"), "--save",
                dir.path("w.safetensors"), "--report", dir.path("r.json")});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(countLines(r.err), 1u);
  EXPECT_NE(r.err.find("cannot open '" + dir.path("nope.safetensors") + "'"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(dir.entries().empty());
}

TEST(MainTest, FailedSaveLeavesNoPartialFile) {
  // An unwritable --save is found before the first step (a write that fails
  // later, past a file-size limit, is test_bad_inputs.py's), and nothing is
  // left: no weights, no report.
  TempDir dir;
  Result r = run(dir, {"--steps=2", "--save", dir.path("sub/w.safetensors"),
                       "--report", dir.path("r.json")});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "ztrain: error: --save '" + dir.path("sub/w.safetensors") +
                       "': directory '" + dir.path("sub") +
                       "' does not exist\n");
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(MainTest, ReportHasOverlapAndGatheredParameters) {
  TempDir dir;
  Result r =
      run(dir, {"--steps=3", "--threads=1", "--report", dir.path("r.json")});
  ASSERT_EQ(r.status, 0) << r.err;
  Json report = readJson(dir.path("r.json"));
  const Json *memory = jsonFind(report, "memory");
  ASSERT_NE(memory, nullptr);
  // The fake model gathers nothing.
  EXPECT_EQ(member(*memory, "gathered_parameters"), 0);
  EXPECT_EQ(
      member(*jsonFind(*memory, "peak_by_category"), "gathered_parameters"), 0);
  const Json *rank0 = &(*jsonFind(report, "ranks")).at(0);
  for (const Json *holder : {static_cast<const Json *>(&report), rank0}) {
    const Json *overlap = jsonFind(*holder, "overlap");
    ASSERT_NE(overlap, nullptr);
    const double comm = jsonNumber(*jsonFind(*overlap, "comm_ms"));
    const double exposed = jsonNumber(*jsonFind(*overlap, "exposed_ms"));
    // Three synchronous all_reduces done inline: the step thread performs
    // them itself, so all of it is exposed (exactly, not by timing: each
    // copy lies inside the blocking call that times the exposure) and
    // nothing is hidden.
    EXPECT_GE(comm, 0.0);
    EXPECT_GE(exposed, comm);
    EXPECT_EQ(jsonNumber(*jsonFind(*overlap, "hidden_fraction")), 0.0);
  }
}

TEST(MainTest, TraceOfAWorldOfOne) {
  TempDir dir;
  Result r = run(dir, {"--steps=3", "--threads=1", "--trace",
                       dir.path("trace.json"), "--report", dir.path("r.json")});
  ASSERT_EQ(r.status, 0) << r.err;
  // A world of one writes the file it was given, nothing else.
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"r.json", "trace.json"}));
  TraceSummary summary = checkTrace(readJson(dir.path("trace.json")), 0);
  EXPECT_EQ(summary.steps, 3);
  for (int t = 1; t <= 3; ++t)
    EXPECT_EQ(summary.names["step " + std::to_string(t)], 1);
  // Per step (fake_model.c): 3 matmuls, sub, mul, reduce, scale, one
  // synchronous all_reduce on the compute track and its execution on the
  // communication track, the SGD update.
  EXPECT_EQ(summary.names["matmul"], 9);
  EXPECT_EQ(summary.names["sub"], 3);
  EXPECT_EQ(summary.names["reduce"], 3);
  EXPECT_EQ(summary.names["sgd_update"], 3);
  EXPECT_EQ(summary.names["sync all_reduce"], 3);
  EXPECT_EQ(summary.names["all_reduce"], 3);
  EXPECT_EQ(summary.collectives, 3);
}

// --- Fused elementwise kernels: the fused fake model -----------------------

TEST(MainTest, FusedModelTrainsBitwiseAsTheUnfusedOne) {
  // sub and mul as one generated kernel (fake_model.c, FAKE_FUSED): the
  // same weights bit for bit, on 1 or 2 threads; the region named in the
  // trace in place of the two kernels.
  TempDir dir;
  ASSERT_EQ(run(dir, {"--steps=7", "--seed=3", "--save",
                      dir.path("unfused.safetensors")})
                .status,
            0);
  for (const char *threads : {"--threads=1", "--threads=2"}) {
    Result r = runProcess(
        dir, {ZTRT_FAKE_FUSED_MODEL, "--steps=7", "--seed=3", threads, "--save",
              dir.path("fused.safetensors"), "--trace", dir.path("t.json")});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_EQ(readBytes(dir.path("fused.safetensors")),
              readBytes(dir.path("unfused.safetensors")))
        << threads;
    TraceSummary summary = checkTrace(readJson(dir.path("t.json")), 0);
    EXPECT_EQ(summary.names["fused:sub+mul"], 7);
    EXPECT_EQ(summary.names.count("sub"), 0u);
    EXPECT_EQ(summary.names.count("mul"), 0u);
  }
}

TEST(MainTest, FusedModelRefusesOtherBackendsBeforeStarting) {
  // Refused before the backend starts, so the same line with or without
  // CUDA and a GPU.
  TempDir dir;
  Result r = runProcess(dir, {ZTRT_FAKE_FUSED_MODEL, "--backend", "cuda",
                              "--save", dir.path("w.safetensors")});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "ztrain: error: --backend cuda: this executable was "
                   "compiled with --fuse=elementwise, whose generated kernels "
                   "run on the cpu backend only; recompile with --fuse=none\n");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(MainTest, FailedRunLeavesNoTrace) {
  TempDir dir;
  Result r = run(dir, {"--steps=2", "--save", dir.path("sub/w.safetensors"),
                       "--trace", dir.path("t.json")});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(dir.entries().empty());
}

// --- Mixed precision: the bf16 fake model ----------------------------------

namespace {

Result runBf16(const TempDir &dir, std::vector<std::string> args) {
  args.insert(args.begin(), ZTRT_FAKE_BF16_MODEL);
  return runProcess(dir, std::move(args));
}

/// The f32 init of parameter "w" [4, 1], normal 0.5, under `seed`.
std::vector<float> f32Init(uint64_t seed) {
  ParamSpec spec;
  spec.name = "w";
  spec.shape = {4, 1};
  spec.numel = spec.storeElems = 4;
  spec.bytes = spec.storeBytes = 16;
  spec.init = InitKind::Normal;
  spec.scale = 0.5;
  std::vector<float> out(4);
  initParameter(spec, seed, 0, 4, out.data());
  return out;
}

std::vector<uint16_t> bits16(const SafetensorsTensor &t) {
  std::vector<uint16_t> out(t.bytes / 2);
  std::memcpy(out.data(), t.data, t.bytes);
  return out;
}

} // namespace

// Exact throughout: init is the rounded f32 init, and resumed training is
// bitwise the uninterrupted one (the same kernels on the same bits).
TEST(MainTest, Bf16ModelInitsSavesAsBf16AndResumesBitwise) {
  TempDir dir;
  Result r = runBf16(dir, {"--steps=0", "--seed=7", "--save",
                           dir.path("init.safetensors")});
  ASSERT_EQ(r.status, 0) << r.err;
  SafetensorsFile init =
      SafetensorsFile::read(dir.path("init.safetensors"), "t");
  ASSERT_NE(init.find("w"), nullptr);
  EXPECT_EQ(init.find("w")->dtype, "BF16");
  std::vector<float> f32 = f32Init(7);
  std::vector<uint16_t> want(4);
  for (int i = 0; i < 4; ++i)
    want[i] = bf16(f32[i]).bits;
  EXPECT_EQ(bits16(*init.find("w")), want);

  // 4 steps straight vs 2 + checkpoint + 2 resumed: same losses, same bits.
  r = runBf16(dir, {"--steps=4", "--seed=7", "--save",
                    dir.path("straight.safetensors")});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string straightLog = r.out;
  r = runBf16(dir, {"--steps=2", "--seed=7", "--save-checkpoint",
                    dir.path("ck")});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string firstLog = r.out;
  r = runBf16(dir, {"--steps=2", "--resume", dir.path("ck"), "--save",
                    dir.path("resumed.safetensors")});
  ASSERT_EQ(r.status, 0) << r.err;
  auto lossOf = [](const std::string &log, int step) {
    std::smatch m;
    std::regex re("step +" + std::to_string(step) + "/\\d+  loss (\\S+)");
    return std::regex_search(log, m, re) ? m[1].str() : std::string("none");
  };
  EXPECT_EQ(lossOf(firstLog, 1), lossOf(straightLog, 1));
  EXPECT_EQ(lossOf(firstLog, 2), lossOf(straightLog, 2));
  EXPECT_NE(lossOf(r.out, 3), "none");
  EXPECT_EQ(lossOf(r.out, 3), lossOf(straightLog, 3));
  EXPECT_EQ(lossOf(r.out, 4), lossOf(straightLog, 4));
  EXPECT_EQ(readBytes(dir.path("resumed.safetensors")),
            readBytes(dir.path("straight.safetensors")));
  // The checkpoint stores w as BF16 and its master as F32, marked.
  std::string index = readBytes(dir.path("ck/global_step2/index.json"));
  EXPECT_NE(index.find("\"name\": \"w\", \"kind\": \"param\", \"dtype\": "
                       "\"BF16\""),
            std::string::npos)
      << index;
  EXPECT_NE(index.find("\"name\": \"w.master\", \"kind\": \"state\", "
                       "\"dtype\": \"F32\", \"shape\": [4, 1], "
                       "\"master_of\": \"w\""),
            std::string::npos)
      << index;
  // The trained weights really are 16-bit: w is its master rounded, and the
  // master has bits bf16 cannot hold (consolidating from it differs).
  SafetensorsFile trained =
      SafetensorsFile::read(dir.path("straight.safetensors"), "t");
  EXPECT_EQ(trained.find("w")->dtype, "BF16");
}

TEST(MainTest, Bf16ModelInitFileConversions) {
  TempDir dir;
  // F32 with a master: w is the values rounded (1 + 2^-8 rounds to 1).
  const float values[4] = {1.0f + 0x1p-8f, -2.0f, 0.5f, 3.0f};
  writeSafetensors(dir.path("f32.safetensors"),
                   {{"w", "F32", {4, 1}, values}}, {});
  Result r = runBf16(dir, {"--steps=0", "--init", dir.path("f32.safetensors"),
                           "--save", dir.path("out.safetensors")});
  ASSERT_EQ(r.status, 0) << r.err;
  SafetensorsFile out = SafetensorsFile::read(dir.path("out.safetensors"), "t");
  std::vector<uint16_t> want = {bf16(1.0f).bits, bf16(-2.0f).bits,
                                bf16(0.5f).bits, bf16(3.0f).bits};
  EXPECT_EQ(bits16(*out.find("w")), want);
  // BF16: taken as is (the save round-trips it).
  writeSafetensors(dir.path("bf16.safetensors"),
                   {{"w", "BF16", {4, 1}, want.data()}}, {});
  r = runBf16(dir, {"--steps=0", "--init", dir.path("bf16.safetensors"),
                    "--save", dir.path("out2.safetensors")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(bits16(*SafetensorsFile::read(dir.path("out2.safetensors"), "t")
                        .find("w")),
            want);
  // F16 (through the master): the same values, the same bf16 parameter.
  const uint16_t f16s[4] = {0x3c00 /* 1 */, 0xc000 /* -2 */, 0x3800 /* 0.5 */,
                            0x4200 /* 3 */};
  writeSafetensors(dir.path("f16.safetensors"), {{"w", "F16", {4, 1}, f16s}},
                   {});
  r = runBf16(dir, {"--steps=0", "--init", dir.path("f16.safetensors"),
                    "--save", dir.path("out3.safetensors")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(bits16(*SafetensorsFile::read(dir.path("out3.safetensors"), "t")
                        .find("w")),
            want);
  // I32: one line, exit 1, nothing written.
  const int32_t ints[4] = {1, -2, 0, 3};
  writeSafetensors(dir.path("i32.safetensors"), {{"w", "I32", {4, 1}, ints}},
                   {});
  r = runBf16(dir, {"--steps=0", "--init", dir.path("i32.safetensors"),
                    "--save", dir.path("out4.safetensors")});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(std::regex_match(
      r.err, std::regex("ztrain: error: --init '[^']*/i32.safetensors': "
                        "tensor 'w' has dtype I32, the model expects F32, "
                        "BF16 or F16\n")))
      << r.err;
  EXPECT_NE(access(dir.path("out4.safetensors").c_str(), F_OK), 0);
}
