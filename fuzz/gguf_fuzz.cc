// libFuzzer target for the GGUF reader: any input must parse or fail with a Status, and every
// value and tensor byte of an accepted file must be readable (ASan checks the bounds).
#include <cstddef>
#include <cstdint>

#include "gguf/gguf.h"
#include "gguf/gguf_dump.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = uf::gguf::GgufFile::FromBuffer(data, size);
  if (!parsed.ok()) {
    // Errors must explain themselves.
    if (parsed.status().message().empty()) __builtin_trap();
    return 0;
  }
  const uf::gguf::GgufFile& f = **parsed;
  size_t sink = 0;
  for (const auto& [key, value] : f.metadata()) {
    sink += key.size() + value.DebugString(4).size() + value.array_size();
    if (auto v = value.AsInt()) sink += static_cast<size_t>(*v);
    if (auto v = value.AsFloat()) sink += static_cast<size_t>(*v != 0);
    if (auto v = value.AsBool()) sink += *v;
    if (const std::string* s = value.AsString()) sink += s->size();
    if (const auto* a = value.AsStringArray()) {
      for (const std::string& s : *a) sink += s.size();
    }
    if (auto a = value.AsIntArray()) sink += a->size();
    if (auto a = value.AsFloatArray()) sink += a->size();
    if (f.Find(key) != &value) __builtin_trap();
  }
  for (const uf::gguf::TensorInfo& t : f.tensors()) {
    if (f.FindTensor(t.name) != &t) __builtin_trap();
    if (f.data_offset() + t.offset + t.n_bytes > f.file_size()) __builtin_trap();
    sink += t.ShapeString().size() + static_cast<size_t>(t.n_elements());
    // Touch every byte: out-of-bounds data pointers show up as ASan reports.
    uint8_t x = 0;
    for (uint64_t i = 0; i < t.n_bytes; ++i) x ^= t.data[i];
    sink += x;
  }
  sink += uf::gguf::DescribeGguf(f, /*full=*/false).size();
  volatile size_t keep = sink;
  (void)keep;
  return 0;
}
