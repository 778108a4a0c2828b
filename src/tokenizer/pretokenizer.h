// Regex pre-tokenizer of byte-level BPE vocabularies: splits text into the words that BPE merges
// never cross. The regex lists follow llama.cpp's llama-vocab.cpp, chosen by tokenizer.ggml.pre.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace uf::tokenizer {

// What a pre-tokenizer name implies besides its regexes.
struct PreTokenizerSpec {
  std::vector<std::string> regexes;  // applied in sequence (see PreTokenizer::Split)
  bool ignore_merges = false;        // a word that is itself a vocab token skips BPE (llama3)
  bool add_bos = false;              // default of tokenizer.ggml.add_bos_token
  bool known = true;                 // false: the name was not recognised, gpt-2's regex is used
};

// Looks up the regexes for a tokenizer.ggml.pre name ("gpt-2", "llama-bpe", "qwen2", ...).
// Unknown names get the gpt-2 regex with known = false.
PreTokenizerSpec LookupPreTokenizer(std::string_view name);

class PreTokenizer {
 public:
  // Compiles the regexes (PCRE2, UTF + Unicode properties, JIT when available).
  static StatusOr<std::unique_ptr<PreTokenizer>> Create(const std::vector<std::string>& regexes);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the words of `text` to `words`, as views into `text`. Each regex in turn splits every
  // current piece into its matches and the unmatched runs between them, so the concatenated words
  // always equal `text`. Invalid UTF-8 never matches and ends up in the unmatched runs.
  // Thread-safe (const; match state lives on the caller's stack).
  void Split(std::string_view text, std::vector<std::string_view>* words) const;

 private:
  struct Compiled;
  PreTokenizer() = default;
  std::vector<Compiled> compiled_;
};

}  // namespace uf::tokenizer
