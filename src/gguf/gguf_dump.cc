#include "gguf/gguf_dump.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace uf::gguf {
namespace {

constexpr size_t kShortArrayItems = 8;
constexpr size_t kShortStringBytes = 160;

std::string HumanBytes(uint64_t n) {
  char buf[32];
  if (n >= (uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(n) / (1 << 30));
  } else if (n >= (uint64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(n) / (1 << 20));
  } else if (n >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.2f KiB", static_cast<double>(n) / 1024);
  } else {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(n));
  }
  return buf;
}

std::string TypeLabel(const Value& v) {
  if (!v.is_array()) return std::string(ValueTypeName(v.type()));
  return "arr[" + std::string(ValueTypeName(v.array_type())) + "," +
         std::to_string(v.array_size()) + "]";
}

std::string RenderValue(const Value& v, bool full) {
  if (full) return v.DebugString(v.array_size());
  const std::string* s = v.AsString();
  if (s != nullptr && s->size() > kShortStringBytes) {
    // Cut on a UTF-8 boundary so the output stays valid text.
    size_t cut = kShortStringBytes;
    while (cut > 0 && (static_cast<unsigned char>((*s)[cut]) & 0xC0) == 0x80) --cut;
    Value head = Value::String(s->substr(0, cut));
    std::string out = head.DebugString();
    out.insert(out.size() - 1, "...");
    return out + " (" + std::to_string(s->size()) + " bytes)";
  }
  return v.DebugString(kShortArrayItems);
}

void Pad(std::string* out, size_t width, std::string_view text) {
  *out += text;
  if (text.size() < width) out->append(width - text.size(), ' ');
  *out += ' ';
}

}  // namespace

std::string DescribeGguf(const GgufFile& file, bool full) {
  std::string out;
  out += "GGUF v" + std::to_string(file.version()) + ", " + std::to_string(file.file_size()) +
         " bytes (" + HumanBytes(file.file_size()) + "), alignment " +
         std::to_string(file.alignment()) + ", data at offset " +
         std::to_string(file.data_offset()) + "\n";

  out += "metadata: " + std::to_string(file.metadata().size()) + " keys\n";
  size_t key_width = 0;
  for (const auto& [key, value] : file.metadata()) key_width = std::max(key_width, key.size());
  key_width = std::min<size_t>(key_width, 48);
  for (const auto& [key, value] : file.metadata()) {
    out += "  ";
    Pad(&out, key_width, key);
    Pad(&out, 16, TypeLabel(value));
    out += "= " + RenderValue(value, full) + "\n";
  }

  const auto& tensors = file.tensors();
  out += "tensors: " + std::to_string(tensors.size()) + "\n";
  if (!tensors.empty()) {
    size_t name_width = 4;
    for (const TensorInfo& t : tensors) name_width = std::max(name_width, t.name.size());
    out += "  ";
    Pad(&out, name_width, "name");
    Pad(&out, 8, "type");
    Pad(&out, 24, "shape");
    out += "bytes\n";
  }
  struct Totals {
    uint64_t count = 0;
    uint64_t bytes = 0;
    uint64_t elements = 0;
  };
  std::map<std::string_view, Totals> per_type;
  uint64_t total_bytes = 0;
  uint64_t total_elements = 0;
  size_t name_width = 4;
  for (const TensorInfo& t : tensors) name_width = std::max(name_width, t.name.size());
  for (const TensorInfo& t : tensors) {
    out += "  ";
    Pad(&out, name_width, t.name);
    Pad(&out, 8, GgmlTypeName(t.type));
    Pad(&out, 24, t.ShapeString());
    out += std::to_string(t.n_bytes) + "\n";
    Totals& tot = per_type[GgmlTypeName(t.type)];
    ++tot.count;
    tot.bytes += t.n_bytes;
    tot.elements += static_cast<uint64_t>(t.n_elements());
    total_bytes += t.n_bytes;
    total_elements += static_cast<uint64_t>(t.n_elements());
  }
  out += "bytes per type:\n";
  for (const auto& [name, tot] : per_type) {
    char bpw[32];
    std::snprintf(bpw, sizeof(bpw), "%.2f",
                  8.0 * static_cast<double>(tot.bytes) / static_cast<double>(tot.elements));
    out += "  ";
    Pad(&out, 8, name);
    out += std::to_string(tot.count) + " tensors, " + std::to_string(tot.elements) + " elements, " +
           std::to_string(tot.bytes) + " bytes (" + HumanBytes(tot.bytes) + "), " + bpw +
           " bits/weight\n";
  }
  out += "  total    " + std::to_string(tensors.size()) + " tensors, " +
         std::to_string(total_elements) + " elements, " + std::to_string(total_bytes) + " bytes (" +
         HumanBytes(total_bytes) + ")\n";
  return out;
}

}  // namespace uf::gguf
