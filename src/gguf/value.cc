// Value accessors and printing (shared by the reader, the writer and gguf_dump).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>

#include "gguf/gguf.h"

namespace uf::gguf {
namespace {

void AppendEscaped(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          static constexpr char kHex[] = "0123456789abcdef";
          *out += "\\x";
          out->push_back(kHex[u >> 4]);
          out->push_back(kHex[u & 15]);
        } else {
          out->push_back(c);  // UTF-8 passes through unchanged
        }
    }
  }
  out->push_back('"');
}

// Shortest text that reads back to the same value; float32 values print as floats so 0.1f is
// "0.1", not "0.10000000149011612".
void AppendFloat(double v, bool is_f32, std::string* out) {
  char buf[64];
  std::to_chars_result r = is_f32 ? std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v))
                                  : std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

template <typename T>
void AppendItems(const std::vector<T>& items, size_t max_items, std::string* out,
                 void (*append)(const T&, std::string*)) {
  *out += '[';
  const size_t shown = std::min(items.size(), max_items);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) *out += ", ";
    append(items[i], out);
  }
  if (shown < items.size()) {
    if (shown > 0) *out += ", ";
    *out += "... (" + std::to_string(items.size()) + " items)";
  }
  *out += ']';
}

}  // namespace

std::string_view ValueTypeName(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
      return "u8";
    case ValueType::kInt8:
      return "i8";
    case ValueType::kUint16:
      return "u16";
    case ValueType::kInt16:
      return "i16";
    case ValueType::kUint32:
      return "u32";
    case ValueType::kInt32:
      return "i32";
    case ValueType::kFloat32:
      return "f32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "str";
    case ValueType::kArray:
      return "arr";
    case ValueType::kUint64:
      return "u64";
    case ValueType::kInt64:
      return "i64";
    case ValueType::kFloat64:
      return "f64";
  }
  return "unknown";
}

size_t Value::array_size() const {
  if (!is_array()) return 0;
  if (auto* v = std::get_if<std::vector<std::string>>(&storage_)) return v->size();
  if (auto* v = std::get_if<std::vector<int64_t>>(&storage_)) return v->size();
  if (auto* v = std::get_if<std::vector<uint64_t>>(&storage_)) return v->size();
  if (auto* v = std::get_if<std::vector<double>>(&storage_)) return v->size();
  return 0;
}

std::optional<int64_t> Value::AsInt() const {
  if (auto* u = std::get_if<uint64_t>(&storage_)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (auto* i = std::get_if<int64_t>(&storage_)) return *i;
  if (auto* b = std::get_if<bool>(&storage_)) return *b ? 1 : 0;
  return std::nullopt;
}

std::optional<double> Value::AsFloat() const {
  if (auto* d = std::get_if<double>(&storage_)) return *d;
  if (auto* u = std::get_if<uint64_t>(&storage_)) return static_cast<double>(*u);
  if (auto* i = std::get_if<int64_t>(&storage_)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> Value::AsBool() const {
  if (auto* b = std::get_if<bool>(&storage_)) return *b;
  if (auto* u = std::get_if<uint64_t>(&storage_)) return *u != 0;
  if (auto* i = std::get_if<int64_t>(&storage_)) return *i != 0;
  return std::nullopt;
}

const std::string* Value::AsString() const { return std::get_if<std::string>(&storage_); }

const std::vector<std::string>* Value::AsStringArray() const {
  return std::get_if<std::vector<std::string>>(&storage_);
}

std::optional<std::vector<int64_t>> Value::AsIntArray() const {
  if (auto* v = std::get_if<std::vector<int64_t>>(&storage_)) return *v;
  if (auto* v = std::get_if<std::vector<uint64_t>>(&storage_)) {
    std::vector<int64_t> out;
    out.reserve(v->size());
    for (uint64_t x : *v) {
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      out.push_back(static_cast<int64_t>(x));
    }
    return out;
  }
  return std::nullopt;
}

std::optional<std::vector<double>> Value::AsFloatArray() const {
  if (auto* v = std::get_if<std::vector<double>>(&storage_)) return *v;
  if (auto* v = std::get_if<std::vector<int64_t>>(&storage_)) {
    return std::vector<double>(v->begin(), v->end());
  }
  if (auto* v = std::get_if<std::vector<uint64_t>>(&storage_)) {
    return std::vector<double>(v->begin(), v->end());
  }
  return std::nullopt;
}

std::string Value::DebugString(size_t max_array_items) const {
  std::string out;
  const bool f32 = (is_array() ? array_type_ : type_) == ValueType::kFloat32;
  const bool is_bool = (is_array() ? array_type_ : type_) == ValueType::kBool;
  if (auto* u = std::get_if<uint64_t>(&storage_)) {
    out = is_bool ? (*u != 0 ? "true" : "false") : std::to_string(*u);
  } else if (auto* i = std::get_if<int64_t>(&storage_)) {
    out = std::to_string(*i);
  } else if (auto* d = std::get_if<double>(&storage_)) {
    AppendFloat(*d, f32, &out);
  } else if (auto* b = std::get_if<bool>(&storage_)) {
    out = *b ? "true" : "false";
  } else if (auto* s = std::get_if<std::string>(&storage_)) {
    AppendEscaped(*s, &out);
  } else if (auto* v = std::get_if<std::vector<std::string>>(&storage_)) {
    AppendItems<std::string>(*v, max_array_items, &out,
                             [](const std::string& x, std::string* o) { AppendEscaped(x, o); });
  } else if (auto* v = std::get_if<std::vector<int64_t>>(&storage_)) {
    AppendItems<int64_t>(*v, max_array_items, &out,
                         [](const int64_t& x, std::string* o) { *o += std::to_string(x); });
  } else if (auto* v = std::get_if<std::vector<uint64_t>>(&storage_)) {
    if (is_bool) {
      AppendItems<uint64_t>(*v, max_array_items, &out, [](const uint64_t& x, std::string* o) {
        *o += x != 0 ? "true" : "false";
      });
    } else {
      AppendItems<uint64_t>(*v, max_array_items, &out,
                            [](const uint64_t& x, std::string* o) { *o += std::to_string(x); });
    }
  } else if (auto* v = std::get_if<std::vector<double>>(&storage_)) {
    if (f32) {
      AppendItems<double>(*v, max_array_items, &out,
                          [](const double& x, std::string* o) { AppendFloat(x, true, o); });
    } else {
      AppendItems<double>(*v, max_array_items, &out,
                          [](const double& x, std::string* o) { AppendFloat(x, false, o); });
    }
  }
  return out;
}

std::string TensorInfo::ShapeString() const {
  std::string out = "[";
  for (int i = 0; i < n_dims; ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ne[i]);
  }
  out += ']';
  return out;
}

}  // namespace uf::gguf
