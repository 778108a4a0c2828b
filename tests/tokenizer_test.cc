// Tokenizer tests against reference data: llama.cpp's vocab test vectors (token ids produced by
// the models' own Hugging Face tokenizers) and the reference engine's prompt tokens in golden/.
// Token ids must match exactly: there is no tolerance in tokenization.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_time.h"
#include "gguf/gguf.h"
#include "shared_data.h"
#include "tokenizer/utf8.h"

namespace uf {
namespace {

namespace fs = std::filesystem;

const char kVocabDir[] = "../shared/tokenizer";
const char kSeparator[] = "\n__ggml_vocab_test__\n";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Loads each file once per test binary: the 100k-token vocabularies take ~100 ms to build.
const Tokenizer& Load(const std::string& path) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(path);
  if (it == cache.end()) {
    auto file = gguf::GgufFile::Open(path);
    UF_CHECK(file.ok()) << file.status().ToString();
    auto tok = Tokenizer::FromGguf(**file);
    UF_CHECK(tok.ok()) << path << ": " << tok.status().ToString();
    it = cache.emplace(path, std::move(*tok)).first;
  }
  return *it->second;
}

const Tokenizer& LoadVocab(const std::string& name) {
  return Load(std::string(kVocabDir) + "/ggml-vocab-" + name + ".gguf");
}

std::vector<std::string> VocabNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kVocabDir, ec)) {
    const std::string file = entry.path().filename().string();
    const std::string prefix = "ggml-vocab-";
    const std::string suffix = ".gguf";
    if (file.rfind(prefix, 0) == 0 && file.size() > prefix.size() + suffix.size() &&
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) == 0) {
      names.push_back(file.substr(prefix.size(), file.size() - prefix.size() - suffix.size()));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// The .inp strings split on the separator; the .out lines hold the expected ids.
std::vector<VocabCase> ReadVocabCases(const std::string& name) {
  const std::string base = std::string(kVocabDir) + "/ggml-vocab-" + name + ".gguf";
  const std::string inp = ReadFile(base + ".inp");
  const std::string out = ReadFile(base + ".out");
  std::vector<std::string> texts;
  for (size_t pos = 0;;) {
    const size_t next = inp.find(kSeparator, pos);
    texts.push_back(inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + sizeof(kSeparator) - 1;
  }
  std::vector<std::vector<int32_t>> id_lines;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::vector<int32_t> ids;
    for (int32_t id; fields >> id;) ids.push_back(id);
    id_lines.push_back(ids);
  }
  // The final separator leaves one empty string with no .out line after the last newline.
  while (id_lines.size() < texts.size()) id_lines.emplace_back();
  UF_CHECK_EQ(id_lines.size(), texts.size()) << name;
  std::vector<VocabCase> cases;
  for (size_t i = 0; i < texts.size(); ++i) cases.push_back({texts[i], id_lines[i]});
  return cases;
}

std::string Show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const tokenizer::Utf8Scan scan = tokenizer::ScanUtf8(s.substr(i));
    if (scan.kind != tokenizer::Utf8Kind::kValid) return false;
    i += scan.length;
  }
  return true;
}

std::string StreamDecode(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  StreamingDecoder decoder(tok);
  std::string out;
  for (int32_t id : ids) {
    const std::string part = decoder.Push(id);
    EXPECT_TRUE(IsValidUtf8(part));
    out += part;
  }
  out += decoder.Flush();
  return out;
}

TEST(TokenizerVocabs, AllSharedVocabsPresent) {
  UF_REQUIRE_SHARED();
  // llama-spm, phi-3, gpt-2, starcoder, falcon, deepseek-coder, deepseek-llm.
  EXPECT_GE(VocabNames().size(), 7u);
}

class VocabTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabTest, MatchesReferenceIds) {
  UF_REQUIRE_SHARED();
  const Tokenizer& tok = LoadVocab(GetParam());
  const std::vector<VocabCase> cases = ReadVocabCases(GetParam());
  ASSERT_GT(cases.size(), 10u);
  int passed = 0;
  for (const VocabCase& c : cases) {
    const std::vector<int32_t> ids = tok.Encode(c.text, /*add_bos=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, c.ids) << "text: '" << c.text << "'\n got: " << Show(ids)
                          << "\nwant: " << Show(c.ids);
    passed += ids == c.ids;
  }
  std::cout << GetParam() << ": " << passed << "/" << cases.size() << " strings match\n";
}

TEST_P(VocabTest, DecodeRoundTrips) {
  UF_REQUIRE_SHARED();
  const Tokenizer& tok = LoadVocab(GetParam());
  for (const VocabCase& c : ReadVocabCases(GetParam())) {
    // Byte-level BPE is lossless. SPM loses nothing either: Decode drops exactly the "▁" that
    // the space prefix added.
    EXPECT_EQ(tok.Decode(tok.Encode(c.text, false, false)), c.text);
    // With BOS, llama.cpp's rule keeps the prefix space of the first word after BOS.
    const std::string with_bos = tok.Decode(tok.Encode(c.text, true, false));
    if (tok.add_bos_default() && tok.add_space_prefix() && !c.text.empty()) {
      EXPECT_EQ(with_bos, " " + c.text);
    } else {
      EXPECT_EQ(with_bos, c.text);
    }
  }
}

TEST_P(VocabTest, StreamingMatchesDecode) {
  UF_REQUIRE_SHARED();
  const Tokenizer& tok = LoadVocab(GetParam());
  for (const VocabCase& c : ReadVocabCases(GetParam())) {
    for (bool add_bos : {false, true}) {
      const std::vector<int32_t> ids = tok.Encode(c.text, add_bos, false);
      EXPECT_EQ(StreamDecode(tok, ids), tok.Decode(ids)) << c.text;
    }
  }
}

TEST_P(VocabTest, InvalidUtf8DoesNotCrash) {
  UF_REQUIRE_SHARED();
  const Tokenizer& tok = LoadVocab(GetParam());
  const std::string inputs[] = {
      std::string("\xff\xfe abc \xe2\x82", 10),
      std::string("\x80", 1),
      std::string("a\xc0\xafz\xed\xa0\x80!", 8),
      std::string("\xf4\x90\x80\x80 x", 6),
      std::string("\0 nul", 5),
      "\xe2\x82",  // truncated euro sign
  };
  // Vocabularies with a token for every byte (SPM byte fallback, GPT-2) keep invalid bytes as
  // byte tokens, so decoding gives the input back. Others lack the bytes that never occur in
  // UTF-8 (0xC0, 0xFF, ...) and, like llama.cpp, drop them.
  int n_bytes = 0;
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    n_bytes += tok.Decode(tok.Encode(byte, false, false)) == byte;
  }
  std::cout << GetParam() << ": " << n_bytes << "/256 single bytes round-trip\n";
  for (const std::string& s : inputs) {
    for (bool parse_special : {false, true}) {
      const std::vector<int32_t> ids = tok.Encode(s, false, parse_special);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
      if (n_bytes == 256) {
        EXPECT_EQ(tok.Decode(ids), s);
      }
      EXPECT_TRUE(IsValidUtf8(StreamDecode(tok, ids)));
    }
  }
  if (GetParam() == "gpt-2" || GetParam() == "llama-spm") {
    EXPECT_EQ(n_bytes, 256);
  }
}

TEST_P(VocabTest, LongTextEncodesFast) {
  UF_REQUIRE_SHARED();
  const Tokenizer& tok = LoadVocab(GetParam());
  std::string text;
  for (const VocabCase& c : ReadVocabCases(GetParam())) text += c.text + " ";
  while (text.size() < 10000) text += text;
  text.resize(10000);
  while (!IsValidUtf8(text)) text.pop_back();
  const double start = testing_time::ThreadCpuMs();
  const std::vector<int32_t> ids = tok.Encode(text, false, true);
  const double ms = testing_time::ThreadCpuMs() - start;
  std::cout << GetParam() << ": " << text.size() << " bytes -> " << ids.size() << " tokens in "
            << ms << " ms of CPU\n";
  EXPECT_EQ(tok.Decode(ids), text);
  // Milliseconds in an optimized build; the bound leaves room for sanitizer builds. CPU time of
  // this thread, so other processes on the cores do not count.
  EXPECT_LT(ms, 500.0);
}

INSTANTIATE_TEST_SUITE_P(SharedVocabs, VocabTest, ::testing::ValuesIn(VocabNames()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });
// No vocabularies without ../shared; TokenizerVocabs.AllSharedVocabsPresent fails when it is
// there but incomplete.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(VocabTest);

// golden/<model>.jsonl holds the reference engine's tokenization of each prompt for the model
// in models/<model>.gguf (SPM Llama vocab and GPT-2 BPE vocab of the qwen models).
TEST(TokenizerGolden, PromptTokensMatchReference) {
  UF_REQUIRE_SHARED();
  int n_files = 0;
  int n_prompts = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("../shared/golden", ec)) {
    if (entry.path().extension() != ".jsonl") continue;
    const std::string model = "../shared/models/" + entry.path().stem().string() + ".gguf";
    ASSERT_TRUE(fs::exists(model)) << model;
    const Tokenizer& tok = Load(model);
    ++n_files;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const nlohmann::json j = nlohmann::json::parse(line);
      const std::string prompt = j.at("prompt").get<std::string>();
      const std::vector<int32_t> want = j.at("prompt_tokens").get<std::vector<int32_t>>();
      const std::vector<int32_t> got = tok.Encode(prompt, /*add_bos=*/true, false);
      EXPECT_EQ(got, want) << model << " prompt: '" << prompt.substr(0, 80) << "'";
      ++n_prompts;
    }
  }
  std::cout << n_prompts << " prompts in " << n_files << " golden files\n";
  EXPECT_GE(n_files, 10);
  EXPECT_GE(n_prompts, 10 * 5);
}

TEST(TokenizerSpecial, MetadataOfSpmVocab) {
  UF_REQUIRE_SHARED();
  const Tokenizer& tok = LoadVocab("llama-spm");
  EXPECT_EQ(tok.vocab_size(), 32000);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.eot_id(), -1);
  EXPECT_TRUE(tok.add_bos_default());
  EXPECT_TRUE(tok.IsEndOfGeneration(2));
  EXPECT_FALSE(tok.IsEndOfGeneration(1));
  EXPECT_EQ(tok.TokenId("\xE2\x96\x81Hello"), 15043);
  EXPECT_EQ(tok.TokenToPiece(15043), " Hello");
  EXPECT_EQ(tok.TokenToPiece(13), "\n");  // <0x0A>
  EXPECT_EQ(tok.TokenToPiece(-1), "");
  EXPECT_EQ(tok.TokenToPiece(32000), "");
  EXPECT_EQ(tok.Encode("Hello", true, false), (std::vector<int32_t>{1, 15043}));
  EXPECT_EQ(tok.Decode({15043, 3186}), "Hello world");
  EXPECT_EQ(tok.Decode({1, 15043, 3186}), " Hello world");
}

TEST(TokenizerSpecial, MetadataOfBpeVocab) {
  UF_REQUIRE_SHARED();
  const Tokenizer& tok = LoadVocab("gpt-2");
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.bos_id(), 50256);
  EXPECT_EQ(tok.eos_id(), 50256);
  EXPECT_EQ(tok.eot_id(), 50256);  // <|endoftext|>
  EXPECT_FALSE(tok.add_bos_default());
  EXPECT_TRUE(tok.IsEndOfGeneration(50256));
  EXPECT_EQ(tok.Encode("Hello", true, false), tok.Encode("Hello", false, false));
  EXPECT_EQ(tok.TokenToPiece(50256), "<|endoftext|>");
  EXPECT_EQ(tok.TokenToPiece(*tok.TokenId("\xC4\xA0world")), " world");  // "Ġworld"
}

TEST(TokenizerSpecial, ParsesControlTokensOnlyWhenAsked) {
  UF_REQUIRE_SHARED();
  const Tokenizer& tok = LoadVocab("gpt-2");
  const std::string text = "Hello<|endoftext|> world";
  std::vector<int32_t> want = tok.Encode("Hello", false, false);
  want.push_back(50256);
  for (int32_t id : tok.Encode(" world", false, false)) want.push_back(id);
  EXPECT_EQ(tok.Encode(text, false, true), want);

  const std::vector<int32_t> plain = tok.Encode(text, false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
  EXPECT_GT(plain.size(), want.size());
  EXPECT_EQ(tok.Decode(plain), text);
  EXPECT_EQ(tok.Decode(tok.Encode(text, false, true)), text);
  // Adjacent and repeated special tokens.
  EXPECT_EQ(tok.Encode("<|endoftext|><|endoftext|>", false, true),
            (std::vector<int32_t>{50256, 50256}));
}

TEST(TokenizerSpecial, SpmSpacePrefixAfterSpecialToken) {
  UF_REQUIRE_SHARED();
  const Tokenizer& tok = LoadVocab("llama-spm");
  // Each text fragment gets the "▁" prefix, as llama.cpp does after a special token.
  std::vector<int32_t> want = {1};
  for (int32_t id : tok.Encode("Hello", false, false)) want.push_back(id);
  want.push_back(2);
  EXPECT_EQ(tok.Encode("<s>Hello</s>", false, true), want);
  const std::vector<int32_t> plain = tok.Encode("<s>Hello</s>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
}

TEST(TokenizerSpecial, Phi3SpecialTokensStripFollowingSpace) {
  UF_REQUIRE_SHARED();
  // llama.cpp (and Phi-3's tokenizer.json, rstrip = true) drop the white space after Phi-3's
  // chat tokens, but not after <s>.
  const Tokenizer& tok = LoadVocab("phi-3");
  const int32_t user = *tok.TokenId("<|user|>");
  std::vector<int32_t> want = {user};
  for (int32_t id : tok.Encode("Hello", false, false)) want.push_back(id);
  EXPECT_EQ(tok.Encode("<|user|>\n  Hello", false, true), want);
  EXPECT_EQ(tok.Encode("<|user|>\n", false, true), (std::vector<int32_t>{user}));
  std::vector<int32_t> with_bos = {1};
  for (int32_t id : tok.Encode("\nHello", false, false)) with_bos.push_back(id);
  EXPECT_EQ(tok.Encode("<s>\nHello", false, true), with_bos);
}

TEST(TokenizerSpecial, UserDefinedTokensAlwaysMatch) {
  UF_REQUIRE_SHARED();
  // deepseek-coder's <|EOT|> is user-defined (type 4): Hugging Face and llama.cpp split it out
  // even without parse_special; its control tokens are not.
  const Tokenizer& tok = LoadVocab("deepseek-coder");
  const int32_t eot = *tok.TokenId("<|EOT|>");
  EXPECT_EQ(tok.token_type(eot), TokenType::kUserDefined);
  EXPECT_EQ(tok.Encode("<|EOT|>", false, false), (std::vector<int32_t>{eot}));
  const int32_t bos = tok.bos_id();
  const std::string bos_text(tok.TokenText(bos));
  EXPECT_EQ(tok.Encode(bos_text, false, true), (std::vector<int32_t>{bos}));
  EXPECT_NE(tok.Encode(bos_text, false, false), (std::vector<int32_t>{bos}));
}

TEST(TokenizerStreaming, HoldsBackSplitCharacters) {
  UF_REQUIRE_SHARED();
  const Tokenizer& spm = LoadVocab("llama-spm");
  // U+2019 RIGHT SINGLE QUOTATION MARK as three byte-fallback tokens.
  const int32_t b0 = *spm.TokenId("<0xE2>");
  const int32_t b1 = *spm.TokenId("<0x80>");
  const int32_t b2 = *spm.TokenId("<0x99>");
  StreamingDecoder d(spm);
  EXPECT_EQ(d.Push(15043), "Hello");  // leading space of the first piece dropped
  EXPECT_EQ(d.Push(b0), "");
  EXPECT_EQ(d.Push(b1), "");
  EXPECT_EQ(d.Push(b2), "\xE2\x80\x99");
  EXPECT_EQ(d.Push(3186), " world");
  EXPECT_EQ(d.Flush(), "");
  // An incomplete sequence at the end comes out as U+FFFD.
  EXPECT_EQ(d.Push(b0), "");
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");

  // Byte-level BPE: GPT-2 spells this emoji with pieces that end mid-character.
  const Tokenizer& bpe = LoadVocab("gpt-2");
  const std::string emoji = "\xF0\x9F\xA6\x99";  // U+1F999
  const std::vector<int32_t> ids = bpe.Encode(emoji, false, false);
  ASSERT_GT(ids.size(), 1u);
  StreamingDecoder d2(bpe);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string part = d2.Push(ids[i]);
    if (i + 1 < ids.size()) {
      EXPECT_EQ(part, "");
    }
    out += part;
  }
  EXPECT_EQ(out, emoji);
}

// Small hand-made vocabularies pin down the merge rules themselves.
TEST(TokenizerConfig, SpmMergesHighestScoreLeftmostFirst) {
  TokenizerConfig c;
  c.model = TokenizerConfig::Model::kSpm;
  c.tokens = {"<unk>",
              "<s>",
              "</s>",
              "\xE2\x96\x81",
              "a",
              "b",
              "ab",
              "ba",
              "\xE2\x96\x81"
              "a"};
  c.scores = {0, 0, 0, -1, -1, -1, -2, -3, -5};
  c.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl,
                   TokenType::kNormal,  TokenType::kNormal,  TokenType::kNormal,
                   TokenType::kNormal,  TokenType::kNormal,  TokenType::kNormal};
  c.bos_id = 1;
  c.eos_id = 2;
  c.unk_id = 0;
  auto tok = Tokenizer::FromConfig(c);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // "▁aba": pairs ▁a (-5), ab (-2), ba (-3): "ab" wins, then nothing merges with ▁ or a.
  EXPECT_EQ((*tok)->Encode("aba", false, false), (std::vector<int32_t>{3, 6, 4}));
  // "▁abab": ab (-2) twice: leftmost first, then the right one.
  EXPECT_EQ((*tok)->Encode("abab", false, false), (std::vector<int32_t>{3, 6, 6}));
  // No byte tokens in this vocabulary: an unknown character becomes one UNK.
  EXPECT_EQ((*tok)->Encode("a\xC3\xA9", false, false), (std::vector<int32_t>{8, 0}));
}

TEST(TokenizerConfig, BpeAppliesLowestRankFirst) {
  TokenizerConfig c;
  c.model = TokenizerConfig::Model::kBpe;
  for (int b = 0; b < 256; ++b) {
    c.tokens.emplace_back(tokenizer::ByteToUnicode(static_cast<uint8_t>(b)));
  }
  c.tokens.push_back("ab");   // 256
  c.tokens.push_back("bc");   // 257
  c.tokens.push_back("abc");  // 258
  c.merges = {"b c", "a b", "a bc"};
  c.pre = "gpt-2";
  auto tok = Tokenizer::FromConfig(c);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // "b c" has rank 0, so "abc" -> a + bc -> abc (never through "ab").
  EXPECT_EQ((*tok)->Encode("abc", false, false), (std::vector<int32_t>{258}));
  EXPECT_EQ((*tok)->Encode("ab", false, false), (std::vector<int32_t>{256}));
  // Words never merge across the pre-tokenizer's boundaries: " ab" is one word, "c!" two.
  EXPECT_EQ((*tok)->Encode("ab c!", false, false), (std::vector<int32_t>{256, ' ', 'c', '!'}));
  EXPECT_FALSE((*tok)->add_bos_default());
}

TEST(TokenizerConfig, UnknownPreTokenizerFallsBackToGpt2) {
  TokenizerConfig c;
  c.model = TokenizerConfig::Model::kBpe;
  for (int b = 0; b < 256; ++b) {
    c.tokens.emplace_back(tokenizer::ByteToUnicode(static_cast<uint8_t>(b)));
  }
  c.pre = "no-such-pre-tokenizer";
  auto tok = Tokenizer::FromConfig(c);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->Encode("hi", false, false), (std::vector<int32_t>{'h', 'i'}));
}

StatusOr<std::unique_ptr<Tokenizer>> FromMetadata(
    const std::vector<std::pair<std::string, gguf::Value>>& kvs) {
  gguf::GgufWriter writer;
  for (const auto& [key, value] : kvs) writer.Set(key, value);
  auto buffer = writer.WriteToBuffer();
  UF_CHECK(buffer.ok()) << buffer.status().ToString();
  auto file = gguf::GgufFile::FromBuffer(buffer->data(), buffer->size());
  UF_CHECK(file.ok()) << file.status().ToString();
  return Tokenizer::FromGguf(**file);
}

TEST(TokenizerGguf, RejectsBadMetadata) {
  using gguf::Value;
  EXPECT_EQ(FromMetadata({}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(FromMetadata({{"tokenizer.ggml.model", Value::String("bert")}}).status().code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(FromMetadata({{"tokenizer.ggml.model", Value::String("llama")}}).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(FromMetadata({{"tokenizer.ggml.model", Value::String("llama")},
                          {"tokenizer.ggml.tokens", Value::I32Array({1, 2})}})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(FromMetadata({{"tokenizer.ggml.model", Value::String("llama")},
                          {"tokenizer.ggml.tokens", Value::StringArray({"a", "b", "c"})},
                          {"tokenizer.ggml.scores", Value::F32Array({0.0})}})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(FromMetadata({{"tokenizer.ggml.model", Value::String("gpt2")},
                          {"tokenizer.ggml.tokens", Value::StringArray({"a", "b"})}})
                .status()
                .code(),
            StatusCode::kNotFound);  // no merges
  // Out-of-range special ids are ignored, not trusted.
  auto tok = FromMetadata({{"tokenizer.ggml.model", Value::String("llama")},
                           {"tokenizer.ggml.tokens", Value::StringArray({"<unk>", "a"})},
                           {"tokenizer.ggml.bos_token_id", Value::U32(7)},
                           {"tokenizer.ggml.eos_token_id", Value::U32(9)}});
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->bos_id(), 1);  // the SPM default, which is in range
  EXPECT_EQ((*tok)->eos_id(), -1);
  EXPECT_TRUE((*tok)->add_bos_default());
}

// gpt-oss's vocabulary: <|end|> ends each harmony message but not the reply (<|return|> and
// <|call|> do), and the header tags are user-defined text, as llama.cpp loads them.
TEST(TokenizerConfig, HarmonyEndIsNotEndOfGeneration) {
  TokenizerConfig c;
  c.model = TokenizerConfig::Model::kBpe;
  for (int b = 0; b < 256; ++b) {
    c.tokens.emplace_back(tokenizer::ByteToUnicode(static_cast<uint8_t>(b)));
  }
  const std::vector<std::string> tags = {"<|start|>",  "<|end|>",  "<|message|>",  "<|channel|>",
                                         "<|return|>", "<|call|>", "<|constrain|>"};
  for (const std::string& t : tags) c.tokens.push_back(t);
  c.token_types.assign(c.tokens.size(), TokenType::kNormal);
  for (size_t i = 256; i < c.tokens.size(); ++i) c.token_types[i] = TokenType::kControl;
  c.eos_id = 260;  // <|return|>
  c.pre = "gpt-4o";
  auto tok = Tokenizer::FromConfig(c);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_TRUE((*tok)->IsEndOfGeneration(260));
  EXPECT_TRUE((*tok)->IsEndOfGeneration(261));                  // <|call|>
  EXPECT_FALSE((*tok)->IsEndOfGeneration(257));                 // <|end|>
  EXPECT_EQ((*tok)->token_type(259), TokenType::kUserDefined);  // <|channel|>
  EXPECT_EQ((*tok)->token_type(260), TokenType::kControl);
  EXPECT_EQ((*tok)->TokenToPiece(259), "<|channel|>");
  // Without <|call|> (another model's <|end|>), <|end|> still ends generation.
  c.tokens[261] = "<|other|>";
  auto other = Tokenizer::FromConfig(c);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE((*other)->IsEndOfGeneration(257));
  EXPECT_EQ((*other)->token_type(259), TokenType::kControl);
}

}  // namespace
}  // namespace uf
