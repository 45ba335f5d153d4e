//===- Json.cpp - JSON through nlohmann-json, with ztrain's reading rules -===//
//
// Part of ztrain's runtime. nlohmann-json's SAX parser does the lexing,
// number conversion and UTF-8 validation; the handler here builds the
// ordered_json document and adds the nesting bound and the duplicate-key
// refusal, with byte offsets taken from a counting input iterator.
//
//===----------------------------------------------------------------------===//

#include "base/Json.h"

#include <charconv>
#include <cmath>
#include <iterator>
#include <limits>
#include <unordered_set>
#include <vector>

namespace ztrt {

namespace {

/// A char iterator that records, in a shared cursor, how far the parser has
/// read: the handler's errors say where they happened.
struct CountingIterator {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char *;
  using reference = const char &;

  const char *at;
  const char **cursor;

  reference operator*() const { return *at; }
  CountingIterator &operator++() {
    *cursor = ++at;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const CountingIterator &o) const { return at == o.at; }
  bool operator!=(const CountingIterator &o) const { return at != o.at; }
};

class Builder {
public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  Builder(Json &root, const char *begin, const char *const &cursor,
          std::string &error)
      : root(root), begin(begin), cursor(cursor), error(error) {}

  bool null() { return add(nullptr); }
  bool boolean(bool v) { return add(v); }
  bool number_integer(number_integer_t v) { return add(v); }
  bool number_unsigned(number_unsigned_t v) { return add(v); }
  bool number_float(number_float_t v, const string_t &) { return add(v); }
  bool string(string_t &v) { return add(std::move(v)); }
  bool binary(binary_t &) { return fail("binary value", cursor); }

  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t &k) {
    Level &level = levels.back();
    if (!level.keys.insert(k).second) {
      // Named by its path through the enclosing objects
      // ("optimizer.params.lr"); the cursor is past its closing quote.
      std::string path;
      for (size_t i = 0; i + 1 < levels.size(); ++i)
        if (levels[i].value->is_object())
          path += levels[i].key + ".";
      return fail("duplicate key '" + path + k + "'", cursor);
    }
    level.key = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string &,
                   const nlohmann::detail::exception &e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 7:
    // syntax error while parsing ..." -> "syntax error while parsing ...".
    std::string what = e.what();
    if (size_t colon = what.find(": "); colon != std::string::npos)
      what = what.substr(colon + 2);
    // nlohmann counts the offending character: its offset is one less.
    error = what + " at byte " + std::to_string(position ? position - 1 : 0);
    return false;
  }

private:
  struct Level {
    Json *value;
    std::unordered_set<std::string> keys;
    std::string key;
  };

  Json &root;
  const char *begin;
  const char *const &cursor;
  std::string &error;
  std::vector<Level> levels;
  bool failed = false;

  bool fail(const std::string &what, const char *at) {
    if (!failed)
      error = what + " at byte " + std::to_string(at - begin);
    failed = true;
    return false;
  }

  /// Places `v` where the parser is: the root, the next element of an
  /// array, or the member named by the last key. Keys are unique (checked
  /// in key()), so a member is appended without ordered_map's linear search.
  Json *place(Json &&v) {
    if (levels.empty()) {
      root = std::move(v);
      return &root;
    }
    Level &level = levels.back();
    if (level.value->is_array()) {
      level.value->get_ref<Json::array_t &>().push_back(std::move(v));
      return &level.value->get_ref<Json::array_t &>().back();
    }
    Json::object_t &members = level.value->get_ref<Json::object_t &>();
    // The key stays in the level: a duplicate further in names its path.
    members.Json::object_t::Container::emplace_back(level.key, std::move(v));
    return &members.back().second;
  }

  bool add(Json &&v) {
    place(std::move(v));
    return true;
  }

  bool open(Json &&container) {
    if (static_cast<int>(levels.size()) >= kMaxJsonDepth)
      return fail("nesting too deep (more than " +
                      std::to_string(kMaxJsonDepth) + " levels)",
                  cursor - 1);
    Json *at = place(std::move(container));
    levels.push_back({at, {}, {}});
    return true;
  }

  bool close() {
    levels.pop_back();
    return true;
  }
};

void dumpTo(const Json &value, int indent, int depth, std::string &out);

/// A scalar, or an array of scalars.
bool flat(const Json &value) {
  if (value.is_object())
    return value.empty();
  if (value.is_array())
    for (const Json &item : value)
      if (item.is_structured() && !item.empty())
        return false;
  return true;
}

/// Whether dumpTo prints `value` on one line: scalars, arrays of flat
/// values (a list of numbers or of shapes), and objects of up to 16 flat
/// members (a step record, a tensor entry); larger maps (weight_map) and
/// anything holding an object get a line per member.
bool oneLine(const Json &value, int indent) {
  if (indent <= 0 || !value.is_structured() || value.empty())
    return true;
  if (value.is_object() && value.size() > 16)
    return false;
  for (const Json &item : value)
    if (!flat(item))
      return false;
  return true;
}

void dumpTo(const Json &value, int indent, int depth, std::string &out) {
  if (oneLine(value, indent)) {
    if (indent <= 0) {
      out += value.dump(-1, ' ', false, Json::error_handler_t::replace);
      return;
    }
    // One line with a space after each separator, as people write it.
    if (value.is_object()) {
      out += '{';
      bool first = true;
      for (const auto &[key, member] :
           value.get_ref<const Json::object_t &>()) {
        out += first ? "" : ", ";
        out += jsonQuote(key) + ": ";
        dumpTo(member, indent, depth + 1, out);
        first = false;
      }
      out += '}';
    } else if (value.is_array()) {
      out += '[';
      for (size_t i = 0; i < value.size(); ++i) {
        out += i ? ", " : "";
        dumpTo(value[i], indent, depth + 1, out);
      }
      out += ']';
    } else {
      out += value.dump(-1, ' ', false, Json::error_handler_t::replace);
    }
    return;
  }
  const std::string inner(static_cast<size_t>(indent * (depth + 1)), ' ');
  const std::string outer(static_cast<size_t>(indent * depth), ' ');
  out += value.is_object() ? "{\n" : "[\n";
  size_t i = 0;
  if (value.is_object()) {
    for (const auto &[key, member] : value.get_ref<const Json::object_t &>()) {
      out += (i++ ? ",\n" : "") + inner + jsonQuote(key) + ": ";
      dumpTo(member, indent, depth + 1, out);
    }
  } else {
    for (const Json &item : value) {
      out += (i++ ? ",\n" : "") + inner;
      dumpTo(item, indent, depth + 1, out);
    }
  }
  out += "\n" + outer + (value.is_object() ? "}" : "]");
}

} // namespace

bool parseJson(std::string_view text, Json &out, std::string &error) {
  out = Json();
  const char *cursor = text.data();
  Builder builder(out, text.data(), cursor, error);
  CountingIterator first{text.data(), &cursor};
  CountingIterator last{text.data() + text.size(), &cursor};
  error.clear();
  const bool ok = Json::sax_parse(first, last, &builder,
                                  Json::input_format_t::json, /*strict=*/true,
                                  /*ignore_comments=*/false);
  if (!ok) {
    if (error.empty())
      error = "not JSON at byte " + std::to_string(cursor - text.data());
    out = Json();
  }
  return ok;
}

const Json *jsonFind(const Json &object, std::string_view key) {
  if (!object.is_object())
    return nullptr;
  for (const auto &[name, value] : object.get_ref<const Json::object_t &>())
    if (name == key)
      return &value;
  return nullptr;
}

const Json::object_t &jsonMembers(const Json &object) {
  static const Json::object_t none;
  return object.is_object() ? object.get_ref<const Json::object_t &>() : none;
}

bool jsonInt64(const Json &value, int64_t &out) {
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    out = value.get<int64_t>();
    return true;
  }
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return false;
    out = static_cast<int64_t>(u);
    return true;
  }
  return false;
}

double jsonNumber(const Json &value) {
  return value.is_number() ? value.get<double>() : NAN;
}

const std::string &jsonText(const Json &value) {
  static const std::string none;
  return value.is_string() ? value.get_ref<const std::string &>() : none;
}

void jsonAppend(Json &object, std::string key, Json value) {
  if (object.is_null())
    object = Json::object();
  object.get_ref<Json::object_t &>().Json::object_t::Container::emplace_back(
      std::move(key), std::move(value));
}

std::string jsonQuote(std::string_view s) {
  return Json(std::string(s))
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string dumpJson(const Json &value, int indent) {
  std::string out;
  dumpTo(value, indent, 0, out);
  return out;
}

Json jsonFloat(float value) {
  if (!std::isfinite(value))
    return nullptr;
  char text[32];
  auto [end, ec] = std::to_chars(text, text + sizeof(text), value);
  (void)ec;
  *end = '\0';
  return std::strtod(text, nullptr);
}

} // namespace ztrt
