// Jinja's built-in filters plus transformers' tojson and the from_json filter some templates use.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_strings.h"

namespace uf::jinja {
namespace {

// ---------------------------------------------------------------------------------------------
// Argument helpers

bool ArgBool(const CallArgs& a, size_t i, std::string_view name, bool def) {
  const Value* v = a.Get(i, name);
  return v ? v->Truthy() : def;
}

StatusOr<int64_t> ArgInt(const CallArgs& a, size_t i, std::string_view name, int64_t def) {
  const Value* v = a.Get(i, name);
  if (!v || v->is_none() || v->is_undefined()) return def;
  if (v->is_int() || v->is_bool()) return v->ToInt();
  return InvalidArgumentError("argument '" + std::string(name) + "' must be an integer, not " +
                              std::string(TypeName(*v)));
}

// nullopt when the argument is absent or None.
StatusOr<std::optional<std::string>> ArgStr(Interpreter& in, const CallArgs& a, size_t i,
                                            std::string_view name) {
  const Value* v = a.Get(i, name);
  if (!v || v->is_none() || v->is_undefined()) return std::optional<std::string>();
  UF_ASSIGN_OR_RETURN(std::string s, in.ToStr(*v));
  return std::optional<std::string>(std::move(s));
}

// Jinja's make_attrgetter: "a.b.0" looks up item-then-attribute per dotted part.
StatusOr<Value> GetPath(Interpreter& in, const Value& item, std::string_view path) {
  Value cur = item;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    std::string_view part = path.substr(pos, dot == std::string_view::npos ? dot : dot - pos);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    if (digits && cur.is_list() && part.size() < 10) {
      size_t idx = static_cast<size_t>(std::stoll(std::string(part)));
      cur = idx < cur.list().items.size() ? cur.list().items[idx] : Value();
    } else if (cur.is_dict() && cur.dict().Find(part)) {
      cur = *cur.dict().Find(part);
    } else {
      UF_ASSIGN_OR_RETURN(cur, in.GetAttr(cur, part));
    }
    if (dot == std::string_view::npos) break;
    pos = dot + 1;
  }
  return cur;
}

// Sort key: the attribute when given, lowercased when the comparison ignores case.
StatusOr<Value> SortKey(Interpreter& in, const Value& item, const std::optional<std::string>& attr,
                        bool case_sensitive) {
  Value key = item;
  if (attr) {
    UF_ASSIGN_OR_RETURN(key, GetPath(in, item, *attr));
  }
  if (!case_sensitive && key.is_string()) {
    // A fresh lowercase copy per item: paid like any new string, before it is built.
    UF_RETURN_IF_ERROR(in.Charge(key.str().size()));
    return Value(PyLower(key.str()));
  }
  return key;
}

// Orders numbers or strings (a strict weak order even with NaN); refuses other mixes up front so
// the sort comparator can never fail midway.
Status CheckSortable(const std::vector<Value>& keys) {
  bool numbers = true, strings = true;
  for (const Value& k : keys) {
    numbers = numbers && k.is_number();
    strings = strings && k.is_string();
  }
  if (keys.size() <= 1 || numbers || strings) return OkStatus();
  return InvalidArgumentError("cannot sort values that are not all numbers or all strings");
}

// Sort keys are all strings or all numbers (CheckSortable). String comparisons are paid from
// `budget`; once it is spent every pair compares equal, which only ever turns a "less" into
// "not less", so the sort still terminates and stays in bounds.
bool KeyLess(const Value& a, const Value& b, CompareBudget* budget) {
  if (a.is_string()) {
    budget->left -= static_cast<int64_t>(1 + std::min(a.str().size(), b.str().size()) / 16);
    return !budget->exhausted() && &a.str() != &b.str() && a.str() < b.str();
  }
  if (!a.is_float() && !b.is_float()) return a.ToInt() < b.ToInt();
  const double x = a.ToDouble(), y = b.ToDouble();
  if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
  return x < y;
}

// Stable sort of `items` by `keys` (parallel vectors).
std::vector<Value> SortByKeys(std::vector<Value> items, const std::vector<Value>& keys,
                              bool reverse, CompareBudget* budget) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return reverse ? KeyLess(keys[y], keys[x], budget) : KeyLess(keys[x], keys[y], budget);
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(std::move(items[i]));
  return out;
}

// A hashable spelling of a value for unique(): equal values (1 == 1.0 == True) spell the same.
std::string CanonicalKey(const Value& v) {
  if (v.is_number()) {
    const double d = v.ToDouble();
    if (!v.is_float() || (std::nearbyint(d) == d && std::fabs(d) < 9e15)) {
      return "n" + std::to_string(v.is_float() ? static_cast<int64_t>(d) : v.ToInt());
    }
    return "f" + FormatFloat(d);
  }
  return std::string(1, static_cast<char>('a' + static_cast<int>(v.kind()))) + Repr(v);
}

// ---------------------------------------------------------------------------------------------
// Filters

StatusOr<Value> FAbs(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    const int64_t i = v.ToInt();
    if (i == std::numeric_limits<int64_t>::min()) return InvalidArgumentError("integer overflow");
    return Value(i < 0 ? -i : i);
  }
  return InvalidArgumentError("bad operand type for abs(): '" + std::string(TypeName(v)) + "'");
}

StatusOr<Value> FAttr(Interpreter& in, const Value& v, const CallArgs& a) {
  UF_ASSIGN_OR_RETURN(auto name, ArgStr(in, a, 0, "name"));
  if (!name) return Value();
  if (v.is_dict() && v.dict().kind() == DictData::Kind::kNamespace) {
    const Value* r = v.dict().Find(*name);
    return r ? *r : Value();
  }
  return in.GetAttr(v, *name);
}

StatusOr<Value> FCapitalize(Interpreter& in, const Value& v, const CallArgs&) {
  UF_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
  return Value(PyCapitalize(s));
}

StatusOr<Value> FDefault(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* def = a.Get(0, "default_value");
  const bool boolean = ArgBool(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.Truthy())) return def ? *def : Value(std::string());
  return v;
}

StatusOr<Value> FDictSort(Interpreter& in, const Value& v, const CallArgs& a) {
  if (!v.is_dict() || v.dict().kind() != DictData::Kind::kDict) {
    return InvalidArgumentError("dictsort expects a dict, got " + std::string(TypeName(v)));
  }
  const bool case_sensitive = ArgBool(a, 0, "case_sensitive", false);
  UF_ASSIGN_OR_RETURN(auto by, ArgStr(in, a, 1, "by"));
  const bool reverse = ArgBool(a, 2, "reverse", false);
  const bool by_value = by && *by == "value";
  if (by && !by_value && *by != "key") {
    return InvalidArgumentError("dictsort: 'by' must be 'key' or 'value'");
  }
  std::vector<Value> items, keys;
  UF_RETURN_IF_ERROR(in.Work(v.dict().size()));
  for (size_t i = 0; i < v.dict().size(); ++i) {
    const Value k = v.dict().KeyAt(i);
    const Value& val = v.dict().items()[i].second;
    items.push_back(Value::List({k, val}, true));
    UF_ASSIGN_OR_RETURN(Value key, SortKey(in, by_value ? val : k, {}, case_sensitive));
    keys.push_back(std::move(key));
  }
  UF_RETURN_IF_ERROR(CheckSortable(keys));
  CompareBudget budget = in.StartCompare();
  std::vector<Value> sorted = SortByKeys(std::move(items), keys, reverse, &budget);
  UF_RETURN_IF_ERROR(in.FinishCompare(budget));
  return Value::List(std::move(sorted));
}

StatusOr<Value> FEscape(Interpreter& in, const Value& v, const CallArgs&) {
  if (v.is_markup()) return v;
  UF_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
  std::string out = HtmlEscape(s);
  UF_RETURN_IF_ERROR(in.CheckSize(out.size()));
  return Value::Markup(std::move(out));
}

StatusOr<Value> FFirst(Interpreter& in, const Value& v, const CallArgs&) {
  if (v.is_list()) return v.list().items.empty() ? Value() : v.list().items.front();
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, v));
  return items.empty() ? Value() : items.front();
}

StatusOr<Value> FLast(Interpreter& in, const Value& v, const CallArgs&) {
  if (v.is_list()) return v.list().items.empty() ? Value() : v.list().items.back();
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, v));
  return items.empty() ? Value() : items.back();
}

std::optional<double> ParseFloat(std::string_view text) {
  std::string s = PyStrip(text, nullptr, true, true);
  std::string clean;
  for (char c : s) {
    if (c != '_') clean.push_back(c);
  }
  if (clean.empty()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  // strtod accepts hex floats and "infinity"/"nan(...)" spellings Python rejects; close enough.
  return d;
}

StatusOr<Value> FFloat(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* def = a.Get(0, "default");
  const Value fallback = def ? *def : Value(0.0);
  if (v.is_number()) return Value(v.ToDouble());
  if (v.is_string()) {
    if (auto d = ParseFloat(v.str())) return Value(*d);
  }
  return fallback;
}

StatusOr<Value> FFormat(Interpreter& in, const Value& v, const CallArgs& a) {
  UF_ASSIGN_OR_RETURN(std::string fmt, in.ToStr(v));
  UF_ASSIGN_OR_RETURN(std::string s, PercentFormat(in, fmt, a.positional));
  return Value(std::move(s));
}

StatusOr<Value> FFromJson(Interpreter& in, const Value& v, const CallArgs&) {
  if (!v.is_string()) return InvalidArgumentError("from_json expects a string");
  UF_RETURN_IF_ERROR(in.Work(v.str().size() / 16));
  auto j = nlohmann::ordered_json::parse(v.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("from_json: invalid JSON");
  return FromJson(j);
}

StatusOr<Value> FIndent(Interpreter& in, const Value& v, const CallArgs& a) {
  UF_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
  std::string indention;
  const Value* width = a.Get(0, "width");
  if (width && width->is_string()) {
    indention = width->str();
  } else {
    UF_ASSIGN_OR_RETURN(int64_t w, ArgInt(a, 0, "width", 4));
    if (w < 0) w = 0;
    UF_RETURN_IF_ERROR(in.CheckSize(static_cast<size_t>(w)));
    indention.assign(static_cast<size_t>(w), ' ');
  }
  const bool first = ArgBool(a, 1, "first", false);
  const bool blank = ArgBool(a, 2, "blank", false);
  UF_RETURN_IF_ERROR(in.CheckListSize(static_cast<size_t>(std::count(s.begin(), s.end(), '\n'))));
  std::vector<std::string> lines = PySplitLines(s + "\n");
  UF_RETURN_IF_ERROR(in.CheckSize(s.size() + lines.size() * (indention.size() + 1)));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out.push_back('\n');
      if (blank || !lines[i].empty()) out += indention;
    }
    out += lines[i];
  }
  if (first) out = indention + out;
  return Value(std::move(out));
}

StatusOr<Value> FInt(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* def = a.Get(0, "default");
  const Value fallback = def ? *def : Value(int64_t{0});
  auto from_double = [&](double d) -> Value {
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value(static_cast<int64_t>(d));
  };
  if (v.is_int() || v.is_bool()) return Value(v.ToInt());
  if (v.is_float()) return from_double(v.as_float());
  if (!v.is_string()) return fallback;
  const int base = 10;
  std::string s = PyStrip(v.str(), nullptr, true, true);
  std::string clean;
  for (char c : s) {
    if (c != '_') clean.push_back(c);
  }
  if (!clean.empty()) {
    errno = 0;
    char* end = nullptr;
    long long i = std::strtoll(clean.c_str(), &end, base);
    if (errno == 0 && end == clean.c_str() + clean.size()) return Value(static_cast<int64_t>(i));
  }
  if (auto d = ParseFloat(v.str())) return from_double(*d);
  return fallback;
}

StatusOr<Value> FItems(Interpreter& in, const Value& v, const CallArgs&) {
  std::vector<Value> out;
  if (v.is_undefined()) return Value::List({});
  if (!v.is_dict() || v.dict().kind() != DictData::Kind::kDict) {
    return InvalidArgumentError("items expects a dict, got " + std::string(TypeName(v)));
  }
  UF_RETURN_IF_ERROR(in.Work(v.dict().size()));
  for (size_t i = 0; i < v.dict().size(); ++i) {
    out.push_back(Value::List({v.dict().KeyAt(i), v.dict().items()[i].second}, true));
  }
  return Value::List(std::move(out));
}

StatusOr<Value> FJoin(Interpreter& in, const Value& v, const CallArgs& a) {
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, v));
  UF_ASSIGN_OR_RETURN(auto sep, ArgStr(in, a, 0, "d"));
  UF_ASSIGN_OR_RETURN(auto attr, ArgStr(in, a, 1, "attribute"));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i && sep) {
      UF_RETURN_IF_ERROR(in.CheckSize(out.size() + sep->size()));
      out += *sep;
    }
    if (attr) {
      UF_ASSIGN_OR_RETURN(Value item, GetPath(in, items[i], *attr));
      UF_RETURN_IF_ERROR(in.AppendStrChecked(item, &out));
    } else {
      UF_RETURN_IF_ERROR(in.AppendStrChecked(items[i], &out));
    }
  }
  return Value(std::move(out));
}

StatusOr<Value> FLength(Interpreter& in, const Value& v, const CallArgs&) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Value(int64_t{0});
    case Value::Kind::kString:
      UF_RETURN_IF_ERROR(in.Work(v.str().size() / 16));
      return Value(static_cast<int64_t>(CodePointCount(v.str())));
    case Value::Kind::kList:
      return Value(static_cast<int64_t>(v.list().items.size()));
    case Value::Kind::kDict:
      if (v.dict().kind() == DictData::Kind::kDict) {
        return Value(static_cast<int64_t>(v.dict().size()));
      }
      if (v.dict().kind() == DictData::Kind::kLoop) return *v.dict().Find("length");
      break;
    default:
      break;
  }
  return InvalidArgumentError("object of type '" + std::string(TypeName(v)) + "' has no len()");
}

StatusOr<Value> FList(Interpreter& in, const Value& v, const CallArgs&) {
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, v));
  return Value::List(std::move(items));
}

StatusOr<Value> FLower(Interpreter& in, const Value& v, const CallArgs&) {
  UF_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
  return Value(PyLower(s));
}

StatusOr<Value> FUpper(Interpreter& in, const Value& v, const CallArgs&) {
  UF_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
  return Value(PyUpper(s));
}

StatusOr<Value> FMap(Interpreter& in, const Value& v, const CallArgs& a) {
  // Jinja's map/select family yields nothing for a falsy value (None included).
  if (!v.Truthy()) return Value::List({});
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, v));
  std::vector<Value> out;
  out.reserve(items.size());
  if (const Value* attr = a.Keyword("attribute")) {
    UF_ASSIGN_OR_RETURN(std::string path, in.ToStr(*attr));
    const Value* def = a.Keyword("default");
    for (const Value& item : items) {
      UF_ASSIGN_OR_RETURN(Value r, GetPath(in, item, path));
      out.push_back(r.is_undefined() && def ? *def : std::move(r));
    }
    return Value::List(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) {
    return InvalidArgumentError("map needs a filter name or attribute=");
  }
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : items) {
    UF_ASSIGN_OR_RETURN(Value r, in.ApplyFilter(a.positional[0].str(), item, rest));
    out.push_back(std::move(r));
  }
  return Value::List(std::move(out));
}

StatusOr<Value> MinMax(Interpreter& in, const Value& v, const CallArgs& a, bool want_max) {
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, v));
  const bool case_sensitive = ArgBool(a, 0, "case_sensitive", false);
  UF_ASSIGN_OR_RETURN(auto attr, ArgStr(in, a, 1, "attribute"));
  if (items.empty()) return Value();
  std::vector<Value> keys;
  for (const Value& item : items) {
    UF_ASSIGN_OR_RETURN(Value k, SortKey(in, item, attr, case_sensitive));
    keys.push_back(std::move(k));
  }
  UF_RETURN_IF_ERROR(CheckSortable(keys));
  size_t best = 0;
  CompareBudget budget = in.StartCompare();
  for (size_t i = 1; i < items.size(); ++i) {
    if (want_max ? KeyLess(keys[best], keys[i], &budget) : KeyLess(keys[i], keys[best], &budget)) {
      best = i;
    }
  }
  UF_RETURN_IF_ERROR(in.FinishCompare(budget));
  return items[best];
}

StatusOr<Value> FMax(Interpreter& in, const Value& v, const CallArgs& a) {
  return MinMax(in, v, a, true);
}
StatusOr<Value> FMin(Interpreter& in, const Value& v, const CallArgs& a) {
  return MinMax(in, v, a, false);
}

// select / reject / selectattr / rejectattr.
StatusOr<Value> Select(Interpreter& in, const Value& v, const CallArgs& a, bool by_attr,
                       bool keep_when) {
  if (!v.Truthy()) return Value::List({});
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, v));
  size_t next = 0;
  std::optional<std::string> attr;
  if (by_attr) {
    if (a.positional.empty()) return InvalidArgumentError("missing attribute name");
    UF_ASSIGN_OR_RETURN(attr, in.ToStr(a.positional[next++]));
  }
  std::optional<std::string> test;
  if (next < a.positional.size()) {
    UF_ASSIGN_OR_RETURN(test, in.ToStr(a.positional[next++]));
  }
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next),
                         a.positional.end());
  rest.keyword = a.keyword;
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (attr) {
      UF_ASSIGN_OR_RETURN(subject, GetPath(in, item, *attr));
    }
    bool r = subject.Truthy();
    if (test) {
      UF_ASSIGN_OR_RETURN(r, in.ApplyTest(*test, subject, rest));
    }
    if (r == keep_when) out.push_back(item);
  }
  return Value::List(std::move(out));
}

StatusOr<Value> FSelect(Interpreter& in, const Value& v, const CallArgs& a) {
  return Select(in, v, a, false, true);
}
StatusOr<Value> FReject(Interpreter& in, const Value& v, const CallArgs& a) {
  return Select(in, v, a, false, false);
}
StatusOr<Value> FSelectAttr(Interpreter& in, const Value& v, const CallArgs& a) {
  return Select(in, v, a, true, true);
}
StatusOr<Value> FRejectAttr(Interpreter& in, const Value& v, const CallArgs& a) {
  return Select(in, v, a, true, false);
}

StatusOr<Value> FReplace(Interpreter& in, const Value& v, const CallArgs& a) {
  UF_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
  UF_ASSIGN_OR_RETURN(auto old, ArgStr(in, a, 0, "old"));
  UF_ASSIGN_OR_RETURN(auto repl, ArgStr(in, a, 1, "new"));
  UF_ASSIGN_OR_RETURN(int64_t count, ArgInt(a, 2, "count", -1));
  if (!old || !repl) return InvalidArgumentError("replace needs old and new strings");
  UF_RETURN_IF_ERROR(in.Work(s.size() / 16));
  auto r = PyReplace(s, *old, *repl, count, in.limits().max_output_bytes);
  if (!r) return in.CheckSize(in.limits().max_output_bytes + 1);
  return Value(std::move(*r));
}

StatusOr<Value> FReverse(Interpreter& in, const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::u32string cps = DecodeUtf8(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value(EncodeUtf8(cps));
  }
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, v));
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

StatusOr<Value> FRound(Interpreter& in, const Value& v, const CallArgs& a) {
  UF_ASSIGN_OR_RETURN(int64_t precision, ArgInt(a, 0, "precision", 0));
  UF_ASSIGN_OR_RETURN(auto method, ArgStr(in, a, 1, "method"));
  if (!v.is_number()) {
    return InvalidArgumentError("round expects a number, got " + std::string(TypeName(v)));
  }
  const std::string m = method.value_or("common");
  if (m != "common" && m != "ceil" && m != "floor") {
    return InvalidArgumentError("round: method must be 'common', 'ceil' or 'floor'");
  }
  if (m == "common" && !v.is_float()) return Value(v.ToInt());
  precision = std::clamp<int64_t>(precision, -300, 300);
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.ToDouble() * scale;
  const double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::nearbyint(x);
  return Value(r / scale);
}

StatusOr<Value> FSafe(Interpreter& in, const Value& v, const CallArgs&) {
  UF_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
  return Value::Markup(std::move(s));
}

StatusOr<Value> FSort(Interpreter& in, const Value& v, const CallArgs& a) {
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, v));
  const bool reverse = ArgBool(a, 0, "reverse", false);
  const bool case_sensitive = ArgBool(a, 1, "case_sensitive", false);
  UF_ASSIGN_OR_RETURN(auto attr, ArgStr(in, a, 2, "attribute"));
  std::vector<Value> keys;
  for (const Value& item : items) {
    UF_ASSIGN_OR_RETURN(Value k, SortKey(in, item, attr, case_sensitive));
    keys.push_back(std::move(k));
  }
  UF_RETURN_IF_ERROR(CheckSortable(keys));
  UF_RETURN_IF_ERROR(in.Work(items.size() * 20));
  CompareBudget budget = in.StartCompare();
  std::vector<Value> sorted = SortByKeys(std::move(items), keys, reverse, &budget);
  UF_RETURN_IF_ERROR(in.FinishCompare(budget));
  return Value::List(std::move(sorted));
}

StatusOr<Value> FString(Interpreter& in, const Value& v, const CallArgs&) {
  if (v.is_string()) return v;
  UF_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
  return Value(std::move(s));
}

StatusOr<Value> FSum(Interpreter& in, const Value& v, const CallArgs& a) {
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, v));
  UF_ASSIGN_OR_RETURN(auto attr, ArgStr(in, a, 0, "attribute"));
  const Value* start = a.Get(1, "start");
  Value total = start ? *start : Value(int64_t{0});
  for (const Value& item : items) {
    Value x = item;
    if (attr) {
      UF_ASSIGN_OR_RETURN(x, GetPath(in, item, *attr));
    }
    if (!x.is_number() || !total.is_number()) {
      return InvalidArgumentError("sum supports numbers only");
    }
    if (x.is_float() || total.is_float()) {
      total = Value(total.ToDouble() + x.ToDouble());
    } else {
      int64_t r;
      if (__builtin_add_overflow(total.ToInt(), x.ToInt(), &r)) {
        return InvalidArgumentError("integer overflow");
      }
      total = Value(r);
    }
  }
  return total;
}

StatusOr<Value> FTitle(Interpreter& in, const Value& v, const CallArgs&) {
  UF_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
  // Jinja capitalizes each piece after runs of "-", whitespace, "(", "{", "[" or "<".
  std::u32string cps = DecodeUtf8(s);
  std::string out;
  bool word_start = true;
  for (char32_t c : cps) {
    const bool sep = c == '-' || IsPySpace(c) || c == '(' || c == '{' || c == '[' || c == '<';
    AppendUtf8(sep ? c : word_start ? UpperCodePoint(c) : LowerCodePoint(c), &out);
    word_start = sep;
  }
  return Value(std::move(out));
}

StatusOr<Value> FToJson(Interpreter& in, const Value& v, const CallArgs& a) {
  JsonOptions o;
  o.max_bytes = in.limits().max_output_bytes;
  o.ensure_ascii = ArgBool(a, 0, "ensure_ascii", false);
  const Value* indent = a.Get(1, "indent");
  if (indent && !indent->is_none() && !indent->is_undefined()) {
    if (!indent->is_int()) return InvalidArgumentError("tojson: indent must be an integer");
    o.indent = static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64));
    o.item_separator = ",";
  }
  const Value* seps = a.Get(2, "separators");
  if (seps && seps->is_list()) {
    const auto& s = seps->list().items;
    if (s.size() != 2 || !s[0].is_string() || !s[1].is_string()) {
      return InvalidArgumentError("tojson: separators must be two strings");
    }
    o.item_separator = s[0].str();
    o.key_separator = s[1].str();
  }
  o.sort_keys = ArgBool(a, 3, "sort_keys", false);
  std::string out;
  UF_RETURN_IF_ERROR(AppendJson(v, o, &out));
  UF_RETURN_IF_ERROR(in.Work(out.size() / 16));
  return Value(std::move(out));
}

StatusOr<Value> FTrim(Interpreter& in, const Value& v, const CallArgs& a) {
  UF_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
  UF_ASSIGN_OR_RETURN(auto chars, ArgStr(in, a, 0, "chars"));
  return Value(PyStrip(s, chars ? &*chars : nullptr, true, true));
}

StatusOr<Value> FUnique(Interpreter& in, const Value& v, const CallArgs& a) {
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, v));
  const bool case_sensitive = ArgBool(a, 0, "case_sensitive", false);
  UF_ASSIGN_OR_RETURN(auto attr, ArgStr(in, a, 1, "attribute"));
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (const Value& item : items) {
    UF_ASSIGN_OR_RETURN(Value k, SortKey(in, item, attr, case_sensitive));
    std::string key = CanonicalKey(k);
    UF_RETURN_IF_ERROR(in.Work(key.size() / 16));
    if (seen.insert(std::move(key)).second) out.push_back(item);
  }
  return Value::List(std::move(out));
}

StatusOr<Value> FWordCount(Interpreter& in, const Value& v, const CallArgs&) {
  UF_ASSIGN_OR_RETURN(std::string s, in.ToStr(v));
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : DecodeUtf8(s)) {
    const bool w = IsAlphaCodePoint(c) || IsDigitCodePoint(c) || c == '_' ||
                   (c >= 0x80 && !IsPySpace(c) && !(c >= 0x2000 && c <= 0x206F));
    if (w && !in_word) ++words;
    in_word = w;
  }
  return Value(words);
}

StatusOr<Value> FPprint(Interpreter&, const Value& v, const CallArgs&) { return Value(Repr(v)); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Registries

FilterFn FindFilter(std::string_view name) {
  static const std::unordered_map<std::string_view, FilterFn> kFilters = {
      {"abs", FAbs},
      {"attr", FAttr},
      {"capitalize", FCapitalize},
      {"count", FLength},
      {"d", FDefault},
      {"default", FDefault},
      {"dictsort", FDictSort},
      {"e", FEscape},
      {"escape", FEscape},
      {"first", FFirst},
      {"float", FFloat},
      {"format", FFormat},
      {"from_json", FFromJson},
      {"indent", FIndent},
      {"int", FInt},
      {"items", FItems},
      {"join", FJoin},
      {"last", FLast},
      {"length", FLength},
      {"list", FList},
      {"lower", FLower},
      {"map", FMap},
      {"max", FMax},
      {"min", FMin},
      {"pprint", FPprint},
      {"reject", FReject},
      {"rejectattr", FRejectAttr},
      {"replace", FReplace},
      {"reverse", FReverse},
      {"round", FRound},
      {"safe", FSafe},
      {"select", FSelect},
      {"selectattr", FSelectAttr},
      {"sort", FSort},
      {"string", FString},
      {"sum", FSum},
      {"title", FTitle},
      {"tojson", FToJson},
      {"trim", FTrim},
      {"unique", FUnique},
      {"upper", FUpper},
      {"wordcount", FWordCount},
  };
  auto it = kFilters.find(name);
  return it == kFilters.end() ? nullptr : it->second;
}

}  // namespace uf::jinja
