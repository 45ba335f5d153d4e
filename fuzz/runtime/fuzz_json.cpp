//===- fuzz_json.cpp - libFuzzer target: the runtime's JSON reader --------===//
//
// Part of ztrain's fuzz targets (docs/fuzzing.md). Input: any bytes, parsed
// as a JSON document (safetensors headers, checkpoint indexes, --config)
// by nlohmann-json's parser under ztrain's rules (base/Json.h). Checked
// beyond the sanitizers: a failure's message names the byte offset; every
// string of an accepted document survives jsonQuote and parsing back; no
// object keeps a duplicate key; what dumpJson prints parses again.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "base/Json.h"

#include <cstring>

using namespace ztrt;
using ztrt_fuzz::crash;

namespace {

void checkValue(const Json &value) {
  auto roundTrip = [](const std::string &s) {
    Json back;
    std::string error;
    if (!parseJson(jsonQuote(s), back, error) || !back.is_string() ||
        jsonText(back) != s)
      crash("jsonQuote does not parse back to its string", jsonQuote(s));
  };
  if (value.is_string()) {
    roundTrip(jsonText(value));
  } else if (value.is_number()) {
    int64_t i;
    if (jsonInt64(value, i) &&
        (!value.is_number_integer() || value.get<int64_t>() != i))
      crash("jsonInt64 disagrees with the parsed integer", value.dump());
    (void)jsonNumber(value);
  } else if (value.is_array()) {
    for (const Json &item : value)
      checkValue(item);
  } else if (value.is_object()) {
    for (const auto &[key, member] : jsonMembers(value)) {
      roundTrip(key);
      if (jsonFind(value, key) != &member)
        crash("duplicate key accepted", key);
      checkValue(member);
    }
  }
  // What the writers print must parse back to the same document.
  for (int indent : {0, 2}) {
    Json back;
    std::string error;
    const std::string text = dumpJson(value, indent);
    if (!parseJson(text, back, error))
      crash("dumpJson's output does not parse", error + ": " + text);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Json root;
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
