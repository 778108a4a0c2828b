#include "planner/tier_sim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "base/clock.h"
#include "scheduler/admission.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_cost_model.h"

namespace uf::planner {
namespace {

using scheduler::BatchComposition;
using scheduler::PrefillChunk;
using scheduler::SequenceState;
using scheduler::ServiceTier;
using scheduler::StepInput;
using scheduler::StepPlan;

constexpr int64_t kBlock = 16;
constexpr int64_t kUltrafastId = 1000000;
constexpr int64_t kNeverEnds = int64_t{1} << 40;

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

// The engine side of the loop, as src/engine/service.cc does it (see scheduler.h): sequences
// with their KV blocks and slots, the plan applied in order, the step timed by the curve.
class VirtualEngine {
 public:
  struct Seq {
    SequenceState st;
    int64_t prompt = 0;
    int64_t max_tokens = 0;
    int64_t generated = 0;
    bool running = false;
  };

  VirtualEngine(const StepCurve& curve, double noise, uint32_t seed, double seconds_per_output)
      : curve_(curve),
        rng_(seed),
        noise_(0.0, std::max(noise, 1e-12)),
        noisy_(noise > 0),
        seconds_per_output_(seconds_per_output) {}

  FakeClock& clock() { return clock_; }
  const std::map<int64_t, Seq>& seqs() const { return seqs_; }

  void Submit(int64_t id, ServiceTier tier, int64_t prompt, int64_t max_tokens) {
    Seq q;
    q.st.id = id;
    q.st.tier = tier;
    q.st.to_prefill = prompt;
    q.st.arrival = clock_.Now();
    q.st.last_served = clock_.Now();
    q.prompt = prompt;
    q.max_tokens = max_tokens;
    seqs_[id] = q;
  }

  // Plans, applies and times one step. Returns the plan and its seconds.
  std::pair<StepPlan, double> Step(scheduler::Scheduler& sched,
                                   scheduler::OnlineStepCostModel& model) {
    StepInput in;
    for (const auto& [id, q] : seqs_) (q.running ? in.running : in.waiting).push_back(q.st);
    in.free_slots = kSlots - used_slots_;
    in.free_kv_blocks = kBlocks - used_blocks_;
    in.block_size = kBlock;
    StepPlan plan = sched.Plan(in);
    for (int64_t id : plan.evict) {
      Seq& q = seqs_.at(id);
      used_blocks_ -= q.st.kv_blocks;
      --used_slots_;
      q.running = false;
      q.st.preempted = false;
      q.st.kv_blocks = 0;
      q.st.context = 0;
      q.st.to_prefill = q.prompt + q.generated;  // recomputed (no prefix cache here)
    }
    for (int64_t id : plan.admit) {
      seqs_.at(id).running = true;
      ++used_slots_;
    }
    for (int64_t id : plan.preempt) seqs_.at(id).st.preempted = true;
    for (int64_t id : plan.resume) seqs_.at(id).st.preempted = false;
    BatchComposition c;
    for (int64_t id : plan.decode) c.AddDecode(seqs_.at(id).st.context);
    for (const PrefillChunk& p : plan.prefill) c.AddPrefill(seqs_.at(p.id).st.context, p.n_tokens);
    double seconds = c.empty() ? 1e-6 : curve_(c.tokens(), c.context_tokens);
    int64_t outputs = static_cast<int64_t>(plan.decode.size());
    for (const PrefillChunk& p : plan.prefill)
      outputs += p.n_tokens == seqs_.at(p.id).st.to_prefill;
    seconds += seconds_per_output_ * static_cast<double>(outputs);
    if (noisy_ && !c.empty()) seconds *= std::max(0.1, 1.0 + noise_(rng_));
    clock_.Advance(seconds);
    model.Observe(plan.composition, seconds, plan.sample_weight);
    sched.Observe(plan, seconds);
    for (int64_t id : plan.decode) Feed(seqs_.at(id), 1);
    for (const PrefillChunk& p : plan.prefill) Feed(seqs_.at(p.id), p.n_tokens);
    for (auto it = seqs_.begin(); it != seqs_.end();) {
      if (it->second.generated >= it->second.max_tokens) {
        used_blocks_ -= it->second.st.kv_blocks;
        if (it->second.running) --used_slots_;
        finished_.push_back(it->first);
        it = seqs_.erase(it);
      } else {
        ++it;
      }
    }
    return {std::move(plan), seconds};
  }

  // Ids finished since the last call.
  std::vector<int64_t> TakeFinished() { return std::exchange(finished_, {}); }

 private:
  static constexpr int64_t kSlots = 256;
  static constexpr int64_t kBlocks = int64_t{1} << 30;  // K/V never runs short here

  void Feed(Seq& q, int64_t n) {
    const scheduler::FedTokens f = scheduler::Feed(&q.st, n, kBlock, clock_.Now());
    used_blocks_ += f.new_blocks;
    q.generated += f.token;
  }

  const StepCurve& curve_;
  FakeClock clock_;
  std::mt19937 rng_;
  std::normal_distribution<double> noise_;
  bool noisy_;
  double seconds_per_output_;
  std::map<int64_t, Seq> seqs_;
  std::vector<int64_t> finished_;
  int64_t used_slots_ = 0;
  int64_t used_blocks_ = 0;
};

}  // namespace

StatusOr<StepCurve> MeasuredCurve(std::vector<std::pair<int64_t, double>> points,
                                  double seconds_per_position) {
  if (points.empty()) return InvalidArgumentError("step curve: no measured batch sizes");
  if (!(seconds_per_position >= 0) || !std::isfinite(seconds_per_position)) {
    return InvalidArgumentError("step curve: seconds per position must be >= 0");
  }
  std::sort(points.begin(), points.end());
  std::vector<std::pair<double, double>> t;  // (batch, step seconds)
  for (const auto& [b, tok_s] : points) {
    if (b < 1 || !(tok_s > 0) || !std::isfinite(tok_s)) {
      return InvalidArgumentError("step curve: batch sizes and tok/s must be positive");
    }
    if (!t.empty() && t.back().first == static_cast<double>(b)) continue;
    double s = static_cast<double>(b) / tok_s;
    if (!t.empty()) s = std::max(s, t.back().second);
    t.emplace_back(static_cast<double>(b), s);
  }
  return StepCurve([t, seconds_per_position](int64_t tokens, int64_t context_tokens) {
    const double x = static_cast<double>(std::max<int64_t>(tokens, 1));
    double s = t.front().second;
    if (x >= t.back().first) {
      const double slope = t.size() > 1 ? (t.back().second - t[t.size() - 2].second) /
                                              (t.back().first - t[t.size() - 2].first)
                                        : 0.0;
      s = t.back().second + slope * (x - t.back().first);
    } else if (x > t.front().first) {
      for (size_t i = 1; i < t.size(); ++i) {
        if (x <= t[i].first) {
          const double f = (x - t[i - 1].first) / (t[i].first - t[i - 1].first);
          s = t[i - 1].second + f * (t[i].second - t[i - 1].second);
          break;
        }
      }
    }
    return s + seconds_per_position * static_cast<double>(context_tokens);
  });
}

Status TierSimOptions::Validate() const {
  if (!(slack >= 0 && slack <= 10))
    return InvalidArgumentError("simulator: slack must be in [0, 10]");
  if (defaults < 0 || defaults > 200) {
    return InvalidArgumentError("simulator: default streams must be in [0, 200]");
  }
  if (prompt_tokens < 1 || warmup_steps < 0 || ultrafast_tokens < 2 || measure_after_tokens < 0 ||
      measure_after_tokens + 2 > ultrafast_tokens) {
    return InvalidArgumentError(
        "simulator: prompt >= 1, warm-up >= 0, and the ultrafast stream must outlast the "
        "tokens before measuring by 2 or more");
  }
  if (!(noise >= 0 && noise < 0.5))
    return InvalidArgumentError("simulator: noise must be in [0, 0.5)");
  if (!(seconds_per_output >= 0 && seconds_per_output < 10) || arriving_defaults < 0 ||
      arriving_defaults > 200) {
    return InvalidArgumentError(
        "simulator: seconds per output must be in [0, 10), arriving defaults in [0, 200]");
  }
  return OkStatus();
}

scheduler::StepCostCoefficients PriorFromCurve(const StepCurve& curve, double max_knee) {
  scheduler::StepCostCoefficients k;
  const double solo = curve(1, 0);
  int64_t knee = 1;
  while (knee < static_cast<int64_t>(max_knee) && curve(knee + 1, 0) <= 1.01 * solo) ++knee;
  k.base_seconds = solo;
  k.knee_tokens = static_cast<double>(knee);
  k.per_seq_seconds = std::max(0.0, (curve(knee + 8, 0) - curve(knee, 0)) / 8.0);
  k.per_prefill_token_seconds = k.per_seq_seconds;
  k.per_context_token_seconds = std::max(0.0, (curve(1, 65536) - solo) / 65536.0);
  return k;
}

StatusOr<TierSimReport> SimulateTiers(const StepCurve& curve, const TierSimOptions& o) {
  UF_RETURN_IF_ERROR(o.Validate());
  VirtualEngine sim(curve, o.noise, o.seed, o.seconds_per_output);
  scheduler::OnlineStepCostOptions cost_options;
  if (o.prior_from_curve) cost_options.prior = PriorFromCurve(curve, cost_options.max_knee);
  scheduler::OnlineStepCostModel model(cost_options);
  scheduler::SchedulerOptions so;
  so.ultrafast_slack = o.slack;
  scheduler::Scheduler sched(so, &model, &sim.clock());
  scheduler::TierAdmission admission(scheduler::AdmissionOptions{}, &sim.clock());

  for (int64_t i = 0; i < o.defaults; ++i) {
    sim.Submit(i, ServiceTier::kDefault, o.prompt_tokens, kNeverEnds);
  }
  for (int64_t i = 0; i < o.warmup_steps; ++i) sim.Step(sched, model);

  TierSimReport r;
  r.slack = o.slack;
  const auto uf =
      admission.Admit(kUltrafastId, {ServiceTier::kUltrafast, false}, o.ultrafast_tokens);
  if (uf.admitted) ++r.admitted;
  sim.Submit(kUltrafastId, ServiceTier::kUltrafast, o.prompt_tokens, o.ultrafast_tokens);
  const double submitted = sim.clock().Now();
  // A step of n decodes at its true cost.
  auto decode_step = [&](int64_t n, int64_t context_tokens) {
    return curve(n, context_tokens) + o.seconds_per_output * static_cast<double>(n);
  };
  for (int64_t done = 0; done < o.prompt_tokens;) {
    const int64_t n =
        std::min<int64_t>(o.prompt_tokens - done, scheduler::SchedulerOptions{}.max_prefill_tokens);
    r.solo_ttft_seconds += curve(n, n * done + n * (n + 1) / 2);
    done += n;
    if (done == o.prompt_tokens) r.solo_ttft_seconds += o.seconds_per_output;
  }

  std::vector<double> ratios, fcfs, solo;
  double last_token_time = -1, default_tokens = 0, default_seconds = 0, ideal_tokens = 0,
         ideal_seconds = 0, any_order_tokens = 0, any_order_seconds = 0, uf_seconds = 0;
  bool extra_sent = false, arrived = false;
  int64_t uf_tokens = 0;
  while (sim.seqs().contains(kUltrafastId)) {
    const auto& seqs = sim.seqs();
    const auto& ufq = seqs.at(kUltrafastId);
    const bool uf_decoding = ufq.running && ufq.st.to_prefill == 0 && ufq.st.context > 0;
    const int64_t uf_ctx = ufq.st.context;
    // Decoding defaults' contexts in the scheduler's order (oldest first, as it fills).
    std::vector<std::pair<std::pair<double, int64_t>, int64_t>> by_age;
    int64_t all_ctx = uf_ctx + 1;
    for (const auto& [id, q] : seqs) {
      if (id == kUltrafastId || !q.running || q.st.to_prefill > 0) continue;
      by_age.push_back({{q.st.arrival, id}, q.st.context});
      all_ctx += q.st.context + 1;
    }
    std::sort(by_age.begin(), by_age.end());
    std::vector<int64_t> default_ctx;
    for (const auto& a : by_age) default_ctx.push_back(a.second);
    if (!arrived && uf_tokens >= 8) {
      arrived = true;
      for (int64_t i = 0; i < o.arriving_defaults; ++i) {
        sim.Submit(o.defaults + i, ServiceTier::kDefault, o.prompt_tokens, kNeverEnds);
      }
    }
    // Halfway through, two more requests want the tier: `auto` with auto_tier = ultrafast, and
    // an explicit `ultrafast`. Capacity is 1 and the stream holds it.
    if (!extra_sent && uf_tokens >= o.ultrafast_tokens / 2) {
      extra_sent = true;
      const auto a = admission.Admit(kUltrafastId + 1, {ServiceTier::kUltrafast, true}, 64);
      if (a.fell_back) {
        ++r.fallbacks;
        sim.Submit(kUltrafastId + 1, a.tier, o.prompt_tokens, 64);
      }
      const auto e = admission.Admit(kUltrafastId + 2, {ServiceTier::kUltrafast, false}, 64);
      if (!e.admitted) {
        ++r.rejected_429;
        r.retry_after_seconds = e.retry_after_seconds;
      }
    }
    const auto [plan, seconds] = sim.Step(sched, model);
    if (plan.ultrafast_solo_seconds > 0) {
      admission.SetUltrafastTokenSeconds(plan.ultrafast_solo_seconds);
    }
    const bool uf_served =
        std::find(plan.decode.begin(), plan.decode.end(), kUltrafastId) != plan.decode.end();
    for (int64_t id : sim.TakeFinished()) admission.Release(id);
    if (r.ttft_seconds == 0 &&
        (!sim.seqs().contains(kUltrafastId) || sim.seqs().at(kUltrafastId).generated > 0)) {
      // The prompt's last chunk gave the first token; later gaps count from it.
      r.ttft_seconds = sim.clock().Now() - submitted;
      last_token_time = sim.clock().Now();
    }
    if (!uf_served) continue;  // its prompt step, or a step while it waited for a slot
    ++uf_tokens;
    const double now = sim.clock().Now();
    const double gap = last_token_time < 0 ? seconds : now - last_token_time;
    last_token_time = now;
    if (uf_tokens <= o.measure_after_tokens || !uf_decoding) continue;
    // The true solo step at this context, and what the step would have cost first-come.
    const double solo_step = decode_step(1, uf_ctx + 1);
    ratios.push_back(gap / solo_step);
    solo.push_back(solo_step);
    fcfs.push_back(decode_step(1 + static_cast<int64_t>(default_ctx.size()), all_ctx) / solo_step);
    if (gap > (1.0 + o.slack) * solo_step * (1 + 1e-9)) ++r.steps_over_bound;
    int64_t served_defaults = 0;
    for (int64_t id : plan.decode) served_defaults += id != kUltrafastId ? 1 : 0;
    default_tokens += static_cast<double>(served_defaults);
    default_seconds += seconds;
    uf_seconds += gap;
    // The most defaults that fit within (1 + slack) x solo at their true cost: taken in the
    // scheduler's order (what a perfect cost model would admit), and shortest contexts first
    // (what any order could fit).
    auto fit = [&](const std::vector<int64_t>& ctx, double* tokens, double* secs) {
      int64_t m = 0, att = uf_ctx + 1;
      while (m < static_cast<int64_t>(ctx.size()) &&
             decode_step(m + 2, att + ctx[m] + 1) <= (1.0 + o.slack) * solo_step) {
        att += ctx[m] + 1;
        ++m;
      }
      *tokens += static_cast<double>(m);
      *secs += decode_step(1 + m, att);
    };
    fit(default_ctx, &ideal_tokens, &ideal_seconds);
    std::sort(default_ctx.begin(), default_ctx.end());
    fit(default_ctx, &any_order_tokens, &any_order_seconds);
  }
  admission.Release(kUltrafastId);
  r.learned = model.coefficients();
  r.measured_tokens = static_cast<int64_t>(ratios.size());
  if (ratios.empty()) return InternalError("simulator: the ultrafast stream produced no tokens");
  r.solo_step_seconds = Percentile(solo, 0.5);
  r.itl_p50_over_solo = Percentile(ratios, 0.5);
  r.itl_p90_over_solo = Percentile(ratios, 0.90);
  r.itl_p99_over_solo = Percentile(ratios, 0.99);
  r.fcfs_p50_over_solo = Percentile(fcfs, 0.5);
  r.default_tok_s = default_seconds > 0 ? default_tokens / default_seconds : 0.0;
  r.ideal_default_tok_s = ideal_seconds > 0 ? ideal_tokens / ideal_seconds : 0.0;
  r.default_fraction_of_ideal =
      r.ideal_default_tok_s > 0 ? r.default_tok_s / r.ideal_default_tok_s : 1.0;
  r.any_order_default_tok_s = any_order_seconds > 0 ? any_order_tokens / any_order_seconds : 0.0;
  r.ultrafast_tok_s = uf_seconds > 0 ? static_cast<double>(r.measured_tokens) / uf_seconds : 0.0;
  return r;
}

}  // namespace uf::planner
