#include "grammar/automaton.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace uf::grammar {
namespace {

constexpr int32_t kNotComputed = -2;
// Grammar::Finalize rules out left recursion, so expansion always terminates; this only guards
// against a bug turning into a stack overflow.
constexpr int kMaxExpandDepth = 100000;

}  // namespace

Automaton::Automaton(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  std::vector<int32_t> stacks;
  bool accepting = false;
  for (int32_t alt : grammar_->alternatives(grammar_->root())) {
    ExpandInto(Push(alt, -1), &stacks, &accepting, 0);
  }
  start_ = Intern(std::move(stacks), accepting);
}

int32_t Automaton::Push(int32_t pos, int32_t parent) {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, inserted] = stack_ids_.try_emplace(key, static_cast<int32_t>(stacks_.size()));
  if (inserted) {
    stacks_.push_back({pos, parent});
    expansions_.emplace_back();
    stack_min_.push_back(-1);
  }
  return it->second;
}

void Automaton::ExpandInto(int32_t stack, std::vector<int32_t>* out, bool* accepting, int depth) {
  UF_CHECK(depth < kMaxExpandDepth) << "grammar expansion did not terminate";
  const Stack s = stacks_[stack];
  const Element& e = grammar_->positions()[s.pos];
  switch (e.kind) {
    case Element::kBytes:
      out->push_back(stack);
      return;
    case Element::kEnd:
      if (s.parent < 0) {
        *accepting = true;
      } else {
        ExpandInto(s.parent, out, accepting, depth + 1);
      }
      return;
    case Element::kRule: {
      // What follows the reference; nothing to return to when it ends the alternative (so
      // right recursion runs in constant depth).
      const int32_t next = s.pos + 1;
      const int32_t below =
          grammar_->positions()[next].kind == Element::kEnd ? s.parent : Push(next, s.parent);
      for (int32_t alt : grammar_->alternatives(e.arg)) {
        ExpandInto(Push(alt, below), out, accepting, depth + 1);
      }
      return;
    }
  }
}

const Automaton::Expansion& Automaton::Expand(int32_t stack) {
  if (!expansions_[stack].done) {
    Expansion x;
    ExpandInto(stack, &x.stacks, &x.accepting, 0);
    x.done = true;
    expansions_[stack] = std::move(x);  // ExpandInto may have grown expansions_
  }
  return expansions_[stack];
}

StateId Automaton::Intern(std::vector<int32_t> stacks, bool accepting) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  std::string key(1 + stacks.size() * sizeof(int32_t), '\0');
  key[0] = accepting ? 1 : 0;
  if (!stacks.empty()) std::memcpy(key.data() + 1, stacks.data(), stacks.size() * sizeof(int32_t));
  auto [it, inserted] =
      state_ids_.try_emplace(std::move(key), static_cast<StateId>(states_.size()));
  if (inserted) {
    states_.push_back({std::move(stacks), accepting, -1});
    std::array<int32_t, 256> row;
    row.fill(kNotComputed);
    next_.push_back(row);
  }
  return it->second;
}

StateId Automaton::Next(StateId state, uint8_t byte) {
  const int32_t cached = next_[state][byte];
  if (cached != kNotComputed) return cached;
  std::vector<int32_t> out;
  bool accepting = false;
  // Copy: Expand may grow states_' neighbours but not this list; stacks_ may reallocate.
  const std::vector<int32_t> stacks = states_[state].stacks;
  for (int32_t id : stacks) {
    const Stack s = stacks_[id];
    const Element& e = grammar_->positions()[s.pos];
    if (!grammar_->byte_set(e.arg).test(byte)) continue;
    const Expansion& x = Expand(Push(s.pos + 1, s.parent));
    out.insert(out.end(), x.stacks.begin(), x.stacks.end());
    accepting = accepting || x.accepting;
  }
  const StateId result = out.empty() && !accepting ? kDead : Intern(std::move(out), accepting);
  next_[state][byte] = result;
  return result;
}

StateId Automaton::Walk(StateId state, std::string_view bytes) {
  for (char c : bytes) {
    if (state == kDead) return kDead;
    state = Next(state, static_cast<uint8_t>(c));
  }
  return state;
}

int64_t Automaton::StackMinBytes(int32_t stack) {
  if (stack < 0) return 0;
  if (stack_min_[stack] < 0) {
    const Stack s = stacks_[stack];
    stack_min_[stack] = grammar_->MinBytesFrom(s.pos) + StackMinBytes(s.parent);
  }
  return stack_min_[stack];
}

int64_t Automaton::MinBytesToAccept(StateId state) {
  State& st = states_[state];
  if (st.min_bytes < 0) {
    int64_t best = st.accepting ? 0 : INT64_MAX;
    for (int32_t id : st.stacks) best = std::min(best, StackMinBytes(id));
    states_[state].min_bytes = best;
  }
  return states_[state].min_bytes;
}

}  // namespace uf::grammar
