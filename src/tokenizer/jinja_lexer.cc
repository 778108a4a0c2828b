#include "tokenizer/jinja_lexer.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "tokenizer/jinja_value.h"

namespace uf::jinja {

std::string NormalizeSource(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    // Python's str.splitlines() boundaries.
    if (c == '\r') {
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
      out.push_back('\n');
    } else if (c == '\v' || c == '\f' || c == 0x1C || c == 0x1D || c == 0x1E) {
      out.push_back('\n');
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
      out.push_back('\n');
      ++i;
    } else if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xA8 ||
                static_cast<unsigned char>(s[i + 2]) == 0xA9)) {
      out.push_back('\n');
      i += 2;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::pair<int, int> LineColumn(std::string_view source, size_t offset) {
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return {line, static_cast<int>(offset - line_start) + 1};
}

Status SyntaxError(std::string_view source, size_t offset, std::string_view message) {
  auto [line, column] = LineColumn(source, offset);
  return InvalidArgumentError("line " + std::to_string(line) + ", column " +
                              std::to_string(column) + ": " + std::string(message));
}

namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = FindTag(pos);
      if (tag == std::string_view::npos) {
        Emit(TokenKind::kText, pos, std::string(src_.substr(pos)));
        break;
      }
      const char type = src_[tag + 1];
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')
                            ? src_[tag + 2]
                            : 0;
      std::string_view text = src_.substr(pos, tag - pos);
      if (sign == '-') {
        while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
      } else if (sign != '+' && type != '{') {
        // lstrip_blocks: drop spaces/tabs between the line start and the tag.
        size_t line_pos = text.rfind('\n');
        line_pos = line_pos == std::string_view::npos ? 0 : line_pos + 1;
        if (line_pos > 0 || line_starting) {
          bool blank = line_pos < text.size();
          for (size_t i = line_pos; i < text.size() && blank; ++i) blank = IsSpace(text[i]);
          if (blank) text = text.substr(0, line_pos);
        }
      }
      if (!text.empty()) Emit(TokenKind::kText, pos, std::string(text));
      size_t body = tag + 2 + (sign ? 1 : 0);
      if (type == '#') {
        UF_ASSIGN_OR_RETURN(pos, SkipComment(tag, body));
      } else if (size_t raw_end = MatchWord(tag, "raw"); type == '%' && raw_end) {
        UF_ASSIGN_OR_RETURN(pos, LexRaw(tag, raw_end));
      } else {
        UF_ASSIGN_OR_RETURN(pos, LexTag(tag, body, type == '%'));
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    Emit(TokenKind::kEof, src_.size(), "");
    return std::move(tokens_);
  }

 private:
  size_t FindTag(size_t pos) const {
    while (true) {
      size_t p = src_.find('{', pos);
      if (p == std::string_view::npos || p + 1 >= src_.size()) return std::string_view::npos;
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  void Emit(TokenKind kind, size_t offset, std::string text) {
    tokens_.push_back(Token{kind, offset, std::move(text)});
  }

  // Consumes the end of a tag at `pos` ("%}" / "}}" / "#}" with an optional -/+), applying
  // trim_blocks for block and comment tags. Returns the position after it.
  size_t AfterTagEnd(size_t pos, char strip, bool trim_newline) const {
    if (strip == '-') {
      while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
    } else if (strip != '+' && trim_newline && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  StatusOr<size_t> SkipComment(size_t tag, size_t body) {
    size_t end = src_.find("#}", body);
    if (end == std::string_view::npos) return SyntaxError(src_, tag, "missing end of comment tag");
    char strip = end > body && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    return AfterTagEnd(end + 2, strip, true);
  }

  // If `{%[-+]? word [-+]?%}` starts at tag, returns the position after it (else 0).
  size_t MatchWord(size_t tag, std::string_view word) const {
    size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.substr(p, word.size()) != word) return 0;
    p += word.size();
    if (p < src_.size() && IsNameChar(src_[p])) return 0;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    if (src_.substr(p, 2) != "%}") return 0;
    return p + 2;
  }

  StatusOr<size_t> LexRaw(size_t tag, size_t content) {
    if (src_[content - 3] == '-') {
      while (content < src_.size() && IsSpace(src_[content])) ++content;
    }
    for (size_t p = src_.find("{%", content); p != std::string_view::npos;
         p = src_.find("{%", p + 2)) {
      size_t end = MatchWord(p, "endraw");
      if (!end) continue;
      std::string_view text = src_.substr(content, p - content);
      if (src_[p + 2] == '-') {
        while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
      }
      if (!text.empty()) Emit(TokenKind::kText, content, std::string(text));
      return AfterTagEnd(end, src_[end - 3] == '-' || src_[end - 3] == '+' ? src_[end - 3] : 0,
                         true);
    }
    return SyntaxError(src_, tag, "missing {% endraw %}");
  }

  StatusOr<size_t> LexTag(size_t tag, size_t pos, bool block) {
    Emit(block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, tag, "");
    std::vector<char> balance;  // open brackets; the tag cannot end inside them
    while (true) {
      if (pos >= src_.size()) {
        return SyntaxError(src_, tag,
                           block ? "unexpected end of template, expected '%}'"
                                 : "unexpected end of template, expected '}}'");
      }
      if (balance.empty()) {
        const char close = block ? '%' : '}';
        char strip = 0;
        size_t p = pos;
        if (src_[p] == '-' || (block && src_[p] == '+')) strip = src_[p++];
        if (p + 1 < src_.size() && src_[p] == close && src_[p + 1] == '}') {
          Emit(block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, pos, "");
          return AfterTagEnd(p + 2, strip, block);
        }
      }
      char c = src_[pos];
      if (IsSpace(c)) {
        ++pos;
      } else if (IsDigit(c)) {
        UF_ASSIGN_OR_RETURN(pos, LexNumber(pos));
      } else if (IsNameStart(c)) {
        size_t start = pos;
        while (pos < src_.size() && IsNameChar(src_[pos])) ++pos;
        Emit(TokenKind::kName, start, std::string(src_.substr(start, pos - start)));
      } else if (c == '\'' || c == '"') {
        UF_ASSIGN_OR_RETURN(pos, LexString(pos));
      } else {
        UF_ASSIGN_OR_RETURN(pos, LexOperator(pos, &balance));
      }
    }
  }

  StatusOr<size_t> LexNumber(size_t start) {
    auto digits = [&](size_t p, auto is_digit) {
      // (\d+_)*\d+ : underscores only between digits.
      size_t q = p;
      while (q < src_.size() && is_digit(src_[q])) {
        ++q;
        if (q + 1 < src_.size() && src_[q] == '_' && is_digit(src_[q + 1])) ++q;
      }
      return q;
    };
    auto dec = [](char c) { return IsDigit(c); };
    const bool after_dot =
        !tokens_.empty() && tokens_.back().kind == TokenKind::kOp && tokens_.back().text == ".";
    // 0x / 0o / 0b integers.
    if (src_[start] == '0' && start + 1 < src_.size() && !after_dot) {
      char p = static_cast<char>(src_[start + 1] | 0x20);
      int base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (base) {
        size_t q = start + 2;
        uint64_t v = 0;
        bool any = false;
        while (q < src_.size()) {
          if (src_[q] == '_' && q + 1 < src_.size()) ++q;
          int h = HexValue(src_[q]);
          if (h < 0 || h >= base) break;
          if (v > (static_cast<uint64_t>(INT64_MAX) - h) / base) {
            return SyntaxError(src_, start, "integer literal too large");
          }
          v = v * base + h;
          any = true;
          ++q;
        }
        if (any) {
          Token t{TokenKind::kInt, start, std::string(src_.substr(start, q - start))};
          t.int_value = static_cast<int64_t>(v);
          tokens_.push_back(std::move(t));
          return q;
        }
      }
    }
    size_t end = digits(start, dec);
    bool is_float = false;
    if (!after_dot) {
      size_t q = end;
      if (q + 1 < src_.size() && src_[q] == '.' && IsDigit(src_[q + 1])) {
        q = digits(q + 1, dec);
        is_float = true;
      }
      if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
        size_t r = q + 1;
        if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
        if (r < src_.size() && IsDigit(src_[r])) {
          q = digits(r, dec);
          is_float = true;
        }
      }
      if (is_float) end = q;
    }
    std::string text;
    for (char c : src_.substr(start, end - start)) {
      if (c != '_') text.push_back(c);
    }
    Token t{is_float ? TokenKind::kFloat : TokenKind::kInt, start, text};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      auto res = std::from_chars(text.data(), text.data() + text.size(), t.int_value);
      if (res.ec != std::errc()) return SyntaxError(src_, start, "integer literal too large");
    }
    tokens_.push_back(std::move(t));
    return end;
  }

  // Python string literal escapes (Jinja decodes literals with "unicode-escape").
  StatusOr<size_t> LexString(size_t start) {
    const char quote = src_[start];
    std::string value;
    size_t p = start + 1;
    while (true) {
      if (p >= src_.size()) return SyntaxError(src_, start, "unterminated string literal");
      char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) return SyntaxError(src_, start, "unterminated string literal");
      char e = src_[p + 1];
      p += 2;
      switch (e) {
        case '\n':
          break;
        case '\\':
          value.push_back('\\');
          break;
        case '\'':
          value.push_back('\'');
          break;
        case '"':
          value.push_back('"');
          break;
        case 'a':
          value.push_back('\a');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'n':
          value.push_back('\n');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (int k = 0; k < n; ++k) {
            int h = p < src_.size() ? HexValue(src_[p]) : -1;
            if (h < 0) return SyntaxError(src_, p, "truncated \\" + std::string(1, e) + " escape");
            cp = cp * 16 + static_cast<char32_t>(h);
            ++p;
          }
          if (cp > 0x10FFFF) return SyntaxError(src_, p, "escape past U+10FFFF");
          AppendUtf8(cp, &value);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k) {
              cp = cp * 8 + static_cast<char32_t>(src_[p++] - '0');
            }
            AppendUtf8(cp, &value);
          } else {
            // Unknown escapes (including \N{...}) stay as written.
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    tokens_.push_back(Token{TokenKind::kString, start, std::move(value)});
    return p + 1;
  }

  StatusOr<size_t> LexOperator(size_t pos, std::vector<char>* balance) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src_.substr(pos, 2) == op) {
        Emit(TokenKind::kOp, pos, std::string(op));
        return pos + 2;
      }
    }
    char c = src_[pos];
    static constexpr std::string_view kOne = "+-/*%~[](){}<>=.:|,;";
    if (kOne.find(c) == std::string_view::npos) {
      return SyntaxError(src_, pos, "unexpected character '" + std::string(1, c) + "'");
    }
    if (c == '(' || c == '[' || c == '{') {
      balance->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance->empty()) {
        return SyntaxError(src_, pos, "unexpected '" + std::string(1, c) + "'");
      }
      if (balance->back() != c) {
        return SyntaxError(src_, pos,
                           "unexpected '" + std::string(1, c) + "', expected '" +
                               std::string(1, balance->back()) + "'");
      }
      balance->pop_back();
    }
    Emit(TokenKind::kOp, pos, std::string(1, c));
    return pos + 1;
  }

  std::string_view src_;
  std::vector<Token> tokens_;
};

}  // namespace

StatusOr<std::vector<Token>> Tokenize(std::string_view source) { return Lexer(source).Run(); }

}  // namespace uf::jinja
