// The ultrafast bound from its first token, when default streams are already running (issue 31)
// or arrive beside it: the tier simulator (the real scheduler, its online cost model and
// admission, on a virtual clock) on a fresh engine whose cost model starts from the built-in
// prior, as `ultrafast serve` does. Step times come from curves measured on this project's
// 2-core VM, so the test is deterministic and cannot race the machine. And the measured guard
// (scheduler.h) alone, on the scheduler with a fake clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "base/clock.h"
#include "planner/tier_sim.h"
#include "scheduler/scheduler.h"

namespace uf::planner {
namespace {

using scheduler::BatchComposition;
using scheduler::Scheduler;
using scheduler::SchedulerOptions;
using scheduler::SequenceState;
using scheduler::ServiceTier;
using scheduler::StepCostModel;
using scheduler::StepInput;
using scheduler::StepPlan;

// Llama-3.2-1B-shape Q4_0 on 2 threads (docs/tiers.md, run D): batch 1/2/3/4/8/17 steps of
// 0.046/0.051/0.072/0.072/0.108/0.233 s. One more sequence costs +11%, two +57%; compute-bound
// past about 4 sequences. Attention: 0.4 us per attended position.
StepCurve Llama1BQ4Curve() {
  auto c = MeasuredCurve({{1, 1 / 0.046},
                          {2, 2 / 0.051},
                          {3, 3 / 0.072},
                          {4, 4 / 0.072},
                          {8, 8 / 0.108},
                          {17, 17 / 0.233}},
                         4e-7);
  EXPECT_TRUE(c.ok());
  return *c;
}

// A cache-resident model (tiny-llama-256-q8_0, ~90 us a token, docs/tiers.md "Known gap"): the
// weights cost little, each sampled sequence a lot (a second decode sequence +40%), and a
// 20-token prompt chunk about what a decode step does. The hinge model learns a knee of several
// tokens from the chunks, which let decode sequences ride "free".
constexpr double kTinySecondsPerOutput = 36e-6;
StepCurve CacheResidentCurve() {
  return [](int64_t tokens, int64_t context_tokens) {
    return 50e-6 + 1e-6 * static_cast<double>(tokens) + 2e-9 * static_cast<double>(context_tokens);
  };
}

struct Case {
  const char* curve_name;
  StepCurve curve;
  double seconds_per_output;
  int64_t warmup_steps;  // the defaults' head start
};

std::vector<Case> Cases() {
  return {{"1b-q4_0", Llama1BQ4Curve(), 0.0, 30},
          {"cache-resident", CacheResidentCurve(), kTinySecondsPerOutput, 300}};
}

TierSimOptions Arrival(const Case& c, int64_t running, int64_t arriving, bool race) {
  TierSimOptions o;
  o.slack = 0.05;
  o.defaults = running;
  o.arriving_defaults = arriving;
  o.prompt_tokens = 24;
  o.warmup_steps = race ? 0 : c.warmup_steps;
  o.ultrafast_tokens = 64;
  o.measure_after_tokens = 0;  // from the first token
  o.prior_from_curve = false;  // a fresh `serve`: the built-in prior
  o.seconds_per_output = c.seconds_per_output;
  return o;
}

// Issue 31's targets, from the first ultrafast token of a fresh engine, with 3, 8 or 16 default
// streams running before it arrives (and with 3 running and 8 more arriving beside it): ITL p50
// within the 5% slack of its solo step and p90 within 1.25x; its first token no later than one
// solo decode step after what its prompt takes alone. Before the measured guard (the scheduler
// trusted the model's extrapolated solo step; with only 3-default batches seen, the prior's knee
// of 3 made the solo step look as slow as 3 sequences and two defaults rode "free") every 1B case
// failed: p50 1.57x with 3 defaults, 1.76x with 16, p90 1.57x in the race, TTFT 2.4 steps late
// with 8. The cache-resident cases passed before too (this curve does not reproduce the knee the
// real engine learns on such a model; the ridge split its cost near the truth): they hold the
// guard to the same bound where a second sequence costs +40%.
TEST(UltrafastArrivalTest, BoundHoldsFromTheFirstTokenWithDefaultsRunning) {
  for (const Case& c : Cases()) {
    struct Mix {
      int64_t running, arriving;
      bool race;  // submitted at the same moment as the ultrafast stream (no head start)
    };
    for (const Mix& m : {Mix{3, 0, false}, Mix{8, 0, false}, Mix{16, 0, false}, Mix{3, 8, false},
                         Mix{1, 0, true}}) {
      const int64_t running = m.running, arriving = m.arriving;
      SCOPED_TRACE(testing::Message() << c.curve_name << ", " << running << " defaults running, "
                                      << arriving << " arriving" << (m.race ? ", race" : ""));
      const TierSimOptions o = Arrival(c, running, arriving, m.race);
      auto r = SimulateTiers(c.curve, o);
      ASSERT_TRUE(r.ok()) << r.status().message();
      std::printf(
          "%s %lld+%lld defaults: ITL p50 %.3f p90 %.3f p99 %.3f over solo, TTFT %.3g s (solo "
          "%.3g), default tok/s %.1f (ideal %.1f)\n",
          c.curve_name, static_cast<long long>(running), static_cast<long long>(arriving),
          r->itl_p50_over_solo, r->itl_p90_over_solo, r->itl_p99_over_solo, r->ttft_seconds,
          r->solo_ttft_seconds, r->default_tok_s, r->ideal_default_tok_s);
      EXPECT_EQ(r->measured_tokens, o.ultrafast_tokens - 1);
      EXPECT_LE(r->itl_p50_over_solo, 1 + o.slack + 1e-9);
      EXPECT_LE(r->itl_p90_over_solo, 1.25);
      EXPECT_LE(r->ttft_seconds, r->solo_ttft_seconds + r->solo_step_seconds * (1 + 1e-9));
    }
  }
}

// The 2-core CPU of tests/scheduler_test.cc: 40 ms steps, flat to 3 tokens, then 12.8 ms per
// token; 0.4 us per attended position.
double CpuSeconds(const BatchComposition& c) {
  return std::max(0.040, 0.0128 * static_cast<double>(c.tokens())) +
         4e-7 * static_cast<double>(c.context_tokens);
}

class CpuCost final : public StepCostModel {
 public:
  double Predict(const BatchComposition& c) const override { return CpuSeconds(c); }
};

// One running ultrafast decode (id 100, context 300) and n running default decodes (ids 0..n-1,
// context 200), with KV to spare.
StepInput UltrafastBesideDefaults(int n) {
  StepInput in;
  auto seq = [](int64_t id, ServiceTier tier, int64_t context, double arrival) {
    SequenceState s;
    s.id = id;
    s.tier = tier;
    s.context = context;
    s.kv_blocks = (context + 15) / 16;
    s.arrival = s.last_served = arrival;
    return s;
  };
  in.running.push_back(seq(100, ServiceTier::kUltrafast, 300, 50.0));
  for (int i = 0; i < n; ++i) in.running.push_back(seq(i, ServiceTier::kDefault, 200, i));
  in.free_kv_blocks = 1000;
  return in;
}

// The measured guard alone, on the scheduler with a fake clock. CpuCost says two defaults ride free
// beside the ultrafast decode (flat to 3 tokens). On a machine where each token beside it costs
// +10% instead, once the engine feeds step times back: the first step is a solo probe, no default
// rides until one was measured within the bound, a ramp step that fails is not retried for 16
// steps, and the failed size stays out. Where tokens beside it are free, the cap ramps up to what
// the model allows.
TEST(MeasuredGuardTest, AdmitsOnlyWhatWasMeasuredToFit) {
  for (double per_extra : {0.10, 0.0}) {
    SCOPED_TRACE(testing::Message() << "per token beside: " << per_extra);
    FakeClock clock;
    CpuCost cost;
    Scheduler sched(SchedulerOptions{}, &cost, &clock);
    const StepInput in = UltrafastBesideDefaults(6);
    // Without feedback the model alone decides: two defaults.
    StepPlan plan = sched.Plan(in);
    EXPECT_EQ(plan.decode, (std::vector<int64_t>{100, 0, 1}));
    auto run = [&](const StepPlan& p) {
      const double seconds = CpuSeconds(p.ultrafast_composition) *
                             (1 + per_extra * static_cast<double>(p.extra_tokens));
      clock.Advance(seconds);
      sched.Observe(p, seconds);
    };
    run(plan);                     // no solo measurement yet: nothing judged
    for (int i = 0; i < 3; ++i) {  // the anchor: the fastest of three solo steps
      plan = sched.Plan(in);
      EXPECT_EQ(plan.probe, StepPlan::Probe::kSolo);
      EXPECT_EQ(plan.decode, std::vector<int64_t>{100});
      run(plan);
    }
    int over = 0, with_defaults = 0;
    for (int step = 0; step < 60; ++step) {
      plan = sched.Plan(in);
      if (plan.probe == StepPlan::Probe::kUp) continue;  // planned past the bound (none here)
      over += per_extra * static_cast<double>(plan.extra_tokens) > 0.05;
      with_defaults += plan.extra_tokens > 0;
      run(plan);
    }
    if (per_extra > 0) {
      // One failed ramp to a single default, retried after 16 and then 32 steps at the earliest.
      EXPECT_GE(over, 1);
      EXPECT_LE(over, 3);
      EXPECT_EQ(sched.verified_extra_tokens(), 0);
    } else {
      EXPECT_EQ(over, 0);
      EXPECT_GT(with_defaults, 50);
      EXPECT_EQ(sched.verified_extra_tokens(), 2);  // all the model allows
    }
  }
}

}  // namespace
}  // namespace uf::planner
