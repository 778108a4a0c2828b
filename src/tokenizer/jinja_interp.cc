#include "tokenizer/jinja_interp.h"

#include <cmath>
#include <limits>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_lexer.h"

namespace uf::jinja {

// ---------------------------------------------------------------------------------------------
// Frame / CallArgs

Value* Frame::Find(std::string_view name) {
  for (auto& [key, value] : vars) {
    if (key == name) return &value;
  }
  return nullptr;
}

void Frame::Set(std::string_view name, Value value) {
  if (Value* existing = Find(name)) {
    *existing = std::move(value);
  } else {
    vars.emplace_back(std::string(name), std::move(value));
  }
}

const Value* CallArgs::Keyword(std::string_view name) const {
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return nullptr;
}

const Value* CallArgs::Get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  return Keyword(name);
}

// ---------------------------------------------------------------------------------------------
// Interpreter: bookkeeping

namespace {

std::string TypeStr(const Value& v) { return std::string(TypeName(v)); }

// Increments a depth counter for the lifetime of a scope.
struct DepthScope {
  explicit DepthScope(int* d) : depth(d) { ++*depth; }
  ~DepthScope() { --*depth; }
  int* depth;
};

}  // namespace

Interpreter::Interpreter(const Program& program, const RenderLimits& limits)
    : program_(program), limits_(limits) {}

Status Interpreter::Work(size_t units) {
  steps_ += static_cast<int64_t>(std::min<size_t>(units, size_t{1} << 40));
  if (steps_ > limits_.max_steps) {
    return ResourceExhaustedError("template exceeded " + std::to_string(limits_.max_steps) +
                                  " evaluation steps");
  }
  return OkStatus();
}

Status Interpreter::FinishCompare(const CompareBudget& budget) {
  const int64_t spent = (limits_.max_steps - steps_) - budget.left;
  return Work(static_cast<size_t>(std::max<int64_t>(spent, 0)));
}

StatusOr<bool> Interpreter::Equals(const Value& a, const Value& b) {
  CompareBudget budget = StartCompare();
  const bool eq = Equal(a, b, &budget);
  UF_RETURN_IF_ERROR(FinishCompare(budget));
  return eq;
}

StatusOr<bool> Interpreter::LessThan(const Value& a, const Value& b) {
  CompareBudget budget = StartCompare();
  StatusOr<bool> lt = Less(a, b, &budget);
  UF_RETURN_IF_ERROR(FinishCompare(budget));
  return lt;
}

Status Interpreter::CheckSize(size_t size) const {
  if (size > limits_.max_output_bytes) {
    return ResourceExhaustedError("template built a string of " + std::to_string(size) +
                                  " bytes (limit " + std::to_string(limits_.max_output_bytes) +
                                  ")");
  }
  return OkStatus();
}

Status Interpreter::CheckListSize(size_t size) const {
  if (size > limits_.max_list_items) {
    return ResourceExhaustedError("template built a list of " + std::to_string(size) +
                                  " items (limit " + std::to_string(limits_.max_list_items) + ")");
  }
  return OkStatus();
}

Status Interpreter::AppendStrChecked(const Value& v, std::string* out) {
  if (v.is_list() || v.is_dict()) {
    UF_RETURN_IF_ERROR(Work(v.is_list() ? v.list().items.size() : v.dict().size()));
  }
  if (!AppendStr(v, out, limits_.max_output_bytes)) return CheckSize(limits_.max_output_bytes + 1);
  return OkStatus();
}

StatusOr<std::string> Interpreter::ToStr(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  UF_RETURN_IF_ERROR(AppendStrChecked(v, &out));
  return out;
}

Status Interpreter::ChargeNew(const Value& v) {
  size_t bytes = 0;
  if (v.is_string()) {
    if (v.string_unshared()) bytes = v.str().size();
  } else if (v.is_list()) {
    if (v.list_ptr().use_count() == 1) bytes = v.list().items.size() * sizeof(Value);
  } else if (v.is_dict()) {
    if (v.dict_ptr().use_count() == 1) bytes = v.dict().size() * 64;
  }
  return Charge(bytes);
}

Status Interpreter::Charge(size_t bytes) {
  allocated_ += bytes;
  if (allocated_ > limits_.max_allocated_bytes) {
    return ResourceExhaustedError("template allocated more than " +
                                  std::to_string(limits_.max_allocated_bytes) + " bytes");
  }
  return Work(bytes / 16);
}

Status Interpreter::Located(size_t offset, Status s) {
  if (s.ok() || error_located_) return s;
  error_located_ = true;
  const int line = LineColumn(program_.source, offset).first;
  return Status(s.code(), "line " + std::to_string(line) + ": " + s.message());
}

Status Interpreter::PrepareStore(const Value& container, const Value& value) {
  if (!value.is_list() && !value.is_dict()) return OkStatus();
  if (value.Depth() + 1 > kMaxValueDepth) return InvalidArgumentError("value nested too deeply");
  // A container reachable from `value` must not be `container` itself (reference cycles would
  // leak and make printing recurse forever).
  const void* target = container.Identity();
  std::vector<const Value*> stack = {&value};
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (v->Identity() == target) {
      return InvalidArgumentError("cannot store a list or namespace inside itself");
    }
    if (v->is_list()) {
      UF_RETURN_IF_ERROR(Work(v->list().items.size()));
      for (const Value& item : v->list().items) {
        if (item.is_list() || item.is_dict()) stack.push_back(&item);
      }
    } else if (v->is_dict()) {
      UF_RETURN_IF_ERROR(Work(v->dict().size()));
      for (const auto& kv : v->dict().items()) {
        if (kv.second.is_list() || kv.second.is_dict()) stack.push_back(&kv.second);
      }
    }
  }
  const int depth = value.Depth() + 1;
  if (container.is_list()) container.list().depth = std::max(container.list().depth, depth);
  if (container.is_dict()) container.dict().depth = std::max(container.dict().depth, depth);
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Statements

StatusOr<std::string> Interpreter::Render(std::vector<std::pair<std::string, Value>> globals) {
  root_ = std::make_shared<Frame>(nullptr);
  root_->vars = std::move(globals);
  frame_ = root_;
  steps_ = 0;
  depth_ = 0;
  allocated_ = 0;
  flow_ = Flow::kNormal;
  error_located_ = false;
  std::string out;
  out_ = &out;
  Status st = ExecBody(program_.body);
  out_ = nullptr;
  frame_.reset();
  root_.reset();
  UF_RETURN_IF_ERROR(st);
  return out;
}

Status Interpreter::Emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    return ResourceExhaustedError("rendered template exceeds " +
                                  std::to_string(limits_.max_output_bytes) + " bytes");
  }
  out_->append(text);
  return OkStatus();
}

StatusOr<std::string> Interpreter::Capture(const Body& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  Status st = ExecBody(body);
  out_ = saved;
  UF_RETURN_IF_ERROR(st);
  return buffer;
}

Status Interpreter::ExecBody(const Body& body) {
  for (const StmtPtr& s : body) {
    UF_RETURN_IF_ERROR(Exec(*s));
    if (flow_ != Flow::kNormal) break;
  }
  return OkStatus();
}

Status Interpreter::Assign(const std::vector<std::string>& targets, const Value& value,
                           size_t offset) {
  if (targets.size() == 1) {
    frame_->Set(targets[0], value);
    return OkStatus();
  }
  if (!value.is_list()) {
    return Located(offset, InvalidArgumentError("cannot unpack a non-sequence " + TypeStr(value)));
  }
  const auto& items = value.list().items;
  if (items.size() != targets.size()) {
    return Located(offset,
                   InvalidArgumentError("expected " + std::to_string(targets.size()) +
                                        " values to unpack, got " + std::to_string(items.size())));
  }
  for (size_t i = 0; i < targets.size(); ++i) frame_->Set(targets[i], items[i]);
  return OkStatus();
}

Status Interpreter::Exec(const Stmt& s) {
  DepthScope depth(&depth_);
  if (depth_ > limits_.max_depth) {
    return Located(s.offset, ResourceExhaustedError("template nesting or recursion too deep"));
  }
  UF_RETURN_IF_ERROR(Work(1));
  switch (s.kind) {
    case Stmt::Kind::kText:
      return Emit(s.text);
    case Stmt::Kind::kOutput: {
      UF_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      if (v.is_string()) return Located(s.offset, Emit(v.str()));
      UF_ASSIGN_OR_RETURN(std::string text, Located(s.offset, ToStr(v)));
      return Located(s.offset, Emit(text));
    }
    case Stmt::Kind::kIf:
      for (const auto& [cond, body] : s.branches) {
        UF_ASSIGN_OR_RETURN(Value c, Eval(*cond));
        if (c.Truthy()) return ExecBody(body);
      }
      return ExecBody(s.else_body);
    case Stmt::Kind::kFor:
      return ExecFor(s);
    case Stmt::Kind::kSet:
    case Stmt::Kind::kSetBlock:
      return ExecSet(s);
    case Stmt::Kind::kMacro: {
      auto c = std::make_shared<Callable>();
      c->kind = Callable::Kind::kMacro;
      c->name = s.name;
      c->macro = &s;
      c->closure = frame_;
      frame_->Set(s.name, Value(std::move(c)));
      return OkStatus();
    }
    case Stmt::Kind::kCallBlock: {
      auto c = std::make_shared<Callable>();
      c->kind = Callable::Kind::kMacro;
      c->name = "caller";
      c->macro = &s;
      c->closure = frame_;
      Value caller(std::move(c));
      UF_ASSIGN_OR_RETURN(Value result, EvalCall(*s.expr, &caller));
      UF_ASSIGN_OR_RETURN(std::string text, Located(s.offset, ToStr(result)));
      return Located(s.offset, Emit(text));
    }
    case Stmt::Kind::kFilterBlock: {
      UF_ASSIGN_OR_RETURN(std::string body, Capture(s.body));
      Value input(std::move(body));
      UF_ASSIGN_OR_RETURN(Value result, EvalFilterChain(*s.filter, &input));
      UF_ASSIGN_OR_RETURN(std::string text, Located(s.offset, ToStr(result)));
      return Located(s.offset, Emit(text));
    }
    case Stmt::Kind::kBreak:
      flow_ = Flow::kBreak;
      return OkStatus();
    case Stmt::Kind::kContinue:
      flow_ = Flow::kContinue;
      return OkStatus();
    case Stmt::Kind::kScope: {
      auto scope = std::make_shared<Frame>(frame_);
      for (size_t i = 0; i < s.targets.size(); ++i) {
        UF_ASSIGN_OR_RETURN(Value v, Eval(*s.values[i]));
        scope->Set(s.targets[i], std::move(v));
      }
      std::shared_ptr<Frame> saved = std::move(frame_);
      frame_ = std::move(scope);
      Status st = ExecBody(s.body);
      frame_ = std::move(saved);
      return st;
    }
  }
  return OkStatus();
}

Status Interpreter::ExecSet(const Stmt& s) {
  Value value;
  if (s.kind == Stmt::Kind::kSetBlock) {
    UF_ASSIGN_OR_RETURN(std::string body, Capture(s.body));
    value = Value(std::move(body));
    UF_RETURN_IF_ERROR(Located(s.offset, ChargeNew(value)));
    if (s.filter) {
      UF_ASSIGN_OR_RETURN(value, EvalFilterChain(*s.filter, &value));
    }
  } else {
    UF_ASSIGN_OR_RETURN(value, Eval(*s.expr));
  }
  if (!s.attr_target) return Assign(s.targets, value, s.offset);
  Value ns = Lookup(s.targets[0]);
  if (!ns.is_dict() || ns.dict().kind() != DictData::Kind::kNamespace) {
    return Located(s.offset, InvalidArgumentError("cannot assign attribute '" + s.targets[1] +
                                                  "' on '" + s.targets[0] + "' of type " +
                                                  TypeStr(ns) + " (only on a namespace)"));
  }
  UF_RETURN_IF_ERROR(Located(s.offset, PrepareStore(ns, value)));
  ns.dict().Set(s.targets[1], std::move(value));
  return OkStatus();
}

Status Interpreter::ExecFor(const Stmt& s) {
  UF_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
  std::vector<Value> items;
  switch (iterable.kind()) {
    case Value::Kind::kUndefined:
      break;
    case Value::Kind::kList:
      items = iterable.list().items;
      break;  // snapshot, as Python sees it
    case Value::Kind::kDict:
      if (iterable.dict().kind() != DictData::Kind::kDict) {
        return Located(s.offset,
                       InvalidArgumentError("'" + TypeStr(iterable) + "' object is not iterable"));
      }
      for (size_t i = 0; i < iterable.dict().size(); ++i) {
        items.push_back(iterable.dict().KeyAt(i));
      }
      break;
    case Value::Kind::kString:
      UF_RETURN_IF_ERROR(Located(s.offset, CheckListSize(CodePointCount(iterable.str()))));
      for (char32_t c : DecodeUtf8(iterable.str())) {
        std::string ch;
        AppendUtf8(c, &ch);
        items.emplace_back(std::move(ch));
      }
      break;
    default:
      return Located(s.offset,
                     InvalidArgumentError("'" + TypeStr(iterable) + "' object is not iterable"));
  }
  UF_RETURN_IF_ERROR(Located(s.offset, Work(items.size())));

  auto scope = std::make_shared<Frame>(frame_);
  std::shared_ptr<Frame> saved = frame_;
  frame_ = scope;
  auto run = [&]() -> Status {
    if (s.cond) {
      std::vector<Value> kept;
      for (Value& item : items) {
        scope->vars.clear();
        UF_RETURN_IF_ERROR(Assign(s.targets, item, s.offset));
        UF_ASSIGN_OR_RETURN(Value keep, Eval(*s.cond));
        if (keep.Truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    // The loop object's entries are created once and updated in place by position.
    enum : size_t { kIndex, kIndex0, kRevindex, kRevindex0, kFirst, kLast, kPrev, kNext };
    Value loop = Value::Dict(DictData::Kind::kLoop);
    DictData& l = loop.dict();
    for (const char* key :
         {"index", "index0", "revindex", "revindex0", "first", "last", "previtem", "nextitem"}) {
      l.AppendUnique(key, Value());
    }
    l.AppendUnique("length", Value(n));
    l.AppendUnique("depth", Value(1));
    l.AppendUnique("depth0", Value(0));
    for (int64_t i = 0; i < n; ++i) {
      UF_RETURN_IF_ERROR(Located(s.offset, Work(1)));
      scope->vars.clear();  // each iteration starts from a fresh scope, as in Jinja
      l.ValueAt(kIndex) = Value(i + 1);
      l.ValueAt(kIndex0) = Value(i);
      l.ValueAt(kRevindex) = Value(n - i);
      l.ValueAt(kRevindex0) = Value(n - i - 1);
      l.ValueAt(kFirst) = Value(i == 0);
      l.ValueAt(kLast) = Value(i == n - 1);
      l.ValueAt(kPrev) = i > 0 ? items[static_cast<size_t>(i - 1)] : Value();
      l.ValueAt(kNext) = i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value();
      UF_RETURN_IF_ERROR(Assign(s.targets, items[static_cast<size_t>(i)], s.offset));
      scope->Set("loop", loop);
      UF_RETURN_IF_ERROR(ExecBody(s.body));
      const Flow flow = flow_;
      flow_ = Flow::kNormal;
      if (flow == Flow::kBreak) break;
    }
    return OkStatus();
  };
  Status st = run();
  frame_ = std::move(saved);
  UF_RETURN_IF_ERROR(st);
  if (items.empty()) return ExecBody(s.else_body);
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Expressions

Value Interpreter::Lookup(std::string_view name) const {
  for (Frame* f = frame_.get(); f; f = f->parent.get()) {
    if (Value* v = f->Find(name)) return *v;
  }
  if (FindGlobal(name)) {
    auto c = std::make_shared<Callable>();
    c->kind = Callable::Kind::kBuiltin;
    c->name = std::string(name);
    return Value(std::move(c));
  }
  return Value();
}

StatusOr<Value> Interpreter::Eval(const Expr& e) {
  DepthScope depth(&depth_);
  if (depth_ > limits_.max_depth) {
    return Located(e.offset, ResourceExhaustedError("template nesting or recursion too deep"));
  }
  UF_RETURN_IF_ERROR(Located(e.offset, Work(1)));
  return EvalInner(e);
}

Status Interpreter::EvalArgs(const std::vector<Arg>& args, CallArgs* out) {
  for (const Arg& a : args) {
    UF_ASSIGN_OR_RETURN(Value v, Eval(*a.value));
    if (a.name.empty()) {
      out->positional.push_back(std::move(v));
    } else {
      out->keyword.emplace_back(a.name, std::move(v));
    }
  }
  return OkStatus();
}

StatusOr<Value> Interpreter::EvalFilterChain(const Expr& e, const Value* input) {
  DepthScope depth(&depth_);
  if (depth_ > limits_.max_depth) {
    return Located(e.offset, ResourceExhaustedError("template nesting or recursion too deep"));
  }
  // In a filter block's chain the innermost subject is null and stands for `input`.
  Value subject;
  if (!e.children[0]) {
    subject = *input;
  } else if (input) {
    UF_ASSIGN_OR_RETURN(subject, EvalFilterChain(*e.children[0], input));
  } else {
    UF_ASSIGN_OR_RETURN(subject, Eval(*e.children[0]));
  }
  CallArgs args;
  UF_RETURN_IF_ERROR(EvalArgs(e.args, &args));
  UF_ASSIGN_OR_RETURN(Value v, Located(e.offset, ApplyFilter(e.name, subject, args)));
  UF_RETURN_IF_ERROR(Located(e.offset, ChargeNew(v)));
  return v;
}

Status Interpreter::UndefinedError(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kName:
      return InvalidArgumentError("'" + e.name + "' is undefined");
    case Expr::Kind::kAttr:
      return InvalidArgumentError("attribute '" + e.name + "' is undefined and has no attributes");
    default:
      return InvalidArgumentError("undefined value has no attributes or items");
  }
}

StatusOr<Value> Interpreter::EvalInner(const Expr& e) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::kLiteral:
      return e.literal;
    case K::kName:
      return Lookup(e.name);
    case K::kList:
    case K::kTuple: {
      std::vector<Value> items;
      items.reserve(e.children.size());
      for (const ExprPtr& c : e.children) {
        UF_ASSIGN_OR_RETURN(Value v, Eval(*c));
        items.push_back(std::move(v));
      }
      Value list = Value::List(std::move(items), e.kind == K::kTuple);
      if (list.Depth() > kMaxValueDepth) {
        return Located(e.offset, InvalidArgumentError("value nested too deeply"));
      }
      UF_RETURN_IF_ERROR(Located(e.offset, ChargeNew(list)));
      return list;
    }
    case K::kDict: {
      Value dict = Value::Dict();
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        UF_ASSIGN_OR_RETURN(Value key, Eval(*e.children[i]));
        UF_ASSIGN_OR_RETURN(Value value, Eval(*e.children[i + 1]));
        if (value.Depth() + 1 > kMaxValueDepth) {
          return Located(e.offset, InvalidArgumentError("value nested too deeply"));
        }
        // String keys are copied and hashed.
        if (key.is_string()) UF_RETURN_IF_ERROR(Located(e.offset, Charge(key.str().size())));
        dict.dict().SetKey(key, std::move(value));
      }
      UF_RETURN_IF_ERROR(Located(e.offset, ChargeNew(dict)));
      return dict;
    }
    case K::kAttr: {
      UF_ASSIGN_OR_RETURN(Value object, Eval(*e.children[0]));
      if (object.is_undefined()) return Located(e.offset, UndefinedError(*e.children[0]));
      return Located(e.offset, GetAttr(object, e.name));
    }
    case K::kIndex: {
      UF_ASSIGN_OR_RETURN(Value object, Eval(*e.children[0]));
      if (object.is_undefined()) return Located(e.offset, UndefinedError(*e.children[0]));
      UF_ASSIGN_OR_RETURN(Value key, Eval(*e.children[1]));
      return Located(e.offset, GetItem(object, key));
    }
    case K::kSlice: {
      UF_ASSIGN_OR_RETURN(Value object, Eval(*e.children[0]));
      Value parts[3] = {Value::None(), Value::None(), Value::None()};
      for (int i = 0; i < 3; ++i) {
        if (e.children[i + 1]) {
          UF_ASSIGN_OR_RETURN(parts[i], Eval(*e.children[i + 1]));
        }
      }
      UF_ASSIGN_OR_RETURN(Value v,
                          Located(e.offset, GetSlice(object, parts[0], parts[1], parts[2])));
      UF_RETURN_IF_ERROR(Located(e.offset, ChargeNew(v)));
      return v;
    }
    case K::kCall: {
      UF_ASSIGN_OR_RETURN(Value v, EvalCall(e, nullptr));
      UF_RETURN_IF_ERROR(Located(e.offset, ChargeNew(v)));
      return v;
    }
    case K::kFilter:
      return EvalFilterChain(e, nullptr);
    case K::kTest: {
      UF_ASSIGN_OR_RETURN(Value subject, Eval(*e.children[0]));
      CallArgs args;
      UF_RETURN_IF_ERROR(EvalArgs(e.args, &args));
      UF_ASSIGN_OR_RETURN(bool r, Located(e.offset, ApplyTest(e.name, subject, args)));
      return Value(r != e.negated);
    }
    case K::kNeg:
    case K::kPos: {
      UF_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0]));
      if (v.is_float()) return Value(e.kind == K::kNeg ? -v.as_float() : v.as_float());
      if (v.is_int() || v.is_bool()) {
        const int64_t i = v.ToInt();
        if (e.kind == K::kPos) return Value(i);
        if (i == std::numeric_limits<int64_t>::min()) {
          return Located(e.offset, InvalidArgumentError("integer overflow"));
        }
        return Value(-i);
      }
      return Located(e.offset, InvalidArgumentError("bad operand type for unary " +
                                                    std::string(e.kind == K::kNeg ? "-" : "+") +
                                                    ": '" + TypeStr(v) + "'"));
    }
    case K::kNot: {
      UF_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0]));
      return Value(!v.Truthy());
    }
    case K::kAnd:
    case K::kOr: {
      UF_ASSIGN_OR_RETURN(Value a, Eval(*e.children[0]));
      if (a.Truthy() == (e.kind == K::kOr)) return a;
      return Eval(*e.children[1]);
    }
    case K::kBinary: {
      UF_ASSIGN_OR_RETURN(Value a, Eval(*e.children[0]));
      UF_ASSIGN_OR_RETURN(Value b, Eval(*e.children[1]));
      UF_ASSIGN_OR_RETURN(Value v, Located(e.offset, EvalBinary(e.binary_op, a, b)));
      UF_RETURN_IF_ERROR(Located(e.offset, ChargeNew(v)));
      return v;
    }
    case K::kCompare: {
      UF_ASSIGN_OR_RETURN(Value left, Eval(*e.children[0]));
      for (size_t i = 0; i < e.compare_ops.size(); ++i) {
        UF_ASSIGN_OR_RETURN(Value right, Eval(*e.children[i + 1]));
        UF_ASSIGN_OR_RETURN(bool r, Located(e.offset, EvalCompare(e.compare_ops[i], left, right)));
        if (!r) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case K::kConcat: {
      std::string s;
      for (const ExprPtr& c : e.children) {
        UF_ASSIGN_OR_RETURN(Value v, Eval(*c));
        UF_RETURN_IF_ERROR(Located(e.offset, AppendStrChecked(v, &s)));
      }
      Value v(std::move(s));
      UF_RETURN_IF_ERROR(Located(e.offset, ChargeNew(v)));
      return v;
    }
    case K::kCond: {
      UF_ASSIGN_OR_RETURN(Value c, Eval(*e.children[1]));
      if (c.Truthy()) return Eval(*e.children[0]);
      if (e.children[2]) return Eval(*e.children[2]);
      return Value();
    }
  }
  return Value();
}

// ---------------------------------------------------------------------------------------------
// Calls

StatusOr<Value> Interpreter::EvalCall(const Expr& e, const Value* caller) {
  const Expr& callee = *e.children[0];
  CallArgs args;
  Value target;
  if (callee.kind == Expr::Kind::kAttr) {
    // obj.method(...) without materializing a bound method.
    UF_ASSIGN_OR_RETURN(Value object, Eval(*callee.children[0]));
    MethodFn method = nullptr;
    if (!object.is_dict() || object.dict().kind() != DictData::Kind::kNamespace) {
      method = FindMethod(object, callee.name);
    }
    UF_RETURN_IF_ERROR(EvalArgs(e.args, &args));
    if (caller) args.keyword.emplace_back("caller", *caller);
    if (method) {
      UF_RETURN_IF_ERROR(Located(e.offset, ChargeStringOperands(object, args)));
      return Located(e.offset, method(*this, object, args));
    }
    UF_ASSIGN_OR_RETURN(target, GetAttr(object, callee.name));
    if (target.is_undefined()) {
      return Located(e.offset,
                     InvalidArgumentError("'" + TypeStr(object) + "' object has no attribute '" +
                                          callee.name + "'"));
    }
  } else {
    UF_ASSIGN_OR_RETURN(target, Eval(callee));
    if (target.is_undefined()) {
      const std::string what = callee.kind == Expr::Kind::kName ? "'" + callee.name + "'" : "value";
      return Located(e.offset, InvalidArgumentError(what + " is undefined (called as a function)"));
    }
    UF_RETURN_IF_ERROR(EvalArgs(e.args, &args));
    if (caller) args.keyword.emplace_back("caller", *caller);
  }
  return Located(e.offset, CallValue(target, args));
}

StatusOr<Value> Interpreter::CallValue(const Value& callee, const CallArgs& args) {
  if (!callee.is_callable()) {
    return InvalidArgumentError("'" + TypeStr(callee) + "' object is not callable");
  }
  const Callable& c = callee.callable();
  switch (c.kind) {
    case Callable::Kind::kMacro:
      return CallMacro(c, args);
    case Callable::Kind::kBuiltin:
      return FindGlobal(c.name)(*this, args);
    case Callable::Kind::kMethod: {
      MethodFn method = FindMethod(c.self, c.name);
      if (!method) return InvalidArgumentError("no method '" + c.name + "'");
      UF_RETURN_IF_ERROR(ChargeStringOperands(c.self, args));
      return method(*this, c.self, args);
    }
  }
  return Value();
}

StatusOr<Value> Interpreter::CallMacro(const Callable& c, const CallArgs& args) {
  const Stmt& m = *c.macro;
  std::shared_ptr<Frame> closure = c.closure.lock();
  auto scope = std::make_shared<Frame>(closure ? closure : root_);
  std::shared_ptr<Frame> saved = frame_;
  frame_ = scope;
  auto run = [&]() -> StatusOr<Value> {
    for (size_t i = 0; i < m.params.size(); ++i) {
      const Param& p = m.params[i];
      if (const Value* v = args.Get(i, p.name)) {
        scope->Set(p.name, *v);
      } else if (p.default_value) {
        UF_ASSIGN_OR_RETURN(Value v, Eval(*p.default_value));
        scope->Set(p.name, std::move(v));
      } else {
        scope->Set(p.name, Value());
      }
    }
    std::vector<Value> varargs;
    for (size_t i = m.params.size(); i < args.positional.size(); ++i) {
      varargs.push_back(args.positional[i]);
    }
    Value kwargs = Value::Dict();
    for (const auto& [name, value] : args.keyword) {
      bool is_param = name == "caller";
      for (const Param& p : m.params) is_param = is_param || p.name == name;
      if (!is_param) kwargs.dict().Set(name, value);
    }
    scope->Set("varargs", Value::List(std::move(varargs), true));
    scope->Set("kwargs", std::move(kwargs));
    if (const Value* caller = args.Keyword("caller")) scope->Set("caller", *caller);
    UF_ASSIGN_OR_RETURN(std::string out, Capture(m.body));
    return Value(std::move(out));
  };
  StatusOr<Value> result = run();
  frame_ = std::move(saved);
  flow_ = Flow::kNormal;
  return result;
}

Status Interpreter::ChargeStringOperands(const Value& subject, const CallArgs& args) {
  size_t bytes = subject.is_string() ? subject.str().size() : 0;
  for (const Value& v : args.positional) bytes += v.is_string() ? v.str().size() : 0;
  for (const auto& [name, v] : args.keyword) bytes += v.is_string() ? v.str().size() : 0;
  return Work(bytes / 16);
}

StatusOr<Value> Interpreter::ApplyFilter(std::string_view name, const Value& subject,
                                         const CallArgs& args) {
  FilterFn f = FindFilter(name);
  if (!f) return InvalidArgumentError("no filter named '" + std::string(name) + "'");
  UF_RETURN_IF_ERROR(ChargeStringOperands(subject, args));
  return f(*this, subject, args);
}

StatusOr<bool> Interpreter::ApplyTest(std::string_view name, const Value& subject,
                                      const CallArgs& args) {
  TestFn t = FindTest(name);
  if (!t) return InvalidArgumentError("no test named '" + std::string(name) + "'");
  UF_RETURN_IF_ERROR(ChargeStringOperands(subject, args));
  return t(*this, subject, args);
}

}  // namespace uf::jinja
