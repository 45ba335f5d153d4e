//===- DriverTest.cpp - Flag parsing --------------------------------------===//

#include "TestUtil.h"

#include "cli/Options.h"
#include "base/Support.h"

using namespace ztrt;
using namespace ztrt::test;

namespace {

Options parse(std::vector<std::string> args) {
  args.insert(args.begin(), "model");
  std::vector<char *> argv;
  for (std::string &arg : args)
    argv.push_back(arg.data());
  return parseOptions(static_cast<int>(argv.size()), argv.data());
}

} // namespace

TEST(DriverTest, Defaults) {
  Options o = parse({});
  EXPECT_EQ(o.steps, 10);
  EXPECT_EQ(o.seed, 0u);
  EXPECT_EQ(o.logEvery, 1);
  EXPECT_EQ(o.threads, 0);
  EXPECT_EQ(o.backend, "cpu");
  EXPECT_TRUE(o.init.empty() && o.data.empty() && o.save.empty() &&
              o.report.empty() && o.trace.empty());
}

TEST(DriverTest, BothValueSpellings) {
  Options o = parse({"--steps=3", "--seed", "18446744073709551615",
                     "--init=i.safetensors", "--data", "d.txt", "--save=s",
                     "--log-every", "2", "--report=r.json", "--threads=4",
                     "--trace", "t.json"});
  EXPECT_EQ(o.steps, 3);
  EXPECT_EQ(o.seed, 18446744073709551615ull);
  EXPECT_EQ(o.init, "i.safetensors");
  EXPECT_EQ(o.data, "d.txt");
  EXPECT_EQ(o.save, "s");
  EXPECT_EQ(o.logEvery, 2);
  EXPECT_EQ(o.report, "r.json");
  EXPECT_EQ(o.threads, 4);
  EXPECT_EQ(o.trace, "t.json");
  EXPECT_EQ(parse({"--trace=x"}).trace, "x");
  EXPECT_EQ(parse({"--backend", "cuda"}).backend, "cuda");
  EXPECT_EQ(parse({"--backend=cpu"}).backend, "cpu");
}

TEST(DriverTest, CheckpointFlags) {
  Options o = parse({"--save-checkpoint", "ck", "--checkpoint-every=5",
                     "--resume=old", "--seed=3"});
  EXPECT_EQ(o.saveCheckpoint, "ck");
  EXPECT_EQ(o.checkpointEvery, 5);
  EXPECT_EQ(o.resume, "old");
  EXPECT_TRUE(o.seedGiven);
  EXPECT_FALSE(parse({}).seedGiven);

  using ::testing::ExitedWithCode;
  EXPECT_EXIT(parse({"--checkpoint-every=5"}), ExitedWithCode(2),
              "^ztrain: error: flag --checkpoint-every needs "
              "--save-checkpoint DIR\n$");
  EXPECT_EXIT(parse({"--save-checkpoint=ck", "--checkpoint-every=0"}),
              ExitedWithCode(2),
              "flag --checkpoint-every: '0' is not an integer >= 1");
  EXPECT_EXIT(parse({"--resume=ck", "--init=w.safetensors"}), ExitedWithCode(2),
              "^ztrain: error: flags --init and --resume exclude each other");
}

TEST(DriverTest, ErrorsQuotingControlCharactersStayOneLine) {
  // Found by fuzz/runtime (fuzz/regressions/*/control-char-in-message-*):
  // an error quoting its input (a flag value, a JSON key, a tensor name, a
  // byte of a binary file) printed its newlines and control bytes as they
  // were, breaking the one-line contract.
  using ::testing::ExitedWithCode;
  EXPECT_EXIT(parse({"--steps=1\n2\r\x19\x7f"}), ExitedWithCode(2),
              "^ztrain: error: flag --steps: '1\\\\n2\\\\r\\\\x19\\\\x7f' is "
              "not an integer >= 0\n$");
  EXPECT_EXIT(fatal("tensor '%s'", "a\tb\nc"), ExitedWithCode(1),
              "^ztrain: error: tensor 'a\tb\\\\nc'\n$");
}

TEST(DriverTest, MistakesExitWithStatus2) {
  using ::testing::ExitedWithCode;
  // A misspelt flag names the one meant (issue 49: the compiler did, the
  // executable did not); one too far from every flag names none.
  EXPECT_EXIT(parse({"--stesp=3"}), ExitedWithCode(2),
              "^ztrain: error: unknown flag '--stesp' \\(did you mean "
              "'--steps'\\? try --help\\)\n$");
  EXPECT_EXIT(parse({"--stpes", "3"}), ExitedWithCode(2),
              "did you mean '--steps'\\?");
  EXPECT_EXIT(parse({"--eval-dat", "x"}), ExitedWithCode(2),
              "did you mean '--eval-data'\\?");
  EXPECT_EXIT(parse({"--frobnicate=1"}), ExitedWithCode(2),
              "^ztrain: error: unknown flag '--frobnicate' \\(try --help\\)\n$");
  EXPECT_EXIT(parse({"--steps"}), ExitedWithCode(2),
              "^ztrain: error: flag --steps needs a value\n$");
  EXPECT_EXIT(parse({"--save", "--report=r"}), ExitedWithCode(2),
              "flag --save needs a value");
  EXPECT_EXIT(parse({"--steps=ten"}), ExitedWithCode(2),
              "flag --steps: 'ten' is not an integer >= 0");
  EXPECT_EXIT(parse({"--log-every=-1"}), ExitedWithCode(2),
              "flag --log-every: '-1' is not an integer >= 0");
  EXPECT_EXIT(parse({"--seed=-1"}), ExitedWithCode(2),
              "flag --seed: '-1' is not a non-negative 64-bit integer");
  EXPECT_EXIT(parse({"--help=yes"}), ExitedWithCode(2),
              "flag --help takes no value");
  EXPECT_EXIT(parse({"extra"}), ExitedWithCode(2),
              "unexpected argument 'extra'");
  EXPECT_EXIT(parse({"--trace"}), ExitedWithCode(2),
              "^ztrain: error: flag --trace needs a value\n$");
  EXPECT_EXIT(parse({"--trace="}), ExitedWithCode(2),
              "flag --trace needs a value");
  EXPECT_EXIT(parse({"--backend=gpu"}), ExitedWithCode(2),
              "^ztrain: error: flag --backend: 'gpu' is not a backend \\(cpu "
              "or cuda\\)\n$");
}

TEST(DriverTest, HelpExitsZero) {
  EXPECT_EXIT(parse({"--help"}), ::testing::ExitedWithCode(0), "");
}

TEST(DriverTest, HelpMentionsTrace) {
  // --help prints to stdout and exits; the death test's child captures
  // only stderr, so run the fake model instead.
  TempDir dir;
  ProcessResult r = runProcess(dir, {ZTRT_FAKE_MODEL, "--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--trace F"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ui.perfetto.dev"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--backend B"), std::string::npos) << r.out;
}

// ztrain-consolidate's --max-shard-size: Hugging Face writes "5GB".
TEST(DriverTest, ByteCountsAsHuggingFaceWritesThem) {
  int64_t b = 0;
  const std::pair<const char *, int64_t> good[] = {
      {"300", 300},          {"5e9", 5000000000},     {"5GB", 5000000000},
      {"5gb", 5000000000},   {"4GiB", int64_t(4) << 30}, {"2KB", 2000},
      {"1.5MiB", 1572864},   {"10B", 10}};
  for (const auto &[text, want] : good) {
    EXPECT_TRUE(parseByteCount(text, b)) << text;
    EXPECT_EQ(b, want) << text;
  }
  for (const char *text : {"", "GB", "0", "-5GB", "5.5B", "1e30", "5 GB x",
                           "nan", "inf"})
    EXPECT_FALSE(parseByteCount(text, b)) << text;
}

// --help comes from the flag table: grouped by topic, every line within 76
// columns, each flag the parser knows listed once.
TEST(DriverTest, HelpIsTheFlagTableByTopic) {
  const std::string help = usageText("model");
  for (const char *title :
       {"The run:", "Data and initial parameters:",
        "Checkpoints and saved weights:", "Progress, reports and traces:",
        "Evaluation and sampling:"})
    EXPECT_NE(help.find(std::string("\n") + title + "\n"), std::string::npos)
        << title;
  size_t start = 0;
  while (start < help.size()) {
    size_t end = help.find('\n', start);
    EXPECT_LE(end - start, 76u) << help.substr(start, end - start);
    start = end + 1;
  }
  for (const char *flag : {"--steps", "--resume", "--top-k", "--dampening",
                           "--skip-memory-check", "--help"})
    EXPECT_NE(help.find(std::string("\n  ") + flag + " "), std::string::npos)
        << flag;
}
