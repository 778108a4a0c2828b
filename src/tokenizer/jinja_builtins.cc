#include "tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <unordered_set>

#include "tokenizer/jinja_strings.h"

namespace uf::jinja {

StatusOr<std::vector<Value>> Iterate(Interpreter& in, const Value& v) {
  std::vector<Value> out;
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return out;
    case Value::Kind::kList:
      UF_RETURN_IF_ERROR(in.Work(v.list().items.size()));
      return v.list().items;
    case Value::Kind::kDict:
      if (v.dict().kind() != DictData::Kind::kDict) break;
      UF_RETURN_IF_ERROR(in.Work(v.dict().size()));
      for (size_t i = 0; i < v.dict().size(); ++i) out.push_back(v.dict().KeyAt(i));
      return out;
    case Value::Kind::kString:
      UF_RETURN_IF_ERROR(in.Work(v.str().size()));
      UF_RETURN_IF_ERROR(in.CheckListSize(CodePointCount(v.str())));
      for (char32_t c : DecodeUtf8(v.str())) {
        std::string ch;
        AppendUtf8(c, &ch);
        out.emplace_back(std::move(ch));
      }
      return out;
    default:
      break;
  }
  return InvalidArgumentError("'" + std::string(TypeName(v)) + "' object is not iterable");
}

namespace {

// ---------------------------------------------------------------------------------------------
// Tests

using Args = const CallArgs&;

const Value& Arg0(Args a) {
  static const Value kUndefined;
  return a.positional.empty() ? kUndefined : a.positional[0];
}

StatusOr<bool> TDefined(Interpreter&, const Value& v, Args) { return !v.is_undefined(); }
StatusOr<bool> TUndefined(Interpreter&, const Value& v, Args) { return v.is_undefined(); }
StatusOr<bool> TNone(Interpreter&, const Value& v, Args) { return v.is_none(); }
StatusOr<bool> TBoolean(Interpreter&, const Value& v, Args) { return v.is_bool(); }
StatusOr<bool> TFalse(Interpreter&, const Value& v, Args) { return v.is_bool() && !v.as_bool(); }
StatusOr<bool> TTrue(Interpreter&, const Value& v, Args) { return v.is_bool() && v.as_bool(); }
StatusOr<bool> TInteger(Interpreter&, const Value& v, Args) { return v.is_int(); }
StatusOr<bool> TFloat(Interpreter&, const Value& v, Args) { return v.is_float(); }
StatusOr<bool> TNumber(Interpreter&, const Value& v, Args) { return v.is_number(); }
StatusOr<bool> TString(Interpreter&, const Value& v, Args) { return v.is_string(); }
StatusOr<bool> TMapping(Interpreter&, const Value& v, Args) {
  return v.is_dict() && v.dict().kind() == DictData::Kind::kDict;
}
// Jinja's Undefined defines __iter__, __len__ and __getitem__, so it passes both of these.
StatusOr<bool> TIterable(Interpreter&, const Value& v, Args) {
  return v.is_string() || v.is_list() || v.is_undefined() ||
         (v.is_dict() && v.dict().kind() != DictData::Kind::kNamespace);
}
StatusOr<bool> TSequence(Interpreter&, const Value& v, Args) {
  return v.is_string() || v.is_list() || v.is_undefined() ||
         (v.is_dict() && v.dict().kind() == DictData::Kind::kDict);
}
StatusOr<bool> TCallable(Interpreter&, const Value& v, Args) { return v.is_callable(); }
StatusOr<bool> TSameAs(Interpreter& in, const Value& v, Args a) {
  const Value& o = Arg0(a);
  if (v.Identity() || o.Identity()) return v.Identity() == o.Identity();
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  return in.Equals(v, o);
}
StatusOr<bool> TEscaped(Interpreter&, const Value&, Args) { return false; }
StatusOr<bool> TOdd(Interpreter&, const Value& v, Args) {
  if (!v.is_int() && !v.is_bool()) return InvalidArgumentError("odd expects an integer");
  return v.ToInt() % 2 != 0;
}
StatusOr<bool> TEven(Interpreter&, const Value& v, Args) {
  if (!v.is_int() && !v.is_bool()) return InvalidArgumentError("even expects an integer");
  return v.ToInt() % 2 == 0;
}
StatusOr<bool> TDivisibleBy(Interpreter&, const Value& v, Args a) {
  const Value& n = Arg0(a);
  if (!v.is_number() || !n.is_number()) return InvalidArgumentError("divisibleby expects numbers");
  if (v.is_float() || n.is_float()) {
    if (n.ToDouble() == 0) return InvalidArgumentError("float modulo by zero");
    return std::fmod(v.ToDouble(), n.ToDouble()) == 0;
  }
  if (n.ToInt() == 0) return InvalidArgumentError("integer modulo by zero");
  if (n.ToInt() == -1) return true;
  return v.ToInt() % n.ToInt() == 0;
}
StatusOr<bool> TEq(Interpreter& in, const Value& v, Args a) { return in.Equals(v, Arg0(a)); }
StatusOr<bool> TNe(Interpreter& in, const Value& v, Args a) {
  UF_ASSIGN_OR_RETURN(bool eq, in.Equals(v, Arg0(a)));
  return !eq;
}
StatusOr<bool> TLt(Interpreter& in, const Value& v, Args a) { return in.LessThan(v, Arg0(a)); }
StatusOr<bool> TGt(Interpreter& in, const Value& v, Args a) { return in.LessThan(Arg0(a), v); }
StatusOr<bool> TLe(Interpreter& in, const Value& v, Args a) {
  UF_ASSIGN_OR_RETURN(bool gt, in.LessThan(Arg0(a), v));
  return !gt;
}
StatusOr<bool> TGe(Interpreter& in, const Value& v, Args a) {
  UF_ASSIGN_OR_RETURN(bool lt, in.LessThan(v, Arg0(a)));
  return !lt;
}
StatusOr<bool> TIn(Interpreter& in, const Value& v, Args a) {
  const Value& seq = Arg0(a);
  if (seq.is_string()) {
    if (!v.is_string()) return false;
    UF_RETURN_IF_ERROR(in.Work(seq.str().size() / 16));
    return FindBytes(seq.str(), v.str()) != std::string_view::npos;
  }
  if (seq.is_dict()) return seq.dict().FindKey(v) != nullptr;
  UF_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, seq));
  for (const Value& item : items) {
    UF_ASSIGN_OR_RETURN(bool eq, in.Equals(item, v));
    if (eq) return true;
  }
  return false;
}
StatusOr<bool> TLower(Interpreter&, const Value& v, Args) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (char32_t c : DecodeUtf8(v.str())) {
    if (IsUpperCodePoint(c)) return false;
    cased = cased || IsLowerCodePoint(c);
  }
  return cased;
}
StatusOr<bool> TUpper(Interpreter&, const Value& v, Args) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (char32_t c : DecodeUtf8(v.str())) {
    if (IsLowerCodePoint(c)) return false;
    cased = cased || IsUpperCodePoint(c);
  }
  return cased;
}
StatusOr<bool> TFilter(Interpreter&, const Value& v, Args) {
  return v.is_string() && FindFilter(v.str()) != nullptr;
}
StatusOr<bool> TTest(Interpreter&, const Value& v, Args) {
  return v.is_string() && FindTest(v.str()) != nullptr;
}

// ---------------------------------------------------------------------------------------------
// Globals

StatusOr<Value> GRange(Interpreter& in, Args a) {
  for (const Value& v : a.positional) {
    if (!v.is_int() && !v.is_bool()) return InvalidArgumentError("range() expects integers");
  }
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) {
    stop = a.positional[0].ToInt();
  } else if (a.positional.size() == 2 || a.positional.size() == 3) {
    start = a.positional[0].ToInt();
    stop = a.positional[1].ToInt();
    if (a.positional.size() == 3) step = a.positional[2].ToInt();
  } else {
    return InvalidArgumentError("range() takes 1 to 3 arguments");
  }
  if (step == 0) return InvalidArgumentError("range() arg 3 must not be zero");
  // Jinja's sandbox refuses ranges past MAX_RANGE = 100000.
  const long double count =
      step > 0
          ? std::ceil((static_cast<long double>(stop) - start) / step)
          : std::ceil((static_cast<long double>(start) - stop) / -static_cast<long double>(step));
  if (count > 100000) return InvalidArgumentError("range too big (more than 100000 items)");
  std::vector<Value> items;
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) items.emplace_back(start + i * step);
  UF_RETURN_IF_ERROR(in.Work(items.size()));
  return Value::List(std::move(items));
}

// namespace(...) / dict(...): optional mapping argument, then keyword arguments.
StatusOr<Value> MakeDict(Interpreter& in, Args a, DictData::Kind kind) {
  Value d = Value::Dict(kind);
  if (a.positional.size() > 1) return InvalidArgumentError("expected at most 1 argument");
  if (!a.positional.empty()) {
    const Value& init = a.positional[0];
    if (!init.is_dict()) return InvalidArgumentError("expected a mapping argument");
    for (size_t i = 0; i < init.dict().size(); ++i) {
      d.dict().SetKey(init.dict().KeyAt(i), init.dict().items()[i].second);
    }
  }
  for (const auto& [k, v] : a.keyword) {
    UF_RETURN_IF_ERROR(in.PrepareStore(d, v));
    d.dict().Set(k, v);
  }
  return d;
}

StatusOr<Value> GNamespace(Interpreter& in, Args a) {
  return MakeDict(in, a, DictData::Kind::kNamespace);
}
StatusOr<Value> GDict(Interpreter& in, Args a) { return MakeDict(in, a, DictData::Kind::kDict); }

StatusOr<Value> GRaiseException(Interpreter& in, Args a) {
  std::string msg;
  if (!a.positional.empty()) {
    UF_ASSIGN_OR_RETURN(msg, in.ToStr(a.positional[0]));
  }
  return InvalidArgumentError("template raised an exception: " + msg);
}

StatusOr<Value> GStrftimeNow(Interpreter& in, Args a) {
  if (a.positional.empty() || !a.positional[0].is_string()) {
    return InvalidArgumentError("strftime_now expects a format string");
  }
  const std::string& fmt = a.positional[0].str();
  if (fmt.empty()) return Value(std::string());
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::string buf(std::min<size_t>(fmt.size() * 64 + 64, size_t{1} << 20), '\0');
  size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  if (n == 0) return InvalidArgumentError("strftime_now: format produced no output");
  buf.resize(n);
  return Value(std::move(buf));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Registries

TestFn FindTest(std::string_view name) {
  static const std::unordered_map<std::string_view, TestFn> kTests = {
      {"defined", TDefined},
      {"undefined", TUndefined},
      {"none", TNone},
      {"boolean", TBoolean},
      {"false", TFalse},
      {"true", TTrue},
      {"integer", TInteger},
      {"float", TFloat},
      {"number", TNumber},
      {"string", TString},
      {"mapping", TMapping},
      {"iterable", TIterable},
      {"sequence", TSequence},
      {"callable", TCallable},
      {"sameas", TSameAs},
      {"escaped", TEscaped},
      {"odd", TOdd},
      {"even", TEven},
      {"divisibleby", TDivisibleBy},
      {"eq", TEq},
      {"equalto", TEq},
      {"==", TEq},
      {"ne", TNe},
      {"!=", TNe},
      {"lt", TLt},
      {"lessthan", TLt},
      {"<", TLt},
      {"le", TLe},
      {"<=", TLe},
      {"gt", TGt},
      {"greaterthan", TGt},
      {">", TGt},
      {"ge", TGe},
      {">=", TGe},
      {"in", TIn},
      {"lower", TLower},
      {"upper", TUpper},
      {"filter", TFilter},
      {"test", TTest},
  };
  auto it = kTests.find(name);
  return it == kTests.end() ? nullptr : it->second;
}

GlobalFn FindGlobal(std::string_view name) {
  static const std::unordered_map<std::string_view, GlobalFn> kGlobals = {
      {"range", GRange},
      {"namespace", GNamespace},
      {"dict", GDict},
      {"raise_exception", GRaiseException},
      {"strftime_now", GStrftimeNow},
  };
  auto it = kGlobals.find(name);
  return it == kGlobals.end() ? nullptr : it->second;
}

// ---------------------------------------------------------------------------------------------
// printf-style formatting

namespace {

template <typename T>
std::string CFormat(const std::string& fmt, T v) {
  const int n = std::snprintf(nullptr, 0, fmt.c_str(), v);
  if (n <= 0) return std::string();
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), fmt.c_str(), v);
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace

StatusOr<std::string> PercentFormat(Interpreter& in, std::string_view fmt,
                                    const std::vector<Value>& args) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    size_t j = i + 1;
    std::string spec = "%";
    while (j < fmt.size() && std::string_view("-+ #0").find(fmt[j]) != std::string_view::npos) {
      spec.push_back(fmt[j++]);
    }
    while (j < fmt.size() && spec.size() < 8 && fmt[j] >= '0' && fmt[j] <= '9') {
      spec.push_back(fmt[j++]);
    }
    if (j < fmt.size() && fmt[j] == '.') {
      spec.push_back(fmt[j++]);
      while (j < fmt.size() && spec.size() < 12 && fmt[j] >= '0' && fmt[j] <= '9') {
        spec.push_back(fmt[j++]);
      }
    }
    if (j >= fmt.size()) return InvalidArgumentError("incomplete format");
    const char conv = fmt[j];
    i = j;
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= args.size()) return InvalidArgumentError("not enough arguments for format string");
    const Value& arg = args[next++];
    switch (conv) {
      case 's':
      case 'r': {
        std::string s = conv == 's' ? Str(arg) : Repr(arg);
        // Flags and width pad; precision truncates (by bytes: close enough for ASCII).
        const bool left = spec.find('-') != std::string::npos;
        size_t dot = spec.find('.');
        size_t width = 0;
        for (size_t k = 1; k < std::min(dot, spec.size()); ++k) {
          if (spec[k] >= '0' && spec[k] <= '9') width = width * 10 + (spec[k] - '0');
        }
        if (dot != std::string::npos) {
          s = s.substr(0, static_cast<size_t>(std::atoi(spec.c_str() + dot + 1)));
        }
        const size_t n = CodePointCount(s);
        if (n < width) {
          s = left ? s + std::string(width - n, ' ') : std::string(width - n, ' ') + s;
        }
        out += s;
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!arg.is_number()) return InvalidArgumentError("%d format: a number is required");
        const long long v =
            arg.is_float()
                ? static_cast<long long>(std::trunc(std::clamp(arg.as_float(), -9e18, 9e18)))
                : static_cast<long long>(arg.ToInt());
        out += CFormat(spec + "ll" + (conv == 'i' ? 'd' : conv), v);
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!arg.is_number()) return InvalidArgumentError("%f format: a number is required");
        out += CFormat(spec + conv, arg.ToDouble());
        break;
      }
      default:
        return InvalidArgumentError(std::string("unsupported format character '") + conv + "'");
    }
    UF_RETURN_IF_ERROR(in.CheckSize(out.size()));
  }
  if (next < args.size()) {
    return InvalidArgumentError("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace uf::jinja
