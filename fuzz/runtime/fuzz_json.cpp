//===- fuzz_json.cpp - libFuzzer target: the runtime's JSON reader --------===//
//
// Part of ztrain's fuzz targets (docs/fuzzing.md). Input: any bytes, parsed
// as a JSON document (safetensors headers, checkpoint indexes, --config).
// Checked beyond the sanitizers: a failure's message names the byte offset; every string of an accepted document survives jsonQuote and
// parsing back; an integer getInt64 accepts is the literal's value.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "base/Json.h"

#include <cstring>

using namespace ztrt;
using ztrt_fuzz::crash;

namespace {

void checkValue(const JsonValue &value) {
  auto roundTrip = [](const std::string &s) {
    JsonValue back;
    std::string error;
    if (!parseJson(jsonQuote(s), back, error) ||
        back.kind != JsonValue::Kind::String || back.text != s)
      crash("jsonQuote does not parse back to its string", jsonQuote(s));
  };
  switch (value.kind) {
  case JsonValue::Kind::String:
    roundTrip(value.text);
    break;
  case JsonValue::Kind::Number: {
    int64_t i;
    if (value.getInt64(i) && std::to_string(i) != value.text &&
        !(value.text == "-0" && i == 0))
      crash("getInt64 disagrees with the literal", value.text);
    (void)value.getDouble();
    break;
  }
  case JsonValue::Kind::Array:
    for (const JsonValue &item : value.items)
      checkValue(item);
    break;
  case JsonValue::Kind::Object:
    for (const auto &[key, member] : value.members) {
      roundTrip(key);
      if (value.find(key) != &member)
        crash("duplicate key accepted", key);
      checkValue(member);
    }
    break;
  default:
    break;
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  JsonValue root;
  std::string error;
  if (!parseJson(std::string_view(reinterpret_cast<const char *>(data), size),
                 root, error)) {
    // (The message may quote a key with a newline in it: the error line
    // that prints it is checked in the targets that reach fatal().)
    if (error.find(" at byte ") == std::string::npos)
      crash("a JSON error without its byte offset", error);
    return 0;
  }
  checkValue(root);
  return 0;
}
