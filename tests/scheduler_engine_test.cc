// Service tiers in the real engine (the demo model, models/demo.gguf, so steps take about a
// millisecond): every event reports the serving tier; `auto` falls back to default when the
// ultrafast streams are taken while explicit ultrafast is refused with a Retry-After; a default
// sequence paused for an ultrafast one keeps its KV (no recompute) and both produce exactly what
// they produce alone; flex work is paused but never starved past its max wait.
//
// The scheduling tests inject a fixed linear step cost (every token adds the same time) and slack
// 0, so "does this default decode fit beside the ultrafast stream?" always answers no: what the
// tests check is then determined by the plan, not by how fast this loaded machine is.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "base/clock.h"
#include "engine/service.h"
#include "service_test_util.h"
#include "test_models.h"

namespace uf::engine {
namespace {

using testing_models::Loaded;

using scheduler::ServiceTier;

Loaded& Demo() { return testing_models::DemoModel(); }

// Every added token costs the same: nothing rides free beside an ultrafast stream.
class LinearCost final : public scheduler::StepCostModel {
 public:
  double Predict(const scheduler::BatchComposition& c) const override {
    return 1e-3 + 1e-3 * static_cast<double>(c.tokens());
  }
};

struct Output {
  std::vector<int32_t> tokens;
  std::vector<double> times;  // [n_tokens] when each token was sampled
  ServiceTier tier = ServiceTier::kDefault;
  bool tier_consistent = true;  // every event reported the same tier
  FinishReason finish = FinishReason::kNone;
};

Output Collect(RequestChannel& ch) {
  Output out;
  std::vector<GenerationEvent> events;
  bool first = true;
  for (;;) {
    if (!ch.Pop(&events, 60.0)) {
      ADD_FAILURE() << "no event within 60 s";
      return out;
    }
    for (const GenerationEvent& e : events) {
      if (first) out.tier = e.service_tier;
      out.tier_consistent &= e.service_tier == out.tier;
      first = false;
      for (const TokenLogprob& lp : e.logprobs) {
        out.tokens.push_back(lp.token);
        out.times.push_back(e.time);
      }
      if (e.finish != FinishReason::kNone) {
        out.finish = e.finish;
        return out;
      }
    }
  }
}

GenerationRequest Greedy(const std::string& prompt, int64_t max_tokens,
                         std::optional<ServiceTier> tier) {
  GenerationRequest r;
  r.prompt = Demo().tokenizer->Encode(prompt, true, false);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  r.top_logprobs = 0;  // token ids come back through the logprobs
  r.service_tier = tier;
  return r;
}

ServiceOptions SlowOptions() {
  ServiceOptions o;
  o.max_seqs = 4;
  o.ctx = 1024;
  o.n_threads = 2;
  // A millisecond-scale model would finish requests before the test can overlap them.
  o.step_hook = [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  return o;
}

std::unique_ptr<Service> MakeService(const ServiceOptions& o) {
  auto s = Service::Create(*Demo().model, *Demo().tokenizer, o);
  UF_CHECK(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// Waits until ch has produced n tokens (collecting them into *out); false on timeout.
bool WaitTokens(RequestChannel& ch, size_t n, Output* out) {
  std::vector<GenerationEvent> events;
  while (out->tokens.size() < n) {
    if (!ch.Pop(&events, 30.0)) return false;
    for (const GenerationEvent& e : events) {
      out->tier = e.service_tier;
      for (const TokenLogprob& lp : e.logprobs) {
        out->tokens.push_back(lp.token);
        out->times.push_back(e.time);
      }
      if (e.finish != FinishReason::kNone) return out->tokens.size() >= n;
    }
  }
  return true;
}

// A stream that holds the ultrafast slot while a test acts: no speculation, so each of its
// tokens is one paced step (SlowOptions) and it lasts seconds, not the fraction of one that
// copied drafts would make it.
GenerationRequest Holder(const std::string& prompt, std::optional<ServiceTier> tier) {
  GenerationRequest r = Greedy(prompt, 5000, tier);
  r.speculation = SpeculationRequest{SpecMode::kOff, 8};
  return r;
}

Output Alone(const std::string& prompt, int64_t max_tokens) {
  ServiceOptions o;
  o.max_seqs = 1;
  o.ctx = 1024;
  o.n_threads = 2;
  auto s = MakeService(o);
  return Collect(**s->Submit(Greedy(prompt, max_tokens, std::nullopt)));
}

TEST(SchedulerEngineTest, ExplicitTiersAreReportedOnEveryEvent) {
  ServiceOptions o;
  o.max_seqs = 4;
  o.ctx = 512;
  o.n_threads = 2;
  auto s = MakeService(o);
  for (ServiceTier t : {ServiceTier::kUltrafast, ServiceTier::kDefault, ServiceTier::kFlex}) {
    const Output out = Collect(**s->Submit(Greedy("To be, or not", 6, t)));
    EXPECT_EQ(out.tier, t);
    EXPECT_TRUE(out.tier_consistent);
    EXPECT_EQ(out.tokens.size(), 6u);
  }
  // auto resolves to the configured auto tier (default here).
  EXPECT_EQ(Collect(**s->Submit(Greedy("To be", 2, std::nullopt))).tier, ServiceTier::kDefault);
  const EngineStats st = s->Stats();
  EXPECT_EQ(st.tiers[static_cast<int>(ServiceTier::kUltrafast)].generated_tokens, 6);
  EXPECT_EQ(st.tiers[static_cast<int>(ServiceTier::kDefault)].generated_tokens, 8);
  EXPECT_EQ(st.tiers[static_cast<int>(ServiceTier::kFlex)].generated_tokens, 6);
}

TEST(SchedulerEngineTest, AutoFallsBackAndExplicitUltrafastIsRefusedWhenFull) {
  ServiceOptions o = SlowOptions();
  o.auto_tier = ServiceTier::kUltrafast;
  o.admission.ultrafast_capacity = 1;
  auto s = MakeService(o);
  auto a = *s->Submit(Holder("Now is the winter", std::nullopt));  // takes the stream
  Output a_out;
  ASSERT_TRUE(WaitTokens(*a, 1, &a_out));
  EXPECT_EQ(a_out.tier, ServiceTier::kUltrafast);

  // Both arrive while the stream certainly holds the tier (it has ~1000 paced steps to go). The
  // fallback is only collected afterwards: beside an ultrafast stream a default request may wait
  // many steps for room inside the slack, and the holder may be done by the time it is served.
  auto b = *s->Submit(Greedy("of our discontent", 3, std::nullopt));
  int64_t retry_after = 0;
  auto c = s->Submit(Greedy("made glorious", 3, ServiceTier::kUltrafast), &retry_after);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(c.status().message().starts_with(scheduler::kTierCapacityExceeded))
      << c.status().ToString();
  EXPECT_GE(retry_after, 1);

  const Output b_out = Collect(*b);
  EXPECT_EQ(b_out.tier, ServiceTier::kDefault) << "auto must fall back to default";
  EXPECT_EQ(b_out.finish, FinishReason::kLength);
  EXPECT_EQ(s->Stats().ultrafast_rejections, 1);
  EXPECT_EQ(s->Stats().ultrafast_fallbacks, 1);

  // Ending the stream frees it for the next ultrafast request.
  a->Cancel();
  EXPECT_EQ(Collect(*a).finish, FinishReason::kCancelled);
  const Output d = Collect(**s->Submit(Greedy("summer", 3, ServiceTier::kUltrafast)));
  EXPECT_EQ(d.tier, ServiceTier::kUltrafast);
}

TEST(SchedulerEngineTest, PausedDefaultKeepsItsKvAndBothMatchSolo) {
  const std::string p_default = "ROMEO: But soft, what light";
  const std::string p_fast = "JULIET: O Romeo, Romeo";
  const Output solo_default = Alone(p_default, 120);
  const Output solo_fast = Alone(p_fast, 24);

  LinearCost cost;
  ServiceOptions o = SlowOptions();
  o.cost_model = &cost;
  o.scheduler.ultrafast_slack = 0.0;
  o.scheduler.probe_interval_steps = 0;
  // The default stream is held before its 8th step (a token a step after its prompt) until the
  // ultrafast request is queued: it is mid-stream then however loaded the machine.
  testing_service::StepGate gate(/*hold_at=*/8);
  o.step_hook = [slow = o.step_hook, hold = gate.Hook()] {
    slow();
    hold();
  };
  auto s = MakeService(o);
  auto d = *s->Submit(Greedy(p_default, 120, ServiceTier::kDefault));
  Output d_out;
  ASSERT_TRUE(WaitTokens(*d, 5, &d_out));
  auto f = s->Submit(Greedy(p_fast, 24, ServiceTier::kUltrafast));
  gate.Open();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const Output f_out = Collect(**f);
  const Output d_rest = Collect(*d);
  d_out.tokens.insert(d_out.tokens.end(), d_rest.tokens.begin(), d_rest.tokens.end());
  d_out.times.insert(d_out.times.end(), d_rest.times.begin(), d_rest.times.end());

  EXPECT_EQ(f_out.tokens, solo_fast.tokens);
  EXPECT_EQ(d_out.tokens, solo_default.tokens);
  ASSERT_EQ(f_out.times.size(), 24u);
  // At slack 0 nothing rides beside the ultrafast stream: the default one got no token while it
  // ran (its last token of the paused stretch came before the ultrafast stream's first).
  for (double t : d_out.times) {
    EXPECT_FALSE(t > f_out.times.front() && t < f_out.times.back())
        << "default token at " << t << " inside the ultrafast stream's life";
  }
  const EngineStats st = s->Stats();
  EXPECT_GE(st.tiers[static_cast<int>(ServiceTier::kDefault)].paused, 1);
  EXPECT_EQ(st.preemptions, 0) << "pausing must keep the KV: no eviction, no recompute";
}

// Time for the scheduler as the test makes it: every engine step starts by advancing it one
// step's worth, so waits count steps, not the seconds of a possibly loaded machine. The engine
// thread advances it; Submit reads it on the test's thread.
class StepClock final : public Clock {
 public:
  double Now() const override { return now_.load(); }
  void Advance(double seconds) { now_.store(now_.load() + seconds); }

 private:
  std::atomic<double> now_{1000.0};
};

TEST(SchedulerEngineTest, FlexIsNotStarvedPastMaxWait) {
  constexpr double kStep = 0.01;     // clock time per engine step
  constexpr double kMaxWait = 0.05;  // five steps
  LinearCost cost;
  StepClock clock;
  // Held before the 4th step until the flex request is queued, so the ultrafast stream (a
  // thousand steps long) is mid-stream when it arrives, however loaded the machine.
  testing_service::StepGate gate(/*hold_at=*/4);
  ServiceOptions o;
  o.max_seqs = 4;
  o.ctx = 1024;
  o.n_threads = 2;
  o.cost_model = &cost;
  o.clock = &clock;
  o.step_hook = [&clock, hold = gate.Hook()] {
    hold();
    clock.Advance(kStep);
  };
  o.scheduler.ultrafast_slack = 0.0;
  o.scheduler.probe_interval_steps = 0;
  o.scheduler.flex_max_wait_seconds = kMaxWait;
  auto s = MakeService(o);
  auto fast = *s->Submit(Holder("HAMLET: To be", ServiceTier::kUltrafast));
  Output fast_out;
  ASSERT_TRUE(WaitTokens(*fast, 1, &fast_out));
  auto flex_ch = s->Submit(Greedy("Words", 6, ServiceTier::kFlex));
  gate.Open();
  ASSERT_TRUE(flex_ch.ok()) << flex_ch.status().ToString();
  const Output flex = Collect(**flex_ch);
  fast->Cancel();
  EXPECT_EQ(Collect(*fast).finish, FinishReason::kCancelled)
      << "the flex request must finish beside the ultrafast stream, not after it";
  EXPECT_EQ(flex.tier, ServiceTier::kFlex);
  ASSERT_EQ(flex.tokens.size(), 6u);
  // Served only when overdue: nothing rides beside the ultrafast stream (linear cost, slack 0),
  // so each flex token comes max_wait after the step of the one before (a step's tokens carry
  // the clock time of its start), and never a step later than that.
  for (size_t i = 1; i < flex.times.size(); ++i) {
    const double gap = flex.times[i] - flex.times[i - 1];
    EXPECT_GE(gap, kMaxWait - 1e-9) << "token " << i;
    EXPECT_LE(gap, kMaxWait + kStep + 1e-9) << "token " << i;
  }
  EXPECT_GE(s->Stats().tiers[static_cast<int>(ServiceTier::kFlex)].generated_tokens, 6);
}

TEST(SchedulerEngineTest, RejectsBadTierOptions) {
  ServiceOptions o;
  o.scheduler.ultrafast_slack = -1.0;
  EXPECT_EQ(Service::Create(*Demo().model, *Demo().tokenizer, o).status().code(),
            StatusCode::kInvalidArgument);
  o = ServiceOptions();
  o.admission.ultrafast_capacity = -1;
  EXPECT_EQ(Service::Create(*Demo().model, *Demo().tokenizer, o).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace uf::engine
