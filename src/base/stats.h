// Small statistics over measurements, shared by the benchmarks (src/cli) and the GPU forward's
// step tuner (src/gpu/step_tuner.h).
#pragma once

#include <algorithm>
#include <vector>

namespace uf {

// Median of v (0 when empty; the mean of the middle two for an even count): medians of
// repetitions, because this machine and a GPU's first steps are noisy.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace uf
