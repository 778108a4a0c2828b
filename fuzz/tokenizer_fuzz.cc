// libFuzzer target for the tokenizers: arbitrary bytes through Encode (both parse_special
// settings), Decode and StreamingDecoder, plus arbitrary id sequences through the decoders.
// Vocabularies: UF_FUZZ_VOCAB (paths separated by ':'), else the SPM and GPT-2 test vocabularies
// under ../shared/tokenizer (relative to the repository root, where tools/dev.sh runs fuzzers),
// else two small built-in vocabularies so the target still runs without the shared data.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/log.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using uf::StreamingDecoder;
using uf::Tokenizer;

struct Vocab {
  std::unique_ptr<Tokenizer> tokenizer;
  bool lossless = false;  // every single byte survives Encode -> Decode
};

std::unique_ptr<Tokenizer> LoadFile(const std::string& path) {
  auto file = uf::gguf::GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", file.status().ToString().c_str());
    return nullptr;
  }
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s: %s\n", path.c_str(), tok.status().ToString().c_str());
    return nullptr;
  }
  return std::move(*tok);
}

std::vector<std::unique_ptr<Tokenizer>> BuiltinVocabs() {
  std::vector<std::unique_ptr<Tokenizer>> out;
  uf::TokenizerConfig spm;
  spm.model = uf::TokenizerConfig::Model::kSpm;
  spm.tokens = {"<unk>",
                "<s>",
                "</s>",
                "\xE2\x96\x81",
                "a",
                "b",
                "ab",
                "\xE2\x96\x81"
                "a"};
  spm.scores = {0, 0, 0, -1, -1, -1, -2, -3};
  spm.token_types.assign(spm.tokens.size(), uf::TokenType::kNormal);
  spm.token_types[0] = uf::TokenType::kUnknown;
  spm.token_types[1] = spm.token_types[2] = uf::TokenType::kControl;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    spm.tokens.push_back(name);
    spm.scores.push_back(0);
    spm.token_types.push_back(uf::TokenType::kByte);
  }
  spm.bos_id = 1;
  spm.eos_id = 2;
  spm.unk_id = 0;
  uf::TokenizerConfig bpe;
  bpe.model = uf::TokenizerConfig::Model::kBpe;
  for (int b = 0; b < 256; ++b) {
    bpe.tokens.emplace_back(uf::tokenizer::ByteToUnicode(static_cast<uint8_t>(b)));
  }
  bpe.tokens.push_back("<|endoftext|>");
  bpe.tokens.push_back("ab");
  bpe.token_types.assign(bpe.tokens.size(), uf::TokenType::kNormal);
  bpe.token_types[256] = uf::TokenType::kControl;
  bpe.merges = {"a b", "ab c"};  // "abc" is not a token: exercises the byte fallback
  bpe.pre = "llama-bpe";
  for (auto* config : {&spm, &bpe}) {
    auto tok = Tokenizer::FromConfig(*config);
    UF_CHECK(tok.ok()) << tok.status().ToString();
    out.push_back(std::move(*tok));
  }
  return out;
}

std::vector<Vocab>& Vocabs() {
  static std::vector<Vocab>* vocabs = [] {
    uf::SetMinLogLevel(uf::LogLevel::kError);
    std::vector<std::string> paths;
    if (const char* env = std::getenv("UF_FUZZ_VOCAB")) {
      std::string list = env;
      for (size_t pos = 0; pos <= list.size();) {
        const size_t end = std::min(list.find(':', pos), list.size());
        if (end > pos) paths.push_back(list.substr(pos, end - pos));
        pos = end + 1;
      }
    } else {
      paths = {"../shared/tokenizer/ggml-vocab-llama-spm.gguf",
               "../shared/tokenizer/ggml-vocab-gpt-2.gguf",
               "../shared/tokenizer/ggml-vocab-deepseek-coder.gguf"};
    }
    std::vector<std::unique_ptr<Tokenizer>> loaded;
    for (const std::string& path : paths) {
      if (auto tok = LoadFile(path)) loaded.push_back(std::move(tok));
    }
    if (loaded.empty()) {
      std::fprintf(stderr, "tokenizer_fuzz: no vocabulary loaded; using built-in ones\n");
      loaded = BuiltinVocabs();
    }
    auto* out = new std::vector<Vocab>();
    for (auto& tok : loaded) {
      Vocab v;
      int n = 0;
      for (int b = 0; b < 256; ++b) {
        const std::string byte(1, static_cast<char>(b));
        n += tok->Decode(tok->Encode(byte, false, false)) == byte;
      }
      v.lossless = n == 256;
      v.tokenizer = std::move(tok);
      out->push_back(std::move(v));
    }
    return out;
  }();
  return *vocabs;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto scan = uf::tokenizer::ScanUtf8(s.substr(i));
    if (scan.kind != uf::tokenizer::Utf8Kind::kValid) return false;
    i += scan.length;
  }
  return true;
}

void CheckDecoders(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  const std::string decoded = tok.Decode(ids);
  StreamingDecoder decoder(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string part = decoder.Push(id);
    UF_CHECK(IsValidUtf8(part)) << "streaming output is not UTF-8";
    streamed += part;
  }
  const std::string tail = decoder.Flush();
  UF_CHECK(IsValidUtf8(tail)) << "streaming flush is not UTF-8";
  streamed += tail;
  if (IsValidUtf8(decoded)) UF_CHECK(streamed == decoded) << "streaming differs from Decode";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const Vocab& v : Vocabs()) {
    const Tokenizer& tok = *v.tokenizer;
    for (bool parse_special : {false, true}) {
      const std::vector<int32_t> ids = tok.Encode(text, /*add_bos=*/parse_special, parse_special);
      for (int32_t id : ids) UF_CHECK(id >= 0 && id < tok.vocab_size()) << "bad id " << id;
      CheckDecoders(tok, ids);
      // Lossless vocabularies give the text back. Byte-level BPE always; SPM only without
      // special tokens (each text fragment after one gets its own "▁" prefix) and without its
      // space marker U+2581 in the text (it decodes as ' ').
      const bool has_special =
          std::any_of(ids.begin(), ids.end(), [&](int32_t id) { return tok.IsSpecial(id); });
      const bool spm_marker = text.find("\xE2\x96\x81") != std::string_view::npos;
      if (v.lossless && (!tok.is_spm() || (!has_special && !spm_marker))) {
        const std::vector<int32_t> plain = tok.Encode(text, false, parse_special);
        UF_CHECK(tok.Decode(plain) == text) << "Decode(Encode(x)) != x";
      }
    }
    // The same bytes as a sequence of (mostly invalid) token ids.
    std::vector<int32_t> ids(size / 4);
    if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
    for (int32_t& id : ids) {
      if (id % 3 != 0) id = static_cast<int32_t>(static_cast<uint32_t>(id) % tok.vocab_size());
    }
    CheckDecoders(tok, ids);
  }
  return 0;
}
