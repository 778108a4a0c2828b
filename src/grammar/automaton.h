// A Grammar run as a deterministic automaton over bytes, built lazily: a state is the set of
// parser stacks the bytes so far leave alive (as in llama.cpp's grammar sampler), interned so
// that equal sets share one id, and each (state, byte) transition is computed once and then read
// from a table. Stacks are interned persistent lists (a position and the id of the stack below),
// so pushing and comparing them is O(1), and a repetition (right recursion) pops its frame before
// pushing the next one, so a string of any length stays in one state.
//
// Not thread-safe: the engine thread owns every automaton.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace uf::grammar {

using StateId = int32_t;
inline constexpr StateId kDead = -1;

class Automaton {
 public:
  // grammar must be finalized.
  explicit Automaton(std::shared_ptr<const Grammar> grammar);

  const Grammar& grammar() const { return *grammar_; }
  StateId start() const { return start_; }
  // The state after one more byte, or kDead when the grammar rejects it.
  StateId Next(StateId state, uint8_t byte);
  // After several bytes (kDead once one is rejected).
  StateId Walk(StateId state, std::string_view bytes);
  // The bytes so far form a complete sentence.
  bool Accepting(StateId state) const { return states_[state].accepting; }
  // Accepting and nothing may follow.
  bool Complete(StateId state) const {
    return states_[state].accepting && states_[state].stacks.empty();
  }
  // Fewest bytes that take the state to acceptance.
  int64_t MinBytesToAccept(StateId state);
  int64_t num_states() const { return static_cast<int64_t>(states_.size()); }

 private:
  struct Stack {
    int32_t pos;     // the position to match next
    int32_t parent;  // stack below (-1 = bottom)
  };
  struct Expansion {
    std::vector<int32_t> stacks;  // stacks whose top is a byte set
    bool accepting = false;       // the stack can be emptied without a byte
    bool done = false;
  };
  struct State {
    std::vector<int32_t> stacks;  // sorted stack ids, tops are byte sets
    bool accepting = false;
    int64_t min_bytes = -1;  // MinBytesToAccept, once computed
  };

  int32_t Push(int32_t pos, int32_t parent);
  // Memoized: the stacks (with byte-set tops) a stack stands for.
  const Expansion& Expand(int32_t stack);
  void ExpandInto(int32_t stack, std::vector<int32_t>* out, bool* accepting, int depth);
  StateId Intern(std::vector<int32_t> stacks, bool accepting);
  int64_t StackMinBytes(int32_t stack);

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Stack> stacks_;
  std::unordered_map<uint64_t, int32_t> stack_ids_;  // (pos, parent) -> id
  std::vector<Expansion> expansions_;                // [stack]
  std::vector<int64_t> stack_min_;                   // [stack], -1 = not computed
  std::vector<State> states_;
  std::unordered_map<std::string, StateId> state_ids_;  // key: accepting + stack ids
  std::vector<std::array<int32_t, 256>> next_;          // [state][byte]; -2 = not computed
  StateId start_ = kDead;
};

}  // namespace uf::grammar
