// Chained decoding on a Vulkan device (GpuForward::ForwardGreedyChain, ForwardSampledChain): each
// step's arg-max, or its token drawn from the row's best tokens, fed to the next step on the
// device while the host queues the next step. The greedy chain's tokens must be those of one
// ForwardGreedy step at a time, bit for bit (the same recorded step plus the feed), wherever the
// chain stops, on any sequence, across K/V block boundaries and through the tuners' trials; the
// sampled chain's those of one sampled step at a time with the same seed; bad arguments are
// refused with the cache unchanged. Runs on Mesa's
// lavapipe in CI; skips, saying why, where no Vulkan device exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/status.h"
#include "engine/kv_cache.h"
#include "engine/seq_sampler.h"
#include "gpu/backend.h"
#include "gpu_chain_util.h"
#include "gpu_service_util.h"
#include "model/batch.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "shared_data.h"

namespace uf {
namespace {

using namespace testing_chain;  // NOLINT: the chain tests' helpers

// n greedy steps of seq from (token, pos), one ForwardGreedy a step: the n tokens after them.
std::vector<int32_t> OneAtATime(gpu::GpuForward& f, int seq, int32_t token, int32_t pos,
                                int64_t n) {
  std::vector<int32_t> out;
  model::Batch b;
  for (int64_t i = 0; i < n; ++i) {
    b.Clear();
    b.Add(token, pos + static_cast<int32_t>(i), seq, true);
    EXPECT_TRUE(f.ForwardGreedy(b, &token).ok());
    out.push_back(token);
  }
  return out;
}

// A chain taking at most `take` tokens (then stopping it): the tokens it gave.
std::vector<int32_t> Chain(gpu::GpuForward& f, int seq, int32_t token, int32_t pos, int64_t n,
                           int64_t take, int64_t* steps) {
  std::vector<int32_t> out;
  auto r = f.ForwardGreedyChain(seq, token, pos, n, [&](int32_t t) {
    out.push_back(t);
    return static_cast<int64_t>(out.size()) < take;
  });
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  *steps = r.ok() ? *r : -1;
  return out;
}

class GpuChainTest : public ChainModelTest {};

// 30 chained steps of sequence 1 (its block table, not sequence 0's, feeds the cache rows) give
// the 30 tokens of one step at a time on sequence 0, and leave the cache at the chain's end.
TEST_P(GpuChainTest, SameTokensAsOneStepAtATime) {
  const int64_t n = 30, ctx = 48;
  Device d = Make(*model_, 2, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  const std::vector<int32_t> want = OneAtATime(*d.fwd, 0, first, kP0, n);
  ASSERT_EQ(Prefill(*d.fwd, 1), first);
  int64_t steps = 0;
  EXPECT_EQ(Chain(*d.fwd, 1, first, kP0, n, n, &steps), want);
  EXPECT_EQ(steps, n);
  EXPECT_EQ(d.cache->Length(1), kP0 + n);
  // Rewound on sequence 0 too: the same again (the recordings are replayed).
  EXPECT_EQ(Chain(*d.fwd, 0, first, kP0, n, n, &steps), want);
  EXPECT_EQ(d.cache->Length(0), kP0 + n);
}

// Stopped by the caller after k tokens (k = 1, 2, 5: with one and two steps queued past it), the
// chain returns k and the sequence ends after the k-th step; what the dropped steps wrote past
// its end changes nothing: decoding on from there, chained or not, gives the same tokens.
TEST_P(GpuChainTest, StopsWhereTheCallerSays) {
  const int64_t n = 20, ctx = 40;
  Device d = Make(*model_, 1, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  const std::vector<int32_t> want = OneAtATime(*d.fwd, 0, first, kP0, n);
  for (int64_t k : {1, 2, 5}) {
    SCOPED_TRACE("stopped after " + std::to_string(k));
    int64_t steps = 0;
    const std::vector<int32_t> got = Chain(*d.fwd, 0, first, kP0, n, k, &steps);
    EXPECT_EQ(steps, k);
    ASSERT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + k));
    EXPECT_EQ(d.cache->Length(0), kP0 + k);
    const auto pk = static_cast<int32_t>(kP0 + k);
    EXPECT_EQ(OneAtATime(*d.fwd, 0, got.back(), pk, 3),
              std::vector<int32_t>(want.begin() + k, want.begin() + k + 3));
    EXPECT_EQ(Chain(*d.fwd, 0, got.back(), pk, n - k, n, &steps),
              std::vector<int32_t>(want.begin() + k, want.end()));
    EXPECT_EQ(steps, n - k);
  }
}

// A fresh forward's tuners time their first one-token steps (the norm tail, the Q8_0 / Q4_0
// GEMV, attention per power of two of depth) inside the chain, each trial alone: the tokens are
// those of a forward whose choices are fixed, and the choices settle.
TEST_P(GpuChainTest, TunerTrialsInsideTheChainKeepTheTokens) {
  const int64_t n = 40, ctx = 48;
  Device fixed = Make(*model_, 1, ctx,
                      {.gemv = gpu::GemvVariant::kBasic,
                       .norm_tail = gpu::NormTail::kOff,
                       .attention_tiles = gpu::AttentionTiles::kToken});
  const int32_t first = Prefill(*fixed.fwd, 0);
  const std::vector<int32_t> want = OneAtATime(*fixed.fwd, 0, first, kP0, n);
  Device tuned = Make(*model_, 1, ctx,
                      {.gemv = gpu::GemvVariant::kTune,
                       .norm_tail = gpu::NormTail::kTune,
                       .attention_tiles = gpu::AttentionTiles::kTune});
  ASSERT_EQ(Prefill(*tuned.fwd, 0), first);
  int64_t steps = 0;
  EXPECT_EQ(Chain(*tuned.fwd, 0, first, kP0, n, n, &steps), want);
  EXPECT_EQ(steps, n);
  EXPECT_TRUE(tuned.fwd->last_step_trial());
  int settled = 0;
  for (const std::string& line : tuned.fwd->step_tuning()) {
    SCOPED_TRACE(line);
    if (line.find("single tokens") != std::string::npos &&
        line.find("trying") == std::string::npos) {
      ++settled;
    }
  }
  EXPECT_GE(settled, 2);  // the norm tail and at least one depth of attention
}

// With banned tokens (the end tokens of ignore_eos) masked before each arg-max: the tokens of
// one step at a time whose logits row the host sampler (greedy, SetBanned) picks from. Banned:
// the first three tokens the unbanned chain gives, so the bans change the output.
TEST_P(GpuChainTest, BannedTokensAreNeverChosen) {
  const int64_t n = 16, ctx = 32;
  Device d = Make(*model_, 1, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  int64_t steps = 0;
  const std::vector<int32_t> free = Chain(*d.fwd, 0, first, kP0, n, n, &steps);
  std::vector<int32_t> banned;
  for (int32_t t : free) {
    if (banned.size() < 3 && std::find(banned.begin(), banned.end(), t) == banned.end()) {
      banned.push_back(t);
    }
  }
  ASSERT_FALSE(banned.empty());
  const auto n_vocab = static_cast<int32_t>(model_->config().n_vocab);
  sampling::SamplingParams sp;
  sp.temperature = 0.0f;
  sampling::Sampler sampler(sp, n_vocab);
  sampler.SetBanned(banned);
  ASSERT_TRUE(sampler.ArgMaxAfterBans());
  std::vector<int32_t> want;
  model::Batch b;
  int32_t token = first;
  for (int64_t i = 0; i < n; ++i) {
    b.Clear();
    b.Add(token, kP0 + static_cast<int32_t>(i), 0, true);
    ASSERT_TRUE(d.fwd->Forward(b).ok());
    token = sampler.Sample(d.fwd->logits(0));
    want.push_back(token);
  }
  std::vector<int32_t> got;
  auto r = d.fwd->ForwardGreedyChain(
      0, first, kP0, n,
      [&](int32_t t) {
        got.push_back(t);
        return true;
      },
      banned);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(got, want);
  for (int32_t t : got) EXPECT_EQ(std::find(banned.begin(), banned.end(), t), banned.end());
  EXPECT_NE(got, free) << "the bans changed nothing: the test tests nothing";
  // More bans than the forward masks, or one outside the vocabulary: refused.
  const std::vector<int32_t> too_many(d.fwd->top_known_capacity() + 1, 1);
  EXPECT_EQ(d.fwd
                ->ForwardGreedyChain(
                    0, first, kP0, 2, [](int32_t) { return true; }, too_many)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  const std::vector<int32_t> outside = {n_vocab};
  EXPECT_EQ(d.fwd
                ->ForwardGreedyChain(
                    0, first, kP0, 2, [](int32_t) { return true; }, outside)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(d.cache->Length(0), kP0 + n);
}

// Refused, with the sequence's cache as it was and the forward still usable: no steps, a
// position past the sequence's end, a chain past the cache's positions, a token outside the
// vocabulary, a sequence outside the cache.
TEST_P(GpuChainTest, RefusesBadArgumentsAndKeepsTheCache) {
  const int64_t ctx = 24;
  Device d = Make(*model_, 1, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  const std::vector<int32_t> want = OneAtATime(*d.fwd, 0, first, kP0, 2);
  const auto none = [](int32_t) { return true; };
  const auto n_vocab = static_cast<int32_t>(model_->config().n_vocab);
  struct Case {
    int32_t seq, token, pos;
    int64_t n;
    StatusCode code;
  };
  for (const Case& c : {Case{0, first, kP0, 0, StatusCode::kInvalidArgument},
                        Case{0, first, kP0 + 3, 2, StatusCode::kInvalidArgument},
                        Case{0, first, kP0, ctx - kP0 + 1, StatusCode::kOutOfRange},
                        Case{0, n_vocab, kP0, 2, StatusCode::kInvalidArgument},
                        Case{0, -1, kP0, 2, StatusCode::kInvalidArgument},
                        Case{1, first, 0, 2, StatusCode::kInvalidArgument}}) {
    SCOPED_TRACE("seq " + std::to_string(c.seq) + " token " + std::to_string(c.token) + " pos " +
                 std::to_string(c.pos) + " n " + std::to_string(c.n));
    auto r = d.fwd->ForwardGreedyChain(c.seq, c.token, c.pos, c.n, none);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_EQ(d.cache->Length(0), kP0 + 2);
  }
  int64_t steps = 0;
  EXPECT_EQ(Chain(*d.fwd, 0, first, kP0, 2, 2, &steps), want);
  // A chain to the cache's last position is allowed.
  Chain(*d.fwd, 0, first, kP0, ctx - kP0, ctx, &steps);
  EXPECT_EQ(steps, ctx - kP0);
  EXPECT_EQ(d.cache->Length(0), ctx);
}

// The sampler settings the sampled chain is tried with.
struct DrawCase {
  const char* name;
  float temperature;
  int32_t top_k;
  float top_p, min_p;
};
const DrawCase kDraws[] = {
    {"run's defaults (top-k: SampleTop)", 0.8f, 40, 0.95f, 0.05f},
    {"OpenAI's defaults (the whole row at T 1: SampleReduced)", 1.0f, 0, 1.0f, 0.0f},
    {"top-p 0.9 at T 0.7", 0.7f, 0, 0.9f, 0.0f},
    {"min-p 0.1 at T 1.5", 1.5f, 0, 1.0f, 0.1f},
    {"top-k 20 at T 1.3", 1.3f, 20, 1.0f, 0.0f},
    {"the whole row at T 0.6", 0.6f, 0, 1.0f, 0.0f},
};

sampling::Sampler SamplerFor(const DrawCase& c, const model::Model& m) {
  sampling::SamplingParams p;
  p.temperature = c.temperature;
  p.top_k = c.top_k;
  p.top_p = c.top_p;
  p.min_p = c.min_p;
  p.seed = 7;
  return sampling::Sampler(p, static_cast<int32_t>(m.config().n_vocab));
}

// Sampled chains give the tokens of one sampled step at a time with the same seed, for each of
// the sampler settings: the host's sampler checks every draw. The device's own draws (sample.comp)
// must agree with it: a draw it overrules costs a step, so at most 2 of all the steps here may be
// (a float rounding at an interval's edge; none is expected). Rows with top-k are always decided
// from the device's best 64, so those chains take every step in one chain. These models' weights
// are random and their rows flat (the best 64 hold ~1% of the mass), so without top-k the host
// cannot decide most rows from the best 64, and the chain brings each such step's whole row
// from the device (kept in its slot's buffer while the next step runs): that path is what those
// settings test here; the device's own draws without top-k are tested on LLM-like rows
// (gpu_sample_test.cc) and on the demo model (gpu_serve_chain_test.cc).
TEST_P(GpuChainTest, SampledChainsGiveOneSampledStepAtATimesTokens) {
  const int64_t n = 40, ctx = 64;
  Device d = Make(*model_, 2, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  ASSERT_EQ(Prefill(*d.fwd, 1), first);
  ChainCounts all;
  for (const DrawCase& c : kDraws) {
    SCOPED_TRACE(c.name);
    sampling::Sampler ref = SamplerFor(c, *model_);
    const std::vector<int32_t> want = SampledOneAtATime(*d.fwd, ref, 0, first, kP0, n);
    sampling::Sampler s = SamplerFor(c, *model_);
    ASSERT_TRUE(s.CanChainSample(d.fwd->top_capacity()));
    ChainCounts counts;
    EXPECT_EQ(SampledChained(d, s, 1, first, kP0, n, &counts), want);
    std::printf("%s: %lld chains, %lld tokens drawn from the whole row, %lld overruled\n", c.name,
                static_cast<long long>(counts.chains), static_cast<long long>(counts.whole),
                static_cast<long long>(counts.overruled));
    EXPECT_EQ(counts.taken, n);
    if (c.top_k > 0) {
      EXPECT_EQ(counts.whole, 0);
      EXPECT_LE(counts.chains, 1 + counts.overruled) << "a top-k stream's chains ended early";
    } else {
      EXPECT_GT(counts.whole, n / 2) << "these flat rows should need the whole row";
    }
    all.overruled += counts.overruled;
  }
  EXPECT_LE(all.overruled, 2) << "the device's draws disagree with the sampler's";
}

// Banned tokens (the first three of the unbanned tokens) are masked before the device's best
// tokens are taken, and the host's sampler knows them: the tokens equal one step at a time's
// with the same bans, and the bans change them. With uniforms that are not the sampler's, the
// device's draws are overruled, each ending its chain one step later, and the tokens are still
// the sampler's.
TEST_P(GpuChainTest, SampledChainsWithBansAndOverruledDraws) {
  const int64_t n = 24, ctx = 48;
  Device d = Make(*model_, 2, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  ASSERT_EQ(Prefill(*d.fwd, 1), first);
  const DrawCase& c = kDraws[0];
  sampling::Sampler free_s = SamplerFor(c, *model_);
  const std::vector<int32_t> free = SampledOneAtATime(*d.fwd, free_s, 0, first, kP0, n);
  std::vector<int32_t> banned;
  for (int32_t t : free) {
    if (banned.size() < 3 && std::find(banned.begin(), banned.end(), t) == banned.end()) {
      banned.push_back(t);
    }
  }
  sampling::Sampler ref = SamplerFor(c, *model_);
  ref.SetBanned(banned);
  const std::vector<int32_t> want = SampledOneAtATime(*d.fwd, ref, 0, first, kP0, n);
  EXPECT_NE(want, free) << "the bans changed nothing: the test tests nothing";
  sampling::Sampler s = SamplerFor(c, *model_);
  s.SetBanned(banned);
  ChainCounts counts;
  EXPECT_EQ(SampledChained(d, s, 1, first, kP0, n, &counts, banned), want);
  EXPECT_LE(counts.overruled, 1);
  for (bool with_bans : {false, true}) {
    SCOPED_TRACE(with_bans ? "other uniforms, bans" : "other uniforms");
    sampling::Sampler o = SamplerFor(c, *model_);
    if (with_bans) o.SetBanned(banned);
    ChainCounts other;
    EXPECT_EQ(
        SampledChained(d, o, 1, first, kP0, n, &other, with_bans ? banned : std::vector<int32_t>{},
                       /*other_uniforms=*/true),
        with_bans ? want : free);
    EXPECT_GE(other.overruled, 3) << "1 - u drew the sampler's tokens: the test tests nothing";
    EXPECT_GE(other.chains, other.overruled);
  }
}

// Several streams chained at once (ForwardSampledChains: a decode batch a step, a row each):
// each stream's tokens are those of one sampled step at a time with its own settings, seed and
// bans, a greedy stream's too (drawn with top-k 1). Streams end chains (one at its last token,
// one at a stop after 7 tokens) and the others take the step queued behind: the chains are
// fewer than the stops and ends plus the overruled rows, plus one. With uniforms that are not
// the samplers', the device's draws are overruled, each costing its stream a step but ending no
// chain (the first still ends at the stop), and the tokens are still the samplers'.
TEST_P(GpuChainTest, SampledChainsOfSeveralStreams) {
  const int64_t ctx = 64;
  Device d = Make(*model_, 4, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  for (int seq = 1; seq < 4; ++seq) ASSERT_EQ(Prefill(*d.fwd, seq), first);
  DrawCase greedy = kDraws[0];
  greedy.temperature = 0.0f;
  const DrawCase cases[] = {kDraws[0], kDraws[4], greedy};
  const int64_t ns[] = {24, 18, 20};
  // Stream 1 bans the first three distinct tokens it draws unbanned.
  sampling::Sampler free_s = SamplerFor(cases[1], *model_);
  std::vector<int32_t> banned;
  for (int32_t t : SampledOneAtATime(*d.fwd, free_s, 3, first, kP0, ns[1])) {
    if (banned.size() < 3 && std::find(banned.begin(), banned.end(), t) == banned.end()) {
      banned.push_back(t);
    }
  }
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < 3; ++i) {
    sampling::Sampler ref = SamplerFor(cases[i], *model_);
    if (i == 1) ref.SetBanned(banned);
    want.push_back(SampledOneAtATime(*d.fwd, ref, 3, first, kP0, ns[i]));
  }
  for (bool other : {false, true}) {
    SCOPED_TRACE(other ? "other uniforms" : "the samplers' uniforms");
    std::vector<sampling::Sampler> samplers;
    for (int i = 0; i < 3; ++i) samplers.push_back(SamplerFor(cases[i], *model_));
    samplers[1].SetBanned(banned);
    std::vector<Stream> st;
    for (int i = 0; i < 3; ++i) {
      st.push_back({&samplers[i], i, first, kP0, i == 1 ? banned : std::vector<int32_t>{}, ns[i],
                    i == 0 ? 7 : -1});
    }
    ChainCounts c;
    SampledChainsBatch(d, st, &c, other);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(st[i].out, want[i]) << "stream " << i;
    std::printf("%s: %lld chains, %lld tokens, %lld from the whole row, %lld overruled\n",
                other ? "other uniforms" : "3 streams", static_cast<long long>(c.chains),
                static_cast<long long>(c.taken), static_cast<long long>(c.whole),
                static_cast<long long>(c.overruled));
    EXPECT_EQ(c.taken, ns[0] + ns[1] + ns[2]);
    EXPECT_EQ(c.whole, 0) << "top-k rows are decided from the best 64";
    EXPECT_EQ(c.first_chain[0], 7) << "the first chain ended before the stop";
    EXPECT_GE(c.first_chain[2], 8) << "the greedy stream did not take the steps up to the stop";
    if (other) {
      EXPECT_GE(c.overruled, 3) << "1 - u drew the samplers' tokens: the test tests nothing";
      EXPECT_GE(c.first_differed, 1) << "no draw overruled in the first chain: it tests nothing";
    } else {
      // The stop, stream 1's and 2's ends (stream 0's ends the last chain) and overruled rows.
      EXPECT_LE(c.chains, 4 + c.overruled) << "a chain ended where no stream did";
      EXPECT_LE(c.overruled, 1) << "the device's draws disagree with the sampler's";
      if (c.overruled == 0) {
        EXPECT_EQ(c.first_chain, (std::vector<int64_t>{7, 8, 8}))
            << "the streams beside the stop did not take the step queued behind it";
      }
    }
  }
  // Refused, the caches as they were: a sequence twice, more streams than the forward chains.
  model::ChainDraw draw;
  std::vector<float> u(4, 0.5f);
  draw.uniforms = u;
  const model::ChainStream a{0, first, kP0, draw, {}, {}};
  const std::vector<model::ChainStream> twice = {a, a};
  const auto decide = [](int64_t, const model::TopRow&, const float*, int32_t drawn,
                         model::ChainTurn*) { return drawn; };
  EXPECT_EQ(d.fwd->ForwardSampledChains(twice, 2, decide).status().code(),
            StatusCode::kInvalidArgument);
  std::vector<model::ChainStream> many(d.fwd->chain_streams() + 1, a);
  for (size_t i = 0; i < many.size(); ++i) many[i].seq = static_cast<int32_t>(i % 4);
  EXPECT_EQ(d.fwd->ForwardSampledChains(many, 2, decide).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(d.fwd->ForwardSampledChains({}, 2, decide).status().code(),
            StatusCode::kInvalidArgument);
  for (int seq = 0; seq < 3; ++seq) EXPECT_EQ(d.cache->Length(seq), kP0 + ns[seq]);
}

// A batch of chains at OpenAI's defaults (the whole row at T 1, where the device's draw from the
// best 64 misses a draw in the tail, and the host draws it from the whole row) beside a stream
// whose device draws are overruled (1 - u) and a greedy one: each overruled draw costs its
// stream one step, and the chain goes on for all of them: the greedy stream takes every step
// of the first chain, to its last token. A fourth stream's device draws with one uniform wrong
// (its 4th): overruled there, its next draws take the uniforms after the host's (the draw count
// the redo sets), so that no other draw of it differs. The tokens are each sampler's one step
// at a time.
TEST_P(GpuChainTest, BatchChainsGoOnPastOverruledDraws) {
  const int64_t n = 20, ctx = 48;
  Device d = Make(*model_, 4, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  for (int seq = 1; seq < 4; ++seq) ASSERT_EQ(Prefill(*d.fwd, seq), first);
  DrawCase greedy = kDraws[0];
  greedy.temperature = 0.0f;
  const DrawCase cases[] = {kDraws[1], kDraws[0], greedy, kDraws[0]};
  std::vector<std::vector<int32_t>> want;
  for (const DrawCase& c : cases) {
    sampling::Sampler ref = SamplerFor(c, *model_);
    want.push_back(SampledOneAtATime(*d.fwd, ref, 3, first, kP0, n));
  }
  std::vector<sampling::Sampler> samplers;
  for (const DrawCase& c : cases) samplers.push_back(SamplerFor(c, *model_));
  std::vector<Stream> st;
  for (int i = 0; i < 4; ++i) st.push_back({&samplers[i], i, first, kP0, {}, n});
  st[1].other_uniforms = true;
  st[3].flip_at = 3;
  ChainCounts c;
  SampledChainsBatch(d, st, &c);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(st[i].out, want[i]) << "stream " << i;
  std::printf(
      "%lld chains, %lld tokens, %lld from the whole row, %lld differed (%lld in the "
      "first chain), first chain took %lld / %lld / %lld / %lld, stream 3's differed %lld\n",
      static_cast<long long>(c.chains), static_cast<long long>(c.taken),
      static_cast<long long>(c.whole), static_cast<long long>(c.differed),
      static_cast<long long>(c.first_differed), static_cast<long long>(c.first_chain[0]),
      static_cast<long long>(c.first_chain[1]), static_cast<long long>(c.first_chain[2]),
      static_cast<long long>(c.first_chain[3]), static_cast<long long>(st[3].differed));
  EXPECT_EQ(c.taken, 4 * n);
  EXPECT_EQ(st[3].differed, 1) << "0: 1 - u drew the sampler's token (the test tests nothing); "
                                  "more: the draws after the redo were not the sampler's";
  EXPECT_GE(c.first_differed, 2) << "too few overruled draws in the first chain: it tests little";
  EXPECT_EQ(c.first_chain[2], n) << "an overruled draw ended the first chain";
  // Each overruled draw but the chain's last costs its stream one step of the n, or two where
  // the row came whole (judged as the step after it ends, both steps behind it having run from
  // the device's draw).
  EXPECT_GE(c.first_chain[0] + c.first_chain[1] + c.first_chain[3],
            3 * n - c.first_differed - c.first_whole_differed);
  EXPECT_LT(c.first_chain[1], n) << "1 - u drew the sampler's tokens: the test tests nothing";
  for (int seq = 0; seq < 4; ++seq) EXPECT_EQ(d.cache->Length(seq), kP0 + n);
}

// Refused, with the cache as it was: more steps than kMaxSampledChainSteps, fewer uniforms than
// steps, a temperature of 0, and a forward without the top-k reduction.
TEST_P(GpuChainTest, SampledChainRefusesBadArguments) {
  const int64_t ctx = 300;
  Device d = Make(*model_, 1, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  std::vector<float> uniforms(model::kMaxSampledChainSteps + 1, 0.5f);
  const auto decide = [](const model::TopRow&, const float*, int32_t drawn, bool*) {
    return drawn;
  };
  model::ChainDraw draw;
  draw.uniforms = uniforms;
  EXPECT_EQ(
      d.fwd->ForwardSampledChain(0, first, kP0, model::kMaxSampledChainSteps + 1, draw, decide)
          .status()
          .code(),
      StatusCode::kInvalidArgument);
  draw.uniforms = std::span<const float>(uniforms).first(3);
  EXPECT_EQ(d.fwd->ForwardSampledChain(0, first, kP0, 4, draw, decide).status().code(),
            StatusCode::kInvalidArgument);
  draw.temperature = 0.0f;
  EXPECT_EQ(d.fwd->ForwardSampledChain(0, first, kP0, 2, draw, decide).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(d.cache->Length(0), kP0);
  // A forward that reduces no rows cannot draw.
  Device whole = Make(*model_, 1, ctx, {.top_k = 0});
  ASSERT_EQ(Prefill(*whole.fwd, 0), first);
  EXPECT_FALSE(whole.fwd->chains_sampled());
  draw.temperature = 1.0f;
  EXPECT_EQ(whole.fwd->ForwardSampledChain(0, first, kP0, 2, draw, decide).status().code(),
            StatusCode::kFailedPrecondition);
  // Valid: the device's own draws taken as they come.
  auto r = d.fwd->ForwardSampledChain(0, first, kP0, 3, draw, decide);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 3);
  EXPECT_EQ(d.cache->Length(0), kP0 + 3);
}

// Llama (Q8_0 weights: the tuned GEMV; F16: the one-dispatch Q/K/V) and qwen3 (NEOX RoPE, q/k
// norms: the general Q/K/V stage).
INSTANTIATE_TEST_SUITE_P(Models, GpuChainTest,
                         ::testing::Values("tiny-llama-256-q8_0", "tiny-llama-256-f16",
                                           "tiny-qwen3-256-q8_0"),
                         ModelTestName);

}  // namespace
}  // namespace uf
