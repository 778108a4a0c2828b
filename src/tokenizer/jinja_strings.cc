#include "tokenizer/jinja_strings.h"

#include <algorithm>
#include <cstring>

#include "tokenizer/jinja_value.h"

namespace uf::jinja {

bool IsPySpace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {

// Latin Extended-A alternates upper/lower case in pairs, with the parity flipping in two runs.
bool LatinExtAUpper(char32_t c) {
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return c % 2 == 1;
  return c % 2 == 0;
}
bool LatinExtAPaired(char32_t c) {
  return c >= 0x100 && c <= 0x17E && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
         c != 0x178;
}
char32_t LatinExtAOther(char32_t c) {
  const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
  if (odd_upper) return c % 2 == 1 ? c + 1 : c - 1;
  return c % 2 == 0 ? c + 1 : c - 1;
}

}  // namespace

char32_t LowerCodePoint(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
  if (LatinExtAPaired(c)) return LatinExtAUpper(c) ? LatinExtAOther(c) : c;
  if (c == 0x130) return 'i';
  if (c == 0x178) return 0xFF;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 0x20;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  return c;
}

char32_t UpperCodePoint(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 0x20;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (LatinExtAPaired(c)) return LatinExtAUpper(c) ? c : LatinExtAOther(c);
  if (c == 0x131) return 'I';
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3B1 && c <= 0x3CB) return c - 0x20;
  if (c >= 0x430 && c <= 0x44F) return c - 0x20;
  if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  return c;
}

bool IsLowerCodePoint(char32_t c) { return UpperCodePoint(c) != c || c == 0xDF; }
bool IsUpperCodePoint(char32_t c) { return LowerCodePoint(c) != c; }
bool IsCased(char32_t c) { return IsLowerCodePoint(c) || IsUpperCodePoint(c); }
bool IsDigitCodePoint(char32_t c) { return c >= '0' && c <= '9'; }
bool IsAlphaCodePoint(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  // Outside ASCII: cased letters, plus CJK / Hangul / kana blocks.
  return IsCased(c) || (c >= 0x3040 && c <= 0x30FF) || (c >= 0x4E00 && c <= 0x9FFF) ||
         (c >= 0xAC00 && c <= 0xD7A3);
}

namespace {

template <typename F>
std::string MapCodePoints(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  if (IsAscii(s)) {
    for (char c : s) out.push_back(static_cast<char>(f(static_cast<char32_t>(c))));
    return out;
  }
  for (char32_t c : DecodeUtf8(s)) {
    if (c == 0xDF && f('a') == 'A') {  // German sharp s uppercases to two letters
      out += "SS";
      continue;
    }
    AppendUtf8(f(c), &out);
  }
  return out;
}

}  // namespace

std::string PyLower(std::string_view s) { return MapCodePoints(s, LowerCodePoint); }
std::string PyUpper(std::string_view s) { return MapCodePoints(s, UpperCodePoint); }

std::string PyCapitalize(std::string_view s) {
  std::u32string cps = DecodeUtf8(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    AppendUtf8(i == 0 ? UpperCodePoint(cps[i]) : LowerCodePoint(cps[i]), &out);
  }
  return out;
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    AppendUtf8(previous_cased ? LowerCodePoint(c) : UpperCodePoint(c), &out);
    previous_cased = IsCased(c);
  }
  return out;
}

std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  if (IsAscii(s) && (!chars || IsAscii(*chars))) {
    auto strip_it = [&](char c) {
      return chars ? chars->find(c) != std::string::npos : IsPySpace(static_cast<char32_t>(c));
    };
    size_t b = 0, e = s.size();
    if (left) {
      while (b < e && strip_it(s[b])) ++b;
    }
    if (right) {
      while (e > b && strip_it(s[e - 1])) --e;
    }
    return std::string(s.substr(b, e - b));
  }
  std::u32string cps = DecodeUtf8(s);
  std::u32string set = chars ? DecodeUtf8(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : IsPySpace(c);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  return EncodeUtf8(std::u32string_view(cps).substr(b, e - b));
}

namespace {

std::string Sub(const std::u32string& cps, size_t b, size_t e) {
  return EncodeUtf8(std::u32string_view(cps).substr(b, e - b));
}

}  // namespace

size_t FindBytes(std::string_view s, std::string_view needle, size_t pos) {
  if (pos > s.size()) return std::string_view::npos;
  if (needle.empty()) return pos;
  const void* hit = memmem(s.data() + pos, s.size() - pos, needle.data(), needle.size());
  return hit ? static_cast<size_t>(static_cast<const char*>(hit) - s.data())
             : std::string_view::npos;
}

size_t RFindBytes(std::string_view s, std::string_view needle) {
  if (needle.size() > s.size()) return std::string_view::npos;
  if (needle.empty()) return s.size();
  // The last match is the first one in the reversed string.
  const std::string rs(s.rbegin(), s.rend()), rneedle(needle.rbegin(), needle.rend());
  const size_t hit = FindBytes(rs, rneedle);
  return hit == std::string_view::npos ? hit : s.size() - hit - needle.size();
}

std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = FindBytes(s, *sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::u32string cps = DecodeUtf8(s);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && IsPySpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(Sub(cps, i, cps.size()));  // the remainder keeps its whitespace
      break;
    }
    const size_t b = i;
    while (i < cps.size() && !IsPySpace(cps[i])) ++i;
    out.push_back(Sub(cps, b, i));
  }
  return out;
}

std::vector<std::string> PyRSplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    // Splitting from the right is splitting the reversed string from the left.
    const std::string rs(s.rbegin(), s.rend()), rsep(sep->rbegin(), sep->rend());
    // rs[b:e] is s[n-e:n-b] backwards.
    auto part = [&](size_t b, size_t e) { return std::string(s.substr(s.size() - e, e - b)); };
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = FindBytes(rs, rsep, pos);
      if (hit == std::string_view::npos) break;
      out.push_back(part(pos, hit));
      pos = hit + rsep.size();
    }
    out.push_back(part(pos, rs.size()));
    std::reverse(out.begin(), out.end());
    return out;
  }
  const std::u32string cps = DecodeUtf8(s);
  size_t i = cps.size();
  while (true) {
    while (i > 0 && IsPySpace(cps[i - 1])) --i;
    if (i == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(Sub(cps, 0, i));
      break;
    }
    const size_t e = i;
    while (i > 0 && !IsPySpace(cps[i - 1])) --i;
    out.push_back(Sub(cps, i, e));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> PySplitLines(std::string_view s) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      out.emplace_back(s.substr(b, i - b));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      b = i + 1;
    }
  }
  if (b < s.size()) out.emplace_back(s.substr(b));
  return out;
}

std::optional<std::string> PyReplace(std::string_view s, std::string_view old,
                                     std::string_view repl, int64_t count, size_t max_bytes) {
  std::string out;
  int64_t done = 0;
  auto limit_hit = [&]() { return count >= 0 && done >= count; };
  if (old.empty()) {
    // Python inserts `repl` before every code point and at the end.
    std::u32string cps = DecodeUtf8(s);
    for (char32_t c : cps) {
      if (!limit_hit()) {
        out += repl;
        ++done;
      }
      AppendUtf8(c, &out);
      if (out.size() > max_bytes) return std::nullopt;
    }
    if (!limit_hit()) out += repl;
    if (out.size() > max_bytes) return std::nullopt;
    return out;
  }
  size_t pos = 0;
  while (!limit_hit()) {
    size_t hit = FindBytes(s, old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    if (out.size() > max_bytes) return std::nullopt;
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  if (out.size() > max_bytes) return std::nullopt;
  return out;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

int64_t CodePointIndex(std::string_view s, size_t byte_offset) {
  return static_cast<int64_t>(CodePointCount(s.substr(0, byte_offset)));
}

}  // namespace uf::jinja
