// GGUF reader/writer: real files from ../shared, writer round trips, type table, dump.
// Hostile inputs live in gguf_hostile_test.cc.
#include "gguf/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "cpu_time.h"
#include "gguf/gguf_dump.h"
#include "gguf/types.h"
#include "shared_data.h"

namespace uf::gguf {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Type table: geometry from ggml's type traits (ggml.c / ggml-common.h block structs).

TEST(GgmlTypesTest, GeometryMatchesGgml) {
  struct Expected {
    GgmlType type;
    const char* name;
    int64_t block;
    size_t bytes;
  };
  const Expected kExpected[] = {
      {GgmlType::kF32, "f32", 1, 4},
      {GgmlType::kF16, "f16", 1, 2},
      {GgmlType::kQ4_0, "q4_0", 32, 18},
      {GgmlType::kQ4_1, "q4_1", 32, 20},
      {GgmlType::kQ5_0, "q5_0", 32, 22},
      {GgmlType::kQ5_1, "q5_1", 32, 24},
      {GgmlType::kQ8_0, "q8_0", 32, 34},
      {GgmlType::kQ8_1, "q8_1", 32, 36},
      {GgmlType::kQ2_K, "q2_K", 256, 84},
      {GgmlType::kQ3_K, "q3_K", 256, 110},
      {GgmlType::kQ4_K, "q4_K", 256, 144},
      {GgmlType::kQ5_K, "q5_K", 256, 176},
      {GgmlType::kQ6_K, "q6_K", 256, 210},
      {GgmlType::kQ8_K, "q8_K", 256, 292},
      {GgmlType::kIQ2_XXS, "iq2_xxs", 256, 66},
      {GgmlType::kIQ2_XS, "iq2_xs", 256, 74},
      {GgmlType::kIQ3_XXS, "iq3_xxs", 256, 98},
      {GgmlType::kIQ1_S, "iq1_s", 256, 50},
      {GgmlType::kIQ4_NL, "iq4_nl", 32, 18},
      {GgmlType::kIQ3_S, "iq3_s", 256, 110},
      {GgmlType::kIQ2_S, "iq2_s", 256, 82},
      {GgmlType::kIQ4_XS, "iq4_xs", 256, 136},
      {GgmlType::kI8, "i8", 1, 1},
      {GgmlType::kI16, "i16", 1, 2},
      {GgmlType::kI32, "i32", 1, 4},
      {GgmlType::kI64, "i64", 1, 8},
      {GgmlType::kF64, "f64", 1, 8},
      {GgmlType::kIQ1_M, "iq1_m", 256, 56},
      {GgmlType::kBF16, "bf16", 1, 2},
      {GgmlType::kTQ1_0, "tq1_0", 256, 54},
      {GgmlType::kTQ2_0, "tq2_0", 256, 66},
      {GgmlType::kMXFP4, "mxfp4", 32, 17},  // u8 E8M0 exponent + 16 bytes of E2M1 nibbles
  };
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.name);
    std::optional<GgmlTypeInfo> info = GetGgmlTypeInfo(static_cast<uint32_t>(e.type));
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->name, e.name);
    EXPECT_EQ(info->block_size, e.block);
    EXPECT_EQ(info->type_size, e.bytes);
    EXPECT_EQ(GgmlTypeName(e.type), e.name);
    EXPECT_EQ(ParseGgmlType(e.name), e.type);
    EXPECT_EQ(GgmlRowBytes(e.type, e.block * 3), e.bytes * 3);
  }
  // Numbers the format retired (4, 5: Q4_2/Q4_3) or never had.
  for (uint32_t t : {4u, 5u, 31u, 32u, 33u, 36u, 999u}) {
    EXPECT_FALSE(GetGgmlTypeInfo(t).has_value()) << t;
  }
}

TEST(GgmlTypesTest, ParseIsCaseInsensitiveAndStrict) {
  EXPECT_EQ(ParseGgmlType("Q4_K"), GgmlType::kQ4_K);
  EXPECT_EQ(ParseGgmlType("q4_k"), GgmlType::kQ4_K);
  EXPECT_EQ(ParseGgmlType("BF16"), GgmlType::kBF16);
  EXPECT_FALSE(ParseGgmlType("q4").has_value());
  EXPECT_FALSE(ParseGgmlType("").has_value());
  EXPECT_FALSE(ParseGgmlType("f32 ").has_value());
}

TEST(GgmlTypesTest, ComputeSupportedSet) {
  std::set<GgmlType> supported;
  for (uint32_t t = 0; t < 64; ++t) {
    if (GetGgmlTypeInfo(t) && IsComputeSupported(static_cast<GgmlType>(t))) {
      supported.insert(static_cast<GgmlType>(t));
    }
  }
  const std::set<GgmlType> expected = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,
                                       GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K,
                                       GgmlType::kQ6_K, GgmlType::kMXFP4};
  EXPECT_EQ(supported, expected);
}

// ---------------------------------------------------------------------------------------------
// Real files. Facts from ../shared/models/README.md and llama.cpp's tensor naming.

struct ModelFacts {
  const char* file;
  const char* arch;
  int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab;
  bool tied;
  std::vector<GgmlType> must_contain;
  int per_layer_tensors;  // llama 9; qwen2 adds q/k/v bias (12); qwen3 adds q/k norm (11)
};

const std::vector<ModelFacts>& Models() {
  static const std::vector<ModelFacts> kModels = {
      {"tiny-llama-f32.gguf", "llama", 64, 2, 4, 2, 172, 32000, false, {GgmlType::kF32}, 9},
      {"tiny-llama-256-f16.gguf", "llama", 256, 2, 4, 2, 512, 32000, true, {GgmlType::kF16}, 9},
      {"tiny-llama-256-bf16.gguf", "llama", 256, 2, 4, 2, 512, 32000, true, {GgmlType::kBF16}, 9},
      {"tiny-llama-256-q8_0.gguf", "llama", 256, 2, 4, 2, 512, 32000, true, {GgmlType::kQ8_0}, 9},
      {"tiny-llama-256-q4_0.gguf", "llama", 256, 2, 4, 2, 512, 32000, true, {GgmlType::kQ4_0}, 9},
      {"tiny-llama-256-q4_k_m.gguf",
       "llama",
       256,
       2,
       4,
       2,
       512,
       32000,
       true,
       {GgmlType::kQ4_K, GgmlType::kQ6_K},
       9},
      {"tiny-llama-256-q6_k.gguf", "llama", 256, 2, 4, 2, 512, 32000, true, {GgmlType::kQ6_K}, 9},
      {"tiny-qwen2-256-q8_0.gguf", "qwen2", 256, 2, 4, 2, 512, 50257, true, {GgmlType::kQ8_0}, 12},
      {"tiny-qwen2-256-q4_k_m.gguf",
       "qwen2",
       256,
       2,
       4,
       2,
       512,
       50257,
       true,
       {GgmlType::kQ4_K, GgmlType::kQ6_K},
       12},
      {"tiny-qwen3-256-q8_0.gguf", "qwen3", 256, 2, 4, 2, 512, 50257, true, {GgmlType::kQ8_0}, 11},
  };
  return kModels;
}

// Independent of the reader's own checks: every tensor lies inside the file, is aligned, has
// the size its type implies, and no two overlap.
void CheckTensorLayout(const GgufFile& f) {
  std::vector<const TensorInfo*> sorted;
  for (const TensorInfo& t : f.tensors()) {
    SCOPED_TRACE(t.name);
    const GgmlTypeInfo info = *GetGgmlTypeInfo(static_cast<uint32_t>(t.type));
    EXPECT_EQ(t.n_bytes, static_cast<uint64_t>(t.ne[0] / info.block_size) * info.type_size *
                             t.ne[1] * t.ne[2] * t.ne[3]);
    EXPECT_EQ(t.offset % f.alignment(), 0u);
    EXPECT_LE(f.data_offset() + t.offset + t.n_bytes, f.file_size());
    ASSERT_NE(t.data, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % f.alignment(), 0u);
    EXPECT_EQ(f.FindTensor(t.name), &t);
    sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    EXPECT_LE(sorted[i - 1]->offset + sorted[i - 1]->n_bytes, sorted[i]->offset);
    // Consecutive tensors share a base: data pointers differ exactly by the offsets.
    EXPECT_EQ(sorted[i]->data - sorted[i - 1]->data,
              static_cast<ptrdiff_t>(sorted[i]->offset - sorted[i - 1]->offset));
  }
}

TEST(GgufModelsTest, KnownFactsOfEveryModel) {
  UF_REQUIRE_SHARED();
  for (const ModelFacts& m : Models()) {
    SCOPED_TRACE(m.file);
    const std::string path = std::string("../shared/models/") + m.file;
    StatusOr<std::unique_ptr<GgufFile>> opened = GgufFile::Open(path);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    const GgufFile& f = **opened;
    EXPECT_EQ(f.version(), 3u);  // README: GGUF v3 files
    EXPECT_EQ(f.path(), path);
    EXPECT_EQ(f.file_size(), fs::file_size(path));
    const std::string a = m.arch;
    EXPECT_EQ(f.GetString("general.architecture").value(), a);
    EXPECT_EQ(f.GetInt(a + ".embedding_length").value(), m.n_embd);
    EXPECT_EQ(f.GetInt(a + ".block_count").value(), m.n_layer);
    EXPECT_EQ(f.GetInt(a + ".attention.head_count").value(), m.n_head);
    EXPECT_EQ(f.GetInt(a + ".attention.head_count_kv").value(), m.n_head_kv);
    EXPECT_EQ(f.GetInt(a + ".feed_forward_length").value(), m.n_ff);
    const Value* tokens = f.Find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    ASSERT_NE(tokens->AsStringArray(), nullptr);
    EXPECT_EQ(tokens->array_size(), static_cast<size_t>(m.n_vocab));

    const TensorInfo* embd = f.FindTensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->n_dims, 2);
    EXPECT_EQ(embd->ne[0], m.n_embd);
    EXPECT_EQ(embd->ne[1], m.n_vocab);
    EXPECT_EQ(f.FindTensor("output.weight") == nullptr, m.tied);
    EXPECT_EQ(f.tensors().size(),
              static_cast<size_t>(2 + (m.tied ? 0 : 1) + m.per_layer_tensors * m.n_layer));
    const TensorInfo* norm = f.FindTensor("blk.1.attn_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->type, GgmlType::kF32);  // norms stay f32 in every quantization
    EXPECT_EQ(norm->ShapeString(), "[" + std::to_string(m.n_embd) + "]");
    if (a == "qwen2") {
      EXPECT_NE(f.FindTensor("blk.0.attn_q.bias"), nullptr);
    }
    if (a == "qwen3") {
      EXPECT_NE(f.FindTensor("blk.0.attn_k_norm.weight"), nullptr);
    }

    std::set<GgmlType> types;
    for (const TensorInfo& t : f.tensors()) types.insert(t.type);
    for (GgmlType t : m.must_contain) EXPECT_TRUE(types.count(t)) << GgmlTypeName(t);
    CheckTensorLayout(f);
  }
}

TEST(GgufModelsTest, F32ModelDetails) {
  UF_REQUIRE_SHARED();
  auto f = GgufFile::Open("../shared/models/tiny-llama-f32.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const TensorInfo* embd = (*f)->FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::kF32);
  EXPECT_EQ(embd->ShapeString(), "[64, 32000]");
  EXPECT_EQ(embd->n_bytes, 64u * 32000u * 4u);
  EXPECT_EQ(embd->n_elements(), 64 * 32000);
  for (const TensorInfo& t : (*f)->tensors()) EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
  const TensorInfo* out = (*f)->FindTensor("output.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->ShapeString(), "[64, 32000]");
  EXPECT_EQ((*f)->FindTensor("blk.0.ffn_up.weight")->ShapeString(), "[64, 172]");
  EXPECT_EQ((*f)->FindTensor("blk.0.ffn_down.weight")->ShapeString(), "[172, 64]");
  // Vocabulary: SPM Llama 2 ids 0..2 are <unk>, <s>, </s>.
  const auto* tokens = (*f)->Find("tokenizer.ggml.tokens")->AsStringArray();
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[2], "</s>");
  EXPECT_EQ((*f)->GetString("tokenizer.ggml.model").value(), "llama");
  // Wrong-kind and missing lookups.
  EXPECT_EQ((*f)->GetInt("general.architecture").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*f)->GetString("no.such.key").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*f)->GetIntOr("no.such.key", 7), 7);
  EXPECT_EQ((*f)->GetStringOr("general.architecture", "x"), "llama");
  EXPECT_EQ((*f)->FindTensor("no.such.tensor"), nullptr);
}

TEST(GgufModelsTest, FromBufferMatchesOpen) {
  UF_REQUIRE_SHARED();
  const std::string path = "../shared/models/tiny-llama-256-q4_k_m.gguf";
  auto mapped = GgufFile::Open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  std::vector<uint8_t> bytes(fs::file_size(path));
  FILE* fp = std::fopen(path.c_str(), "rb");
  ASSERT_NE(fp, nullptr);
  ASSERT_EQ(std::fread(bytes.data(), 1, bytes.size(), fp), bytes.size());
  std::fclose(fp);
  auto copied = GgufFile::FromBuffer(bytes.data(), bytes.size());
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  const GgufFile& a = **mapped;
  const GgufFile& b = **copied;
  EXPECT_EQ(a.data_offset(), b.data_offset());
  ASSERT_EQ(a.metadata().size(), b.metadata().size());
  for (size_t i = 0; i < a.metadata().size(); ++i) {
    EXPECT_EQ(a.metadata()[i].first, b.metadata()[i].first);
    EXPECT_TRUE(a.metadata()[i].second.storage() == b.metadata()[i].second.storage());
  }
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const TensorInfo& ta = a.tensors()[i];
    const TensorInfo& tb = b.tensors()[i];
    EXPECT_EQ(ta.name, tb.name);
    EXPECT_EQ(ta.offset, tb.offset);
    EXPECT_NE(ta.data, tb.data);
    EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.n_bytes), 0) << ta.name;
    // Both point at the file's bytes for this tensor.
    EXPECT_EQ(std::memcmp(ta.data, bytes.data() + a.data_offset() + ta.offset, ta.n_bytes), 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(tb.data) % b.alignment(), 0u);
  }
  CheckTensorLayout(b);
}

TEST(GgufModelsTest, VocabFiles) {
  UF_REQUIRE_SHARED();
  // Vocabulary sizes of the original models (Llama 2, Phi-3, GPT-2, StarCoder, Falcon,
  // DeepSeek Coder, DeepSeek LLM).
  const struct {
    const char* name;
    size_t n_vocab;
    const char* model;
  } kVocabs[] = {
      {"llama-spm", 32000, "llama"},    {"phi-3", 32064, "llama"},
      {"gpt-2", 50257, "gpt2"},         {"starcoder", 49152, "gpt2"},
      {"falcon", 65024, "gpt2"},        {"deepseek-coder", 32256, "gpt2"},
      {"deepseek-llm", 102400, "gpt2"},
  };
  for (const auto& v : kVocabs) {
    SCOPED_TRACE(v.name);
    const std::string path = std::string("../shared/tokenizer/ggml-vocab-") + v.name + ".gguf";
    const double start = testing_time::ThreadCpuMs();
    auto f = GgufFile::Open(path);
    const double ms = testing_time::ThreadCpuMs() - start;
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    std::printf("%-16s %7.1f ms of CPU to open and parse %llu bytes\n", v.name, ms,
                static_cast<unsigned long long>((*f)->file_size()));
    // Loose bound (sanitizer builds): the point is no quadratic path. CPU time of this thread,
    // so other processes on the cores do not count.
    EXPECT_LT(ms, 5000.0);
    EXPECT_TRUE((*f)->tensors().empty());
    EXPECT_EQ((*f)->GetString("tokenizer.ggml.model").value(), v.model);
    const Value* tokens = (*f)->Find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->array_size(), v.n_vocab);
    for (const char* parallel : {"tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
      if (const Value* p = (*f)->Find(parallel)) {
        EXPECT_EQ(p->array_size(), v.n_vocab);
      }
    }
    if (std::string(v.model) == "gpt2") {
      EXPECT_TRUE((*f)->GetString("tokenizer.ggml.pre").ok());
      const Value* merges = (*f)->Find("tokenizer.ggml.merges");
      ASSERT_NE(merges, nullptr);
      EXPECT_GT(merges->array_size(), 1000u);
    }
  }
}

TEST(GgufModelsTest, OpenErrorsNameThePath) {
  UF_REQUIRE_SHARED();
  auto missing = GgufFile::Open("../shared/models/does-not-exist.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("does-not-exist.gguf"), std::string::npos);
  auto dir = GgufFile::Open("../shared/models");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("regular file"), std::string::npos);
  // A text file: bad magic, and the message names the file.
  auto text = GgufFile::Open("../shared/models/README.md");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("README.md"), std::string::npos);
  EXPECT_NE(text.status().message().find("magic"), std::string::npos);
}

TEST(GgufDumpTest, DescribesModel) {
  UF_REQUIRE_SHARED();
  auto f = GgufFile::Open("../shared/models/tiny-llama-256-q4_k_m.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const std::string brief = DescribeGguf(**f, /*full=*/false);
  EXPECT_NE(brief.find("general.architecture"), std::string::npos);
  EXPECT_NE(brief.find("\"llama\""), std::string::npos);
  EXPECT_NE(brief.find("arr[str,32000]"), std::string::npos);
  EXPECT_NE(brief.find("(32000 items)"), std::string::npos);
  EXPECT_NE(brief.find("token_embd.weight"), std::string::npos);
  EXPECT_NE(brief.find("[256, 32000]"), std::string::npos);
  EXPECT_NE(brief.find("q4_K"), std::string::npos);
  EXPECT_NE(brief.find("q6_K"), std::string::npos);
  uint64_t total = 0;
  for (const TensorInfo& t : (*f)->tensors()) total += t.n_bytes;
  EXPECT_NE(brief.find(" " + std::to_string(total) + " bytes"), std::string::npos);
  EXPECT_LT(brief.size(), 20000u);  // abbreviated: no 32000-token dump
  const std::string full = DescribeGguf(**f, /*full=*/true);
  EXPECT_GT(full.size(), 200000u);  // every token printed
  EXPECT_EQ(full.find("(32000 items)"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Values

TEST(GgufValueTest, Accessors) {
  EXPECT_EQ(Value::U32(7).AsInt(), 7);
  EXPECT_EQ(Value::I32(-7).AsInt(), -7);
  EXPECT_FALSE(Value::U64(std::numeric_limits<uint64_t>::max()).AsInt().has_value());
  EXPECT_EQ(Value::U64(std::numeric_limits<uint64_t>::max()).AsFloat(), 18446744073709551615.0);
  EXPECT_EQ(Value::Bool(true).AsInt(), 1);
  EXPECT_EQ(Value::F32(0.5f).AsFloat(), 0.5);
  EXPECT_FALSE(Value::F32(0.5f).AsInt().has_value());
  EXPECT_EQ(Value::U32(2).AsBool(), true);
  EXPECT_EQ(Value::String("x").AsString() != nullptr, true);
  EXPECT_EQ(Value::String("x").AsInt(), std::nullopt);
  EXPECT_EQ(Value::U32(1).AsString(), nullptr);
  const Value ints = Value::I32Array({1, -2, 3});
  EXPECT_TRUE(ints.is_array());
  EXPECT_EQ(ints.array_type(), ValueType::kInt32);
  EXPECT_EQ(ints.array_size(), 3u);
  EXPECT_EQ(ints.AsIntArray(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(ints.AsFloatArray(), (std::vector<double>{1, -2, 3}));
  EXPECT_EQ(ints.AsStringArray(), nullptr);
  EXPECT_EQ(ints.AsInt(), std::nullopt);
  const Value big(ValueType::kArray, ValueType::kUint64,
                  std::vector<uint64_t>{1, std::numeric_limits<uint64_t>::max()});
  EXPECT_FALSE(big.AsIntArray().has_value());
  EXPECT_EQ(Value::U32(5).array_size(), 0u);
}

TEST(GgufValueTest, DebugString) {
  EXPECT_EQ(Value::String("a\"b\n\x01").DebugString(), "\"a\\\"b\\n\\x01\"");
  EXPECT_EQ(Value::F32(0.1f).DebugString(), "0.1");
  EXPECT_EQ(Value(ValueType::kFloat64, ValueType::kUint8, 0.1).DebugString(), "0.1");
  EXPECT_EQ(Value::I32(-3).DebugString(), "-3");
  EXPECT_EQ(Value::Bool(false).DebugString(), "false");
  EXPECT_EQ(Value::I32Array({1, 2, 3, 4, 5}).DebugString(3), "[1, 2, 3, ... (5 items)]");
  EXPECT_EQ(Value::I32Array({1, 2}).DebugString(3), "[1, 2]");
  EXPECT_EQ(Value::StringArray({"x", "y"}).DebugString(1), "[\"x\", ... (2 items)]");
  EXPECT_EQ(Value::StringArray({}).DebugString(), "[]");
}

// ---------------------------------------------------------------------------------------------
// Writer round trips

// One value of every scalar type at its extremes, and an array of every element type.
std::vector<std::pair<std::string, Value>> AllValueKinds() {
  using V = Value;
  using T = ValueType;
  constexpr T kU8 = T::kUint8;  // array_type placeholder for scalars
  std::vector<std::pair<std::string, Value>> kv = {
      {"t.u8", V(T::kUint8, kU8, uint64_t{255})},
      {"t.i8", V(T::kInt8, kU8, int64_t{-128})},
      {"t.u16", V(T::kUint16, kU8, uint64_t{65535})},
      {"t.i16", V(T::kInt16, kU8, int64_t{-32768})},
      {"t.u32", V::U32(4294967295u)},
      {"t.i32", V::I32(std::numeric_limits<int32_t>::min())},
      {"t.f32", V::F32(-1.25e-7f)},
      {"t.bool", V::Bool(true)},
      {"t.str", V::String(std::string("h\xC3\xA9llo\0world", 12))},
      {"t.empty_str", V::String("")},
      {"t.u64", V::U64(std::numeric_limits<uint64_t>::max())},
      {"t.i64", V(T::kInt64, kU8, std::numeric_limits<int64_t>::min())},
      {"t.f64", V(T::kFloat64, kU8, 3.141592653589793)},
      {"a.u8", V(T::kArray, T::kUint8, std::vector<uint64_t>{0, 1, 255})},
      {"a.i8", V(T::kArray, T::kInt8, std::vector<int64_t>{-128, 0, 127})},
      {"a.u16", V(T::kArray, T::kUint16, std::vector<uint64_t>{65535})},
      {"a.i16", V(T::kArray, T::kInt16, std::vector<int64_t>{-32768, 32767})},
      {"a.u32", V(T::kArray, T::kUint32, std::vector<uint64_t>{4294967295u, 0})},
      {"a.i32", V::I32Array({std::numeric_limits<int32_t>::min(), 5})},
      {"a.f32", V::F32Array({0.5, -2.0, static_cast<double>(0.1f)})},
      {"a.bool", V(T::kArray, T::kBool, std::vector<uint64_t>{1, 0, 1})},
      {"a.str", V::StringArray({"", "<s>", "\xE2\x96\x81the", std::string(300, 'x')})},
      {"a.u64", V(T::kArray, T::kUint64, std::vector<uint64_t>{~uint64_t{0}})},
      {"a.i64", V(T::kArray, T::kInt64, std::vector<int64_t>{std::numeric_limits<int64_t>::min()})},
      {"a.f64", V(T::kArray, T::kFloat64, std::vector<double>{1e300, -0.0})},
      {"a.empty", V(T::kArray, T::kInt32, std::vector<int64_t>{})},
  };
  return kv;
}

struct TestTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
};

// Tensor sizes chosen so most need padding (e.g. I8 [5] = 5 bytes, Q4_0 [64,3] = 108 bytes).
const std::vector<TestTensor>& TestTensors() {
  static const std::vector<TestTensor> kTensors = {
      {"f32", GgmlType::kF32, {8, 3}},         {"f16", GgmlType::kF16, {7}},
      {"q4_0", GgmlType::kQ4_0, {64, 3}},      {"q4_k", GgmlType::kQ4_K, {256, 2, 1, 3}},
      {"q6_k", GgmlType::kQ6_K, {256, 1, 2}},  {"i8", GgmlType::kI8, {5}},
      {"bf16", GgmlType::kBF16, {3, 1, 1, 1}}, {"q8_0", GgmlType::kQ8_0, {32}},
  };
  return kTensors;
}

// Deterministic bytes distinct per tensor.
std::vector<uint8_t> TensorBytes(size_t index, size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 31 + index * 7 + 1);
  return b;
}

size_t TensorSize(const TestTensor& t) {
  size_t rows = 1;
  for (size_t d = 1; d < t.ne.size(); ++d) rows *= static_cast<size_t>(t.ne[d]);
  return GgmlRowBytes(t.type, t.ne[0]) * rows;
}

// Fills half the tensors through the callback and half from a pointer.
GgufWriter MakeWriter(uint32_t version, uint64_t alignment,
                      const std::vector<std::vector<uint8_t>>& data) {
  GgufWriter w(version, alignment);
  for (auto& [k, v] : AllValueKinds()) w.Set(k, v);
  for (size_t i = 0; i < TestTensors().size(); ++i) {
    const TestTensor& t = TestTensors()[i];
    Status s;
    if (i % 2 == 0) {
      s = w.AddTensor(t.name, t.type, t.ne, [&data, i](uint8_t* dst, size_t n) {
        ASSERT_EQ(n, data[i].size());
        std::memcpy(dst, data[i].data(), n);
      });
    } else {
      s = w.AddTensor(t.name, t.type, t.ne, data[i].data());
    }
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return w;
}

void CheckRoundTrip(const GgufFile& f, uint32_t version, uint64_t alignment,
                    const std::vector<std::vector<uint8_t>>& data) {
  EXPECT_EQ(f.version(), version);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  const auto expected = AllValueKinds();
  // Insertion order, then general.alignment appended as uint32.
  ASSERT_EQ(f.metadata().size(), expected.size() + 1);
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [key, value] = f.metadata()[i];
    SCOPED_TRACE(key);
    EXPECT_EQ(key, expected[i].first);
    EXPECT_EQ(value.type(), expected[i].second.type());
    if (value.is_array()) {
      EXPECT_EQ(value.array_type(), expected[i].second.array_type());
    }
    EXPECT_TRUE(value.storage() == expected[i].second.storage()) << value.DebugString();
  }
  EXPECT_EQ(f.metadata().back().first, "general.alignment");
  EXPECT_EQ(f.metadata().back().second.type(), ValueType::kUint32);
  EXPECT_EQ(f.GetInt("general.alignment").value(), static_cast<int64_t>(alignment));
  ASSERT_EQ(f.tensors().size(), TestTensors().size());
  for (size_t i = 0; i < TestTensors().size(); ++i) {
    const TestTensor& want = TestTensors()[i];
    const TensorInfo& got = f.tensors()[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.type, want.type);
    ASSERT_EQ(got.n_dims, static_cast<int>(want.ne.size()));
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(got.ne[d], d < got.n_dims ? want.ne[d] : 1);
    }
    ASSERT_EQ(got.n_bytes, data[i].size());
    EXPECT_EQ(std::memcmp(got.data, data[i].data(), data[i].size()), 0);
    EXPECT_EQ(got.offset % alignment, 0u);
  }
  CheckTensorLayout(f);
}

TEST(GgufWriterTest, RoundTripAllValueTypesAndAlignments) {
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < TestTensors().size(); ++i) {
    data.push_back(TensorBytes(i, TensorSize(TestTensors()[i])));
  }
  for (uint32_t version : {2u, 3u}) {
    for (uint64_t alignment : {1u, 8u, 32u, 64u, 256u, 4096u}) {
      SCOPED_TRACE("v" + std::to_string(version) + " alignment " + std::to_string(alignment));
      GgufWriter w = MakeWriter(version, alignment, data);
      StatusOr<std::vector<uint8_t>> bytes = w.WriteToBuffer();
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      EXPECT_EQ(bytes->size() % alignment, 0u);  // the last tensor is padded too
      auto f = GgufFile::FromBuffer(bytes->data(), bytes->size());
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      CheckRoundTrip(**f, version, alignment, data);

      // Re-encoding what was read gives the same bytes (general.alignment keeps its place).
      GgufWriter again(version, alignment);
      for (const auto& [k, v] : (*f)->metadata()) again.Set(k, v);
      for (const TensorInfo& t : (*f)->tensors()) {
        ASSERT_TRUE(
            again.AddTensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data)
                .ok());
      }
      auto bytes2 = again.WriteToBuffer();
      ASSERT_TRUE(bytes2.ok()) << bytes2.status().ToString();
      EXPECT_TRUE(*bytes2 == *bytes);
    }
  }
}

TEST(GgufWriterTest, WriteToFileIsAtomicAndMatchesBuffer) {
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < TestTensors().size(); ++i) {
    data.push_back(TensorBytes(i, TensorSize(TestTensors()[i])));
  }
  const fs::path dir = fs::temp_directory_path() / ("gguf_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "model.gguf").string();
  GgufWriter w = MakeWriter(3, 64, data);
  ASSERT_TRUE(w.WriteToFile(path).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  CheckRoundTrip(**f, 3, 64, data);
  auto buffer = w.WriteToBuffer();
  ASSERT_TRUE(buffer.ok());
  ASSERT_EQ(fs::file_size(path), buffer->size());
  EXPECT_EQ(
      std::memcmp((*f)->tensors()[0].data - (*f)->data_offset(), buffer->data(), buffer->size()),
      0);

  // A value that cannot be encoded fails before anything replaces the existing file.
  GgufWriter bad(3, 32);
  bad.Set("bad.u8", Value(ValueType::kUint8, ValueType::kUint8, uint64_t{256}));
  Status s = bad.WriteToFile(path);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad.u8"), std::string::npos) << s.message();
  EXPECT_TRUE(GgufFile::Open(path).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // Unwritable location.
  EXPECT_FALSE(w.WriteToFile((dir / "no/such/dir/x.gguf").string()).ok());
  fs::remove_all(dir);
}

TEST(GgufWriterTest, RewritesRealModelExactly) {
  UF_REQUIRE_SHARED();
  // Re-encoding a model produced by another engine's writer: everything but the placement of
  // general.alignment is defined by the format, so compare after re-reading.
  auto f = GgufFile::Open("../shared/models/tiny-llama-256-q4_0.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  GgufWriter w(3, (*f)->alignment());
  for (const auto& [k, v] : (*f)->metadata()) w.Set(k, v);
  for (const TensorInfo& t : (*f)->tensors()) {
    ASSERT_TRUE(
        w.AddTensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data).ok());
  }
  auto bytes = w.WriteToBuffer();
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto g = GgufFile::FromBuffer(bytes->data(), bytes->size());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const auto& [k, v] : (*f)->metadata()) {
    const Value* got = (*g)->Find(k);
    ASSERT_NE(got, nullptr) << k;
    EXPECT_EQ(got->type(), v.type()) << k;
    EXPECT_TRUE(got->storage() == v.storage()) << k;
  }
  ASSERT_EQ((*g)->tensors().size(), (*f)->tensors().size());
  for (size_t i = 0; i < (*f)->tensors().size(); ++i) {
    const TensorInfo& a = (*f)->tensors()[i];
    const TensorInfo& b = (*g)->tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.ShapeString(), b.ShapeString());
    EXPECT_EQ(a.offset, b.offset);  // both writers pack in order with the same padding
    ASSERT_EQ(a.n_bytes, b.n_bytes);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.n_bytes), 0) << a.name;
  }
}

TEST(GgufWriterTest, RejectsBadTensorsAndValues) {
  GgufWriter w;
  const uint8_t dummy[64] = {};
  auto expect_error = [](const Status& s, const char* word) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(word), std::string::npos) << s.message();
  };
  expect_error(w.AddTensor("q", GgmlType::kQ4_0, {16}, dummy), "block size");
  expect_error(w.AddTensor("z", GgmlType::kF32, {4, 0}, dummy), "positive");
  expect_error(w.AddTensor("d", GgmlType::kF32, {1, 1, 1, 1, 1}, dummy), "n_dims");
  expect_error(w.AddTensor("d", GgmlType::kF32, {}, dummy), "n_dims");
  expect_error(w.AddTensor("t", static_cast<GgmlType>(999), {4}, dummy), "unknown tensor type");
  expect_error(w.AddTensor("", GgmlType::kF32, {4}, dummy), "empty");
  expect_error(w.AddTensor("o", GgmlType::kF32, {int64_t{1} << 40, int64_t{1} << 40}, dummy),
               "overflow");
  EXPECT_TRUE(w.AddTensor("ok", GgmlType::kF32, {4}, dummy).ok());
  expect_error(w.AddTensor("ok", GgmlType::kF32, {4}, dummy), "duplicate");

  const struct {
    const char* key;
    Value value;
  } kBad[] = {
      {"i8.range", Value(ValueType::kInt8, ValueType::kUint8, int64_t{128})},
      {"u32.neg", Value(ValueType::kUint32, ValueType::kUint8, int64_t{-1})},
      {"str.kind", Value(ValueType::kString, ValueType::kUint8, uint64_t{1})},
      {"bool.two", Value(ValueType::kBool, ValueType::kUint8, uint64_t{2})},
      {"nested", Value(ValueType::kArray, ValueType::kArray, std::vector<int64_t>{1})},
      {"arr.kind", Value(ValueType::kArray, ValueType::kString, std::vector<int64_t>{1})},
      {"arr.range", Value(ValueType::kArray, ValueType::kUint16, std::vector<int64_t>{70000})},
  };
  for (const auto& bad : kBad) {
    GgufWriter vw;
    vw.Set(bad.key, bad.value);
    auto out = vw.WriteToBuffer();
    ASSERT_FALSE(out.ok()) << bad.key;
    EXPECT_NE(out.status().message().find(bad.key), std::string::npos) << out.status().message();
  }
  // Set replaces in place.
  GgufWriter r;
  r.Set("a", Value::U32(1));
  r.Set("b", Value::U32(2));
  r.Set("a", Value::String("x"));
  auto out = r.WriteToBuffer();
  ASSERT_TRUE(out.ok());
  auto f = GgufFile::FromBuffer(out->data(), out->size());
  ASSERT_TRUE(f.ok());
  ASSERT_EQ((*f)->metadata().size(), 3u);
  EXPECT_EQ((*f)->metadata()[0].first, "a");
  EXPECT_EQ((*f)->GetString("a").value(), "x");
}

// Writes the fuzzer's seed corpus. Run by hand:
//   build/gguf_test --gtest_also_run_disabled_tests --gtest_filter='*WriteFuzzSeeds*'
TEST(GgufWriterTest, DISABLED_WriteFuzzSeeds) {
  const fs::path dir = "fuzz/corpus/gguf";
  fs::create_directories(dir);
  auto save = [&](const char* name, const GgufWriter& w) {
    auto bytes = w.WriteToBuffer();
    ASSERT_TRUE(bytes.ok());
    ASSERT_LT(bytes->size(), 20000u);
    FILE* fp = std::fopen((dir / name).c_str(), "wb");
    ASSERT_NE(fp, nullptr);
    std::fwrite(bytes->data(), 1, bytes->size(), fp);
    std::fclose(fp);
  };
  save("empty.gguf", GgufWriter());
  GgufWriter values(3, 32);
  for (auto& [k, v] : AllValueKinds()) values.Set(k, v);
  save("values.gguf", values);
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < TestTensors().size(); ++i) {
    data.push_back(TensorBytes(i, TensorSize(TestTensors()[i])));
  }
  save("tensors_align64.gguf", MakeWriter(3, 64, data));
  save("tensors_v2_align8.gguf", MakeWriter(2, 8, data));
  GgufWriter model(3, 32);
  model.Set("general.architecture", Value::String("llama"));
  model.Set("llama.embedding_length", Value::U32(32));
  model.Set("tokenizer.ggml.tokens", Value::StringArray({"<unk>", "<s>", "</s>", "a", "b"}));
  model.Set("tokenizer.ggml.scores", Value::F32Array({0, 0, 0, -1, -2}));
  model.Set("tokenizer.ggml.token_type", Value::I32Array({2, 3, 3, 1, 1}));
  ASSERT_TRUE(model
                  .AddTensor("token_embd.weight", GgmlType::kQ8_0, {32, 5},
                             [](uint8_t* d, size_t n) { std::memset(d, 0x11, n); })
                  .ok());
  ASSERT_TRUE(model
                  .AddTensor("output_norm.weight", GgmlType::kF32, {32},
                             [](uint8_t* d, size_t n) { std::memset(d, 0, n); })
                  .ok());
  save("tiny_model.gguf", model);
}

}  // namespace
}  // namespace uf::gguf
