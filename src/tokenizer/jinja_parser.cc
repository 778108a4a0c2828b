#include "tokenizer/jinja_parser.h"

#include <initializer_list>
#include <utility>

#include "tokenizer/jinja_lexer.h"

namespace uf::jinja {
namespace {

using EK = Expr::Kind;
using SK = Stmt::Kind;

ExprPtr MakeExpr(EK kind, size_t offset) { return std::make_unique<Expr>(kind, offset); }

ExprPtr MakeUnary(EK kind, size_t offset, ExprPtr operand) {
  ExprPtr e = MakeExpr(kind, offset);
  e->children.push_back(std::move(operand));
  return e;
}

ExprPtr MakeBinary(EK kind, size_t offset, ExprPtr a, ExprPtr b) {
  ExprPtr e = MakeExpr(kind, offset);
  e->children.push_back(std::move(a));
  e->children.push_back(std::move(b));
  return e;
}

class Parser {
 public:
  Parser(const std::string& source, std::vector<Token> tokens)
      : src_(source), toks_(std::move(tokens)) {}

  Status ParseProgram(Body* body) {
    std::string found;
    return ParseBody(body, {}, &found);
  }

 private:
  // ---- token helpers ----
  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  void Next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const { return Cur().kind == TokenKind::kOp && Cur().text == op; }
  bool IsName(std::string_view name) const {
    return Cur().kind == TokenKind::kName && Cur().text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  std::string Describe(const Token& t) const {
    switch (t.kind) {
      case TokenKind::kText:
        return "template text";
      case TokenKind::kVarBegin:
        return "'{{'";
      case TokenKind::kVarEnd:
        return "'}}'";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kName:
        return "'" + t.text + "'";
      case TokenKind::kString:
        return "string literal";
      case TokenKind::kInt:
      case TokenKind::kFloat:
        return "number";
      case TokenKind::kOp:
        return "'" + t.text + "'";
      case TokenKind::kEof:
        return "end of template";
    }
    return "token";
  }

  Status Error(std::string_view message) const { return SyntaxError(src_, Cur().offset, message); }
  Status Unexpected(std::string_view expected) const {
    return Error("expected " + std::string(expected) + ", got " + Describe(Cur()));
  }
  Status ExpectOp(std::string_view op) {
    if (!SkipOp(op)) return Unexpected("'" + std::string(op) + "'");
    return OkStatus();
  }
  Status ExpectNameWord(std::string_view name) {
    if (!SkipName(name)) return Unexpected("'" + std::string(name) + "'");
    return OkStatus();
  }
  StatusOr<std::string> ExpectName() {
    if (Cur().kind != TokenKind::kName) return Unexpected("a name");
    std::string name = Cur().text;
    Next();
    return name;
  }
  Status ExpectBlockEnd() {
    if (Cur().kind != TokenKind::kBlockEnd) return Unexpected("'%}'");
    Next();
    return OkStatus();
  }

  // Counts recursion of the parse functions that can nest without bound.
  struct DepthGuard {
    explicit DepthGuard(int* d) : depth(d) { ++*depth; }
    ~DepthGuard() { --*depth; }
    int* depth;
  };

  // ---- statements ----

  // Parses statements until a block tag named in `ends`; leaves the position after that name.
  Status ParseBody(Body* body, std::initializer_list<std::string_view> ends, std::string* found) {
    DepthGuard guard(&block_depth_);
    if (block_depth_ > kMaxBlockDepth) return Error("blocks nested too deeply");
    while (true) {
      const Token& tok = Cur();
      switch (tok.kind) {
        case TokenKind::kText: {
          auto s = std::make_unique<Stmt>(SK::kText, tok.offset);
          s->text = tok.text;
          body->push_back(std::move(s));
          Next();
          break;
        }
        case TokenKind::kVarBegin: {
          auto s = std::make_unique<Stmt>(SK::kOutput, tok.offset);
          Next();
          UF_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, false, {}));
          if (Cur().kind != TokenKind::kVarEnd) return Unexpected("'}}'");
          Next();
          body->push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          const size_t offset = tok.offset;
          Next();
          if (Cur().kind != TokenKind::kName) return Unexpected("a statement name");
          for (std::string_view end : ends) {
            if (Cur().text == end) {
              *found = Cur().text;
              Next();
              return OkStatus();
            }
          }
          UF_RETURN_IF_ERROR(ParseStatement(offset, body));
          break;
        }
        case TokenKind::kEof:
          if (ends.size() > 0) {
            return Error("unexpected end of template, missing {% " + std::string(*ends.begin()) +
                         " %}");
          }
          return OkStatus();
        default:
          return Error("unexpected " + Describe(tok));
      }
    }
  }

  Status ParseStatement(size_t offset, Body* body) {
    const std::string name = Cur().text;
    Next();
    StmtPtr s;
    if (name == "if") {
      UF_ASSIGN_OR_RETURN(s, ParseIf(offset));
    } else if (name == "for") {
      UF_ASSIGN_OR_RETURN(s, ParseFor(offset));
    } else if (name == "set") {
      UF_ASSIGN_OR_RETURN(s, ParseSet(offset));
    } else if (name == "macro") {
      UF_ASSIGN_OR_RETURN(s, ParseMacro(offset));
    } else if (name == "call") {
      UF_ASSIGN_OR_RETURN(s, ParseCallBlock(offset));
    } else if (name == "filter") {
      s = std::make_unique<Stmt>(SK::kFilterBlock, offset);
      UF_ASSIGN_OR_RETURN(s->filter, ParseFilterChain(false));
      UF_RETURN_IF_ERROR(ParseBlockBody(s.get(), "endfilter"));
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return Error("'" + name + "' outside of a loop");
      s = std::make_unique<Stmt>(name == "break" ? SK::kBreak : SK::kContinue, offset);
      UF_RETURN_IF_ERROR(ExpectBlockEnd());
    } else if (name == "generation") {
      // transformers' AssistantTracker extension: marks assistant text, renders its body.
      s = std::make_unique<Stmt>(SK::kScope, offset);
      UF_RETURN_IF_ERROR(ParseBlockBody(s.get(), "endgeneration"));
    } else if (name == "with") {
      s = std::make_unique<Stmt>(SK::kScope, offset);
      while (Cur().kind != TokenKind::kBlockEnd) {
        if (!s->targets.empty()) UF_RETURN_IF_ERROR(ExpectOp(","));
        UF_ASSIGN_OR_RETURN(std::string target, ExpectName());
        UF_RETURN_IF_ERROR(ExpectOp("="));
        UF_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        s->targets.push_back(std::move(target));
        s->values.push_back(std::move(value));
      }
      UF_RETURN_IF_ERROR(ParseBlockBody(s.get(), "endwith"));
    } else {
      return SyntaxError(src_, offset, "unknown tag '" + name + "'");
    }
    body->push_back(std::move(s));
    return OkStatus();
  }

  // "%}" body "{% end %}".
  Status ParseBlockBody(Stmt* s, std::string_view end) {
    UF_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string found;
    UF_RETURN_IF_ERROR(ParseBody(&s->body, {end}, &found));
    return ExpectBlockEnd();
  }

  StatusOr<StmtPtr> ParseIf(size_t offset) {
    auto s = std::make_unique<Stmt>(SK::kIf, offset);
    while (true) {
      UF_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, false, {}));
      UF_RETURN_IF_ERROR(ExpectBlockEnd());
      Body body;
      std::string found;
      UF_RETURN_IF_ERROR(ParseBody(&body, {"endif", "elif", "else"}, &found));
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (found == "elif") continue;
      if (found == "else") {
        UF_RETURN_IF_ERROR(ExpectBlockEnd());
        UF_RETURN_IF_ERROR(ParseBody(&s->else_body, {"endif"}, &found));
      }
      UF_RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
  }

  // name | name, name | (name, name)
  Status ParseTargets(std::vector<std::string>* targets) {
    const bool paren = SkipOp("(");
    while (true) {
      UF_ASSIGN_OR_RETURN(std::string name, ExpectName());
      targets->push_back(std::move(name));
      if (!SkipOp(",")) break;
      if (Cur().kind != TokenKind::kName) break;  // trailing comma
    }
    if (paren) UF_RETURN_IF_ERROR(ExpectOp(")"));
    return OkStatus();
  }

  StatusOr<StmtPtr> ParseFor(size_t offset) {
    auto s = std::make_unique<Stmt>(SK::kFor, offset);
    UF_RETURN_IF_ERROR(ParseTargets(&s->targets));
    UF_RETURN_IF_ERROR(ExpectNameWord("in"));
    UF_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, false, {"recursive", "if"}));
    if (SkipName("if")) {
      UF_ASSIGN_OR_RETURN(s->cond, ParseExpression(true));
    }
    if (IsName("recursive")) return Error("recursive for loops are not supported");
    UF_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string found;
    ++loop_depth_;
    Status st = ParseBody(&s->body, {"endfor", "else"}, &found);
    --loop_depth_;
    UF_RETURN_IF_ERROR(st);
    if (found == "else") {
      UF_RETURN_IF_ERROR(ExpectBlockEnd());
      UF_RETURN_IF_ERROR(ParseBody(&s->else_body, {"endfor"}, &found));
    }
    UF_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  StatusOr<StmtPtr> ParseSet(size_t offset) {
    auto s = std::make_unique<Stmt>(SK::kSet, offset);
    if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOp && Peek().text == ".") {
      s->attr_target = true;
      s->targets.push_back(Cur().text);
      Next();
      Next();
      UF_ASSIGN_OR_RETURN(std::string attr, ExpectName());
      s->targets.push_back(std::move(attr));
      UF_RETURN_IF_ERROR(ExpectOp("="));
    } else {
      UF_RETURN_IF_ERROR(ParseTargets(&s->targets));
      if (!SkipOp("=")) {
        if (s->targets.size() != 1) return Unexpected("'='");
        s->kind = SK::kSetBlock;
        if (SkipOp("|")) {
          UF_ASSIGN_OR_RETURN(s->filter, ParseFilterChain(false));
        }
        UF_RETURN_IF_ERROR(ParseBlockBody(s.get(), "endset"));
        return s;
      }
    }
    UF_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, false, {}));
    UF_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  Status ParseParams(std::vector<Param>* params) {
    UF_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!params->empty()) {
        UF_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
      }
      Param p;
      UF_ASSIGN_OR_RETURN(p.name, ExpectName());
      if (SkipOp("=")) {
        UF_ASSIGN_OR_RETURN(p.default_value, ParseExpression(true));
      }
      params->push_back(std::move(p));
    }
    return ExpectOp(")");
  }

  // Bodies of macros and call blocks are functions: break/continue cannot reach an outer loop.
  Status ParseFunctionBody(Stmt* s, std::string_view end) {
    const int saved = loop_depth_;
    loop_depth_ = 0;
    Status st = ParseBlockBody(s, end);
    loop_depth_ = saved;
    return st;
  }

  StatusOr<StmtPtr> ParseMacro(size_t offset) {
    auto s = std::make_unique<Stmt>(SK::kMacro, offset);
    UF_ASSIGN_OR_RETURN(s->name, ExpectName());
    UF_RETURN_IF_ERROR(ParseParams(&s->params));
    UF_RETURN_IF_ERROR(ParseFunctionBody(s.get(), "endmacro"));
    return s;
  }

  StatusOr<StmtPtr> ParseCallBlock(size_t offset) {
    auto s = std::make_unique<Stmt>(SK::kCallBlock, offset);
    if (IsOp("(")) UF_RETURN_IF_ERROR(ParseParams(&s->params));
    UF_ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
    if (s->expr->kind != EK::kCall) return Error("{% call %} needs a macro call");
    s->name = "caller";
    UF_RETURN_IF_ERROR(ParseFunctionBody(s.get(), "endcall"));
    return s;
  }

  // name(args) | name(args) ... applied to a null subject (filled in at run time).
  StatusOr<ExprPtr> ParseFilterChain(bool) {
    ExprPtr chain;
    do {
      UF_ASSIGN_OR_RETURN(chain, ParseFilterTail(std::move(chain)));
    } while (SkipOp("|"));
    return chain;
  }

  // ---- expressions ----

  StatusOr<ExprPtr> ParseTuple(bool with_condexpr, bool explicit_parens,
                               std::initializer_list<std::string_view> extra_ends) {
    const size_t offset = Cur().offset;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) UF_RETURN_IF_ERROR(ExpectOp(","));
      const Token& t = Cur();
      bool end = t.kind == TokenKind::kBlockEnd || t.kind == TokenKind::kVarEnd || IsOp(")");
      for (std::string_view e : extra_ends) end = end || IsName(e);
      if (end) break;
      UF_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condexpr));
      items.push_back(std::move(e));
      if (!IsOp(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return Unexpected("an expression");
    }
    ExprPtr e = MakeExpr(EK::kTuple, offset);
    e->children = std::move(items);
    return e;
  }

  StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    return with_condexpr ? ParseCond() : ParseOr();
  }

  StatusOr<ExprPtr> ParseCond() {
    DepthGuard guard(&expr_depth_);
    if (expr_depth_ > kMaxExpressionDepth) return Error("expression nested too deeply");
    UF_ASSIGN_OR_RETURN(ExprPtr value, ParseOr());
    while (IsName("if")) {
      const size_t offset = Cur().offset;
      Next();
      ExprPtr e = MakeExpr(EK::kCond, offset);
      UF_ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr otherwise;
      if (SkipName("else")) {
        UF_ASSIGN_OR_RETURN(otherwise, ParseCond());
      }
      e->children.push_back(std::move(value));
      e->children.push_back(std::move(cond));
      e->children.push_back(std::move(otherwise));
      value = std::move(e);
    }
    return value;
  }

  StatusOr<ExprPtr> ParseOr() {
    UF_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const size_t offset = Cur().offset;
      Next();
      UF_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = MakeBinary(EK::kOr, offset, std::move(left), std::move(right));
    }
    return left;
  }

  StatusOr<ExprPtr> ParseAnd() {
    UF_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const size_t offset = Cur().offset;
      Next();
      UF_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = MakeBinary(EK::kAnd, offset, std::move(left), std::move(right));
    }
    return left;
  }

  StatusOr<ExprPtr> ParseNot() {
    if (!IsName("not")) return ParseCompare();
    DepthGuard guard(&expr_depth_);
    if (expr_depth_ > kMaxExpressionDepth) return Error("expression nested too deeply");
    const size_t offset = Cur().offset;
    Next();
    UF_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    return MakeUnary(EK::kNot, offset, std::move(operand));
  }

  StatusOr<ExprPtr> ParseCompare() {
    const size_t offset = Cur().offset;
    UF_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      CompareOp op;
      if (IsOp("==")) {
        op = CompareOp::kEq;
      } else if (IsOp("!=")) {
        op = CompareOp::kNe;
      } else if (IsOp("<")) {
        op = CompareOp::kLt;
      } else if (IsOp("<=")) {
        op = CompareOp::kLe;
      } else if (IsOp(">")) {
        op = CompareOp::kGt;
      } else if (IsOp(">=")) {
        op = CompareOp::kGe;
      } else if (IsName("in")) {
        op = CompareOp::kIn;
      } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().text == "in") {
        op = CompareOp::kNotIn;
        Next();
      } else {
        break;
      }
      Next();
      if (!cmp) {
        cmp = MakeExpr(EK::kCompare, offset);
        cmp->children.push_back(std::move(first));
      }
      UF_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      cmp->children.push_back(std::move(operand));
      cmp->compare_ops.push_back(op);
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  StatusOr<ExprPtr> ParseMath1() {
    UF_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      ExprPtr e = MakeExpr(EK::kBinary, Cur().offset);
      e->binary_op = IsOp("+") ? BinaryOp::kAdd : BinaryOp::kSub;
      Next();
      UF_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      e->children.push_back(std::move(left));
      e->children.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  StatusOr<ExprPtr> ParseConcat() {
    const size_t offset = Cur().offset;
    UF_ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
    if (!IsOp("~")) return first;
    ExprPtr e = MakeExpr(EK::kConcat, offset);
    e->children.push_back(std::move(first));
    while (SkipOp("~")) {
      UF_ASSIGN_OR_RETURN(ExprPtr next, ParseMath2());
      e->children.push_back(std::move(next));
    }
    return e;
  }

  StatusOr<ExprPtr> ParseMath2() {
    UF_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      ExprPtr e = MakeExpr(EK::kBinary, Cur().offset);
      e->binary_op = IsOp("*")    ? BinaryOp::kMul
                     : IsOp("/")  ? BinaryOp::kDiv
                     : IsOp("//") ? BinaryOp::kFloorDiv
                                  : BinaryOp::kMod;
      Next();
      UF_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      e->children.push_back(std::move(left));
      e->children.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  StatusOr<ExprPtr> ParsePow() {
    UF_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      ExprPtr e = MakeExpr(EK::kBinary, Cur().offset);
      e->binary_op = BinaryOp::kPow;
      Next();
      UF_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      e->children.push_back(std::move(left));
      e->children.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    DepthGuard guard(&expr_depth_);
    if (expr_depth_ > kMaxExpressionDepth) return Error("expression nested too deeply");
    const size_t offset = Cur().offset;
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const EK kind = IsOp("-") ? EK::kNeg : EK::kPos;
      Next();
      UF_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node = MakeUnary(kind, offset, std::move(operand));
    } else {
      UF_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    UF_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      UF_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    ExprPtr e = MakeExpr(EK::kLiteral, t.offset);
    switch (t.kind) {
      case TokenKind::kName:
        if (t.text == "true" || t.text == "True") {
          e->literal = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::None();
        } else {
          e->kind = EK::kName;
          e->name = t.text;
        }
        Next();
        return e;
      case TokenKind::kString: {
        std::string s;
        while (Cur().kind == TokenKind::kString) {  // adjacent literals concatenate
          s += Cur().text;
          Next();
        }
        e->literal = Value(std::move(s));
        return e;
      }
      case TokenKind::kInt:
        e->literal = Value(t.int_value);
        Next();
        return e;
      case TokenKind::kFloat:
        e->literal = Value(t.float_value);
        Next();
        return e;
      case TokenKind::kOp:
        if (t.text == "(") {
          Next();
          UF_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(true, true, {}));
          UF_RETURN_IF_ERROR(ExpectOp(")"));
          return inner;
        }
        if (t.text == "[") return ParseList();
        if (t.text == "{") return ParseDict();
        break;
      default:
        break;
    }
    return Error("unexpected " + Describe(t));
  }

  StatusOr<ExprPtr> ParseList() {
    ExprPtr e = MakeExpr(EK::kList, Cur().offset);
    Next();
    while (!IsOp("]")) {
      if (!e->children.empty()) {
        UF_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("]")) break;
      }
      UF_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
      e->children.push_back(std::move(item));
    }
    Next();
    return e;
  }

  StatusOr<ExprPtr> ParseDict() {
    ExprPtr e = MakeExpr(EK::kDict, Cur().offset);
    Next();
    while (!IsOp("}")) {
      if (!e->children.empty()) {
        UF_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("}")) break;
      }
      UF_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
      UF_RETURN_IF_ERROR(ExpectOp(":"));
      UF_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      e->children.push_back(std::move(key));
      e->children.push_back(std::move(value));
    }
    Next();
    return e;
  }

  StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        Next();
        const Token& t = Cur();
        if (t.kind == TokenKind::kName) {
          ExprPtr e = MakeUnary(EK::kAttr, t.offset, std::move(node));
          e->name = t.text;
          node = std::move(e);
        } else if (t.kind == TokenKind::kInt) {
          ExprPtr key = MakeExpr(EK::kLiteral, t.offset);
          key->literal = Value(t.int_value);
          node = MakeBinary(EK::kIndex, t.offset, std::move(node), std::move(key));
        } else {
          return Unexpected("an attribute name");
        }
        Next();
      } else if (IsOp("[")) {
        UF_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        UF_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
    const size_t offset = Cur().offset;
    Next();
    ExprPtr start;
    if (!IsOp(":")) {
      UF_ASSIGN_OR_RETURN(start, ParseExpression(true));
      if (SkipOp("]")) return MakeBinary(EK::kIndex, offset, std::move(node), std::move(start));
    }
    UF_RETURN_IF_ERROR(ExpectOp(":"));
    ExprPtr stop, step;
    if (!IsOp("]") && !IsOp(":")) {
      UF_ASSIGN_OR_RETURN(stop, ParseExpression(true));
    }
    if (SkipOp(":") && !IsOp("]")) {
      UF_ASSIGN_OR_RETURN(step, ParseExpression(true));
    }
    UF_RETURN_IF_ERROR(ExpectOp("]"));
    ExprPtr e = MakeUnary(EK::kSlice, offset, std::move(node));
    e->children.push_back(std::move(start));
    e->children.push_back(std::move(stop));
    e->children.push_back(std::move(step));
    return e;
  }

  Status ParseCallArgs(std::vector<Arg>* args) {
    UF_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!args->empty()) {
        UF_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
      }
      if (IsOp("*") || IsOp("**")) return Error("*args / **kwargs in calls are not supported");
      Arg arg;
      if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOp && Peek().text == "=") {
        arg.name = Cur().text;
        Next();
        Next();
      }
      UF_ASSIGN_OR_RETURN(arg.value, ParseExpression(true));
      args->push_back(std::move(arg));
    }
    return ExpectOp(")");
  }

  StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr e = MakeUnary(EK::kCall, Cur().offset, std::move(callee));
    UF_RETURN_IF_ERROR(ParseCallArgs(&e->args));
    return e;
  }

  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (SkipOp("|")) {
        UF_ASSIGN_OR_RETURN(node, ParseFilterTail(std::move(node)));
      } else if (IsName("is")) {
        UF_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        UF_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  StatusOr<std::string> ParseDottedName() {
    UF_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (SkipOp(".")) {
      UF_ASSIGN_OR_RETURN(std::string part, ExpectName());
      name += "." + part;
    }
    return name;
  }

  StatusOr<ExprPtr> ParseFilterTail(ExprPtr subject) {
    ExprPtr e = MakeUnary(EK::kFilter, Cur().offset, std::move(subject));
    UF_ASSIGN_OR_RETURN(e->name, ParseDottedName());
    if (IsOp("(")) UF_RETURN_IF_ERROR(ParseCallArgs(&e->args));
    return e;
  }

  StatusOr<ExprPtr> ParseTest(ExprPtr subject) {
    ExprPtr e = MakeUnary(EK::kTest, Cur().offset, std::move(subject));
    Next();  // is
    e->negated = SkipName("not");
    UF_ASSIGN_OR_RETURN(e->name, ParseDottedName());
    const Token& t = Cur();
    if (IsOp("(")) {
      UF_RETURN_IF_ERROR(ParseCallArgs(&e->args));
    } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString ||
                t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat || IsOp("[") ||
                IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) return Error("cannot chain multiple tests with 'is'");
      Arg arg;
      UF_ASSIGN_OR_RETURN(ExprPtr primary, ParsePrimary());
      UF_ASSIGN_OR_RETURN(arg.value, ParsePostfix(std::move(primary)));
      e->args.push_back(std::move(arg));
    }
    return e;
  }

  const std::string& src_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int expr_depth_ = 0;
  int block_depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

StatusOr<std::shared_ptr<const Program>> ParseTemplate(std::string source) {
  auto program = std::make_shared<Program>();
  program->source = NormalizeSource(source);
  UF_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(program->source));
  Parser parser(program->source, std::move(tokens));
  UF_RETURN_IF_ERROR(parser.ParseProgram(&program->body));
  return std::shared_ptr<const Program>(std::move(program));
}

}  // namespace uf::jinja
