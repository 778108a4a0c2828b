// Metering: what a request costs (a price table per service tier), what a key may spend (plans
// with per-tier token quotas per window), and the admission check and usage report built on the
// UsageLedger. Configured by a JSON file (docs/serving.md, "Metering"); the defaults below apply
// without one.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/clock.h"
#include "base/status.h"
#include "scheduler/tiers.h"
#include "server/ledger.h"

namespace uf::server {

// Money is kept in integers so that sums are exact: a price is in picodollars (1e-12 USD) per
// token, which is the same number as micro-dollars per million tokens, so any price written in
// $/M with up to 6 decimals is exact, and a cost is tokens x price, exact in picodollars. int64
// holds $9.2 million: 92 million tokens at the price cap of $100,000/M, far past one request.
inline constexpr int64_t kPicoPerUsd = 1'000'000'000'000;
inline constexpr int64_t kMaxPricePicoPerToken = 100'000'000'000;  // $100,000 per M tokens

// "0.000053": an exact decimal of picodollars, with at least 6 decimals and no trailing zeros
// past them (no binary-float rounding on the way).
std::string FormatUsd(int64_t picousd);
// Dollars as a double for JSON: the nearest double to the exact value, which JSON writers print
// in its shortest form (5.3e-05, never 5.300000000000001e-05).
inline double PicoToUsd(int64_t picousd) {
  return static_cast<double>(picousd) / static_cast<double>(kPicoPerUsd);
}

// Per-token prices in picodollars (= micro-dollars per million tokens). Cached prompt tokens
// (served from the prefix cache) cost cached_input instead of input.
struct TierPrice {
  int64_t input = 0;
  int64_t cached_input = 0;
  int64_t output = 0;
};

// Tokens (prompt plus completion) a key may use per tier and window; nullopt = unlimited.
struct Plan {
  std::array<std::optional<int64_t>, scheduler::kNumServiceTiers> tokens_per_window;
};

struct MeteringConfig {
  // Indexed by ServiceTier. Defaults: a base price of $0.10 input, $0.025 cached input and $0.40
  // output per million tokens, times 1 for default, 6 for ultrafast and 0.5 for flex.
  std::array<TierPrice, scheduler::kNumServiceTiers> prices;
  int64_t window_s = 60;              // quota window; windows are aligned to the unix epoch (UTC)
  std::string default_plan = "base";  // for keys created without --plan
  // Defaults: "base" (20k ultrafast, 100k default, 200k flex tokens per window), "scale" (25x
  // base) and "unlimited".
  std::map<std::string, Plan> plans;

  static MeteringConfig Defaults();
  // Parses the JSON config; fields left out keep their defaults. Unknown fields are errors.
  static StatusOr<MeteringConfig> FromJson(std::string_view text);
  static StatusOr<MeteringConfig> FromFile(const std::string& path);
  // The plan for a key's stored plan name ("" = default_plan), or nullptr when unknown.
  const Plan* FindPlan(std::string_view name) const;
  // Picodollars; saturates at INT64_MAX (only past $9.2 million in one request).
  int64_t Cost(scheduler::ServiceTier tier, int64_t prompt_tokens, int64_t cached_tokens,
               int64_t completion_tokens) const;
};

// Why a request was refused: becomes 429 quota_exceeded.
struct QuotaDenial {
  std::string message;
  int retry_after_s = 0;  // 0: waiting does not help (the request alone exceeds the limit)
};

class Meter {
 public:
  // clock->Now() must be unix seconds (see WallClock); ledger and clock must outlive the meter.
  Meter(MeteringConfig config, UsageLedger* ledger, const Clock* clock);

  const MeteringConfig& config() const { return config_; }

  // Admission: refuses when the key's plan leaves fewer than prompt_tokens of tier's quota in the
  // current window. The completion is not known yet, so a request admitted near the limit may end
  // past it; the overshoot is billed and counts in this window. Errors: an unknown plan
  // (FailedPrecondition) or a ledger failure.
  StatusOr<std::optional<QuotaDenial>> CheckQuota(int64_t key_id, std::string_view plan,
                                                  scheduler::ServiceTier tier,
                                                  int64_t prompt_tokens) const;

  // Prices and commits one request's usage (durable against a process kill when this returns).
  StatusOr<UsageRecord> Record(int64_t key_id, std::string_view request_id, std::string_view model,
                               scheduler::ServiceTier tier, int64_t prompt_tokens,
                               int64_t cached_tokens, int64_t completion_tokens) const;

  // The body of GET /v1/usage for one key (shape in docs/serving.md).
  StatusOr<nlohmann::json> Report(int64_t key_id, std::string_view key_name,
                                  std::string_view plan) const;

 private:
  double WindowStart(double now) const;

  MeteringConfig config_;
  UsageLedger* ledger_;
  const Clock* clock_;
};

// Unix time in seconds (the ledger's timestamps); tests inject a FakeClock instead.
class WallClock final : public Clock {
 public:
  double Now() const override;
};

// {"requests", "input_tokens", "cached_tokens", "output_tokens", "cost" (USD),
// "cost_picousd" (exact)}.
nlohmann::json TotalsJson(const UsageTotals& t);

}  // namespace uf::server
