// Jinja2 lexer with the whitespace rules transformers renders chat templates with:
// trim_blocks=True (the first newline after a block or comment tag is dropped),
// lstrip_blocks=True (spaces and tabs before a block or comment tag at the start of a line are
// dropped), `-` / `+` markers on tags, and keep_trailing_newline=False.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace uf::jinja {

enum class TokenKind : uint8_t {
  kText,        // literal template text, already whitespace-processed
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOp,  // text holds the operator: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { } ;
  kEof,
};

struct Token {
  TokenKind kind;
  size_t offset;  // byte offset in the normalized source
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
};

// What Jinja does to a template before lexing: every line break (\r\n, \r, \v, \f, U+2028, ...)
// becomes \n and one trailing newline is dropped.
std::string NormalizeSource(std::string_view source);

// Tokenizes a normalized source. Errors carry line and column.
StatusOr<std::vector<Token>> Tokenize(std::string_view source);

// 1-based line and column of a byte offset.
std::pair<int, int> LineColumn(std::string_view source, size_t offset);

// "line L, column C: message" as an InvalidArgument status.
Status SyntaxError(std::string_view source, size_t offset, std::string_view message);

}  // namespace uf::jinja
