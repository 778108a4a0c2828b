// Jinja2 parser: template source to a Program (jinja_ast.h). Supports the statements chat
// templates use (if/elif/else, for with loop filter and else, set incl. block set and namespace
// attribute set, macro, call, filter, break/continue, generation, with, raw) and Jinja's full
// expression grammar except *args/**kwargs unpacking.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "tokenizer/jinja_ast.h"

namespace uf::jinja {

// Nesting limits for hostile templates: the parser recurses once per level.
inline constexpr int kMaxExpressionDepth = 300;  // parenthesized/unary/conditional nesting
inline constexpr int kMaxBlockDepth = 100;       // nested block statements

// InvalidArgument with "line L, column C: ..." on syntax errors.
StatusOr<std::shared_ptr<const Program>> ParseTemplate(std::string source);

}  // namespace uf::jinja
