// What the benchmarks share: percentiles of samples, and the JSON chunks of a streamed OpenAI
// response read from a socket in whatever pieces it arrives.
#pragma once

#include <algorithm>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace uf::bench {

// The p-quantile (p in [0, 1]) of v, linear between the closest ranks; 0 when v is empty.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double idx = p * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(idx);
  const double f = idx - static_cast<double>(i);
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

// Server-Sent Events of a streamed response, fed as the bytes arrive (an event may be cut
// anywhere): each complete `data: {...}` event's JSON goes to on_chunk; `[DONE]`, comments and
// data that is not JSON are skipped.
class SseChunks {
 public:
  template <typename OnChunk>
  void Feed(const char* data, size_t len, OnChunk&& on_chunk) {
    pending_.append(data, len);
    size_t end;
    while ((end = pending_.find("\n\n")) != std::string::npos) {
      const std::string ev = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      if (ev.rfind("data: ", 0) != 0 || ev == "data: [DONE]") continue;
      const nlohmann::json j = nlohmann::json::parse(ev.substr(6), nullptr, false);
      if (!j.is_discarded()) on_chunk(j);
    }
  }

 private:
  std::string pending_;  // bytes of an event not yet terminated
};

}  // namespace uf::bench
