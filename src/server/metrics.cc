#include "server/metrics.h"

#include <cstdio>
#include <cstdlib>

namespace uf::server {
namespace {

// Shortest of %.15g / %.17g that reads back exactly ("0.1", not "0.10000000000000001").
std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

void Header(std::string* out, std::string_view name, std::string_view type, std::string_view help) {
  out->append("# HELP ").append(name).append(" ").append(help).append("\n");
  out->append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void Sample(std::string* out, std::string_view name, double value) {
  out->append(name).append(" ").append(Number(value)).append("\n");
}

void Metric(std::string* out, std::string_view name, std::string_view type, std::string_view help,
            double value) {
  Header(out, name, type, help);
  Sample(out, name, value);
}

std::string TierLabel(int tier) {
  return "tier=\"" +
         std::string(scheduler::ServiceTierName(static_cast<scheduler::ServiceTier>(tier))) + "\"";
}

void TierSample(std::string* out, std::string_view name, int tier, int64_t value) {
  out->append(name).append("{").append(TierLabel(tier)).append("} ");
  out->append(std::to_string(value)).append("\n");
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::Render(std::string_view name, std::string_view labels, std::string* out) const {
  const std::string prefix = labels.empty() ? "" : std::string(labels) + ",";
  const std::string braced = labels.empty() ? "" : "{" + std::string(labels) + "}";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? Number(bounds_[i]) : "+Inf";
    out->append(name).append("_bucket{").append(prefix).append("le=\"").append(le).append("\"} ");
    out->append(std::to_string(cumulative)).append("\n");
  }
  Sample(out, std::string(name) + "_sum" + braced, sum_);
  out->append(name).append("_count").append(braced).append(" ");
  out->append(std::to_string(count_)).append("\n");
}

Metrics::Metrics()
    : ttft_(scheduler::kNumServiceTiers,
            Histogram({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60})),
      itl_(scheduler::kNumServiceTiers,
           Histogram({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5})),
      duration_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}) {}

void Metrics::CountRequest(std::string_view endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{std::string(endpoint), status}];
}

void Metrics::ObserveTimeToFirstToken(scheduler::ServiceTier tier, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_[static_cast<size_t>(tier)].Observe(seconds);
}

void Metrics::ObserveInterTokenLatency(scheduler::ServiceTier tier, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_[static_cast<size_t>(tier)].Observe(seconds);
}

void Metrics::ObserveRequestDuration(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  duration_.Observe(seconds);
}

void Metrics::AddPromptTokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += n;
}

void Metrics::AddGeneratedTokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  generated_tokens_ += n;
}

std::string Metrics::Render(const engine::EngineStats& e) const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  Header(&out, "ultrafast_requests_total", "counter", "HTTP requests by endpoint and status code.");
  for (const auto& [key, count] : requests_) {
    out += "ultrafast_requests_total{endpoint=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(count) + "\n";
  }
  Header(&out, "ultrafast_time_to_first_token_seconds", "histogram",
         "Time from request arrival to the first generated token, by serving tier.");
  for (int t = 0; t < scheduler::kNumServiceTiers; ++t) {
    ttft_[t].Render("ultrafast_time_to_first_token_seconds", TierLabel(t), &out);
  }
  Header(&out, "ultrafast_inter_token_latency_seconds", "histogram",
         "Time between consecutive generated tokens of a request, by serving tier.");
  for (int t = 0; t < scheduler::kNumServiceTiers; ++t) {
    itl_[t].Render("ultrafast_inter_token_latency_seconds", TierLabel(t), &out);
  }
  Header(&out, "ultrafast_request_duration_seconds", "histogram",
         "Time from request arrival to its last token.");
  duration_.Render("ultrafast_request_duration_seconds", "", &out);
  Metric(&out, "ultrafast_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
         static_cast<double>(prompt_tokens_));
  Metric(&out, "ultrafast_generation_tokens_total", "counter", "Generated tokens.",
         static_cast<double>(generated_tokens_));
  Metric(&out, "ultrafast_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens whose KV came from the prefix cache instead of being computed.",
         static_cast<double>(e.prefix_hit_tokens));
  Metric(&out, "ultrafast_prompt_tokens_computed_total", "counter",
         "Prompt tokens run through the model.", static_cast<double>(e.prompt_tokens_computed));
  Metric(&out, "ultrafast_engine_steps_total", "counter", "Batched forward passes.",
         static_cast<double>(e.steps));
  Metric(&out, "ultrafast_chained_steps_total", "counter",
         "Of those, steps chained on the device (no host turn between): a lone stream's or a "
         "decode batch's.",
         static_cast<double>(e.chained_steps));
  Metric(&out, "ultrafast_chain_overruled_total", "counter",
         "Sampled rows of chained steps whose device draw the host's sampler overruled.",
         static_cast<double>(e.chain_overruled));
  Metric(&out, "ultrafast_preemptions_total", "counter",
         "Sequences evicted to free KV blocks and recomputed later.",
         static_cast<double>(e.preemptions));
  Header(&out, "ultrafast_tier_generation_tokens_total", "counter",
         "Generated tokens by serving tier (what the tier's price applies to).");
  for (int t = 0; t < scheduler::kNumServiceTiers; ++t) {
    TierSample(&out, "ultrafast_tier_generation_tokens_total", t, e.tiers[t].generated_tokens);
  }
  Header(&out, "ultrafast_tier_running_sequences", "gauge",
         "Sequences holding a slot, by serving tier.");
  for (int t = 0; t < scheduler::kNumServiceTiers; ++t) {
    TierSample(&out, "ultrafast_tier_running_sequences", t, e.tiers[t].running);
  }
  Header(&out, "ultrafast_tier_preemptions_total", "counter",
         "Running sequences paused (KV kept) to keep ultrafast streams within their bound.");
  for (int t = 0; t < scheduler::kNumServiceTiers; ++t) {
    TierSample(&out, "ultrafast_tier_preemptions_total", t, e.tiers[t].paused);
  }
  Metric(&out, "ultrafast_tier_rejections_total", "counter",
         "Explicit ultrafast requests refused with 429 tier_capacity_exceeded.",
         static_cast<double>(e.ultrafast_rejections));
  Metric(&out, "ultrafast_tier_fallbacks_total", "counter",
         "Auto requests served as default because every ultrafast stream was taken.",
         static_cast<double>(e.ultrafast_fallbacks));
  Metric(&out, "ultrafast_abandoned_steps_total", "counter",
         "Default/flex steps abandoned mid-forward so an arriving ultrafast request starts at once.",
         static_cast<double>(e.abandoned_steps));
  Metric(&out, "ultrafast_abandoned_layers_total", "counter",
         "Layers run by abandoned steps (the work redone).",
         static_cast<double>(e.abandoned_layers));
  Metric(&out, "ultrafast_abandoned_seconds_total", "counter",
         "Engine time spent in abandoned steps.", e.abandoned_seconds);
  Metric(&out, "ultrafast_rows_fetched_total", "counter",
         "Logits rows a device reduced whose draw needed the whole row, copied back after the "
         "step.",
         static_cast<double>(e.rows_fetched));
  Metric(&out, "ultrafast_spec_drafted_tokens_total", "counter",
         "Speculative drafts verified by the model.", static_cast<double>(e.spec_drafted));
  Metric(&out, "ultrafast_spec_accepted_tokens_total", "counter",
         "Speculative drafts the model agreed with (emitted without a forward pass of their own).",
         static_cast<double>(e.spec_accepted));
  Header(&out, "ultrafast_spec_accepted_length", "histogram",
         "Drafts accepted per verify step of a speculating sequence (it emits one token more).");
  {
    int64_t cumulative = 0;
    for (int i = 0; i <= engine::kMaxSpecK; ++i) {
      cumulative += e.spec_accepted_hist[i];
      out += "ultrafast_spec_accepted_length_bucket{le=\"" + std::to_string(i) + "\"} " +
             std::to_string(cumulative) + "\n";
    }
    out += "ultrafast_spec_accepted_length_bucket{le=\"+Inf\"} " +
           std::to_string(e.spec_verify_steps) + "\n";
    out += "ultrafast_spec_accepted_length_sum " + std::to_string(e.spec_accepted) + "\n";
    out += "ultrafast_spec_accepted_length_count " + std::to_string(e.spec_verify_steps) + "\n";
  }
  Metric(&out, "ultrafast_queue_depth", "gauge", "Requests waiting to start.",
         static_cast<double>(e.queue_depth));
  Metric(&out, "ultrafast_running_sequences", "gauge", "Sequences in the running batch.",
         static_cast<double>(e.running));
  Metric(&out, "ultrafast_kv_blocks_total", "gauge", "KV cache blocks in the pool.",
         static_cast<double>(e.kv_blocks_total));
  Metric(&out, "ultrafast_kv_blocks_used", "gauge", "KV cache blocks held by sequences.",
         static_cast<double>(e.kv_blocks_used));
  Metric(&out, "ultrafast_kv_blocks_cached", "gauge",
         "KV cache blocks kept only for prefix reuse (reclaimable).",
         static_cast<double>(e.kv_blocks_cached));
  Metric(&out, "ultrafast_kv_blocks_free", "gauge", "Free KV cache blocks.",
         static_cast<double>(e.kv_blocks_free));
  Metric(&out, "ultrafast_kv_cache_bytes", "gauge",
         "Bytes of the KV pools (blocks x K/V bytes per block in the cache's element type, and the "
         "sliding-window layers' pool).",
         static_cast<double>(e.kv_blocks_total * e.kv_block_bytes + e.kv_window_bytes));
  Metric(&out, "ultrafast_kv_cache_used_bytes", "gauge", "Bytes of KV blocks held by sequences.",
         static_cast<double>(e.kv_blocks_used * e.kv_block_bytes));
  return out;
}

}  // namespace uf::server
