// The serving engine's greedy chain on a Vulkan device (ServiceOptions::chain_greedy): a lone
// plain-greedy stream decodes with each step's token fed to the next on the device. The text,
// the finish and the counts must be those of the same service with chaining off, whatever ends
// the request (max_tokens, a stop string, a full context); another request's arrival or a
// cancellation stops the chain; requests that are not plain arg-max never chain. Runs on Mesa's
// lavapipe in CI; skips, saying why, where no Vulkan device exists.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "engine/request.h"
#include "engine/service.h"
#include "gpu/backend.h"
#include "gpu_service_util.h"
#include "service_test_util.h"
#include "test_models.h"

namespace uf {
namespace {

using engine::FinishReason;
using engine::testing_service::Collect;
using engine::testing_service::Output;
using engine::testing_service::SettledStats;

std::unique_ptr<engine::Service> MakeService(bool chain,
                                             std::function<void()> step_hook = nullptr) {
  const testing_models::Loaded& demo = testing_models::DemoModel();
  engine::ServiceOptions o;
  o.max_seqs = 2;
  o.ctx = 96;
  o.n_threads = 2;
  o.chain_greedy = chain;
  o.step_hook = std::move(step_hook);
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

Output Generate(engine::Service& s, engine::GenerationRequest r) {
  auto ch = s.Submit(std::move(r));
  UF_CHECK(ch.ok()) << ch.status().ToString();
  return Collect(**ch);
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
  auto plain = MakeService(false);
  auto chained = MakeService(true);
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
    const Output want = Generate(*plain, r);
    const Output got = Generate(*chained, r);
    EXPECT_EQ(got.text, want.text);
    EXPECT_EQ(got.finish, want.finish);
    EXPECT_EQ(got.completion_tokens, want.completion_tokens);
    if (!r.stop.empty()) {
      EXPECT_EQ(want.finish, FinishReason::kStop);
    }
    if (r.max_tokens == 1000) {
      EXPECT_EQ(want.finish, FinishReason::kLength);  // the context
    }
  }
  const engine::EngineStats on = SettledStats(*chained), off = SettledStats(*plain);
  std::printf("[gpu serve chain] chained %lld of %lld steps (unchained service: %lld steps)\n",
              static_cast<long long>(on.chained_steps), static_cast<long long>(on.steps),
              static_cast<long long>(off.steps));
  EXPECT_EQ(off.chained_steps, 0);
  EXPECT_GT(on.chained_steps, 80) << "the lone greedy streams did not chain";
  EXPECT_LE(on.chained_steps, on.steps);
  EXPECT_EQ(on.kv_blocks_used, 0) << "a chained sequence kept its blocks";
}

// Not an arg-max of the row (a temperature, a logit bias, a penalty) or asking for more than
// the token (logprobs): never chained.
TEST_F(GpuServeChainTest, OtherRequestsDoNotChain) {
  auto chained = MakeService(true);
  engine::GenerationRequest sampled = Greedy("ROMEO:", 12);
  sampled.sampling.temperature = 1.0f;
  sampled.sampling.seed = 7;
  engine::GenerationRequest logprobs = Greedy("ROMEO:", 12);
  logprobs.top_logprobs = 1;
  engine::GenerationRequest bias = Greedy("ROMEO:", 12);
  bias.sampling.logit_bias = {{13, -1.0f}};
  engine::GenerationRequest penalty = Greedy("ROMEO:", 12);
  penalty.sampling.repeat_penalty = 1.3f;
  for (engine::GenerationRequest r : {sampled, logprobs, bias, penalty}) {
    const Output out = Generate(*chained, std::move(r));
    EXPECT_EQ(out.completion_tokens, 12);
  }
  EXPECT_EQ(SettledStats(*chained).chained_steps, 0);
}

// A second request arriving while the first chains stops the chain (the two then share steps)
// and a cancellation ends it: each text is the one it gets alone, unchained. B is submitted from
// the engine's own step hook at its second step (A's first chain, about to start), so it is
// queued while that chain runs, on any machine: the chain stops after one token, A's steps
// beside B are not chained, and A chains again once B is done (1 + 38 of A's 60 tokens).
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
  EXPECT_GT(st.chained_steps, 0) << "A did not chain once B was done";
  EXPECT_LE(st.chained_steps, 1 + (60 - 1 - 21)) << "A's chain did not stop for B";

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

}  // namespace
}  // namespace uf
