#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace uf::jinja {

// ---------------------------------------------------------------------------------------------
// DictData

size_t DictData::IndexOf(std::string_view key) const {
  if (items_.size() <= kIndexThreshold) {
    for (size_t i = 0; i < items_.size(); ++i) {
      if (items_[i].first == key) return i;
    }
    return std::string::npos;
  }
  if (!index_valid_) {
    index_.clear();
    for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
    index_valid_ = true;
  }
  auto it = index_.find(key);
  return it == index_.end() ? std::string::npos : it->second;
}

Value& DictData::ValueAt(size_t i) { return items_[i].second; }

const Value* DictData::Find(std::string_view key) const {
  size_t i = IndexOf(key);
  return i == std::string::npos ? nullptr : &items_[i].second;
}

Value* DictData::Find(std::string_view key) {
  size_t i = IndexOf(key);
  return i == std::string::npos ? nullptr : &items_[i].second;
}

void DictData::Set(std::string key, Value value) {
  if (Value* existing = Find(key)) {
    depth = std::max(depth, value.Depth() + 1);
    *existing = std::move(value);
    return;
  }
  AppendUnique(std::move(key), std::move(value));
}

void DictData::AppendUnique(std::string key, Value value) {
  depth = std::max(depth, value.Depth() + 1);
  if (index_valid_) index_.emplace(key, items_.size());
  if (has_original_keys_) original_keys_.emplace_back(key);
  items_.emplace_back(std::move(key), std::move(value));
}

bool DictData::Erase(std::string_view key) {
  size_t i = IndexOf(key);
  if (i == std::string::npos) return false;
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(i));
  if (has_original_keys_) {
    original_keys_.erase(original_keys_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  index_valid_ = false;
  return true;
}

std::string DictData::LookupKey(const Value& key) {
  if (key.is_string()) return key.str();
  // \xff never starts valid UTF-8, so these cannot meet a string key from JSON or a literal.
  if (key.is_int() || key.is_bool())
    return "\xff"
           "n" +
           std::to_string(key.ToInt());
  if (key.is_float()) {
    const double d = key.as_float();
    if (d == static_cast<double>(static_cast<int64_t>(d)) && std::fabs(d) < 9e18) {
      return "\xff"
             "n" +
             std::to_string(static_cast<int64_t>(d));
    }
    return "\xff"
           "f" +
           FormatFloat(d);
  }
  return "\xff"
         "r" +
         Repr(key);
}

const Value* DictData::FindKey(const Value& key) const { return Find(LookupKey(key)); }

void DictData::SetKey(const Value& key, Value value) {
  std::string lookup = LookupKey(key);
  if (Value* existing = Find(lookup)) {
    depth = std::max(depth, value.Depth() + 1);
    *existing = std::move(value);
    return;
  }
  if (!key.is_string() && !has_original_keys_) {
    for (const auto& kv : items_) original_keys_.emplace_back(kv.first);
    has_original_keys_ = true;
  }
  if (has_original_keys_) original_keys_.push_back(key);
  depth = std::max(depth, value.Depth() + 1);
  if (index_valid_) index_.emplace(lookup, items_.size());
  items_.emplace_back(std::move(lookup), std::move(value));
}

Value DictData::KeyAt(size_t i) const {
  return has_original_keys_ ? original_keys_[i] : Value(items_[i].first);
}

std::string DictData::JsonKeyAt(size_t i) const {
  if (!has_original_keys_ || original_keys_[i].is_string()) return items_[i].first;
  const Value& k = original_keys_[i];
  if (k.is_bool()) return k.as_bool() ? "true" : "false";
  if (k.is_none()) return "null";
  return Str(k);
}

// ---------------------------------------------------------------------------------------------
// Value

Value::Value(std::string s) : v_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::List(std::vector<Value> items, bool is_tuple) {
  auto data = std::make_shared<ListData>();
  int depth = 1;
  for (const Value& item : items) depth = std::max(depth, item.Depth() + 1);
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  data->depth = depth;
  return Value(std::move(data));
}

Value Value::Dict(DictData::Kind kind) { return Value(std::make_shared<DictData>(kind)); }

double Value::ToDouble() const {
  switch (kind()) {
    case Kind::kInt:
      return static_cast<double>(as_int());
    case Kind::kFloat:
      return as_float();
    case Kind::kBool:
      return as_bool() ? 1.0 : 0.0;
    default:
      return 0.0;
  }
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
      return !list().items.empty();
    // Namespaces and loop objects have no __len__ in Jinja, so they are always true.
    case Kind::kDict:
      return dict().kind() != DictData::Kind::kDict || dict().size() > 0;
    case Kind::kCallable:
      return true;
  }
  return false;
}

int Value::Depth() const {
  if (is_list()) return list().depth;
  if (is_dict()) return dict().depth;
  return 0;
}

const void* Value::Identity() const {
  if (is_list()) return list_ptr().get();
  if (is_dict()) return dict_ptr().get();
  if (is_callable()) return std::get<std::shared_ptr<Callable>>(v_).get();
  return nullptr;
}

std::string_view TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.list().is_tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      switch (v.dict().kind()) {
        case DictData::Kind::kDict:
          return "dict";
        case DictData::Kind::kNamespace:
          return "Namespace";
        case DictData::Kind::kLoop:
          return "LoopContext";
      }
      return "dict";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

// ---------------------------------------------------------------------------------------------
// UTF-8

bool IsAscii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.push_back(c);
      ++i;
      continue;
    }
    int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    char32_t cp = len == 4 ? c & 0x07 : len == 3 ? c & 0x0F : c & 0x1F;
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Reject overlong forms, surrogates and code points past U+10FFFF.
    if (ok && ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
               (cp >= 0xD800 && cp <= 0xDFFF))) {
      ok = false;
    }
    if (ok) {
      out.push_back(cp);
      i += len;
    } else {
      out.push_back(0xDC00 + c);
      ++i;
    }
  }
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c >= 0xDC80 && c <= 0xDCFF) {
    out->push_back(static_cast<char>(c - 0xDC00));
  } else if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    c = std::min<char32_t>(c, 0x10FFFF);
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

size_t CodePointCount(std::string_view s) { return IsAscii(s) ? s.size() : DecodeUtf8(s).size(); }

void AppendHex(char32_t c, int digits, char prefix, std::string* out) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\%c%0*x", prefix, digits, static_cast<unsigned>(c));
  *out += buf;
}

// ---------------------------------------------------------------------------------------------
// Printing

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));  // "-1.2345e+05"
  std::string out;
  if (!sci.empty() && sci[0] == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  int exp10 = 0;
  std::string_view exp_text = sci.substr(e + 1);
  if (!exp_text.empty() && exp_text[0] == '+') exp_text.remove_prefix(1);
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exp10);
  const int ndigits = static_cast<int>(digits.size());
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= ndigits) {
      out += digits + std::string(static_cast<size_t>(decpt - ndigits), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." +
             digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out.push_back(digits[0]);
  if (ndigits > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  out += exp_buf;
  return out;
}

namespace {

// Approximation of Python's str.isprintable() for non-ASCII code points: separators, format
// characters, private use and surrogates print as escapes in repr().
bool IsPrintable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x80) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c >= 0x2000 && c <= 0x200F) return false;
  if (c >= 0x2028 && c <= 0x202F) return false;
  if (c >= 0x205F && c <= 0x206F) return false;
  if (c == 0x1680 || c == 0x180E || c == 0x3000 || c == 0xFEFF) return false;
  if (c >= 0xD800 && c <= 0xF8FF) return false;
  if (c >= 0xFFF9 && c <= 0xFFFB) return false;
  if (c >= 0xFFFE && c <= 0xFFFF) return false;
  if (c >= 0xE0000) return false;
  return true;
}

void AppendStringRepr(const std::string& s, std::string* out) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out->push_back(quote);
  for (char32_t c : DecodeUtf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c == '\n') {
      *out += "\\n";
    } else if (c == '\r') {
      *out += "\\r";
    } else if (c == '\t') {
      *out += "\\t";
    } else if (IsPrintable(c)) {
      AppendUtf8(c, out);
    } else if (c <= 0xFF) {
      AppendHex(c, 2, 'x', out);
    } else if (c <= 0xFFFF) {
      AppendHex(c, 4, 'u', out);
    } else {
      AppendHex(c, 8, 'U', out);
    }
  }
  out->push_back(quote);
}

bool AppendReprImpl(const Value& v, std::string* out, int depth, size_t max_bytes);

void AppendCallableRepr(const Value& v, std::string* out) { *out += "<function>"; }

bool AppendContainerRepr(const Value& v, std::string* out, int depth, size_t max_bytes) {
  if (depth > kMaxValueDepth) {
    *out += "...";
    return out->size() <= max_bytes;
  }
  if (v.is_list()) {
    const ListData& l = v.list();
    out->push_back(l.is_tuple ? '(' : '[');
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) *out += ", ";
      if (!AppendReprImpl(l.items[i], out, depth + 1, max_bytes)) return false;
    }
    if (l.is_tuple && l.items.size() == 1) out->push_back(',');
    out->push_back(l.is_tuple ? ')' : ']');
    return out->size() <= max_bytes;
  }
  const DictData& d = v.dict();
  if (d.kind() == DictData::Kind::kLoop) {
    *out += "<LoopContext>";
    return out->size() <= max_bytes;
  }
  if (d.kind() == DictData::Kind::kNamespace) *out += "<Namespace ";
  out->push_back('{');
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) *out += ", ";
    if (d.has_non_string_keys()) {
      AppendReprImpl(d.KeyAt(i), out, depth + 1, max_bytes);
    } else {
      AppendStringRepr(d.items()[i].first, out);
    }
    *out += ": ";
    if (!AppendReprImpl(d.items()[i].second, out, depth + 1, max_bytes)) return false;
  }
  out->push_back('}');
  if (d.kind() == DictData::Kind::kNamespace) out->push_back('>');
  return out->size() <= max_bytes;
}

bool AppendReprImpl(const Value& v, std::string* out, int depth, size_t max_bytes) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      *out += "Undefined";
      break;
    case Value::Kind::kString:
      if (out->size() + v.str().size() > max_bytes) return false;
      AppendStringRepr(v.str(), out);
      break;
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return AppendContainerRepr(v, out, depth, max_bytes);
    case Value::Kind::kCallable:
      AppendCallableRepr(v, out);
      break;
    default:
      AppendStr(v, out, max_bytes);
      break;
  }
  return out->size() <= max_bytes;
}

}  // namespace

bool AppendStr(const Value& v, std::string* out, size_t max_bytes) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      break;
    case Value::Kind::kNone:
      *out += "None";
      break;
    case Value::Kind::kBool:
      *out += v.as_bool() ? "True" : "False";
      break;
    case Value::Kind::kInt:
      *out += std::to_string(v.as_int());
      break;
    case Value::Kind::kFloat:
      *out += FormatFloat(v.as_float());
      break;
    case Value::Kind::kString:
      if (out->size() + v.str().size() > max_bytes) return false;
      *out += v.str();
      break;
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return AppendContainerRepr(v, out, 0, max_bytes);
    case Value::Kind::kCallable:
      AppendCallableRepr(v, out);
      break;
  }
  return out->size() <= max_bytes;
}

std::string Str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  AppendStr(v, &out);
  return out;
}

bool AppendRepr(const Value& v, std::string* out, size_t max_bytes) {
  return AppendReprImpl(v, out, 0, max_bytes);
}

std::string Repr(const Value& v) {
  std::string out;
  AppendRepr(v, &out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Comparison

namespace {

// Takes `cost` units from the budget; false once it is spent.
bool Spend(CompareBudget* budget, size_t cost) {
  if (budget == nullptr) return true;
  budget->left -= static_cast<int64_t>(std::min<size_t>(cost, size_t{1} << 40));
  return !budget->exhausted();
}

bool EqualImpl(const Value& a, const Value& b, int depth, CompareBudget* budget) {
  if (!Spend(budget, 1)) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.ToDouble() == b.ToDouble();
    return a.ToInt() == b.ToInt();
  }
  if (a.kind() != b.kind()) return false;
  if (depth > kMaxValueDepth + 1) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      // Shared bytes are equal without reading them (strings are immutable).
      if (&a.str() == &b.str()) return true;
      if (a.str().size() != b.str().size()) return false;
      if (!Spend(budget, a.str().size() / 16)) return false;
      return a.str() == b.str();
    case Value::Kind::kList: {
      const ListData& la = a.list();
      const ListData& lb = b.list();
      if (&la == &lb) return true;
      if (la.is_tuple != lb.is_tuple || la.items.size() != lb.items.size()) return false;
      for (size_t i = 0; i < la.items.size(); ++i) {
        if (!EqualImpl(la.items[i], lb.items[i], depth + 1, budget)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& da = a.dict();
      const DictData& db = b.dict();
      if (&da == &db) return true;
      if (da.kind() != DictData::Kind::kDict || db.kind() != DictData::Kind::kDict) return false;
      if (da.size() != db.size()) return false;
      for (const auto& [key, value] : da.items()) {
        if (!Spend(budget, key.size() / 16)) return false;
        const Value* other = db.Find(key);
        if (!other || !EqualImpl(value, *other, depth + 1, budget)) return false;
      }
      return true;
    }
    default:
      return a.Identity() == b.Identity();
  }
}

StatusOr<bool> LessImpl(const Value& a, const Value& b, int depth, CompareBudget* budget) {
  if (!Spend(budget, 1)) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.ToDouble() < b.ToDouble();
    return a.ToInt() < b.ToInt();
  }
  if (a.is_string() && b.is_string()) {
    if (&a.str() == &b.str()) return false;
    if (!Spend(budget, std::min(a.str().size(), b.str().size()) / 16)) return false;
    return a.str() < b.str();
  }
  if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple &&
      depth <= kMaxValueDepth + 1) {
    const auto& la = a.list().items;
    const auto& lb = b.list().items;
    for (size_t i = 0; i < la.size() && i < lb.size(); ++i) {
      if (EqualImpl(la[i], lb[i], depth + 1, budget)) continue;
      if (budget != nullptr && budget->exhausted()) return false;
      return LessImpl(la[i], lb[i], depth + 1, budget);
    }
    return la.size() < lb.size();
  }
  return InvalidArgumentError("'<' not supported between instances of '" +
                              std::string(TypeName(a)) + "' and '" + std::string(TypeName(b)) +
                              "'");
}

}  // namespace

bool Equal(const Value& a, const Value& b, CompareBudget* budget) {
  return EqualImpl(a, b, 0, budget);
}
StatusOr<bool> Less(const Value& a, const Value& b, CompareBudget* budget) {
  return LessImpl(a, b, 0, budget);
}

}  // namespace uf::jinja
