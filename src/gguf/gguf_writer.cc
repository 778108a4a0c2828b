// GGUF writer: header in memory, tensor data streamed one tensor at a time.
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "gguf/gguf.h"

namespace uf::gguf {
namespace {

constexpr uint64_t kMaxAlignment = uint64_t{1} << 20;
constexpr std::string_view kAlignmentKey = "general.alignment";

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

void PutString(std::vector<uint8_t>* out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  out->insert(out->end(), s.begin(), s.end());
}

void PadTo(std::vector<uint8_t>* out, uint64_t alignment) {
  out->resize((out->size() + alignment - 1) / alignment * alignment, 0);
}

template <typename T, typename Src>
bool FitsIn(Src v) {
  return std::in_range<T>(v);
}

// Integer T from either widened integer kind, if it fits.
template <typename T>
std::optional<T> ScalarInt(const Value::Storage& s) {
  if (auto* u = std::get_if<uint64_t>(&s)) {
    if (FitsIn<T>(*u)) return static_cast<T>(*u);
  } else if (auto* i = std::get_if<int64_t>(&s)) {
    if (FitsIn<T>(*i)) return static_cast<T>(*i);
  } else if (auto* b = std::get_if<bool>(&s)) {
    return static_cast<T>(*b ? 1 : 0);
  }
  return std::nullopt;
}

template <typename T>
bool PutIntArray(const Value::Storage& s, std::vector<uint8_t>* out) {
  auto put_all = [&](const auto& items) {
    for (auto x : items) {
      if (!FitsIn<T>(x)) return false;
    }
    for (auto x : items) Put<T>(out, static_cast<T>(x));
    return true;
  };
  if (auto* u = std::get_if<std::vector<uint64_t>>(&s)) return put_all(*u);
  if (auto* i = std::get_if<std::vector<int64_t>>(&s)) return put_all(*i);
  return false;
}

template <typename T>
bool PutFloatArray(const Value::Storage& s, std::vector<uint8_t>* out) {
  auto* d = std::get_if<std::vector<double>>(&s);
  if (d == nullptr) return false;
  for (double x : *d) Put<T>(out, static_cast<T>(x));
  return true;
}

// Appends the encoding of a scalar of type t (no type tag); false if the storage does not hold
// a value representable as t.
bool PutScalar(ValueType t, const Value::Storage& s, std::vector<uint8_t>* out) {
  auto put_int = [&](auto zero) {
    using T = decltype(zero);
    std::optional<T> v = ScalarInt<T>(s);
    if (v.has_value()) Put<T>(out, *v);
    return v.has_value();
  };
  switch (t) {
    case ValueType::kUint8:
      return put_int(uint8_t{});
    case ValueType::kInt8:
      return put_int(int8_t{});
    case ValueType::kUint16:
      return put_int(uint16_t{});
    case ValueType::kInt16:
      return put_int(int16_t{});
    case ValueType::kUint32:
      return put_int(uint32_t{});
    case ValueType::kInt32:
      return put_int(int32_t{});
    case ValueType::kUint64:
      return put_int(uint64_t{});
    case ValueType::kInt64:
      return put_int(int64_t{});
    case ValueType::kBool: {
      std::optional<uint8_t> v = ScalarInt<uint8_t>(s);
      if (!v.has_value() || *v > 1) return false;
      Put<uint8_t>(out, *v);
      return true;
    }
    case ValueType::kFloat32:
    case ValueType::kFloat64: {
      double v = 0;
      if (auto* d = std::get_if<double>(&s)) {
        v = *d;
      } else if (auto* u = std::get_if<uint64_t>(&s)) {
        v = static_cast<double>(*u);
      } else if (auto* i = std::get_if<int64_t>(&s)) {
        v = static_cast<double>(*i);
      } else {
        return false;
      }
      if (t == ValueType::kFloat32) {
        Put<float>(out, static_cast<float>(v));
      } else {
        Put<double>(out, v);
      }
      return true;
    }
    case ValueType::kString: {
      auto* str = std::get_if<std::string>(&s);
      if (str == nullptr) return false;
      PutString(out, *str);
      return true;
    }
    case ValueType::kArray:
      return false;
  }
  return false;
}

bool PutArray(const Value& v, std::vector<uint8_t>* out) {
  const ValueType elem = v.array_type();
  const Value::Storage& s = v.storage();
  Put<uint32_t>(out, static_cast<uint32_t>(elem));
  // Length first; the element writers below only append elements.
  const size_t len_at = out->size();
  Put<uint64_t>(out, 0);
  bool ok = false;
  switch (elem) {
    case ValueType::kUint8:
      ok = PutIntArray<uint8_t>(s, out);
      break;
    case ValueType::kInt8:
      ok = PutIntArray<int8_t>(s, out);
      break;
    case ValueType::kUint16:
      ok = PutIntArray<uint16_t>(s, out);
      break;
    case ValueType::kInt16:
      ok = PutIntArray<int16_t>(s, out);
      break;
    case ValueType::kUint32:
      ok = PutIntArray<uint32_t>(s, out);
      break;
    case ValueType::kInt32:
      ok = PutIntArray<int32_t>(s, out);
      break;
    case ValueType::kUint64:
      ok = PutIntArray<uint64_t>(s, out);
      break;
    case ValueType::kInt64:
      ok = PutIntArray<int64_t>(s, out);
      break;
    case ValueType::kFloat32:
      ok = PutFloatArray<float>(s, out);
      break;
    case ValueType::kFloat64:
      ok = PutFloatArray<double>(s, out);
      break;
    case ValueType::kBool: {
      auto check = [](const auto& items) {
        for (auto x : items) {
          if (x != 0 && x != 1) return false;
        }
        return true;
      };
      auto* u = std::get_if<std::vector<uint64_t>>(&s);
      auto* i = std::get_if<std::vector<int64_t>>(&s);
      ok = (u != nullptr && check(*u)) || (i != nullptr && check(*i));
      if (ok) ok = PutIntArray<uint8_t>(s, out);
      break;
    }
    case ValueType::kString: {
      auto* items = std::get_if<std::vector<std::string>>(&s);
      ok = items != nullptr;
      if (ok) {
        for (const std::string& x : *items) PutString(out, x);
      }
      break;
    }
    case ValueType::kArray:
      ok = false;
      break;
  }
  if (!ok) return false;
  const uint64_t n = v.array_size();
  std::memcpy(out->data() + len_at, &n, sizeof(n));
  return true;
}

Status EncodeValue(std::string_view key, const Value& v, std::vector<uint8_t>* out) {
  Put<uint32_t>(out, static_cast<uint32_t>(v.type()));
  const bool ok = v.is_array() ? PutArray(v, out) : PutScalar(v.type(), v.storage(), out);
  if (!ok) {
    std::string type(ValueTypeName(v.type()));
    if (v.is_array()) type += "[" + std::string(ValueTypeName(v.array_type())) + "]";
    return InvalidArgumentError("metadata key '" + std::string(key) +
                                "': value does not fit its declared type " + type);
  }
  return OkStatus();
}

}  // namespace

GgufWriter::GgufWriter(uint32_t version, uint64_t alignment)
    : version_(version), alignment_(alignment) {
  UF_CHECK(version == 2 || version == 3)
      << "GGUF writer supports versions 2 and 3, not " << version;
  UF_CHECK(alignment > 0 && alignment <= kMaxAlignment && std::has_single_bit(alignment))
      << "alignment " << alignment << " must be a power of two <= " << kMaxAlignment;
}

void GgufWriter::Set(std::string key, Value value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

Status GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                             FillFn fill) {
  const std::string context = "tensor '" + name + "'";
  if (name.empty()) return InvalidArgumentError("tensor name is empty");
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return InvalidArgumentError("duplicate " + context);
  }
  if (ne.empty() || ne.size() > 4) {
    return InvalidArgumentError(context + ": n_dims " + std::to_string(ne.size()) +
                                " is not in 1..4");
  }
  const std::optional<GgmlTypeInfo> info = GetGgmlTypeInfo(static_cast<uint32_t>(type));
  if (!info.has_value()) {
    return InvalidArgumentError(context + ": unknown tensor type " +
                                std::to_string(static_cast<uint32_t>(type)));
  }
  uint64_t rows = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] <= 0) {
      return InvalidArgumentError(context + ": dimension ne[" + std::to_string(d) +
                                  "] = " + std::to_string(ne[d]) + " must be positive");
    }
    if (d > 0 && __builtin_mul_overflow(rows, static_cast<uint64_t>(ne[d]), &rows)) {
      return InvalidArgumentError(context + ": size overflows");
    }
  }
  if (ne[0] % info->block_size != 0) {
    return InvalidArgumentError(
        context + ": ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the block size " +
        std::to_string(info->block_size) + " of " + std::string(info->name));
  }
  uint64_t n_bytes = 0;
  if (__builtin_mul_overflow(GgmlRowBytes(type, ne[0]), rows, &n_bytes) ||
      n_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgumentError(context + ": size overflows");
  }
  if (!fill) return InvalidArgumentError(context + ": no fill function");
  tensors_.push_back(PendingTensor{std::move(name), type, std::move(ne), n_bytes, std::move(fill)});
  return OkStatus();
}

Status GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                             const void* data) {
  if (data == nullptr) return InvalidArgumentError("tensor '" + name + "': data is null");
  // A placeholder fill keeps the validation in one place; WriteData uses the pointer directly.
  UF_RETURN_IF_ERROR(AddTensor(std::move(name), type, std::move(ne), [](uint8_t*, size_t) {}));
  tensors_.back().fill = nullptr;
  tensors_.back().data = data;
  return OkStatus();
}

StatusOr<std::vector<uint8_t>> GgufWriter::EncodeHeader() const {
  bool has_alignment_key = false;
  for (const auto& kv : metadata_) has_alignment_key |= kv.first == kAlignmentKey;
  std::vector<uint8_t> out;
  out.insert(out.end(), {'G', 'G', 'U', 'F'});
  Put<uint32_t>(&out, version_);
  Put<uint64_t>(&out, tensors_.size());
  Put<uint64_t>(&out, metadata_.size() + (has_alignment_key ? 0 : 1));
  auto put_alignment = [&]() {
    Put<uint32_t>(&out, static_cast<uint32_t>(ValueType::kUint32));
    Put<uint32_t>(&out, static_cast<uint32_t>(alignment_));
  };
  for (const auto& [key, value] : metadata_) {
    if (key.empty()) return InvalidArgumentError("metadata key is empty");
    PutString(&out, key);
    if (key == kAlignmentKey) {
      put_alignment();  // the writer's alignment wins over whatever was Set
    } else {
      UF_RETURN_IF_ERROR(EncodeValue(key, value, &out));
    }
  }
  if (!has_alignment_key) {
    PutString(&out, kAlignmentKey);
    put_alignment();
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    PutString(&out, t.name);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Put<uint64_t>(&out, static_cast<uint64_t>(d));
    Put<uint32_t>(&out, static_cast<uint32_t>(t.type));
    Put<uint64_t>(&out, offset);
    offset += (t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  PadTo(&out, alignment_);
  return out;
}

Status GgufWriter::WriteData(const std::function<Status(const void*, size_t)>& write) const {
  static const uint8_t kZeros[4096] = {};
  std::vector<uint8_t> buffer;  // one tensor's bytes, reused
  for (const PendingTensor& t : tensors_) {
    const size_t n = static_cast<size_t>(t.n_bytes);
    if (t.data != nullptr) {
      UF_RETURN_IF_ERROR(write(t.data, n));
    } else {
      if (buffer.size() < n) buffer.resize(n);
      // Zeroed first so a fill that writes too little still gives deterministic output.
      std::memset(buffer.data(), 0, n);
      t.fill(buffer.data(), n);
      UF_RETURN_IF_ERROR(write(buffer.data(), n));
    }
    uint64_t pad = (alignment_ - t.n_bytes % alignment_) % alignment_;
    while (pad > 0) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(kZeros)));
      UF_RETURN_IF_ERROR(write(kZeros, chunk));
      pad -= chunk;
    }
  }
  return OkStatus();
}

Status GgufWriter::WriteToFile(const std::string& path) const {
  UF_ASSIGN_OR_RETURN(std::vector<uint8_t> header, EncodeHeader());
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return InvalidArgumentError(tmp + ": cannot create: " + std::strerror(errno));
  }
  // Large stdio buffer: metadata arrives in small pieces; big tensors bypass it anyway.
  std::setvbuf(f, nullptr, _IOFBF, size_t{1} << 22);
  auto write = [&](const void* p, size_t n) -> Status {
    if (n > 0 && std::fwrite(p, 1, n, f) != n) {
      return InternalError(tmp + ": write failed: " + std::strerror(errno));
    }
    return OkStatus();
  };
  Status s = write(header.data(), header.size());
  if (s.ok()) s = WriteData(write);
  if (s.ok() && (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0)) {
    s = InternalError(tmp + ": flush failed: " + std::strerror(errno));
  }
  if (std::fclose(f) != 0 && s.ok()) {
    s = InternalError(tmp + ": close failed: " + std::strerror(errno));
  }
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = InternalError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  if (!s.ok()) std::remove(tmp.c_str());
  return s;
}

StatusOr<std::vector<uint8_t>> GgufWriter::WriteToBuffer() const {
  UF_ASSIGN_OR_RETURN(std::vector<uint8_t> out, EncodeHeader());
  UF_RETURN_IF_ERROR(WriteData([&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
    return OkStatus();
  }));
  return out;
}

}  // namespace uf::gguf
