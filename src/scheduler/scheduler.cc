#include "scheduler/scheduler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "base/check.h"

namespace uf::scheduler {

Status SchedulerOptions::Validate() const {
  if (!std::isfinite(ultrafast_slack) || ultrafast_slack < 0.0) {
    return InvalidArgumentError("scheduler: ultrafast slack must be a finite number >= 0, got " +
                                std::to_string(ultrafast_slack));
  }
  if (!std::isfinite(flex_max_wait_seconds) || flex_max_wait_seconds < 0.0) {
    return InvalidArgumentError("scheduler: flex max wait must be a finite number >= 0, got " +
                                std::to_string(flex_max_wait_seconds));
  }
  if (max_step_tokens < 1 || max_prefill_tokens < 1) {
    return InvalidArgumentError("scheduler: max_step_tokens and max_prefill_tokens must be >= 1");
  }
  if (max_draft_tokens < 0) {
    return InvalidArgumentError("scheduler: max_draft_tokens must be >= 0");
  }
  if (!std::isfinite(min_token_cost_fraction) || min_token_cost_fraction < 0.0) {
    return InvalidArgumentError("scheduler: min_token_cost_fraction must be a finite number >= 0");
  }
  if (probe_interval_steps < 0) {
    return InvalidArgumentError("scheduler: probe_interval_steps must be >= 0");
  }
  if (!std::isfinite(probe_sample_weight) || probe_sample_weight <= 0.0) {
    return InvalidArgumentError("scheduler: probe_sample_weight must be a finite number > 0");
  }
  if (noisy_solo_probe_interval_steps < 0 || !std::isfinite(noisy_step_noise) ||
      noisy_step_noise < 0.0) {
    return InvalidArgumentError(
        "scheduler: noisy_solo_probe_interval_steps and noisy_step_noise must be >= 0");
  }
  return OkStatus();
}

namespace {

// Prompt tokens an up-probe reads of a default that has no decode to probe with (Plan).
constexpr int64_t kProbePrefillTokens = 16;

// Service order, most urgent first. An overdue flex sequence outranks default so that its wait
// stays bounded; ultrafast is never evicted.
enum Rank { kRankUltrafast = 0, kRankOverdueFlex = 1, kRankDefault = 2, kRankFlex = 3 };

struct Item {
  const SequenceState* s = nullptr;
  int rank = kRankDefault;
  bool running = false;   // holds a slot at the start of the step
  bool admitted = false;  // waiting, admitted by this plan
  bool evicted = false;   // running, evicted by this plan
  bool planned = false;   // has work in this step
  int64_t planned_tokens = 0;

  bool holds_slot() const { return (running && !evicted) || admitted; }
};

// What the measured guard (scheduler.h) gives one Plan() call.
struct Guard {
  int64_t cap = std::numeric_limits<int64_t>::max();       // tokens beside ultrafast work
  int64_t ramp_cap = std::numeric_limits<int64_t>::max();  // the same on a decode step
  bool force_solo = false;  // no recent solo measurement: the next decode step is a solo probe
  bool anchored = false;
  double tolerance = 0.0;        // relative error of a measurement (GuardTolerance)
  BatchComposition anchor_solo;  // the last measured solo step
  double anchor_seconds = 0.0;
};

// The solo step `solo` estimated from a measured one: its time plus what the model says the
// difference costs (context growth, drafts). The model's slope may be off; its base, the part it
// extrapolates worst, cancels.
double Anchored(const StepCostModel& cost, const BatchComposition& measured, double seconds,
                const BatchComposition& solo) {
  return seconds + cost.Predict(solo) - cost.Predict(measured);
}

// State of one Plan() call.
class Planner {
 public:
  Planner(const SchedulerOptions& options, const StepCostModel& cost, double now,
          const StepInput& in, const Guard& guard)
      : options_(options), cost_(cost), now_(now), in_(in), guard_(guard) {
    UF_CHECK(in.block_size > 0 && in.free_slots >= 0 && in.free_kv_blocks >= 0)
        << "bad step input: block_size " << in.block_size << ", free slots " << in.free_slots
        << ", free blocks " << in.free_kv_blocks;
    std::unordered_set<int64_t> ids;
    auto add = [&](const SequenceState& s, bool running) {
      UF_CHECK(ids.insert(s.id).second) << "sequence " << s.id << " listed twice";
      UF_CHECK(s.context >= 0 && s.to_prefill >= 0 && s.kv_blocks >= 0)
          << "sequence " << s.id << " has a negative size";
      UF_CHECK(running || s.to_prefill > 0) << "waiting sequence " << s.id << " has no tokens";
      Item it;
      it.s = &s;
      it.running = running;
      if (s.tier == ServiceTier::kUltrafast) {
        it.rank = kRankUltrafast;
      } else if (s.tier == ServiceTier::kDefault) {
        it.rank = kRankDefault;
      } else {
        it.rank =
            now_ - s.last_served >= options_.flex_max_wait_seconds ? kRankOverdueFlex : kRankFlex;
      }
      items_.push_back(it);
    };
    items_.reserve(in.running.size() + in.waiting.size());
    for (const SequenceState& s : in.running) add(s, true);
    for (const SequenceState& s : in.waiting) add(s, false);
    std::sort(items_.begin(), items_.end(), [](const Item& a, const Item& b) {
      if (a.s->arrival != b.s->arrival) return a.s->arrival < b.s->arrival;
      return a.s->id < b.s->id;
    });
    free_slots_ = in.free_slots;
    free_blocks_ = in.free_kv_blocks;
    tokens_left_ = options.max_step_tokens;
    prefill_left_ = options.max_prefill_tokens;
    drafts_left_ = options.max_draft_tokens;
  }

  // step: how many plans with ultrafast work came before, for the probes.
  StepPlan Run(int64_t step) {
    // Ultrafast: everything it needs, whatever it costs the others.
    for (Item& it : items_) {
      if (it.rank == kRankUltrafast && it.running) ServeRunning(it, /*forced=*/true);
    }
    for (Item& it : items_) {
      if (it.rank == kRankUltrafast && !it.running) ServeWaiting(it, /*forced=*/true);
    }
    if (!plan_.composition.empty()) {
      plan_.ultrafast_composition = plan_.composition;
      plan_.ultrafast_prefilling = !plan_.prefill.empty();
      double solo = cost_.Predict(plan_.composition);
      if (guard_.anchored && !plan_.ultrafast_prefilling) {
        // The model may have extrapolated the solo step from larger batches (issue 31): a
        // measured one keeps the bound from growing with them.
        // Within the measurement's tolerance the model's figure stands (it tracks the context
        // and the machine every step; the anchor only at solo steps).
        const double measured =
            Anchored(cost_, guard_.anchor_solo, guard_.anchor_seconds, plan_.composition);
        if (measured > 0.0) solo = std::min(solo, measured * (1.0 + guard_.tolerance));
      }
      cap_ = plan_.ultrafast_prefilling ? guard_.cap : guard_.ramp_cap;
      plan_.ultrafast_solo_seconds = solo;
      plan_.bound_seconds = (1.0 + options_.ultrafast_slack) * plan_.ultrafast_solo_seconds;
      solo_tokens_ = plan_.composition.tokens();
      token_floor_seconds_ = options_.min_token_cost_fraction * plan_.ultrafast_solo_seconds;
      const int64_t every = options_.probe_interval_steps;
      if (every > 0 && step % every == every - 1) {
        plan_.probe = (step / every) % 2 == 0 ? StepPlan::Probe::kSolo : StepPlan::Probe::kUp;
        plan_.sample_weight = options_.probe_sample_weight;
      }
      // On a noisy machine, extra solo probes (see SchedulerOptions::noisy_step_noise).
      const int64_t noisy_every = options_.noisy_solo_probe_interval_steps;
      if (plan_.probe == StepPlan::Probe::kNone && noisy_every > 0 &&
          step % noisy_every == noisy_every / 2 &&
          cost_.RelativeNoise() > options_.noisy_step_noise) {
        plan_.probe = StepPlan::Probe::kSolo;
        plan_.sample_weight = options_.probe_sample_weight;
      }
      if (plan_.probe == StepPlan::Probe::kNone && guard_.force_solo &&
          !plan_.ultrafast_prefilling) {
        plan_.probe = StepPlan::Probe::kSolo;
        plan_.sample_weight = options_.probe_sample_weight;
      }
    }
    const bool solo = plan_.probe == StepPlan::Probe::kSolo;
    for (int rank : {kRankOverdueFlex, kRankDefault, kRankFlex}) {
      const bool forced = rank == kRankOverdueFlex;
      if (solo && !forced) break;
      // Decode tokens first: running streams keep flowing before prompts are read.
      for (Item& it : items_) {
        if (it.rank == rank && it.running && it.s->to_prefill == 0) ServeRunning(it, forced);
      }
      for (Item& it : items_) {
        if (it.rank == rank && it.running && it.s->to_prefill > 0) ServeRunning(it, forced);
      }
      // Admissions in arrival order; stop at the first that cannot start, so a long prompt is not
      // overtaken forever by short ones.
      for (Item& it : items_) {
        if (it.rank == rank && !it.running && !ServeWaiting(it, forced)) break;
      }
    }
    if (plan_.probe == StepPlan::Probe::kUp) {
      // One more decode past the bound: the first running default (else flex) left out.
      bool served = false;
      for (int rank : {kRankDefault, kRankFlex}) {
        auto it = std::find_if(items_.begin(), items_.end(), [&](const Item& x) {
          return x.rank == rank && x.running && !x.evicted && !x.planned && x.s->to_prefill == 0 &&
                 BlocksFor(x, 1) <= free_blocks_;
        });
        if (it != items_.end() && tokens_left_ >= 1) {
          Add(*it, 1, /*decode=*/true, 0);
          served = true;
          break;
        }
      }
      // None decoding: a prompt chunk of the first default (else flex) still reading or waiting
      // for its prompt instead, or a request that arrives beside an ultrafast stream whose bound
      // leaves no room for a prompt would wait until the stream ends (it once waited 1000 steps
      // for a 5-token prompt). One such chunk every 2 probe intervals costs the stream about
      // kProbePrefillTokens / (2 * probe_interval_steps) of a token's work per step.
      for (int rank : {kRankDefault, kRankFlex}) {
        if (served) break;
        auto it = std::find_if(items_.begin(), items_.end(), [&](const Item& x) {
          return x.rank == rank && !x.evicted && !x.planned && x.s->to_prefill > 0;
        });
        if (it == items_.end()) continue;
        probe_chunk_ = kProbePrefillTokens;
        if (it->running) {
          ServeRunning(*it, /*forced=*/true);
          served = it->planned;
        } else {
          served = ServeWaiting(*it, /*forced=*/true);
        }
        probe_chunk_ = 0;
      }
    }
    // A solo probe leaves the others out for one step only: no preempt / resume churn.
    const bool bounded = std::isfinite(plan_.bound_seconds) && !solo;
    for (const Item& it : items_) {
      if (!it.running || it.evicted || it.rank == kRankUltrafast) continue;
      if (it.planned && it.s->preempted) plan_.resume.push_back(it.s->id);
      if (!it.planned && !it.s->preempted && bounded) plan_.preempt.push_back(it.s->id);
    }
    plan_.predicted_seconds = plan_.composition.empty() ? 0.0 : cost_.Predict(plan_.composition);
    plan_.extra_tokens = plan_.composition.tokens() - plan_.ultrafast_composition.tokens();
    return std::move(plan_);
  }

 private:
  // Blocks `it` must take to hold n more positions.
  int64_t BlocksFor(const Item& it, int64_t n) const {
    const int64_t bs = in_.block_size;
    const int64_t held = it.running ? it.s->kv_blocks : 0;
    return std::max<int64_t>(0, (it.s->context + n + bs - 1) / bs - held);
  }
  // Positions `it` can add with the blocks it holds plus the free ones.
  int64_t KvRoom(const Item& it) const {
    const int64_t held = it.running ? it.s->kv_blocks : 0;
    return (held + free_blocks_) * in_.block_size - it.s->context;
  }
  // Blocks that sequences holding slots still need for the rest of their prompts after this step.
  int64_t Promised() const {
    int64_t promised = 0;
    for (const Item& it : items_) {
      if (!it.holds_slot() || it.s->to_prefill == 0) continue;
      promised += BlocksFor(it, it.s->to_prefill) - BlocksFor(it, it.planned_tokens);
    }
    return promised;
  }

  bool FitsBound(const BatchComposition& delta) const {
    if (!std::isfinite(plan_.bound_seconds)) return true;
    BatchComposition c = plan_.composition;
    c.decode_seqs += delta.decode_seqs;
    c.prefill_tokens += delta.prefill_tokens;
    c.context_tokens += delta.context_tokens;
    if (c.tokens() - solo_tokens_ > cap_) return false;  // more than was measured to fit
    const double floor = token_floor_seconds_ * static_cast<double>(c.tokens() - solo_tokens_);
    return cost_.Predict(c) + floor <= plan_.bound_seconds;
  }

  // Largest prompt chunk of at most max_n tokens that keeps the step within the bound.
  int64_t FitPrefill(const Item& it, int64_t max_n) const {
    auto fits = [&](int64_t n) {
      BatchComposition d;
      d.AddPrefill(it.s->context, n);
      return FitsBound(d);
    };
    if (max_n <= 0 || fits(max_n)) return std::max<int64_t>(max_n, 0);
    int64_t lo = 0, hi = max_n;  // fits(lo), !fits(hi)
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
    return lo;
  }

  // Frees a slot and its blocks for `needer` by evicting the most expendable running sequence of a
  // lower rank (or, when same_tier_newer, of the same rank but newer). Lowest rank first, then
  // paused before active, then newest first: it has done the least work.
  bool Evict(const Item& needer, bool same_tier_newer) {
    auto newer = [](const Item& a, const Item& b) {
      return a.s->arrival != b.s->arrival ? a.s->arrival > b.s->arrival : a.s->id > b.s->id;
    };
    Item* victim = nullptr;
    for (Item& it : items_) {
      if (!it.running || it.evicted || it.planned || it.rank == kRankUltrafast || &it == &needer) {
        continue;
      }
      const bool lower = it.rank > needer.rank;
      if (!lower && !(same_tier_newer && it.rank == needer.rank && newer(it, needer))) continue;
      if (victim == nullptr) {
        victim = &it;
      } else if (it.rank != victim->rank) {
        if (it.rank > victim->rank) victim = &it;
      } else if (it.s->preempted != victim->s->preempted) {
        if (it.s->preempted) victim = &it;
      } else if (newer(it, *victim)) {
        victim = &it;
      }
    }
    if (victim == nullptr) return false;
    victim->evicted = true;
    ++free_slots_;
    free_blocks_ += victim->s->kv_blocks;
    plan_.evict.push_back(victim->s->id);
    return true;
  }

  // A decode of one token plus `drafts` speculative drafts (n = 1 + drafts), or a prompt chunk.
  void Add(Item& it, int64_t n, bool decode, int64_t drafts = 0) {
    free_blocks_ -= BlocksFor(it, n);
    tokens_left_ -= n;
    it.planned = true;
    it.planned_tokens = n;
    if (decode) {
      plan_.composition.AddDecode(it.s->context);
      if (drafts > 0) plan_.composition.AddPrefill(it.s->context + 1, drafts);
      drafts_left_ -= drafts;
      plan_.decode.push_back(it.s->id);
      plan_.decode_drafts.push_back(drafts);
    } else {
      prefill_left_ -= n;
      plan_.composition.AddPrefill(it.s->context, n);
      plan_.prefill.push_back({it.s->id, n});
    }
  }

  void ServeRunning(Item& it, bool forced) {
    if (it.evicted || tokens_left_ < 1) return;
    const bool ultrafast = it.rank == kRankUltrafast;
    if (it.s->to_prefill == 0) {
      BatchComposition d;
      d.AddDecode(it.s->context);
      if (!forced && !FitsBound(d)) return;
      // A decode that needs a block it cannot get takes one from a lower tier, or from a newer
      // sequence of its own tier (never from ultrafast), as the engine preempts newest first.
      while (BlocksFor(it, 1) > free_blocks_ && Evict(it, /*same_tier_newer=*/!ultrafast)) {
      }
      if (BlocksFor(it, 1) > free_blocks_) return;
      // Drafts ride along as far as the caps, the KV blocks and (below ultrafast) the bound
      // allow; they are the first thing to go, before the token itself.
      int64_t drafts = std::min({it.s->draft_tokens, drafts_left_, tokens_left_ - 1});
      while (drafts > 0 && BlocksFor(it, 1 + drafts) > free_blocks_) --drafts;
      if (!ultrafast && !forced) {
        while (drafts > 0) {
          BatchComposition dd = d;
          dd.AddPrefill(it.s->context + 1, drafts);
          if (FitsBound(dd)) break;
          --drafts;
        }
      }
      Add(it, 1 + std::max<int64_t>(drafts, 0), /*decode=*/true, std::max<int64_t>(drafts, 0));
      return;
    }
    int64_t max_n = std::min({it.s->to_prefill, prefill_left_, tokens_left_});
    if (ultrafast) {
      while (max_n > 0 && BlocksFor(it, max_n) > free_blocks_ && Evict(it, false)) {
      }
    }
    max_n = std::min(max_n, KvRoom(it));
    int64_t n = ultrafast ? max_n : FitPrefill(it, max_n);
    if (forced && n == 0 && max_n > 0) n = 1;
    n = std::max(n, std::min(max_n, probe_chunk_));
    if (n > 0) Add(it, n, /*decode=*/false);
  }

  // Admits a waiting sequence and gives it a first prompt chunk; false when it cannot start.
  bool ServeWaiting(Item& it, bool forced) {
    const bool ultrafast = it.rank == kRankUltrafast;
    const int64_t max_n = std::min({it.s->to_prefill, prefill_left_, tokens_left_});
    int64_t n = ultrafast ? max_n : FitPrefill(it, max_n);
    if (forced && n == 0 && max_n > 0) n = 1;
    n = std::max(n, std::min(max_n, probe_chunk_));
    if (n == 0 && !ultrafast) return false;
    // The whole prompt must fit beside what admitted sequences were promised, so it never stalls
    // halfway; only ultrafast evicts to make that room.
    const int64_t need = BlocksFor(it, it.s->to_prefill);
    while (ultrafast && need > free_blocks_ - Promised() && Evict(it, false)) {
    }
    if (need > free_blocks_ - Promised()) return false;
    if (free_slots_ == 0 && !Evict(it, false)) return false;
    --free_slots_;
    it.admitted = true;
    plan_.admit.push_back(it.s->id);
    n = std::min(n, KvRoom(it));
    if (n > 0) Add(it, n, /*decode=*/false);
    return true;
  }

  const SchedulerOptions& options_;
  const StepCostModel& cost_;
  const double now_;
  const StepInput& in_;
  const Guard& guard_;
  int64_t cap_ = std::numeric_limits<int64_t>::max();  // tokens beside ultrafast work
  int64_t probe_chunk_ = 0;  // prompt tokens an up-probe reads past the bound (0: none)
  std::vector<Item> items_;  // running and waiting, by arrival
  int64_t free_slots_ = 0;
  int64_t free_blocks_ = 0;
  int64_t tokens_left_ = 0;
  int64_t prefill_left_ = 0;
  int64_t drafts_left_ = 0;
  int64_t solo_tokens_ = 0;           // tokens of the ultrafast-only composition
  double token_floor_seconds_ = 0.0;  // least cost charged per token added beside it
  StepPlan plan_;
};

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, const StepCostModel* cost, const Clock* clock)
    : options_(options), cost_(cost), clock_(clock) {
  UF_CHECK(cost_ != nullptr && clock_ != nullptr);
  const Status valid = options_.Validate();
  UF_CHECK(valid.ok()) << valid.ToString();
}

namespace {
// Every this many bounded steps the guard's cap may grow (scheduler.h).
constexpr int64_t kRampEvery = 4;
// How far a measured step may pass the bound before the guard counts it as failed: twice the
// machine's step noise (so that a size that fits is not taken away by one slow step), at least
// 2% and at most 8%. Gross misjudgements (1.3-1.9x, issue 31) are far past it; within it the
// cost model decides, as before the guard.
double GuardTolerance(const StepCostModel& cost) {
  return std::clamp(2.0 * cost.RelativeNoise(), 0.02, 0.08);
}
// A solo measurement older than this no longer anchors the bound: the next ultrafast decode step
// is measured solo again (the machine's speed drifts by 15-20% over minutes on a shared VM).
constexpr double kAnchorMaxAgeSeconds = 10.0;
// Probe interval the guard's memory is scaled by when probes are off.
constexpr int64_t kGuardInterval = 64;
// Bounded steps a size that failed stays out of the ramp, at first and at most.
constexpr int64_t kFirstBackoff = 16;
constexpr int64_t kMaxBackoff = 512;
// Solo steps that start an anchor (the first ultrafast decode steps with no recent one).
constexpr int64_t kAnchorFirstSamples = 3;
// Weight of a new sample in the guard's running means (the solo step, the ratio per size): about
// four steps' memory, which cuts a step's noise to 40% of itself.
constexpr double kRatioSmoothing = 0.25;
}  // namespace

StepPlan Scheduler::Plan(const StepInput& input) {
  const double now = clock_->Now();
  Guard guard;
  if (observed_) {
    if (bounded_steps_ > failed_until_) failed_extra_ = std::numeric_limits<int64_t>::max();
    guard.cap = guard.ramp_cap = verified_extra_;
    if (bounded_steps_ % kRampEvery == kRampEvery - 1) {
      const int64_t more = std::max(verified_extra_ + 1, 2 * verified_extra_);
      guard.ramp_cap = std::max(verified_extra_, std::min(more, failed_extra_ - 1));
    }
    const bool stale = !AnchorFresh(now);
    guard.force_solo = stale || anchor_.samples < kAnchorFirstSamples;
    guard.anchored = !stale;
    guard.anchor_solo = anchor_.solo;
    guard.anchor_seconds = anchor_.seconds;
    guard.tolerance = GuardTolerance(*cost_);
  }
  StepPlan plan = Planner(options_, *cost_, now, input, guard).Run(bounded_steps_);
  if (std::isfinite(plan.bound_seconds)) ++bounded_steps_;
  return plan;
}

bool Scheduler::AnchorFresh(double now) const {
  const int64_t every =
      options_.probe_interval_steps > 0 ? options_.probe_interval_steps : kGuardInterval;
  return anchor_.valid && bounded_steps_ - anchor_.step <= 4 * every &&
         now - anchor_.time <= kAnchorMaxAgeSeconds;
}

double Scheduler::AnchoredSolo(const BatchComposition& solo) const {
  if (!anchor_.valid) return 0.0;
  return Anchored(*cost_, anchor_.solo, anchor_.seconds, solo);
}

void Scheduler::Observe(const StepPlan& plan, double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0.0) return;
  observed_ = true;
  if (!std::isfinite(plan.bound_seconds) || plan.ultrafast_prefilling ||
      plan.ultrafast_composition.empty()) {
    return;
  }
  const double now = clock_->Now();
  if (plan.extra_tokens == 0) {
    // A solo step: the anchor. The first kAnchorFirstSamples after it went stale are all solo
    // and the anchor is their fastest: on a loaded machine a step is slowed by other processes,
    // never sped up, and one slow first sample made a loose bound that let a default ride at
    // 1.4x (through serve, 8 defaults). Then a running mean, so that one noisy step does not
    // move the bound by its noise.
    double s = seconds;
    int64_t samples = 1;
    if (AnchorFresh(now)) {
      const double previous = AnchoredSolo(plan.ultrafast_composition);
      samples = anchor_.samples + 1;
      s = anchor_.samples < kAnchorFirstSamples ? std::min(previous, seconds)
                                                : previous + kRatioSmoothing * (seconds - previous);
    }
    anchor_ = {true, plan.ultrafast_composition, s, bounded_steps_, now, samples};
    return;
  }
  const double solo = AnchoredSolo(plan.ultrafast_composition);
  if (!(solo > 0.0)) return;
  // Judged on the ratio to the solo step averaged over the recent steps with as many tokens
  // beside it (the first sample alone after a while without any): one noisy step must not take
  // a size away that fits, while a size that does not fit shows on its first step.
  const size_t e = static_cast<size_t>(std::min(plan.extra_tokens, options_.max_step_tokens));
  if (ratios_.size() <= e) ratios_.resize(e + 1);
  RatioMean& mean = ratios_[e];
  const double ratio = seconds / solo;
  const int64_t every =
      options_.probe_interval_steps > 0 ? options_.probe_interval_steps : kGuardInterval;
  if (mean.samples == 0 || bounded_steps_ - mean.step > 4 * every) {
    mean.ratio = ratio;
    mean.samples = 0;
  } else {
    mean.ratio += kRatioSmoothing * (ratio - mean.ratio);
  }
  ++mean.samples;
  mean.step = bounded_steps_;
  // Verified within the slack itself, failed only past the tolerance: in between a size keeps
  // its standing, so noise neither takes away a size that fits nor lets one in that does not.
  const double tolerance = GuardTolerance(*cost_);
  if (mean.ratio <= 1.0 + options_.ultrafast_slack) {
    verified_extra_ = std::max(verified_extra_, plan.extra_tokens);
    if (plan.extra_tokens >= last_failed_extra_) last_failed_extra_ = -1;
  } else if (mean.ratio > (1.0 + options_.ultrafast_slack) * (1.0 + tolerance)) {
    // Blocked for kFirstBackoff steps, doubling while the same size keeps failing: a size that
    // failed by noise comes back soon, one that does not fit costs a step ever more rarely.
    backoff_ = plan.extra_tokens == last_failed_extra_ ? std::min(2 * backoff_, kMaxBackoff)
                                                       : kFirstBackoff;
    last_failed_extra_ = plan.extra_tokens;
    failed_until_ = bounded_steps_ + backoff_;
    failed_extra_ = std::min(failed_extra_, plan.extra_tokens);
    verified_extra_ = std::min(verified_extra_, plan.extra_tokens - 1);
  }
}

FedTokens Feed(SequenceState* st, int64_t n, int64_t block_size, double now) {
  FedTokens f;
  f.new_blocks =
      std::max<int64_t>(0, (st->context + n + block_size - 1) / block_size - st->kv_blocks);
  st->kv_blocks += f.new_blocks;
  st->context += n;
  if (st->to_prefill > 0) {
    st->to_prefill -= n;
    f.token = st->to_prefill == 0;  // the last prompt token's logits give a token
  } else {
    f.token = true;
  }
  st->last_served = now;
  return f;
}

}  // namespace uf::scheduler
