// Grammar constraints over a model's tokens: which tokens may come next, as a bit mask over the
// vocabulary applied to the logits before sampling.
//
// Cost. The mask of an automaton state is found by one walk of the vocabulary's byte trie
// (TokenTrie) that feeds each edge's byte to the automaton and skips a whole subtree at the first
// byte the grammar rejects, so a state that allows few tokens (inside a property name, after a
// value) costs a few hundred steps. Masks are cached per automaton state: the state inside a
// string is the same after every character, so a long string walks the trie once. Per token the
// engine then pays one cache lookup, a 16 KB mask copy (128k vocabulary) and one pass over the
// logits row (TokenConstraint::Apply).
//
// Budget. A response cut off by max_tokens would not parse. So each state also knows the fewest
// bytes that complete the grammar (Automaton::MinBytesToAccept): a token is allowed only when,
// after it, the bytes still needed plus the end-of-generation token fit in what is left, counting
// one token per byte (every vocabulary this engine loads has single-byte tokens). Until the budget
// is tight the cached mask is used as is (each entry records the largest need among its tokens).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/automaton.h"

namespace uf {
class Tokenizer;
}

namespace uf::grammar {

// The tokens a grammar can produce, by their bytes: every token with a non-empty piece
// (TokenToPiece) but control, unknown and unused ones, plus the end-of-generation tokens, allowed
// only where the grammar accepts.
class TokenTrie {
 public:
  // n_vocab: the model's logits row (may exceed the tokenizer's vocabulary; the rest is masked).
  static std::shared_ptr<const TokenTrie> Build(const Tokenizer& tokenizer, int32_t n_vocab);

  int32_t n_vocab() const { return n_vocab_; }
  int32_t words() const { return (n_vocab_ + 63) / 64; }
  const std::string& piece(int32_t token) const { return pieces_[token]; }
  bool end_of_generation(int32_t token) const;

 private:
  friend class TokenConstraint;
  int32_t n_vocab_ = 0;
  std::vector<std::string> pieces_;  // [n_vocab] "" for tokens the grammar never allows
  std::vector<int32_t> eog_;         // end-of-generation token ids
  // Nodes in preorder; node 0 is the root.
  std::vector<uint8_t> byte_;         // [node] byte of the edge into it
  std::vector<int32_t> depth_;        // [node]
  std::vector<int32_t> skip_;         // [node] first node after its subtree
  std::vector<int32_t> first_token_;  // [node] index into tokens_
  std::vector<int32_t> num_tokens_;   // [node] tokens whose piece ends here
  std::vector<int32_t> tokens_;
  int32_t max_depth_ = 0;
};

class TokenConstraint {
 public:
  TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie);

  StateId start() const { return automaton_.start(); }
  // The allowed tokens in state when `remaining` tokens may still be generated, this one
  // included (< 0: no limit), copied into *mask (TokenTrie::words() bits). Never empty: when
  // nothing fits the budget, the unbudgeted mask is given (the output will be cut off).
  void Mask(StateId state, int64_t remaining, std::vector<uint64_t>* mask);
  // The state after token (kDead when the grammar rejects it; end-of-generation tokens leave
  // an accepting state unchanged).
  StateId Advance(StateId state, int32_t token);
  bool Accepting(StateId state) const { return automaton_.Accepting(state); }
  // Nothing but the end of generation may follow.
  bool Complete(StateId state) const { return automaton_.Complete(state); }
  const TokenTrie& trie() const { return *trie_; }
  Automaton& automaton() { return automaton_; }

  // out[i] = logits[i] where mask bit i is set, -inf elsewhere.
  static void Apply(const uint64_t* mask, const float* logits, int32_t n, float* out);

  struct Stats {
    int64_t walks = 0;       // trie walks (cache misses and budget-tight states)
    int64_t walk_nodes = 0;  // trie nodes visited by them
    int64_t cache_hits = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Entry {
    std::vector<uint64_t> bits;
    int64_t max_need = 0;  // largest (bytes to accept + 1) after any allowed non-EOG token
    // [n_vocab] each allowed token's need (saturated), filled the first time the budget is
    // tight in this state; later tight steps filter the mask by it in one pass.
    std::vector<uint16_t> need;
  };
  // Walks the trie from state: the allowed tokens into *bits, the largest need into *max_need,
  // and each allowed token's need into *need when given.
  void Walk(StateId state, std::vector<uint64_t>* bits, int64_t* max_need,
            std::vector<uint16_t>* need);

  std::shared_ptr<const TokenTrie> trie_;
  Automaton automaton_;
  std::unordered_map<StateId, Entry> cache_;
  int64_t need_arrays_ = 0;    // entries holding a need array (each n_vocab * 2 bytes)
  std::vector<StateId> path_;  // [depth] walk scratch
  Stats stats_;
};

}  // namespace uf::grammar
