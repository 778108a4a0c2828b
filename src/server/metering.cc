#include "server/metering.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace uf::server {
namespace {

using json = nlohmann::json;
using scheduler::kNumServiceTiers;
using scheduler::ServiceTier;

// Picodollars per token (= micro-dollars per million tokens): $0.10, $0.025 and $0.40 per M.
constexpr int64_t kBaseInput = 100'000, kBaseCachedInput = 25'000, kBaseOutput = 400'000;
constexpr std::array<double, kNumServiceTiers> kDefaultMultipliers = {6.0, 1.0, 0.5};
constexpr std::array<int64_t, kNumServiceTiers> kBaseQuota = {20'000, 100'000, 200'000};
constexpr int64_t kScaleFactor = 25;

ServiceTier TierAt(int i) { return static_cast<ServiceTier>(i); }
std::string TierName(int i) { return std::string(scheduler::ServiceTierName(TierAt(i))); }

Status Bad(const std::string& what) { return InvalidArgumentError("metering config: " + what); }

// Checks that j is an object whose keys are all in allowed.
Status CheckObject(const json& j, const std::string& where,
                   std::initializer_list<std::string_view> allowed) {
  if (!j.is_object()) return Bad(where + " must be an object");
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (std::string_view a : allowed) known |= key == a;
    if (!known) return Bad("unknown field '" + key + "' in " + where);
  }
  return OkStatus();
}

StatusOr<double> NonNegative(const json& j, const std::string& where) {
  if (!j.is_number() || !(j.get<double>() >= 0.0) || !std::isfinite(j.get<double>())) {
    return Bad(where + " must be a number >= 0");
  }
  return j.get<double>();
}

// A price in $ per million tokens -> picodollars per token, exactly: more than 6 decimals
// (a fraction of a picodollar per token) is refused rather than rounded.
StatusOr<int64_t> PriceOf(const json& j, const std::string& where) {
  UF_ASSIGN_OR_RETURN(const double usd_per_m, NonNegative(j, where));
  const double pico = usd_per_m * 1e6;
  if (pico > static_cast<double>(kMaxPricePicoPerToken)) {
    return Bad(where + " must be at most 100000 ($ per million tokens)");
  }
  const double rounded = std::round(pico);
  // The JSON number arrives as the nearest double to its decimal and the multiplication rounds
  // once more, so a price with at most 6 decimals lands within 2 ulps of a whole number (0.1
  // gives 100000.00000000001). More decimals leave a fraction of a picodollar that is refused
  // down to 4 ulps (1e-4 picodollar at $100,000/M, 10 decimals in $/M); digits past a double's
  // precision cannot be seen at all.
  if (std::fabs(pico - rounded) >
      4 * std::numeric_limits<double>::epsilon() * std::max(1.0, pico)) {
    return Bad(where +
               " has more than 6 decimals ($ per million tokens; prices are kept in whole "
               "picodollars per token)");
  }
  return static_cast<int64_t>(rounded);
}

Status ParsePrice(const json& j, const std::string& where, TierPrice* p) {
  UF_RETURN_IF_ERROR(CheckObject(j, where, {"input", "cached_input", "output"}));
  if (j.contains("input")) {
    UF_ASSIGN_OR_RETURN(p->input, PriceOf(j["input"], where + ".input"));
  }
  if (j.contains("cached_input")) {
    UF_ASSIGN_OR_RETURN(p->cached_input, PriceOf(j["cached_input"], where + ".cached_input"));
  }
  if (j.contains("output")) {
    UF_ASSIGN_OR_RETURN(p->output, PriceOf(j["output"], where + ".output"));
  }
  return OkStatus();
}

// A base price times a tier multiplier, to the nearest picodollar per token (exact for the
// default multipliers); past the cap of a configured price it is refused rather than clamped, so
// a tier is never billed less than the config says.
StatusOr<TierPrice> ScaledPrice(const TierPrice& base, double m, const std::string& tier) {
  TierPrice out;
  for (int64_t TierPrice::*field :
       {&TierPrice::input, &TierPrice::cached_input, &TierPrice::output}) {
    const double v = std::round(static_cast<double>(base.*field) * m);
    if (v > static_cast<double>(kMaxPricePicoPerToken)) {
      return Bad("base_price x tier_multipliers." + tier +
                 " must be at most 100000 ($ per million tokens)");
    }
    out.*field = static_cast<int64_t>(v);
  }
  return out;
}

// $/M tokens as a JSON number: the nearest double to the exact decimal (at most 11 significant
// digits under the cap), which JSON writers print as that decimal (0.025, 99999.999999).
double PerMillion(int64_t pico_per_token) { return static_cast<double>(pico_per_token) / 1e6; }

// {"ultrafast": N|null, "default": N|null, "flex": N|null}; absent or null = unlimited.
StatusOr<Plan> ParsePlan(const json& j, const std::string& where) {
  UF_RETURN_IF_ERROR(CheckObject(j, where, {"ultrafast", "default", "flex"}));
  Plan plan;
  for (int i = 0; i < kNumServiceTiers; ++i) {
    const std::string name = TierName(i);
    if (!j.contains(name) || j[name].is_null()) continue;
    const json& v = j[name];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Bad(where + "." + name + " must be an integer >= 0 (tokens per window) or null");
    }
    plan.tokens_per_window[i] = v.get<int64_t>();
  }
  return plan;
}

}  // namespace

MeteringConfig MeteringConfig::Defaults() {
  MeteringConfig c;
  for (int i = 0; i < kNumServiceTiers; ++i) {
    c.prices[i] = *ScaledPrice({kBaseInput, kBaseCachedInput, kBaseOutput}, kDefaultMultipliers[i],
                               TierName(i));  // well below the cap
  }
  Plan base, scale;
  for (int i = 0; i < kNumServiceTiers; ++i) {
    base.tokens_per_window[i] = kBaseQuota[i];
    scale.tokens_per_window[i] = kScaleFactor * kBaseQuota[i];
  }
  c.plans["base"] = base;
  c.plans["scale"] = scale;
  c.plans["unlimited"] = Plan{};
  return c;
}

StatusOr<MeteringConfig> MeteringConfig::FromJson(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("not valid JSON");
  UF_RETURN_IF_ERROR(CheckObject(
      j, "the config",
      {"base_price", "tier_multipliers", "prices", "window_seconds", "default_plan", "plans"}));
  MeteringConfig c = Defaults();
  // Prices: the base price times each tier's multiplier, then explicit per-tier overrides.
  TierPrice base{kBaseInput, kBaseCachedInput, kBaseOutput};
  if (j.contains("base_price"))
    UF_RETURN_IF_ERROR(ParsePrice(j["base_price"], "base_price", &base));
  std::array<double, kNumServiceTiers> multipliers = kDefaultMultipliers;
  if (j.contains("tier_multipliers")) {
    const json& m = j["tier_multipliers"];
    UF_RETURN_IF_ERROR(CheckObject(m, "tier_multipliers", {"ultrafast", "default", "flex"}));
    for (int i = 0; i < kNumServiceTiers; ++i) {
      if (!m.contains(TierName(i))) continue;
      UF_ASSIGN_OR_RETURN(multipliers[i],
                          NonNegative(m[TierName(i)], "tier_multipliers." + TierName(i)));
      if (multipliers[i] > 1e6) return Bad("tier_multipliers." + TierName(i) + " is too large");
    }
  }
  for (int i = 0; i < kNumServiceTiers; ++i) {
    UF_ASSIGN_OR_RETURN(c.prices[i], ScaledPrice(base, multipliers[i], TierName(i)));
  }
  if (j.contains("prices")) {
    const json& p = j["prices"];
    UF_RETURN_IF_ERROR(CheckObject(p, "prices", {"ultrafast", "default", "flex"}));
    for (int i = 0; i < kNumServiceTiers; ++i) {
      if (p.contains(TierName(i))) {
        UF_RETURN_IF_ERROR(ParsePrice(p[TierName(i)], "prices." + TierName(i), &c.prices[i]));
      }
    }
  }
  if (j.contains("window_seconds")) {
    const json& w = j["window_seconds"];
    if (!w.is_number_integer() || w.get<int64_t>() < 1 || w.get<int64_t>() > 366 * 86400) {
      return Bad("window_seconds must be an integer from 1 to 31622400");
    }
    c.window_s = w.get<int64_t>();
  }
  if (j.contains("plans")) {
    const json& plans = j["plans"];
    if (!plans.is_object() || plans.empty()) return Bad("plans must be a non-empty object");
    c.plans.clear();
    for (const auto& [name, value] : plans.items()) {
      if (name.empty()) return Bad("a plan name is empty");
      UF_ASSIGN_OR_RETURN(c.plans[name], ParsePlan(value, "plans." + name));
    }
  }
  if (j.contains("default_plan")) {
    if (!j["default_plan"].is_string()) return Bad("default_plan must be a string");
    c.default_plan = j["default_plan"].get<std::string>();
  }
  if (!c.plans.count(c.default_plan)) {
    return Bad("default_plan '" + c.default_plan + "' is not one of the plans");
  }
  return c;
}

StatusOr<MeteringConfig> MeteringConfig::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("metering config: cannot open " + path);
  std::ostringstream text;
  text << in.rdbuf();
  auto c = FromJson(text.str());
  if (!c.ok()) return InvalidArgumentError(path + ": " + c.status().message());
  return c;
}

const Plan* MeteringConfig::FindPlan(std::string_view name) const {
  auto it = plans.find(std::string(name.empty() ? std::string_view(default_plan) : name));
  return it == plans.end() ? nullptr : &it->second;
}

int64_t MeteringConfig::Cost(ServiceTier tier, int64_t prompt_tokens, int64_t cached_tokens,
                             int64_t completion_tokens) const {
  const TierPrice& p = prices[static_cast<int>(tier)];
  const int64_t tokens[3] = {prompt_tokens - cached_tokens, cached_tokens, completion_tokens};
  const int64_t price[3] = {p.input, p.cached_input, p.output};
  int64_t total = 0;
  for (int i = 0; i < 3; ++i) {
    int64_t part = 0;
    if (__builtin_mul_overflow(std::max<int64_t>(tokens[i], 0), price[i], &part) ||
        __builtin_add_overflow(total, part, &total)) {
      return INT64_MAX;
    }
  }
  return total;
}

std::string FormatUsd(int64_t picousd) {
  UF_CHECK(picousd >= 0) << "negative cost " << picousd;
  std::string frac = std::to_string(picousd % kPicoPerUsd);
  frac.insert(0, 12 - frac.size(), '0');
  while (frac.size() > 6 && frac.back() == '0') frac.pop_back();
  return std::to_string(picousd / kPicoPerUsd) + "." + frac;
}

double WallClock::Now() const {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json TotalsJson(const UsageTotals& t) {
  return {{"requests", t.requests},
          {"input_tokens", t.prompt_tokens},
          {"cached_tokens", t.cached_tokens},
          {"output_tokens", t.completion_tokens},
          {"cost", PicoToUsd(t.cost_picousd)},
          {"cost_picousd", t.cost_picousd}};
}

Meter::Meter(MeteringConfig config, UsageLedger* ledger, const Clock* clock)
    : config_(std::move(config)), ledger_(ledger), clock_(clock) {}

double Meter::WindowStart(double now) const {
  const double w = static_cast<double>(config_.window_s);
  return std::floor(now / w) * w;
}

StatusOr<std::optional<QuotaDenial>> Meter::CheckQuota(int64_t key_id, std::string_view plan_name,
                                                       ServiceTier tier,
                                                       int64_t prompt_tokens) const {
  const Plan* plan = config_.FindPlan(plan_name);
  if (plan == nullptr) {
    return FailedPreconditionError("this key's plan '" + std::string(plan_name) +
                                   "' is not configured on the server");
  }
  const std::optional<int64_t>& limit = plan->tokens_per_window[static_cast<int>(tier)];
  if (!limit) return std::optional<QuotaDenial>();
  const std::string tier_name(scheduler::ServiceTierName(tier));
  const std::string window = std::to_string(config_.window_s) + " s";
  const std::string plan_shown = plan_name.empty() ? config_.default_plan : std::string(plan_name);
  if (prompt_tokens > *limit) {
    return std::optional<QuotaDenial>(QuotaDenial{
        "This request's " + std::to_string(prompt_tokens) + " prompt tokens exceed your plan '" +
            plan_shown + "' quota of " + std::to_string(*limit) + " " + tier_name + " tokens per " +
            window + " window.",
        0});
  }
  const double now = clock_->Now();
  const double start = WindowStart(now);
  const double end = start + static_cast<double>(config_.window_s);
  UF_ASSIGN_OR_RETURN(TierTotals totals, ledger_->Totals(key_id, start, end));
  const int64_t used = totals[static_cast<int>(tier)].tokens();
  if (used + prompt_tokens <= *limit) return std::optional<QuotaDenial>();
  // Fixed windows: the whole quota frees when this window ends.
  const int retry = std::max(1, static_cast<int>(std::ceil(end - now)));
  return std::optional<QuotaDenial>(QuotaDenial{
      "You exceeded your plan '" + plan_shown + "' quota of " + std::to_string(*limit) + " " +
          tier_name + " tokens per " + window + " window (used " + std::to_string(used) +
          ", this request needs " + std::to_string(prompt_tokens) + " for its prompt). Retry in " +
          std::to_string(retry) + " s.",
      retry});
}

StatusOr<UsageRecord> Meter::Record(int64_t key_id, std::string_view request_id,
                                    std::string_view model, ServiceTier tier, int64_t prompt_tokens,
                                    int64_t cached_tokens, int64_t completion_tokens) const {
  UsageRecord r;
  r.key_id = key_id;
  r.time = clock_->Now();
  r.request_id = request_id;
  r.model = model;
  r.tier = tier;
  r.prompt_tokens = prompt_tokens;
  r.cached_tokens = cached_tokens;
  r.completion_tokens = completion_tokens;
  r.cost_picousd = config_.Cost(tier, prompt_tokens, cached_tokens, completion_tokens);
  UF_RETURN_IF_ERROR(ledger_->Record(&r));
  return r;
}

StatusOr<json> Meter::Report(int64_t key_id, std::string_view key_name,
                             std::string_view plan_name) const {
  const double now = clock_->Now();
  const double start = WindowStart(now);
  const double end = start + static_cast<double>(config_.window_s);
  UF_ASSIGN_OR_RETURN(TierTotals window, ledger_->Totals(key_id, start, end));
  UF_ASSIGN_OR_RETURN(TierTotals all, ledger_->Totals(key_id, 0.0, HUGE_VAL));
  const Plan* plan = config_.FindPlan(plan_name);
  json current = json::object(), all_time = json::object(), quota = json::object(),
       prices = json::object();
  UsageTotals window_sum, all_sum;
  for (int i = 0; i < kNumServiceTiers; ++i) {
    const std::string name = TierName(i);
    current[name] = TotalsJson(window[i]);
    all_time[name] = TotalsJson(all[i]);
    window_sum.Add(window[i]);
    all_sum.Add(all[i]);
    json q = {{"limit", nullptr}, {"used", window[i].tokens()}, {"remaining", nullptr}};
    if (plan != nullptr && plan->tokens_per_window[i].has_value()) {
      const int64_t limit = plan->tokens_per_window[i].value();
      q["limit"] = limit;
      q["remaining"] = std::max<int64_t>(0, limit - window[i].tokens());
    }
    quota[name] = q;
    const TierPrice& p = config_.prices[i];
    prices[name] = {{"input", PerMillion(p.input)},
                    {"cached_input", PerMillion(p.cached_input)},
                    {"output", PerMillion(p.output)}};
  }
  current["total"] = TotalsJson(window_sum);
  all_time["total"] = TotalsJson(all_sum);
  return json{
      {"object", "usage"},
      {"key", {{"id", key_id}, {"name", key_name}}},
      {"plan", plan_name.empty() ? config_.default_plan : std::string(plan_name)},
      {"window",
       {{"seconds", config_.window_s},
        {"start", static_cast<int64_t>(start)},
        {"end", static_cast<int64_t>(end)}}},
      {"current_window", current},
      {"all_time", all_time},
      {"quota", quota},
      {"prices_per_million_tokens", prices},
      {"currency", "usd"},
  };
}

}  // namespace uf::server
