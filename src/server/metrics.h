// Prometheus text exposition (format 0.0.4) of the server's counters and histograms and the
// engine's gauges. Thread-safe: HTTP threads record, /metrics renders.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "scheduler/tiers.h"

namespace uf::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  // Appends NAME_bucket{LABELS,le=...} (cumulative), NAME_sum{LABELS} and NAME_count{LABELS}
  // lines; labels is "" or e.g. `tier="flex"`.
  void Render(std::string_view name, std::string_view labels, std::string* out) const;

 private:
  std::vector<double> bounds_;    // [n] ascending upper bounds; +Inf is implicit
  std::vector<uint64_t> counts_;  // [n + 1] per bucket (not cumulative)
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  // One finished HTTP request on endpoint ("chat_completions", "completions", "models", ...).
  void CountRequest(std::string_view endpoint, int status);
  // Latencies by the tier that served the request.
  void ObserveTimeToFirstToken(scheduler::ServiceTier tier, double seconds);
  void ObserveInterTokenLatency(scheduler::ServiceTier tier, double seconds);
  void ObserveRequestDuration(double seconds);
  void AddPromptTokens(int64_t n);
  void AddGeneratedTokens(int64_t n);

  std::string Render(const engine::EngineStats& engine) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (endpoint, status) -> count
  std::vector<Histogram> ttft_;                               // [kNumServiceTiers]
  std::vector<Histogram> itl_;                                // [kNumServiceTiers]
  Histogram duration_;
  int64_t prompt_tokens_ = 0;
  int64_t generated_tokens_ = 0;
};

}  // namespace uf::server
