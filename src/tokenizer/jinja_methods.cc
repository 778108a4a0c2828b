// Python methods of str, list and dict values, and loop.cycle().
#include <algorithm>
#include <unordered_map>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_strings.h"

namespace uf::jinja {
namespace {

using Args = const CallArgs&;

std::string TypeStr(const Value& v) { return std::string(TypeName(v)); }

StatusOr<const Value*> Required(Args a, size_t i, std::string_view name) {
  const Value* v = a.Get(i, name);
  if (!v) return InvalidArgumentError("missing argument '" + std::string(name) + "'");
  return v;
}

StatusOr<const std::string*> RequiredStr(Args a, size_t i, std::string_view name) {
  UF_ASSIGN_OR_RETURN(const Value* v, Required(a, i, name));
  if (!v->is_string()) {
    return InvalidArgumentError("argument '" + std::string(name) + "' must be str, not " +
                                TypeStr(*v));
  }
  return &v->str();
}

// A str argument that may be absent or None.
StatusOr<const std::string*> OptionalStr(Args a, size_t i, std::string_view name) {
  const Value* v = a.Get(i, name);
  if (!v || v->is_none() || v->is_undefined()) return static_cast<const std::string*>(nullptr);
  if (!v->is_string()) {
    return InvalidArgumentError("argument '" + std::string(name) + "' must be str or None, not " +
                                TypeStr(*v));
  }
  return &v->str();
}

StatusOr<int64_t> OptionalInt(Args a, size_t i, std::string_view name, int64_t def) {
  const Value* v = a.Get(i, name);
  if (!v || v->is_none()) return def;
  if (!v->is_int() && !v->is_bool()) {
    return InvalidArgumentError("argument '" + std::string(name) + "' must be an integer");
  }
  return v->ToInt();
}

Value StringList(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (std::string& p : parts) items.emplace_back(std::move(p));
  return Value::List(std::move(items));
}

// ---------------------------------------------------------------------------------------------
// str

// Byte range [begin, end) of s selected by Python's optional start/end code point arguments.
StatusOr<std::pair<size_t, size_t>> StrRange(Args a, size_t first, const std::string& s) {
  UF_ASSIGN_OR_RETURN(int64_t start, OptionalInt(a, first, "start", 0));
  UF_ASSIGN_OR_RETURN(int64_t end, OptionalInt(a, first + 1, "end", INT64_MAX));
  if (start == 0 && end == INT64_MAX) return std::pair<size_t, size_t>(0, s.size());
  std::u32string cps = DecodeUtf8(s);
  const int64_t n = static_cast<int64_t>(cps.size());
  auto clamp = [&](int64_t x) { return x < 0 ? std::max<int64_t>(0, x + n) : std::min(x, n); };
  start = clamp(start);
  end = clamp(end);
  if (end < start) end = start;
  auto bytes = [&](int64_t cp) {
    return EncodeUtf8(std::u32string_view(cps).substr(0, static_cast<size_t>(cp))).size();
  };
  return std::pair<size_t, size_t>(bytes(start), bytes(end));
}

// startswith / endswith: a str or a tuple of str.
StatusOr<Value> Affix(Interpreter& in, const Value& self, Args a, bool prefix) {
  UF_ASSIGN_OR_RETURN(const Value* arg, Required(a, 0, prefix ? "prefix" : "suffix"));
  UF_ASSIGN_OR_RETURN(auto range, StrRange(a, 1, self.str()));
  std::string_view s = std::string_view(self.str()).substr(range.first, range.second - range.first);
  auto test = [&](const Value& v) -> StatusOr<bool> {
    if (!v.is_string()) return InvalidArgumentError("startswith/endswith expects str or tuple");
    const std::string& x = v.str();
    if (x.size() > s.size()) return false;
    return prefix ? s.substr(0, x.size()) == x : s.substr(s.size() - x.size()) == x;
  };
  if (arg->is_list()) {
    for (const Value& v : arg->list().items) {
      UF_ASSIGN_OR_RETURN(bool r, test(v));
      if (r) return Value(true);
    }
    return Value(false);
  }
  UF_ASSIGN_OR_RETURN(bool r, test(*arg));
  return Value(r);
}
StatusOr<Value> SStartsWith(Interpreter& in, const Value& self, Args a) {
  return Affix(in, self, a, true);
}
StatusOr<Value> SEndsWith(Interpreter& in, const Value& self, Args a) {
  return Affix(in, self, a, false);
}

StatusOr<Value> Strip(Interpreter& in, const Value& self, Args a, bool left, bool right) {
  UF_ASSIGN_OR_RETURN(const std::string* chars, OptionalStr(a, 0, "chars"));
  UF_RETURN_IF_ERROR(in.Work(self.str().size() / 16));
  return Value(PyStrip(self.str(), chars, left, right));
}
StatusOr<Value> SStrip(Interpreter& in, const Value& self, Args a) {
  return Strip(in, self, a, true, true);
}
StatusOr<Value> SLStrip(Interpreter& in, const Value& self, Args a) {
  return Strip(in, self, a, true, false);
}
StatusOr<Value> SRStrip(Interpreter& in, const Value& self, Args a) {
  return Strip(in, self, a, false, true);
}

StatusOr<Value> Split(Interpreter& in, const Value& self, Args a, bool from_right) {
  UF_ASSIGN_OR_RETURN(const std::string* sep, OptionalStr(a, 0, "sep"));
  UF_ASSIGN_OR_RETURN(int64_t maxsplit, OptionalInt(a, 1, "maxsplit", -1));
  if (sep && sep->empty()) return InvalidArgumentError("empty separator");
  UF_RETURN_IF_ERROR(in.Work(self.str().size() / 16));
  // Capping maxsplit bounds the parts built before the size check.
  const int64_t cap = static_cast<int64_t>(in.limits().max_list_items);
  if (maxsplit < 0 || maxsplit > cap) maxsplit = cap;
  std::vector<std::string> parts =
      from_right ? PyRSplit(self.str(), sep, maxsplit) : PySplit(self.str(), sep, maxsplit);
  UF_RETURN_IF_ERROR(in.CheckListSize(parts.size()));
  return StringList(std::move(parts));
}
StatusOr<Value> SSplit(Interpreter& in, const Value& self, Args a) {
  return Split(in, self, a, false);
}
StatusOr<Value> SRSplit(Interpreter& in, const Value& self, Args a) {
  return Split(in, self, a, true);
}

StatusOr<Value> SSplitLines(Interpreter& in, const Value& self, Args) {
  UF_RETURN_IF_ERROR(in.Work(self.str().size() / 16));
  UF_RETURN_IF_ERROR(in.CheckListSize(
      static_cast<size_t>(std::count(self.str().begin(), self.str().end(), '\n')) +
      static_cast<size_t>(std::count(self.str().begin(), self.str().end(), '\r'))));
  return StringList(PySplitLines(self.str()));
}

StatusOr<Value> SReplace(Interpreter& in, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(const std::string* old, RequiredStr(a, 0, "old"));
  UF_ASSIGN_OR_RETURN(const std::string* repl, RequiredStr(a, 1, "new"));
  UF_ASSIGN_OR_RETURN(int64_t count, OptionalInt(a, 2, "count", -1));
  UF_RETURN_IF_ERROR(in.Work(self.str().size() / 16));
  auto r = PyReplace(self.str(), *old, *repl, count, in.limits().max_output_bytes);
  if (!r) return in.CheckSize(in.limits().max_output_bytes + 1);
  return Value(std::move(*r));
}

StatusOr<Value> SUpper(Interpreter&, const Value& self, Args) { return Value(PyUpper(self.str())); }
StatusOr<Value> SLower(Interpreter&, const Value& self, Args) { return Value(PyLower(self.str())); }
StatusOr<Value> STitle(Interpreter&, const Value& self, Args) { return Value(PyTitle(self.str())); }
StatusOr<Value> SCapitalize(Interpreter&, const Value& self, Args) {
  return Value(PyCapitalize(self.str()));
}

StatusOr<Value> Find(Interpreter& in, const Value& self, Args a, bool from_right) {
  UF_ASSIGN_OR_RETURN(const std::string* sub, RequiredStr(a, 0, "sub"));
  UF_ASSIGN_OR_RETURN(auto range, StrRange(a, 1, self.str()));
  UF_RETURN_IF_ERROR(in.Work(self.str().size() / 16));
  std::string_view s = std::string_view(self.str()).substr(0, range.second);
  size_t hit = from_right ? RFindBytes(s, *sub) : FindBytes(s, *sub, range.first);
  if (hit == std::string_view::npos || hit < range.first) return Value(int64_t{-1});
  return Value(CodePointIndex(self.str(), hit));
}
StatusOr<Value> SFind(Interpreter& in, const Value& self, Args a) {
  return Find(in, self, a, false);
}
StatusOr<Value> SRFind(Interpreter& in, const Value& self, Args a) {
  return Find(in, self, a, true);
}

StatusOr<Value> SCount(Interpreter& in, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(const std::string* sub, RequiredStr(a, 0, "sub"));
  UF_RETURN_IF_ERROR(in.Work(self.str().size() / 16));
  if (sub->empty()) return Value(static_cast<int64_t>(CodePointCount(self.str()) + 1));
  int64_t n = 0;
  for (size_t p = FindBytes(self.str(), *sub); p != std::string::npos;
       p = FindBytes(self.str(), *sub, p + sub->size())) {
    ++n;
  }
  return Value(n);
}

template <bool (*Pred)(char32_t)>
StatusOr<Value> SIs(Interpreter&, const Value& self, Args) {
  std::u32string cps = DecodeUtf8(self.str());
  return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), Pred));
}
bool AlnumCp(char32_t c) { return IsAlphaCodePoint(c) || IsDigitCodePoint(c); }

StatusOr<Value> SIsLower(Interpreter& in, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(bool r, in.ApplyTest("lower", self, a));
  return Value(r);
}
StatusOr<Value> SIsUpper(Interpreter& in, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(bool r, in.ApplyTest("upper", self, a));
  return Value(r);
}

StatusOr<Value> SJoin(Interpreter& in, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(const Value* iterable, Required(a, 0, "iterable"));
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, *iterable));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return InvalidArgumentError("sequence item " + std::to_string(i) +
                                  ": expected str instance, " + TypeStr(items[i]) + " found");
    }
    if (i) out += self.str();
    UF_RETURN_IF_ERROR(in.CheckSize(out.size() + items[i].str().size()));
    out += items[i].str();
  }
  return Value(std::move(out));
}

StatusOr<Value> SFormat(Interpreter& in, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(std::string s, PythonFormat(in, self.str(), a));
  return Value(std::move(s));
}

StatusOr<Value> SRemovePrefix(Interpreter&, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(const std::string* p, RequiredStr(a, 0, "prefix"));
  const std::string& s = self.str();
  if (s.compare(0, p->size(), *p) == 0) return Value(s.substr(p->size()));
  return self;
}

StatusOr<Value> SRemoveSuffix(Interpreter&, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(const std::string* p, RequiredStr(a, 0, "suffix"));
  const std::string& s = self.str();
  if (!p->empty() && s.size() >= p->size() && s.compare(s.size() - p->size(), p->size(), *p) == 0) {
    return Value(s.substr(0, s.size() - p->size()));
  }
  return self;
}

// ---------------------------------------------------------------------------------------------
// list

Status CheckMutable(const Value& self) {
  if (self.list().is_tuple) return InvalidArgumentError("'tuple' object is immutable");
  return OkStatus();
}

StatusOr<Value> LAppend(Interpreter& in, const Value& self, Args a) {
  UF_RETURN_IF_ERROR(CheckMutable(self));
  UF_ASSIGN_OR_RETURN(const Value* x, Required(a, 0, "object"));
  UF_RETURN_IF_ERROR(in.CheckListSize(self.list().items.size() + 1));
  UF_RETURN_IF_ERROR(in.Charge(sizeof(Value)));
  UF_RETURN_IF_ERROR(in.PrepareStore(self, *x));
  self.list().items.push_back(*x);
  return Value::None();
}

StatusOr<Value> LExtend(Interpreter& in, const Value& self, Args a) {
  UF_RETURN_IF_ERROR(CheckMutable(self));
  UF_ASSIGN_OR_RETURN(const Value* x, Required(a, 0, "iterable"));
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, *x));
  UF_RETURN_IF_ERROR(in.CheckListSize(self.list().items.size() + items.size()));
  UF_RETURN_IF_ERROR(in.Charge(sizeof(Value) * items.size()));
  for (const Value& item : items) UF_RETURN_IF_ERROR(in.PrepareStore(self, item));
  auto& dst = self.list().items;
  dst.insert(dst.end(), items.begin(), items.end());
  return Value::None();
}

StatusOr<Value> LInsert(Interpreter& in, const Value& self, Args a) {
  UF_RETURN_IF_ERROR(CheckMutable(self));
  UF_ASSIGN_OR_RETURN(int64_t i, OptionalInt(a, 0, "index", 0));
  UF_ASSIGN_OR_RETURN(const Value* x, Required(a, 1, "object"));
  auto& items = self.list().items;
  UF_RETURN_IF_ERROR(in.CheckListSize(items.size() + 1));
  UF_RETURN_IF_ERROR(in.Charge(sizeof(Value)));
  UF_RETURN_IF_ERROR(in.Work(items.size()));
  UF_RETURN_IF_ERROR(in.PrepareStore(self, *x));
  const int64_t n = static_cast<int64_t>(items.size());
  if (i < 0) i = std::max<int64_t>(0, i + n);
  i = std::min(i, n);
  items.insert(items.begin() + i, *x);
  return Value::None();
}

StatusOr<Value> LPop(Interpreter& in, const Value& self, Args a) {
  UF_RETURN_IF_ERROR(CheckMutable(self));
  auto& items = self.list().items;
  UF_ASSIGN_OR_RETURN(int64_t i, OptionalInt(a, 0, "index", -1));
  const int64_t n = static_cast<int64_t>(items.size());
  if (n == 0) return InvalidArgumentError("pop from empty list");
  if (i < 0) i += n;
  if (i < 0 || i >= n) return InvalidArgumentError("pop index out of range");
  UF_RETURN_IF_ERROR(in.Work(items.size()));
  Value v = std::move(items[static_cast<size_t>(i)]);
  items.erase(items.begin() + i);
  return v;
}

StatusOr<Value> LIndex(Interpreter& in, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(const Value* x, Required(a, 0, "value"));
  const auto& items = self.list().items;
  UF_RETURN_IF_ERROR(in.Work(items.size()));
  CompareBudget budget = in.StartCompare();
  size_t i = 0;
  while (i < items.size() && !Equal(items[i], *x, &budget)) ++i;
  UF_RETURN_IF_ERROR(in.FinishCompare(budget));
  if (i < items.size()) return Value(static_cast<int64_t>(i));
  return InvalidArgumentError(Repr(*x) + " is not in list");
}

StatusOr<Value> LCount(Interpreter& in, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(const Value* x, Required(a, 0, "value"));
  const auto& items = self.list().items;
  UF_RETURN_IF_ERROR(in.Work(items.size()));
  CompareBudget budget = in.StartCompare();
  const auto n = std::count_if(items.begin(), items.end(),
                               [&](const Value& v) { return Equal(v, *x, &budget); });
  UF_RETURN_IF_ERROR(in.FinishCompare(budget));
  return Value(static_cast<int64_t>(n));
}

StatusOr<Value> LRemove(Interpreter& in, const Value& self, Args a) {
  UF_RETURN_IF_ERROR(CheckMutable(self));
  UF_ASSIGN_OR_RETURN(const Value* x, Required(a, 0, "value"));
  auto& items = self.list().items;
  UF_RETURN_IF_ERROR(in.Work(items.size()));
  CompareBudget budget = in.StartCompare();
  size_t i = 0;
  while (i < items.size() && !Equal(items[i], *x, &budget)) ++i;
  UF_RETURN_IF_ERROR(in.FinishCompare(budget));
  if (i == items.size()) return InvalidArgumentError("list.remove(x): x not in list");
  items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
  return Value::None();
}

StatusOr<Value> LCopy(Interpreter& in, const Value& self, Args) {
  UF_RETURN_IF_ERROR(in.Work(self.list().items.size()));
  return Value::List(self.list().items, self.list().is_tuple);
}

// ---------------------------------------------------------------------------------------------
// dict

std::string Key(Interpreter&, const Value& k) { return DictData::LookupKey(k); }

StatusOr<Value> DGet(Interpreter& in, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(const Value* k, Required(a, 0, "key"));
  std::string key = Key(in, *k);
  const Value* v = self.dict().Find(key);
  if (v) return *v;
  const Value* def = a.Get(1, "default");
  return def ? *def : Value::None();
}

StatusOr<Value> DItems(Interpreter& in, const Value& self, Args) {
  std::vector<Value> out;
  UF_RETURN_IF_ERROR(in.Work(self.dict().size()));
  for (size_t i = 0; i < self.dict().size(); ++i) {
    out.push_back(Value::List({self.dict().KeyAt(i), self.dict().items()[i].second}, true));
  }
  return Value::List(std::move(out));
}

StatusOr<Value> DKeys(Interpreter& in, const Value& self, Args) {
  std::vector<Value> out;
  UF_RETURN_IF_ERROR(in.Work(self.dict().size()));
  for (size_t i = 0; i < self.dict().size(); ++i) out.push_back(self.dict().KeyAt(i));
  return Value::List(std::move(out));
}

StatusOr<Value> DValues(Interpreter& in, const Value& self, Args) {
  std::vector<Value> out;
  UF_RETURN_IF_ERROR(in.Work(self.dict().size()));
  for (const auto& kv : self.dict().items()) out.push_back(kv.second);
  return Value::List(std::move(out));
}

StatusOr<Value> DPop(Interpreter& in, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(const Value* k, Required(a, 0, "key"));
  std::string key = Key(in, *k);
  UF_RETURN_IF_ERROR(in.Work(self.dict().size()));
  if (const Value* v = self.dict().Find(key)) {
    Value out = *v;
    self.dict().Erase(key);
    return out;
  }
  if (const Value* def = a.Get(1, "default")) return *def;
  return InvalidArgumentError("KeyError: " + Repr(*k));
}

StatusOr<Value> DCopy(Interpreter& in, const Value& self, Args) {
  UF_RETURN_IF_ERROR(in.Work(self.dict().size()));
  Value out = Value::Dict();
  for (size_t i = 0; i < self.dict().size(); ++i) {
    out.dict().SetKey(self.dict().KeyAt(i), self.dict().items()[i].second);
  }
  return out;
}

StatusOr<Value> DSetDefault(Interpreter& in, const Value& self, Args a) {
  UF_ASSIGN_OR_RETURN(const Value* k, Required(a, 0, "key"));
  std::string key = Key(in, *k);
  if (const Value* v = self.dict().Find(key)) return *v;
  const Value* def = a.Get(1, "default");
  Value v = def ? *def : Value::None();
  UF_RETURN_IF_ERROR(in.PrepareStore(self, v));
  UF_RETURN_IF_ERROR(in.Charge(64 + key.size()));
  self.dict().SetKey(*k, v);
  return v;
}

StatusOr<Value> DUpdate(Interpreter& in, const Value& self, Args a) {
  std::vector<std::pair<Value, Value>> entries;
  if (!a.positional.empty()) {
    const Value& other = a.positional[0];
    if (!other.is_dict()) return InvalidArgumentError("dict.update expects a mapping");
    for (size_t i = 0; i < other.dict().size(); ++i) {
      entries.emplace_back(other.dict().KeyAt(i), other.dict().items()[i].second);
    }
  }
  for (const auto& [k, v] : a.keyword) entries.emplace_back(Value(k), v);
  UF_RETURN_IF_ERROR(in.Charge(64 * entries.size()));
  for (auto& [k, v] : entries) {
    UF_RETURN_IF_ERROR(in.PrepareStore(self, v));
    self.dict().SetKey(k, v);
  }
  return Value::None();
}

// ---------------------------------------------------------------------------------------------
// loop

StatusOr<Value> LoopCycle(Interpreter&, const Value& self, Args a) {
  if (a.positional.empty()) return InvalidArgumentError("no items for cycling given");
  const Value* index0 = self.dict().Find("index0");
  const int64_t i = index0 && index0->is_int() ? index0->as_int() : 0;
  return a.positional[static_cast<size_t>(i) % a.positional.size()];
}

using MethodTable = std::unordered_map<std::string_view, MethodFn>;

}  // namespace

MethodFn FindMethod(const Value& self, std::string_view name) {
  static const MethodTable kStr = {
      {"startswith", SStartsWith},
      {"endswith", SEndsWith},
      {"strip", SStrip},
      {"lstrip", SLStrip},
      {"rstrip", SRStrip},
      {"split", SSplit},
      {"rsplit", SRSplit},
      {"splitlines", SSplitLines},
      {"replace", SReplace},
      {"upper", SUpper},
      {"lower", SLower},
      {"title", STitle},
      {"capitalize", SCapitalize},
      {"find", SFind},
      {"rfind", SRFind},
      {"count", SCount},
      {"join", SJoin},
      {"format", SFormat},
      {"isalpha", SIs<IsAlphaCodePoint>},
      {"isdigit", SIs<IsDigitCodePoint>},
      {"isalnum", SIs<AlnumCp>},
      {"isspace", SIs<IsPySpace>},
      {"islower", SIsLower},
      {"isupper", SIsUpper},
      {"removeprefix", SRemovePrefix},
      {"removesuffix", SRemoveSuffix},
  };
  static const MethodTable kList = {
      {"append", LAppend}, {"extend", LExtend}, {"insert", LInsert}, {"pop", LPop},
      {"index", LIndex},   {"count", LCount},   {"remove", LRemove}, {"copy", LCopy},
  };
  static const MethodTable kDict = {
      {"get", DGet}, {"items", DItems}, {"keys", DKeys},     {"values", DValues},
      {"pop", DPop}, {"copy", DCopy},   {"update", DUpdate}, {"setdefault", DSetDefault},
  };
  static const MethodTable kLoop = {{"cycle", LoopCycle}};
  const MethodTable* table = nullptr;
  if (self.is_string()) {
    table = &kStr;
  } else if (self.is_list()) {
    table = &kList;
  } else if (self.is_dict()) {
    switch (self.dict().kind()) {
      case DictData::Kind::kDict:
        table = &kDict;
        break;
      case DictData::Kind::kLoop:
        table = &kLoop;
        break;
      case DictData::Kind::kNamespace:
        return nullptr;
    }
  }
  if (!table) return nullptr;
  auto it = table->find(name);
  return it == table->end() ? nullptr : it->second;
}

// ---------------------------------------------------------------------------------------------
// str.format

StatusOr<std::string> PythonFormat(Interpreter& in, std::string_view fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return InvalidArgumentError("single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string_view::npos) {
      return InvalidArgumentError("single '{' encountered in format string");
    }
    std::string_view field = fmt.substr(i + 1, close - i - 1);
    i = close;
    bool repr = false;
    if (size_t bang = field.find('!'); bang != std::string_view::npos) {
      std::string_view conv = field.substr(bang + 1);
      if (conv != "r" && conv != "s") return InvalidArgumentError("unsupported format conversion");
      repr = conv == "r";
      field = field.substr(0, bang);
    }
    if (field.find(':') != std::string_view::npos) {
      return InvalidArgumentError("format specs in str.format() are not supported");
    }
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_index < args.positional.size()) v = &args.positional[auto_index];
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return d >= '0' && d <= '9'; })) {
      size_t idx =
          field.size() < 10 ? static_cast<size_t>(std::stoll(std::string(field))) : SIZE_MAX;
      if (idx < args.positional.size()) v = &args.positional[idx];
    } else {
      v = args.Keyword(field);
      if (!v) return InvalidArgumentError("KeyError in str.format(): '" + std::string(field) + "'");
    }
    if (!v) return InvalidArgumentError("replacement index out of range in str.format()");
    if (repr) {
      if (!AppendRepr(*v, &out, in.limits().max_output_bytes)) {
        return in.CheckSize(in.limits().max_output_bytes + 1);
      }
    } else {
      UF_RETURN_IF_ERROR(in.AppendStrChecked(*v, &out));
    }
  }
  return out;
}

}  // namespace uf::jinja
