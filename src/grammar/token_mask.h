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
// Budget. A reply cut off by max_tokens would not parse, so each automaton state has a distance:
// the fewest tokens of this vocabulary (the end of generation included) that take it to a valid
// end. When the tokens left are few, a token is allowed only when the distance of the state after
// it fits in what is left after it, so a reply completes whenever max_tokens is at least the
// start's distance. Bounds that a path of tokens achieves stand in for distances, in stages, each
// only when the one before says the budget is tight: the byte bound (every vocabulary this engine
// loads spells each byte as a token, so n bytes take at most n tokens; found in the cached walk),
// then the fewest tokens that spell a shortest completion in bytes (cheap, recorded along its
// path), then, for the current state only when its own bound no longer fits (the first tight step
// of a request whose max_tokens is below it), the exact distance of a breadth-first search over
// the token graph (token_distance.cc). Per tight state the entry keeps each token's bound (2 bytes
// a token) and the mask is one pass over them.
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
  // Every byte is a token of its own: then a completion of n bytes takes at most n tokens.
  bool spells_every_byte() const { return spells_every_byte_; }
  int32_t words() const { return (n_vocab_ + 63) / 64; }
  const std::string& piece(int32_t token) const { return pieces_[token]; }
  bool end_of_generation(int32_t token) const;

 private:
  friend class TokenConstraint;
  int32_t n_vocab_ = 0;
  bool spells_every_byte_ = false;
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
  // included (< 0: no limit), copied into *mask (TokenTrie::words() bits). When remaining is at
  // least Distance(state), every allowed token leaves a state whose distance fits in what is left
  // after it, so following the masks always ends complete. Never empty: when nothing fits the
  // budget, the unbudgeted mask is given (the output will be cut off).
  void Mask(StateId state, int64_t remaining, std::vector<uint64_t>* mask);
  // The state after token (kDead when the grammar rejects it; end-of-generation tokens leave
  // an accepting state unchanged).
  StateId Advance(StateId state, int32_t token);
  bool Accepting(StateId state) const { return automaton_.Accepting(state); }
  // Nothing but the end of generation may follow.
  bool Complete(StateId state) const { return automaton_.Complete(state); }
  // The fewest tokens that end a reply from state: 0 when complete, 1 (the end of generation)
  // when accepting. Exact unless the search gave up (kMaxSearchStates in token_distance.cc);
  // then an upper bound that a path of tokens still achieves. kUnreachable when no sequence of
  // allowed tokens ends the reply.
  int64_t Distance(StateId state);
  static constexpr int64_t kUnreachable = INT32_MAX;
  const TokenTrie& trie() const { return *trie_; }
  Automaton& automaton() { return automaton_; }

  // out[i] = logits[i] where mask bit i is set, -inf elsewhere.
  static void Apply(const uint64_t* mask, const float* logits, int32_t n, float* out);

  struct Stats {
    int64_t walks = 0;       // trie walks (mask cache misses, and once per tight state)
    int64_t walk_nodes = 0;  // trie nodes visited by them
    int64_t cache_hits = 0;
    int64_t searches = 0;          // distance searches
    int64_t searched_states = 0;   // states they expanded
    int64_t inexact_searches = 0;  // searches that gave up (the distance is a bound)
  };
  const Stats& stats() const { return stats_; }

 private:
  // A token's successor index (Successors) for a disallowed token / the end of generation.
  static constexpr uint16_t kNoSucc = UINT16_MAX;
  static constexpr uint16_t kEogSucc = UINT16_MAX - 1;
  static constexpr size_t kMaxSuccs = UINT16_MAX - 1;
  struct Entry {
    std::vector<uint64_t> bits;
    int64_t max_need = 0;  // byte bound on the distance after any allowed token (bytes + 1)
    // Filled the first time the budget is tight in this state: the distinct states after its
    // tokens, [n_vocab] each token's index into them, the distance read for each (recorded or
    // cheap bound), and [n_vocab] the distance after each allowed token (0 for the end of
    // generation, UINT16_MAX when not allowed or farther) with their largest.
    std::vector<StateId> succs;
    std::vector<uint16_t> succ_of_token;
    std::vector<int32_t> succ_dist;
    std::vector<uint16_t> need;
    int64_t max_token_need = 0;
    int64_t lowered = -1;  // lowered_ when succ_dist was last read
  };
  // The shared trie walk of Walk and Successors: calls on_node(i, s) for every trie node i that
  // ends at least one token and is live from state, with s the state after its bytes. Subtrees
  // behind a dead byte are skipped whole.
  template <typename OnNode>
  void ForEachLiveTokenNode(StateId state, OnNode on_node);
  // Walks the trie from state: the allowed tokens into *bits and the byte bound on the distance
  // after any of them into *max_need.
  void Walk(StateId state, std::vector<uint64_t>* bits, int64_t* max_need);
  // Walks the trie from state collecting the distinct states after its tokens into *succs and,
  // when given, each token's index into them into *succ_of_token (or kNoSucc / kEogSucc).
  void Successors(StateId state, std::vector<StateId>* succs, std::vector<uint16_t>* succ_of_token);
  // The successors of a state for the distance search (cached).
  const std::vector<StateId>& SearchSuccessors(StateId state);
  // The best known distance of state without searching: 0 / 1 at the end, else the recorded one,
  // else the byte bound.
  int64_t KnownBound(StateId state);
  // The recorded distance, or else the cheap bound of ShortestBytesBound (no search).
  int64_t RecordedOrBound(StateId state);
  // The fewest tokens that spell a shortest completion in bytes, plus the end of generation:
  // achievable, recorded along its path, and often the distance itself.
  int64_t ShortestBytesBound(StateId state);
  void Record(StateId state, int64_t distance, bool exact);
  // Reads the distances of state's successors (recorded, or cheap bounds), or (refresh) only what
  // records lowered since; rebuilds e->need when one changed.
  void ReadNeeds(StateId state, bool refresh, Entry* e);
  // What exact searches showed the distance to be at least (1 when nothing is known).
  int64_t LowerBound(StateId state) const;
  // Accepting, or the recorded distance is known exact.
  bool Settled(StateId state) const;

  std::shared_ptr<const TokenTrie> trie_;
  Automaton automaton_;
  std::unordered_map<StateId, Entry> cache_;
  int64_t need_arrays_ = 0;    // entries holding need arrays (each n_vocab * 4 bytes)
  std::vector<StateId> path_;  // [depth] walk scratch
  // [state] recorded distances (-1: none) and whether each is exact. Never forgotten and only
  // ever lowered: a distance relied on must stay achievable (see token_distance.cc).
  std::vector<int32_t> dist_;
  std::vector<uint8_t> dist_exact_;
  std::vector<int32_t> lower_;  // [state] LowerBound, 0 when unknown
  int64_t lowered_ = 0;         // times a recorded distance went down: a refresh is due
  std::unordered_map<StateId, std::vector<StateId>> search_succs_;
  std::unordered_map<StateId, uint8_t> min_byte_;  // a byte that starts a shortest completion
  size_t search_succs_size_ = 0;
  Stats stats_;
};

}  // namespace uf::grammar
