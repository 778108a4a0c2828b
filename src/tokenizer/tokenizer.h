// Tokenizers described by GGUF metadata (tokenizer.ggml.*), matching llama.cpp's results:
//  - SPM ("llama"): SentencePiece-style merging by token score with byte fallback;
//  - byte-level BPE ("gpt2"): regex pre-tokenizer chosen by tokenizer.ggml.pre, then merges by
//    rank over GPT-2's byte-to-unicode alphabet.
// Encode/Decode are const and thread-safe; a Tokenizer is immutable once built.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/status.h"

namespace uf::gguf {
class GgufFile;
}

namespace uf {

namespace tokenizer {
class PreTokenizer;
}

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Everything a Tokenizer is built from; FromGguf fills it from tokenizer.ggml.* metadata.
struct TokenizerConfig {
  enum class Model { kSpm, kBpe };
  Model model = Model::kSpm;
  std::vector<std::string> tokens;     // [n_vocab] token text
  std::vector<float> scores;           // [n_vocab] SPM merge priority; empty = all 0
  std::vector<TokenType> token_types;  // [n_vocab]; empty = all normal
  std::vector<std::string> merges;     // BPE: "left right", rank = index
  std::string pre = "gpt-2";           // BPE pre-tokenizer name (tokenizer.ggml.pre)
  // -1 = none. eot/eom: -1 means "detect from token text" (<|eot_id|>, <|im_end|>, ...).
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  int32_t eom_id = -1;
  int32_t unk_id = -1;
  // nullopt = the model type's default (SPM: true; BPE: true only for llama3-style pre).
  std::optional<bool> add_bos;
  bool add_space_prefix = true;  // SPM: prepend "▁" to each text fragment
  // Special tokens that swallow the white space after them when matched (Hugging Face's
  // rstrip). GGUF does not record it; FromGguf applies llama.cpp's per-model rules (Phi-3).
  std::vector<int32_t> rstrip_ids;
};

class Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const gguf::GgufFile& file);
  static StatusOr<std::unique_ptr<Tokenizer>> FromConfig(TokenizerConfig config);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;  // token_to_id_ points into tokens_
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_bos: prepend BOS if the model says so (add_bos_default()). parse_special: control and
  // unknown-type token strings in the text (e.g. "<|im_start|>") become their ids; otherwise they
  // are tokenized as plain text. User-defined tokens are always matched whole, as llama.cpp and
  // Hugging Face tokenizers do. Never fails: invalid UTF-8 bytes become byte tokens.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special) const;

  // Raw bytes of one token: may be a partial UTF-8 sequence (byte tokens, byte-level pieces).
  // Control, user-defined and unknown tokens render as their text; unused or out-of-range ids as
  // "". SPM pieces keep their leading space ("▁Hello" -> " Hello").
  std::string TokenToPiece(int32_t id) const;

  // Concatenated pieces, as llama.cpp's detokenize(remove_special = true, unparse_special =
  // true) without clean-up: a leading BOS (when the model adds one) is dropped; otherwise SPM
  // vocabularies with a space prefix drop the first piece's leading space.
  std::string Decode(const std::vector<int32_t>& ids) const;

  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t eot_id() const { return eot_id_; }  // -1 if none
  int32_t unk_id() const { return unk_id_; }  // -1 if none
  // EOS, EOT, EOM and the other end-of-turn tokens llama.cpp recognises by text.
  bool IsEndOfGeneration(int32_t id) const { return eog_ids_.count(id) > 0; }
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  bool add_bos_default() const { return add_bos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  bool is_spm() const { return model_ == TokenizerConfig::Model::kSpm; }

  std::optional<int32_t> TokenId(std::string_view piece) const;
  // Stored token text ("▁Hello", "Ġworld", "<|im_end|>"); "" for out-of-range ids.
  std::string_view TokenText(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // Control, unknown or user-defined: what parse_special may produce.
  bool IsSpecial(int32_t id) const;

 private:
  struct Fragment;  // a run of raw text or one special token
  struct BpeMerge {
    int32_t rank;
    int32_t merged;  // symbol id of the concatenation
  };
  Tokenizer() = default;
  Status Init(TokenizerConfig config);
  Status InitBpe(const std::vector<std::string>& merges);
  void DetectSpecialTokens();

  std::vector<Fragment> SplitSpecial(std::string_view text, bool parse_special) const;
  void EncodeSpm(std::string_view text, bool prefix_space, std::vector<int32_t>* out) const;
  void EncodeBpe(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeBpeWord(std::string_view word, std::vector<int32_t>* out) const;
  void AppendSpmByteFallback(std::string_view bytes, std::vector<int32_t>* out) const;
  std::string DecodePiece(int32_t id) const;

  TokenizerConfig::Model model_ = TokenizerConfig::Model::kSpm;
  std::vector<std::string> tokens_;  // [n_vocab]
  std::vector<float> scores_;        // [n_vocab]
  std::vector<TokenType> types_;     // [n_vocab]
  std::vector<std::string> pieces_;  // [n_vocab] decoded bytes of each token (TokenToPiece)
  std::unordered_map<std::string_view, int32_t> token_to_id_;  // views into tokens_
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t eot_id_ = -1;
  int32_t eom_id_ = -1;
  int32_t unk_id_ = -1;
  bool add_bos_ = false;
  bool add_space_prefix_ = false;
  std::unordered_set<int32_t> eog_ids_;

  // Special-token matching: ids ordered by text length, longest first (llama.cpp's order), and a
  // byte trie over their texts (node 0 = root) with a first-byte filter, so plain text costs one
  // table lookup per byte.
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t rank = -1;  // index in special_ids_ of the token ending here
  };
  std::vector<int32_t> special_ids_;
  std::unordered_set<int32_t> rstrip_ids_;
  std::vector<TrieNode> special_trie_;
  bool special_first_byte_[256] = {};

  // SPM: <0xXX> byte tokens, -1 where missing. [256]
  std::vector<int32_t> byte_tokens_;

  // BPE: merges over "symbol ids": vocab ids, plus ids >= n_vocab for merge results that are not
  // vocab tokens (llama.cpp still merges through them). Key = left << 32 | right.
  std::unique_ptr<tokenizer::PreTokenizer> pre_;
  bool ignore_merges_ = false;
  std::unordered_map<uint64_t, BpeMerge> bpe_merges_;
  int32_t bpe_byte_symbol_[256] = {};  // symbol id of each byte's one-char string
};

// Turns a stream of token ids into text, emitting only complete UTF-8: bytes of a character that
// is split across tokens (<0xE2><0x80><0x99>, or a byte-level BPE piece ending mid-character) are
// held until the character completes. Invalid sequences come out as U+FFFD, so every returned
// string is valid UTF-8. For valid UTF-8 output, the concatenation of all Push() results and
// Flush() equals tokenizer.Decode(ids) (same BOS and leading-space rules).
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string Push(int32_t id);
  // Emits whatever is held back (an incomplete trailing sequence becomes U+FFFD) and resets the
  // decoder to its initial state.
  std::string Flush();

 private:
  // Moves the complete (or definitely invalid) prefix of pending_ to the result.
  std::string Drain(bool final);

  const Tokenizer& tokenizer_;
  std::string pending_;  // bytes not yet returned: at most one incomplete UTF-8 sequence
  bool first_ = true;    // no token pushed yet since construction or Flush
};

}  // namespace uf
