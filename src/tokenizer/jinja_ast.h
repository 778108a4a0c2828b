// Syntax tree of a parsed Jinja template (built by jinja_parser, walked by jinja_interp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace uf::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// A call argument: positional when name is empty.
struct Arg {
  std::string name;
  ExprPtr value;
};

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  enum class Kind : uint8_t {
    kLiteral,  // literal
    kName,     // name
    kList,     // children: items
    kTuple,    // children: items
    kDict,     // children: key0, value0, key1, value1, ...
    kAttr,     // children[0].name
    kIndex,    // children[0][children[1]]
    kSlice,    // children[0][children[1]:children[2]:children[3]], absent parts null
    kCall,     // children[0](args)
    kFilter,   // children[0] | name(args); children[0] null in a filter block's chain
    kTest,     // children[0] is [not] name(args)
    kNeg,      // -children[0]
    kPos,      // +children[0]
    kNot,      // not children[0]
    kAnd,      // children[0] and children[1]
    kOr,       // children[0] or children[1]
    kBinary,   // children[0] binary_op children[1]
    kCompare,  // children[0] compare_ops[0] children[1] compare_ops[1] children[2] ...
    kConcat,   // children joined with ~
    kCond,     // children[0] if children[1] else children[2] (null: undefined)
  };

  Expr(Kind k, size_t off) : kind(k), offset(off) {}
  // Iterative: chains like a|f|f|f... or a+a+a... parse into trees as deep as the template is
  // long, which a recursive destructor would walk on the stack.
  ~Expr();
  Expr(const Expr&) = delete;
  Expr& operator=(const Expr&) = delete;

  Kind kind;
  bool negated = false;  // kTest
  BinaryOp binary_op = BinaryOp::kAdd;
  size_t offset;  // in the normalized source, for error messages
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<Arg> args;
  std::vector<CompareOp> compare_ops;
};

inline Expr::~Expr() {
  std::vector<ExprPtr> pending;
  auto detach = [&pending](Expr& e) {
    for (ExprPtr& c : e.children) {
      if (c) pending.push_back(std::move(c));
    }
    for (Arg& a : e.args) {
      if (a.value) pending.push_back(std::move(a.value));
    }
  };
  detach(*this);
  while (!pending.empty()) {
    ExprPtr e = std::move(pending.back());
    pending.pop_back();
    detach(*e);
  }  // each node is destroyed childless
}

// A macro or call-block parameter.
struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  enum class Kind : uint8_t {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches, else_body
    kFor,          // for targets in expr [if cond] body [else else_body]
    kSet,          // set targets = expr; attr_target: set targets[0].targets[1] = expr
    kSetBlock,     // set targets[0] [| filter] body endset
    kMacro,        // macro name(params) body
    kCallBlock,    // call(params) expr body: body becomes `caller` for the called macro
    kFilterBlock,  // filter chain body
    kBreak,
    kContinue,
    kScope,  // generation / with: body, with targets = values (expr children in `values`)
  };

  Stmt(Kind k, size_t off) : kind(k), offset(off) {}

  Kind kind;
  bool attr_target = false;
  size_t offset;
  std::string text;
  std::string name;
  ExprPtr expr;
  ExprPtr cond;
  ExprPtr filter;  // kSetBlock / kFilterBlock: chain of kFilter nodes ending in a null subject
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::vector<ExprPtr> values;  // kScope (with) assignments, parallel to targets
  std::vector<Param> params;
};

struct Program {
  std::string source;  // normalized; offsets point into it
  Body body;
};

}  // namespace uf::jinja
