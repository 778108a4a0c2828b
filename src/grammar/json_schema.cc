#include "grammar/json_schema.h"

#include <cmath>
#include <map>
#include <set>

#include "base/check.h"

namespace uf::grammar {
namespace {

using json = nlohmann::ordered_json;

// Beyond these a bounded repetition would need too many rules; such schemas are refused.
constexpr int64_t kMaxBoundedCount = 1024;
// Integers have at most 15 digits: every one is then exact in a double (JavaScript's safe
// integers go to 2^53 - 1 = 9007199254740991), so bounds at or beyond +-kMaxInteger (zod's .int()
// writes +-(2^53 - 1)) hold without a check.
constexpr int64_t kMaxInteger = 999999999999999;
// Integer ranges up to this many values are spelled out as alternatives.
constexpr int64_t kMaxEnumeratedRange = 1000;

const std::set<std::string>& UnsupportedKeywords() {
  static const std::set<std::string> k = {"pattern",
                                          "multipleOf",
                                          "patternProperties",
                                          "prefixItems",
                                          "contains",
                                          "minContains",
                                          "maxContains",
                                          "uniqueItems",
                                          "not",
                                          "if",
                                          "then",
                                          "else",
                                          "dependentRequired",
                                          "dependentSchemas",
                                          "minProperties",
                                          "maxProperties",
                                          "propertyNames",
                                          "unevaluatedProperties",
                                          "unevaluatedItems"};
  return k;
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// The shared pieces of JSON syntax, built once per grammar.
class JsonSyntax {
 public:
  explicit JsonSyntax(Grammar* g) : g_(*g) {}

  // Nothing, a space, or a newline and an indentation of up to kMaxIndent spaces or
  // kMaxIndentTabs tabs: what compact or pretty-printed JSON writes. More would only let a model
  // spend its tokens on blanks (random text fills every gap allowed).
  Element Ws() {
    if (ws_ < 0) {
      Seq newline = g_.Literal("\n");
      const int32_t indent = g_.Rule("indent", {{g_.Repeat(g_.Literal(" "), 0, kMaxIndent)},
                                                {g_.Repeat(g_.Literal("\t"), 1, kMaxIndentTabs)}});
      newline.push_back(Grammar::Ref(indent));
      ws_ = g_.Rule("ws", {{}, g_.Literal(" "), std::move(newline)});
    }
    return Grammar::Ref(ws_);
  }

  // Strings never hold "<|" (harmony reads it as a message header, so a string with one would
  // break the reply's structure). Unbounded strings stay otherwise unrestricted; strings with a
  // length bound then leave out '<' (write \u003c), as a pair of characters cannot be counted
  // as one.
  void ExcludeTagOpen() { no_tag_open_ = true; }

  Element Char() {
    if (char_ >= 0) return Grammar::Ref(char_);
    char_ = CharRule(no_tag_open_ ? "<" : "");
    return Grammar::Ref(char_);
  }

  // A JSON string character, raw bytes in `except` left out.
  int32_t CharRule(std::string_view except) {
    ByteSet plain = ByteRange(0x20, 0x7F);
    plain.reset('"');
    plain.reset('\\');
    for (char c : except) plain.reset(static_cast<uint8_t>(c));
    const ByteSet cont = ByteRange(0x80, 0xBF), hex = AnyOf("0123456789abcdefABCDEF");
    auto b = [this](const ByteSet& s) { return g_.Bytes(s); };
    const Element bs = b(AnyOf("\\")), u = b(AnyOf("u")), h = b(hex);
    std::vector<Seq> alts = {
        {b(plain)},
        {b(ByteRange(0xC2, 0xDF)), b(cont)},
        {b(ByteRange(0xE0, 0xE0)), b(ByteRange(0xA0, 0xBF)), b(cont)},
        {b(ByteRange(0xE1, 0xEC)), b(cont), b(cont)},
        {b(ByteRange(0xED, 0xED)), b(ByteRange(0x80, 0x9F)), b(cont)},
        {b(ByteRange(0xEE, 0xEF)), b(cont), b(cont)},
        {b(ByteRange(0xF0, 0xF0)), b(ByteRange(0x90, 0xBF)), b(cont), b(cont)},
        {b(ByteRange(0xF1, 0xF3)), b(cont), b(cont), b(cont)},
        {b(ByteRange(0xF4, 0xF4)), b(ByteRange(0x80, 0x8F)), b(cont), b(cont)},
        {bs, b(AnyOf("\"\\/bfnrt"))},
        // \uXXXX without surrogates: a lone one is not valid JSON text for strict parsers.
        {bs, u, b(AnyOf("0123456789ABCabc")), h, h, h},
        {bs, u, b(AnyOf("Dd")), b(ByteRange('0', '7')), h, h},
        {bs, u, b(AnyOf("EFef")), h, h, h},
    };
    return g_.Rule("char", std::move(alts));
  }

  Element String(int64_t min_len = 0, int64_t max_len = -1) {
    if (min_len == 0 && max_len < 0) {
      if (string_ < 0) {
        Seq s = g_.Literal("\"");
        if (no_tag_open_) {
          // (char | '<'+ char-but-'|')* '<'*: any characters without "<|".
          const Element lt = g_.Bytes(AnyOf("<"));
          Seq run = {g_.Repeat({lt}, 1, -1), Grammar::Ref(CharRule("<|"))};
          const int32_t piece = g_.Rule("piece", {{Char()}, std::move(run)});
          s.push_back(g_.Star({Grammar::Ref(piece)}));
          s.push_back(g_.Star({lt}));
        } else {
          s.push_back(g_.Star({Char()}));
        }
        s.push_back(g_.Bytes(AnyOf("\"")));
        string_ = g_.Rule("string", {std::move(s)});
      }
      return Grammar::Ref(string_);
    }
    Seq s = g_.Literal("\"");
    s.push_back(g_.Repeat({Char()}, static_cast<int>(min_len), static_cast<int>(max_len)));
    s.push_back(g_.Bytes(AnyOf("\"")));
    return Grammar::Ref(g_.Rule("string", {std::move(s)}));
  }

  Element Integer() {
    if (integer_ < 0) integer_ = g_.Rule("integer", {{g_.Optional(g_.Literal("-")), Natural()}});
    return Grammar::Ref(integer_);
  }

  // 0 or a positive integer of at most 15 digits, or (positive_only) 1 and up.
  Element Natural(bool positive_only = false) {
    const Element digit = g_.Bytes(ByteRange('0', '9'));
    Seq positive = {g_.Bytes(ByteRange('1', '9')), g_.Repeat({digit}, 0, 14)};
    if (positive_only) return Grammar::Ref(g_.Rule("positive", {std::move(positive)}));
    return Grammar::Ref(g_.Rule("natural", {g_.Literal("0"), std::move(positive)}));
  }

  Element Number() {
    if (number_ < 0) {
      const Element digit = g_.Bytes(ByteRange('0', '9'));
      const Element frac = g_.Optional({g_.Bytes(AnyOf(".")), g_.Repeat({digit}, 1, 16)});
      const Element exp = g_.Optional(
          {g_.Bytes(AnyOf("eE")), g_.Optional({g_.Bytes(AnyOf("+-"))}), g_.Repeat({digit}, 1, 2)});
      number_ = g_.Rule("number", {{Integer(), frac, exp}});
    }
    return Grammar::Ref(number_);
  }

  Element Literal(std::string_view text) {
    return Grammar::Ref(g_.Rule("lit", {g_.Literal(text)}));
  }

  // "{" ws ( "}" | key ":" ws value ("," ws key ":" ws value)* ws "}" ): whitespace where
  // compact and pretty-printed JSON put it, none before a colon or a comma.
  Element Map(Element value) {
    Seq member = {String(), g_.Bytes(AnyOf(":")), Ws(), value};
    Seq more = g_.Literal(",");
    more.push_back(Ws());
    more.insert(more.end(), member.begin(), member.end());
    Seq body = member;
    body.push_back(g_.Star(std::move(more)));
    body.push_back(Ws());
    body.push_back(g_.Bytes(AnyOf("}")));
    Seq s = g_.Literal("{");
    s.push_back(Ws());
    s.push_back(Grammar::Ref(g_.Rule("map_body", {g_.Literal("}"), std::move(body)})));
    return Grammar::Ref(g_.Rule("map", {std::move(s)}));
  }

  // "[" ws ( "]" | item ("," ws item){min-1, max-1} ws "]" )
  Element Array(Element item, int64_t min_items, int64_t max_items) {
    Seq s = g_.Literal("[");
    s.push_back(Ws());
    std::vector<Seq> rest;
    if (min_items == 0) rest.push_back(g_.Literal("]"));
    if (max_items != 0) {
      Seq more = g_.Literal(",");
      more.push_back(Ws());
      more.push_back(item);
      const int lo = static_cast<int>(std::max<int64_t>(min_items - 1, 0));
      const int hi = max_items < 0 ? -1 : static_cast<int>(max_items - 1);
      rest.push_back({item, g_.Repeat(std::move(more), lo, hi), Ws(), g_.Bytes(AnyOf("]"))});
    }
    s.push_back(Grammar::Ref(g_.Rule("array_body", std::move(rest))));
    return Grammar::Ref(g_.Rule("array", {std::move(s)}));
  }

  // Any JSON value.
  Element Value() {
    if (value_ >= 0) return Grammar::Ref(value_);
    value_ = g_.Declare("value");
    const Element any = Grammar::Ref(value_);
    g_.Define(value_, {{Map(any)},
                       {Array(any, 0, -1)},
                       {String()},
                       {Number()},
                       g_.Literal("true"),
                       g_.Literal("false"),
                       g_.Literal("null")});
    return any;
  }

 private:
  Grammar& g_;
  int32_t ws_ = -1, char_ = -1, string_ = -1, integer_ = -1, number_ = -1, value_ = -1;
  bool no_tag_open_ = false;
};

// Compiles one schema (its own root for "#" references) into rules of a shared grammar.
class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, Grammar* g, JsonSyntax* syntax)
      : root_(root), g_(*g), syntax_(*syntax) {}

  // The value rule of the root schema; on errors *error_path names the keyword.
  StatusOr<Element> Run(std::string* error_path) {
    StatusOr<Element> v = Compile(root_, "");
    if (!v.ok() && error_path != nullptr) *error_path = error_path_;
    return v;
  }

 private:
  Status Error(const std::string& path, const std::string& message) {
    error_path_ = path;
    return InvalidArgumentError((path.empty() ? std::string("schema") : path) + ": " + message);
  }

  StatusOr<int64_t> Count(const json& s, const char* key, const std::string& path, int64_t dflt) {
    const auto it = s.find(key);
    if (it == s.end() || it->is_null()) return dflt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return Error(Join(path, key), "must be a non-negative integer");
    }
    if (it->get<int64_t>() > kMaxBoundedCount) {
      return Error(Join(path, key),
                   "values above " + std::to_string(kMaxBoundedCount) + " are not supported");
    }
    return it->get<int64_t>();
  }

  StatusOr<Element> Ref(const std::string& ref, const std::string& path) {
    if (auto it = refs_.find(ref); it != refs_.end()) return Grammar::Ref(it->second);
    const json* target = nullptr;
    if (ref == "#") {
      target = &root_;
    } else if (ref.starts_with("#/")) {
      json::json_pointer ptr;
      try {
        ptr = json::json_pointer(ref.substr(1));
      } catch (const json::exception&) {
        return Error(path, "'" + ref + "' is not a valid JSON pointer");
      }
      if (root_.contains(ptr)) target = &root_.at(ptr);
    } else {
      return Error(path, "only local references ('#...') are supported, not '" + ref + "'");
    }
    if (target == nullptr) return Error(path, "'" + ref + "' does not resolve in the schema");
    // Declared before compiling, so that recursive definitions refer to themselves.
    const int32_t rule = g_.Declare("ref");
    refs_[ref] = rule;
    UF_ASSIGN_OR_RETURN(Element e, Compile(*target, path));
    g_.Define(rule, {{e}});
    return Grammar::Ref(rule);
  }

  StatusOr<Element> Object(const json& s, const std::string& path) {
    const auto props = s.find("properties");
    const auto extra = s.find("additionalProperties");
    if (props == s.end() || props->is_null() || (props->is_object() && props->empty())) {
      if (extra != s.end() && extra->is_boolean() && !extra->get<bool>()) {
        return syntax_.Literal("{}");
      }
      if (extra != s.end() && extra->is_object()) {
        UF_ASSIGN_OR_RETURN(Element v, Compile(*extra, Join(path, "additionalProperties")));
        return syntax_.Map(v);
      }
      return syntax_.Map(syntax_.Value());
    }
    if (!props->is_object()) return Error(Join(path, "properties"), "must be an object");
    std::set<std::string> required;
    if (const auto req = s.find("required"); req != s.end() && !req->is_null()) {
      if (!req->is_array()) return Error(Join(path, "required"), "must be an array of strings");
      for (const json& r : *req) {
        if (!r.is_string()) return Error(Join(path, "required"), "must be an array of strings");
        if (!props->contains(r.get<std::string>())) {
          return Error(Join(path, "required"),
                       "names '" + r.get<std::string>() + "', which is not in properties");
        }
        required.insert(r.get<std::string>());
      }
    }
    struct Prop {
      Seq kv;
      bool required;
    };
    std::vector<Prop> list;
    for (auto it = props->begin(); it != props->end(); ++it) {
      UF_ASSIGN_OR_RETURN(Element v, Compile(it.value(), Join(path, "properties." + it.key())));
      Seq kv = g_.Literal(json(it.key()).dump() + ":");
      kv.push_back(syntax_.Ws());
      kv.push_back(v);
      list.push_back({std::move(kv), required.count(it.key()) > 0});
    }
    // rest[i][first]: properties i.. in order, `first` = nothing written yet (no comma before).
    const size_t n = list.size();
    std::vector<std::array<int32_t, 2>> rest(n + 1);
    for (size_t i = 0; i <= n; ++i) rest[i] = {g_.Declare("props"), g_.Declare("props")};
    g_.Define(rest[n][0], {{}});
    g_.Define(rest[n][1], {{}});
    for (size_t i = n; i-- > 0;) {
      for (int first = 0; first < 2; ++first) {
        Seq take = first ? Seq{} : g_.Literal(",");
        if (!first) take.push_back(syntax_.Ws());
        take.insert(take.end(), list[i].kv.begin(), list[i].kv.end());
        take.push_back(Grammar::Ref(rest[i + 1][0]));
        std::vector<Seq> alts = {std::move(take)};
        if (!list[i].required) alts.push_back({Grammar::Ref(rest[i + 1][first])});
        g_.Define(rest[i][first], std::move(alts));
      }
    }
    Seq body = g_.Literal("{");
    body.push_back(syntax_.Ws());
    body.push_back(Grammar::Ref(rest[0][1]));
    body.push_back(syntax_.Ws());
    body.push_back(g_.Bytes(AnyOf("}")));
    return Grammar::Ref(g_.Rule("object", {std::move(body)}));
  }

  // An integer within the schema's bounds: the whole range, the non-negative or positive
  // integers, or a small range spelled out.
  StatusOr<Element> IntegerRange(const json& s, const std::string& path) {
    double lo = -static_cast<double>(kMaxInteger), hi = static_cast<double>(kMaxInteger);
    std::string lo_key, hi_key;
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      const auto it = s.find(k);
      if (it == s.end() || it->is_null()) continue;
      if (!it->is_number()) return Error(Join(path, k), "must be a number");
      const double v = it->get<double>();
      const std::string key = k;
      if (key == "minimum" && std::ceil(v) > lo) lo = std::ceil(v), lo_key = key;
      if (key == "exclusiveMinimum" && std::floor(v) + 1 > lo) lo = std::floor(v) + 1, lo_key = key;
      if (key == "maximum" && std::floor(v) < hi) hi = std::floor(v), hi_key = key;
      if (key == "exclusiveMaximum" && std::ceil(v) - 1 < hi) hi = std::ceil(v) - 1, hi_key = key;
    }
    if (hi < lo) return Error(Join(path, hi_key.empty() ? lo_key : hi_key), "leaves no integer");
    const double max = static_cast<double>(kMaxInteger);
    if (hi >= max && lo <= -max) return syntax_.Integer();
    if (hi >= max && (lo == 0 || lo == 1)) return syntax_.Natural(/*positive_only=*/lo == 1);
    if (hi - lo < kMaxEnumeratedRange) {
      std::vector<Seq> alts;
      for (int64_t v = static_cast<int64_t>(lo); v <= static_cast<int64_t>(hi); ++v) {
        alts.push_back(g_.Literal(std::to_string(v)));
      }
      return Grammar::Ref(g_.Rule("range", std::move(alts)));
    }
    return Error(Join(path, hi < max ? hi_key : lo_key),
                 "integer bounds are supported as >= 0, > 0, or a range of at most " +
                     std::to_string(kMaxEnumeratedRange) + " values");
  }

  StatusOr<Element> Typed(const json& s, const std::string& type, const std::string& path) {
    if (type == "object") return Object(s, path);
    if (type == "array") {
      UF_ASSIGN_OR_RETURN(int64_t lo, Count(s, "minItems", path, 0));
      UF_ASSIGN_OR_RETURN(int64_t hi, Count(s, "maxItems", path, -1));
      if (hi >= 0 && hi < lo) return Error(Join(path, "maxItems"), "is below minItems");
      Element item = syntax_.Value();
      if (const auto it = s.find("items"); it != s.end() && !it->is_null()) {
        if (it->is_array()) return Error(Join(path, "items"), "tuple form is not supported");
        UF_ASSIGN_OR_RETURN(item, Compile(*it, Join(path, "items")));
      }
      return syntax_.Array(item, lo, hi);
    }
    if (type == "string") {
      UF_ASSIGN_OR_RETURN(int64_t lo, Count(s, "minLength", path, 0));
      UF_ASSIGN_OR_RETURN(int64_t hi, Count(s, "maxLength", path, -1));
      if (hi >= 0 && hi < lo) return Error(Join(path, "maxLength"), "is below minLength");
      return syntax_.String(lo, hi);
    }
    if (type == "number") {
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (s.contains(k)) return Error(Join(path, k), "bounds on numbers are not supported");
      }
      return syntax_.Number();
    }
    if (type == "integer") return IntegerRange(s, path);
    if (type == "boolean")
      return Grammar::Ref(g_.Rule("boolean", {g_.Literal("true"), g_.Literal("false")}));
    if (type == "null") return syntax_.Literal("null");
    return Error(Join(path, "type"), "unknown type '" + type + "'");
  }

  StatusOr<Element> Compile(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return syntax_.Value();
      return Error(path, "the schema 'false' matches nothing");
    }
    if (!s.is_object()) return Error(path, "a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (UnsupportedKeywords().count(it.key())) {
        return Error(Join(path, it.key()), "'" + it.key() + "' is not supported");
      }
    }
    std::vector<Seq> alts;
    if (const auto ref = s.find("$ref"); ref != s.end()) {
      if (!ref->is_string()) return Error(Join(path, "$ref"), "must be a string");
      UF_ASSIGN_OR_RETURN(Element e, Ref(ref->get<std::string>(), Join(path, "$ref")));
      alts.push_back({e});
    } else if (const auto c = s.find("const"); c != s.end()) {
      alts.push_back({syntax_.Literal(c->dump())});
    } else if (const auto en = s.find("enum"); en != s.end()) {
      if (!en->is_array() || en->empty()) {
        return Error(Join(path, "enum"), "must be a non-empty array");
      }
      for (const json& v : *en) alts.push_back({syntax_.Literal(v.dump())});
    } else if (s.contains("anyOf") || s.contains("oneOf")) {
      const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
      const json& list = s.at(key);
      if (!list.is_array() || list.empty()) {
        return Error(Join(path, key), "must be a non-empty array of schemas");
      }
      for (size_t i = 0; i < list.size(); ++i) {
        UF_ASSIGN_OR_RETURN(
            Element e, Compile(list[i], Join(path, std::string(key) + "." + std::to_string(i))));
        alts.push_back({e});
      }
    } else if (const auto all = s.find("allOf"); all != s.end()) {
      if (!all->is_array() || all->size() != 1) {
        return Error(Join(path, "allOf"), "only allOf with exactly one schema is supported");
      }
      UF_ASSIGN_OR_RETURN(Element e, Compile((*all)[0], Join(path, "allOf.0")));
      alts.push_back({e});
    } else {
      std::vector<std::string> types;
      if (const auto t = s.find("type"); t != s.end()) {
        if (t->is_string()) {
          types.push_back(t->get<std::string>());
        } else if (t->is_array() && !t->empty()) {
          for (const json& x : *t) {
            if (!x.is_string()) return Error(Join(path, "type"), "must be a string or strings");
            types.push_back(x.get<std::string>());
          }
        } else {
          return Error(Join(path, "type"), "must be a string or a non-empty array of strings");
        }
      } else if (s.contains("properties") || s.contains("additionalProperties")) {
        types.push_back("object");
      } else if (s.contains("items")) {
        types.push_back("array");
      }
      if (types.empty()) {
        for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
          if (s.contains(k)) return Error(Join(path, k), "bounds need a 'type'");
        }
        alts.push_back({syntax_.Value()});
      }
      for (const std::string& t : types) {
        UF_ASSIGN_OR_RETURN(Element e, Typed(s, t, path));
        alts.push_back({e});
      }
    }
    if (const auto n = s.find("nullable"); n != s.end() && n->is_boolean() && n->get<bool>()) {
      alts.push_back({syntax_.Literal("null")});
    }
    return Grammar::Ref(g_.Rule("schema", std::move(alts)));
  }

  const json& root_;
  Grammar& g_;
  JsonSyntax& syntax_;
  std::map<std::string, int32_t> refs_;
  std::string error_path_;
};

}  // namespace

std::shared_ptr<const Grammar> JsonObjectGrammar() {
  static const std::shared_ptr<const Grammar> kGrammar = [] {
    Grammar g;
    JsonSyntax syntax(&g);
    const Element value = syntax.Value();
    const int32_t root = g.Rule("root", {{syntax.Ws(), syntax.Map(value)}});
    UF_CHECK(g.Finalize(root).ok());
    return std::make_shared<const Grammar>(std::move(g));
  }();
  return kGrammar;
}

StatusOr<std::shared_ptr<const Grammar>> JsonSchemaGrammar(const json& schema,
                                                           std::string* error_path) {
  Grammar g;
  JsonSyntax syntax(&g);
  SchemaCompiler compiler(schema, &g, &syntax);
  UF_ASSIGN_OR_RETURN(Element value, compiler.Run(error_path));
  const int32_t top = g.Rule("root", {{syntax.Ws(), value}});
  UF_RETURN_IF_ERROR(g.Finalize(top));
  return std::make_shared<const Grammar>(std::move(g));
}

StatusOr<std::shared_ptr<const Grammar>> ToolCallsGrammar(const std::vector<ToolSchema>& tools,
                                                          const ToolCallSyntax& syntax,
                                                          bool parallel, size_t* bad_tool,
                                                          std::string* error_path) {
  if (tools.empty()) return InvalidArgumentError("no tools to call");
  Grammar g;
  JsonSyntax js(&g);
  if (syntax.strings_without_tag_open) js.ExcludeTagOpen();
  std::vector<Seq> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    SchemaCompiler compiler(tools[i].parameters, &g, &js);
    StatusOr<Element> args = compiler.Run(error_path);
    if (!args.ok()) {
      if (bad_tool != nullptr) *bad_tool = i;
      return args.status();
    }
    // prefix "name" , "<args_key>": <arguments> suffix
    Seq call = g.Literal(syntax.bare_name ? syntax.prefix + tools[i].name + syntax.args_key
                                          : syntax.prefix + json(tools[i].name).dump() + ", \"" +
                                                syntax.args_key + "\": ");
    call.push_back(*args);
    Seq suffix = g.Literal(syntax.suffix);
    call.insert(call.end(), suffix.begin(), suffix.end());
    calls.push_back(std::move(call));
  }
  const Element one = Grammar::Ref(g.Rule("call", std::move(calls)));
  Seq root;
  if (!syntax.preamble_open.empty()) {
    // Text without "<|": chunks that are a byte other than '<', or a run of '<' then a byte
    // other than '<' and '|'; a run of '<' may end it.
    const Element lt = g.Bytes(AnyOf("<"));
    const Element chunk =
        Grammar::Ref(g.Rule("preamble_chunk", {{g.Bytes(~AnyOf("<"))},
                                               {g.Repeat({lt}, 1, -1), g.Bytes(~AnyOf("<|"))}}));
    Seq preamble = g.Literal(syntax.preamble_open);
    preamble.push_back(g.Star({chunk}));
    preamble.push_back(g.Star({lt}));
    const Seq close = g.Literal(syntax.preamble_close);
    preamble.insert(preamble.end(), close.begin(), close.end());
    root.push_back(g.Optional(std::move(preamble)));
  }
  root.push_back(js.Ws());
  root.push_back(one);
  if (parallel) {
    Seq more = g.Literal(syntax.separator);
    more.push_back(one);
    root.push_back(g.Star(std::move(more)));
  }
  const int32_t top = g.Rule("root", {std::move(root)});
  UF_RETURN_IF_ERROR(g.Finalize(top));
  return std::make_shared<const Grammar>(std::move(g));
}

}  // namespace uf::grammar
