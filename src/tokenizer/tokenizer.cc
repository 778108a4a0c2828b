#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <utility>

#include "base/log.h"
#include "gguf/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace uf {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

// Token texts llama.cpp treats as end-of-turn when the metadata names no EOT token.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "<end_of_utterance>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek
};
// Further texts that end generation (llama.cpp's special_eog_ids).
constexpr std::string_view kEogTexts[] = {"<|eom_id|>", "<|return|>", "<|call|>"};

// isspace() in the C locale, as llama.cpp strips around special tokens.
bool IsAsciiSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Parses "<0xAB>"; -1 if `text` is not a byte token text.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

// Reads an optional id key; absent keeps `fallback`, out-of-range ids are ignored with a warning.
int32_t ReadTokenId(const gguf::GgufFile& file, std::string_view key, int32_t fallback,
                    size_t n_vocab) {
  const gguf::Value* value = file.Find(key);
  if (value == nullptr) return fallback;
  const std::optional<int64_t> id = value->AsInt();
  if (!id || *id < 0 || static_cast<uint64_t>(*id) >= n_vocab) {
    UF_LOG(WARNING) << key << " = " << value->DebugString() << " is not a token id of this "
                    << n_vocab << "-token vocabulary; using " << fallback;
    return fallback;
  }
  return static_cast<int32_t>(*id);
}

}  // namespace

struct Tokenizer::Fragment {
  bool is_token;
  int32_t id;    // is_token
  size_t begin;  // !is_token: byte range of the text
  size_t end;
};

Tokenizer::~Tokenizer() = default;

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const gguf::GgufFile& file) {
  TokenizerConfig config;
  UF_ASSIGN_OR_RETURN(const std::string model, file.GetString("tokenizer.ggml.model"));
  if (model == "llama") {
    config.model = TokenizerConfig::Model::kSpm;
  } else if (model == "gpt2") {
    config.model = TokenizerConfig::Model::kBpe;
  } else {
    return UnimplementedError("tokenizer model '" + model +
                              "' is not supported (only 'llama' SPM and 'gpt2' BPE)");
  }
  const bool spm = config.model == TokenizerConfig::Model::kSpm;

  const gguf::Value* tokens = file.Find("tokenizer.ggml.tokens");
  if (tokens == nullptr) return NotFoundError("tokenizer.ggml.tokens is missing");
  if (tokens->AsStringArray() == nullptr) {
    return InvalidArgumentError("tokenizer.ggml.tokens is not an array of strings");
  }
  config.tokens = *tokens->AsStringArray();
  const size_t n = config.tokens.size();

  if (const gguf::Value* scores = file.Find("tokenizer.ggml.scores")) {
    std::optional<std::vector<double>> values = scores->AsFloatArray();
    if (!scores->is_array() || !values) {
      return InvalidArgumentError("tokenizer.ggml.scores is not a numeric array");
    }
    if (values->size() < n) {
      return InvalidArgumentError("tokenizer.ggml.scores has " + std::to_string(values->size()) +
                                  " entries for " + std::to_string(n) + " tokens");
    }
    config.scores.assign(values->begin(), values->begin() + n);
  }
  if (const gguf::Value* types = file.Find("tokenizer.ggml.token_type")) {
    std::optional<std::vector<int64_t>> values = types->AsIntArray();
    if (!types->is_array() || !values) {
      return InvalidArgumentError("tokenizer.ggml.token_type is not an integer array");
    }
    if (values->size() < n) {
      return InvalidArgumentError("tokenizer.ggml.token_type has " +
                                  std::to_string(values->size()) + " entries for " +
                                  std::to_string(n) + " tokens");
    }
    config.token_types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = (*values)[i];
      config.token_types.push_back(t >= 1 && t <= 6 ? static_cast<TokenType>(t)
                                                    : TokenType::kUndefined);
    }
  }
  if (!spm) {
    const gguf::Value* merges = file.Find("tokenizer.ggml.merges");
    if (merges == nullptr) return NotFoundError("tokenizer.ggml.merges is missing (gpt2 model)");
    if (merges->AsStringArray() == nullptr) {
      return InvalidArgumentError("tokenizer.ggml.merges is not an array of strings");
    }
    config.merges = *merges->AsStringArray();
    config.pre = file.GetStringOr("tokenizer.ggml.pre", "");
  }

  // Defaults as llama.cpp: SPM vocabularies use Llama's 0/1/2 unk/bos/eos layout.
  config.bos_id = ReadTokenId(file, "tokenizer.ggml.bos_token_id", spm && n > 1 ? 1 : -1, n);
  config.eos_id = ReadTokenId(file, "tokenizer.ggml.eos_token_id", spm && n > 2 ? 2 : -1, n);
  config.unk_id = ReadTokenId(file, "tokenizer.ggml.unknown_token_id", spm && n > 0 ? 0 : -1, n);
  config.eot_id = ReadTokenId(file, "tokenizer.ggml.eot_token_id", -1, n);
  config.eom_id = ReadTokenId(file, "tokenizer.ggml.eom_token_id", -1, n);
  if (const gguf::Value* add_bos = file.Find("tokenizer.ggml.add_bos_token")) {
    config.add_bos = add_bos->AsBool();
  }
  config.add_space_prefix = file.GetBoolOr("tokenizer.ggml.add_space_prefix", spm);

  // llama.cpp's model-name rule: Phi-3's special tokens strip the white space after them, except
  // <unk>, <s> and <|endoftext|>; </s> (user-defined there) strips too.
  std::string name = file.GetStringOr("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (size_t id = 0; id < n; ++id) {
      const std::string& text = config.tokens[id];
      const TokenType type =
          config.token_types.empty() ? TokenType::kNormal : config.token_types[id];
      const bool special = type == TokenType::kControl || type == TokenType::kUserDefined ||
                           type == TokenType::kUnknown;
      if ((special || text == "</s>") && text != "<unk>" && text != "<s>" &&
          text != "<|endoftext|>") {
        config.rstrip_ids.push_back(static_cast<int32_t>(id));
      }
    }
  }
  return FromConfig(std::move(config));
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromConfig(TokenizerConfig config) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  UF_RETURN_IF_ERROR(tok->Init(std::move(config)));
  return tok;
}

Status Tokenizer::Init(TokenizerConfig config) {
  const size_t n = config.tokens.size();
  if (n == 0) return InvalidArgumentError("tokenizer vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX / 2)) {
    return InvalidArgumentError("tokenizer vocabulary is too large");
  }
  if (!config.scores.empty() && config.scores.size() != n) {
    return InvalidArgumentError("tokenizer has " + std::to_string(config.scores.size()) +
                                " scores for " + std::to_string(n) + " tokens");
  }
  if (!config.token_types.empty() && config.token_types.size() != n) {
    return InvalidArgumentError("tokenizer has " + std::to_string(config.token_types.size()) +
                                " token types for " + std::to_string(n) + " tokens");
  }
  model_ = config.model;
  const bool spm = model_ == TokenizerConfig::Model::kSpm;
  tokens_ = std::move(config.tokens);
  scores_ = config.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(config.scores);
  types_ = config.token_types.empty() ? std::vector<TokenType>(n, TokenType::kNormal)
                                      : std::move(config.token_types);

  token_to_id_.reserve(n);
  size_t n_duplicates = 0;
  for (size_t i = 0; i < n; ++i) {
    if (tokens_[i].empty()) continue;  // can never match text
    if (!token_to_id_.emplace(tokens_[i], static_cast<int32_t>(i)).second) ++n_duplicates;
  }
  if (n_duplicates > 0) {
    UF_LOG(WARNING) << "tokenizer vocabulary has " << n_duplicates
                    << " duplicate token texts; the lowest id of each is used for encoding";
  }

  const auto valid_id = [&](int32_t id, const char* what) -> int32_t {
    if (id < -1 || id >= static_cast<int32_t>(n)) {
      UF_LOG(WARNING) << "tokenizer " << what << " id " << id << " is out of range; ignored";
      return -1;
    }
    return id;
  };
  bos_id_ = valid_id(config.bos_id, "BOS");
  eos_id_ = valid_id(config.eos_id, "EOS");
  eot_id_ = valid_id(config.eot_id, "EOT");
  eom_id_ = valid_id(config.eom_id, "EOM");
  unk_id_ = valid_id(config.unk_id, "UNK");

  tokenizer::PreTokenizerSpec spec;
  if (!spm) {
    spec = tokenizer::LookupPreTokenizer(config.pre);
    if (!spec.known) {
      UF_LOG(WARNING) << (config.pre.empty() ? std::string("tokenizer.ggml.pre is missing")
                                             : "unknown pre-tokenizer '" + config.pre + "'")
                      << "; using gpt-2's regex, so tokens may differ from the model's own "
                         "tokenizer";
    }
    UF_ASSIGN_OR_RETURN(pre_, tokenizer::PreTokenizer::Create(spec.regexes));
    ignore_merges_ = spec.ignore_merges;
    UF_RETURN_IF_ERROR(InitBpe(config.merges));
  }
  add_bos_ = config.add_bos.value_or(spm ? true : spec.add_bos);
  if (add_bos_ && bos_id_ < 0) {
    UF_LOG(WARNING) << "tokenizer asks for a BOS token but has none; not adding it";
    add_bos_ = false;
  }
  add_space_prefix_ = spm && config.add_space_prefix;
  for (int32_t id : config.rstrip_ids) {
    if (id >= 0 && id < static_cast<int32_t>(n)) rstrip_ids_.insert(id);
  }

  DetectSpecialTokens();

  byte_tokens_.assign(256, -1);
  if (spm) {
    static const char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      if (std::optional<int32_t> id = TokenId(std::string_view(name, 6))) {
        byte_tokens_[b] = *id;
      } else if (std::optional<int32_t> raw = TokenId(std::string(1, static_cast<char>(b)))) {
        byte_tokens_[b] = *raw;
      }
    }
  }

  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) pieces_[i] = DecodePiece(static_cast<int32_t>(i));
  return OkStatus();
}

void Tokenizer::DetectSpecialTokens() {
  const auto mark_control = [&](int32_t id) {
    // llama.cpp overrides the type of end-of-turn tokens that a converter left as normal text, so
    // that parse_special finds them.
    if (types_[id] != TokenType::kControl && types_[id] != TokenType::kUserDefined) {
      types_[id] = TokenType::kControl;
    }
  };
  if (eot_id_ < 0) {
    for (std::string_view text : kEotTexts) {
      if (std::optional<int32_t> id = TokenId(text)) {
        eot_id_ = *id;
        mark_control(*id);
        break;
      }
    }
  }
  if (eom_id_ < 0) {
    if (std::optional<int32_t> id = TokenId("<|eom_id|>")) {
      eom_id_ = *id;
      mark_control(*id);
    }
  }
  for (int32_t id : {eos_id_, eot_id_, eom_id_}) {
    if (id >= 0) eog_ids_.insert(id);
  }
  for (std::string_view text : kEotTexts) {
    if (std::optional<int32_t> id = TokenId(text)) eog_ids_.insert(*id);
  }
  for (std::string_view text : kEogTexts) {
    if (std::optional<int32_t> id = TokenId(text)) eog_ids_.insert(*id);
  }
  // gpt-oss's harmony format (o200k_harmony): a reply is several messages, each ended by <|end|>,
  // the last by <|return|> or <|call|>. With those two present <|end|> must not end generation
  // (the reasoning message would be the whole reply), as llama.cpp decides. Its header tags
  // become user-defined, as llama.cpp makes them: ordinary text that a grammar may produce
  // (token_mask.h leaves control tokens out) and that the reply parser reads.
  const std::optional<int32_t> end = TokenId("<|end|>");
  if (end && TokenId("<|return|>") && TokenId("<|call|>")) {
    eog_ids_.erase(*end);
    if (eot_id_ == *end) eot_id_ = -1;
    for (std::string_view text :
         {"<|end|>", "<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
      if (std::optional<int32_t> id = TokenId(text)) types_[*id] = TokenType::kUserDefined;
    }
  }

  special_ids_.clear();
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (IsSpecial(id) && !tokens_[id].empty()) special_ids_.push_back(id);
  }
  std::stable_sort(special_ids_.begin(), special_ids_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });
  special_trie_.assign(1, TrieNode());
  for (size_t rank = 0; rank < special_ids_.size(); ++rank) {
    int32_t node = 0;
    for (char c : tokens_[special_ids_[rank]]) {
      const uint8_t byte = static_cast<uint8_t>(c);
      auto& children = special_trie_[node].children;
      auto it = std::find_if(children.begin(), children.end(),
                             [&](const auto& child) { return child.first == byte; });
      if (it != children.end()) {
        node = it->second;
      } else {
        const int32_t child = static_cast<int32_t>(special_trie_.size());
        children.emplace_back(byte, child);
        special_trie_.emplace_back();  // invalidates `children`; not used after this
        node = child;
      }
    }
    // Duplicate texts keep the lower rank, which claims every occurrence first anyway.
    if (special_trie_[node].rank < 0) special_trie_[node].rank = static_cast<int32_t>(rank);
  }
  for (TrieNode& node : special_trie_) std::sort(node.children.begin(), node.children.end());
  std::fill(std::begin(special_first_byte_), std::end(special_first_byte_), false);
  for (const auto& child : special_trie_[0].children) special_first_byte_[child.first] = true;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const TokenType t = token_type(id);
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return TokenType::kUndefined;
  return types_[id];
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view piece) const {
  auto it = token_to_id_.find(piece);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

std::string_view Tokenizer::TokenText(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return tokens_[id];
}

// llama.cpp's tokenizer_st_partition: special tokens are taken longest first, each at all of its
// non-overlapping occurrences (leftmost first) in text that no longer token has claimed. Rather
// than one text scan per special token (2400 of them in DeepSeek vocabularies), all occurrences
// are found in one pass and then claimed in that order.
std::vector<Tokenizer::Fragment> Tokenizer::SplitSpecial(std::string_view text,
                                                         bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;

  struct Occurrence {
    size_t rank;  // index in special_ids_ (length order)
    size_t pos;
  };
  std::vector<Occurrence> occurrences;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!special_first_byte_[static_cast<uint8_t>(text[pos])]) continue;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      const auto& children = special_trie_[node].children;
      const uint8_t byte = static_cast<uint8_t>(text[i]);
      auto it =
          std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1}));
      if (it == children.end() || it->first != byte) break;
      node = it->second;
      const int32_t rank = special_trie_[node].rank;
      if (rank >= 0 && (parse_special || types_[special_ids_[rank]] == TokenType::kUserDefined)) {
        occurrences.push_back({static_cast<size_t>(rank), pos});
      }
    }
  }
  if (occurrences.empty()) {
    fragments.push_back({false, -1, 0, text.size()});
    return fragments;
  }
  std::sort(occurrences.begin(), occurrences.end(), [](const Occurrence& a, const Occurrence& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
  });
  std::vector<int32_t> claimed(text.size(), -1);  // [text bytes] id of the claiming token
  std::vector<std::pair<size_t, int32_t>> accepted;
  for (const Occurrence& o : occurrences) {
    const int32_t id = special_ids_[o.rank];
    const size_t len = tokens_[id].size();
    bool free = true;
    for (size_t i = o.pos; i < o.pos + len && free; ++i) free = claimed[i] < 0;
    if (!free) continue;
    std::fill(claimed.begin() + o.pos, claimed.begin() + o.pos + len, id);
    accepted.emplace_back(o.pos, id);
  }
  std::sort(accepted.begin(), accepted.end());
  size_t done = 0;
  for (const auto& [pos, id] : accepted) {
    if (pos > done) fragments.push_back({false, -1, done, pos});
    fragments.push_back({true, id, pos, pos + tokens_[id].size()});
    done = pos + tokens_[id].size();
    if (rstrip_ids_.count(id) > 0) {
      // Only up to the next special token: its own bytes are not text to strip.
      while (done < text.size() && claimed[done] < 0 && IsAsciiSpace(text[done])) ++done;
    }
  }
  if (done < text.size()) fragments.push_back({false, -1, done, text.size()});
  return fragments;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && add_bos_) out.push_back(bos_id_);
  bool prev_special = true;  // SPM: the first fragment and those after a special token get "▁"
  for (const Fragment& f : SplitSpecial(text, parse_special)) {
    if (f.is_token) {
      out.push_back(f.id);
      prev_special = true;
      continue;
    }
    const std::string_view fragment = text.substr(f.begin, f.end - f.begin);
    if (model_ == TokenizerConfig::Model::kSpm) {
      EncodeSpm(fragment, add_space_prefix_ && prev_special, &out);
    } else {
      EncodeBpe(fragment, &out);
    }
    prev_special = false;
  }
  return out;
}

std::string Tokenizer::DecodePiece(int32_t id) const {
  const std::string& text = tokens_[id];
  switch (types_[id]) {
    case TokenType::kControl:
    case TokenType::kUserDefined:
    case TokenType::kUnknown:
      return text;
    case TokenType::kByte: {
      const int byte = ParseByteToken(text);
      return byte >= 0 ? std::string(1, static_cast<char>(byte)) : text;
    }
    case TokenType::kNormal:
      break;
    case TokenType::kUnused:
    case TokenType::kUndefined:
      return {};
  }
  std::string piece;
  piece.reserve(text.size());
  if (model_ == TokenizerConfig::Model::kSpm) {
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
        piece.push_back(' ');
        i += kSpmSpace.size();
      } else {
        piece.push_back(text[i++]);
      }
    }
    return piece;
  }
  // Byte-level BPE: every character stands for one byte.
  for (size_t i = 0; i < text.size();) {
    const tokenizer::Utf8Scan scan = tokenizer::ScanUtf8(std::string_view(text).substr(i));
    const int byte =
        scan.kind == tokenizer::Utf8Kind::kValid ? tokenizer::UnicodeToByte(scan.code_point) : -1;
    if (byte >= 0) {
      piece.push_back(static_cast<char>(byte));
    } else {
      piece.append(text, i, scan.length);  // not a byte stand-in: keep the text as is
    }
    i += scan.length;
  }
  return piece;
}

std::string Tokenizer::TokenToPiece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return pieces_[id];
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  size_t start = 0;
  bool remove_space = add_space_prefix_;
  if (add_bos_ && !ids.empty() && ids[0] == bos_id_) {
    // llama.cpp keeps the space after a dropped BOS: [BOS, "▁Hello"] -> " Hello".
    remove_space = false;
    start = 1;
  }
  for (size_t i = start; i < ids.size(); ++i) {
    // Out-of-range ids decode to nothing, but still count as the first token.
    std::string_view piece =
        ids[i] >= 0 && ids[i] < vocab_size() ? std::string_view(pieces_[ids[i]]) : "";
    if (remove_space && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    remove_space = false;
    out.append(piece);
  }
  return out;
}

std::string StreamingDecoder::Push(int32_t id) {
  std::string piece = tokenizer_.TokenToPiece(id);
  if (first_) {
    first_ = false;
    if (tokenizer_.add_bos_default() && id == tokenizer_.bos_id()) return {};
    if (tokenizer_.add_space_prefix() && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  }
  pending_ += piece;
  return Drain(/*final=*/false);
}

std::string StreamingDecoder::Flush() {
  std::string out = Drain(/*final=*/true);
  pending_.clear();
  first_ = true;
  return out;
}

std::string StreamingDecoder::Drain(bool final) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const tokenizer::Utf8Scan scan = tokenizer::ScanUtf8(std::string_view(pending_).substr(i));
    if (scan.kind == tokenizer::Utf8Kind::kIncomplete && !final) break;  // wait for more bytes
    if (scan.kind == tokenizer::Utf8Kind::kValid) {
      out.append(pending_, i, scan.length);
    } else {
      out.append(kReplacement);
    }
    i += scan.length;
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace uf
