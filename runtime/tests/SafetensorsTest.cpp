//===- SafetensorsTest.cpp - Round trips and malformed files --------------===//

#include "TestUtil.h"

#include "io/Safetensors.h"

#include <cstring>

using namespace ztrt;
using namespace ztrt::test;

namespace {

/// A file with header `json` (length prefix computed) followed by `data`.
std::string fileWithHeader(const std::string &json, const std::string &data) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(n >> (8 * i));
  return out + json + data;
}

void expectRejected(const std::string &bytes, const std::string &why) {
  TempDir dir;
  std::string path = dir.path("bad.safetensors");
  writeBytes(path, bytes);
  EXPECT_EXIT(SafetensorsFile::read(path, "--init"),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: --init: '.*bad.safetensors' is not a valid "
              "safetensors file: " +
                  why);
}

} // namespace

TEST(SafetensorsTest, RoundTripF32AndI32WithMetadata) {
  TempDir dir;
  std::string path = dir.path("t.safetensors");
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.125f};
  std::vector<int32_t> ids = {3, -1, 2147483647};
  writeSafetensors(path,
                   {{"layer.w", "F32", {2, 3}, w.data()},
                    {"ids", "I32", {3}, ids.data()},
                    {"empty", "F32", {0, 4}, nullptr}},
                   {{"format", "pt"}, {"note", "quote\" and \\ backslash"}});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"t.safetensors"});

  std::string raw = readBytes(path);
  uint64_t headerBytes;
  std::memcpy(&headerBytes, raw.data(), 8);
  EXPECT_EQ(headerBytes % 8, 0u) << "data must start 8-byte aligned";

  SafetensorsFile file = SafetensorsFile::read(path, "test");
  ASSERT_EQ(file.tensors().size(), 3u);
  const SafetensorsTensor *t = file.find("layer.w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, "F32");
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(t->bytes, w.size() * 4);
  EXPECT_EQ(0, std::memcmp(t->data, w.data(), t->bytes));
  t = file.find("ids");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, "I32");
  EXPECT_EQ(0, std::memcmp(t->data, ids.data(), t->bytes));
  EXPECT_EQ(file.find("empty")->bytes, 0u);
  EXPECT_EQ(file.find("missing"), nullptr);
  ASSERT_EQ(file.metadata().size(), 2u);
  EXPECT_EQ(file.metadata()[1].second, "quote\" and \\ backslash");
}

TEST(SafetensorsTest, ReadsForeignHeaderLayout) {
  // Key order, whitespace and padding as other writers produce them.
  std::string data(12, '\0');
  float v[3] = {1, 2, 3};
  std::memcpy(data.data(), v, 12);
  TempDir dir;
  std::string path = dir.path("f.safetensors");
  writeBytes(path, fileWithHeader("{ \"x\" : {\"shape\": [3], \"data_offsets\""
                                  ": [0, 12], \"dtype\": \"F32\"} }   ",
                                  data));
  SafetensorsFile file = SafetensorsFile::read(path, "test");
  ASSERT_NE(file.find("x"), nullptr);
  EXPECT_EQ(reinterpret_cast<const float *>(file.find("x")->data)[2], 3.0f);
}

TEST(SafetensorsTest, MissingFileNamesIt) {
  EXPECT_EXIT(SafetensorsFile::read("/nonexistent/w.safetensors", "--init"),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: --init: cannot open "
              "'/nonexistent/w.safetensors': No such file or directory\n$");
}

TEST(SafetensorsTest, RejectsTruncatedLength) {
  expectRejected("abc", "3 bytes, too short");
}

TEST(SafetensorsTest, RejectsHeaderLongerThanFile) {
  expectRejected(fileWithHeader("{}", "").substr(0, 9),
                 "header length 2 exceeds the file");
}

TEST(SafetensorsTest, RejectsNonJsonHeader) {
  expectRejected(fileWithHeader("{\"x\": ", ""), "header is not JSON");
  expectRejected(fileWithHeader("{\"a\":1,\"a\":2}", ""),
                 "header is not JSON: duplicate key 'a'");
}

TEST(SafetensorsTest, RejectsNonObjectHeader) {
  expectRejected(fileWithHeader("[1]", ""), "header is not a JSON object");
}

TEST(SafetensorsTest, RejectsUnknownDtype) {
  expectRejected(fileWithHeader("{\"x\":{\"dtype\":\"F33\",\"shape\":[1],"
                                "\"data_offsets\":[0,4]}}",
                                std::string(4, '\0')),
                 "tensor 'x' has unknown dtype 'F33'");
}

TEST(SafetensorsTest, RejectsBadShapeAndOffsets) {
  expectRejected(fileWithHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],"
                                "\"data_offsets\":[0,4]}}",
                                std::string(4, '\0')),
                 "tensor 'x' has a shape entry that is not a non-negative");
  expectRejected(fileWithHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}",
                                std::string(4, '\0')),
                 "tensor 'x' has no \"data_offsets\"");
  expectRejected(fileWithHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                                "\"data_offsets\":[0,8]}}",
                                std::string(8, '\0')),
                 "tensor 'x' data_offsets \\[0, 8\\] hold 8 bytes but F32 "
                 "\\[2, 2\\] needs 16");
  expectRejected(fileWithHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],"
                                "\"data_offsets\":[0,8]}}",
                                std::string(4, '\0')),
                 "tensor 'x' data_offsets \\[0, 8\\] exceed the 4 data bytes");
}

TEST(SafetensorsTest, RejectsOverlapGapAndTrailingBytes) {
  std::string two = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                    "\"data_offsets\":[0,4]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
                    "\"data_offsets\":[%s]}}";
  auto with = [&](const char *offsets) {
    std::string json = two;
    json.replace(json.find("%s"), 2, offsets);
    return json;
  };
  expectRejected(fileWithHeader(with("2,6"), std::string(6, '\0')),
                 "tensor data overlaps at byte 2");
  expectRejected(fileWithHeader(with("8,12"), std::string(12, '\0')),
                 "tensor data leaves a gap at byte 8");
  expectRejected(fileWithHeader(with("4,8"), std::string(9, '\0')),
                 "data section has 9 bytes but the tensors cover 8");
}

TEST(SafetensorsTest, RejectsNonStringMetadata) {
  expectRejected(fileWithHeader("{\"__metadata__\":{\"k\":1}}", ""),
                 "__metadata__ value of 'k' is not a string");
}

TEST(SafetensorsTest, FailedWriteLeavesNothingBehind) {
  TempDir dir;
  float v = 1;
  EXPECT_EXIT(writeSafetensors(dir.path("no/such/dir/w.safetensors"),
                               {{"v", "F32", {1}, &v}}, {}),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: cannot write '.*/no/such/dir/w.safetensors': "
              "No such file or directory\n$");
  EXPECT_TRUE(dir.entries().empty());
}
