// The tier scheduler against a synthetic 2-core CPU and a small simulated engine: the ultrafast
// bound at several slacks, default fill, capacity, preemption and eviction, flex max wait, and a
// closed loop where the online cost model learns the machine from the steps it runs.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "base/clock.h"

namespace uf::scheduler {
namespace {

// A 2-core CPU running a 1B model: the weights take 40 ms to stream per step whatever the batch,
// and each token's matmuls take 12.5 ms of compute overlapped with that stream, so steps stay
// flat up to 3 tokens and then grow linearly; attention reads 0.4 us per attended position.
// Written as a roofline (max of memory and compute) rather than the scheduler's hinge form, and
// not a member of that family (the knee falls between 3 and 4 tokens).
double CpuSeconds(int64_t tokens, int64_t context_tokens) {
  return std::max(0.040, 0.0128 * static_cast<double>(tokens)) +
         4e-7 * static_cast<double>(context_tokens);
}
double CpuSeconds(const BatchComposition& c) {
  return CpuSeconds(c.decode_seqs + c.prefill_tokens, c.context_tokens);
}

// The same machine with a gradual knee, as measured on this project's 2-core VM (tiers_bench run
// E: batch 2/3/4/6/8 at 1.00/1.10/1.23/1.70/2.38 x batch 1): memory and compute overlap only in
// part near the turn, so t = 40 ms x (1 + (0.3 tokens)^6)^(1/6): 1.01/1.07/1.26/1.81/2.41 x.
// No hinge fits it exactly around the knee, which is where the scheduler decides.
double SmoothCpuSeconds(int64_t tokens, int64_t context_tokens) {
  const double x = 0.3 * static_cast<double>(tokens);
  return 0.040 * std::pow(1.0 + std::pow(x, 6.0), 1.0 / 6.0) +
         4e-7 * static_cast<double>(context_tokens);
}

class CpuCost final : public StepCostModel {
 public:
  double Predict(const BatchComposition& c) const override { return CpuSeconds(c); }
};

// The most default decode sequences (contexts ctx each) that fit beside one ultrafast decode at
// context uf_ctx without its step passing (1 + slack) x its solo step: counted straight from
// CpuSeconds, independently of the scheduler.
int IdealDefaults(double slack, int64_t uf_ctx, int64_t ctx, int available) {
  const double bound = (1.0 + slack) * CpuSeconds(1, uf_ctx + 1);
  int m = 0;
  while (m < available && CpuSeconds(2 + m, uf_ctx + 1 + (m + 1) * (ctx + 1)) <= bound) ++m;
  return m;
}

SequenceState Seq(int64_t id, ServiceTier tier, int64_t context, int64_t to_prefill, double arrival,
                  int64_t block_size = 16) {
  SequenceState s;
  s.id = id;
  s.tier = tier;
  s.context = context;
  s.to_prefill = to_prefill;
  s.kv_blocks = (context + block_size - 1) / block_size;
  s.arrival = arrival;
  s.last_served = arrival;
  return s;
}

// One running ultrafast decode (id 100, context 300) and n running default decodes (ids 0..n-1,
// context 200), with KV to spare.
StepInput UltrafastBesideDefaults(int n) {
  StepInput in;
  in.running.push_back(Seq(100, ServiceTier::kUltrafast, 300, 0, 50.0));
  for (int i = 0; i < n; ++i) in.running.push_back(Seq(i, ServiceTier::kDefault, 200, 0, i));
  in.free_kv_blocks = 1000;
  return in;
}

// A model whose first 3 tokens cost nothing extra (a flat knee, no attention term): without the
// per-token floor, slack 0 would let 2 defaults ride "free" beside ultrafast. Slack 0 keeps
// ultrafast alone; 5% still admits the 2 the flat region holds (charged 0.25% each).
TEST(SchedulerTest, SlackZeroKeepsUltrafastAloneEvenWhereTheModelIsFlat) {
  class FlatKnee final : public StepCostModel {
   public:
    double Predict(const BatchComposition& c) const override {
      return 0.04 + 0.0125 * static_cast<double>(std::max<int64_t>(0, c.tokens() - 3));
    }
  } cost;
  FakeClock clock;
  for (const auto& [slack, expected_defaults] : {std::pair{0.0, 0}, std::pair{0.05, 2}}) {
    SchedulerOptions o;
    o.ultrafast_slack = slack;
    o.probe_interval_steps = 0;
    Scheduler sched(o, &cost, &clock);
    const StepInput in = UltrafastBesideDefaults(16);
    const StepPlan plan = sched.Plan(in);
    ASSERT_FALSE(plan.decode.empty());
    EXPECT_EQ(plan.decode[0], 100);
    EXPECT_EQ(static_cast<int>(plan.decode.size()) - 1, expected_defaults) << "slack " << slack;
  }
}

// One-step checks: one ultrafast decode plus 16 running default decodes.
TEST(SchedulerTest, UltrafastBoundHoldsAndDefaultsFillTheRest) {
  FakeClock clock;
  CpuCost cost;
  for (double slack : {0.0, 0.05, 0.10, 0.25, 0.50, 1.00}) {
    SchedulerOptions o;
    o.ultrafast_slack = slack;
    Scheduler sched(o, &cost, &clock);
    const StepInput in = UltrafastBesideDefaults(16);
    const StepPlan plan = sched.Plan(in);

    // Recompute the batch's time from its contents with the test's own formula.
    const double solo = CpuSeconds(1, 301);
    const double bound = (1.0 + slack) * solo;
    ASSERT_TRUE(std::count(plan.decode.begin(), plan.decode.end(), 100)) << slack;
    const int n_default = static_cast<int>(plan.decode.size()) - 1;
    const double step = CpuSeconds(1 + n_default, 301 + n_default * 201);
    EXPECT_LE(step, bound * (1 + 1e-12)) << "slack " << slack;
    EXPECT_NEAR(plan.ultrafast_solo_seconds, solo, 1e-12);

    const int ideal = IdealDefaults(slack, 300, 200, 16);
    EXPECT_GE(n_default, std::ceil(0.9 * ideal)) << "slack " << slack << " ideal " << ideal;
    // The hand count for this CPU: 40 ms stays flat to 3 tokens, then 50, 62.5, 75 ms...
    const int expected[] = {0, 2, 2, 2, 3, 5};
    const double slacks[] = {0.0, 0.05, 0.10, 0.25, 0.50, 1.00};
    for (int k = 0; k < 6; ++k) {
      if (slacks[k] == slack) {
        EXPECT_EQ(ideal, expected[k]) << slack;
      }
    }
    // Oldest defaults run; the rest are paused with their KV (none evicted).
    for (int i = 0; i < n_default; ++i) EXPECT_EQ(plan.decode[1 + i], i);
    EXPECT_EQ(static_cast<int>(plan.preempt.size()), 16 - n_default);
    EXPECT_TRUE(plan.evict.empty());
  }
}

TEST(SchedulerTest, NoUltrafastMeansNoBound) {
  FakeClock clock;
  CpuCost cost;
  Scheduler sched(SchedulerOptions{}, &cost, &clock);
  StepInput in;
  for (int i = 0; i < 16; ++i) in.running.push_back(Seq(i, ServiceTier::kDefault, 200, 0, i));
  for (int i = 16; i < 20; ++i) in.running.push_back(Seq(i, ServiceTier::kFlex, 200, 0, i));
  in.free_kv_blocks = 1000;
  const StepPlan plan = sched.Plan(in);
  EXPECT_EQ(plan.decode.size(), 20u);
  EXPECT_TRUE(std::isinf(plan.bound_seconds));
  EXPECT_TRUE(plan.preempt.empty());
}

// A default prompt chunk is sized to the room the bound leaves.
TEST(SchedulerTest, DefaultPrefillChunkFitsTheRemainingBudget) {
  FakeClock clock;
  CpuCost cost;
  for (double slack : {0.05, 0.5, 1.0, 3.0}) {
    SchedulerOptions o;
    o.ultrafast_slack = slack;
    Scheduler sched(o, &cost, &clock);
    StepInput in;
    in.running.push_back(Seq(100, ServiceTier::kUltrafast, 300, 0, 5.0));
    in.waiting.push_back(Seq(1, ServiceTier::kDefault, 0, 500, 1.0));
    in.free_slots = 4;
    in.free_kv_blocks = 1000;
    const StepPlan plan = sched.Plan(in);
    const double bound = (1.0 + slack) * CpuSeconds(1, 301);
    int64_t ideal = 0;  // largest chunk n with the step within the bound, by brute force
    for (int64_t n = 1; n <= 256; ++n) {
      if (CpuSeconds(1 + n, 301 + n * (n + 1) / 2) <= bound) ideal = n;
    }
    ASSERT_GT(ideal, 0) << slack;
    ASSERT_EQ(plan.admit, std::vector<int64_t>{1});
    ASSERT_EQ(plan.prefill.size(), 1u);
    const int64_t n = plan.prefill[0].n_tokens;
    EXPECT_LE(CpuSeconds(1 + n, 301 + n * (n + 1) / 2), bound) << slack;
    EXPECT_GE(n, std::ceil(0.9 * static_cast<double>(ideal))) << slack << " ideal " << ideal;
  }
  // No room at all (slack 0): the request is not admitted, so it holds no slot while it waits.
  SchedulerOptions o;
  o.ultrafast_slack = 0.0;
  Scheduler sched(o, &cost, &clock);
  StepInput in;
  in.running.push_back(Seq(100, ServiceTier::kUltrafast, 300, 0, 5.0));
  in.waiting.push_back(Seq(1, ServiceTier::kDefault, 0, 500, 1.0));
  in.free_slots = 4;
  in.free_kv_blocks = 1000;
  const StepPlan plan = sched.Plan(in);
  EXPECT_TRUE(plan.admit.empty());
  EXPECT_EQ(plan.decode, std::vector<int64_t>{100});
}

TEST(SchedulerTest, UltrafastEvictsFlexBeforeDefaultForASlot) {
  FakeClock clock;
  CpuCost cost;
  Scheduler sched(SchedulerOptions{}, &cost, &clock);
  StepInput in;
  in.running.push_back(Seq(1, ServiceTier::kFlex, 64, 0, 1.0));  // oldest, but flex
  in.running.push_back(Seq(2, ServiceTier::kDefault, 64, 0, 2.0));
  in.running.push_back(Seq(3, ServiceTier::kDefault, 64, 0, 3.0));
  in.waiting.push_back(Seq(9, ServiceTier::kUltrafast, 0, 20, 4.0));
  in.free_slots = 0;
  in.free_kv_blocks = 100;
  StepPlan plan = sched.Plan(in);
  EXPECT_EQ(plan.evict, std::vector<int64_t>{1});
  EXPECT_EQ(plan.admit, std::vector<int64_t>{9});
  ASSERT_EQ(plan.prefill.size(), 1u);
  EXPECT_EQ(plan.prefill[0].id, 9);
  EXPECT_EQ(plan.prefill[0].n_tokens, 20);

  // Without flex, the newest default goes; a paused one before an active one.
  in.running.erase(in.running.begin());
  plan = sched.Plan(in);
  EXPECT_EQ(plan.evict, std::vector<int64_t>{3});
  in.running[0].preempted = true;  // id 2
  plan = sched.Plan(in);
  EXPECT_EQ(plan.evict, std::vector<int64_t>{2});
}

TEST(SchedulerTest, UltrafastEvictsForKvBlocks) {
  FakeClock clock;
  CpuCost cost;
  Scheduler sched(SchedulerOptions{}, &cost, &clock);
  StepInput in;
  in.running.push_back(Seq(1, ServiceTier::kDefault, 160, 0, 1.0));    // 10 blocks
  in.running.push_back(Seq(2, ServiceTier::kDefault, 160, 0, 2.0));    // 10 blocks
  in.running.push_back(Seq(3, ServiceTier::kDefault, 160, 0, 3.0));    // 10 blocks
  in.waiting.push_back(Seq(9, ServiceTier::kUltrafast, 0, 300, 4.0));  // needs 19 blocks
  in.free_slots = 2;
  in.free_kv_blocks = 2;
  const StepPlan plan = sched.Plan(in);
  // 2 + 10 (id 3) = 12 < 19, + 10 (id 2) = 22 >= 19: the two newest defaults go.
  EXPECT_EQ(plan.evict, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(plan.admit, std::vector<int64_t>{9});
  // A default decode never evicts an older default for its block: id 1 decodes only if it has
  // room (160 positions in 10 blocks: the 161st needs an 11th block, and 22 - 19 = 3 are left).
  EXPECT_EQ(std::count(plan.decode.begin(), plan.decode.end(), 1), 1);
}

TEST(SchedulerTest, SameTierNewestGivesUpKvForAnOlderDecode) {
  FakeClock clock;
  CpuCost cost;
  Scheduler sched(SchedulerOptions{}, &cost, &clock);
  StepInput in;
  in.running.push_back(Seq(1, ServiceTier::kDefault, 32, 0, 1.0));  // full blocks: needs one
  in.running.push_back(Seq(2, ServiceTier::kDefault, 32, 0, 2.0));
  in.running.push_back(Seq(3, ServiceTier::kFlex, 20, 0, 0.5));
  in.free_kv_blocks = 0;
  const StepPlan plan = sched.Plan(in);
  // Id 1 needs a block: flex 3 goes first (lower tier, 2 blocks), which also covers id 2.
  EXPECT_EQ(plan.evict, std::vector<int64_t>{3});
  EXPECT_EQ(plan.decode, (std::vector<int64_t>{1, 2}));
}

TEST(SchedulerTest, RespectsTokenCaps) {
  FakeClock clock;
  CpuCost cost;
  SchedulerOptions o;
  o.max_step_tokens = 40;
  o.max_prefill_tokens = 30;
  Scheduler sched(o, &cost, &clock);
  StepInput in;
  for (int i = 0; i < 12; ++i) in.running.push_back(Seq(i, ServiceTier::kDefault, 10, 0, i));
  for (int i = 12; i < 15; ++i) in.waiting.push_back(Seq(i, ServiceTier::kDefault, 0, 25, i));
  in.free_slots = 8;
  in.free_kv_blocks = 1000;
  const StepPlan plan = sched.Plan(in);
  EXPECT_EQ(plan.decode.size(), 12u);
  EXPECT_LE(plan.composition.tokens(), 40);
  EXPECT_LE(plan.composition.prefill_tokens, 30);
  // 28 tokens left after the decodes: 25 for the first prompt, 3 for the next.
  ASSERT_EQ(plan.prefill.size(), 2u);
  EXPECT_EQ(plan.prefill[0].n_tokens, 25);
  EXPECT_EQ(plan.prefill[1].n_tokens, 3);
}

// A small engine that applies plans the way src/engine/service.cc would, failing the test when a
// plan cannot be applied (wrong state, slots or KV overdrawn, composition misreported). Step time
// is the machine's time for the batch (CpuSeconds unless given), times (1 + noise) when noise > 0.
class SimEngine {
 public:
  struct SimSeq {
    SequenceState st;
    int64_t prompt = 0;
    int64_t max_tokens = 0;
    int64_t generated = 0;
    bool running = false;
    std::vector<double> served;  // clock time at the end of each step that gave it work
  };

  using Machine = double (*)(int64_t tokens, int64_t context_tokens);

  SimEngine(int64_t slots, int64_t kv_blocks, uint32_t seed = 1, double noise = 0.0,
            Machine machine = CpuSeconds)
      : machine_(machine),
        free_slots_(slots),
        free_blocks_(kv_blocks),
        rng_(seed),
        noise_(0.0, noise) {
    noisy_ = noise > 0.0;
  }

  FakeClock& clock() { return clock_; }
  const std::map<int64_t, SimSeq>& seqs() const { return seqs_; }
  const std::set<int64_t>& finished() const { return finished_; }
  int64_t free_blocks() const { return free_blocks_; }

  void Submit(int64_t id, ServiceTier tier, int64_t prompt, int64_t max_tokens) {
    SimSeq q;
    q.st = Seq(id, tier, 0, prompt, clock_.Now(), kBlock);
    q.prompt = prompt;
    q.max_tokens = max_tokens;
    seqs_[id] = q;
  }

  StepInput Input() const {
    StepInput in;
    for (const auto& [id, q] : seqs_) (q.running ? in.running : in.waiting).push_back(q.st);
    in.free_slots = free_slots_;
    in.free_kv_blocks = free_blocks_;
    in.block_size = kBlock;
    return in;
  }

  // Plans and runs one step; returns the plan and the step's seconds.
  std::pair<StepPlan, double> Step(Scheduler& sched, OnlineStepCostModel* learn = nullptr) {
    StepPlan plan = sched.Plan(Input());
    for (int64_t id : plan.evict) {
      SimSeq& q = At(id);
      EXPECT_TRUE(q.running) << id;
      free_blocks_ += q.st.kv_blocks;
      ++free_slots_;
      q.running = false;
      q.st.preempted = false;
      q.st.kv_blocks = 0;
      q.st.context = 0;
      q.st.to_prefill = q.prompt + q.generated;  // recompute everything (no prefix cache here)
      ++evictions_;
    }
    for (int64_t id : plan.admit) {
      SimSeq& q = At(id);
      EXPECT_FALSE(q.running) << id;
      EXPECT_GT(free_slots_, 0);
      --free_slots_;
      q.running = true;
    }
    for (int64_t id : plan.preempt) {
      EXPECT_FALSE(At(id).st.preempted) << id;
      At(id).st.preempted = true;
    }
    for (int64_t id : plan.resume) {
      EXPECT_TRUE(At(id).st.preempted) << id;
      At(id).st.preempted = false;
    }
    BatchComposition c;
    for (int64_t id : plan.decode) {
      const SimSeq& q = At(id);
      EXPECT_TRUE(q.running && !q.st.preempted && q.st.to_prefill == 0) << id;
      c.AddDecode(q.st.context);
    }
    for (const PrefillChunk& p : plan.prefill) {
      const SimSeq& q = At(p.id);
      EXPECT_TRUE(q.running && !q.st.preempted) << p.id;
      EXPECT_TRUE(p.n_tokens >= 1 && p.n_tokens <= q.st.to_prefill) << p.id;
      c.AddPrefill(q.st.context, p.n_tokens);
    }
    EXPECT_EQ(c.decode_seqs, plan.composition.decode_seqs);
    EXPECT_EQ(c.prefill_tokens, plan.composition.prefill_tokens);
    EXPECT_EQ(c.context_tokens, plan.composition.context_tokens);
    double seconds = c.empty() ? 0.001 : machine_(c.tokens(), c.context_tokens);
    if (noisy_ && !c.empty()) seconds *= 1.0 + noise_(rng_);
    clock_.Advance(seconds);
    if (learn != nullptr) {
      learn->Observe(plan.composition, seconds, plan.sample_weight);
      sched.Observe(plan, seconds);
    }
    for (int64_t id : plan.decode) Feed(At(id), 1);
    for (const PrefillChunk& p : plan.prefill) Feed(At(p.id), p.n_tokens);
    EXPECT_GE(free_blocks_, 0);
    for (auto it = seqs_.begin(); it != seqs_.end();) {
      if (it->second.generated >= it->second.max_tokens) {
        free_blocks_ += it->second.st.kv_blocks;
        ++free_slots_;
        finished_.insert(it->first);
        it = seqs_.erase(it);
      } else {
        ++it;
      }
    }
    return {std::move(plan), seconds};
  }

  int64_t evictions() const { return evictions_; }

  static constexpr int64_t kBlock = 16;

 private:
  SimSeq& At(int64_t id) {
    auto it = seqs_.find(id);
    EXPECT_NE(it, seqs_.end()) << id;
    return it->second;
  }

  void Feed(SimSeq& q, int64_t n) {
    const FedTokens f = uf::scheduler::Feed(&q.st, n, kBlock, clock_.Now());
    free_blocks_ -= f.new_blocks;
    q.generated += f.token;
    q.served.push_back(clock_.Now());
  }

  Machine machine_;
  FakeClock clock_;
  int64_t free_slots_;
  int64_t free_blocks_;
  std::mt19937 rng_;
  std::normal_distribution<double> noise_;
  bool noisy_ = false;
  std::map<int64_t, SimSeq> seqs_;
  std::set<int64_t> finished_;
  int64_t evictions_ = 0;
};

TEST(SchedulerSimTest, PreemptsDefaultsForUltrafastAndResumesThem) {
  SimEngine sim(/*slots=*/8, /*kv_blocks=*/1000);
  CpuCost cost;
  Scheduler sched(SchedulerOptions{}, &cost, &sim.clock());
  for (int i = 0; i < 4; ++i) {
    sim.Submit(i, ServiceTier::kDefault, 16, 1000);
    sim.clock().Advance(0.001);
  }
  for (int i = 0; i < 5; ++i) {
    const StepPlan plan = sim.Step(sched).first;
    EXPECT_TRUE(plan.preempt.empty());
  }
  EXPECT_EQ(sim.Step(sched).first.decode.size(), 4u);  // all four decode together

  sim.Submit(100, ServiceTier::kUltrafast, 16, 20);
  // The prompt step: 16 prompt tokens cost 0.2 s and one more token would add 6%, over the 5%
  // slack, so all four defaults pause (KV kept).
  StepPlan plan = sim.Step(sched).first;
  EXPECT_EQ(plan.admit, std::vector<int64_t>{100});
  EXPECT_TRUE(plan.decode.empty());
  EXPECT_EQ(plan.preempt, (std::vector<int64_t>{0, 1, 2, 3}));
  int uf_decode_steps = 0;
  std::set<int64_t> resumed;
  while (!sim.finished().contains(100)) {
    const int64_t uf_ctx = sim.seqs().at(100).st.context;
    std::map<int64_t, int64_t> ctx;
    for (const auto& [id, q] : sim.seqs()) ctx[id] = q.st.context;
    plan = sim.Step(sched).first;
    EXPECT_TRUE(plan.evict.empty());
    EXPECT_TRUE(plan.preempt.empty());
    resumed.insert(plan.resume.begin(), plan.resume.end());
    ASSERT_TRUE(std::count(plan.decode.begin(), plan.decode.end(), 100));
    ++uf_decode_steps;
    // Its step, recomputed from the test's formula, within 1.05 x its solo step.
    int64_t attended = uf_ctx + 1, n = 1;
    for (int64_t id : plan.decode) {
      if (id != 100) attended += ctx[id] + 1, ++n;
    }
    EXPECT_LE(CpuSeconds(n, attended), 1.05 * CpuSeconds(1, uf_ctx + 1) * (1 + 1e-12));
    // Two defaults fit in the flat part (3 tokens): the oldest two.
    EXPECT_EQ(plan.decode, (std::vector<int64_t>{100, 0, 1}));
  }
  EXPECT_EQ(resumed, (std::set<int64_t>{0, 1}));
  EXPECT_EQ(uf_decode_steps, 19);  // 20 tokens: one from the prompt step, 19 decodes
  EXPECT_EQ(sim.evictions(), 0);
  // Paused defaults kept their KV: they resume where they stopped, with no prompt to redo.
  const StepPlan after = sim.Step(sched).first;
  std::vector<int64_t> back = after.resume;
  std::sort(back.begin(), back.end());
  EXPECT_EQ(back, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(after.decode.size(), 4u);
  EXPECT_TRUE(after.prefill.empty());
}

// One ultrafast stream and 16 defaults leave no room for flex at 5% slack. With a max wait of
// 1 s, every flex sequence (one submitted early, two arriving later with no free slot) still gets
// work at least every max_wait plus one step; without it they starve.
TEST(SchedulerSimTest, FlexNeverWaitsPastMaxWait) {
  for (double max_wait : {1.0, 1e6}) {
    SimEngine sim(/*slots=*/18, /*kv_blocks=*/4000);
    CpuCost cost;
    SchedulerOptions o;
    o.flex_max_wait_seconds = max_wait;
    Scheduler sched(o, &cost, &sim.clock());
    sim.Submit(100, ServiceTier::kUltrafast, 8, 1000000);
    for (int i = 0; i < 16; ++i) sim.Submit(i, ServiceTier::kDefault, 8, 1000000);
    sim.Submit(50, ServiceTier::kFlex, 8, 1000000);
    double longest_step = 0.0;
    int overdue_steps = 0, steps = 0;
    while (sim.clock().Now() < 20.0) {
      if (steps == 100) {
        sim.Submit(51, ServiceTier::kFlex, 8, 1000000);
        sim.Submit(52, ServiceTier::kFlex, 8, 1000000);
      }
      const auto [plan, seconds] = sim.Step(sched);
      longest_step = std::max(longest_step, seconds);
      if (plan.probe != StepPlan::Probe::kUp &&
          plan.predicted_seconds > plan.bound_seconds * (1 + 1e-12)) {
        ++overdue_steps;
      }
      ++steps;
    }
    for (int64_t id : {50, 51, 52}) {
      const SimEngine::SimSeq& q = sim.seqs().at(id);
      if (max_wait > 100) {
        EXPECT_TRUE(q.served.empty()) << id;  // the control: starved without the guarantee
        continue;
      }
      ASSERT_GE(q.served.size(), 10u) << id;
      double last = q.st.arrival, worst = 0.0;
      for (double t : q.served) {
        worst = std::max(worst, t - last);
        last = t;
      }
      worst = std::max(worst, sim.clock().Now() - last);
      // Served in the first step after the wait ran out, which ends one step later.
      EXPECT_LE(worst, max_wait + 2 * longest_step) << id;
    }
    // The bound gives way only for those rare overdue tokens: 3 flex per second at most.
    if (max_wait < 100) {
      EXPECT_GT(overdue_steps, 0);
      EXPECT_LE(overdue_steps, 3 * 21);
    } else {
      EXPECT_EQ(overdue_steps, 0);
    }
  }
}

// One closed-loop run: 16 defaults, then an ultrafast stream beside them for 1200 steps, the
// scheduler planning with an online model that learns only from the steps it runs.
struct ClosedLoopResult {
  double p50 = 0, p99 = 0;  // ultrafast step over its solo step, true costs
  int over = 0;             // steps past (1 + slack) x 1.05
  size_t steps = 0;
  int64_t default_tokens = 0, ideal_tokens = 0;
};

ClosedLoopResult RunClosedLoop(SimEngine::Machine machine, uint32_t seed, double slack,
                               double noise, const SchedulerOptions& base = {}) {
  SimEngine sim(/*slots=*/17, /*kv_blocks=*/10000, seed, noise, machine);
  OnlineStepCostModel model;
  SchedulerOptions o = base;
  o.ultrafast_slack = slack;
  Scheduler sched(o, &model, &sim.clock());
  for (int i = 0; i < 16; ++i) sim.Submit(i, ServiceTier::kDefault, 32, 1000000);
  for (int i = 0; i < 50; ++i) sim.Step(sched, &model);  // defaults alone: the model warms up
  sim.Submit(100, ServiceTier::kUltrafast, 64, 1000000);
  ClosedLoopResult r;
  std::vector<double> ratios;
  for (int step = 0; step < 1200; ++step) {
    const int64_t uf_ctx = sim.seqs().at(100).st.context;
    const bool uf_decoding = sim.seqs().at(100).st.to_prefill == 0 && uf_ctx > 0;
    std::map<int64_t, int64_t> ctx;
    std::vector<int64_t> default_ctx;
    for (const auto& [id, q] : sim.seqs()) {
      ctx[id] = q.st.context;
      if (id != 100 && q.running && q.st.to_prefill == 0) default_ctx.push_back(q.st.context);
    }
    const StepPlan plan = sim.Step(sched, &model).first;
    if (step < 400 || !uf_decoding) continue;
    int64_t attended = uf_ctx + 1, n = 1;
    for (int64_t id : plan.decode) {
      if (id != 100) attended += ctx[id] + 1, ++n;
    }
    const double solo = machine(1, uf_ctx + 1);
    ratios.push_back(machine(n, attended) / solo);
    if (ratios.back() > (1 + slack) * 1.05) ++r.over;
    r.default_tokens += n - 1;
    // Ideal: the most defaults that fit, shortest contexts first.
    std::sort(default_ctx.begin(), default_ctx.end());
    int64_t m = 0, att = uf_ctx + 1;
    while (m < static_cast<int64_t>(default_ctx.size()) &&
           machine(m + 2, att + default_ctx[m] + 1) <= (1 + slack) * solo) {
      att += default_ctx[m] + 1;
      ++m;
    }
    r.ideal_tokens += m;
  }
  EXPECT_GT(ratios.size(), 700u);
  if (ratios.empty()) return r;
  std::sort(ratios.begin(), ratios.end());
  r.p50 = ratios[ratios.size() / 2];
  r.p99 = ratios[ratios.size() * 99 / 100];
  r.steps = ratios.size();
  std::printf(
      "seed %u slack %.2f noise %.2f: ultrafast step / solo p50 %.4f p99 %.4f, %d of %zu steps "
      "over, default tokens %lld of ideal %lld\n",
      seed, slack, noise, r.p50, r.p99, r.over, r.steps, static_cast<long long>(r.default_tokens),
      static_cast<long long>(r.ideal_tokens));
  return r;
}

const std::pair<const char*, SimEngine::Machine> kMachines[] = {{"sharp", CpuSeconds},
                                                                {"smooth", SmoothCpuSeconds}};

// Closed loop: the scheduler plans with the online model, which learns only from the steps it
// runs (2% timing noise) and the probes; two machines, CpuSeconds (a sharp roofline turn between
// 3 and 4 tokens) and SmoothCpuSeconds (the gradual knee measured on this project's VM), neither
// in the model's hinge family. After a warm-up of 400 steps (the model starts from a wrong knee),
// the targets must hold against the true costs (at slack 5% to 50%, where the issue
// states them; the ends of the curve get the model's resolution): the ultrafast step over its solo
// step has p50 <= 1 + slack and p99 <= 1 + slack + 0.2, and default tokens reach 90% of the ideal
// count (the most default decodes that fit beside it each step, from the machine). Four noise
// seeds. Steps past the bound by more than 5% stay under 3%: the up probes (0.8%) plus short
// stretches where one default too many is admitted. Smaller overshoots are allowed: where one more
// default sits right at the bound (contexts grow each step), the model's attention slope, fitted
// from samples with 2% timing noise, decides it only to a few percent.
// Probe steps count as 8 samples in the fit (SchedulerOptions::probe_sample_weight): with 1, the
// up probes, the only samples of one default more, faded from the ~50-step window before they
// could move the knee, and the smooth machine failed 5 cases (over-admission at 25-50% slack, p99
// 2.15 at 100%), the sharp one kept ~8% of steps over at 50% slack for one seed.
TEST(SchedulerSimTest, LearnedCostModelMeetsTheTargets) {
  for (const auto& [name, machine] : kMachines) {
    for (uint32_t seed : {7, 1, 2, 3}) {
      for (double slack : {0.0, 0.05, 0.10, 0.25, 0.50, 1.00}) {
        SCOPED_TRACE(testing::Message() << name << " seed " << seed << " slack " << slack);
        const ClosedLoopResult r = RunClosedLoop(machine, seed, slack, /*noise=*/0.02);
        if (slack >= 0.05 && slack <= 0.5) {
          // The targets, stated for slack 5% to 50%.
          EXPECT_LE(r.p50, 1 + slack + 1e-9);
        } else {
          // The ends of the curve: within the model's resolution (half the 2% timing noise).
          EXPECT_LE(r.p50, (1 + slack) * 1.01);
        }
        EXPECT_LE(r.p99, 1 + slack + 0.2);
        EXPECT_GE(static_cast<double>(r.default_tokens), 0.9 * static_cast<double>(r.ideal_tokens));
        EXPECT_LE(r.over, 0.03 * static_cast<double>(r.steps));
      }
    }
  }
}

// The same loop on a machine with 8% independent timing noise per step, with the noisy-machine
// solo probes on (every 16th step; off by default, see SchedulerOptions).
// The ultrafast latency targets (p50, p99 at slack 5-50%) must still hold; default throughput may
// give way to 70% of the ideal (73-109% measured, most cases 90-97%): the solo probes take 6% of
// the steps, and where one more default sits within the noise of the bound the model leaves it
// out for stretches. Without the noisy-machine solo probes (the control, same seeds)
// the model over-admitted: several times as many steps past the bound, p99 over target.
TEST(SchedulerSimTest, NoisyMachineKeepsUltrafastLatency) {
  int over_with = 0, over_without = 0;
  for (const auto& [name, machine] : kMachines) {
    for (uint32_t seed : {7, 1, 2, 3}) {
      for (double slack : {0.05, 0.10, 0.25, 0.50}) {
        SCOPED_TRACE(testing::Message() << name << " seed " << seed << " slack " << slack);
        SchedulerOptions noisy;
        noisy.noisy_solo_probe_interval_steps = 16;
        const ClosedLoopResult r = RunClosedLoop(machine, seed, slack, /*noise=*/0.08, noisy);
        EXPECT_LE(r.p50, 1 + slack + 1e-9);
        EXPECT_LE(r.p99, 1 + slack + 0.2);
        EXPECT_GE(static_cast<double>(r.default_tokens), 0.7 * static_cast<double>(r.ideal_tokens));
        EXPECT_LE(r.over, 0.05 * static_cast<double>(r.steps));
        over_with += r.over;
        SchedulerOptions control;
        control.noisy_solo_probe_interval_steps = 0;
        over_without += RunClosedLoop(machine, seed, slack, /*noise=*/0.08, control).over;
      }
    }
  }
  // Since the measured guard (issue 31) the control over-admits far less too (140 steps past
  // the bound, against 446 before it); the extra solo probes still cut that (to 104).
  EXPECT_LT(over_with, over_without);
}

// Every 4th step with ultrafast work is a probe: first a solo step, then one default past the
// bound; other steps are unaffected.
TEST(SchedulerTest, ProbesAlternateSoloAndOneMore) {
  FakeClock clock;
  CpuCost cost;
  SchedulerOptions o;
  o.probe_interval_steps = 4;
  Scheduler sched(o, &cost, &clock);
  StepInput in = UltrafastBesideDefaults(6);
  for (int step = 0; step < 12; ++step) {
    const StepPlan plan = sched.Plan(in);
    std::vector<int64_t> expected = {100, 0, 1};  // two defaults fit at 5% (see above)
    StepPlan::Probe probe = StepPlan::Probe::kNone;
    if (step == 3 || step == 11) {
      expected = {100};
      probe = StepPlan::Probe::kSolo;
    } else if (step == 7) {
      expected = {100, 0, 1, 2};
      probe = StepPlan::Probe::kUp;
    }
    EXPECT_EQ(plan.decode, expected) << step;
    EXPECT_EQ(plan.probe, probe) << step;
    if (probe == StepPlan::Probe::kSolo) {
      EXPECT_TRUE(plan.preempt.empty()) << step;
    }
  }
  // Without ultrafast work nothing is counted or probed.
  in.running.erase(in.running.begin());
  for (int step = 0; step < 8; ++step) {
    EXPECT_EQ(sched.Plan(in).probe, StepPlan::Probe::kNone);
  }
}

// A cost model that reports its own noise, to drive the noisy-machine probes.
class NoisyCpuCost final : public StepCostModel {
 public:
  explicit NoisyCpuCost(double noise) : noise_(noise) {}
  double Predict(const BatchComposition& c) const override { return CpuSeconds(c); }
  double RelativeNoise() const override { return noise_; }

 private:
  double noise_;
};

// Above noisy_step_noise, every noisy_solo_probe_interval_steps-th step is also a solo probe;
// below it, only the regular probes run.
TEST(SchedulerTest, NoisyMachineGetsMoreSoloProbes) {
  for (double noise : {0.02, 0.10}) {
    FakeClock clock;
    NoisyCpuCost cost(noise);
    SchedulerOptions o;
    o.probe_interval_steps = 64;
    o.noisy_solo_probe_interval_steps = 8;
    o.noisy_step_noise = 0.05;
    Scheduler sched(o, &cost, &clock);
    const StepInput in = UltrafastBesideDefaults(6);
    int solo = 0, up = 0;
    for (int step = 0; step < 128; ++step) {
      const StepPlan plan = sched.Plan(in);
      if (plan.probe == StepPlan::Probe::kSolo) {
        ++solo;
        EXPECT_EQ(plan.decode.size(), 1u) << step;  // ultrafast only
        EXPECT_EQ(plan.sample_weight, o.probe_sample_weight);
        EXPECT_EQ(step % 8 == 4 || step == 63, true) << step;
      } else if (plan.probe == StepPlan::Probe::kUp) {
        ++up;
      } else {
        EXPECT_EQ(plan.sample_weight, 1.0);
      }
    }
    EXPECT_EQ(up, 1) << noise;
    EXPECT_EQ(solo, noise > 0.05 ? 1 + 16 : 1) << noise;
  }
}

TEST(SchedulerTest, ValidatesOptions) {
  EXPECT_TRUE(SchedulerOptions{}.Validate().ok());
  using Set = void (*)(SchedulerOptions&);
  const std::pair<const char*, Set> bad[] = {
      {"negative slack", [](SchedulerOptions& o) { o.ultrafast_slack = -0.1; }},
      {"NaN slack", [](SchedulerOptions& o) { o.ultrafast_slack = NAN; }},
      {"infinite flex wait", [](SchedulerOptions& o) { o.flex_max_wait_seconds = INFINITY; }},
      {"no prefill tokens", [](SchedulerOptions& o) { o.max_prefill_tokens = 0; }},
      {"negative probe interval", [](SchedulerOptions& o) { o.probe_interval_steps = -1; }},
      {"negative noisy probe interval",
       [](SchedulerOptions& o) { o.noisy_solo_probe_interval_steps = -1; }},
      {"NaN noise threshold", [](SchedulerOptions& o) { o.noisy_step_noise = NAN; }},
      {"zero probe weight", [](SchedulerOptions& o) { o.probe_sample_weight = 0.0; }},
      {"NaN probe weight", [](SchedulerOptions& o) { o.probe_sample_weight = NAN; }},
  };
  for (const auto& [name, set] : bad) {
    SchedulerOptions o;
    set(o);
    EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument) << name;
  }
}

TEST(SchedulerDeathTest, DuplicateIdsAbort) {
  FakeClock clock;
  CpuCost cost;
  Scheduler sched(SchedulerOptions{}, &cost, &clock);
  StepInput in;
  in.running.push_back(Seq(1, ServiceTier::kDefault, 10, 0, 1.0));
  in.waiting.push_back(Seq(1, ServiceTier::kDefault, 0, 10, 1.0));
  EXPECT_DEATH(sched.Plan(in), "listed twice");
}

// A speculating ultrafast stream (item 6 of the speculative-decoding issue): its drafts are part
// of its own solo step, so the bound is (1 + slack) x the step with its k + 1 positions, and the
// defaults beside it get what fits under that bound, not under the bound of one token. Drafts of
// default sequences are granted only while they fit, and the step-wide draft cap holds.
TEST(SchedulerTest, SpeculatingUltrafastStepCountsItsDrafts) {
  FakeClock clock;
  CpuCost cost;
  SchedulerOptions o;
  o.ultrafast_slack = 0.25;
  o.probe_interval_steps = 0;
  Scheduler sched(o, &cost, &clock);
  StepInput in = UltrafastBesideDefaults(16);
  in.running[0].draft_tokens = 8;
  const StepPlan plan = sched.Plan(in);
  ASSERT_FALSE(plan.decode.empty());
  ASSERT_EQ(plan.decode.size(), plan.decode_drafts.size());
  EXPECT_EQ(plan.decode[0], 100);
  EXPECT_EQ(plan.decode_drafts[0], 8);  // ultrafast gets all its drafts
  // Its solo step is 9 positions: 9 x 12.8 ms of compute.
  const double solo = CpuSeconds(9, 301 + 8 * 301 + 36);
  EXPECT_NEAR(plan.ultrafast_solo_seconds, solo, 1e-9);
  const int n_default = static_cast<int>(plan.decode.size()) - 1;
  const double step = CpuSeconds(9 + n_default, 301 + 8 * 301 + 36 + n_default * 201);
  EXPECT_LE(step, (1.0 + o.ultrafast_slack) * solo * (1 + 1e-12));
  EXPECT_GE(n_default, 1);
  EXPECT_EQ(plan.composition.tokens(), 9 + n_default);

  // Defaults that want drafts get only what fits under the bound.
  StepInput in2 = UltrafastBesideDefaults(4);
  for (auto& s : in2.running) s.draft_tokens = 8;
  const StepPlan plan2 = sched.Plan(in2);
  int64_t total = 0;
  for (size_t i = 0; i < plan2.decode.size(); ++i) {
    if (plan2.decode[i] != 100) {
      EXPECT_LT(plan2.decode_drafts[i], 8);
    }
    total += plan2.decode_drafts[i];
  }
  EXPECT_LE(CpuSeconds(plan2.composition),
            (1.0 + o.ultrafast_slack) * plan2.ultrafast_solo_seconds * (1 + 1e-12) +
                o.min_token_cost_fraction);
  EXPECT_LE(total, o.max_draft_tokens);

  // Without ultrafast work there is no bound: drafts are capped by max_draft_tokens alone.
  StepInput in3;
  for (int i = 0; i < 8; ++i) {
    in3.running.push_back(Seq(i, ServiceTier::kDefault, 100, 0, i));
    in3.running.back().draft_tokens = 8;
  }
  in3.free_kv_blocks = 1000;
  const StepPlan plan3 = sched.Plan(in3);
  int64_t total3 = 0;
  for (int64_t d : plan3.decode_drafts) total3 += d;
  EXPECT_EQ(total3, o.max_draft_tokens);
  EXPECT_EQ(plan3.decode.size(), 8u);
}

}  // namespace
}  // namespace uf::scheduler
