//===- Json.h - A minimal JSON reader and string quoting --------*- C++ -*-===//
//
// Just enough JSON for safetensors headers (and for tests to read reports
// back): a DOM of values, objects keep their key order and reject duplicate
// keys, numbers keep their literal text so 64-bit integers stay exact.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BASE_JSON_H
#define ZTRT_BASE_JSON_H

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ztrt {

struct JsonValue {
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Kind kind = Kind::Null;
  bool boolean = false;
  /// The decoded string, or the literal text of a number.
  std::string text;
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;

  /// The member named `key` of an object, or null.
  const JsonValue *find(std::string_view key) const;
  /// True (and sets `out`) if this is a number that is an exact int64.
  bool getInt64(int64_t &out) const;
  /// The value of a number (NaN for anything else).
  double getDouble() const;
};

/// Parses a complete JSON document (surrounding whitespace allowed). On
/// failure returns false and sets `error` to a message with the byte offset.
bool parseJson(std::string_view text, JsonValue &out, std::string &error);

/// `s` as a JSON string literal, quotes included.
std::string jsonQuote(std::string_view s);

} // namespace ztrt

#endif // ZTRT_BASE_JSON_H
