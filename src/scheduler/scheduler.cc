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

// State of one Plan() call.
class Planner {
 public:
  Planner(const SchedulerOptions& options, const StepCostModel& cost, double now,
          const StepInput& in)
      : options_(options), cost_(cost), now_(now), in_(in) {
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
      plan_.ultrafast_solo_seconds = cost_.Predict(plan_.composition);
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
      for (int rank : {kRankDefault, kRankFlex}) {
        auto it = std::find_if(items_.begin(), items_.end(), [&](const Item& x) {
          return x.rank == rank && x.running && !x.evicted && !x.planned && x.s->to_prefill == 0 &&
                 BlocksFor(x, 1) <= free_blocks_;
        });
        if (it != items_.end() && tokens_left_ >= 1) {
          Add(*it, 1, /*decode=*/true, 0);
          break;
        }
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
    if (n > 0) Add(it, n, /*decode=*/false);
  }

  // Admits a waiting sequence and gives it a first prompt chunk; false when it cannot start.
  bool ServeWaiting(Item& it, bool forced) {
    const bool ultrafast = it.rank == kRankUltrafast;
    const int64_t max_n = std::min({it.s->to_prefill, prefill_left_, tokens_left_});
    int64_t n = ultrafast ? max_n : FitPrefill(it, max_n);
    if (forced && n == 0 && max_n > 0) n = 1;
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

StepPlan Scheduler::Plan(const StepInput& input) {
  StepPlan plan = Planner(options_, *cost_, clock_->Now(), input).Run(bounded_steps_);
  if (std::isfinite(plan.bound_seconds)) ++bounded_steps_;
  return plan;
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
