// The serving engine with a tiny real model: continuous batching must not change what a sequence
// generates (greedy outputs of a request are the same alone, batched, chunk-prefilled or
// preempted and recomputed), cancellation frees KV blocks, and a full queue is refused.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <set>
#include <thread>

#include "alloc_counter.h"
#include "base/clock.h"
#include "engine/seq_sampler.h"
#include "engine/service.h"
#include "engine/stop_matcher.h"
#include "service_test_util.h"
#include "shared_data.h"
#include "test_models.h"

namespace uf::engine {
namespace {

using testing_models::Loaded;
using testing_service::Collect;
using testing_service::Output;
using testing_service::SettledStats;
using testing_service::StepGate;

Loaded& Tiny() { return testing_models::TinyQwen2(); }

GenerationRequest Greedy(const std::string& prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = Tiny().tokenizer->Encode(prompt, true, false);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;  // fixed lengths: random weights may emit EOS anywhere
  r.top_logprobs = 0;   // token ids come back through the logprobs
  return r;
}

std::unique_ptr<Service> MakeService(ServiceOptions o) {
  o.n_threads = 2;
  auto s = Service::Create(*Tiny().model, *Tiny().tokenizer, o);
  UF_CHECK(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

const std::vector<std::string>& Prompts() {
  static const std::vector<std::string> p = {
      "Once upon a time",
      "The quick brown fox jumps over the lazy dog because it",
      "In 1492, Columbus sailed the ocean blue. Then",
      "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
      "A",
      "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
      "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
      "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.",
  };
  return p;
}

std::vector<Output> RunAlone(int64_t max_tokens) {
  ServiceOptions o;
  o.max_seqs = 1;
  o.ctx = 512;
  auto s = MakeService(o);
  std::vector<Output> out;
  for (const std::string& p : Prompts()) {
    auto ch = s->Submit(Greedy(p, max_tokens));
    EXPECT_TRUE(ch.ok());
    out.push_back(Collect(**ch));
  }
  return out;
}

std::vector<Output> RunTogether(ServiceOptions o, int64_t max_tokens) {
  // The first step waits until every request is queued, so they really share steps however
  // loaded the machine.
  StepGate gate;
  o.step_hook = gate.Hook();
  auto s = MakeService(o);
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (const std::string& p : Prompts()) {
    auto ch = s->Submit(Greedy(p, max_tokens));
    EXPECT_TRUE(ch.ok()) << ch.status().ToString();
    chans.push_back(*ch);
  }
  gate.Open();
  std::vector<Output> out;
  for (auto& ch : chans) out.push_back(Collect(*ch));
  const EngineStats st = SettledStats(*s);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_blocks_used, 0) << "finished sequences must give their blocks back";
  return out;
}

void ExpectSame(const std::vector<Output>& a, const std::vector<Output>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "prompt " << i;
    EXPECT_EQ(a[i].text, b[i].text) << "prompt " << i;
    EXPECT_EQ(a[i].finish, b[i].finish);
  }
}

// Greedy decoding is exact: batching must give bit-identical logits per sequence (the decoder
// computes each sequence's rows independently), so token sequences must match exactly.
TEST(ServiceTest, GreedyOutputsSameAloneAndBatched) {
  UF_REQUIRE_SHARED();
  const std::vector<Output> alone = RunAlone(24);
  std::set<int32_t> distinct;
  for (const Output& o : alone) {
    EXPECT_EQ(o.tokens.size(), 24u);
    EXPECT_EQ(o.completion_tokens, 24);
    EXPECT_EQ(o.finish, FinishReason::kLength);
    distinct.insert(o.tokens.begin(), o.tokens.end());
  }
  // The comparison below means something only if the outputs do (not one repeated token).
  EXPECT_GT(distinct.size(), 10u);
  ServiceOptions o;
  o.max_seqs = 8;
  o.ctx = 512;
  ExpectSame(alone, RunTogether(o, 24));
}

TEST(ServiceTest, ChunkedPrefillGivesSameOutputs) {
  UF_REQUIRE_SHARED();
  const std::vector<Output> alone = RunAlone(16);
  ServiceOptions o;
  o.max_seqs = 4;  // more prompts than slots: some wait, then join mid-flight
  o.ctx = 512;
  o.prefill_chunk = 7;  // prompts are split over several steps, next to running decodes
  ExpectSame(alone, RunTogether(o, 16));
}

TEST(ServiceTest, PreemptionRecomputesAndGivesSameOutputs) {
  UF_REQUIRE_SHARED();
  const std::vector<Output> alone = RunAlone(40);
  ServiceOptions o;
  o.max_seqs = 6;
  o.ctx = 128;
  o.kv_tokens = 128;  // the pool holds one context: sequences must be preempted
  o.block_size = 8;
  StepGate gate;  // every request queued before the first step: they must compete for the pool
  o.step_hook = gate.Hook();
  auto s = MakeService(o);
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (const std::string& p : Prompts()) chans.push_back(*s->Submit(Greedy(p, 40)));
  gate.Open();
  std::vector<Output> out;
  for (auto& ch : chans) out.push_back(Collect(*ch));
  ExpectSame(alone, out);
  EXPECT_GT(s->Stats().preemptions, 0);
  EXPECT_EQ(SettledStats(*s).kv_blocks_used, 0);
}

TEST(ServiceTest, CancelFreesBlocks) {
  UF_REQUIRE_SHARED();
  ServiceOptions o;
  o.max_seqs = 2;
  o.ctx = 2048;
  o.step_hook = [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  auto s = MakeService(o);
  auto ch = *s->Submit(Greedy("Tell me a very long story", 2000));
  std::vector<GenerationEvent> events;
  ASSERT_TRUE(ch->Pop(&events, 30.0));
  // Stats are published at step boundaries, so kv_blocks_used right after the first token can
  // still read 0; the check that matters is that cancelling returns every block.
  ch->Cancel();
  const EngineStats st = SettledStats(*s);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
}

TEST(ServiceTest, FullQueueIsRefused) {
  UF_REQUIRE_SHARED();
  ServiceOptions o;
  o.max_seqs = 1;
  o.max_queue = 1;
  o.ctx = 256;
  // The first step admits "one"; the second waits until the queue has been checked, so "one"
  // still holds the only slot then, however fast the model or loaded the machine.
  StepGate gate(/*hold_at=*/2);
  o.step_hook = gate.Hook();
  auto s = MakeService(o);
  auto a = s->Submit(Greedy("one", 200));
  ASSERT_TRUE(a.ok());
  for (int i = 0; i < 30000 && s->Stats().running == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(s->Stats().running, 1);
  auto b = s->Submit(Greedy("two", 200));  // waits: one slot, one queue place
  auto c = s->Submit(Greedy("three", 200));
  gate.Open();
  ASSERT_TRUE(b.ok());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  (*a)->Cancel();
  (*b)->Cancel();
}

TEST(ServiceTest, RejectsPromptsThatDoNotFit) {
  UF_REQUIRE_SHARED();
  ServiceOptions o;
  o.max_seqs = 1;
  o.ctx = 16;
  auto s = MakeService(o);
  GenerationRequest r;
  EXPECT_EQ(s->Submit(r).status().code(), StatusCode::kInvalidArgument);
  r.prompt.assign(16, 100);
  EXPECT_EQ(s->Submit(r).status().code(), StatusCode::kOutOfRange);
  r.prompt.assign(4, -1);
  EXPECT_EQ(s->Submit(r).status().code(), StatusCode::kInvalidArgument);
  // max_tokens is clamped to the room left: 15 prompt tokens leave one.
  r.prompt.assign(15, 100);
  r.max_tokens = 100;
  r.ignore_eos = true;
  Output out = Collect(**s->Submit(r));
  EXPECT_EQ(out.completion_tokens, 1);
  EXPECT_EQ(out.finish, FinishReason::kLength);
}

TEST(ServiceTest, ShutdownEndsOpenRequests) {
  UF_REQUIRE_SHARED();
  ServiceOptions o;
  o.max_seqs = 1;
  o.ctx = 4096;
  o.step_hook = [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); };
  auto s = MakeService(o);
  auto a = *s->Submit(Greedy("one", 4000));
  auto b = *s->Submit(Greedy("two", 4000));
  s->Shutdown();
  for (auto& ch : {a, b}) {
    std::vector<GenerationEvent> events;
    bool finished = false;
    while (!finished && ch->Pop(&events, 10.0)) {
      for (auto& e : events) finished |= e.finish == FinishReason::kError;
    }
    EXPECT_TRUE(finished);
  }
  EXPECT_EQ(s->Submit(Greedy("three", 4)).status().code(), StatusCode::kUnavailable);
}

TEST(ServiceTest, SeededSamplingIsReproducible) {
  UF_REQUIRE_SHARED();
  ServiceOptions o;
  o.max_seqs = 4;
  o.ctx = 256;
  auto s = MakeService(o);
  auto req = [](uint64_t seed) {
    GenerationRequest r = Greedy("Sampling test", 20);
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = seed;
    return r;
  };
  auto a = s->Submit(req(7));
  auto b = s->Submit(req(7));
  auto c = s->Submit(req(8));
  const Output oa = Collect(**a), ob = Collect(**b), oc = Collect(**c);
  EXPECT_EQ(oa.tokens, ob.tokens);
  EXPECT_NE(oa.tokens, oc.tokens);  // 20 draws from ~50k tokens: equal only by astronomic chance
}

// Prompts sharing a long prefix: the second request maps the first one's full blocks and must
// generate exactly what it generates without the cache.
TEST(ServiceTest, PrefixCacheReusesBlocksWithSameOutputs) {
  UF_REQUIRE_SHARED();
  std::string base;
  for (int i = 0; i < 40; ++i) base += "word" + std::to_string(i) + " ";
  const std::vector<std::string> prompts = {base + "alpha", base + "alpha", base + "beta gamma"};
  std::vector<Output> fresh, cached;
  for (bool use_cache : {false, true}) {
    ServiceOptions o;
    o.max_seqs = 2;
    o.ctx = 512;
    o.block_size = 16;
    o.prefix_cache = use_cache;
    auto s = MakeService(o);
    for (const std::string& p : prompts) {
      Output out = Collect(**s->Submit(Greedy(p, 12)));
      (use_cache ? cached : fresh).push_back(out);
    }
    const EngineStats st = SettledStats(*s);
    if (use_cache) {
      EXPECT_GT(st.prefix_hit_tokens, 0);
      EXPECT_GT(st.kv_blocks_cached, 0);
    } else {
      EXPECT_EQ(st.prefix_hit_tokens, 0);
      EXPECT_EQ(st.kv_blocks_cached, 0);
    }
  }
  ExpectSame(fresh, cached);
  const int64_t n = static_cast<int64_t>(Greedy(prompts[0], 1).prompt.size());
  EXPECT_EQ(cached[0].cached_tokens, 0);
  EXPECT_EQ(cached[1].cached_tokens, (n - 1) / 16 * 16);  // all full blocks but the last token's
  EXPECT_GT(cached[2].cached_tokens, 0);
  EXPECT_LT(cached[2].cached_tokens, n);
}

KvCacheOptions SmallCache(int64_t n_blocks) {
  KvCacheOptions o;
  o.n_layer = 1;
  o.n_head_kv = 1;
  o.head_dim = 4;
  o.block_size = 4;
  o.n_blocks = n_blocks;
  o.max_seqs = 3;
  return o;
}

TEST(KvCachePrefixTest, AttachSharesAndLruEvicts) {
  auto c = std::move(KvCache::Create(SmallCache(6))).value();
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  ASSERT_TRUE(c->Reserve(0, 10).ok());
  c->SetLength(0, 10);
  c->PublishPrefix(0, t.data(), 10);  // two full blocks published, the third is partial
  EXPECT_EQ(c->AttachPrefix(1, t.data(), 9), 8);
  EXPECT_EQ(c->BlockTable(1)[0], c->BlockTable(0)[0]);
  EXPECT_EQ(c->BlockTable(1)[1], c->BlockTable(0)[1]);
  EXPECT_EQ(c->free_blocks(), 3);
  // A different second block shares only the first.
  const std::vector<int32_t> u = {1, 2, 3, 4, 5, 6, 7, 0, 9};
  EXPECT_EQ(c->AttachPrefix(2, u.data(), 8), 4);
  c->Remove(2);
  c->Remove(0);
  c->Remove(1);
  EXPECT_EQ(c->cached_blocks(), 2);
  EXPECT_EQ(c->free_blocks(), 6);
  // Still cached after everyone left.
  EXPECT_EQ(c->AttachPrefix(0, t.data(), 8), 8);
  c->Remove(0);
  // Needing every block reclaims the cached ones; then nothing matches any more.
  ASSERT_TRUE(c->Reserve(1, 24).ok());
  EXPECT_EQ(c->cached_blocks(), 0);
  c->Remove(1);
  EXPECT_EQ(c->AttachPrefix(0, t.data(), 8), 0);
}

TEST(KvCachePrefixTest, CollisionsAreVerified) {
  auto c = std::move(KvCache::Create(SmallCache(4))).value();
  const std::vector<int32_t> t = {1, 2, 3, 4};
  ASSERT_TRUE(c->Reserve(0, 4).ok());
  c->SetLength(0, 4);
  c->PublishPrefix(0, t.data(), 4);
  const std::vector<int32_t> v = {1, 2, 3, 5};
  EXPECT_EQ(c->AttachPrefix(1, v.data(), 4), 0);
  EXPECT_EQ(c->AttachPrefix(2, t.data(), 4), 4);
}

TEST(StopMatcherTest, HoldsBackPartialMatches) {
  StopMatcher m({"END", "xyz"});
  EXPECT_EQ(m.Push("hello E"), "hello ");
  EXPECT_EQ(m.Push("N"), "");
  EXPECT_EQ(m.Push("x"), "EN");  // "ENx" cannot become "END", but "x" may start "xyz"
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Push("y"), "");
  EXPECT_EQ(m.Push("z!"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, StopsAndDropsTheStopString) {
  StopMatcher m({"</s>"});
  EXPECT_EQ(m.Push("abc</"), "abc");
  EXPECT_EQ(m.Push("s>def"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Push("more"), "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, NamesTheStopStringThatMatchedFirst) {
  StopMatcher m({"cd", "b"});  // "b" comes first in the text, though listed second
  EXPECT_EQ(m.Push("abcd"), "a");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "b");
  StopMatcher none({"zz"});
  EXPECT_EQ(none.Push("abc"), "abc");
  EXPECT_EQ(none.matched(), "");
}

TEST(StopMatcherTest, FlushReleasesHeldText) {
  StopMatcher m({"stop"});
  EXPECT_EQ(m.Push("a st"), "a ");
  EXPECT_EQ(m.Flush(), "st");
  StopMatcher none({});
  EXPECT_EQ(none.Push("anything"), "anything");
}

TEST(StopMatcherTest, EarliestStopWins) {
  StopMatcher m({"cd", "b"});
  EXPECT_EQ(m.Push("abcd"), "a");
  EXPECT_TRUE(m.stopped());
}

TEST(SequenceSamplerTest, LogprobsAreNormalised) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  const TokenLogprob lp = SequenceSampler::Logprobs(logits.data(), 4, 2, 3);
  // log softmax by hand: z = e^1 + 2e^3 + e^2.
  const double z = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0);
  EXPECT_NEAR(lp.logprob, 2.0 - std::log(z), 1e-5);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);  // ties by id
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_NEAR(lp.top[0].second, 3.0 - std::log(z), 1e-5);
}

TEST(SequenceSamplerTest, GreedyBiasAndBans) {
  RequestSampling p;
  p.temperature = 0.0f;
  p.logit_bias = {{0, 5.0f}};
  SequenceSampler s(p, 4, 16, {});
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  EXPECT_EQ(s.Sample(logits.data()), 0);  // 1 + 5 beats 3
  SequenceSampler banned(p, 4, 16, {0});
  EXPECT_EQ(banned.Sample(logits.data()), 1);  // banned
  RequestSampling q;
  q.temperature = 0.0f;
  q.presence_penalty = 2.0f;
  SequenceSampler t(q, 4, 16, {});
  t.Accept(1);
  EXPECT_EQ(t.Sample(logits.data()), 2);  // 3 - 2 < 2
}

// The reader of a stream is woken for its first event, then at most once per interval (held-back
// events go out with the next wake or the engine's flush), and always for the final event; a
// non-streamed reader only for the final one. Counted, not timed.
TEST(RequestChannelTest, WakeUpsAreCoalesced) {
  GenerationEvent token;
  token.n_tokens = 1;
  GenerationEvent last;
  last.finish = FinishReason::kStop;
  std::vector<GenerationEvent> got;

  RequestChannel stream;
  stream.SetMinWakeInterval(3600.0);  // nothing is due within the test
  stream.Push(token);
  EXPECT_EQ(stream.wakeups(), 1);  // the first token goes out at once
  for (int i = 0; i < 50; ++i) stream.Push(token);
  EXPECT_EQ(stream.wakeups(), 1);
  stream.FlushIfDue(NowSeconds());  // not due yet
  EXPECT_EQ(stream.wakeups(), 1);
  stream.FlushIfDue(NowSeconds(), /*force=*/true);  // the engine going idle
  EXPECT_EQ(stream.wakeups(), 2);
  stream.FlushIfDue(NowSeconds(), /*force=*/true);  // nothing held back: no wake
  EXPECT_EQ(stream.wakeups(), 2);
  stream.Push(token);
  stream.Push(last);
  EXPECT_EQ(stream.wakeups(), 3);  // the final event at once
  ASSERT_TRUE(stream.Pop(&got, 0.0));
  EXPECT_EQ(got.size(), 53u);  // nothing was lost

  RequestChannel whole;
  whole.WakeOnFinalOnly();
  for (int i = 0; i < 100; ++i) whole.Push(token);
  whole.FlushIfDue(NowSeconds(), /*force=*/true);
  EXPECT_EQ(whole.wakeups(), 0);
  whole.Push(last);
  EXPECT_EQ(whole.wakeups(), 1);

  RequestChannel plain;  // default: every event wakes
  for (int i = 0; i < 10; ++i) plain.Push(token);
  EXPECT_EQ(plain.wakeups(), 10);
}

// Per generated token, the serving engine allocates a few small objects (the event, its text),
// never anything the size of the vocabulary (50k here): measured as the difference between a long
// and a short request with the same settings, so one-time buffers cancel out.
TEST(ServiceWorkTest, PerTokenAllocationsDoNotScaleWithTheVocabulary) {
  UF_REQUIRE_SHARED();
  if (!kCountsAllocations) GTEST_SKIP() << "allocations are not counted under AddressSanitizer";
  ServiceOptions o;
  o.max_seqs = 1;
  o.prefix_cache = false;
  auto service = MakeService(o);
  ASSERT_GT(Tiny().model->config().n_vocab, 50000);
  struct Setting {
    float temperature, top_p;
    int32_t top_k;
    bool edits;
  } settings[] = {{1.0f, 1.0f, 0, false},
                  {0.8f, 0.9f, 0, false},
                  {1.0f, 0.95f, 40, false},
                  {1.0f, 1.0f, 0, true},
                  {0.0f, 1.0f, 0, false}};
  for (const Setting& st : settings) {
    auto run = [&](int64_t n) {
      GenerationRequest r = Greedy("Allocation counting", n);
      r.top_logprobs = -1;
      r.sampling.temperature = st.temperature;
      r.sampling.top_p = st.top_p;
      r.sampling.top_k = st.top_k;
      r.sampling.seed = 3;
      if (st.edits) {
        r.sampling.presence_penalty = 0.5f;
        r.sampling.logit_bias = {{42, 1.0f}};
      }
      const int64_t before = uf::testing_alloc::bytes.load();
      auto ch = service->Submit(std::move(r));
      EXPECT_TRUE(ch.ok());
      if (!ch.ok()) return int64_t{0};
      EXPECT_EQ(Collect(**ch).completion_tokens, n);
      return uf::testing_alloc::bytes.load() - before;
    };
    run(8);  // warm: the engine's first-request buffers
    const int64_t short_bytes = run(16), long_bytes = run(80);
    const double per_token = static_cast<double>(long_bytes - short_bytes) / 64.0;
    // A row of logits is 200 KB here; events and their text take well under 4 KB per token.
    EXPECT_LT(per_token, 4096.0) << "temperature " << st.temperature << " top_p " << st.top_p
                                 << " top_k " << st.top_k << " edits " << st.edits;
  }
}

}  // namespace
}  // namespace uf::engine
