//===- DataTest.cpp - The three data sources ------------------------------===//

#include "TestUtil.h"

#include "io/Checkpoint.h"
#include "io/Data.h"
#include "io/Safetensors.h"

#include <cstring>

using namespace ztrt;
using namespace ztrt::test;

namespace {

Descriptor describe(const std::string &inputs) {
  return parseDescriptor(("ztrain-descriptor 1\n" + inputs).c_str());
}

template <typename T>
std::vector<T> fill(const DataSource &source, const Descriptor &desc,
                    int64_t step, size_t index) {
  std::vector<T> out(desc.inputs[index].numel);
  source.fill(step, index, out.data());
  return out;
}

} // namespace

TEST(DataTest, SafetensorsSamplesWrapAround) {
  TempDir dir;
  std::string path = dir.path("d.safetensors");
  // 5 samples of x [*, 2] and y [*]: sample s is x = (10s, 10s+1), y = s.
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int s = 0; s < 5; ++s) {
    x.push_back(10 * s);
    x.push_back(10 * s + 1);
    y.push_back(s);
  }
  writeSafetensors(
      path, {{"x", "F32", {5, 2}, x.data()}, {"y", "I32", {5}, y.data()}}, {});
  Descriptor desc =
      describe("input x f32 2 2 2 bound 0\ninput y i32 1 2 bound 5\n");
  auto source = createDataSource(desc, path, 0);
  // Step 1 takes samples 0, 1; step 3 takes samples 4, 0 (mod 5).
  EXPECT_EQ(fill<float>(*source, desc, 1, 0),
            (std::vector<float>{0, 1, 10, 11}));
  EXPECT_EQ(fill<int32_t>(*source, desc, 1, 1), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(fill<float>(*source, desc, 3, 0),
            (std::vector<float>{40, 41, 0, 1}));
  EXPECT_EQ(fill<int32_t>(*source, desc, 3, 1), (std::vector<int32_t>{4, 0}));
}

TEST(DataTest, SafetensorsErrors) {
  TempDir dir;
  std::string path = dir.path("d.safetensors");
  std::vector<float> x(12, 0.0f);
  std::vector<int32_t> y = {0, 1, 2, 12};
  writeSafetensors(
      path, {{"x", "F32", {4, 3}, x.data()}, {"y", "I32", {4}, y.data()}}, {});
  EXPECT_EXIT(
      createDataSource(describe("input x f32 2 2 4 bound 0\n"), path, 0),
      ::testing::ExitedWithCode(1),
      "tensor 'x' has shape \\[4, 3\\], the input needs \\[N, 4\\]");
  EXPECT_EXIT(createDataSource(describe("input z f32 1 2 bound 0\n"), path, 0),
              ::testing::ExitedWithCode(1), "no tensor named 'z'");
  EXPECT_EXIT(
      createDataSource(describe("input x i32 2 2 3 bound 0\n"), path, 0),
      ::testing::ExitedWithCode(1),
      "tensor 'x' has dtype F32, the input is I32");
  EXPECT_EXIT(createDataSource(describe("input y i32 1 2 bound 10\n"), path, 0),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: --data '.*d.safetensors': input 'y' value 12 "
              "out of range \\[0, 10\\) \\(sample 3\\)\n$");
}

TEST(DataTest, SafetensorsSampleCountsMustAgree) {
  TempDir dir;
  std::string path = dir.path("d.safetensors");
  std::vector<float> a(4), b(3);
  writeSafetensors(
      path, {{"a", "F32", {4}, a.data()}, {"b", "F32", {3}, b.data()}}, {});
  EXPECT_EXIT(createDataSource(describe("input a f32 1 2 bound 0\n"
                                        "input b f32 1 2 bound 0\n"),
                               path, 0),
              ::testing::ExitedWithCode(1),
              "tensor 'b' has 3 samples but 'a' has 4");
}

TEST(DataTest, TokenWindowsAreShiftedSlicesOfTheFile) {
  TempDir dir;
  std::string path = dir.path("corpus.txt");
  std::string text;
  for (int i = 0; i < 100; ++i)
    text += static_cast<char>('a' + i % 26);
  writeBytes(path, text);
  Descriptor desc = describe("input tokens i32 2 3 8 bound 128\n"
                             "input targets i32 2 3 8 bound 128\n");
  auto source = createDataSource(desc, path, 42);
  for (int64_t step = 1; step <= 4; ++step) {
    auto tokens = fill<int32_t>(*source, desc, step, 0);
    auto targets = fill<int32_t>(*source, desc, step, 1);
    for (int64_t b = 0; b < 3; ++b) {
      int64_t off = tokenWindowOffset(42, (step - 1) * 3 + b, 100, 8);
      ASSERT_GE(off, 0);
      ASSERT_LE(off, 100 - 8 - 1);
      for (int64_t j = 0; j < 8; ++j) {
        EXPECT_EQ(tokens[b * 8 + j], text[off + j]);
        EXPECT_EQ(targets[b * 8 + j], text[off + j + 1]);
      }
    }
  }
  // A different seed draws different windows.
  int differ = 0;
  for (int64_t s = 0; s < 16; ++s)
    differ +=
        tokenWindowOffset(42, s, 100, 8) != tokenWindowOffset(43, s, 100, 8);
  EXPECT_GT(differ, 8);
}

TEST(DataTest, TokenErrors) {
  TempDir dir;
  std::string path = dir.path("corpus.txt");
  writeBytes(path, std::string("abc\xC8xyzabcdefgh", 14));
  Descriptor ok = describe("input t i32 2 1 4 bound 128\n"
                           "input u i32 2 1 4 bound 0\n");
  EXPECT_EXIT(createDataSource(ok, path, 0), ::testing::ExitedWithCode(1),
              "^ztrain: error: --data '.*corpus.txt': input 't' value 200 out "
              "of range \\[0, 128\\) \\(byte 3\\)\n$");
  EXPECT_EXIT(
      createDataSource(describe("input t i32 2 1 4 bound 0\n"), path, 0),
      ::testing::ExitedWithCode(1),
      "a token file needs a model with exactly two i32 inputs");
  EXPECT_EXIT(createDataSource(describe("input t i32 2 1 14 bound 0\n"
                                        "input u i32 2 1 14 bound 0\n"),
                               path, 0),
              ::testing::ExitedWithCode(1),
              "14 bytes, too short for windows of 14 tokens");
  EXPECT_EXIT(createDataSource(ok, dir.path("missing.txt"), 0),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: --data: cannot open '.*missing.txt': No such "
              "file or directory\n$");
}

TEST(DataTest, SyntheticIsDeterministicAndBounded) {
  Descriptor desc = describe("input x f32 2 4 3 bound 0\n"
                             "input y i32 1 4 bound 7\n");
  auto a = createDataSource(desc, "", 5), b = createDataSource(desc, "", 5);
  EXPECT_EQ(fill<float>(*a, desc, 2, 0), fill<float>(*b, desc, 2, 0));
  EXPECT_NE(fill<float>(*a, desc, 2, 0), fill<float>(*a, desc, 3, 0));
  for (int64_t step = 1; step <= 50; ++step)
    for (int32_t v : fill<int32_t>(*a, desc, step, 1)) {
      EXPECT_GE(v, 0);
      EXPECT_LT(v, 7);
    }
  EXPECT_EXIT(createDataSource(describe("input y i32 1 4 bound 0\n"), "", 0),
              ::testing::ExitedWithCode(1),
              "input 'y' is i32 with no known bound.*it needs --data");
}

// R ranks with per-rank batch B must together see, every step, exactly the
// rows one process with batch R*B sees: rank r gets global rows
// [r*B, (r+1)*B). Checked for all three sources, bitwise (the values are
// copied or drawn from the same counters, never recomputed differently).
TEST(DataTest, RanksSplitTheGlobalBatch) {
  TempDir dir;
  constexpr int kRanks = 3;
  // 7 samples: the global batch of 6 wraps around the file every other step.
  std::vector<float> x(7 * 2);
  std::vector<int32_t> y(7);
  for (int s = 0; s < 7; ++s) {
    x[2 * s] = 10.0f * s;
    x[2 * s + 1] = 10.0f * s + 1;
    y[s] = s;
  }
  writeSafetensors(
      dir.path("d.safetensors"),
      {{"x", "F32", {7, 2}, x.data()}, {"y", "I32", {7}, y.data()}}, {});
  writeBytes(dir.path("text.txt"), "the quick brown fox jumps over it");

  struct Case {
    std::string path, local, global;
  };
  const Case cases[] = {
      {dir.path("d.safetensors"),
       "input x f32 2 2 2 bound 0\ninput y i32 1 2 bound 7\n",
       "input x f32 2 6 2 bound 0\ninput y i32 1 6 bound 7\n"},
      {dir.path("text.txt"),
       "input t i32 2 2 5 bound 0\ninput u i32 2 2 5 bound 0\n",
       "input t i32 2 6 5 bound 0\ninput u i32 2 6 5 bound 0\n"},
      // Synthetic, with an unbatched (rank-0) input that every rank shares.
      {"",
       "input x f32 2 2 3 bound 0\ninput y i32 1 2 bound 9\n"
       "input s f32 0 bound 0\n",
       "input x f32 2 6 3 bound 0\ninput y i32 1 6 bound 9\n"
       "input s f32 0 bound 0\n"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.path.empty() ? "synthetic" : c.path);
    Descriptor local = describe(c.local), global = describe(c.global);
    auto whole = createDataSource(global, c.path, 11);
    std::vector<std::unique_ptr<DataSource>> ranks;
    for (int r = 0; r < kRanks; ++r)
      ranks.push_back(createDataSource(local, c.path, 11, r, kRanks));
    for (int64_t step = 1; step <= 3; ++step) {
      for (size_t i = 0; i < global.inputs.size(); ++i) {
        const InputSpec &in = global.inputs[i];
        std::string expected(static_cast<size_t>(in.bytes), '\0');
        whole->fill(step, i, expected.data());
        std::string joined;
        for (int r = 0; r < kRanks; ++r) {
          std::string part(static_cast<size_t>(local.inputs[i].bytes), '\0');
          ranks[r]->fill(step, i, part.data());
          joined += part;
        }
        if (in.shape.empty())
          expected = expected + expected + expected;
        EXPECT_EQ(joined, expected) << "step " << step << " input " << in.name;
      }
    }
  }
}

namespace {

/// Little-endian token ids of `width` bytes.
std::string tokenBytes(const std::vector<uint32_t> &ids, int width) {
  std::string out;
  for (uint32_t id : ids)
    for (int b = 0; b < width; ++b)
      out += static_cast<char>((id >> (8 * b)) & 0xff);
  return out;
}

/// A version-1 .npy file of a 1-D array.
std::string npy(const std::string &descr, const std::string &shape,
                const std::string &payload) {
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': False, 'shape': (" + shape +
                       "), }";
  while ((10 + header.size() + 1) % 64)
    header += ' ';
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + payload;
}

} // namespace

// nanoGPT's train.bin (uint16), the same tokens as u32 and as a .npy
// array: every format hands the model the same windows.
TEST(DataTest, TokenIdFilesOfEveryWidthReadTheSameWindows) {
  TempDir dir;
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 300; ++i)
    ids.push_back((i * 7919u) % 50257u);
  writeBytes(dir.path("train.bin"), tokenBytes(ids, 2));
  writeBytes(dir.path("ids.u32"), tokenBytes(ids, 4));
  writeBytes(dir.path("ids.npy"), npy("<u2", "300,", tokenBytes(ids, 2)));
  writeBytes(dir.path("ids32.npy"), npy("<i4", "300,", tokenBytes(ids, 4)));
  Descriptor desc = describe("input tokens i32 2 2 16 bound 50257\n"
                             "input targets i32 2 2 16 bound 50257\n");
  auto bin = createDataSource(desc, dir.path("train.bin"), 7);
  auto u32 = createDataSource(desc, dir.path("ids.u32"), 7, 0, 1,
                              DataFormat::U32);
  auto np16 = createDataSource(desc, dir.path("ids.npy"), 7);
  auto np32 = createDataSource(desc, dir.path("ids32.npy"), 7);
  for (int64_t step = 1; step <= 3; ++step)
    for (size_t input = 0; input < 2; ++input) {
      auto want = fill<int32_t>(*bin, desc, step, input);
      for (int64_t b = 0; b < 2; ++b) {
        int64_t off = tokenWindowOffset(7, (step - 1) * 2 + b, 300, 16);
        for (int64_t j = 0; j < 16; ++j)
          ASSERT_EQ(want[b * 16 + j], static_cast<int32_t>(ids[off + input + j]));
      }
      EXPECT_EQ(fill<int32_t>(*u32, desc, step, input), want);
      EXPECT_EQ(fill<int32_t>(*np16, desc, step, input), want);
      EXPECT_EQ(fill<int32_t>(*np32, desc, step, input), want);
    }
}

TEST(DataTest, FormatsAreNeverGuessedWrong) {
  TempDir dir;
  Descriptor desc = describe("input t i32 2 1 4 bound 256\n"
                             "input u i32 2 1 4 bound 256\n");
  // A name that says nothing is refused, not read as bytes.
  writeBytes(dir.path("corpus.dat"), "abcdefghijklmnop");
  EXPECT_EXIT(createDataSource(desc, dir.path("corpus.dat"), 0),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: --data '.*corpus.dat': cannot tell the format "
              "from the name; give --data-format=");
  // Text read as 16-bit ids: the ids exceed the vocabulary, named with the
  // hint.
  EXPECT_EXIT(createDataSource(desc, dir.path("corpus.dat"), 0, 0, 1,
                               DataFormat::U16),
              ::testing::ExitedWithCode(1),
              "value 25185 out of range \\[0, 256\\) \\(token 0\\); is "
              "the token width right \\(--data-format\\)\\?");
  writeBytes(dir.path("odd.bin"), "abcdefghijklmnopq");
  EXPECT_EXIT(createDataSource(desc, dir.path("odd.bin"), 0),
              ::testing::ExitedWithCode(1),
              "17 bytes is not a whole number of 2-byte tokens "
              "\\(--data-format=u16\\)");
  // .npy: floats, 2-D, a size that disagrees with the shape, no magic.
  writeBytes(dir.path("f.npy"), npy("<f4", "4,", std::string(16, '\0')));
  EXPECT_EXIT(createDataSource(desc, dir.path("f.npy"), 0),
              ::testing::ExitedWithCode(1), "tokens of type '<f4'");
  writeBytes(dir.path("m.npy"), npy("<u2", "4, 2", std::string(16, '\0')));
  EXPECT_EXIT(createDataSource(desc, dir.path("m.npy"), 0),
              ::testing::ExitedWithCode(1),
              "shape \\(4, 2\\) is not one dimension of tokens");
  writeBytes(dir.path("s.npy"), npy("<u2", "9,", std::string(16, '\0')));
  EXPECT_EXIT(createDataSource(desc, dir.path("s.npy"), 0),
              ::testing::ExitedWithCode(1),
              "shape \\(9,\\) needs 18 bytes of tokens, the file holds 16");
  writeBytes(dir.path("x.npy"), "not numpy at all");
  EXPECT_EXIT(createDataSource(desc, dir.path("x.npy"), 0),
              ::testing::ExitedWithCode(1), "not a NumPy .npy file");
  // Negative int32 ids.
  writeBytes(dir.path("n.npy"),
             npy("<i4", "8,", tokenBytes({1, 2, 0xffffffffu, 3, 4, 5, 6, 7}, 4)));
  EXPECT_EXIT(createDataSource(desc, dir.path("n.npy"), 0),
              ::testing::ExitedWithCode(1), "value -1 out of range");
}

TEST(DataTest, ResumeRefusesMissingOrOtherData) {
  TempDir dir;
  writeBytes(dir.path("a.txt"), std::string(3 << 20, 'a'));
  writeBytes(dir.path("b.txt"), std::string(3 << 20, 'a') + "b");
  std::string c = std::string(3 << 20, 'a');
  c[(3 << 20) - 1] = 'c'; // same size, last byte differs
  writeBytes(dir.path("c.txt"), c);
  CheckpointIndex index;
  index.data = dir.path("a.txt");
  DataFingerprint print = dataFingerprint(index.data);
  EXPECT_EQ(print.size, uint64_t(3) << 20);
  index.dataPrint = std::make_pair(print.size, print.crc);
  checkResumedData(index, dir.path("a.txt"), "text", "random", "ck"); // the same
  EXPECT_EXIT(checkResumedData(index, "", "", "", "ck"), ::testing::ExitedWithCode(1),
              "the checkpoint was trained on --data '.*a.txt'; give --data");
  EXPECT_EXIT(checkResumedData(index, dir.path("b.txt"), "text", "random", "ck"),
              ::testing::ExitedWithCode(1),
              "is not the file the checkpoint was trained on");
  EXPECT_EXIT(checkResumedData(index, dir.path("c.txt"), "text", "random", "ck"),
              ::testing::ExitedWithCode(1), "other contents");
  CheckpointIndex synthetic;
  EXPECT_EXIT(checkResumedData(synthetic, dir.path("a.txt"), "text", "random",
                               "ck"),
              ::testing::ExitedWithCode(1), "trained on synthetic inputs");
  // The same file read another way: refused, naming the flag that
  // continues it (text and u8 are the same bytes).
  index.dataFormat = "text";
  index.dataOrder = "random";
  checkResumedData(index, dir.path("a.txt"), "u8", "random", "ck");
  EXPECT_EXIT(checkResumedData(index, dir.path("a.txt"), "u16", "random", "ck"),
              ::testing::ExitedWithCode(1),
              "the checkpoint read its data as text, this run reads "
              "'.*a.txt' as u16 \\(--data-format=text continues it\\)");
  EXPECT_EXIT(
      checkResumedData(index, dir.path("a.txt"), "text", "sequential", "ck"),
      ::testing::ExitedWithCode(1),
      "drew its data windows in random order, this run in sequential "
      "\\(--data-order=random continues it\\)");
}
