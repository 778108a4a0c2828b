// A context-free grammar over bytes, the form every output constraint is compiled to (JSON
// schemas, plain JSON mode). Rules are alternatives of sequences whose elements are byte sets or
// references to rules; repetition is right recursion, which the automaton (automaton.h) runs in
// constant stack depth. Working on bytes rather than code points lets a token that ends inside a
// UTF-8 character be checked like any other: the grammar spells valid UTF-8 out byte by byte.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace uf::grammar {

using ByteSet = std::bitset<256>;

// [lo, hi] as a ByteSet.
ByteSet ByteRange(uint8_t lo, uint8_t hi);
// The bytes of chars, e.g. AnyOf(" \t\n").
ByteSet AnyOf(std::string_view chars);

struct Element {
  enum Kind : uint8_t { kBytes, kRule, kEnd };
  Kind kind = kEnd;
  int32_t arg = 0;  // kBytes: index of the byte set; kRule: rule id
};

using Seq = std::vector<Element>;

class Grammar {
 public:
  // Rules are declared first (so that they can refer to each other) and defined once.
  int32_t Declare(std::string name);
  void Define(int32_t rule, std::vector<Seq> alternatives);
  int32_t Rule(std::string name, std::vector<Seq> alternatives) {
    const int32_t id = Declare(std::move(name));
    Define(id, std::move(alternatives));
    return id;
  }

  Element Bytes(const ByteSet& set);
  static Element Ref(int32_t rule) { return {Element::kRule, rule}; }
  Seq Literal(std::string_view text);
  // seq?, seq*, and seq repeated min..max times (max < 0: unbounded).
  Element Optional(Seq seq);
  Element Star(Seq seq);
  Element Repeat(Seq seq, int min, int max);

  // Checks the grammar (every rule defined, no left recursion: a rule reachable from its own
  // start without consuming a byte would make the automaton loop) and lays it out. The grammar
  // must not change afterwards.
  Status Finalize(int32_t root);

  // After Finalize. Each alternative is a run of positions ending with a kEnd element.
  int32_t root() const { return root_; }
  const std::vector<Element>& positions() const { return positions_; }
  const std::vector<int32_t>& alternatives(int32_t rule) const { return rule_alts_[rule]; }
  const ByteSet& byte_set(int32_t i) const { return byte_sets_[i]; }
  // Fewest bytes a rule / the rest of an alternative from position pos can match.
  int64_t MinBytesOfRule(int32_t rule) const { return rule_min_[rule]; }
  int64_t MinBytesFrom(int32_t pos) const { return pos_min_[pos]; }
  int32_t num_rules() const { return static_cast<int32_t>(names_.size()); }
  // Identifies the language: equal texts, equal grammars (the engine caches automata by it).
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> defs_;
  std::vector<bool> defined_;
  std::vector<ByteSet> byte_sets_;
  int32_t root_ = -1;
  std::vector<Element> positions_;
  std::vector<std::vector<int32_t>> rule_alts_;  // [rule] start position of each alternative
  std::vector<int64_t> rule_min_;
  std::vector<int64_t> pos_min_;
  std::string fingerprint_;
};

}  // namespace uf::grammar
