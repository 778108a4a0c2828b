// The serving engine's chains on a Vulkan device (ServiceOptions::chain_steps): a lone greedy or
// plainly sampled stream decodes with each step's token fed to the next on the device. The text,
// the finish and the counts must be those of the same service with chaining off, whatever ends
// the request (max_tokens, a stop string, a full context); another request's arrival or a
// cancellation stops the chain; requests with bias or penalties never chain; streams decoding
// together chain as a batch. Runs on
// Mesa's lavapipe in CI; skips, saying why, where no Vulkan device exists.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "engine/request.h"
#include "engine/service.h"
#include "engine/speculative.h"
#include "gpu/backend.h"
#include "gpu_service_util.h"
#include "grammar/json_schema.h"
#include "service_test_util.h"
#include "test_models.h"

namespace uf {
namespace {

using engine::FinishReason;
using engine::testing_service::Collect;
using engine::testing_service::Output;
using engine::testing_service::SettledStats;

std::unique_ptr<engine::Service> MakeService(bool chain, std::function<void()> step_hook = nullptr,
                                             int max_seqs = 2, int64_t kv_tokens = 0) {
  const testing_models::Loaded& demo = testing_models::DemoModel();
  engine::ServiceOptions o;
  o.max_seqs = max_seqs;
  o.ctx = 96;
  o.kv_tokens = kv_tokens;
  o.n_threads = 2;
  o.chain_steps = chain;
  o.step_hook = std::move(step_hook);
  o.spec_cost = engine::SpecCostModel{};  // drafts follow acceptance, not measured times
  o.make_forward = testing_gpu::DeviceForward(*demo.model, gpu::GpuForwardOptions{}.top_k, nullptr);
  auto s = engine::Service::Create(*demo.model, *demo.tokenizer, o);
  UF_CHECK(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

engine::GenerationRequest Greedy(const std::string& prompt, int64_t max_tokens) {
  const testing_models::Loaded& demo = testing_models::DemoModel();
  engine::GenerationRequest r;
  r.prompt = demo.tokenizer->Encode(prompt, true, false);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.service_tier = scheduler::ServiceTier::kDefault;
  return r;
}

// Greedy's request at temperature t (0: greedy) with a seed.
engine::GenerationRequest Sampled(const std::string& prompt, int64_t max_tokens, float t,
                                  uint64_t seed) {
  engine::GenerationRequest r = Greedy(prompt, max_tokens);
  r.sampling.temperature = t;
  r.sampling.seed = seed;
  return r;
}

Output Generate(engine::Service& s, engine::GenerationRequest r) {
  auto ch = s.Submit(std::move(r));
  UF_CHECK(ch.ok()) << ch.status().ToString();
  return Collect(**ch);
}

// An unchained service and a chained one.
std::pair<std::unique_ptr<engine::Service>, std::unique_ptr<engine::Service>> Services() {
  return {MakeService(false), MakeService(true)};
}

// r on the unchained service and on the chained one: the same text, finish and token count.
// Returns the chained output (*want: the unchained one, if not null).
Output ExpectSameOutput(engine::Service& plain, engine::Service& chained,
                        const engine::GenerationRequest& r, Output* want = nullptr) {
  const Output w = Generate(plain, r);
  const Output got = Generate(chained, r);
  EXPECT_EQ(got.text, w.text);
  EXPECT_EQ(got.finish, w.finish);
  EXPECT_EQ(got.completion_tokens, w.completion_tokens);
  if (want != nullptr) *want = w;
  return got;
}

// After the same requests on both services: none chained unchained, more than min_chained
// steps chained, and every KV block given back. Returns the chained service's stats.
engine::EngineStats ExpectChained(engine::Service& plain, engine::Service& chained,
                                  int64_t min_chained, const std::string& what) {
  const engine::EngineStats on = SettledStats(chained), off = SettledStats(plain);
  std::printf(
      "[gpu serve chain] %s: chained %lld of %lld steps, %lld overruled (unchained: %lld "
      "steps)\n",
      what.c_str(), static_cast<long long>(on.chained_steps), static_cast<long long>(on.steps),
      static_cast<long long>(on.chain_overruled), static_cast<long long>(off.steps));
  EXPECT_EQ(off.chained_steps, 0);
  EXPECT_GT(on.chained_steps, min_chained) << "the lone " << what << " streams did not chain";
  EXPECT_LE(on.chained_steps, on.steps);
  EXPECT_EQ(on.kv_blocks_used, 0) << "a chained sequence kept its blocks";
  return on;
}

// requests on a chained service of max_seqs slots (kv_tokens: its pool, 0 the default): the
// first submitted, the others from the engine's step hook at its first step (the first's
// prompt), so that all of them decode together from the third step on, on any machine. Returns
// each one's output in order; *stats: the service's settled stats.
std::vector<Output> Together(const std::vector<engine::GenerationRequest>& requests, int max_seqs,
                             int64_t kv_tokens, engine::EngineStats* stats) {
  engine::Service* service = nullptr;
  std::promise<std::vector<std::shared_ptr<engine::RequestChannel>>> sent;
  int hook_calls = 0;
  auto chained = MakeService(
      true,
      [&] {
        if (++hook_calls != 1) return;
        std::vector<std::shared_ptr<engine::RequestChannel>> chs;
        for (size_t i = 1; i < requests.size(); ++i) {
          auto ch = service->Submit(requests[i]);
          UF_CHECK(ch.ok()) << ch.status().ToString();
          chs.push_back(*ch);
        }
        sent.set_value(chs);
      },
      max_seqs, kv_tokens);
  service = chained.get();
  auto first = chained->Submit(requests[0]);
  UF_CHECK(first.ok()) << first.status().ToString();
  auto others = sent.get_future();
  UF_CHECK(others.wait_for(std::chrono::seconds(60)) == std::future_status::ready)
      << "the engine took no step in 60 s";
  std::vector<std::shared_ptr<engine::RequestChannel>> chs = {*first};
  for (auto& ch : others.get()) chs.push_back(ch);
  std::vector<Output> out;
  for (auto& ch : chs) out.push_back(Collect(*ch));
  *stats = SettledStats(*chained);
  return out;
}

class GpuServeChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string skip = testing_gpu::SkipReason();
    if (!skip.empty()) GTEST_SKIP() << skip;
  }
};

// One request at a time, chained and not: the same text, finish and token count, ended by
// max_tokens, by a stop string taken from the unchained text, and by the context (96 tokens).
TEST_F(GpuServeChainTest, LoneGreedyStreamGivesTheUnchainedText) {
  const auto [plain, chained] = Services();
  std::vector<engine::GenerationRequest> requests = {Greedy("ROMEO:", 40),
                                                     Greedy("JULIET:\nO Romeo,", 1000)};
  const Output first = Generate(*plain, requests[0]);
  ASSERT_GT(first.text.size(), 30u) << first.text;
  engine::GenerationRequest stop = Greedy("ROMEO:", 40);
  stop.stop = {first.text.substr(20, 6)};  // met mid-stream, after several chained steps
  requests.push_back(stop);
  engine::GenerationRequest no_eos = Greedy("ROMEO:", 40);
  no_eos.ignore_eos = true;  // the end tokens banned: masked on the device before the arg-max
  requests.push_back(no_eos);
  for (const engine::GenerationRequest& r : requests) {
    SCOPED_TRACE("max_tokens " + std::to_string(r.max_tokens) +
                 (r.stop.empty() ? "" : " stop '" + r.stop[0] + "'") +
                 (r.ignore_eos ? " ignore_eos" : ""));
    Output want;
    ExpectSameOutput(*plain, *chained, r, &want);
    if (!r.stop.empty()) {
      EXPECT_EQ(want.finish, FinishReason::kStop);
    }
    if (r.max_tokens == 1000) {
      EXPECT_EQ(want.finish, FinishReason::kLength);  // the context
    }
  }
  ExpectChained(*plain, *chained, 80, "greedy");
}

// A lone sampled stream (seeded; the device draws from the row's best tokens, the sampler checks
// each draw) gives the unchained service's text, finish and count: OpenAI's defaults
// (temperature 1, nothing filtered), run's defaults (top-k 40, top-p, min-p), top-p alone at a
// low temperature, and ignore_eos (its bans masked on the device). Most steps chain, and the
// sampler overrules at most 2 of the device's draws in all (a float rounding at an interval's
// edge; none is expected).
TEST_F(GpuServeChainTest, LoneSampledStreamGivesTheUnchainedText) {
  const auto [plain, chained] = Services();
  std::vector<engine::GenerationRequest> requests;
  const auto add = [&](float t, int32_t top_k, float top_p, float min_p, bool ignore_eos) {
    engine::GenerationRequest r = Sampled("ROMEO:", 48, t, 11);
    r.sampling.top_p = top_p;
    r.sampling.top_k = top_k;
    r.sampling.min_p = min_p;
    r.ignore_eos = ignore_eos;
    requests.push_back(r);
  };
  add(1.0f, 0, 1.0f, 0.0f, false);
  add(0.8f, 40, 0.95f, 0.05f, false);
  add(0.7f, 0, 0.9f, 0.0f, false);
  add(1.0f, 0, 1.0f, 0.0f, true);
  for (const engine::GenerationRequest& r : requests) {
    SCOPED_TRACE("T " + std::to_string(r.sampling.temperature) + " top_k " +
                 std::to_string(r.sampling.top_k) + " top_p " + std::to_string(r.sampling.top_p) +
                 (r.ignore_eos ? " ignore_eos" : ""));
    ExpectSameOutput(*plain, *chained, r);
  }
  const engine::EngineStats on = ExpectChained(*plain, *chained, 100, "sampled");
  EXPECT_LE(on.chain_overruled, 2) << "the device's draws disagree with the sampler's";
}

// A speculating stream (n-gram drafts, ultrafast's default) chains while its controller verifies
// no drafts and leaves the chain for each verify step: the same text as unchained, greedy and
// sampled, with both chained steps and verify steps (the demo model's text repeats itself, so
// its n-grams propose; the verify schedule follows acceptance alone: SpecCostModel fixed), the
// same verify steps and drafts.
TEST_F(GpuServeChainTest, SpeculatingStreamChainsBetweenVerifySteps) {
  const auto [plain, chained] = Services();
  for (float t : {0.0f, 0.8f}) {
    SCOPED_TRACE("T " + std::to_string(t));
    engine::GenerationRequest r = Sampled("ROMEO:", 80, t, 3);
    r.sampling.top_k = 40;
    r.speculation = engine::SpeculationRequest{.mode = engine::SpecMode::kNgram, .k = 4};
    ExpectSameOutput(*plain, *chained, r);
  }
  const engine::EngineStats on = ExpectChained(*plain, *chained, 20, "speculating");
  const engine::EngineStats off = SettledStats(*plain);
  std::printf("[gpu serve chain] %lld verify steps chained, %lld unchained\n",
              static_cast<long long>(on.spec_verify_steps),
              static_cast<long long>(off.spec_verify_steps));
  EXPECT_GT(off.spec_verify_steps, 0) << "nothing was drafted: the test tests nothing";
  // The controller sees the same tokens and proposals either way, so it verifies at the same
  // points: the chain leaves for each of those verify steps.
  EXPECT_EQ(on.spec_verify_steps, off.spec_verify_steps);
  EXPECT_EQ(on.spec_drafted, off.spec_drafted);
}

// Logprobs come from the step's reduced row, chained or not (a greedy stream asking for them
// runs the sampled chain, its draw the best token): the same tokens, and logprobs equal to the
// bit, greedy and sampled, and with ignore_eos (the banned end tokens' raw logits, which the
// logprobs count, come back from the device's edit pass as from a plain step's mask).
TEST_F(GpuServeChainTest, LogprobsChainWithTheUnchainedValues) {
  const auto [plain, chained] = Services();
  for (const auto& [t, no_eos] : {std::pair{0.0f, false}, std::pair{1.0f, false},
                                  std::pair{0.0f, true}, std::pair{1.0f, true}}) {
    SCOPED_TRACE("T " + std::to_string(t) + (no_eos ? " ignore_eos" : ""));
    engine::GenerationRequest r = Sampled("ROMEO:", 40, t, 5);
    r.top_logprobs = 3;
    r.ignore_eos = no_eos;
    Output want;
    const Output got = ExpectSameOutput(*plain, *chained, r, &want);
    EXPECT_EQ(got.tokens, want.tokens);
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    EXPECT_EQ(want.logprobs.size(), 40u);
    for (size_t i = 0; i < want.logprobs.size(); ++i) {
      EXPECT_EQ(got.logprobs[i], want.logprobs[i]) << "token " << i;
    }
  }
  ExpectChained(*plain, *chained, 80, "logprobs");
}

// Logit bias and penalties are applied on the device (edit_rows.comp), chained alone and as a
// batch: the unchained text, finish and token count for OpenAI's penalties at its defaults
// (their window every generated token), greedy with a repeat penalty, top-k with a bias and a
// frequency penalty, and top-p with a bias pushing a token down; most steps chained and the
// device's draws agreeing with the samplers'.
TEST_F(GpuServeChainTest, BiasAndPenaltiesChainWithTheUnchainedText) {
  const auto [plain, chained] = Services();
  std::vector<engine::GenerationRequest> requests;
  engine::GenerationRequest openai = Sampled("ROMEO:", 48, 1.0f, 13);
  openai.sampling.presence_penalty = 0.6f;
  openai.sampling.frequency_penalty = 0.4f;
  requests.push_back(openai);
  engine::GenerationRequest greedy = Greedy("ROMEO:", 48);
  greedy.sampling.repeat_penalty = 1.3f;
  requests.push_back(greedy);
  engine::GenerationRequest top_k = Sampled("JULIET:", 48, 0.8f, 5);
  top_k.sampling.top_k = 40;
  top_k.sampling.frequency_penalty = 1.0f;
  top_k.sampling.logit_bias = {{13, 2.0f}, {11, -3.0f}};
  requests.push_back(top_k);
  engine::GenerationRequest top_p = Sampled("ROMEO:", 48, 0.7f, 9);
  top_p.sampling.top_p = 0.9f;
  top_p.sampling.logit_bias = {{13, -100.0f}};
  requests.push_back(top_p);
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ExpectSameOutput(*plain, *chained, requests[i]);
  }
  const engine::EngineStats on = ExpectChained(*plain, *chained, 100, "biased and penalized");
  EXPECT_LE(on.chain_overruled, 2) << "the device's edited draws disagree with the sampler's";
  // Together: each its text alone, unchained.
  std::vector<Output> alone;
  for (const engine::GenerationRequest& r : requests) alone.push_back(Generate(*plain, r));
  engine::EngineStats stats;
  const std::vector<Output> together = Together(requests, 4, 0, &stats);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(together[i].text, alone[i].text) << "request " << i;
  }
  std::printf("[gpu serve chain] together: chained %lld of %lld steps, %lld overruled\n",
              static_cast<long long>(stats.chained_steps), static_cast<long long>(stats.steps),
              static_cast<long long>(stats.chain_overruled));
  EXPECT_GT(stats.chained_steps, stats.steps / 2) << "the edited streams did not chain together";
}

// A constrained stream with bias and penalties chains too: the device draws from its edited
// unmasked row, and the judge takes the known tokens the grammar allows with their edits and
// the others at -inf (Service::JudgeConstrained). A JSON string (the demo model writes its verse
// into it) with frequency and presence penalties and a bias, greedy, top-k 40 and OpenAI's
// defaults: the unchained text and tokens, and the verse chains.
TEST_F(GpuServeChainTest, ConstrainedStreamsChainWithBiasAndPenalties) {
  auto text = grammar::JsonSchemaGrammar(nlohmann::ordered_json{{"type", "string"}});
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  const auto [plain, chained] = Services();
  int64_t tokens = 0;
  for (int kind = 0; kind < 3; ++kind) {
    SCOPED_TRACE("sampling " + std::to_string(kind));
    engine::GenerationRequest r = Sampled("ROMEO:", 60,
                                          kind == 0   ? 0.0f
                                          : kind == 1 ? 0.9f
                                                      : 1.0f,
                                          21 + kind);
    r.sampling.top_k = kind == 1 ? 40 : 0;
    r.sampling.top_p = 1.0f;
    r.sampling.min_p = 0.0f;
    r.sampling.frequency_penalty = 0.7f;
    r.sampling.presence_penalty = 0.3f;
    r.sampling.logit_bias = {{13, -2.0f}};
    r.grammar = *text;
    Output want;
    const Output got = ExpectSameOutput(*plain, *chained, r, &want);
    EXPECT_EQ(got.tokens, want.tokens);
    tokens += want.completion_tokens;
  }
  const engine::EngineStats on = SettledStats(*chained);
  std::printf(
      "[gpu serve chain] constrained, biased and penalized: %lld of %lld tokens chained, "
      "%lld overruled, %lld rows whole\n",
      static_cast<long long>(on.chained_steps), static_cast<long long>(tokens),
      static_cast<long long>(on.chain_overruled), static_cast<long long>(on.rows_fetched));
  EXPECT_GE(on.chained_steps * 5, tokens) << "the strings' verse did not chain";
  EXPECT_EQ(SettledStats(*plain).chained_steps, 0);
}

// Not a plain arg-max or draw (a top-k above the device's 64 best), asking for logprobs with
// penalties (a chained row lists the window's tokens in another order), or constrained with
// logprobs: never chained.
TEST_F(GpuServeChainTest, OtherRequestsDoNotChain) {
  auto chained = MakeService(true);
  engine::GenerationRequest wide_top_k = Greedy("ROMEO:", 12);
  wide_top_k.sampling.temperature = 1.0f;
  wide_top_k.sampling.top_k = 100;
  wide_top_k.sampling.seed = 7;
  engine::GenerationRequest penalty_logprobs = Greedy("ROMEO:", 12);
  penalty_logprobs.sampling.repeat_penalty = 1.3f;
  penalty_logprobs.top_logprobs = 1;
  // Constrained, asking for logprobs (a constrained row's come from the whole row).
  engine::GenerationRequest json_logprobs = Greedy("ROMEO:", 12);
  json_logprobs.grammar = grammar::JsonObjectGrammar();
  json_logprobs.top_logprobs = 1;
  for (engine::GenerationRequest r : {wide_top_k, penalty_logprobs, json_logprobs}) {
    const bool constrained = r.grammar != nullptr;
    const Output out = Generate(*chained, std::move(r));
    if (constrained) {
      EXPECT_GT(out.completion_tokens, 1);  // (the object may close before 12)
    } else {
      EXPECT_EQ(out.completion_tokens, 12);
    }
  }
  EXPECT_EQ(SettledStats(*chained).chained_steps, 0);
}

// A second request arriving while the first chains stops the chain (the two then share steps)
// and a cancellation ends it: each text is the one it gets alone, unchained. B is submitted from
// the engine's own step hook at its second step (A's first chain, about to start), so it is
// queued while that chain runs, on any machine: the chain stops after one token, B's prompt
// runs beside A's next token, the two chain together and A chains alone once B is done. So
// every step gives A a token (60 steps); had B waited for A's chain to end, 80.
TEST_F(GpuServeChainTest, ArrivalAndCancellationStopTheChain) {
  auto plain = MakeService(false);
  const engine::GenerationRequest a = Greedy("ROMEO:", 60), b = Greedy("JULIET:", 20);
  const Output want_a = Generate(*plain, a), want_b = Generate(*plain, b);
  ASSERT_EQ(want_a.completion_tokens, 60);
  ASSERT_EQ(want_b.completion_tokens, 20);

  engine::Service* service = nullptr;
  std::promise<std::shared_ptr<engine::RequestChannel>> sent_b;
  int hook_calls = 0;
  auto chained = MakeService(true, [&] {
    if (++hook_calls != 2) return;
    auto ch = service->Submit(b);
    UF_CHECK(ch.ok()) << ch.status().ToString();
    sent_b.set_value(*ch);
  });
  service = chained.get();
  auto ch_a = chained->Submit(a);
  ASSERT_TRUE(ch_a.ok());
  auto ch_b = sent_b.get_future();
  ASSERT_EQ(ch_b.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  const Output out_b = Collect(*ch_b.get());
  const Output out_a = Collect(**ch_a);
  EXPECT_EQ(out_a.text, want_a.text);
  EXPECT_EQ(out_a.completion_tokens, want_a.completion_tokens);
  EXPECT_EQ(out_b.text, want_b.text);
  const engine::EngineStats st = SettledStats(*chained);
  std::printf("[gpu serve chain] A %lld tokens, B %lld: %lld of %lld steps chained\n",
              static_cast<long long>(want_a.completion_tokens),
              static_cast<long long>(want_b.completion_tokens),
              static_cast<long long>(st.chained_steps), static_cast<long long>(st.steps));
  EXPECT_GT(st.chained_steps, 0) << "A did not chain";
  EXPECT_LE(st.steps, want_a.completion_tokens + 2) << "A's chain did not stop for B";

  // Cancelled after its first chained tokens: the final event says so and the blocks are free.
  auto ch_c = chained->Submit(Greedy("ROMEO:", 80));
  ASSERT_TRUE(ch_c.ok());
  std::vector<engine::GenerationEvent> events;
  int64_t got = 0;
  while (got < 4) {
    ASSERT_TRUE((*ch_c)->Pop(&events, 60.0));
    for (const auto& e : events) got += e.n_tokens;
  }
  (*ch_c)->Cancel();
  FinishReason finish = FinishReason::kNone;
  while (finish == FinishReason::kNone) {
    ASSERT_TRUE((*ch_c)->Pop(&events, 60.0));
    for (const auto& e : events) finish = e.finish != FinishReason::kNone ? e.finish : finish;
  }
  EXPECT_TRUE(finish == FinishReason::kCancelled || finish == FinishReason::kLength);
  EXPECT_EQ(SettledStats(*chained).kv_blocks_used, 0);
}

// Streams decoding together chain as a batch (ServiceOptions::chain_steps; a row each, every
// row judged by its stream's sampler): a greedy stream with ignore_eos (its bans masked on the
// device), a top-k stream that a stop string ends mid-chain (the others take the step queued
// behind) and a stream at OpenAI's defaults asking for logprobs each give the text, finish,
// count and logprobs they get alone, unchained. B and C are submitted from the engine's step
// hook at its first step (A's prompt), so all three decode together from the third step on, on
// any machine: nearly all of A's and C's 40 steps chain (a service that chained lone streams
// only would chain none, all three ending within a step of each other).
TEST_F(GpuServeChainTest, StreamsTogetherChainAsABatch) {
  auto plain = MakeService(false, nullptr, 3);
  engine::GenerationRequest a = Greedy("ROMEO:", 40);
  a.ignore_eos = true;
  engine::GenerationRequest b = Sampled("JULIET:", 40, 0.8f, 9);
  b.sampling.top_k = 40;
  engine::GenerationRequest c = Sampled("ROMEO:", 40, 1.0f, 13);
  c.top_logprobs = 2;
  const Output b_whole = Generate(*plain, b);
  ASSERT_GT(b_whole.text.size(), 30u) << b_whole.text;
  b.stop = {b_whole.text.substr(16, 5)};  // met mid-stream
  const std::vector<engine::GenerationRequest> requests = {a, b, c};
  std::vector<Output> want;
  for (const engine::GenerationRequest& r : requests) want.push_back(Generate(*plain, r));
  EXPECT_EQ(want[1].finish, FinishReason::kStop);

  engine::EngineStats st;
  const std::vector<Output> got = Together(requests, 3, 0, &st);
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(got[i].text, want[i].text);
    EXPECT_EQ(got[i].finish, want[i].finish);
    EXPECT_EQ(got[i].completion_tokens, want[i].completion_tokens);
    EXPECT_EQ(got[i].tokens, want[i].tokens);
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size());
    for (size_t j = 0; j < want[i].logprobs.size(); ++j) {
      EXPECT_EQ(got[i].logprobs[j], want[i].logprobs[j]) << "token " << j;
    }
  }
  std::printf(
      "[gpu serve chain] 3 streams: %lld of %lld steps chained, %lld overruled, %lld rows whole\n",
      static_cast<long long>(st.chained_steps), static_cast<long long>(st.steps),
      static_cast<long long>(st.chain_overruled), static_cast<long long>(st.rows_fetched));
  EXPECT_GE(st.chained_steps, 30) << "the streams did not chain together";
  EXPECT_LE(st.chain_overruled, 2) << "the device's draws disagree with the samplers'";
  EXPECT_EQ(st.kv_blocks_used, 0) << "a chained sequence kept its blocks";
}

// Constrained streams (a JSON string, an object schema, JSON mode, an enum) chain too: the device
// draws from the unmasked row, and the host takes the grammar's token from that row's best tokens
// that the mask allows (Service::JudgeConstrained), fetching the row whole where those are too few.
// Where the grammar forbids the device's token the host overrules it (a lone stream's chain ends
// there, a batch's stream redoes its step), and a stream overruled more than 1 in 32 times waits
// some plain steps before it chains again. The demo model never saw JSON: it fights an object's
// grammar at nearly every token (most rows would come back whole), but once a string opens it
// writes its verse into it. Greedy, top-k 40 (T 0.9) and OpenAI's defaults (T 1, nothing
// filtered: Sampler::SampleReducedMasked), alone and as a batch of three (with an
// unconstrained stream): each text, finish and count is the unchained service's, the
// schema's replies are objects of it, strings chain, and objects mostly wait.
TEST_F(GpuServeChainTest, ConstrainedStreamsChainWithTheirMasks) {
  auto person = grammar::JsonSchemaGrammar(testing_gpu::PersonSchema());
  ASSERT_TRUE(person.ok()) << person.status().ToString();
  auto text = grammar::JsonSchemaGrammar(nlohmann::ordered_json{{"type", "string"}});
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto city = grammar::JsonSchemaGrammar(
      nlohmann::ordered_json{{"enum", {"Verona", "Mantua", "Padua", "Rome", "Milan"}}});
  ASSERT_TRUE(city.ok()) << city.status().ToString();
  const std::vector<std::shared_ptr<const grammar::Grammar>> grammars = {
      *text, *person, grammar::JsonObjectGrammar(), *city};
  // kind 0: greedy; 1: top-k 40 at T 0.9; 2: OpenAI's defaults (T 1, nothing filtered).
  const auto request = [&](int g, int kind, uint64_t seed) {
    engine::GenerationRequest r = Sampled(g == 2 ? "First Citizen:" : "ROMEO:", 60,
                                          kind == 0   ? 0.0f
                                          : kind == 1 ? 0.9f
                                                      : 1.0f,
                                          seed);
    r.sampling.top_k = kind == 1 ? 40 : 0;
    r.sampling.top_p = 1.0f;
    r.sampling.min_p = 0.0f;
    r.grammar = grammars[g];
    return r;
  };
  const auto [plain, chained] = Services();
  engine::EngineStats before{};
  for (int g = 0; g < 4; ++g) {
    int64_t tokens = 0;
    for (int kind = 0; kind < 3; ++kind) {
      SCOPED_TRACE("grammar " + std::to_string(g) + " sampling " + std::to_string(kind));
      Output want;
      const Output got = ExpectSameOutput(*plain, *chained, request(g, kind, 40 + g), &want);
      EXPECT_EQ(got.tokens, want.tokens);
      tokens += want.completion_tokens;
      nlohmann::json v;
      if (g == 1) {
        ASSERT_NO_THROW(v = nlohmann::json::parse(got.text)) << got.text;
        EXPECT_TRUE(v.contains("name") && v.contains("age") && v.contains("city")) << got.text;
      }
    }
    const engine::EngineStats st = SettledStats(*chained);
    const int64_t steps = st.chained_steps - before.chained_steps;
    const int64_t whole = st.rows_fetched - before.rows_fetched;
    std::printf(
        "[gpu serve chain] grammar %d: %lld of %lld tokens chained, %lld overruled, %lld "
        "rows whole\n",
        g, static_cast<long long>(steps), static_cast<long long>(tokens),
        static_cast<long long>(st.chain_overruled - before.chain_overruled),
        static_cast<long long>(whole));
    if (g == 0) {
      EXPECT_GE(steps * 5, tokens) << "the strings' verse did not chain";
    } else {
      // Without the wait, most rows came back whole.
      EXPECT_LE(whole * 4, tokens) << "the streams that fight the grammar kept chaining";
    }
    before = st;
  }
  EXPECT_EQ(SettledStats(*plain).chained_steps, 0);

  // Three streams together (two constrained strings, greedy and top-p 0.9 without top-k; one
  // unconstrained), B and C submitted at A's first step.
  auto plain3 = MakeService(false, nullptr, 3);
  engine::GenerationRequest c = Sampled("JULIET:", 40, 0.8f, 9);
  c.sampling.top_k = 40;
  engine::GenerationRequest top_p = request(0, 2, 2);  // no top-k: the masked nucleus
  top_p.sampling.top_p = 0.9f;
  const std::vector<engine::GenerationRequest> batch = {request(0, 0, 1), top_p, c};
  std::vector<Output> alone;
  for (const engine::GenerationRequest& r : batch) alone.push_back(Generate(*plain3, r));
  engine::EngineStats st;
  const std::vector<Output> got = Together(batch, 3, 0, &st);
  for (size_t i = 0; i < batch.size(); ++i) {
    SCOPED_TRACE("batched request " + std::to_string(i));
    EXPECT_EQ(got[i].tokens, alone[i].tokens);
    EXPECT_EQ(got[i].text, alone[i].text);
    EXPECT_EQ(got[i].finish, alone[i].finish);
  }
  std::printf(
      "[gpu serve chain] 2 constrained streams and 1 not: %lld of %lld steps chained, %lld "
      "overruled, %lld rows whole\n",
      static_cast<long long>(st.chained_steps), static_cast<long long>(st.steps),
      static_cast<long long>(st.chain_overruled), static_cast<long long>(st.rows_fetched));
  // (A stream whose grammar starts its wait ends the batch's chain: the others go on plainly.)
  EXPECT_GE(st.chained_steps * 5, st.steps) << "the streams did not chain together";
  EXPECT_EQ(st.kv_blocks_used, 0) << "a chained sequence kept its blocks";
}

// A batch chain reserves every stream's blocks for its steps up front (Service::ChainBatch);
// where the free blocks would not hold 32 more positions of every stream, the chain is cut to
// what they hold instead of failing to start. Two streams of 48 tokens (ignore_eos) in a pool
// of 6 blocks of 16, which their 3 blocks each fill to the last: the same tokens as unchained,
// and nearly all steps chained (a stream inside its last block needs no new one; a cap of
// (free / streams - 1) blocks a stream chained only the first 16 steps). Where the pool holds
// every stream's whole request, as here, a chain of 32 steps would fit too (the chain never
// passes a stream's max_tokens); the cut matters where the pool is short and the scheduler
// preempts, and there a chain that cannot reserve its blocks runs as a plain step instead.
TEST_F(GpuServeChainTest, BatchChainsFollowTheFreeBlocks) {
  constexpr int64_t kPool = 6 * 16;
  auto plain = MakeService(false, nullptr, 2, kPool);
  engine::GenerationRequest a = Greedy("ROMEO:", 40);
  a.ignore_eos = true;
  engine::GenerationRequest b = Sampled("JULIET:", 40, 0.8f, 9);
  b.sampling.top_k = 40;
  b.ignore_eos = true;
  const std::vector<engine::GenerationRequest> requests = {a, b};
  for (const engine::GenerationRequest& r : requests) {
    ASSERT_LE(static_cast<int64_t>(r.prompt.size()) + r.max_tokens, 48) << "3 blocks each";
  }
  std::vector<Output> want;
  for (const engine::GenerationRequest& r : requests) want.push_back(Generate(*plain, r));
  engine::EngineStats st;
  const std::vector<Output> got = Together(requests, 2, kPool, &st);
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(got[i].text, want[i].text);
    EXPECT_EQ(got[i].completion_tokens, 40);
    EXPECT_EQ(want[i].completion_tokens, 40);
    EXPECT_EQ(got[i].finish, FinishReason::kLength);
  }
  std::printf("[gpu serve chain] a pool of 6 blocks: %lld of %lld steps chained, %lld preempted\n",
              static_cast<long long>(st.chained_steps), static_cast<long long>(st.steps),
              static_cast<long long>(st.preemptions));
  EXPECT_GE(st.chained_steps, 30) << "the tight pool stopped the streams chaining";
  EXPECT_EQ(st.kv_blocks_used, 0) << "a chained sequence kept its blocks";
}

}  // namespace
}  // namespace uf
