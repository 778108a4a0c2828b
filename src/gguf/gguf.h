// GGUF v2/v3 reader (zero-copy mmap, every field validated before use) and streaming writer.
// Spec: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "gguf/types.h"

namespace uf::gguf {

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view ValueTypeName(ValueType type);

// One metadata value. Scalars keep their exact GGUF type; arrays are homogeneous and stored
// densely (strings as std::string, numbers widened to int64/uint64/double) so a 150k-entry
// vocabulary costs one vector, not 150k variants. Nested arrays are rejected by the reader.
// Storage kinds: unsigned scalars/arrays as uint64, signed as int64, float32/64 as double,
// bool scalars as bool and bool arrays as 0/1 in std::vector<uint64_t>. The writer accepts
// either integer kind for any integer type and fails if a value does not fit its type.
class Value {
 public:
  using Storage = std::variant<uint64_t, int64_t, double, bool, std::string,
                               std::vector<std::string>, std::vector<int64_t>,
                               std::vector<uint64_t>, std::vector<double>>;
  Value() : type_(ValueType::kUint32), storage_(uint64_t{0}) {}
  Value(ValueType type, ValueType array_type, Storage storage)
      : type_(type), array_type_(array_type), storage_(std::move(storage)) {}

  // Convenience constructors (writer side).
  static Value U32(uint32_t v) { return Value(ValueType::kUint32, ValueType::kUint8, uint64_t{v}); }
  static Value I32(int32_t v) { return Value(ValueType::kInt32, ValueType::kUint8, int64_t{v}); }
  static Value U64(uint64_t v) { return Value(ValueType::kUint64, ValueType::kUint8, v); }
  static Value F32(float v) { return Value(ValueType::kFloat32, ValueType::kUint8, double{v}); }
  static Value Bool(bool v) { return Value(ValueType::kBool, ValueType::kUint8, v); }
  static Value String(std::string v) {
    return Value(ValueType::kString, ValueType::kUint8, std::move(v));
  }
  static Value StringArray(std::vector<std::string> v) {
    return Value(ValueType::kArray, ValueType::kString, std::move(v));
  }
  static Value F32Array(std::vector<double> v) {
    return Value(ValueType::kArray, ValueType::kFloat32, std::move(v));
  }
  static Value I32Array(std::vector<int64_t> v) {
    return Value(ValueType::kArray, ValueType::kInt32, std::move(v));
  }

  ValueType type() const { return type_; }
  ValueType array_type() const { return array_type_; }  // meaningful when type() == kArray
  bool is_array() const { return type_ == ValueType::kArray; }
  size_t array_size() const;

  // Scalar accessors: nullopt / nullptr when the value is not of a compatible kind.
  std::optional<int64_t> AsInt() const;    // any integer type or bool; uint64 > INT64_MAX fails
  std::optional<double> AsFloat() const;   // float32/64 or any integer
  std::optional<bool> AsBool() const;      // bool or integer
  const std::string* AsString() const;
  // Array accessors.
  const std::vector<std::string>* AsStringArray() const;
  std::optional<std::vector<int64_t>> AsIntArray() const;   // any integer element type
  std::optional<std::vector<double>> AsFloatArray() const;  // float or integer elements

  const Storage& storage() const { return storage_; }
  std::string DebugString(size_t max_array_items = 8) const;

 private:
  ValueType type_;
  ValueType array_type_ = ValueType::kUint8;
  Storage storage_;
};

struct TensorInfo {
  std::string name;
  GgmlType type;
  int n_dims = 0;
  // GGUF order: ne[0] is the innermost (contiguous) dimension. A weight of a linear layer
  // y = W x has ne[0] = in_features, ne[1] = out_features. Unused dims are 1.
  int64_t ne[4] = {1, 1, 1, 1};
  uint64_t offset = 0;           // relative to the start of the tensor data section
  uint64_t n_bytes = 0;          // validated to lie inside the file
  const uint8_t* data = nullptr;  // points into the mapping; valid while the GgufFile lives

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string ShapeString() const;  // "[256, 32000]"
};

class GgufFile {
 public:
  // Maps the file read-only and validates it. Errors name the file and the problem.
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses a copy of an in-memory buffer (tests, fuzzing). The copy starts on a 4096-byte
  // boundary, so tensor data is aligned as it would be in a mapping.
  static StatusOr<std::unique_ptr<GgufFile>> FromBuffer(const void* data, size_t size);
  ~GgufFile();

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Start of tensor data in the file (clamped to file_size() for tensor-less files that end
  // without padding, as vocab-only files do).
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  const std::string& path() const { return path_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* Find(std::string_view key) const;

  // Typed lookups: NotFound if absent, InvalidArgument if of the wrong kind.
  StatusOr<int64_t> GetInt(std::string_view key) const;
  StatusOr<double> GetFloat(std::string_view key) const;
  StatusOr<std::string> GetString(std::string_view key) const;
  StatusOr<bool> GetBool(std::string_view key) const;
  int64_t GetIntOr(std::string_view key, int64_t fallback) const;
  double GetFloatOr(std::string_view key, double fallback) const;
  bool GetBoolOr(std::string_view key, bool fallback) const;
  std::string GetStringOr(std::string_view key, std::string fallback) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  Status Parse();

  std::string path_;
  const uint8_t* base_ = nullptr;  // whole file
  uint64_t size_ = 0;
  void* mapping_ = nullptr;        // mmap address, or nullptr when owned_ holds the bytes
  std::vector<uint8_t> owned_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Streaming writer: metadata and tensor descriptions are held in memory; tensor bytes are
// produced by a callback at write time so multi-GB synthetic models never sit in RAM at once.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint64_t alignment = 32);

  // Replaces an existing key of the same name. general.alignment is always written, as uint32
  // from the constructor's alignment: at its Set position if it was Set (value ignored), else
  // after the other keys.
  void Set(std::string key, Value value);

  // fill(dst) must write exactly GgmlRowBytes(type, ne[0]) * ne[1] * ne[2] * ne[3] bytes. It is
  // called at write time, in AddTensor order, into a reused buffer of the largest tensor's size.
  using FillFn = std::function<void(uint8_t* dst, size_t n_bytes)>;
  Status AddTensor(std::string name, GgmlType type, std::vector<int64_t> ne, FillFn fill);
  // Copies n_bytes from data at write time (data must outlive WriteToFile).
  Status AddTensor(std::string name, GgmlType type, std::vector<int64_t> ne, const void* data);

  Status WriteToFile(const std::string& path) const;
  StatusOr<std::vector<uint8_t>> WriteToBuffer() const;  // tests

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t n_bytes;
    FillFn fill;                 // set by the FillFn overload
    const void* data = nullptr;  // set by the pointer overload; written without a copy
  };
  // Magic through the padding before the data section, with offsets assigned in order.
  StatusOr<std::vector<uint8_t>> EncodeHeader() const;
  // Streams each tensor's bytes plus its padding through write, one tensor in memory at a time.
  Status WriteData(const std::function<Status(const void*, size_t)>& write) const;

  uint32_t version_;
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace uf::gguf
