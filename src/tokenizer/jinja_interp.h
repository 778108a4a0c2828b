// Tree-walking evaluator for parsed Jinja templates (jinja_parser.h) over jinja::Value.
// Scoping follows Jinja: `set` writes the innermost scope; each for-loop iteration and each macro
// call gets a fresh scope; `if` does not open one; namespaces carry state out of loops.
// Every render is bounded (RenderLimits) so hostile templates end with a Status, never a hang,
// an exhausted stack or unbounded memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace uf::jinja {

struct RenderLimits {
  // Evaluated nodes plus work done inside filters (one unit per element or per 16 bytes).
  int64_t max_steps = 20'000'000;
  // Longest rendered prompt and longest single string or list built on the way.
  size_t max_output_bytes = size_t{64} << 20;
  // Longest list built by the template (range() is separately capped at 100000, as in Jinja's
  // sandbox).
  size_t max_list_items = size_t{1} << 20;
  // Bytes of new strings and lists created during one render.
  size_t max_allocated_bytes = size_t{256} << 20;
  // Nested evaluation (macro recursion, nested calls); each level costs a few C++ frames.
  int max_depth = 1000;
};

struct Frame {
  explicit Frame(std::shared_ptr<Frame> p) : parent(std::move(p)) {}
  Value* Find(std::string_view name);
  void Set(std::string_view name, Value value);

  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string, Value>> vars;  // a handful per scope: linear search
};

struct Callable {
  enum class Kind : uint8_t { kMacro, kBuiltin, kMethod };
  Kind kind;
  std::string name;
  Value self;                    // kMethod: the receiver
  const Stmt* macro = nullptr;   // kMacro: macro or call-block statement (params + body)
  std::weak_ptr<Frame> closure;  // kMacro: defining scope; weak because scopes hold macros
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  const Value* Keyword(std::string_view name) const;
  // Python argument binding: positional `index`, else keyword `name`, else nullptr.
  const Value* Get(size_t index, std::string_view name) const;
};

class Interpreter {
 public:
  Interpreter(const Program& program, const RenderLimits& limits);

  // Renders with `globals` as the top-level variables.
  StatusOr<std::string> Render(std::vector<std::pair<std::string, Value>> globals);

  // Services for filters, tests and methods (jinja_builtins.cc).
  StatusOr<Value> ApplyFilter(std::string_view name, const Value& subject, const CallArgs& args);
  StatusOr<bool> ApplyTest(std::string_view name, const Value& subject, const CallArgs& args);
  StatusOr<Value> CallValue(const Value& callee, const CallArgs& args);
  StatusOr<Value> GetAttr(const Value& object, std::string_view name);
  // Counts `units` of work against max_steps.
  Status Work(size_t units);
  // Counts `bytes` of new strings / lists against max_allocated_bytes.
  Status Charge(size_t bytes);
  // Python == and < with their cost counted against max_steps.
  StatusOr<bool> Equals(const Value& a, const Value& b);
  StatusOr<bool> LessThan(const Value& a, const Value& b);
  // For comparisons in bulk (sorting): a budget of the steps left, then charging what was
  // spent of it (failing once it ran out). No other work may be counted in between.
  CompareBudget StartCompare() const { return CompareBudget{limits_.max_steps - steps_}; }
  Status FinishCompare(const CompareBudget& budget);
  // Fails when a string of `size` bytes would pass max_output_bytes.
  Status CheckSize(size_t size) const;
  // Fails when a list of `size` items would pass max_list_items.
  Status CheckListSize(size_t size) const;
  // Python str() bounded by max_output_bytes.
  StatusOr<std::string> ToStr(const Value& v);
  Status AppendStrChecked(const Value& v, std::string* out);
  // Before putting `value` inside `container` (append, namespace attribute): refuses cycles
  // and nesting past kMaxValueDepth, then records the new depth.
  Status PrepareStore(const Value& container, const Value& value);
  const RenderLimits& limits() const { return limits_; }

 private:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };

  Status ExecBody(const Body& body);
  Status Exec(const Stmt& s);
  Status ExecFor(const Stmt& s);
  Status ExecSet(const Stmt& s);
  Status Emit(std::string_view text);
  StatusOr<std::string> Capture(const Body& body);
  Status Assign(const std::vector<std::string>& targets, const Value& value, size_t offset);

  StatusOr<Value> Eval(const Expr& e);
  StatusOr<Value> EvalInner(const Expr& e);
  StatusOr<Value> EvalCall(const Expr& e, const Value* caller);
  Status EvalArgs(const std::vector<Arg>& args, CallArgs* out);
  StatusOr<Value> EvalFilterChain(const Expr& e, const Value* input);
  StatusOr<Value> EvalBinary(BinaryOp op, const Value& a, const Value& b);
  StatusOr<bool> EvalCompare(CompareOp op, const Value& a, const Value& b);
  StatusOr<Value> GetItem(const Value& object, const Value& key);
  StatusOr<Value> GetSlice(const Value& object, const Value& start, const Value& stop,
                           const Value& step);
  StatusOr<Value> CallMacro(const Callable& c, const CallArgs& args);
  Value Lookup(std::string_view name) const;
  // Error for reading through the undefined value `e` evaluated to.
  static Status UndefinedError(const Expr& e);
  Status ChargeNew(const Value& v);
  // Before a filter, test or method: string operands cost their size / 16 in steps, as most
  // builtins read them whole (length, wordcount, startswith, int, ...) while returning little.
  Status ChargeStringOperands(const Value& subject, const CallArgs& args);
  // Prefixes the template line of `offset` to the first error on its way out.
  Status Located(size_t offset, Status s);
  template <typename T>
  StatusOr<T> Located(size_t offset, StatusOr<T> s) {
    if (s.ok()) return s;
    return Located(offset, s.status());
  }

  const Program& program_;
  RenderLimits limits_;
  std::shared_ptr<Frame> root_;
  std::shared_ptr<Frame> frame_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int depth_ = 0;
  size_t allocated_ = 0;
  Flow flow_ = Flow::kNormal;
  bool error_located_ = false;
};

}  // namespace uf::jinja
