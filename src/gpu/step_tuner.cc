#include "gpu/step_tuner.h"

#include <algorithm>
#include <bit>
#include <cstdio>

#include "base/stats.h"

namespace uf::gpu {
namespace {

int BitWidth(int64_t v) { return static_cast<int>(std::bit_width(static_cast<uint64_t>(v))); }

}  // namespace

StepTuner::Class StepTuner::ClassOf(bool runs, int64_t tokens, int64_t depth) {
  return Class{.runs = runs, .tokens_log2 = BitWidth(tokens), .depth_log2 = BitWidth(depth)};
}

int StepTuner::Pick(const Class& c) const {
  const auto it = classes_.find(c);
  if (it == classes_.end()) return 0;
  const Trials& t = it->second;
  if (t.chosen >= 0) return t.chosen;
  const size_t n0 = t.seconds[0].size(), n1 = t.seconds[1].size();
  if (n0 != n1) return n1 < n0 ? 1 : 0;
  // Level: the pairs go 0 1, 1 0, 0 1, ... (0 1 1 0 0 1 for 3 trials each), so that a drift
  // over the trials (a GPU's clocks rising, caches and page tables warming in a process's first
  // steps) does not fall on one way's times more than on the other's.
  return n0 % 2 == 0 ? 0 : 1;
}

void StepTuner::Report(const Class& c, int way, double seconds) {
  if (seconds <= 0.0 || (way != 0 && way != 1)) return;
  Trials& t = classes_[c];
  if (t.chosen >= 0 || static_cast<int>(t.seconds[way].size()) >= kTrials) return;
  t.seconds[way].push_back(seconds);
  if (t.seconds[0].size() >= kTrials && t.seconds[1].size() >= kTrials) {
    t.chosen = Median(t.seconds[0]) <= Median(t.seconds[1]) ? 0 : 1;
  }
}

int StepTuner::Chosen(const Class& c) const {
  const auto it = classes_.find(c);
  return it == classes_.end() ? -1 : it->second.chosen;
}

std::string StepTuner::Line(const Class& c, const Trials& t) const {
  char depth[64] = "any depth";
  if (c.depth_log2 > 0) std::snprintf(depth, sizeof(depth), "depth < %lld", 1LL << c.depth_log2);
  char line[320];
  const double us[2] = {Median(t.seconds[0]) * 1e6, Median(t.seconds[1]) * 1e6};
  std::snprintf(line, sizeof(line),
                "%s, %s, tokens < %lld, %s: %s %.1f us, %s %.1f us (medians of %zu, %zu): %s",
                subject_, c.runs ? "runs" : "single tokens", 1LL << c.tokens_log2, depth, names_[0],
                us[0], names_[1], us[1], t.seconds[0].size(), t.seconds[1].size(),
                t.chosen < 0 ? "trying" : names_[t.chosen]);
  return line;
}

std::vector<std::string> StepTuner::Describe() const {
  std::vector<std::string> lines;
  for (const auto& entry : classes_) lines.push_back(Line(entry.first, entry.second));
  return lines;
}

std::string StepTuner::Describe(const Class& c) const {
  const auto it = classes_.find(c);
  return Line(c, it == classes_.end() ? Trials{} : it->second);
}

}  // namespace uf::gpu
