// Distances in tokens from automaton states to a valid end (TokenConstraint::Distance), and the
// cheap bounds that stand in for them (ShortestBytesBound).
//
// The graph: automaton states, an edge per token the grammar allows (the trie walk of
// TokenConstraint::Successors gives a state's distinct successors). A complete state is at 0, an
// accepting one at 1 (the end of generation). The graph is built lazily and may be infinite (JSON
// mode nests without end), so a distance is found by a breadth-first search from the state, layer
// k holding the states first reached after k tokens. Each reached state u offers the candidate
// k + bound(u), where bound(u) is what is already known of u: 0 / 1 at the end, a recorded
// distance or bound, or the byte bound (its fewest bytes to accept + 1: each byte is a token of
// its own). States that are settled (accepting, or exact), and states whose lower bound (from an
// earlier exact search) shows they cannot beat the best candidate, are not expanded; every other
// state of a layer can reach a valid end no sooner than the next layer, so the search ends, exact,
// when no state is left to expand. A search that would expand more than kMaxSearchStates states
// or walk kMaxSearchNodes trie nodes stops early; the best candidate so far is then an upper bound.
//
// Why an upper bound is safe, and why recorded distances never go up: the mask lets a token
// through only when the distance after it fits in what is left. For that to keep a way open at
// every step, each distance used must be achievable by a path whose states, reached later, report
// distances that fit as well. So a search records best - i for each state i tokens along the path
// to its best candidate (exact when the search was), ShortestBytesBound records its tokenization's
// path the same way, recorded distances only ever go down, and the byte bound is achieved by the
// single-byte tokens of a shortest completion, whose states' byte bounds each fall by one. A
// search's result is at most its state's recorded and byte bounds, so a state let in by any of
// them is never found farther than that.
#include <algorithm>

#include "grammar/token_mask.h"

namespace uf::grammar {
namespace {

// A search expands at most this many states (each expansion is one trie walk, once per state:
// successor lists are kept). An 11-property object's first search expands ~2k (85 ms on a 50k
// vocabulary); free JSON nested from the start would go on without end.
constexpr int64_t kMaxSearchStates = 16384;
// And visits at most this many trie nodes in new walks (~0.5 s).
constexpr int64_t kMaxSearchNodes = int64_t{1} << 24;
// Bounds the memory of the kept successor lists (state ids).
constexpr size_t kMaxSearchSuccessors = size_t{1} << 22;

}  // namespace

void TokenConstraint::Record(StateId state, int64_t distance, bool exact) {
  if (static_cast<size_t>(state) >= dist_.size()) {
    const size_t n = std::max<size_t>(state + 1, automaton_.num_states());
    dist_.resize(n, -1);
    dist_exact_.resize(n, 0);
  }
  const int32_t d = static_cast<int32_t>(std::min(distance, kUnreachable));
  if (dist_[state] < 0 || d < dist_[state]) {
    lowered_ += dist_[state] >= 0 ? 1 : 0;
    dist_[state] = d;
    dist_exact_[state] = exact;
  } else if (d == dist_[state] && exact) {
    dist_exact_[state] = 1;
  }
}

int64_t TokenConstraint::KnownBound(StateId state) {
  if (automaton_.Complete(state)) return 0;
  if (automaton_.Accepting(state)) return 1;
  int64_t bound =
      trie_->spells_every_byte() ? automaton_.MinBytesToAccept(state) + 1 : kUnreachable;
  if (static_cast<size_t>(state) < dist_.size() && dist_[state] >= 0) {
    bound = std::min<int64_t>(bound, dist_[state]);
  }
  return std::min(bound, kUnreachable);
}

const std::vector<StateId>& TokenConstraint::SearchSuccessors(StateId state) {
  auto it = search_succs_.find(state);
  if (it != search_succs_.end()) return it->second;
  if (search_succs_size_ >= kMaxSearchSuccessors) {
    search_succs_.clear();
    search_succs_size_ = 0;
  }
  std::vector<StateId> succs;
  Successors(state, &succs, nullptr);
  search_succs_size_ += succs.size() + 1;
  return search_succs_.emplace(state, std::move(succs)).first->second;
}

int64_t TokenConstraint::RecordedOrBound(StateId state) {
  if (automaton_.Complete(state)) return 0;
  if (automaton_.Accepting(state)) return 1;
  if (static_cast<size_t>(state) < dist_.size() && dist_[state] >= 0) return dist_[state];
  return ShortestBytesBound(state);
}

int64_t TokenConstraint::ShortestBytesBound(StateId state) {
  if (!trie_->spells_every_byte()) {
    // Without a token for every byte a shortest completion may not be spellable: search.
    return Distance(state);
  }
  // A shortest completion in bytes, and the state after each of its bytes.
  // It stops at the first state on the way that has a recorded distance (its path is achievable
  // from there): completions of nearby states share their ends, so each is spelled once.
  std::vector<StateId> at = {state};
  std::string text;
  int64_t tail = -1;
  for (StateId x = state; !automaton_.Accepting(x);) {
    if (x != state && static_cast<size_t>(x) < dist_.size() && dist_[x] >= 0) {
      tail = dist_[x];
      break;
    }
    auto [it, inserted] = min_byte_.try_emplace(x, 0);
    if (inserted) {
      const int64_t need = automaton_.MinBytesToAccept(x) - 1;
      int b = 0;
      for (; b < 256; ++b) {
        const StateId y = automaton_.Next(x, static_cast<uint8_t>(b));
        if (y != kDead && automaton_.MinBytesToAccept(y) == need) break;
      }
      it->second = static_cast<uint8_t>(b);  // b < 256: MinBytesToAccept is achieved
    }
    x = automaton_.Next(x, it->second);
    text.push_back(static_cast<char>(it->second));
    at.push_back(x);
  }
  // Its fewest tokens: every split of an accepted text is accepted, so any pieces that spell it.
  const TokenTrie& t = *trie_;
  const size_t n = text.size();
  std::vector<int32_t> fewest(n + 1, INT32_MAX), from(n + 1, -1);
  fewest[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    if (fewest[i] == INT32_MAX) continue;
    int32_t node = 0;
    for (size_t j = i; j < n; ++j) {
      // The child of node by text[j]: children follow their parent in preorder, siblings chained
      // by skip_.
      int32_t child = node + 1;
      const int32_t end = t.skip_[node];
      while (child < end && t.byte_[child] != static_cast<uint8_t>(text[j])) child = t.skip_[child];
      if (child >= end) break;
      node = child;
      if (t.num_tokens_[node] > 0 && fewest[i] + 1 < fewest[j + 1]) {
        fewest[j + 1] = fewest[i] + 1;
        from[j + 1] = static_cast<int32_t>(i);
      }
    }
  }
  // After the text: the recorded rest, or the end of generation unless complete.
  const int64_t rest = tail >= 0 ? tail : automaton_.Complete(at[n]) ? 0 : 1;
  const int64_t total = fewest[n] + rest;
  // Record the path: after the token ending at j, fewest[n] - fewest[j] tokens and the end remain.
  for (int32_t j = static_cast<int32_t>(n); j >= 0; j = j > 0 ? from[j] : -1) {
    Record(at[j], fewest[n] - fewest[j] + rest, false);
  }
  return std::min<int64_t>(total, dist_[state]);
}

int64_t TokenConstraint::LowerBound(StateId state) const {
  if (automaton_.Accepting(state)) return automaton_.Complete(state) ? 0 : 1;
  return static_cast<size_t>(state) < lower_.size() ? std::max<int32_t>(lower_[state], 1) : 1;
}

bool TokenConstraint::Settled(StateId state) const {
  return automaton_.Accepting(state) ||
         (static_cast<size_t>(state) < dist_.size() && dist_[state] >= 0 &&
          (dist_exact_[state] || dist_[state] <= LowerBound(state)));
}

int64_t TokenConstraint::Distance(StateId state) {
  if (automaton_.Complete(state)) return 0;
  if (automaton_.Accepting(state)) return 1;
  if (Settled(state)) return dist_[state];
  ++stats_.searches;
  // How each reached state was first reached (kDead for the start) and after how many tokens;
  // also the seen set.
  struct Reached {
    StateId parent;
    int32_t layer;
  };
  std::unordered_map<StateId, Reached> reached = {{state, {kDead, 0}}};
  std::vector<StateId> layer = {state}, next;
  int64_t best = kUnreachable;
  StateId best_state = kDead;
  bool exact = false;
  int64_t expanded = 0;
  const int64_t walk_nodes = stats_.walk_nodes;
  for (int64_t k = 0;; ++k) {
    for (StateId u : layer) {
      const int64_t c = k + KnownBound(u);
      if (c < best) best = c, best_state = u;
    }
    next.clear();
    bool gave_up = false;
    for (StateId u : layer) {
      // No path through u beats best: u is settled (its candidate is its best), or even its
      // lower bound does not improve (the next layer's candidates are at least k + 1).
      if (Settled(u) || k + LowerBound(u) >= best) continue;
      if (expanded >= kMaxSearchStates || stats_.walk_nodes - walk_nodes >= kMaxSearchNodes) {
        gave_up = true;
        break;
      }
      ++expanded;
      // Copy: SearchSuccessors may drop the cache on a later call.
      const std::vector<StateId> succs = SearchSuccessors(u);
      for (StateId v : succs) {
        if (reached.try_emplace(v, Reached{u, static_cast<int32_t>(k + 1)}).second) {
          next.push_back(v);
        }
      }
    }
    if (gave_up) break;
    if (next.empty()) {
      exact = true;
      break;
    }
    layer.swap(next);
  }
  stats_.searched_states += expanded;
  if (!exact) ++stats_.inexact_searches;
  if (best_state == kDead) {
    Record(state, kUnreachable, exact);
    return kUnreachable;
  }
  // The path to the best candidate: each state on it is within best - (its layer).
  for (StateId u = best_state; u != kDead; u = reached.at(u).parent) {
    Record(u, best - reached.at(u).layer, exact);
  }
  // An exact distance bounds every reached state's from below: reached after k tokens, a state
  // at less than best - k would give the start a shorter path.
  if (exact) {
    if (lower_.size() < dist_.size()) lower_.resize(dist_.size(), 0);
    for (const auto& [u, r] : reached) {
      if (static_cast<size_t>(u) >= lower_.size()) lower_.resize(u + 1, 0);
      lower_[u] = std::max<int32_t>(lower_[u], static_cast<int32_t>(best - r.layer));
    }
  }
  return best;
}

}  // namespace uf::grammar
