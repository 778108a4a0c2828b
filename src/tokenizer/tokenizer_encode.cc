// The two merge algorithms behind Tokenizer::Encode. Both keep the symbols of one piece of text in
// a doubly linked list over a vector and the candidate merges in a binary heap, so a merge costs
// O(log n) instead of a rescan: 10k characters encode in a few milliseconds.
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace uf {
namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

// Symbols address text with 32-bit offsets; longer pieces (> 1 GiB, never a real prompt) are
// encoded in halves cut at a character boundary.
constexpr size_t kMaxPiece = size_t{1} << 30;

size_t HalfAtCharBoundary(std::string_view text) {
  size_t mid = text.size() / 2;
  while (mid > 0 && (static_cast<uint8_t>(text[mid]) & 0xC0) == 0x80) --mid;
  return mid > 0 ? mid : text.size() / 2;
}

struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t begin;  // byte range in the text being encoded
  uint32_t len;    // 0 once merged into its left neighbour
  int32_t id;      // BPE: symbol id; SPM: unused
};

}  // namespace

// llama.cpp's llm_tokenizer_spm_session: start from UTF-8 characters, repeatedly merge the
// adjacent pair whose concatenation is a vocab token of the highest score (ties: leftmost), then
// emit each symbol's id, or its bytes as <0xXX> tokens when it is not in the vocab.
void Tokenizer::EncodeSpm(std::string_view fragment, bool prefix_space,
                          std::vector<int32_t>* out) const {
  if (fragment.size() > kMaxPiece) {
    const size_t half = HalfAtCharBoundary(fragment);
    EncodeSpm(fragment.substr(0, half), prefix_space, out);
    EncodeSpm(fragment.substr(half), false, out);
    return;
  }
  std::string text;
  text.reserve(fragment.size() + 8);
  if (prefix_space) text.append(kSpmSpace);
  for (char c : fragment) {
    if (c == ' ') {
      text.append(kSpmSpace);
    } else {
      text.push_back(c);
    }
  }
  if (text.empty()) return;

  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const tokenizer::Utf8Scan scan = tokenizer::ScanUtf8(std::string_view(text).substr(pos));
    // Invalid or truncated bytes stand alone and end up as byte tokens.
    const size_t len = scan.kind == tokenizer::Utf8Kind::kValid ? scan.length : 1;
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({index - 1, -1, static_cast<uint32_t>(pos), static_cast<uint32_t>(len), -1});
    if (index > 0) symbols[index - 1].next = index;
    pos += len;
  }

  struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    uint32_t size;
  };
  const auto lower = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = symbols[left].len + symbols[right].len;
    auto it = token_to_id_.find(std::string_view(text).substr(symbols[left].begin, size));
    if (it == token_to_id_.end()) return;
    queue.push({scores_[it->second], left, right, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Stale: one side was merged elsewhere since this pair was queued.
    if (left.len == 0 || right.len == 0 || left.len + right.len != bigram.size) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = std::string_view(text).substr(symbols[i].begin, symbols[i].len);
    auto it = token_to_id_.find(piece);
    if (it != token_to_id_.end()) {
      out->push_back(it->second);
    } else {
      AppendSpmByteFallback(piece, out);
    }
  }
}

void Tokenizer::AppendSpmByteFallback(std::string_view bytes, std::vector<int32_t>* out) const {
  bool all_bytes = true;
  for (char c : bytes) all_bytes = all_bytes && byte_tokens_[static_cast<uint8_t>(c)] >= 0;
  if (all_bytes) {
    for (char c : bytes) out->push_back(byte_tokens_[static_cast<uint8_t>(c)]);
  } else if (unk_id_ >= 0) {
    out->push_back(unk_id_);  // a vocabulary without byte fallback: one UNK per character
  }
}

Status Tokenizer::InitBpe(const std::vector<std::string>& merges) {
  const auto n_vocab = static_cast<int32_t>(tokens_.size());
  StringIdMap extra;  // merge operands and results that are not vocab tokens
  const auto symbol_id = [&](std::string_view text) -> int32_t {
    if (auto it = token_to_id_.find(text); it != token_to_id_.end()) return it->second;
    if (auto it = extra.find(text); it != extra.end()) return it->second;
    const int32_t id = n_vocab + static_cast<int32_t>(extra.size());
    extra.emplace(std::string(text), id);
    return id;
  };
  for (int b = 0; b < 256; ++b) {
    bpe_byte_symbol_[b] = symbol_id(tokenizer::ByteToUnicode(static_cast<uint8_t>(b)));
  }
  bpe_merges_.reserve(merges.size());
  std::string merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
    // Split at the first space after the first character, as llama.cpp does.
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos || space + 1 >= merge.size()) continue;
    const std::string_view left = std::string_view(merge).substr(0, space);
    const std::string_view right = std::string_view(merge).substr(space + 1);
    merged.assign(left);
    merged.append(right);
    const uint64_t key =
        (static_cast<uint64_t>(symbol_id(left)) << 32) | static_cast<uint32_t>(symbol_id(right));
    const int32_t merged_id = symbol_id(merged);
    bpe_merges_.emplace(key, BpeMerge{static_cast<int32_t>(rank), merged_id});  // first wins
    if (extra.size() > static_cast<size_t>(INT32_MAX - n_vocab - 2)) {
      return InvalidArgumentError("tokenizer.ggml.merges has too many distinct symbols");
    }
  }
  return OkStatus();
}

void Tokenizer::EncodeBpe(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<std::string_view> words;
  pre_->Split(text, &words);
  for (std::string_view word : words) EncodeBpeWord(word, out);
}

// llama.cpp's llm_tokenizer_bpe_session for one pre-tokenized word: one symbol per byte, then
// repeatedly apply the lowest-rank merge among adjacent pairs (ties: leftmost).
void Tokenizer::EncodeBpeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (word.size() > kMaxPiece) {
    const size_t half = HalfAtCharBoundary(word);
    EncodeBpeWord(word.substr(0, half), out);
    EncodeBpeWord(word.substr(half), out);
    return;
  }
  const auto n_vocab = static_cast<int32_t>(tokens_.size());
  if (ignore_merges_) {
    std::string encoded;
    for (char c : word) encoded.append(tokenizer::ByteToUnicode(static_cast<uint8_t>(c)));
    if (auto it = token_to_id_.find(encoded); it != token_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }

  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    const auto index = static_cast<int32_t>(i);
    symbols.push_back({index - 1, index + 1 < static_cast<int32_t>(word.size()) ? index + 1 : -1,
                       static_cast<uint32_t>(i), 1,
                       bpe_byte_symbol_[static_cast<uint8_t>(word[i])]});
  }

  struct Bigram {
    int32_t rank;
    int32_t left;
    int32_t right;
    int32_t left_id;
    int32_t right_id;
    int32_t merged;
  };
  const auto lower = [](const Bigram& a, const Bigram& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t left_id = symbols[left].id;
    const int32_t right_id = symbols[right].id;
    auto it =
        bpe_merges_.find((static_cast<uint64_t>(left_id) << 32) | static_cast<uint32_t>(right_id));
    if (it == bpe_merges_.end()) return;
    queue.push({it->second.rank, left, right, left_id, right_id, it->second.merged});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Stale: either side changed since the pair was queued (two live symbols queued as a pair
    // are still adjacent, since only a merge with its right neighbour removes a symbol).
    if (left.len == 0 || right.len == 0 || left.id != bigram.left_id ||
        right.id != bigram.right_id) {
      continue;
    }
    left.id = bigram.merged;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id < n_vocab) {
      out->push_back(s.id);
      continue;
    }
    // Not a vocab token (a merge result missing from the vocab, or a byte the vocab lacks):
    // fall back to the single-byte tokens, dropping bytes the vocab cannot express.
    for (uint32_t b = s.begin; b < s.begin + s.len; ++b) {
      const int32_t id = bpe_byte_symbol_[static_cast<uint8_t>(word[b])];
      if (id < n_vocab) out->push_back(id);
    }
  }
}

}  // namespace uf
