// The Jinja values' JSON side: the tojson filter (json.dumps as transformers calls it) and
// request JSON (messages, template kwargs) converted to values.
#include <cmath>
#include <string>

#include "tokenizer/jinja_value.h"

namespace uf::jinja {

// ---------------------------------------------------------------------------------------------
// JSON

namespace {

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  auto escape_control = [&](char32_t c) {
    switch (c) {
      case '"':
        *out += "\\\"";
        return true;
      case '\\':
        *out += "\\\\";
        return true;
      case '\n':
        *out += "\\n";
        return true;
      case '\r':
        *out += "\\r";
        return true;
      case '\t':
        *out += "\\t";
        return true;
      case '\b':
        *out += "\\b";
        return true;
      case '\f':
        *out += "\\f";
        return true;
      default:
        if (c < 0x20) {
          AppendHex(c, 4, 'u', out);
          return true;
        }
        return false;
    }
  };
  if (!ensure_ascii || IsAscii(s)) {
    for (char ch : s) {
      if (!escape_control(static_cast<unsigned char>(ch))) out->push_back(ch);
    }
  } else {
    for (char32_t c : DecodeUtf8(s)) {
      if (escape_control(c)) continue;
      if (c < 0x80) {
        out->push_back(static_cast<char>(c));
      } else if (c <= 0xFFFF) {
        AppendHex(c, 4, 'u', out);
      } else {
        char32_t v = c - 0x10000;
        AppendHex(0xD800 + (v >> 10), 4, 'u', out);
        AppendHex(0xDC00 + (v & 0x3FF), 4, 'u', out);
      }
    }
  }
  out->push_back('"');
}

Status AppendJsonImpl(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  if (depth > kMaxValueDepth + 1) return InvalidArgumentError("tojson: value nested too deeply");
  if (out->size() > o.max_bytes) {
    return ResourceExhaustedError("tojson output exceeds " + std::to_string(o.max_bytes) +
                                  " bytes");
  }
  auto newline = [&](int level) {
    if (o.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(o.indent) * static_cast<size_t>(level), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      *out += "null";
      return OkStatus();
    case Value::Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return OkStatus();
    case Value::Kind::kInt:
      *out += std::to_string(v.as_int());
      return OkStatus();
    case Value::Kind::kFloat: {
      double d = v.as_float();
      if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FormatFloat(d);
      }
      return OkStatus();
    }
    case Value::Kind::kString:
      if (out->size() + v.str().size() > o.max_bytes) {
        return ResourceExhaustedError("tojson output exceeds " + std::to_string(o.max_bytes) +
                                      " bytes");
      }
      AppendJsonString(v.str(), o.ensure_ascii, out);
      return OkStatus();
    case Value::Kind::kList: {
      const auto& items = v.list().items;
      if (items.empty()) {
        *out += "[]";
        return OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += o.item_separator;
        newline(depth + 1);
        UF_RETURN_IF_ERROR(AppendJsonImpl(items[i], o, depth + 1, out));
      }
      newline(depth);
      out->push_back(']');
      return OkStatus();
    }
    case Value::Kind::kDict: {
      const DictData& d = v.dict();
      if (d.kind() != DictData::Kind::kDict) {
        return InvalidArgumentError("tojson: object of type " + std::string(TypeName(v)) +
                                    " is not JSON serializable");
      }
      if (d.size() == 0) {
        *out += "{}";
        return OkStatus();
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      entries.reserve(d.size());
      for (size_t i = 0; i < d.size(); ++i)
        entries.emplace_back(d.JsonKeyAt(i), &d.items()[i].second);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) *out += o.item_separator;
        newline(depth + 1);
        AppendJsonString(entries[i].first, o.ensure_ascii, out);
        *out += o.key_separator;
        UF_RETURN_IF_ERROR(AppendJsonImpl(*entries[i].second, o, depth + 1, out));
      }
      newline(depth);
      out->push_back('}');
      return OkStatus();
    }
    case Value::Kind::kCallable:
      return InvalidArgumentError("tojson: a function is not JSON serializable");
  }
  return OkStatus();
}

template <typename Json>
StatusOr<Value> FromJsonImpl(const Json& j, int depth) {
  if (depth > kMaxValueDepth) return InvalidArgumentError("JSON value nested too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value(static_cast<double>(u));
      }
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) {
        UF_ASSIGN_OR_RETURN(Value v, FromJsonImpl(item, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value dict = Value::Dict();
      for (auto it = j.begin(); it != j.end(); ++it) {
        UF_ASSIGN_OR_RETURN(Value v, FromJsonImpl(it.value(), depth + 1));
        dict.dict().Set(it.key(), std::move(v));
      }
      return dict;
    }
    case nlohmann::json::value_t::binary:
      return InvalidArgumentError("binary JSON values are not supported");
  }
  return Value::None();
}

}  // namespace

Status AppendJson(const Value& v, const JsonOptions& options, std::string* out) {
  return AppendJsonImpl(v, options, 0, out);
}

StatusOr<Value> FromJson(const nlohmann::json& j) { return FromJsonImpl(j, 0); }
StatusOr<Value> FromJson(const nlohmann::ordered_json& j) { return FromJsonImpl(j, 0); }

}  // namespace uf::jinja
