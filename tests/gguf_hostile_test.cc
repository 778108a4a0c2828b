// Hostile GGUF inputs: every malformed field gives a clear error (asserted on a specific word of
// the message), never a crash, a huge allocation or a long loop. Run under -DUF_SANITIZE=ON too.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "shared_data.h"

namespace uf::gguf {
namespace {

constexpr uint64_t kHuge = uint64_t{1} << 63;

// Little-endian GGUF byte builder, so each test states exactly the bytes it feeds the reader.
class Bytes {
 public:
  Bytes& U8(uint8_t v) { return Raw(&v, 1); }
  Bytes& U32(uint32_t v) { return Raw(&v, 4); }
  Bytes& U64(uint64_t v) { return Raw(&v, 8); }
  Bytes& Str(std::string_view s) {
    U64(s.size());
    return Raw(s.data(), s.size());
  }
  Bytes& Raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    v_.insert(v_.end(), b, b + n);
    return *this;
  }
  Bytes& PadTo(size_t alignment) {
    v_.resize((v_.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  Bytes& Zeros(size_t n) {
    v_.resize(v_.size() + n, 0);
    return *this;
  }
  // One tensor info: name, dims, type, offset.
  Bytes& Tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) U64(d);
    return U32(type).U64(offset);
  }
  const std::vector<uint8_t>& bytes() const { return v_; }

 private:
  std::vector<uint8_t> v_;
};

Bytes Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Bytes b;
  b.Raw("GGUF", 4).U32(version).U64(n_tensors).U64(n_kv);
  return b;
}

constexpr uint32_t kU8 = 0, kU32 = 4, kI32 = 5, kBool = 7, kString = 8, kArray = 9, kU64 = 10;
constexpr uint32_t kF32 = 0, kQ4_0 = 2;  // tensor types

// Parses b and expects an error whose message contains word.
void ExpectError(const Bytes& b, const std::string& word) {
  auto r = GgufFile::FromBuffer(b.bytes().data(), b.bytes().size());
  ASSERT_FALSE(r.ok()) << "accepted; expected an error mentioning '" << word << "'";
  EXPECT_TRUE(r.status().code() == StatusCode::kDataLoss ||
              r.status().code() == StatusCode::kInvalidArgument)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find(word), std::string::npos) << r.status().ToString();
}

std::unique_ptr<GgufFile> ExpectOk(const Bytes& b) {
  auto r = GgufFile::FromBuffer(b.bytes().data(), b.bytes().size());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

TEST(GgufHostileTest, MinimalValidFile) {
  auto f = ExpectOk(Header(0, 0));
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->metadata().size(), 0u);
  EXPECT_EQ(f->alignment(), 32u);  // spec default
  // One tensor: F32 [8] = 32 bytes at offset 0 of an aligned data section.
  Bytes b = Header(1, 0);
  b.Tensor("w", {8}, kF32, 0).PadTo(32).Zeros(32);
  f = ExpectOk(b);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->tensors()[0].n_bytes, 32u);
}

TEST(GgufHostileTest, MagicAndVersion) {
  ExpectError(Bytes(), "too short");
  ExpectError(Bytes().Raw("GGU", 3), "too short");
  ExpectError(Bytes().Raw("GGML", 4).U32(3).U64(0).U64(0), "magic");
  ExpectError(Bytes().Raw("GGUF", 4), "truncated");
  ExpectError(Header(0, 0, 0), "version 0");
  ExpectError(Header(0, 0, 1), "version 1");
  ExpectError(Header(0, 0, 4), "version 4");
  ExpectError(Header(0, 0, 0x03000000), "big-endian");
  EXPECT_NE(ExpectOk(Header(0, 0, 2)), nullptr);
}

TEST(GgufHostileTest, AbsurdCounts) {
  ExpectError(Header(kHuge, 0), "tensor count");
  ExpectError(Header(0, kHuge), "metadata count");
  ExpectError(Header(~uint64_t{0}, ~uint64_t{0}), "count");
  // Plausible against the header alone but not after the metadata has used the bytes.
  Bytes b = Header(2, 1);
  b.Str("k").U32(kString).Str(std::string(60, 'x'));
  ExpectError(b, "tensor count");
  // Counts that fit the size but run out of entries.
  ExpectError(Header(0, 3).Str("a").U32(kString).Str(std::string(20, 'x')).Str("b").U32(kU32).U8(0),
              "truncated");
}

TEST(GgufHostileTest, StringLengths) {
  ExpectError(Header(0, 1).U64(kHuge).Raw("key", 3).Zeros(16), "string length");
  ExpectError(Header(0, 1).U64(~uint64_t{0}).Zeros(16), "string length");
  Bytes b = Header(0, 1);
  b.Str("my.key").U32(kString).U64(kHuge).Raw("abc", 3);
  ExpectError(b, "string length");
  ExpectError(b, "my.key");  // the message names the key
  // One byte too long.
  ExpectError(Header(0, 1).Str("k").U32(kString).U64(4).Raw("abc", 3), "string length");
  ExpectError(Header(0, 1).Str("").U32(kU8).U8(0), "empty key");
}

TEST(GgufHostileTest, ValueTypes) {
  ExpectError(Header(0, 1).Str("k").U32(13).U64(0), "unknown value type 13");
  ExpectError(Header(0, 1).Str("k").U32(0xFFFFFFFF).U64(0), "unknown value type");
  ExpectError(Header(0, 1).Str("flag").U32(kBool).U8(2), "bool");
  ExpectError(Header(0, 1).Str("k").U32(kU32).U8(1), "truncated");
}

TEST(GgufHostileTest, Arrays) {
  ExpectError(Header(0, 1).Str("a").U32(kArray).U32(kU32).U64(kHuge / 2).U32(1), "array length");
  ExpectError(Header(0, 1).Str("a").U32(kArray).U32(kString).U64(kHuge).Str("x"), "array length");
  ExpectError(Header(0, 1).Str("a").U32(kArray).U32(kU32).U64(3).U32(1).U32(2), "array length");
  ExpectError(Header(0, 1).Str("a").U32(kArray).U32(kArray).U64(1).U32(kU8).U64(0), "nested");
  ExpectError(Header(0, 1).Str("a").U32(kArray).U32(99).U64(0), "unknown array element type");
  ExpectError(Header(0, 1).Str("a").U32(kArray).U32(kBool).U64(2).U8(1).U8(7), "bool");
  // Strings inside an array: the third one runs past the end.
  Bytes b = Header(0, 1);
  b.Str("toks").U32(kArray).U32(kString).U64(3).Str("a").Str("b").U64(1000).Raw("c", 1);
  ExpectError(b, "string length");
  ExpectError(b, "toks");
  // Empty arrays are fine.
  auto f = ExpectOk(Header(0, 1).Str("e").U32(kArray).U32(kString).U64(0));
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->Find("e")->array_size(), 0u);
}

TEST(GgufHostileTest, DuplicateKey) {
  Bytes b = Header(0, 2);
  b.Str("dup").U32(kU8).U8(1).Str("dup").U32(kU32).U32(2);
  ExpectError(b, "duplicate metadata key 'dup'");
}

TEST(GgufHostileTest, Alignment) {
  auto with_alignment = [](uint32_t type, uint64_t value) {
    Bytes b = Header(0, 1);
    b.Str("general.alignment").U32(type);
    if (type == kU64) {
      b.U64(value);
    } else if (type == kString) {
      b.Str("32");
    } else {
      b.U32(static_cast<uint32_t>(value));
    }
    return b;
  };
  ExpectError(with_alignment(kU32, 0), "power of two");
  ExpectError(with_alignment(kU32, 48), "power of two");
  ExpectError(with_alignment(kU32, 1u << 21), "power of two");
  ExpectError(with_alignment(kI32, 0xFFFFFFE0), "power of two");  // -32
  ExpectError(with_alignment(kU64, kHuge), "power of two");
  ExpectError(with_alignment(kString, 0), "must be an integer");
  // Lenient about the integer type.
  auto f = ExpectOk(with_alignment(kU64, 64));
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->alignment(), 64u);
  f = ExpectOk(with_alignment(kI32, 16));
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->alignment(), 16u);
  // The data section and offsets follow the declared alignment.
  Bytes b = Header(1, 1);
  b.Str("general.alignment").U32(kU32).U32(64).Tensor("w", {4}, kF32, 32);
  b.PadTo(64).Zeros(64);
  ExpectError(b, "misaligned");
}

TEST(GgufHostileTest, TensorShapes) {
  auto one = [](std::vector<uint64_t> ne, uint32_t type) {
    Bytes b = Header(1, 0);
    b.Tensor("blk.0.w", std::move(ne), type, 0).PadTo(32).Zeros(256);
    return b;
  };
  ExpectError(one({}, kF32), "n_dims 0");
  ExpectError(one({1, 1, 1, 1, 1}, kF32), "n_dims 5");
  ExpectError(one({4, 0}, kF32), "ne[1] is 0");
  ExpectError(one({1ull << 32, 1ull << 32}, kF32), "overflows");
  ExpectError(one({kHuge}, kF32), "overflows");
  ExpectError(one({1ull << 62}, kF32), "overflows");  // 2^62 elements * 4 bytes
  ExpectError(one({4}, 999), "unknown tensor type 999");
  ExpectError(one({32}, 4), "unknown tensor type 4");  // retired Q4_2
  ExpectError(one({16}, kQ4_0), "block size");
  ExpectError(one({4, 0}, kF32), "tensor 'blk.0.w'");  // tensor errors name the tensor
}

TEST(GgufHostileTest, TensorPlacement) {
  auto with_offset = [](uint64_t offset, size_t data_bytes) {
    Bytes b = Header(1, 0);
    b.Tensor("w", {8}, kF32, offset).PadTo(32).Zeros(data_bytes);
    return b;
  };
  EXPECT_NE(ExpectOk(with_offset(32, 64)), nullptr);
  ExpectError(with_offset(4, 64), "misaligned");
  ExpectError(with_offset(64, 64), "past the end");
  ExpectError(with_offset(32, 63), "past the end");
  ExpectError(with_offset(kHuge, 64), "past the end");  // no wrap-around
  ExpectError(with_offset(~uint64_t{31}, 64), "past the end");
  ExpectError(with_offset(0, 0), "past the end");

  Bytes overlap = Header(2, 0);
  overlap.Tensor("a", {16}, kF32, 0).Tensor("b", {16}, kF32, 32).PadTo(32).Zeros(128);
  ExpectError(overlap, "overlap");
  Bytes same = Header(2, 0);
  same.Tensor("a", {8}, kF32, 0).Tensor("b", {8}, kF32, 0).PadTo(32).Zeros(64);
  ExpectError(same, "overlap");
  Bytes dup = Header(2, 0);
  dup.Tensor("a", {8}, kF32, 0).Tensor("a", {8}, kF32, 32).PadTo(32).Zeros(64);
  ExpectError(dup, "duplicate tensor name 'a'");
  Bytes unnamed = Header(1, 0);
  unnamed.Tensor("", {8}, kF32, 0).PadTo(32).Zeros(32);
  ExpectError(unnamed, "empty name");
  // Out-of-order offsets are fine as long as nothing overlaps.
  Bytes reversed = Header(2, 0);
  reversed.Tensor("a", {8}, kF32, 32).Tensor("b", {8}, kF32, 0).PadTo(32).Zeros(64);
  EXPECT_NE(ExpectOk(reversed), nullptr);
}

// A small writer-made file with every value kind and a few tensors.
std::vector<uint8_t> SmallFile() {
  GgufWriter w(3, 32);
  w.Set("general.architecture", Value::String("llama"));
  w.Set("u8", Value(ValueType::kUint8, ValueType::kUint8, uint64_t{7}));
  w.Set("i64", Value(ValueType::kInt64, ValueType::kUint8, int64_t{-5}));
  w.Set("f32", Value::F32(1.5f));
  w.Set("f64", Value(ValueType::kFloat64, ValueType::kUint8, 2.5));
  w.Set("b", Value::Bool(true));
  w.Set("toks", Value::StringArray({"<unk>", "a", "bc"}));
  w.Set("scores", Value::F32Array({0.0, -1.0, -2.0}));
  w.Set("ids", Value::I32Array({3, 1, 2}));
  w.Set("flags", Value(ValueType::kArray, ValueType::kBool, std::vector<uint64_t>{1, 0}));
  auto fill = [](uint8_t* d, size_t n) { std::memset(d, 0x5A, n); };
  EXPECT_TRUE(w.AddTensor("a", GgmlType::kF32, {8, 2}, fill).ok());
  EXPECT_TRUE(w.AddTensor("b", GgmlType::kQ8_0, {32}, fill).ok());
  EXPECT_TRUE(w.AddTensor("c", GgmlType::kF16, {3}, fill).ok());
  auto bytes = w.WriteToBuffer();
  EXPECT_TRUE(bytes.ok());
  return *bytes;
}

uint64_t EndOfLastTensor(const GgufFile& f) {
  uint64_t end = 0;
  for (const TensorInfo& t : f.tensors())
    end = std::max(end, f.data_offset() + t.offset + t.n_bytes);
  return end;
}

TEST(GgufHostileTest, TruncationAtEveryByte) {
  const std::vector<uint8_t> full = SmallFile();
  auto f = GgufFile::FromBuffer(full.data(), full.size());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const uint64_t end = EndOfLastTensor(**f);
  ASSERT_LT(end, full.size());  // the last tensor (6 bytes of f16) is followed by padding
  for (size_t n = 0; n <= full.size(); ++n) {
    // Heap copy of exactly n bytes so ASan sees any read past the end of the input.
    std::vector<uint8_t> cut(full.begin(), full.begin() + n);
    auto r = GgufFile::FromBuffer(cut.data(), cut.size());
    if (n < end) {
      ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes accepted";
      const std::string m = r.status().message();
      EXPECT_TRUE(m.find("truncated") != std::string::npos ||
                  m.find("past the end") != std::string::npos ||
                  m.find("length") != std::string::npos ||
                  m.find("too short") != std::string::npos || m.find("count") != std::string::npos)
          << n << ": " << m;
    } else {
      EXPECT_TRUE(r.ok()) << n << ": " << r.status().ToString();  // only padding is missing
    }
  }
}

TEST(GgufHostileTest, TruncatedRealModel) {
  UF_REQUIRE_SHARED();
  const std::string path = "../shared/models/tiny-llama-256-q4_k_m.gguf";
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const uint64_t header_end = (*f)->data_offset();
  const uint64_t end = EndOfLastTensor(**f);
  std::vector<uint8_t> full(std::filesystem::file_size(path));
  FILE* fp = std::fopen(path.c_str(), "rb");
  ASSERT_NE(fp, nullptr);
  ASSERT_EQ(std::fread(full.data(), 1, full.size(), fp), full.size());
  std::fclose(fp);
  std::mt19937_64 rng(42);
  std::vector<uint64_t> cuts = {0, 1, 23, 24, 25, header_end - 1, header_end, end - 1};
  for (int i = 0; i < 150; ++i) cuts.push_back(rng() % header_end);
  for (int i = 0; i < 10; ++i) cuts.push_back(header_end + rng() % (end - header_end));
  for (uint64_t n : cuts) {
    auto r = GgufFile::FromBuffer(full.data(), n);
    EXPECT_FALSE(r.ok()) << "prefix of " << n << " bytes accepted";
  }
  // Corrupt single bytes in the header region: must never crash; errors are fine, and some
  // corruptions (inside a string) are legitimately accepted.
  int rejected = 0;
  for (int i = 0; i < 40; ++i) {
    const size_t at = rng() % header_end;
    const uint8_t saved = full[at];
    full[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
    rejected += !GgufFile::FromBuffer(full.data(), end).ok();
    full[at] = saved;
  }
  std::printf("%d of 40 single-bit header corruptions rejected\n", rejected);
}

}  // namespace
}  // namespace uf::gguf
