//===- Json.h - JSON through nlohmann-json, with ztrain's reading rules -*-===//
//
// The runtime reads JSON from files it did not write (safetensors headers,
// checkpoint indexes, DeepSpeed configs, Hugging Face index files), so its
// reader adds three rules to nlohmann-json's parser: nesting is bounded (a
// hostile header cannot exhaust the stack), a duplicate key in an object is
// an error rather than a silent overwrite, and every error is one line that
// names the byte offset. Objects keep their key order (nlohmann's
// ordered_json), integers stay exact 64-bit values.
//
// Writers build a Json and call dumpJson, which prints containers of
// scalars on one line and the rest one member per line.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BASE_JSON_H
#define ZTRT_BASE_JSON_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace ztrt {

using Json = nlohmann::ordered_json;

/// The deepest nesting of arrays and objects parseJson accepts.
constexpr int kMaxJsonDepth = 64;

/// Parses a complete JSON document (surrounding whitespace allowed) with the
/// rules above. On failure returns false and sets `error` to one line ending
/// in "at byte N".
bool parseJson(std::string_view text, Json &out, std::string &error);

/// The member named `key` of an object, or null (also when `object` is not
/// an object).
const Json *jsonFind(const Json &object, std::string_view key);
/// The members of an object in their order (none for anything else).
const Json::object_t &jsonMembers(const Json &object);
/// True (and sets `out`) if `value` is an integer literal that fits in
/// int64 ("4.0" and "1e3" are not: they are not shapes or offsets).
bool jsonInt64(const Json &value, int64_t &out);
/// The value of a number, NaN for anything else.
double jsonNumber(const Json &value);
/// The string, or "" for anything else.
const std::string &jsonText(const Json &value);

/// Appends member `key` to `object` (made an object if null) without
/// ordered_json's linear search for an existing one: for the writers'
/// large maps, whose keys are unique by construction.
void jsonAppend(Json &object, std::string key, Json value);

/// `s` as a JSON string literal, quotes included (invalid UTF-8 becomes
/// U+FFFD rather than an error).
std::string jsonQuote(std::string_view s);

/// `value` as text: `indent` > 0 prints an object or array that holds a
/// container one member per line, indented, and an array of scalars or a
/// short object of scalars (up to 120 characters) on one line; 0 prints it all
/// on one line without spaces (safetensors headers). Non-finite numbers print
/// as null.
std::string dumpJson(const Json &value, int indent = 2);

/// A float as the shortest decimal that reads back as the same float (the
/// report's losses: "2.3025851", not float-to-double's 17 digits).
Json jsonFloat(float value);

} // namespace ztrt

#endif // ZTRT_BASE_JSON_H
