// Step preemption for ultrafast arrivals (issue 31's TTFT): an ultrafast request that arrives
// while a default batch step runs abandons that step at the next layer boundary
// (model::Decoder::Forward's abandon flag, ServiceOptions::preempt_for_ultrafast), so that its
// prompt starts at once instead of after a batch that takes 3-4 solo decode steps on a 2-core CPU.
//
// The decoder: an abandoned forward leaves the cache as it was (lengths and blocks) and the rerun
// gives the logits of a forward that was never interrupted, bit for bit, on both forward paths.
// The engine (the demo model, 6 layers): with 3, 8 or 16 default streams decoding, the request
// is queued while the engine is held at the start of a default step (a StepGate-like pacer), so
// the step in flight is certain to run with the flag up; what runs between the arrival and the
// ultrafast request's first token is counted in steps and layers, not in the seconds of a loaded
// machine, and charged at the step times measured for the Llama-3.2-1B-shape Q4_0 model on this
// project's 2-core VM (docs/tiers.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/service.h"
#include "model/batch.h"
#include "model/decoder.h"
#include "test_models.h"

namespace uf {
namespace {

using scheduler::ServiceTier;

const model::Model& Demo() { return *testing_models::DemoModel().model; }

// One step of a decoder test: n tokens of sequence seq, the last wanting logits.
struct Step {
  int32_t seq;
  int n;
};

class DecoderRun {
 public:
  explicit DecoderRun(bool single_dispatch) : pool_(2) {
    const model::ModelConfig& c = Demo().config();
    engine::KvCacheOptions co;
    co.n_layer = c.n_layer;
    co.n_head_kv = c.n_head_kv;
    co.head_dim = c.head_dim;
    co.max_seq_len = 256;
    co.max_seqs = 2;
    co.n_blocks = engine::KvCacheOptions::BlocksFor(co.max_seq_len, 2, co.block_size);
    auto cache = engine::KvCache::Create(co);
    UF_CHECK(cache.ok()) << cache.status().ToString();
    cache_ = std::move(cache).value();
    model::DecoderOptions dopt;
    dopt.max_batch = 64;
    dopt.single_dispatch = single_dispatch;
    auto dec = model::Decoder::Create(Demo(), cache_.get(), dopt, &pool_);
    UF_CHECK(dec.ok()) << dec.status().ToString();
    dec_ = std::move(dec).value();
  }

  // Runs the steps (each of them first abandoned once when `abandon_first`); returns every
  // logits row in order.
  std::vector<float> Run(const std::vector<std::vector<Step>>& steps, bool abandon_first) {
    const int64_t n_vocab = Demo().config().n_vocab;
    std::vector<int32_t> pos(2, 0);
    std::vector<float> out;
    model::Batch b;
    for (const std::vector<Step>& step : steps) {
      b.Clear();
      for (const Step& s : step) {
        for (int i = 0; i < s.n; ++i) {
          const int32_t p = pos[s.seq]++;
          b.Add(static_cast<int32_t>((p * 7919 + 11 + 101 * s.seq) % n_vocab), p, s.seq,
                i == s.n - 1);
        }
      }
      if (abandon_first) {
        const int64_t len0 = cache_->Length(0), len1 = cache_->Length(1);
        const int64_t cap0 = cache_->Capacity(0), cap1 = cache_->Capacity(1);
        const std::atomic<bool> up{true};
        const Status st = dec_->Forward(b, &up);
        EXPECT_FALSE(st.ok());
        // The flag was up before the forward began: one layer ran, the check before the second
        // stopped it.
        EXPECT_EQ(dec_->abandoned_layers(), 1) << st.ToString();
        EXPECT_EQ(cache_->Length(0), len0);
        EXPECT_EQ(cache_->Length(1), len1);
        EXPECT_EQ(cache_->Capacity(0), cap0) << "blocks reserved for the step must go back";
        EXPECT_EQ(cache_->Capacity(1), cap1);
      }
      const std::atomic<bool> down{false};
      const Status st = dec_->Forward(b, &down);
      EXPECT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(dec_->abandoned_layers(), 0);
      for (int64_t j = 0; j < dec_->n_outputs(); ++j) {
        out.insert(out.end(), dec_->logits(j), dec_->logits(j) + n_vocab);
      }
    }
    return out;
  }

 private:
  ThreadPool pool_;
  std::unique_ptr<engine::KvCache> cache_;
  std::unique_ptr<model::Decoder> dec_;
};

// Prompts that cross block boundaries (16 tokens a block), two sequences decoding together (the
// single-dispatch forward), and a batch of more than 16 tokens (the per-layer forward): each step
// abandoned once, then run again, gives the logits of a run where nothing was abandoned.
TEST(AbandonedForwardTest, RerunIsBitIdenticalAndTheCacheIsUnchanged) {
  const std::vector<std::vector<Step>> steps = {
      {{0, 20}},          // a prompt: per-layer forward
      {{1, 13}},          // single dispatch (13 tokens)
      {{0, 1}, {1, 1}},   // a decode step of two sequences
      {{0, 1}, {1, 1}},   // and another (block boundary for sequence 1 at 16)
      {{0, 12}, {1, 9}},  // 21 tokens: per-layer forward, crossing blocks
      {{0, 1}, {1, 1}},
  };
  for (bool single : {true, false}) {
    SCOPED_TRACE(single ? "single dispatch" : "per-step dispatch");
    const std::vector<float> plain = DecoderRun(single).Run(steps, false);
    const std::vector<float> abandoned = DecoderRun(single).Run(steps, true);
    ASSERT_EQ(plain.size(), abandoned.size());
    EXPECT_TRUE(plain == abandoned) << "logits differ after an abandoned forward";
  }
}

// The engine's clock as the pacer makes it: one unit per step, so event times count steps.
class StepClock final : public Clock {
 public:
  double Now() const override { return now_.load(); }
  void Advance() { now_.store(now_.load() + 1.0); }

 private:
  std::atomic<double> now_{0.0};
};

// The step hook: advances the clock one step and holds the engine at the start of step hold_at
// until Release(). The pacer must outlive the service.
class Pacer {
 public:
  explicit Pacer(StepClock* clock) : clock_(clock) {}
  std::function<void()> Hook() {
    return [this] {
      std::unique_lock<std::mutex> lock(mu_);
      clock_->Advance();
      if (++steps_ != hold_at_) return;
      held_ = true;
      cv_.notify_all();
      cv_.wait_for(lock, std::chrono::seconds(60), [&] { return hold_at_ != steps_; });
      held_ = false;
    };
  }
  void HoldAt(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_at_ = step;
  }
  // Waits until the engine is held at the start of step `step` (false after 60 s).
  bool WaitHeld(int64_t step) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return held_ && steps_ == step; });
  }
  // Lets the held step go and holds at `next` (-1: nowhere) instead.
  void Release(int64_t next = -1) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hold_at_ = next;
    }
    cv_.notify_all();
  }

 private:
  StepClock* clock_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t steps_ = 0, hold_at_ = -1;
  bool held_ = false;
};

// Every token beside the ultrafast work costs as much as its own: nothing fits beside it at 5%
// slack, so its prompt step runs alone as on the 2-core CPU (where a second sequence costs +34%).
class LinearCost final : public scheduler::StepCostModel {
 public:
  double Predict(const scheduler::BatchComposition& c) const override {
    return 1e-3 * static_cast<double>(1 + c.tokens());
  }
};

struct Out {
  std::vector<int32_t> tokens;
  std::vector<double> times;  // the step clock when each was sampled
};

Out CollectAll(engine::RequestChannel& ch) {
  Out out;
  std::vector<engine::GenerationEvent> events;
  for (;;) {
    if (!ch.Pop(&events, 60.0)) {
      ADD_FAILURE() << "no event within 60 s";
      return out;
    }
    for (const engine::GenerationEvent& e : events) {
      for (const engine::TokenLogprob& lp : e.logprobs) {
        out.tokens.push_back(lp.token);
        out.times.push_back(e.time);
      }
      if (e.finish != engine::FinishReason::kNone) {
        EXPECT_TRUE(e.error.ok()) << e.error.ToString();
        return out;
      }
    }
  }
}

engine::GenerationRequest Greedy(const std::string& prompt, int64_t max_tokens, ServiceTier tier) {
  engine::GenerationRequest r;
  r.prompt = testing_models::DemoModel().tokenizer->Encode(prompt, true, false);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  r.top_logprobs = 0;  // token ids come back through the logprobs
  r.service_tier = tier;
  r.speculation = engine::SpeculationRequest{engine::SpecMode::kOff, 8};
  return r;
}

std::string DefaultPrompt(int i) { return "ROMEO " + std::to_string(i) + ": But soft, what light"; }
const char kUltrafastPrompt[] = "JULIET: O Romeo, Romeo, wherefore art thou";
constexpr int64_t kDefaultTokens = 24, kUltrafastTokens = 12;

std::unique_ptr<engine::Service> MakeService(const engine::ServiceOptions& o) {
  auto s = engine::Service::Create(Demo(), *testing_models::DemoModel().tokenizer, o);
  UF_CHECK(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

std::vector<int32_t> Alone(const std::string& prompt, int64_t max_tokens) {
  engine::ServiceOptions o;
  o.max_seqs = 1;
  o.ctx = 256;
  o.n_threads = 2;
  auto s = MakeService(o);
  return CollectAll(**s->Submit(Greedy(prompt, max_tokens, ServiceTier::kDefault))).tokens;
}

// Step times of the 1B Q4_0 shape on 2 threads (docs/tiers.md: t(1)/t(2)/t(3)/t(4)/t(8)/t(16)),
// linear between the points.
double Llama1BStep(int64_t batch) {
  static const std::vector<std::pair<int64_t, double>> kT = {{1, 0.132}, {2, 0.176}, {3, 0.233},
                                                             {4, 0.285}, {8, 0.402}, {16, 0.487}};
  if (batch <= 0) return 0.0;
  for (size_t i = 1; i < kT.size(); ++i) {
    if (batch <= kT[i].first) {
      const double f = static_cast<double>(batch - kT[i - 1].first) /
                       static_cast<double>(kT[i].first - kT[i - 1].first);
      return kT[i - 1].second + f * (kT[i].second - kT[i - 1].second);
    }
  }
  return kT.back().second;
}

struct Arrival {
  int64_t defaults_in_flight = 0;  // default tokens sampled from the arrival to the first token
  int64_t abandoned_steps = 0, abandoned_layers = 0;
  double excess_solo_steps = 0;  // that work at the 1B curve, in its solo steps
};

// n default streams decoding; the ultrafast request arrives while the engine is held at the start
// of a default step. Checks that every output is what it is alone.
Arrival UltrafastArrives(int n, bool preempt) {
  StepClock clock;
  Pacer pacer(&clock);
  LinearCost cost;
  engine::ServiceOptions o;
  o.max_seqs = 24;
  o.ctx = 256;
  o.n_threads = 2;
  o.cost_model = &cost;
  o.clock = &clock;
  o.scheduler.probe_interval_steps = 0;
  o.preempt_for_ultrafast = preempt;
  o.step_hook = pacer.Hook();
  pacer.HoldAt(1);  // the defaults queue together
  auto s = MakeService(o);
  std::vector<std::shared_ptr<engine::RequestChannel>> d;
  for (int i = 0; i < n; ++i) {
    auto ch = s->Submit(Greedy(DefaultPrompt(i), kDefaultTokens, ServiceTier::kDefault));
    UF_CHECK(ch.ok()) << ch.status().ToString();
    d.push_back(*ch);
  }
  EXPECT_TRUE(pacer.WaitHeld(1));
  // Step 1 reads the first prompt, step 2 the others; from step 3 all decode. Held before 6.
  pacer.Release(6);
  EXPECT_TRUE(pacer.WaitHeld(6));
  const double arrival = clock.Now();
  auto f = s->Submit(Greedy(kUltrafastPrompt, kUltrafastTokens, ServiceTier::kUltrafast));
  UF_CHECK(f.ok()) << f.status().ToString();
  pacer.Release();
  const Out uf = CollectAll(**f);
  std::vector<Out> defaults;
  for (auto& ch : d) defaults.push_back(CollectAll(*ch));
  const engine::EngineStats st = s->Stats();
  s->Shutdown();

  EXPECT_EQ(uf.tokens, Alone(kUltrafastPrompt, kUltrafastTokens));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(defaults[i].tokens, Alone(DefaultPrompt(i), kDefaultTokens)) << "default " << i;
    // Decoding when the ultrafast request arrived.
    EXPECT_GE(std::count_if(defaults[i].times.begin(), defaults[i].times.end(),
                            [&](double t) { return t < arrival; }),
              2)
        << "default " << i << (preempt ? ", preempting" : "") << ": tokens at "
        << testing::PrintToString(defaults[i].times) << ", arrival " << arrival;
  }
  Arrival a;
  EXPECT_FALSE(uf.times.empty());
  if (uf.times.empty()) return a;
  for (const Out& x : defaults) {
    a.defaults_in_flight += std::count_if(x.times.begin(), x.times.end(), [&](double t) {
      return t >= arrival && t <= uf.times.front();
    });
  }
  a.abandoned_steps = st.abandoned_steps;
  a.abandoned_layers = st.abandoned_layers;
  // A completed default step of k sequences costs t(k); an abandoned one of n the share of its
  // layers that ran. The prompt step itself is what the request takes alone.
  const double layers = static_cast<double>(Demo().config().n_layer);
  a.excess_solo_steps = (Llama1BStep(a.defaults_in_flight) +
                         static_cast<double>(a.abandoned_layers) / layers * Llama1BStep(n)) /
                        Llama1BStep(1);
  return a;
}

// Issue 31's TTFT target: at most one solo decode step above the ultrafast request's time alone.
// Without preemption the request waits for the whole default step in flight: t(n) / t(1) = 1.77,
// 3.05 and 3.69 solo steps with 3, 8 and 16 defaults (the +1.9-2.0 measured through `serve`,
// arrivals landing anywhere in that step). With it, the step is abandoned after the layer that
// was running (here the first: the flag was up when the step began), so the wait is a layer of
// it: at most 1/6 of t(n) on this 6-layer model, 1/16 on the 16-layer 1B model (0.23 solo steps
// with 16 defaults). Every output stays what it is alone (the abandoned positions are rerun).
TEST(PreemptStepTest, UltrafastFirstTokenDoesNotWaitForTheDefaultStepInFlight) {
  for (int n : {3, 8, 16}) {
    SCOPED_TRACE(testing::Message() << n << " defaults");
    const Arrival off = UltrafastArrives(n, /*preempt=*/false);
    EXPECT_EQ(off.defaults_in_flight, n);
    EXPECT_EQ(off.abandoned_steps, 0);
    EXPECT_GT(off.excess_solo_steps, 1.0) << "the arrival this test sets up must miss the target";

    const Arrival on = UltrafastArrives(n, /*preempt=*/true);
    EXPECT_EQ(on.defaults_in_flight, 0) << "a default step completed before the first token";
    EXPECT_EQ(on.abandoned_steps, 1);
    EXPECT_EQ(on.abandoned_layers, 1);
    EXPECT_LE(on.excess_solo_steps, 1.0);
    std::printf("%2d defaults: first token %.2f solo steps above alone (%.2f without preemption)\n",
                n, on.excess_solo_steps, off.excess_solo_steps);
  }
}

}  // namespace
}  // namespace uf
