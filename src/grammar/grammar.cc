#include "grammar/grammar.h"

#include <limits>

#include "base/check.h"

namespace uf::grammar {
namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

int64_t AddSat(int64_t a, int64_t b) { return a >= kInf || b >= kInf ? kInf : a + b; }

}  // namespace

ByteSet ByteRange(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(b);
  return s;
}

ByteSet AnyOf(std::string_view chars) {
  ByteSet s;
  for (char c : chars) s.set(static_cast<uint8_t>(c));
  return s;
}

int32_t Grammar::Declare(std::string name) {
  names_.push_back(std::move(name));
  defs_.emplace_back();
  defined_.push_back(false);
  return static_cast<int32_t>(names_.size()) - 1;
}

void Grammar::Define(int32_t rule, std::vector<Seq> alternatives) {
  UF_CHECK(rule >= 0 && rule < num_rules() && !defined_[rule]) << "rule defined twice";
  defs_[rule] = std::move(alternatives);
  defined_[rule] = true;
}

Element Grammar::Bytes(const ByteSet& set) {
  for (size_t i = 0; i < byte_sets_.size(); ++i) {
    if (byte_sets_[i] == set) return {Element::kBytes, static_cast<int32_t>(i)};
  }
  byte_sets_.push_back(set);
  return {Element::kBytes, static_cast<int32_t>(byte_sets_.size()) - 1};
}

Seq Grammar::Literal(std::string_view text) {
  Seq s;
  for (char c : text) {
    ByteSet b;
    b.set(static_cast<uint8_t>(c));
    s.push_back(Bytes(b));
  }
  return s;
}

Element Grammar::Optional(Seq seq) { return Ref(Rule("opt", {std::move(seq), {}})); }

Element Grammar::Star(Seq seq) {
  const int32_t r = Declare("star");
  seq.push_back(Ref(r));  // right recursion: the automaton pops before it pushes (no growth)
  Define(r, {std::move(seq), {}});
  return Ref(r);
}

Element Grammar::Repeat(Seq seq, int min, int max) {
  // seq{0,k} = (seq seq{0,k-1})?, built from the inside out; then min copies in front.
  Seq tail;
  if (max < 0) {
    tail.push_back(Star(seq));
  } else {
    for (int k = 0; k < max - min; ++k) {
      Seq inner = seq;
      inner.insert(inner.end(), tail.begin(), tail.end());
      tail = {Optional(std::move(inner))};
    }
  }
  Seq all;
  for (int i = 0; i < min; ++i) all.insert(all.end(), seq.begin(), seq.end());
  all.insert(all.end(), tail.begin(), tail.end());
  return Ref(Rule("repeat", {std::move(all)}));
}

Status Grammar::Finalize(int32_t root) {
  const int32_t n = num_rules();
  if (root < 0 || root >= n) return InvalidArgumentError("grammar: no root rule");
  for (int32_t r = 0; r < n; ++r) {
    if (!defined_[r]) return InvalidArgumentError("grammar: rule " + names_[r] + " is undefined");
  }
  // Nullable rules, then the "starts with" graph through nullable prefixes: a cycle there is
  // left recursion.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& alt : defs_[r]) {
        bool all = true;
        for (const Element& e : alt) all = all && e.kind == Element::kRule && nullable[e.arg];
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<int32_t>> starts(n);
  for (int32_t r = 0; r < n; ++r) {
    for (const Seq& alt : defs_[r]) {
      for (const Element& e : alt) {
        if (e.kind != Element::kRule) break;
        starts[r].push_back(e.arg);
        if (!nullable[e.arg]) break;
      }
    }
  }
  std::vector<int> color(n, 0);  // 0 new, 1 on the DFS path, 2 done
  for (int32_t r0 = 0; r0 < n; ++r0) {
    if (color[r0] != 0) continue;
    std::vector<std::pair<int32_t, size_t>> path = {{r0, 0}};
    color[r0] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == starts[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const int32_t next = starts[r][i++];
      if (color[next] == 1) {
        return InvalidArgumentError("grammar: rule " + names_[next] + " is left-recursive");
      }
      if (color[next] == 0) {
        color[next] = 1;
        path.push_back({next, 0});
      }
    }
  }
  // Lay out the positions.
  positions_.clear();
  rule_alts_.assign(n, {});
  for (int32_t r = 0; r < n; ++r) {
    for (const Seq& alt : defs_[r]) {
      rule_alts_[r].push_back(static_cast<int32_t>(positions_.size()));
      positions_.insert(positions_.end(), alt.begin(), alt.end());
      positions_.push_back({Element::kEnd, 0});
    }
  }
  // Shortest match of each rule (fixed point), then of each alternative's suffix.
  rule_min_.assign(n, kInf);
  auto suffix_min = [this](int32_t pos) {
    int64_t total = 0;
    for (; positions_[pos].kind != Element::kEnd; ++pos) {
      const Element& e = positions_[pos];
      total = AddSat(total, e.kind == Element::kBytes ? 1 : rule_min_[e.arg]);
    }
    return total;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r) {
      for (int32_t start : rule_alts_[r]) {
        const int64_t m = suffix_min(start);
        if (m < rule_min_[r]) {
          rule_min_[r] = m;
          changed = true;
        }
      }
    }
  }
  for (int32_t r = 0; r < n; ++r) {
    if (rule_min_[r] >= kInf) {
      return InvalidArgumentError("grammar: rule " + names_[r] + " matches no finite text");
    }
  }
  pos_min_.assign(positions_.size(), 0);
  for (int32_t p = static_cast<int32_t>(positions_.size()) - 1; p >= 0; --p) {
    const Element& e = positions_[p];
    if (e.kind == Element::kEnd) continue;
    pos_min_[p] = (e.kind == Element::kBytes ? 1 : rule_min_[e.arg]) + pos_min_[p + 1];
  }
  root_ = root;
  fingerprint_ = "root " + std::to_string(root) + "\n";
  for (int32_t r = 0; r < n; ++r) {
    fingerprint_ += std::to_string(r) + ":";
    for (const Seq& alt : defs_[r]) {
      fingerprint_ += " |";
      for (const Element& e : alt) {
        fingerprint_ += (e.kind == Element::kBytes ? " b" : " r") + std::to_string(e.arg);
      }
    }
    fingerprint_ += "\n";
  }
  for (const ByteSet& s : byte_sets_) fingerprint_ += s.to_string() + "\n";
  return OkStatus();
}

}  // namespace uf::grammar
