#include "grammar/token_mask.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "tokenizer/tokenizer.h"

namespace uf::grammar {
namespace {

// Bounds the memory of one grammar's masks (16 KB each for a 128k vocabulary): past it the cache
// starts over.
constexpr size_t kMaxCachedMasks = 4096;
// Need arrays (and successor indexes) are 32x larger than masks and only wanted near the end of a
// response.
constexpr int64_t kMaxNeedArrays = 64;

}  // namespace

std::shared_ptr<const TokenTrie> TokenTrie::Build(const Tokenizer& tokenizer, int32_t n_vocab) {
  auto t = std::make_shared<TokenTrie>();
  t->n_vocab_ = n_vocab;
  t->pieces_.assign(n_vocab, "");
  std::vector<std::pair<std::string_view, int32_t>> sorted;
  const int32_t n_tok = std::min(n_vocab, tokenizer.vocab_size());
  for (int32_t id = 0; id < n_tok; ++id) {
    if (tokenizer.IsEndOfGeneration(id)) {
      t->eog_.push_back(id);
      continue;
    }
    // Control and unknown tokens are markup, not text. User-defined tokens (Qwen's <tool_call>)
    // render as their text, so they may spell it.
    const TokenType type = tokenizer.token_type(id);
    if (type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kUnused) {
      continue;
    }
    t->pieces_[id] = tokenizer.TokenToPiece(id);
  }
  for (int32_t id = 0; id < n_tok; ++id) {
    if (!t->pieces_[id].empty()) sorted.emplace_back(t->pieces_[id], id);
  }
  std::sort(sorted.begin(), sorted.end());
  // Sorted pieces give the trie in preorder: each piece shares a prefix with the previous one
  // and opens new nodes below it.
  t->byte_.push_back(0);
  t->depth_.push_back(0);
  t->skip_.push_back(0);
  t->first_token_.push_back(0);
  t->num_tokens_.push_back(0);
  std::vector<int32_t> path = {0};  // node at each depth of the previous piece
  std::string_view prev;
  auto close = [&](int32_t node) { t->skip_[node] = static_cast<int32_t>(t->byte_.size()); };
  for (const auto& [piece, id] : sorted) {
    size_t common = 0;
    while (common < prev.size() && common < piece.size() && prev[common] == piece[common]) {
      ++common;
    }
    while (path.size() > common + 1) {
      close(path.back());
      path.pop_back();
    }
    for (size_t d = common; d < piece.size(); ++d) {
      const int32_t node = static_cast<int32_t>(t->byte_.size());
      t->byte_.push_back(static_cast<uint8_t>(piece[d]));
      t->depth_.push_back(static_cast<int32_t>(d + 1));
      t->skip_.push_back(0);
      t->first_token_.push_back(static_cast<int32_t>(t->tokens_.size()));
      t->num_tokens_.push_back(0);
      path.push_back(node);
    }
    const int32_t node = path.back();
    if (t->num_tokens_[node] == 0) t->first_token_[node] = static_cast<int32_t>(t->tokens_.size());
    t->tokens_.push_back(id);
    ++t->num_tokens_[node];
    t->max_depth_ = std::max(t->max_depth_, static_cast<int32_t>(piece.size()));
    prev = piece;
  }
  while (!path.empty()) {
    close(path.back());
    path.pop_back();
  }
  // The root's children are the first bytes of pieces; a one-byte piece ends at its child.
  int32_t single = 0;
  for (int32_t node = 1; node < static_cast<int32_t>(t->byte_.size()); node = t->skip_[node]) {
    single += t->num_tokens_[node] > 0 ? 1 : 0;
  }
  t->spells_every_byte_ = single == 256;
  return t;
}

bool TokenTrie::end_of_generation(int32_t token) const {
  return std::find(eog_.begin(), eog_.end(), token) != eog_.end();
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar,
                                 std::shared_ptr<const TokenTrie> trie)
    : trie_(std::move(trie)), automaton_(std::move(grammar)) {
  path_.resize(trie_->max_depth_ + 1);
}

template <typename OnNode>
void TokenConstraint::ForEachLiveTokenNode(StateId state, OnNode on_node) {
  const TokenTrie& t = *trie_;
  ++stats_.walks;
  path_[0] = state;
  const int32_t n = static_cast<int32_t>(t.byte_.size());
  int64_t visited = 0;
  for (int32_t i = 1; i < n;) {
    ++visited;
    const StateId s = automaton_.Next(path_[t.depth_[i] - 1], t.byte_[i]);
    if (s == kDead) {
      i = t.skip_[i];
      continue;
    }
    path_[t.depth_[i]] = s;
    if (t.num_tokens_[i] > 0) on_node(i, s);
    ++i;
  }
  stats_.walk_nodes += visited;
}

void TokenConstraint::Walk(StateId state, std::vector<uint64_t>* bits, int64_t* max_need) {
  const TokenTrie& t = *trie_;
  bits->assign(t.words(), 0);
  *max_need = 0;
  ForEachLiveTokenNode(state, [&](int32_t i, StateId s) {
    // The byte bound on the distance after the token: its bytes spelled one token each, then
    // the end of generation.
    *max_need = std::max(*max_need, automaton_.MinBytesToAccept(s) + 1);
    for (int32_t k = 0; k < t.num_tokens_[i]; ++k) {
      const int32_t id = t.tokens_[t.first_token_[i] + k];
      (*bits)[id >> 6] |= uint64_t{1} << (id & 63);
    }
  });
  if (!t.spells_every_byte_) *max_need = kUnreachable;  // no bound: always search
  if (automaton_.Accepting(state)) {
    for (int32_t id : t.eog_) (*bits)[id >> 6] |= uint64_t{1} << (id & 63);
  }
}

void TokenConstraint::Successors(StateId state, std::vector<StateId>* succs,
                                 std::vector<uint16_t>* succ_of_token) {
  const TokenTrie& t = *trie_;
  succs->clear();
  if (succ_of_token != nullptr) succ_of_token->assign(t.n_vocab_, kNoSucc);
  std::unordered_map<StateId, uint16_t> index;
  // Runs of tokens lead to the same state (every token inside a string): skip the lookup then.
  StateId last = kDead;
  uint16_t last_index = kNoSucc;
  ForEachLiveTokenNode(state, [&](int32_t i, StateId s) {
    if (s != last) {
      auto [it, inserted] = index.try_emplace(s, kNoSucc);
      // Past kMaxSuccs distinct states (never seen) the rest count as disallowed when tight.
      if (inserted && succs->size() < kMaxSuccs) {
        it->second = static_cast<uint16_t>(succs->size());
        succs->push_back(s);
      }
      last = s;
      last_index = it->second;
    }
    if (succ_of_token != nullptr) {
      for (int32_t k = 0; k < t.num_tokens_[i]; ++k) {
        (*succ_of_token)[t.tokens_[t.first_token_[i] + k]] = last_index;
      }
    }
  });
  if (succ_of_token != nullptr && automaton_.Accepting(state)) {
    for (int32_t id : t.eog_) (*succ_of_token)[id] = kEogSucc;
  }
}

void TokenConstraint::Mask(StateId state, int64_t remaining, std::vector<uint64_t>* mask) {
  auto it = cache_.find(state);
  if (it == cache_.end()) {
    if (cache_.size() >= kMaxCachedMasks) {
      cache_.clear();
      need_arrays_ = 0;
    }
    Entry e;
    Walk(state, &e.bits, &e.max_need);
    it = cache_.emplace(state, std::move(e)).first;
  } else {
    ++stats_.cache_hits;
  }
  Entry& e = it->second;
  // The byte bound first: until the budget is that tight, no search is needed.
  if (remaining < 0 || e.max_need <= remaining - 1) {
    *mask = e.bits;
    return;
  }
  // Then the successors' recorded distances or cheap bounds in tokens.
  if (e.succ_of_token.empty()) {
    if (need_arrays_ >= kMaxNeedArrays) {
      for (auto& [id, other] : cache_) {
        std::vector<StateId>().swap(other.succs);
        std::vector<uint16_t>().swap(other.succ_of_token);
        std::vector<int32_t>().swap(other.succ_dist);
        std::vector<uint16_t>().swap(other.need);
      }
      need_arrays_ = 0;
    }
    ++need_arrays_;
    Successors(state, &e.succs, &e.succ_of_token);
    ReadNeeds(state, /*refresh=*/false, &e);
  } else {
    ReadNeeds(state, /*refresh=*/true, &e);
  }
  if (e.max_token_need <= remaining - 1) {
    *mask = e.bits;
    return;
  }
  // Bounds are enough while the state's own fits: a path of that length is recorded, so one
  // successor fits too. Past it (the first tight step of a request whose max_tokens is below the
  // cheap bound) only the search tells whether the reply can still close.
  if (RecordedOrBound(state) > remaining) {
    Distance(state);
    ReadNeeds(state, /*refresh=*/true, &e);  // the search lowered its path's records
    if (dist_[state] > remaining) {
      *mask = e.bits;  // too late to close: the reply will be cut off
      return;
    }
  }
  // After this token, remaining - 1 tokens are left for what it still needs (UINT16_MAX: never).
  const int64_t limit = std::min<int64_t>(remaining - 1, UINT16_MAX - 1);
  mask->assign(e.bits.size(), 0);
  const int32_t n = trie_->n_vocab();
  const uint16_t* need = e.need.data();
  for (int32_t base = 0; base < n; base += 64) {
    const int32_t len = std::min(64, n - base);
    uint64_t word = 0;
    for (int32_t j = 0; j < len; ++j) word |= uint64_t{need[base + j] <= limit} << j;
    (*mask)[base >> 6] = word;
  }
}

void TokenConstraint::ReadNeeds(StateId state, bool refresh, Entry* e) {
  // Nothing lowered since the last read: nothing to refresh. (A first record is no lowering: every
  // successor has had one since the read.)
  if (refresh && e->lowered == lowered_) return;
  bool changed = !refresh;
  if (refresh) {
    // Recorded distances only go down; a successor's may have since. Every successor has one
    // (or is accepting) since it was first read.
    for (size_t j = 0; j < e->succs.size(); ++j) {
      const StateId u = e->succs[j];
      const int32_t d = automaton_.Accepting(u) ? (automaton_.Complete(u) ? 0 : 1) : dist_[u];
      if (d < e->succ_dist[j]) e->succ_dist[j] = d, changed = true;
    }
  } else {
    // The state's own distance first: it records the path that achieves it, so the first
    // successor on that path is read below at a distance one less (see token_distance.cc).
    RecordedOrBound(state);
    e->succ_dist.resize(e->succs.size());
    for (size_t j = 0; j < e->succs.size(); ++j) {
      e->succ_dist[j] = static_cast<int32_t>(RecordedOrBound(e->succs[j]));
    }
    // A bound above may have lowered what an earlier one read: read the records once more.
    for (size_t j = 0; j < e->succs.size(); ++j) {
      const StateId u = e->succs[j];
      if (!automaton_.Accepting(u)) e->succ_dist[j] = std::min(e->succ_dist[j], dist_[u]);
    }
  }
  e->lowered = lowered_;
  if (!changed) return;
  const int32_t n = trie_->n_vocab();
  e->need.assign(n, UINT16_MAX);
  e->max_token_need = 0;
  for (int32_t id = 0; id < n; ++id) {
    const uint16_t j = e->succ_of_token[id];
    if (j == kNoSucc) continue;
    const uint16_t need =
        j == kEogSucc ? 0 : static_cast<uint16_t>(std::min<int32_t>(e->succ_dist[j], UINT16_MAX));
    e->need[id] = need;
    e->max_token_need = std::max<int64_t>(e->max_token_need, need);
  }
}

StateId TokenConstraint::Advance(StateId state, int32_t token) {
  if (token < 0 || token >= trie_->n_vocab()) return kDead;
  if (trie_->end_of_generation(token)) return automaton_.Accepting(state) ? state : kDead;
  const std::string& piece = trie_->piece(token);
  if (piece.empty()) return kDead;
  return automaton_.Walk(state, piece);
}

void TokenConstraint::Apply(const uint64_t* mask, const float* logits, int32_t n, float* out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int32_t w = 0; w * 64 < n; ++w) {
    const int32_t base = w * 64, len = std::min(64, n - base);
    const uint64_t bits = mask[w];
    if (bits == ~uint64_t{0} && len == 64) {
      std::memcpy(out + base, logits + base, 64 * sizeof(float));
    } else if (bits == 0) {
      std::fill(out + base, out + base + len, kNegInf);
    } else {
      for (int32_t j = 0; j < len; ++j) {
        out[base + j] = (bits >> j) & 1 ? logits[base + j] : kNegInf;
      }
    }
  }
}

}  // namespace uf::grammar
