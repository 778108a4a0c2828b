// Interpreter operators: attribute / item / slice access and the binary and comparison operators,
// with Python's semantics (floor division and modulo toward -inf, checked int64 overflow, string
// and list repetition bounded by RenderLimits).
#include <cmath>
#include <limits>
#include <optional>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_strings.h"

namespace uf::jinja {
namespace {

std::string TypeStr(const Value& v) { return std::string(TypeName(v)); }

}  // namespace

StatusOr<Value> Interpreter::GetAttr(const Value& object, std::string_view name) {
  // Like Jinja's default Undefined: a missing attribute is undefined, reading through it fails.
  if (object.is_undefined()) {
    return InvalidArgumentError("cannot read attribute '" + std::string(name) +
                                "' of an undefined value");
  }
  auto bound = [&]() {
    auto c = std::make_shared<Callable>();
    c->kind = Callable::Kind::kMethod;
    c->name = std::string(name);
    c->self = object;
    return Value(std::move(c));
  };
  if (object.is_dict()) {
    // Jinja's getattr looks for a Python attribute first: `d.items` is the method even when the
    // dict has an "items" key; `d['items']` is the key.
    if (object.dict().kind() != DictData::Kind::kNamespace && FindMethod(object, name)) {
      return bound();
    }
    const Value* v = object.dict().Find(name);
    return v ? *v : Value();
  }
  if ((object.is_string() || object.is_list()) && FindMethod(object, name)) return bound();
  return Value();
}

StatusOr<Value> Interpreter::GetItem(const Value& object, const Value& key) {
  if (object.is_undefined()) {
    return InvalidArgumentError("cannot read item " + Repr(key) + " of an undefined value");
  }
  // Looking up a string hashes or scans all of it.
  if (key.is_string()) UF_RETURN_IF_ERROR(Work(key.str().size() / 16));
  if (object.is_dict()) {
    if (object.dict().kind() == DictData::Kind::kNamespace) return Value();
    if (key.is_string()) {
      const Value* v = object.dict().Find(key.str());
      if (v) return *v;
      return GetAttr(object, key.str());
    }
    const Value* v = object.dict().FindKey(key);
    return v ? *v : Value();
  }
  if (object.is_list() || object.is_string()) {
    if (key.is_string()) return GetAttr(object, key.str());
    if (!key.is_int() && !key.is_bool()) return Value();
    int64_t i = key.ToInt();
    if (object.is_list()) {
      const auto& items = object.list().items;
      const int64_t n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      return items[static_cast<size_t>(i)];
    }
    const std::string& s = object.str();
    UF_RETURN_IF_ERROR(Work(s.size() / 16));  // IsAscii / decoding read all of it
    if (IsAscii(s)) {
      const int64_t n = static_cast<int64_t>(s.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      return Value(std::string(1, s[static_cast<size_t>(i)]));
    }
    std::u32string cps = DecodeUtf8(s);
    const int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();
    std::string ch;
    AppendUtf8(cps[static_cast<size_t>(i)], &ch);
    return Value(std::move(ch));
  }
  return Value();
}

StatusOr<Value> Interpreter::GetSlice(const Value& object, const Value& start_v,
                                      const Value& stop_v, const Value& step_v) {
  auto as_index = [](const Value& v, const char* what) -> StatusOr<std::optional<int64_t>> {
    if (v.is_none() || v.is_undefined()) return std::optional<int64_t>();
    if (v.is_int() || v.is_bool()) return std::optional<int64_t>(v.ToInt());
    return InvalidArgumentError(std::string("slice ") + what + " must be an integer or None");
  };
  UF_ASSIGN_OR_RETURN(auto start, as_index(start_v, "start"));
  UF_ASSIGN_OR_RETURN(auto stop, as_index(stop_v, "stop"));
  UF_ASSIGN_OR_RETURN(auto step_opt, as_index(step_v, "step"));
  const int64_t step = step_opt.value_or(1);
  if (step == 0) return InvalidArgumentError("slice step cannot be zero");
  if (step == std::numeric_limits<int64_t>::min()) return InvalidArgumentError("slice step");
  if (!object.is_list() && !object.is_string()) {
    if (object.is_undefined()) return InvalidArgumentError("cannot slice an undefined value");
    if (object.is_none()) return Value();
    return InvalidArgumentError("'" + TypeStr(object) + "' object is not subscriptable");
  }
  std::u32string cps;
  const bool ascii = object.is_string() && IsAscii(object.str());
  if (object.is_string() && !ascii) cps = DecodeUtf8(object.str());
  const int64_t len = object.is_list() ? static_cast<int64_t>(object.list().items.size())
                      : ascii          ? static_cast<int64_t>(object.str().size())
                                       : static_cast<int64_t>(cps.size());
  UF_RETURN_IF_ERROR(Work(static_cast<size_t>(len)));
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) {
      x = x < -len ? -1 : x + len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  const int64_t b = adjust(start, step < 0 ? len - 1 : 0);
  const int64_t e = adjust(stop, step < 0 ? -1 : len);
  std::vector<size_t> picks;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
    picks.push_back(static_cast<size_t>(i));
    if ((step > 0 && i > std::numeric_limits<int64_t>::max() - step) ||
        (step < 0 && i < std::numeric_limits<int64_t>::min() - step)) {
      break;
    }
  }
  if (object.is_list()) {
    std::vector<Value> out;
    out.reserve(picks.size());
    for (size_t i : picks) out.push_back(object.list().items[i]);
    return Value::List(std::move(out), object.list().is_tuple);
  }
  std::string out;
  for (size_t i : picks) {
    if (ascii) {
      out.push_back(object.str()[i]);
    } else {
      AppendUtf8(cps[i], &out);
    }
  }
  return Value(std::move(out));
}

StatusOr<Value> Interpreter::EvalBinary(BinaryOp op, const Value& a, const Value& b) {
  static constexpr const char* kNames[] = {"+", "-", "*", "/", "//", "%", "**"};
  auto unsupported = [&]() {
    return InvalidArgumentError(std::string("unsupported operand type(s) for ") +
                                kNames[static_cast<int>(op)] + ": '" + TypeStr(a) + "' and '" +
                                TypeStr(b) + "'");
  };
  auto overflow = []() { return InvalidArgumentError("integer overflow"); };
  if (a.is_number() && b.is_number()) {
    const bool ints = !a.is_float() && !b.is_float();
    const int64_t x = ints ? a.ToInt() : 0, y = ints ? b.ToInt() : 0;
    const double fx = a.ToDouble(), fy = b.ToDouble();
    int64_t r = 0;
    switch (op) {
      case BinaryOp::kAdd:
        if (!ints) return Value(fx + fy);
        if (__builtin_add_overflow(x, y, &r)) return overflow();
        return Value(r);
      case BinaryOp::kSub:
        if (!ints) return Value(fx - fy);
        if (__builtin_sub_overflow(x, y, &r)) return overflow();
        return Value(r);
      case BinaryOp::kMul:
        if (!ints) return Value(fx * fy);
        if (__builtin_mul_overflow(x, y, &r)) return overflow();
        return Value(r);
      case BinaryOp::kDiv:
        if (fy == 0) return InvalidArgumentError("division by zero");
        return Value(fx / fy);
      case BinaryOp::kFloorDiv:
      case BinaryOp::kMod:
        if (ints) {
          if (y == 0) return InvalidArgumentError("integer division or modulo by zero");
          if (x == std::numeric_limits<int64_t>::min() && y == -1) {
            return op == BinaryOp::kMod ? Value(int64_t{0}) : StatusOr<Value>(overflow());
          }
          int64_t q = x / y, m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors toward -inf
            --q;
            m += y;
          }
          return Value(op == BinaryOp::kFloorDiv ? q : m);
        }
        if (fy == 0) return InvalidArgumentError("float division or modulo by zero");
        if (op == BinaryOp::kFloorDiv) return Value(std::floor(fx / fy));
        {
          double m = std::fmod(fx, fy);
          if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
          return Value(m);
        }
      case BinaryOp::kPow:
        if (ints && y >= 0) {
          int64_t result = 1, base = x, e = y;
          while (e > 0) {
            if ((e & 1) && __builtin_mul_overflow(result, base, &result)) return overflow();
            e >>= 1;
            if (e > 0 && __builtin_mul_overflow(base, base, &base)) return overflow();
          }
          return Value(result);
        }
        if (fx == 0 && fy < 0) return InvalidArgumentError("zero to a negative power");
        return Value(std::pow(fx, fy));
    }
  }
  if (op == BinaryOp::kAdd) {
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() || b.is_markup()) {
        std::string s = (a.is_markup() ? a.str() : HtmlEscape(a.str())) +
                        (b.is_markup() ? b.str() : HtmlEscape(b.str()));
        UF_RETURN_IF_ERROR(CheckSize(s.size()));
        return Value::Markup(std::move(s));
      }
      UF_RETURN_IF_ERROR(CheckSize(a.str().size() + b.str().size()));
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
      UF_RETURN_IF_ERROR(CheckListSize(a.list().items.size() + b.list().items.size()));
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return Value::List(std::move(items), a.list().is_tuple);
    }
  }
  if (op == BinaryOp::kMul && ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))) {
    const int64_t n = std::max<int64_t>(0, b.ToInt());
    const size_t unit = a.is_string() ? a.str().size() : a.list().items.size();
    const size_t limit = a.is_string() ? limits_.max_output_bytes : limits_.max_list_items;
    if (unit > 0 && static_cast<uint64_t>(n) > limit / unit) {
      return a.is_string() ? CheckSize(limit + 1) : CheckListSize(limit + 1);
    }
    UF_RETURN_IF_ERROR(Work(unit * static_cast<size_t>(n) / 16));
    if (a.is_string()) {
      std::string s;
      s.reserve(unit * static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) s += a.str();
      return Value(std::move(s));
    }
    std::vector<Value> items;
    for (int64_t i = 0; i < n; ++i) {
      items.insert(items.end(), a.list().items.begin(), a.list().items.end());
    }
    return Value::List(std::move(items), a.list().is_tuple);
  }
  if (op == BinaryOp::kMul && (a.is_int() || a.is_bool()) && (b.is_string() || b.is_list())) {
    return EvalBinary(op, b, a);
  }
  if (op == BinaryOp::kMod && a.is_string()) {
    std::vector<Value> args;
    if (b.is_list() && b.list().is_tuple) {
      args = b.list().items;
    } else {
      args.push_back(b);
    }
    UF_ASSIGN_OR_RETURN(std::string s, PercentFormat(*this, a.str(), args));
    return Value(std::move(s));
  }
  return unsupported();
}

StatusOr<bool> Interpreter::EvalCompare(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::kEq:
      return Equals(a, b);
    case CompareOp::kNe: {
      UF_ASSIGN_OR_RETURN(bool eq, Equals(a, b));
      return !eq;
    }
    case CompareOp::kLt:
      return LessThan(a, b);
    case CompareOp::kGt:
      return LessThan(b, a);
    case CompareOp::kLe: {
      UF_ASSIGN_OR_RETURN(bool gt, LessThan(b, a));
      return !gt;
    }
    case CompareOp::kGe: {
      UF_ASSIGN_OR_RETURN(bool lt, LessThan(a, b));
      return !lt;
    }
    case CompareOp::kIn:
    case CompareOp::kNotIn: {
      bool found = false;
      if (b.is_string()) {
        if (!a.is_string()) {
          return InvalidArgumentError("'in <string>' requires string as left operand, not " +
                                      TypeStr(a));
        }
        UF_RETURN_IF_ERROR(Work(b.str().size() / 16));
        found = FindBytes(b.str(), a.str()) != std::string_view::npos;
      } else if (b.is_list()) {
        UF_RETURN_IF_ERROR(Work(b.list().items.size()));
        for (const Value& item : b.list().items) {
          UF_ASSIGN_OR_RETURN(bool eq, Equals(item, a));
          if (eq) {
            found = true;
            break;
          }
        }
      } else if (b.is_dict() && b.dict().kind() == DictData::Kind::kDict) {
        if (a.is_string()) UF_RETURN_IF_ERROR(Work(a.str().size() / 16));
        found = b.dict().FindKey(a) != nullptr;
      } else if (!b.is_undefined()) {
        return InvalidArgumentError("argument of type '" + TypeStr(b) + "' is not iterable");
      }
      return found == (op == CompareOp::kIn);
    }
  }
  return false;
}

}  // namespace uf::jinja
