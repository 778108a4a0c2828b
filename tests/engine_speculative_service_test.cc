// Speculative decoding inside the serving engine: a speculating request generates what it would
// without speculation (greedy and seeded sampling, alone and batched with others, with prefix
// cache hits and preemption), its rejected drafts leave no KV behind, the tiers get their
// defaults (n-gram on ultrafast, off elsewhere), a prediction is drafted from, and bad settings
// are refused.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/service.h"
#include "service_test_util.h"
#include "test_models.h"

namespace uf::engine {
namespace {

using testing_models::Loaded;
using testing_service::Collect;
using testing_service::Output;
using testing_service::SettledStats;

Loaded& Demo() { return testing_models::DemoModel(); }

std::unique_ptr<Service> MakeService(ServiceOptions o) {
  o.n_threads = 2;
  // Fixed verify costs: how many drafts the controllers verify follows from acceptance alone,
  // not from step times measured on a (possibly loaded) machine.
  o.spec_cost = SpecCostModel{};
  auto s = Service::Create(*Demo().model, *Demo().tokenizer, o);
  UF_CHECK(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// Prompts with and without repetition (the demo model copies and loops, so drafts get accepted).
const std::vector<std::string>& Prompts() {
  static const std::vector<std::string> p = {
      "ROMEO:",
      "First Citizen:\nSpeak, speak.\n\nAll:\nSpeak, speak.\n\nFirst Citizen:\nSpeak,",
      "KING RICHARD II:\nWhat says my lord?\n\nKING RICHARD II:\nWhat",
      "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\nJULIET:\nO Romeo,",
  };
  return p;
}

GenerationRequest Request(const std::string& prompt, std::optional<SpeculationRequest> spec,
                          float temperature = 0.0f, uint64_t seed = 0) {
  GenerationRequest r;
  r.prompt = Demo().tokenizer->Encode(prompt, true, false);
  r.max_tokens = 80;
  r.sampling.temperature = temperature;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = seed;
  r.ignore_eos = true;
  r.top_logprobs = 0;  // token ids come back through the logprobs
  r.speculation = spec;
  r.service_tier = scheduler::ServiceTier::kDefault;
  return r;
}

const SpeculationRequest kNgram{SpecMode::kNgram, 8};
const SpeculationRequest kOff{SpecMode::kOff, 8};

std::vector<Output> RunAll(ServiceOptions o, std::optional<SpeculationRequest> spec,
                           float temperature = 0.0f, bool together = true,
                           EngineStats* stats = nullptr) {
  // Together: the engine waits until every request is queued, so they really share steps (and
  // KV) on however loaded a machine.
  std::atomic<bool> submitted{!together};
  o.step_hook = [&submitted] {
    while (!submitted.load()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  };
  auto s = MakeService(o);
  std::vector<Output> out;
  std::vector<std::shared_ptr<RequestChannel>> chans;
  uint64_t seed = 1;
  for (const std::string& p : Prompts()) {
    // Each prompt twice: the second finds the first's blocks in the prefix cache.
    for (int rep = 0; rep < 2; ++rep) {
      auto ch = s->Submit(Request(p, spec, temperature, seed++));
      EXPECT_TRUE(ch.ok()) << ch.status().ToString();
      if (!ch.ok()) continue;
      if (together) {
        chans.push_back(*ch);
      } else {
        out.push_back(Collect(**ch));
      }
    }
  }
  submitted = true;
  for (auto& ch : chans) out.push_back(Collect(*ch));
  const EngineStats st = SettledStats(*s);
  EXPECT_EQ(st.kv_blocks_used, 0) << "finished sequences (and their drafts) must free blocks";
  if (stats != nullptr) *stats = st;
  return out;
}

void ExpectSame(const std::vector<Output>& a, const std::vector<Output>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
    EXPECT_EQ(a[i].text, b[i].text) << "request " << i;
  }
}

TEST(SpeculativeService, GreedyOutputIsUnchangedAloneAndBatched) {
  ServiceOptions o;
  o.max_seqs = 4;
  o.ctx = 256;
  const std::vector<Output> plain = RunAll(o, kOff, 0.0f, /*together=*/false);
  EngineStats st;
  const std::vector<Output> alone = RunAll(o, kNgram, 0.0f, /*together=*/false, &st);
  ExpectSame(plain, alone);
  EXPECT_GT(st.spec_accepted, 0);
  const std::vector<Output> batched = RunAll(o, kNgram, 0.0f, /*together=*/true, &st);
  ExpectSame(plain, batched);
  EXPECT_GT(st.spec_accepted, 0);
  // Usage reports what was drafted.
  int64_t drafted = 0, accepted = 0;
  for (const Output& out : batched) {
    EXPECT_EQ(out.final_event.speculation, SpecMode::kNgram);
    EXPECT_LE(out.final_event.accepted_tokens, out.final_event.drafted_tokens);
    EXPECT_EQ(out.final_event.completion_tokens, 80);
    drafted += out.final_event.drafted_tokens;
    accepted += out.final_event.accepted_tokens;
  }
  EXPECT_EQ(drafted, st.spec_drafted);
  EXPECT_EQ(accepted, st.spec_accepted);
  int64_t hist_steps = 0, hist_accepted = 0;
  for (int i = 0; i <= kMaxSpecK; ++i) {
    hist_steps += st.spec_accepted_hist[i];
    hist_accepted += i * st.spec_accepted_hist[i];
  }
  EXPECT_EQ(hist_steps, st.spec_verify_steps);
  EXPECT_EQ(hist_accepted, st.spec_accepted);
}

TEST(SpeculativeService, SeededSamplingIsUnchanged) {
  ServiceOptions o;
  o.max_seqs = 4;
  o.ctx = 256;
  const std::vector<Output> plain = RunAll(o, kOff, 0.8f);
  EngineStats st;
  const std::vector<Output> spec = RunAll(o, kNgram, 0.8f, true, &st);
  ExpectSame(plain, spec);
  EXPECT_GT(st.spec_drafted, 0);
}

TEST(SpeculativeService, PreemptionAndTightKvKeepOutputs) {
  ServiceOptions o;
  o.max_seqs = 4;
  o.ctx = 256;
  // The same blocks for both runs: the block size picks the attention kernel (the AVX2 and
  // AVX-512 tiled kernels take blocks of a multiple of 16, smaller ones run the portable kernel),
  // and the kernels round differently, which can flip a near-tie of the greedy text.
  o.block_size = 8;
  const std::vector<Output> plain = RunAll(o, kOff, 0.0f, /*together=*/false);
  // Room for about two sequences: the others are evicted and recomputed, drafts and all.
  o.kv_tokens = 256;
  EngineStats st;
  const std::vector<Output> spec = RunAll(o, kNgram, 0.0f, true, &st);
  ExpectSame(plain, spec);
  EXPECT_GT(st.preemptions, 0);
}

TEST(SpeculativeService, TierDefaults) {
  ServiceOptions o;
  o.max_seqs = 2;
  o.ctx = 256;
  auto s = MakeService(o);
  auto run = [&](std::optional<scheduler::ServiceTier> tier,
                 std::optional<SpeculationRequest> spec) {
    GenerationRequest r = Request(Prompts()[1], spec);
    r.service_tier = tier;
    auto ch = s->Submit(std::move(r));
    EXPECT_TRUE(ch.ok()) << ch.status().ToString();
    return ch.ok() ? Collect(**ch).final_event : GenerationEvent();
  };
  EXPECT_EQ(run(scheduler::ServiceTier::kUltrafast, std::nullopt).speculation, SpecMode::kNgram);
  EXPECT_EQ(run(scheduler::ServiceTier::kDefault, std::nullopt).speculation, SpecMode::kOff);
  EXPECT_EQ(run(scheduler::ServiceTier::kFlex, std::nullopt).speculation, SpecMode::kOff);
  EXPECT_EQ(run(scheduler::ServiceTier::kUltrafast, kOff).speculation, SpecMode::kOff);
  EXPECT_EQ(run(scheduler::ServiceTier::kDefault, kNgram).speculation, SpecMode::kNgram);
  const GenerationEvent off = run(scheduler::ServiceTier::kUltrafast, kOff);
  EXPECT_EQ(off.drafted_tokens, 0);

  ServiceOptions no_default = o;
  no_default.ultrafast_speculation = false;
  auto s2 = MakeService(no_default);
  GenerationRequest r = Request(Prompts()[1], std::nullopt);
  r.service_tier = scheduler::ServiceTier::kUltrafast;
  auto ch = s2->Submit(std::move(r));
  ASSERT_TRUE(ch.ok());
  EXPECT_EQ(Collect(**ch).final_event.speculation, SpecMode::kOff);
}

TEST(SpeculativeService, PredictionIsDraftedFrom) {
  ServiceOptions o;
  o.max_seqs = 1;
  o.ctx = 256;
  auto s = MakeService(o);
  GenerationRequest r = Request("ROMEO:", kOff);
  auto ch = s->Submit(r);
  ASSERT_TRUE(ch.ok());
  const Output plain = Collect(**ch);
  // The expected output as the prediction: speculation turns on (default tier) and nearly every
  // draft is right.
  GenerationRequest p = Request("ROMEO:", std::nullopt);
  p.prediction = plain.tokens;
  ch = s->Submit(p);
  ASSERT_TRUE(ch.ok());
  const Output predicted = Collect(**ch);
  EXPECT_EQ(predicted.tokens, plain.tokens);
  EXPECT_EQ(predicted.final_event.speculation, SpecMode::kNgram);
  EXPECT_GE(predicted.final_event.accepted_tokens, 50) << predicted.final_event.drafted_tokens;
}

TEST(SpeculativeService, BadSettingsAreRefused) {
  ServiceOptions o;
  o.max_seqs = 1;
  o.ctx = 256;
  auto s = MakeService(o);
  for (const SpeculationRequest& bad :
       {SpeculationRequest{SpecMode::kNgram, 0}, SpeculationRequest{SpecMode::kNgram, 17},
        SpeculationRequest{SpecMode::kDraft, 4}, SpeculationRequest{SpecMode::kOracle, 4}}) {
    auto ch = s->Submit(Request("ROMEO:", bad));
    ASSERT_FALSE(ch.ok());
    EXPECT_EQ(ch.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ch.status().message().find("speculation"), std::string::npos);
  }
  GenerationRequest r = Request("ROMEO:", kNgram);
  r.prediction = {5, 1 << 20};
  EXPECT_FALSE(s->Submit(r).ok());
  ServiceOptions bad = o;
  bad.spec_k = 0;
  EXPECT_FALSE(Service::Create(*Demo().model, *Demo().tokenizer, bad).ok());
}

}  // namespace
}  // namespace uf::engine
