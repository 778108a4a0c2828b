// GGUF reader. Every count, length, type and offset is checked against the bytes that remain
// before it is used, so a hostile file can neither read out of bounds nor make us allocate or
// loop in proportion to a number it merely claims.
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>

#if defined(__SANITIZE_ADDRESS__)
#define UF_GGUF_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UF_GGUF_ASAN 1
#endif
#endif
#ifdef UF_GGUF_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace uf::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes little-endian");

constexpr uint64_t kMaxAlignment = uint64_t{1} << 20;
// FromBuffer copies to storage aligned like a page, so tensor data has the same absolute
// alignment as with mmap.
constexpr uintptr_t kOwnedAlignment = 4096;
// Smallest encodings, used to bound claimed counts by the bytes left: a KV is a key length (8),
// a value type (4) and at least one value byte; a tensor info is a name length (8), n_dims (4),
// one dim (8), a type (4) and an offset (8).
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

std::string Quote(std::string_view s) {
  std::string out = "'";
  out.append(s.substr(0, 200));
  if (s.size() > 200) out += "...";
  out += "'";
  return out;
}

// Byte size of a scalar value type; 0 for string and array.
uint64_t ScalarSize(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUint16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
      return 8;
    case ValueType::kString:
    case ValueType::kArray:
      return 0;
  }
  return 0;
}

bool IsKnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kFloat64); }

class Reader {
 public:
  Reader(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    if (remaining() < sizeof(T)) return Truncated(what, sizeof(T));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }

  // Returns a view into the buffer; the length is bounded by the bytes left before any copy.
  Status ReadString(std::string_view* out, std::string_view what) {
    uint64_t len = 0;
    UF_RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining()) {
      return DataLossError("string length " + std::to_string(len) + " of " + std::string(what) +
                           " at offset " + std::to_string(pos_ - 8) + " exceeds the " +
                           std::to_string(remaining()) + " bytes left in the file");
    }
    *out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return OkStatus();
  }

  // Returns a pointer to the next n bytes and advances past them.
  Status ReadBytes(uint64_t n, const uint8_t** out, std::string_view what) {
    if (remaining() < n) return Truncated(what, n);
    *out = data_ + pos_;
    pos_ += n;
    return OkStatus();
  }

  Status Truncated(std::string_view what, uint64_t need) const {
    return DataLossError("file truncated while reading " + std::string(what) + " at offset " +
                         std::to_string(pos_) + " (need " + std::to_string(need) + " bytes, " +
                         std::to_string(remaining()) + " left)");
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

template <typename T>
T LoadAt(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Reads one scalar of a numeric/bool type from raw bytes into the widened storage kind.
Status DecodeScalar(ValueType t, const uint8_t* p, Value::Storage* out) {
  switch (t) {
    case ValueType::kUint8:
      *out = uint64_t{LoadAt<uint8_t>(p)};
      break;
    case ValueType::kUint16:
      *out = uint64_t{LoadAt<uint16_t>(p)};
      break;
    case ValueType::kUint32:
      *out = uint64_t{LoadAt<uint32_t>(p)};
      break;
    case ValueType::kUint64:
      *out = LoadAt<uint64_t>(p);
      break;
    case ValueType::kInt8:
      *out = int64_t{LoadAt<int8_t>(p)};
      break;
    case ValueType::kInt16:
      *out = int64_t{LoadAt<int16_t>(p)};
      break;
    case ValueType::kInt32:
      *out = int64_t{LoadAt<int32_t>(p)};
      break;
    case ValueType::kInt64:
      *out = LoadAt<int64_t>(p);
      break;
    case ValueType::kFloat32:
      *out = double{LoadAt<float>(p)};
      break;
    case ValueType::kFloat64:
      *out = LoadAt<double>(p);
      break;
    case ValueType::kBool: {
      const uint8_t b = *p;
      if (b > 1) return DataLossError("bool value " + std::to_string(b) + " is neither 0 nor 1");
      *out = b != 0;
      break;
    }
    case ValueType::kString:
    case ValueType::kArray:
      return InternalError("DecodeScalar called with a non-scalar type");
  }
  return OkStatus();
}

// Decodes n elements of a fixed-size type into a dense vector of the widened kind.
template <typename Dst, typename Src>
std::vector<Dst> DecodeArray(const uint8_t* p, uint64_t n) {
  std::vector<Dst> out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<Dst>(LoadAt<Src>(p + i * sizeof(Src)));
  return out;
}

Status ReadArray(Reader& r, Value* out) {
  uint32_t raw_elem = 0;
  UF_RETURN_IF_ERROR(r.Read(&raw_elem, "array element type"));
  if (!IsKnownValueType(raw_elem)) {
    return DataLossError("unknown array element type " + std::to_string(raw_elem));
  }
  const auto elem = static_cast<ValueType>(raw_elem);
  if (elem == ValueType::kArray) return DataLossError("nested arrays are not supported");
  uint64_t n = 0;
  UF_RETURN_IF_ERROR(r.Read(&n, "array length"));
  const uint64_t min_elem_bytes = elem == ValueType::kString ? 8 : ScalarSize(elem);
  if (n > r.remaining() / min_elem_bytes) {
    return DataLossError("array length " + std::to_string(n) + " of " +
                         std::string(ValueTypeName(elem)) + " exceeds the " +
                         std::to_string(r.remaining()) + " bytes left in the file");
  }
  if (elem == ValueType::kString) {
    std::vector<std::string> items;
    items.reserve(n);  // safe: n * 8 <= bytes left
    for (uint64_t i = 0; i < n; ++i) {
      std::string_view s;
      UF_RETURN_IF_ERROR(r.ReadString(&s, "array string element"));
      items.emplace_back(s);
    }
    *out = Value(ValueType::kArray, elem, std::move(items));
    return OkStatus();
  }
  const uint8_t* p = nullptr;
  UF_RETURN_IF_ERROR(r.ReadBytes(n * min_elem_bytes, &p, "array data"));
  Value::Storage items;
  switch (elem) {
    case ValueType::kUint8:
      items = DecodeArray<uint64_t, uint8_t>(p, n);
      break;
    case ValueType::kUint16:
      items = DecodeArray<uint64_t, uint16_t>(p, n);
      break;
    case ValueType::kUint32:
      items = DecodeArray<uint64_t, uint32_t>(p, n);
      break;
    case ValueType::kUint64:
      items = DecodeArray<uint64_t, uint64_t>(p, n);
      break;
    case ValueType::kInt8:
      items = DecodeArray<int64_t, int8_t>(p, n);
      break;
    case ValueType::kInt16:
      items = DecodeArray<int64_t, int16_t>(p, n);
      break;
    case ValueType::kInt32:
      items = DecodeArray<int64_t, int32_t>(p, n);
      break;
    case ValueType::kInt64:
      items = DecodeArray<int64_t, int64_t>(p, n);
      break;
    case ValueType::kFloat32:
      items = DecodeArray<double, float>(p, n);
      break;
    case ValueType::kFloat64:
      items = DecodeArray<double, double>(p, n);
      break;
    case ValueType::kBool: {
      // Bool arrays are stored as 0/1 in a uint64 vector (see Value).
      for (uint64_t i = 0; i < n; ++i) {
        if (p[i] > 1) {
          return DataLossError("bool array element " + std::to_string(i) + " has value " +
                               std::to_string(p[i]) + ", neither 0 nor 1");
        }
      }
      items = DecodeArray<uint64_t, uint8_t>(p, n);
      break;
    }
    case ValueType::kString:
    case ValueType::kArray:
      return InternalError("unreachable array element type");
  }
  *out = Value(ValueType::kArray, elem, std::move(items));
  return OkStatus();
}

Status ReadValue(Reader& r, ValueType type, Value* out) {
  if (type == ValueType::kArray) return ReadArray(r, out);
  if (type == ValueType::kString) {
    std::string_view s;
    UF_RETURN_IF_ERROR(r.ReadString(&s, "string value"));
    *out = Value(type, ValueType::kUint8, std::string(s));
    return OkStatus();
  }
  const uint8_t* p = nullptr;
  UF_RETURN_IF_ERROR(r.ReadBytes(ScalarSize(type), &p, "scalar value"));
  Value::Storage storage;
  UF_RETURN_IF_ERROR(DecodeScalar(type, p, &storage));
  *out = Value(type, ValueType::kUint8, std::move(storage));
  return OkStatus();
}

bool IsIntegerType(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kUint16:
    case ValueType::kInt16:
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kUint64:
    case ValueType::kInt64:
      return true;
    default:
      return false;
  }
}

std::string Range(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// GgufFile

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string msg = path + ": cannot open: " + std::strerror(err);
    return err == ENOENT ? NotFoundError(std::move(msg)) : InvalidArgumentError(std::move(msg));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return InvalidArgumentError(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(path + ": not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    return DataLossError(path + ": file is empty, not a GGUF file");
  }
  void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) {
    return InvalidArgumentError(path + ": mmap failed: " + std::strerror(err));
  }
  file->mapping_ = m;
  file->base_ = static_cast<const uint8_t*>(m);
  file->size_ = static_cast<uint64_t>(st.st_size);
  Status s = file->Parse();
  if (!s.ok()) return s.WithContext(path);
  return file;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(const void* data, size_t size) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = "<memory>";
  file->owned_.resize(size + kOwnedAlignment);
  const uintptr_t raw = reinterpret_cast<uintptr_t>(file->owned_.data());
  const uintptr_t aligned = (raw + kOwnedAlignment - 1) & ~(kOwnedAlignment - 1);
  uint8_t* base = file->owned_.data() + (aligned - raw);
  if (size > 0) std::memcpy(base, data, size);
  file->base_ = base;
  file->size_ = size;
#ifdef UF_GGUF_ASAN
  // The alignment slack around the copy would hide reads past the end from ASan; poison it.
  ASAN_POISON_MEMORY_REGION(file->owned_.data(), static_cast<size_t>(base - file->owned_.data()));
  ASAN_POISON_MEMORY_REGION(base + size, file->owned_.size() - size - (base - file->owned_.data()));
#endif
  Status s = file->Parse();
  if (!s.ok()) return s.WithContext(file->path_);
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, static_cast<size_t>(size_));
}

Status GgufFile::Parse() {
  Reader r(base_, size_);
  char magic[4];
  if (size_ < sizeof(magic)) {
    return InvalidArgumentError("not a GGUF file: only " + std::to_string(size_) +
                                " bytes, too short for the magic");
  }
  UF_RETURN_IF_ERROR(r.Read(&magic, "magic"));
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "%02x%02x%02x%02x", static_cast<uint8_t>(magic[0]),
                  static_cast<uint8_t>(magic[1]), static_cast<uint8_t>(magic[2]),
                  static_cast<uint8_t>(magic[3]));
    return InvalidArgumentError(std::string("not a GGUF file: bad magic 0x") + hex +
                                " (expected \"GGUF\")");
  }
  UF_RETURN_IF_ERROR(r.Read(&version_, "version"));
  if (version_ == 1) {
    return InvalidArgumentError(
        "GGUF version 1 (32-bit counts) is not supported; re-convert the model to GGUF v3");
  }
  if (version_ == 0x02000000u || version_ == 0x03000000u) {
    return InvalidArgumentError("big-endian GGUF files are not supported (version field " +
                                std::to_string(__builtin_bswap32(version_)) + " byte-swapped)");
  }
  if (version_ != 2 && version_ != 3) {
    return InvalidArgumentError("unsupported GGUF version " + std::to_string(version_) +
                                " (supported: 2, 3)");
  }
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  UF_RETURN_IF_ERROR(r.Read(&n_tensors, "tensor count"));
  UF_RETURN_IF_ERROR(r.Read(&n_kv, "metadata count"));
  if (n_tensors > r.remaining() / kMinTensorInfoBytes) {
    return DataLossError("tensor count " + std::to_string(n_tensors) + " is impossible in the " +
                         std::to_string(r.remaining()) + " bytes left in the file");
  }
  if (n_kv > r.remaining() / kMinKvBytes) {
    return DataLossError("metadata count " + std::to_string(n_kv) + " is impossible in the " +
                         std::to_string(r.remaining()) + " bytes left in the file");
  }

  metadata_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string_view key;
    Status s = r.ReadString(&key, "metadata key");
    if (!s.ok()) return s.WithContext("metadata entry #" + std::to_string(i));
    if (key.empty()) {
      return DataLossError("metadata entry #" + std::to_string(i) + " has an empty key");
    }
    const std::string context = "metadata key " + Quote(key);
    auto [it, inserted] = metadata_index_.emplace(std::string(key), metadata_.size());
    if (!inserted) return DataLossError("duplicate metadata key " + Quote(key));
    uint32_t raw_type = 0;
    s = r.Read(&raw_type, "value type");
    if (!s.ok()) return s.WithContext(context);
    if (!IsKnownValueType(raw_type)) {
      return DataLossError(context + ": unknown value type " + std::to_string(raw_type));
    }
    Value value;
    s = ReadValue(r, static_cast<ValueType>(raw_type), &value);
    if (!s.ok()) return s.WithContext(context);
    metadata_.emplace_back(it->first, std::move(value));
  }

  if (const Value* a = Find("general.alignment")) {
    // The spec says uint32; accept any integer type, since the value is what matters.
    if (a->is_array() || !IsIntegerType(a->type())) {
      return DataLossError("general.alignment must be an integer, got " +
                           std::string(ValueTypeName(a->type())));
    }
    const std::optional<int64_t> v = a->AsInt();  // nullopt: a uint64 above INT64_MAX
    if (!v.has_value() || *v <= 0 || static_cast<uint64_t>(*v) > kMaxAlignment ||
        !std::has_single_bit(static_cast<uint64_t>(*v))) {
      return DataLossError("general.alignment " + a->DebugString() +
                           " must be a nonzero power of two <= " + std::to_string(kMaxAlignment));
    }
    alignment_ = static_cast<uint64_t>(*v);
  }

  if (n_tensors > r.remaining() / kMinTensorInfoBytes) {
    return DataLossError("tensor count " + std::to_string(n_tensors) + " is impossible in the " +
                         std::to_string(r.remaining()) + " bytes left after the metadata");
  }
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    std::string_view name;
    Status s = r.ReadString(&name, "tensor name");
    if (!s.ok()) return s.WithContext("tensor info #" + std::to_string(i));
    if (name.empty()) {
      return DataLossError("tensor info #" + std::to_string(i) + " has an empty name");
    }
    t.name = std::string(name);
    const std::string context = "tensor " + Quote(name);
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return DataLossError("duplicate tensor name " + Quote(name));
    }
    uint32_t n_dims = 0;
    s = r.Read(&n_dims, "n_dims");
    if (!s.ok()) return s.WithContext(context);
    if (n_dims < 1 || n_dims > 4) {
      return DataLossError(context + ": n_dims " + std::to_string(n_dims) + " is not in 1..4");
    }
    t.n_dims = static_cast<int>(n_dims);
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      s = r.Read(&dim, "dimension");
      if (!s.ok()) return s.WithContext(context);
      if (dim == 0) {
        return DataLossError(context + ": dimension ne[" + std::to_string(d) + "] is 0");
      }
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(n_elements, static_cast<int64_t>(dim), &n_elements)) {
        return DataLossError(context + ": element count overflows at ne[" + std::to_string(d) +
                             "] = " + std::to_string(dim));
      }
      t.ne[d] = static_cast<int64_t>(dim);
    }
    uint32_t raw_type = 0;
    s = r.Read(&raw_type, "tensor type");
    if (!s.ok()) return s.WithContext(context);
    const std::optional<GgmlTypeInfo> info = GetGgmlTypeInfo(raw_type);
    if (!info.has_value()) {
      return DataLossError(context + ": unknown tensor type " + std::to_string(raw_type));
    }
    t.type = static_cast<GgmlType>(raw_type);
    if (t.ne[0] % info->block_size != 0) {
      return DataLossError(context + ": ne[0] = " + std::to_string(t.ne[0]) +
                           " is not a multiple of the block size " +
                           std::to_string(info->block_size) + " of type " +
                           std::string(info->name));
    }
    // Bytes = blocks per row * block bytes * rows; the element count did not overflow, and
    // blocks * type_size is at most elements * 292 / 256 (Q8_K), so only the final product can.
    uint64_t n_bytes = static_cast<uint64_t>(t.ne[0] / info->block_size);
    const uint64_t rows = static_cast<uint64_t>(t.ne[1] * t.ne[2] * t.ne[3]);
    if (__builtin_mul_overflow(n_bytes, static_cast<uint64_t>(info->type_size), &n_bytes) ||
        __builtin_mul_overflow(n_bytes, rows, &n_bytes)) {
      return DataLossError(context + ": byte size overflows");
    }
    t.n_bytes = n_bytes;
    s = r.Read(&t.offset, "tensor data offset");
    if (!s.ok()) return s.WithContext(context);
    if (t.offset % alignment_ != 0) {
      return DataLossError(context + ": misaligned data offset " + std::to_string(t.offset) +
                           " (not a multiple of the alignment " + std::to_string(alignment_) + ")");
    }
    tensors_.push_back(std::move(t));
  }

  // r.pos() <= size_ < 2^63 and alignment_ <= 2^20, so this cannot overflow.
  data_offset_ = (r.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (tensors_.empty()) data_offset_ = std::min(data_offset_, size_);
  for (TensorInfo& t : tensors_) {
    const uint64_t avail = size_ >= data_offset_ ? size_ - data_offset_ : 0;
    if (t.offset > avail || t.n_bytes > avail - t.offset) {
      return DataLossError("tensor " + Quote(t.name) + ": data " +
                           Range(t.offset, t.offset + std::min(t.n_bytes, avail + 1)) +
                           " (relative to the data section at " + std::to_string(data_offset_) +
                           ") extends past the end of the file (" + std::to_string(size_) +
                           " bytes)");
    }
    t.data = base_ + data_offset_ + t.offset;
  }
  // Overlap check on offsets sorted ascending; sizes are nonzero since every dim is >= 1.
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& prev = tensors_[order[k - 1]];
    const TensorInfo& next = tensors_[order[k]];
    if (prev.offset + prev.n_bytes > next.offset) {
      return DataLossError("tensors " + Quote(prev.name) + " " +
                           Range(prev.offset, prev.offset + prev.n_bytes) + " and " +
                           Quote(next.name) + " " + Range(next.offset, next.offset + next.n_bytes) +
                           " overlap");
    }
  }
  return OkStatus();
}

const Value* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status WrongKind(const std::string& path, std::string_view key, const Value& v,
                 std::string_view wanted) {
  std::string type(ValueTypeName(v.type()));
  if (v.is_array()) type += "[" + std::string(ValueTypeName(v.array_type())) + "]";
  return InvalidArgumentError(path + ": metadata key " + Quote(key) + " is " + type + ", not " +
                              std::string(wanted));
}

Status Missing(const std::string& path, std::string_view key) {
  return NotFoundError(path + ": metadata key " + Quote(key) + " not found");
}

}  // namespace

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(path_, key);
  std::optional<int64_t> x = v->is_array() ? std::nullopt : v->AsInt();
  if (!x.has_value()) return WrongKind(path_, key, *v, "an integer");
  return *x;
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(path_, key);
  std::optional<double> x = v->is_array() ? std::nullopt : v->AsFloat();
  if (!x.has_value()) return WrongKind(path_, key, *v, "a number");
  return *x;
}

StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(path_, key);
  const std::string* x = v->AsString();
  if (x == nullptr) return WrongKind(path_, key, *v, "a string");
  return *x;
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return Missing(path_, key);
  std::optional<bool> x = v->is_array() ? std::nullopt : v->AsBool();
  if (!x.has_value()) return WrongKind(path_, key, *v, "a bool");
  return *x;
}

int64_t GgufFile::GetIntOr(std::string_view key, int64_t fallback) const {
  StatusOr<int64_t> v = GetInt(key);
  return v.ok() ? *v : fallback;
}

double GgufFile::GetFloatOr(std::string_view key, double fallback) const {
  StatusOr<double> v = GetFloat(key);
  return v.ok() ? *v : fallback;
}

bool GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  StatusOr<bool> v = GetBool(key);
  return v.ok() ? *v : fallback;
}

std::string GgufFile::GetStringOr(std::string_view key, std::string fallback) const {
  StatusOr<std::string> v = GetString(key);
  return v.ok() ? *v : std::move(fallback);
}

}  // namespace uf::gguf
