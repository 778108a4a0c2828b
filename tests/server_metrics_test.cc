// Prometheus text exposition: histogram buckets are cumulative with a +Inf bucket equal to the
// count, every sample has HELP/TYPE lines, engine gauges are exported, and latencies and tier
// counters carry the serving tier as a label.
#include <gtest/gtest.h>

#include <sstream>

#include "server/metrics.h"

namespace uf::server {
namespace {

// The value of the sample line starting with `series ` (exact series text), or -1.
double Value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

TEST(MetricsTest, HistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.1);  // le is inclusive
  h.Observe(0.5);
  h.Observe(7.0);
  std::string out;
  h.Render("x", "", &out);
  EXPECT_EQ(Value(out, "x_bucket{le=\"0.1\"}"), 2);
  EXPECT_EQ(Value(out, "x_bucket{le=\"1\"}"), 3);
  EXPECT_EQ(Value(out, "x_bucket{le=\"+Inf\"}"), 4);
  EXPECT_EQ(Value(out, "x_count"), 4);
  EXPECT_DOUBLE_EQ(Value(out, "x_sum"), 7.65);
}

TEST(MetricsTest, HistogramLabelsGoBeforeLe) {
  Histogram h({1.0});
  h.Observe(0.5);
  std::string out;
  h.Render("x", "tier=\"flex\"", &out);
  EXPECT_EQ(Value(out, "x_bucket{tier=\"flex\",le=\"1\"}"), 1);
  EXPECT_EQ(Value(out, "x_bucket{tier=\"flex\",le=\"+Inf\"}"), 1);
  EXPECT_EQ(Value(out, "x_count{tier=\"flex\"}"), 1);
  EXPECT_DOUBLE_EQ(Value(out, "x_sum{tier=\"flex\"}"), 0.5);
}

TEST(MetricsTest, RendersEverything) {
  Metrics m;
  m.CountRequest("chat_completions", 200);
  m.CountRequest("chat_completions", 200);
  m.CountRequest("completions", 400);
  m.ObserveTimeToFirstToken(scheduler::ServiceTier::kUltrafast, 0.02);
  m.ObserveInterTokenLatency(scheduler::ServiceTier::kUltrafast, 0.003);
  m.ObserveInterTokenLatency(scheduler::ServiceTier::kFlex, 0.2);
  m.ObserveInterTokenLatency(scheduler::ServiceTier::kFlex, 0.3);
  m.AddPromptTokens(11);
  m.AddGeneratedTokens(5);
  engine::EngineStats e;
  e.queue_depth = 3;
  e.running = 2;
  e.kv_blocks_total = 100;
  e.kv_blocks_used = 10;
  e.kv_blocks_cached = 5;
  e.kv_blocks_free = 85;
  e.prefix_hit_tokens = 64;
  e.tiers[static_cast<int>(scheduler::ServiceTier::kUltrafast)] = {1, 40, 0};
  e.tiers[static_cast<int>(scheduler::ServiceTier::kDefault)] = {1, 300, 7};
  e.ultrafast_rejections = 2;
  e.ultrafast_fallbacks = 3;
  e.abandoned_steps = 4;
  e.abandoned_layers = 37;
  e.abandoned_seconds = 0.25;
  e.spec_drafted = 40;
  e.spec_accepted = 25;
  e.spec_verify_steps = 9;
  e.spec_accepted_hist[0] = 2;
  e.spec_accepted_hist[3] = 5;
  e.spec_accepted_hist[5] = 2;
  const std::string t = m.Render(e);
  EXPECT_EQ(Value(t, "ultrafast_spec_drafted_tokens_total"), 40);
  EXPECT_EQ(Value(t, "ultrafast_spec_accepted_tokens_total"), 25);
  EXPECT_EQ(Value(t, "ultrafast_spec_accepted_length_bucket{le=\"0\"}"), 2);
  EXPECT_EQ(Value(t, "ultrafast_spec_accepted_length_bucket{le=\"2\"}"), 2);
  EXPECT_EQ(Value(t, "ultrafast_spec_accepted_length_bucket{le=\"3\"}"), 7);
  EXPECT_EQ(Value(t, "ultrafast_spec_accepted_length_bucket{le=\"16\"}"), 9);
  EXPECT_EQ(Value(t, "ultrafast_spec_accepted_length_bucket{le=\"+Inf\"}"), 9);
  EXPECT_EQ(Value(t, "ultrafast_spec_accepted_length_count"), 9);
  EXPECT_EQ(Value(t, "ultrafast_spec_accepted_length_sum"), 25);
  EXPECT_EQ(Value(t, "ultrafast_requests_total{endpoint=\"chat_completions\",status=\"200\"}"), 2);
  EXPECT_EQ(Value(t, "ultrafast_requests_total{endpoint=\"completions\",status=\"400\"}"), 1);
  const std::string uf = "tier=\"ultrafast\"", def = "tier=\"default\"", flex = "tier=\"flex\"";
  EXPECT_EQ(Value(t, "ultrafast_time_to_first_token_seconds_count{" + uf + "}"), 1);
  EXPECT_EQ(Value(t, "ultrafast_time_to_first_token_seconds_count{" + def + "}"), 0);
  EXPECT_EQ(Value(t, "ultrafast_time_to_first_token_seconds_bucket{" + uf + ",le=\"0.025\"}"), 1);
  EXPECT_EQ(Value(t, "ultrafast_time_to_first_token_seconds_bucket{" + uf + ",le=\"0.01\"}"), 0);
  EXPECT_EQ(Value(t, "ultrafast_inter_token_latency_seconds_count{" + uf + "}"), 1);
  EXPECT_EQ(Value(t, "ultrafast_inter_token_latency_seconds_count{" + flex + "}"), 2);
  EXPECT_DOUBLE_EQ(Value(t, "ultrafast_inter_token_latency_seconds_sum{" + flex + "}"), 0.5);
  EXPECT_EQ(Value(t, "ultrafast_tier_generation_tokens_total{" + uf + "}"), 40);
  EXPECT_EQ(Value(t, "ultrafast_tier_generation_tokens_total{" + def + "}"), 300);
  EXPECT_EQ(Value(t, "ultrafast_tier_generation_tokens_total{" + flex + "}"), 0);
  EXPECT_EQ(Value(t, "ultrafast_tier_running_sequences{" + def + "}"), 1);
  EXPECT_EQ(Value(t, "ultrafast_tier_preemptions_total{" + def + "}"), 7);
  EXPECT_EQ(Value(t, "ultrafast_tier_rejections_total"), 2);
  EXPECT_EQ(Value(t, "ultrafast_tier_fallbacks_total"), 3);
  EXPECT_EQ(Value(t, "ultrafast_abandoned_steps_total"), 4);
  EXPECT_EQ(Value(t, "ultrafast_abandoned_layers_total"), 37);
  EXPECT_DOUBLE_EQ(Value(t, "ultrafast_abandoned_seconds_total"), 0.25);
  EXPECT_EQ(Value(t, "ultrafast_prompt_tokens_total"), 11);
  EXPECT_EQ(Value(t, "ultrafast_generation_tokens_total"), 5);
  EXPECT_EQ(Value(t, "ultrafast_queue_depth"), 3);
  EXPECT_EQ(Value(t, "ultrafast_running_sequences"), 2);
  EXPECT_EQ(Value(t, "ultrafast_kv_blocks_used"), 10);
  EXPECT_EQ(Value(t, "ultrafast_kv_blocks_free"), 85);
  EXPECT_EQ(Value(t, "ultrafast_kv_blocks_cached"), 5);
  EXPECT_EQ(Value(t, "ultrafast_prefix_cache_hit_tokens_total"), 64);
  // Every metric family is announced with HELP and TYPE before its samples.
  std::istringstream in(t);
  std::string line, family;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) continue;
    EXPECT_EQ(line.rfind(family, 0), 0u) << line << " outside family " << family;
  }
}

}  // namespace
}  // namespace uf::server
