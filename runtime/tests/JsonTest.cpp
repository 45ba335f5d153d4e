//===- JsonTest.cpp - base/Json: nlohmann-json under ztrain's rules -------===//
//
// Part of ztrain's runtime tests.
//
//===----------------------------------------------------------------------===//

#include "base/Json.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

using namespace ztrt;

namespace {

std::string errorOf(const std::string &text) {
  Json value;
  std::string error;
  EXPECT_FALSE(parseJson(text, value, error)) << text;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  return error;
}

std::string nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

} // namespace

TEST(JsonTest, KeepsKeyOrderAndExactIntegers) {
  Json value;
  std::string error;
  ASSERT_TRUE(parseJson(R"({"b": 9223372036854775807, "a": -9223372036854775808,
                            "c": 18446744073709551615, "d": 4.0, "e": 1e3})",
                        value, error))
      << error;
  std::string keys;
  for (const auto &[key, member] : jsonMembers(value))
    keys += key;
  EXPECT_EQ(keys, "bacde");
  int64_t i = 0;
  EXPECT_TRUE(jsonInt64(value.at("b"), i));
  EXPECT_EQ(i, std::numeric_limits<int64_t>::max());
  EXPECT_TRUE(jsonInt64(value.at("a"), i));
  EXPECT_EQ(i, std::numeric_limits<int64_t>::min());
  // Past int64, and literals that are not integers, are not int64s.
  EXPECT_FALSE(jsonInt64(value.at("c"), i));
  EXPECT_FALSE(jsonInt64(value.at("d"), i));
  EXPECT_FALSE(jsonInt64(value.at("e"), i));
  EXPECT_EQ(jsonNumber(value.at("e")), 1000.0);
  EXPECT_TRUE(std::isnan(jsonNumber(value)));
}

TEST(JsonTest, RefusesDuplicateKeysAtTheirByte) {
  // The offset is just past the repeated key's closing quote.
  EXPECT_EQ(errorOf(R"({"a":1,"a":2})"), "duplicate key 'a' at byte 10");
  // Nested objects have their own keys: the same name twice is fine there.
  Json value;
  std::string error;
  EXPECT_TRUE(parseJson(R"({"a":{"a":1},"b":{"a":2}})", value, error)) << error;
}

TEST(JsonTest, BoundsTheNesting) {
  Json value;
  std::string error;
  EXPECT_TRUE(parseJson(nested(kMaxJsonDepth), value, error)) << error;
  EXPECT_EQ(errorOf(nested(kMaxJsonDepth + 1)),
            "nesting too deep (more than 64 levels) at byte 64");
  // Deep enough to overflow a recursive reader's stack: refused in one line.
  EXPECT_NE(errorOf(nested(1000000)).find("nesting too deep"),
            std::string::npos);
}

TEST(JsonTest, SyntaxErrorsNameTheirByte) {
  EXPECT_NE(errorOf("{\"x\": ").find(" at byte 6"), std::string::npos);
  EXPECT_NE(errorOf("[1] 2").find(" at byte 4"), std::string::npos);
  EXPECT_NE(errorOf("\"\xff\"").find(" at byte "), std::string::npos);
  EXPECT_NE(errorOf("").find(" at byte 0"), std::string::npos);
}

TEST(JsonTest, WritesWhatItReads) {
  Json value = {{"name", "a\"b\\c\n\x01"},
                {"shape", {2, 3}},
                {"loss", jsonFloat(0.1f)},
                {"nan", jsonFloat(NAN)},
                {"steps", Json::array({{{"step", 1}}, {{"step", 2}}})}};
  EXPECT_EQ(dumpJson(value, 0),
            R"({"name":"a\"b\\c\n\u0001","shape":[2,3],"loss":0.1,)"
            R"("nan":null,"steps":[{"step":1},{"step":2}]})");
  EXPECT_EQ(dumpJson(value), "{\n"
                             "  \"name\": \"a\\\"b\\\\c\\n\\u0001\",\n"
                             "  \"shape\": [2, 3],\n"
                             "  \"loss\": 0.1,\n"
                             "  \"nan\": null,\n"
                             "  \"steps\": [\n"
                             "    {\"step\": 1},\n"
                             "    {\"step\": 2}\n"
                             "  ]\n"
                             "}");
  Json back;
  std::string error;
  ASSERT_TRUE(parseJson(dumpJson(value), back, error)) << error;
  EXPECT_EQ(back, value);
  // A float prints as its shortest decimal and reads back as the float.
  EXPECT_EQ(static_cast<float>(jsonNumber(jsonFloat(2.3025851f))), 2.3025851f);
  // Invalid UTF-8 is replaced, not an exception.
  EXPECT_EQ(jsonQuote("a\xff"), "\"a\xef\xbf\xbd\"");
}
