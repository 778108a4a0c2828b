// Values of the chat-template interpreter: Python-like dynamic values as Jinja2 sees them, with
// Jinja's `undefined`, reference semantics for lists / dicts / namespaces (a namespace attribute
// set or a list.append() is visible through every alias, as in Python), and Python's str() /
// repr() / json.dumps() spellings so rendered prompts match what transformers produces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "base/status.h"

namespace uf::jinja {

class Value;
struct ListData;
class DictData;
struct Callable;  // jinja_interp.h
enum class DictKind : uint8_t { kDict, kNamespace, kLoop };

// Nesting limit for containers: input JSON deeper than this is rejected and templates cannot
// build deeper values, which keeps every recursive walk (printing, comparison, destruction)
// within a small stack.
inline constexpr int kMaxValueDepth = 256;

class Value {
 public:
  // Order matches the variant alternatives below.
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kCallable
  };

  Value() = default;  // undefined
  static Value None() {
    Value v;
    v.v_ = nullptr;
    return v;
  }
  explicit Value(bool b) : v_(b) {}
  explicit Value(int64_t i) : v_(i) {}
  explicit Value(int i) : v_(static_cast<int64_t>(i)) {}
  explicit Value(double d) : v_(d) {}
  explicit Value(std::string s);
  explicit Value(std::string_view s) : Value(std::string(s)) {}
  explicit Value(const char* s) : Value(std::string(s)) {}
  explicit Value(std::shared_ptr<ListData> l) : v_(std::move(l)) {}
  explicit Value(std::shared_ptr<DictData> d) : v_(std::move(d)) {}
  explicit Value(std::shared_ptr<Callable> c) : v_(std::move(c)) {}

  static Value List(std::vector<Value> items, bool is_tuple = false);
  static Value Dict(DictKind kind = DictKind::kDict);

  // A string marked safe (Python's markupsafe.Markup, from the safe / escape filters): `+` with a
  // plain string HTML-escapes the plain side, as it does under transformers.
  static Value Markup(std::string s) {
    Value v(std::move(s));
    v.markup_ = true;
    return v;
  }
  bool is_markup() const { return markup_; }

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // bool counts as a number, as in Python (True + 1 == 2).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  // int / float / bool as double.
  double ToDouble() const;
  // int / bool as int64.
  int64_t ToInt() const { return is_bool() ? as_bool() : as_int(); }
  const std::string& str() const { return *std::get<StringPtr>(v_); }
  // Whether this string value holds the only reference to its bytes (freshly built).
  bool string_unshared() const { return std::get<StringPtr>(v_).use_count() == 1; }
  ListData& list() const { return *std::get<std::shared_ptr<ListData>>(v_); }
  DictData& dict() const { return *std::get<std::shared_ptr<DictData>>(v_); }
  const std::shared_ptr<ListData>& list_ptr() const {
    return std::get<std::shared_ptr<ListData>>(v_);
  }
  const std::shared_ptr<DictData>& dict_ptr() const {
    return std::get<std::shared_ptr<DictData>>(v_);
  }
  const Callable& callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }

  bool Truthy() const;
  // 0 for scalars, else the container's nesting depth.
  int Depth() const;
  // Identity of the referenced container (nullptr for scalars): the `sameas` test.
  const void* Identity() const;

 private:
  using StringPtr = std::shared_ptr<const std::string>;
  std::variant<std::monostate, std::nullptr_t, bool, int64_t, double, StringPtr,
               std::shared_ptr<ListData>, std::shared_ptr<DictData>, std::shared_ptr<Callable>>
      v_;
  bool markup_ = false;
};

// Defined after Value so their members (vector<Value>, pair<string, Value>) see a complete
// type: clang rejects standard containers of incomplete types here.
struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;  // tuples print as (a, b) and refuse append/pop
  int depth = 1;          // 1 + deepest child container; only ever grows
};

// Insertion-ordered map (Python dicts keep insertion order; templates print tool schemas in the
// order the client sent them). Entries are found by a lookup string: the key itself for string
// keys, an escaped spelling for other keys (ints, None, ...), whose original values are kept for
// iteration and printing.
class DictData {
 public:
  using Kind = DictKind;

  explicit DictData(Kind kind = Kind::kDict) : kind_(kind) {}

  Kind kind() const { return kind_; }
  size_t size() const { return items_.size(); }
  // (lookup string, value) pairs in insertion order.
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  // The original key of entry i.
  Value KeyAt(size_t i) const;
  // The key of entry i as json.dumps writes object keys (1 -> "1", None -> "null").
  std::string JsonKeyAt(size_t i) const;
  bool has_non_string_keys() const { return has_original_keys_; }

  const Value* Find(std::string_view key) const;
  Value* Find(std::string_view key);
  // The value of entry i, for owners that keep entries in a known order (the loop object).
  Value& ValueAt(size_t i);
  void Set(std::string key, Value value);
  // Appends without checking for an existing key (caller guarantees uniqueness).
  void AppendUnique(std::string key, Value value);
  bool Erase(std::string_view key);

  // Keys of any type: Python treats 1, 1.0 and True as the same key.
  static std::string LookupKey(const Value& key);
  const Value* FindKey(const Value& key) const;
  void SetKey(const Value& key, Value value);

  int depth = 1;

 private:
  // Linear scan below this size (chat messages have ~5 keys); a hash index above it.
  static constexpr size_t kIndexThreshold = 16;
  size_t IndexOf(std::string_view key) const;

  Kind kind_;
  std::vector<std::pair<std::string, Value>> items_;
  std::vector<Value> original_keys_;  // parallel to items_ once any key is not a string
  bool has_original_keys_ = false;
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  mutable std::unordered_map<std::string, size_t, KeyHash, std::equal_to<>> index_;
  mutable bool index_valid_ = false;
};

// Python's type name of a value ("str", "int", "list", "dict", "NoneType", ...), for messages.
std::string_view TypeName(const Value& v);

// Python str(): strings verbatim, undefined as "", None/True/False spelled as Python does,
// containers as repr(). Nesting past kMaxValueDepth prints as "..." (never recurses deeper).
// Returns false (leaving `out` partly written) once `out` would grow past max_bytes.
bool AppendStr(const Value& v, std::string* out, size_t max_bytes = SIZE_MAX);
std::string Str(const Value& v);
// Python repr().
bool AppendRepr(const Value& v, std::string* out, size_t max_bytes = SIZE_MAX);
std::string Repr(const Value& v);
// Python repr() of a float: shortest round-trip digits, exponent form outside [1e-4, 1e16).
std::string FormatFloat(double d);

struct JsonOptions {
  int indent = -1;  // < 0: single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
  size_t max_bytes = SIZE_MAX;  // ResourceExhausted once the output would pass this
};
// json.dumps() as transformers' tojson filter calls it (ensure_ascii=False, keys in insertion
// order). Undefined is written as null; macros / functions are an error.
Status AppendJson(const Value& v, const JsonOptions& options, std::string* out);

// Converts request JSON to values, preserving object key order for ordered_json.
StatusOr<Value> FromJson(const nlohmann::json& j);
StatusOr<Value> FromJson(const nlohmann::ordered_json& j);

// What a comparison may cost: one unit per value visited plus compared string bytes / 16, the
// same currency as RenderLimits::max_steps. Without it one `==` between lists holding the same
// big strings many times over could run for minutes. Once `left` goes negative the comparison
// stops early with an unspecified result, and the caller reports the exhausted budget.
struct CompareBudget {
  int64_t left = INT64_MAX;
  bool exhausted() const { return left < 0; }
};

// Python ==. Containers compare element-wise; dicts ignore order. int/float/bool compare as
// numbers.
bool Equal(const Value& a, const Value& b, CompareBudget* budget = nullptr);
// Python <, for numbers, strings (code point order) and lists. Error on other types.
StatusOr<bool> Less(const Value& a, const Value& b, CompareBudget* budget = nullptr);

// UTF-8 helpers. Invalid bytes decode to U+DC80..U+DCFF and encode back to the same byte, so any
// byte string survives a decode/encode round trip (Python's surrogateescape).
std::u32string DecodeUtf8(std::string_view s);
void AppendUtf8(char32_t c, std::string* out);
// Appends a backslash escape: a backslash, `prefix` (x, u or U), then c as `digits` hex digits.
void AppendHex(char32_t c, int digits, char prefix, std::string* out);
std::string EncodeUtf8(std::u32string_view s);
bool IsAscii(std::string_view s);
size_t CodePointCount(std::string_view s);

}  // namespace uf::jinja
