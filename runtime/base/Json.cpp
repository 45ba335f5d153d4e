//===- Json.cpp - A minimal JSON reader and string quoting ----------------===//
//
// Part of ztrain's runtime. Recursive descent over RFC 8259, with a nesting
// limit so that a hostile header cannot overflow the stack.
//
//===----------------------------------------------------------------------===//

#include "base/Json.h"

#include "base/Support.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace ztrt {

const JsonValue *JsonValue::find(std::string_view key) const {
  for (const auto &member : members)
    if (member.first == key)
      return &member.second;
  return nullptr;
}

bool JsonValue::getInt64(int64_t &out) const {
  if (kind != Kind::Number || text.empty())
    return false;
  // Only plain integer literals: "1e3" or "4.0" are not shapes or offsets.
  for (size_t i = text[0] == '-' ? 1 : 0; i < text.size(); ++i)
    if (text[i] < '0' || text[i] > '9')
      return false;
  errno = 0;
  char *end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0')
    return false;
  out = value;
  return true;
}

double JsonValue::getDouble() const {
  return kind == Kind::Number ? std::strtod(text.c_str(), nullptr) : NAN;
}

namespace {

constexpr int kMaxDepth = 64;

class Parser {
public:
  Parser(std::string_view text, std::string &error)
      : text(text), error(error) {}

  bool parseDocument(JsonValue &out) {
    skipSpace();
    if (!parseValue(out, 0))
      return false;
    skipSpace();
    if (pos != text.size())
      return fail("unexpected trailing characters");
    return true;
  }

private:
  std::string_view text;
  std::string &error;
  size_t pos = 0;

  bool fail(const char *what) {
    error = format("%s at byte %zu", what, pos);
    return false;
  }

  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' ||
                                 text[pos] == '\n' || text[pos] == '\r'))
      ++pos;
  }

  bool consume(std::string_view literal) {
    if (text.substr(pos, literal.size()) != literal)
      return false;
    pos += literal.size();
    return true;
  }

  bool parseValue(JsonValue &out, int depth) {
    if (depth > kMaxDepth)
      return fail("nesting too deep");
    if (pos >= text.size())
      return fail("unexpected end of input");
    char c = text[pos];
    if (c == '{')
      return parseObject(out, depth);
    if (c == '[')
      return parseArray(out, depth);
    if (c == '"') {
      out.kind = JsonValue::Kind::String;
      return parseString(out.text);
    }
    if (c == '-' || (c >= '0' && c <= '9'))
      return parseNumber(out);
    if (consume("true")) {
      out.kind = JsonValue::Kind::Bool;
      out.boolean = true;
      return true;
    }
    if (consume("false")) {
      out.kind = JsonValue::Kind::Bool;
      return true;
    }
    if (consume("null")) {
      out.kind = JsonValue::Kind::Null;
      return true;
    }
    return fail("unexpected character");
  }

  bool parseObject(JsonValue &out, int depth) {
    out.kind = JsonValue::Kind::Object;
    ++pos; // '{'
    skipSpace();
    if (pos < text.size() && text[pos] == '}') {
      ++pos;
      return true;
    }
    while (true) {
      skipSpace();
      if (pos >= text.size() || text[pos] != '"')
        return fail("expected a string key");
      std::string key;
      if (!parseString(key))
        return false;
      if (out.find(key))
        return fail(("duplicate key '" + key + "'").c_str());
      skipSpace();
      if (pos >= text.size() || text[pos] != ':')
        return fail("expected ':'");
      ++pos;
      skipSpace();
      JsonValue value;
      if (!parseValue(value, depth + 1))
        return false;
      out.members.emplace_back(std::move(key), std::move(value));
      skipSpace();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < text.size() && text[pos] == '}') {
        ++pos;
        return true;
      }
      return fail("expected ',' or '}'");
    }
  }

  bool parseArray(JsonValue &out, int depth) {
    out.kind = JsonValue::Kind::Array;
    ++pos; // '['
    skipSpace();
    if (pos < text.size() && text[pos] == ']') {
      ++pos;
      return true;
    }
    while (true) {
      skipSpace();
      JsonValue value;
      if (!parseValue(value, depth + 1))
        return false;
      out.items.push_back(std::move(value));
      skipSpace();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < text.size() && text[pos] == ']') {
        ++pos;
        return true;
      }
      return fail("expected ',' or ']'");
    }
  }

  bool parseHex4(uint32_t &out) {
    if (pos + 4 > text.size())
      return fail("truncated \\u escape");
    out = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text[pos++];
      out <<= 4;
      if (c >= '0' && c <= '9')
        out |= c - '0';
      else if (c >= 'a' && c <= 'f')
        out |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        out |= c - 'A' + 10;
      else
        return fail("bad \\u escape");
    }
    return true;
  }

  static void appendUtf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool parseString(std::string &out) {
    ++pos; // '"'
    while (true) {
      if (pos >= text.size())
        return fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(text[pos++]);
      if (c == '"')
        return true;
      if (c < 0x20)
        return fail("control character in string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (pos >= text.size())
        return fail("unterminated string");
      char e = text[pos++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t cp;
        if (!parseHex4(cp))
          return false;
        if (cp >= 0xD800 && cp < 0xDC00) {
          uint32_t low;
          if (!consume("\\u") || !parseHex4(low) || low < 0xDC00 ||
              low >= 0xE000)
            return fail("unpaired surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          return fail("unpaired surrogate in \\u escape");
        }
        appendUtf8(out, cp);
        break;
      }
      default:
        return fail("bad escape in string");
      }
    }
  }

  bool parseNumber(JsonValue &out) {
    size_t start = pos;
    auto digits = [&] {
      size_t begin = pos;
      while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
        ++pos;
      return pos > begin;
    };
    if (text[pos] == '-')
      ++pos;
    if (pos < text.size() && text[pos] == '0')
      ++pos;
    else if (!digits())
      return fail("bad number");
    if (pos < text.size() && text[pos] == '.') {
      ++pos;
      if (!digits())
        return fail("bad number");
    }
    if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
      ++pos;
      if (pos < text.size() && (text[pos] == '+' || text[pos] == '-'))
        ++pos;
      if (!digits())
        return fail("bad number");
    }
    out.kind = JsonValue::Kind::Number;
    out.text = std::string(text.substr(start, pos - start));
    return true;
  }
};

} // namespace

bool parseJson(std::string_view text, JsonValue &out, std::string &error) {
  out = JsonValue();
  return Parser(text, error).parseDocument(out);
}

std::string jsonQuote(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (c < 0x20)
        out += format("\\u%04x", c);
      else
        out += ch;
    }
  }
  return out + "\"";
}

} // namespace ztrt
