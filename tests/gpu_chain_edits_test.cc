// Sampled chains of streams with logit bias and repetition / presence / frequency penalties
// (GpuForward::ForwardSampledChains with model::ChainEdits): the device edits each step's row as
// sampling::Sampler::Sample() does (edit_rows.comp, the penalty window moving with the chain's own
// tokens) and draws from the edited row (sample.comp merging the edited tokens into the best 64),
// and the host's sampler judges every draw from the raw logits it gets back. The tokens must be
// those of one sampled step at a time with the same seed and the same edits, the edits must change
// them (else the test tests nothing), and the device's draws must agree with the sampler's
// (overruled draws cost steps, so they are counted). Runs on Mesa's lavapipe in CI; skips,
// saying why, where no Vulkan device exists.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

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

// A sampler setting with edits. bias_on: tokens of the unedited stream's output to bias (its
// first distinct ones), each by the matching entry of bias.
struct EditCase {
  const char* name;
  float temperature;
  int32_t top_k;
  float top_p, min_p;
  float repeat, presence, frequency;
  int32_t last_n;
  std::vector<float> bias;
  // The window primed with the unedited stream's first last_n distinct tokens (after the
  // prompt), so that what leaves the window matters.
  bool prime = false;
};

// clang-format off
const EditCase kEdits[] = {
    // The window (8) slides within a chain of 40: tokens leave it as the chain's own enter.
    {"presence 0.8 + frequency 0.5, window 8, top-k 40 at T 0.8",
     0.8f, 40, 0.95f, 0.05f, 1.0f, 0.8f, 0.5f, 8, {}},
    {"repeat 1.3, window 64, top-k 20 at T 1.3", 1.3f, 20, 1.0f, 0.0f, 1.3f, 0.0f, 0.0f, 64, {}},
    // A token pushed to the top and two pushed down: known tokens lead the merged best 64.
    {"bias +9, -4, -100 with repeat 1.1, OpenAI's defaults (whole row at T 1)",
     1.0f, 0, 1.0f, 0.0f, 1.1f, 0.0f, 0.0f, 64, {9.0f, -4.0f, -100.0f}},
    {"bias +6 with frequency 2, top-p 0.9 at T 0.7",
     0.7f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 2.0f, 32, {6.0f}},
    // Greedy with penalties: drawn as top-k 1 (ChainDrawFor), the edited row's best.
    {"greedy, repeat 1.5 + presence 1, window 16, bias -100, +3",
     0.0f, 40, 1.0f, 0.0f, 1.5f, 1.0f, 0.0f, 16, {-100.0f, 3.0f}},
    // What leaves the window must stop being penalized: the favourite tokens, kept out by a
    // strong presence penalty, come back as they leave it.
    {"window 8 primed with the favourite tokens, presence 6, top-k 40 at T 0.8",
     0.8f, 40, 0.95f, 0.05f, 1.0f, 6.0f, 0.0f, 8, {}, true},
};
// clang-format on

sampling::Sampler SamplerOf(const EditCase& c, const model::Model& m,
                            const std::vector<int32_t>& bias_ids, bool edits = true,
                            const std::vector<int32_t>& primed = {}) {
  sampling::SamplingParams p;
  p.temperature = c.temperature;
  p.top_k = c.top_k;
  p.top_p = c.top_p;
  p.min_p = c.min_p;
  if (edits) {
    p.repeat_penalty = c.repeat;
    p.presence_penalty = c.presence;
    p.frequency_penalty = c.frequency;
  }
  p.penalty_last_n = c.last_n;
  p.seed = 11;
  sampling::Sampler s(p, static_cast<int32_t>(m.config().n_vocab));
  if (edits) {
    std::vector<std::pair<int32_t, float>> bias;
    for (size_t i = 0; i < c.bias.size() && i < bias_ids.size(); ++i) {
      bias.emplace_back(bias_ids[i], c.bias[i]);
    }
    s.SetLogitBias(bias);
  }
  // The prompt and the first token in the window, as engine::Generate accepts them.
  for (int32_t t : kPrompt) s.Accept(t);
  if (edits && c.prime) {
    for (int32_t t : primed) s.Accept(t);
  }
  return s;
}

// The first k distinct tokens of v.
std::vector<int32_t> Distinct(const std::vector<int32_t>& v, size_t k) {
  std::vector<int32_t> out;
  for (int32_t t : v) {
    if (out.size() < k && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

class GpuChainEditsTest : public ChainModelTest {};

// One stream at a time: for each setting, 40 chained tokens equal one sampled step at a time's
// with the same edits, and differ from the unedited stream's. The device agrees with the
// sampler on at most all but 2 of the draws it decided from the best 64 (a float rounding at an
// interval's edge; none expected); a top-k or greedy stream never needs the whole row.
TEST_P(GpuChainEditsTest, ChainedTokensAreTheEditedSamplersTokens) {
  const int64_t n = 40, ctx = 64;
  Device d = Make(*model_, 2, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  ASSERT_EQ(Prefill(*d.fwd, 1), first);
  int64_t overruled = 0;
  for (const EditCase& c : kEdits) {
    SCOPED_TRACE(c.name);
    sampling::Sampler plain = SamplerOf(c, *model_, {}, /*edits=*/false);
    plain.Accept(first);
    const std::vector<int32_t> unedited = SampledOneAtATime(*d.fwd, plain, 0, first, kP0, n);
    const std::vector<int32_t> bias_ids = Distinct(unedited, c.bias.size());
    const std::vector<int32_t> primed = Distinct(unedited, static_cast<size_t>(c.last_n));
    sampling::Sampler ref = SamplerOf(c, *model_, bias_ids, true, primed);
    ref.Accept(first);
    const std::vector<int32_t> want = SampledOneAtATime(*d.fwd, ref, 0, first, kP0, n);
    EXPECT_NE(want, unedited) << "the edits changed nothing: the case tests nothing";
    sampling::Sampler s = SamplerOf(c, *model_, bias_ids, true, primed);
    s.Accept(first);
    ASSERT_TRUE(s.CanChainSample(d.fwd->top_capacity()));
    ChainCounts counts;
    EXPECT_EQ(SampledChained(d, s, 1, first, kP0, n, &counts), want);
    std::printf("%s: %lld chains, %lld from the whole row, %lld overruled\n", c.name,
                static_cast<long long>(counts.chains), static_cast<long long>(counts.whole),
                static_cast<long long>(counts.overruled));
    EXPECT_EQ(counts.taken, n);
    if (c.top_k > 0) {
      EXPECT_EQ(counts.whole, 0);
      EXPECT_LE(counts.chains, 1 + counts.overruled) << "a top-k stream's chains ended early";
    }
    overruled += counts.overruled;
  }
  EXPECT_LE(overruled, 2) << "the device's edited draws disagree with the sampler's";
}

// Thousands of edited tokens a row, past a plain step's 1,024 (model::ChainKnown up to
// chain_known_capacity()): a bias of +-0.3 on 2,000 tokens and a window primed with 1,500 other
// tokens under a presence penalty, sliding (last_n just above the start window): 40 chained
// tokens equal one sampled step at a time's, differ from the unedited stream's, and the
// device's draws agree with the sampler's.
TEST_P(GpuChainEditsTest, ChainsListThousandsOfEditedTokens) {
  const int64_t n = 40, ctx = 64;
  Device d = Make(*model_, 2, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  ASSERT_EQ(Prefill(*d.fwd, 1), first);
  ASSERT_GE(d.fwd->chain_known_capacity(), 4000);
  const auto sampler = [&](bool edits) {
    sampling::SamplingParams p;
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.presence_penalty = edits ? 1.0f : 0.0f;
    p.penalty_last_n = static_cast<int32_t>(kPrompt.size()) + 1500 + 3;
    p.seed = 5;
    sampling::Sampler s(p, static_cast<int32_t>(model_->config().n_vocab));
    if (edits) {
      std::vector<std::pair<int32_t, float>> bias;
      for (int32_t id = 0; id < 2000; ++id) bias.emplace_back(id, id % 2 == 0 ? 0.3f : -0.3f);
      s.SetLogitBias(bias);
    }
    for (int32_t t : kPrompt) s.Accept(t);
    for (int32_t t = 2000; t < 3500; ++t) s.Accept(t);
    s.Accept(first);
    return s;
  };
  sampling::Sampler plain = sampler(false);
  const std::vector<int32_t> unedited = SampledOneAtATime(*d.fwd, plain, 0, first, kP0, n);
  sampling::Sampler ref = sampler(true);
  const std::vector<int32_t> want = SampledOneAtATime(*d.fwd, ref, 0, first, kP0, n);
  EXPECT_NE(want, unedited) << "the edits changed nothing: the test tests nothing";
  sampling::Sampler s = sampler(true);
  const int64_t room = engine::ChainKnownRoom(s, d.fwd->chain_known_capacity());
  EXPECT_GE(room, n) << "the list should hold the chain";
  EXPECT_EQ(engine::ChainKnownRoom(s, 1024), 0) << "a plain row's list should not";
  ChainCounts counts;
  EXPECT_EQ(SampledChained(d, s, 1, first, kP0, n, &counts), want);
  std::printf("thousands of edited tokens: %lld chains, %lld overruled\n",
              static_cast<long long>(counts.chains), static_cast<long long>(counts.overruled));
  EXPECT_EQ(counts.taken, n);
  EXPECT_LE(counts.overruled, 1) << "the device's edited draws disagree with the sampler's";
}

// Three streams chained as a batch, each with its own edits (penalties with a sliding window,
// bias with repeat on the whole row, none): each stream's tokens equal its own one step at a
// time's. With uniforms that are not the samplers' (1 - u), draws are overruled and redone
// (chain_redo.comp: the redone step's token enters the device's window) and the tokens are still
// the samplers'.
TEST_P(GpuChainEditsTest, BatchChainsEditEachStreamsRows) {
  const int64_t ctx = 64;
  Device d = Make(*model_, 4, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  for (int seq = 1; seq < 4; ++seq) ASSERT_EQ(Prefill(*d.fwd, seq), first);
  const EditCase plain_case{"none", 0.8f, 40, 0.95f, 0.05f, 1.0f, 0.0f, 0.0f, 0, {}};
  const EditCase cases[] = {kEdits[0], kEdits[2], plain_case};
  const int64_t ns[] = {24, 18, 20};
  std::vector<std::vector<int32_t>> bias_ids, want;
  for (int i = 0; i < 3; ++i) {
    sampling::Sampler plain = SamplerOf(cases[i], *model_, {}, false);
    plain.Accept(first);
    bias_ids.push_back(
        Distinct(SampledOneAtATime(*d.fwd, plain, 3, first, kP0, ns[i]), cases[i].bias.size()));
    sampling::Sampler ref = SamplerOf(cases[i], *model_, bias_ids[i]);
    ref.Accept(first);
    want.push_back(SampledOneAtATime(*d.fwd, ref, 3, first, kP0, ns[i]));
  }
  for (bool other : {false, true}) {
    SCOPED_TRACE(other ? "other uniforms" : "the samplers' uniforms");
    std::vector<sampling::Sampler> samplers;
    for (int i = 0; i < 3; ++i) {
      samplers.push_back(SamplerOf(cases[i], *model_, bias_ids[i]));
      samplers.back().Accept(first);
    }
    std::vector<Stream> st;
    for (int i = 0; i < 3; ++i) st.push_back({&samplers[i], i, first, kP0, {}, ns[i]});
    ChainCounts c;
    SampledChainsBatch(d, st, &c, other);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(st[i].out, want[i]) << "stream " << i;
    std::printf("%s: %lld chains, %lld tokens, %lld from the whole row, %lld overruled\n",
                other ? "other uniforms" : "3 edited streams", static_cast<long long>(c.chains),
                static_cast<long long>(c.taken), static_cast<long long>(c.whole),
                static_cast<long long>(c.overruled));
    EXPECT_EQ(c.taken, ns[0] + ns[1] + ns[2]);
    if (other) {
      EXPECT_GE(c.overruled, 3) << "1 - u drew the samplers' tokens: the test tests nothing";
    } else {
      EXPECT_LE(c.overruled, 1) << "the device's edited draws disagree with the sampler's";
    }
  }
}

// Edits the device cannot hold or that are malformed are refused, the cache as it was: more
// edited tokens than the forward lists, a window token missing from the list, a token listed
// twice, a window longer than last_n, sizes that differ.
TEST_P(GpuChainEditsTest, RefusesBadEditsAndKeepsTheCache) {
  const int64_t ctx = 32;
  Device d = Make(*model_, 1, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  const int64_t cap = d.fwd->chain_known_capacity();
  ASSERT_GT(cap, 0);
  std::vector<float> u(4, 0.5f);
  model::ChainDraw draw;
  draw.temperature = 0.8f;
  draw.top_k = 40;
  draw.uniforms = u;
  const auto none = [](const model::TopRow&, const float*, int32_t drawn, bool*) { return drawn; };
  std::vector<int32_t> many(cap);
  for (int64_t i = 0; i < cap; ++i) many[i] = static_cast<int32_t>(i);
  std::vector<float> zeros(cap, 0.0f);
  std::vector<int32_t> ones(cap, 1);
  const std::vector<int32_t> two = {5, 6}, twice = {5, 5}, window = {5, 7}, one_count = {1, 1};
  const std::vector<float> two_bias = {1.0f, 1.0f};
  // Edits of ids with their bias and counts, a window and last_n (penalties where last_n > 0).
  const auto edits = [](std::span<const int32_t> ids, std::span<const float> bias,
                        std::span<const int32_t> counts, std::span<const int32_t> window = {},
                        int32_t last_n = 0) {
    model::ChainEdits e;
    e.ids = ids;
    e.bias = bias;
    e.counts = counts;
    e.window = window;
    e.last_n = last_n;
    e.presence_penalty = last_n > 0 ? 1.0f : 0.0f;
    return e;
  };
  struct Bad {
    const char* name;
    model::ChainEdits e;
  };
  const Bad bad[] = {
      // cap tokens with penalties: no room for the chain's own
      {"past the capacity", edits(many, zeros, ones, std::span<const int32_t>(many).first(8), 64)},
      {"a window token not listed", edits(two, two_bias, one_count, window, 8)},
      {"a token listed twice", edits(twice, two_bias, one_count)},
      {"a window past last_n", edits(two, two_bias, one_count, two, 1)},
      {"a bias short of the list",
       edits(two, std::span<const float>(two_bias).first(1), one_count)},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.name);
    auto r = d.fwd->ForwardSampledChain(0, first, kP0, 4, draw, none, {}, b.e);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_EQ(d.cache->Length(0), kP0);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GpuChainEditsTest,
                         ::testing::Values("tiny-llama-256-q8_0", "tiny-qwen3-256-q8_0",
                                           "tiny-llama-256-f16"),
                         ModelTestName);

}  // namespace
}  // namespace uf
