// Sampling from a row reduced on a device: SampleTop (greedy and top-k <= 64 from the best 64,
// with bias, bans and penalties on known tokens) and SampleReduced (no top-k: the best 64, the
// max and the log-sum-exp) draw, seed for seed, what Sample draws from the whole row; and
// SampleReduced decides nearly every draw on LLM-like rows, because Sample walks the best 64
// first.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "engine/seq_sampler.h"
#include "grammar/token_mask.h"
#include "sampling/sampler.h"

namespace uf::sampling {
namespace {

SamplingParams Plain() {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1234;
  return p;
}

// kLlm: LLM-like, 4 tokens 14 +- 2 nats above a N(0, 2) background.
enum class Shape { kFlat, kPeaked, kTies, kHoles, kLlm };

std::vector<float> MakeLogits(int32_t n, Shape shape, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, shape == Shape::kPeaked ? 4.0f
                                          : shape == Shape::kLlm  ? 2.0f
                                                                  : 0.7f);
  std::vector<float> l(n);
  for (float& x : l) x = g(rng);
  if (shape == Shape::kLlm) {
    for (int k = 0; k < 4; ++k) l[rng() % n] = 14.0f + 2.0f * g(rng);
  }
  if (shape == Shape::kTies) {
    for (float& x : l) x = std::round(x * 4.0f) / 4.0f;  // many exact ties
  }
  if (shape == Shape::kHoles) {
    for (int32_t i = 0; i < n; i += 7) l[i] = (i % 2) ? NAN : -INFINITY;
  }
  return l;
}

// The row's token ids best first: higher logit (NaN as -inf), then lower id, the order of a
// device's top-k list.
std::vector<int32_t> BestFirst(const std::vector<float>& l) {
  const auto v = [&](int32_t i) { return std::isnan(l[i]) ? -INFINITY : l[i]; };
  std::vector<int32_t> ids(l.size());
  for (size_t i = 0; i < l.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return v(a) > v(b) || (v(a) == v(b) && a < b); });
  return ids;
}

// SampleReduced (a GPU's 64 best tokens, max and log-sum-exp) with its fallback to the whole
// row draws seed for seed what Sample draws from the whole row, over thousands of draws on flat,
// peaked, tied, holed and LLM-like rows (a few tokens far above the rest), temperatures 0.3..2,
// top-p 0.5..1 and min-p; the log-sum-exp is perturbed by 2e-6 (a device's rounding). The
// fallback must not be the rule on peaked rows: it is counted.
TEST(Sampler, SampleReducedWithFallbackDrawsWhatTheWholeRowDraws) {
  std::mt19937 rng(2812);
  constexpr int32_t kTop = 64;
  int64_t draws = 0, fallbacks = 0, llm_draws = 0, llm_fallbacks = 0;
  for (int32_t n_vocab : {300, 5000, 32000}) {
    for (int shape = 0; shape < 5; ++shape) {
      const std::vector<float> l = MakeLogits(n_vocab, static_cast<Shape>(shape), rng);
      const std::vector<int32_t> ids = BestFirst(l);
      std::vector<float> vals(kTop);
      for (int32_t i = 0; i < kTop; ++i) vals[i] = l[ids[i]];
      const float max = vals[0];
      double z = 0.0;
      for (float x : l) {
        if (x > -INFINITY) z += std::exp(static_cast<double>(x) - max);
      }
      for (float temp : {0.3f, 0.7f, 1.0f, 1.0f, 1.4f, 2.0f}) {
        for (float top_p : {0.5f, 0.9f, 1.0f}) {
          for (float min_p : {0.0f, 0.05f}) {
            SamplingParams p = Plain();
            p.temperature = temp;
            p.top_p = top_p;
            p.min_p = min_p;
            p.seed = rng();
            const float lse =
                static_cast<float>(max + std::log(z) * (1.0 + ((rng() % 2) ? 2e-6 : -2e-6)));
            Sampler full(p, n_vocab), reduced(p, n_vocab);
            ASSERT_TRUE(reduced.CanSampleReduced());
            ASSERT_FALSE(reduced.CanSampleTop(kTop));
            for (int draw = 0; draw < 25; ++draw) {
              int32_t got = reduced.SampleReduced(ids.data(), vals.data(), kTop, max, lse);
              ++draws;
              if (shape == static_cast<int>(Shape::kLlm) && temp == 1.0f) ++llm_draws;
              if (got < 0) {
                ++fallbacks;
                if (shape == static_cast<int>(Shape::kLlm) && temp == 1.0f) ++llm_fallbacks;
                got = reduced.Sample(l.data());
              }
              ASSERT_EQ(got, full.Sample(l.data()))
                  << "vocab " << n_vocab << " shape " << shape << " T " << temp << " top_p "
                  << top_p << " min_p " << min_p << " draw " << draw;
            }
          }
        }
      }
    }
  }
  std::printf("SampleReduced: %lld of %lld draws fell back; LLM-like rows at T = 1: %lld of %lld\n",
              static_cast<long long>(fallbacks), static_cast<long long>(draws),
              static_cast<long long>(llm_fallbacks), static_cast<long long>(llm_draws));
  EXPECT_LT(fallbacks, draws);
  EXPECT_LT(llm_fallbacks * 5, llm_draws);  // peaked rows are mostly reduced
  SamplingParams p = Plain();
  p.top_k = 40;
  EXPECT_FALSE(Sampler(p, 1000).CanSampleReduced());  // top-k: SampleTop's
  p = Plain();
  p.temperature = 0.0f;
  EXPECT_FALSE(Sampler(p, 1000).CanSampleReduced());
  // Penalties and bans: with their tokens known (the next test).
  p = Plain();
  p.presence_penalty = 0.5f;
  EXPECT_TRUE(Sampler(p, 1000).CanSampleReduced());
  p = Plain();
  Sampler banned(p, 1000);
  banned.SetBanned({3});
  EXPECT_TRUE(banned.CanSampleReduced());
}

// SampleTop, given a row's best tokens in the sampler's order (as a GPU reduces them), draws
// seed for seed what Sample draws from the whole row, over every shape of row (ties and holes
// included) and the top-k settings it accepts (bias, bans and penalties: see the next test).
TEST(Sampler, SampleTopDrawsWhatTheWholeRowDraws) {
  std::mt19937 rng(91);
  constexpr int32_t kN = 2000, kTop = 64;
  for (int shape = 0; shape < 4; ++shape) {
    const std::vector<float> l = MakeLogits(kN, static_cast<Shape>(shape), rng);
    const std::vector<int32_t> ids = BestFirst(l);
    std::vector<float> vals(kTop);
    for (int32_t i = 0; i < kTop; ++i) vals[i] = l[ids[i]];
    for (int32_t top_k : {0, 1, 3, 40, 64}) {
      SamplingParams p;
      p.temperature = top_k == 0 ? 0.0f : 0.5f + 0.3f * shape;
      p.top_k = top_k;
      p.top_p = top_k == 3 ? 1.0f : 0.9f;
      p.seed = 7 * top_k + shape;
      Sampler full(p, kN), top(p, kN);
      ASSERT_TRUE(top.CanSampleTop(kTop));
      for (int draw = 0; draw < 100; ++draw) {
        ASSERT_EQ(top.SampleTop(ids.data(), vals.data(), kTop), full.Sample(l.data()))
            << "shape " << shape << " top_k " << top_k << " draw " << draw;
      }
    }
  }
  SamplingParams p;
  p.top_k = 40;
  Sampler s(p, kN);
  EXPECT_TRUE(s.CanSampleTop(40));
  EXPECT_FALSE(s.CanSampleTop(39));  // fewer than top_k
  s.SetBanned({5});
  EXPECT_TRUE(s.CanSampleTop(64));  // given the banned token's raw logit (known)
  p.top_k = 0;                      // the whole distribution
  EXPECT_FALSE(Sampler(p, kN).CanSampleTop(64));
  p.top_k = 65;
  EXPECT_FALSE(Sampler(p, kN).CanSampleTop(64));
}

// What a device returns for a row whose sampler edits `known` (mask_rows.comp, then topk.comp):
// the known tokens' raw logits, and the best n of the row with them at -inf, in the sampler's
// order, with that row's max and log-sum-exp (summed in float, as the device does).
struct DeviceRow {
  std::vector<int32_t> ids, known;
  std::vector<float> vals, known_raw;
  float max = -INFINITY, lse = -INFINITY;
  model::TopRow Row() const {
    model::TopRow t;
    t.n = static_cast<int32_t>(ids.size());
    t.ids = ids.data();
    t.logits = vals.data();
    t.max = max;
    t.log_sum_exp = lse;
    t.n_known = static_cast<int32_t>(known.size());
    t.known_ids = known.data();
    t.known_logits = known_raw.data();
    return t;
  }
};

DeviceRow Reduce(const std::vector<float>& l, const std::vector<int32_t>& known, int32_t n) {
  DeviceRow d;
  d.known = known;
  std::vector<float> masked = l;
  for (int32_t id : known) {
    d.known_raw.push_back(l[id]);
    masked[id] = -INFINITY;
  }
  const auto v = [&](int32_t i) { return std::isnan(masked[i]) ? -INFINITY : masked[i]; };
  const std::vector<int32_t> order = BestFirst(masked);
  for (int32_t i = 0; i < n; ++i) {
    d.ids.push_back(order[i]);
    d.vals.push_back(masked[order[i]]);
  }
  d.max = v(order[0]);
  if (d.max > -INFINITY) {
    // As topk.comp sums: 256 strided partial sums, then a tree.
    std::vector<float> part(256, 0.0f);
    for (size_t i = 0; i < l.size(); ++i) {
      if (v(static_cast<int32_t>(i)) > -INFINITY) part[i % 256] += std::exp(masked[i] - d.max);
    }
    for (int w = 128; w > 0; w >>= 1) {
      for (int i = 0; i < w; ++i) part[i] += part[i + w];
    }
    d.lse = d.max + std::log(part[0]);
  }
  return d;
}

// A grammar's token from a device's unmasked row (engine::SampleMaskedFromTop, a constrained
// stream's chained step): seed for seed the token Sample draws from the whole row masked by the
// grammar (TokenConstraint::Apply), or -1 and then the whole row's draw. Masks: everything
// allowed, half, a twentieth, three of the row's best ten (a structural position: fewer listed
// than top-k 40, but all the mask allows, so the masked row's -inf tokens fill the top-k), one
// token outside the listed 64, and every other listed token plus unlisted ones; greedy, top-k
// 1..64 with top-p and min-p, one sampler with a banned token (listed as known, at -inf in the
// row), and without top-k (Sampler::SampleReducedMasked) at T 0.7, 1 and 1.5, with top-p, with
// min-p and with both. With top-k the first and the structural masks must decide every draw,
// the unlisted token none; without, the structural mask nearly every draw (the list holds
// every allowed token: the masked total is exact), the unlisted token none.
TEST(Sampler, SampleMaskedFromTopDrawsWhatTheMaskedWholeRowDraws) {
  std::mt19937 rng(1207);
  constexpr int32_t kN = 1000, kTop = 64, kWords = (kN + 63) / 64;
  enum Mask { kAll, kHalf, kTwentieth, kStructural, kUnlisted, kEveryOther, kMasks };
  struct Setting {
    float temperature;
    int32_t top_k;
    float top_p, min_p;
    bool ban;
  };
  const Setting settings[] = {
      {0.0f, 0, 1.0f, 0.0f, false},  {0.7f, 1, 0.9f, 0.0f, false},   {0.9f, 3, 1.0f, 0.0f, false},
      {1.1f, 40, 0.9f, 0.0f, false}, {1.3f, 64, 0.9f, 0.05f, false}, {1.0f, 40, 0.9f, 0.0f, true},
      {1.0f, 0, 1.0f, 0.0f, false},  {0.7f, 0, 1.0f, 0.0f, false},   {1.5f, 0, 1.0f, 0.0f, false},
      {1.0f, 0, 0.9f, 0.0f, false},  {0.8f, 0, 1.0f, 0.1f, false},   {1.2f, 0, 0.95f, 0.05f, false},
  };
  // [top-k or greedy, without top-k][mask]
  int64_t decided[2][kMasks] = {}, draws[2][kMasks] = {};
  for (int shape = 0; shape < 5; ++shape) {
    const std::vector<float> l = MakeLogits(kN, static_cast<Shape>(shape), rng);
    const std::vector<int32_t> order = BestFirst(l);
    for (int mk = 0; mk < kMasks; ++mk) {
      std::vector<uint64_t> mask(kWords, 0);
      const auto allow = [&](int32_t id) { mask[id >> 6] |= uint64_t{1} << (id & 63); };
      for (int32_t id = 0; id < kN; ++id) {
        if (mk == kAll || (mk == kHalf && rng() % 2 == 0) ||
            (mk == kTwentieth && rng() % 20 == 0)) {
          allow(id);
        }
      }
      if (mk == kStructural) {
        for (int i : {1, 4, 9}) allow(order[i]);
      }
      if (mk == kUnlisted) allow(order[200]);
      if (mk == kEveryOther) {
        for (int i = 0; i < kTop; i += 2) allow(order[i]);
        for (int i = kTop; i < kN; i += 3) allow(order[i]);
      }
      std::vector<float> masked(kN);
      grammar::TokenConstraint::Apply(mask.data(), l.data(), kN, masked.data());
      for (const Setting& set : settings) {
        SamplingParams p;
        p.temperature = set.temperature;
        p.top_k = set.top_k;
        p.top_p = set.top_p;
        p.min_p = set.min_p;
        p.seed = 31 * mk + 7 * shape + set.top_k;
        Sampler full(p, kN), top(p, kN);
        std::vector<int32_t> known;
        if (set.ban) {  // ignore_eos: one of the row's best, -inf on the device, listed as known
          known = {order[2]};
          full.SetBanned(known);
          top.SetBanned(known);
        }
        const DeviceRow row = Reduce(l, known, kTop);
        std::vector<int32_t> ids;
        std::vector<float> vals;
        for (int draw = 0; draw < 40; ++draw) {
          int32_t got = engine::SampleMaskedFromTop(top, row.Row(), mask, kN, &ids, &vals);
          const int kind = set.top_k > 0 || set.temperature == 0.0f ? 0 : 1;
          ++draws[kind][mk];
          if (got >= 0) {
            ++decided[kind][mk];
          } else {
            got = top.Sample(masked.data());
          }
          ASSERT_EQ(got, full.Sample(masked.data()))
              << "shape " << shape << " mask " << mk << " setting " << (&set - settings) << " draw "
              << draw;
        }
      }
    }
  }
  for (int kind = 0; kind < 2; ++kind) {
    for (int mk = 0; mk < kMasks; ++mk) {
      std::printf("%s, mask %d: %lld of %lld draws decided from the best 64\n",
                  kind == 0 ? "top-k" : "no top-k", mk, static_cast<long long>(decided[kind][mk]),
                  static_cast<long long>(draws[kind][mk]));
    }
  }
  // Top-k and greedy: decided wherever k allowed tokens are listed, or all there are.
  EXPECT_EQ(decided[0][kAll], draws[0][kAll]);
  EXPECT_EQ(decided[0][kStructural], draws[0][kStructural]);
  EXPECT_EQ(decided[0][kUnlisted], 0);
  EXPECT_GT(decided[0][kEveryOther], 0);                      // greedy and top-k up to 32
  EXPECT_LT(decided[0][kEveryOther], draws[0][kEveryOther]);  // top-k 40 and 64
  // Without top-k: every listed token allowed is SampleReduced's row; the structural mask is
  // exact at any temperature and filter (but for draws within the margin of an edge).
  EXPECT_GT(decided[1][kAll], 0);
  EXPECT_GE(decided[1][kStructural], draws[1][kStructural] * 99 / 100);
  EXPECT_EQ(decided[1][kUnlisted], 0);
  EXPECT_GT(decided[1][kHalf], 0);
}

// Rows with logit bias (repeated ids), banned tokens and each penalty, sampled from a device's
// reduction (the edited tokens' raw logits beside the best 64 of the rest) and from the whole
// row, token by token with each drawn token accepted into the penalty window: the same token in
// every draw, seed for seed, greedy and top-k 1..64 with top-p and min-p; and the logprobs of
// the drawn token and the top 20 from the reduction equal the whole row's (ids and order
// exactly, values within 1e-5: the device's float log-sum-exp against the CPU's double one).
TEST(Sampler, SampleTopWithEditsDrawsWhatTheWholeRowDraws) {
  std::mt19937 rng(2026);
  constexpr int32_t kN = 3000, kTop = 64;
  int draws = 0, edited_draws = 0;
  double max_err = 0.0;
  for (int shape = 0; shape < 4; ++shape) {
    for (int setting = 0; setting < 6; ++setting) {
      SamplingParams p;
      p.temperature = setting == 0 ? 0.0f : 0.6f + 0.2f * setting;
      p.top_k = std::array<int32_t, 6>{0, 1, 5, 40, 64, 20}[setting];
      p.top_p = setting == 5 ? 1.0f : 0.92f;
      p.min_p = setting == 4 ? 0.0f : 0.02f;
      p.seed = 100 * shape + setting;
      p.penalty_last_n = 16;
      // Each penalty alone, then all of them (a repetition penalty on negative logits too).
      p.repeat_penalty = setting % 3 == 0 || setting == 5 ? 1.3f : 1.0f;
      p.frequency_penalty = setting % 3 == 1 || setting == 5 ? 0.4f : 0.0f;
      p.presence_penalty = setting % 3 == 2 || setting == 5 ? 0.7f : 0.0f;
      Sampler full(p, kN), top(p, kN);
      const std::vector<std::pair<int32_t, float>> bias = {
          {3, 2.5f}, {17, -1.0f}, {3, 0.25f}, {kN - 1, 5.0f}, {900, -INFINITY}};
      full.SetLogitBias(bias);
      top.SetLogitBias(bias);
      full.SetBanned({0, 42});
      top.SetBanned({0, 42});
      for (int step = 0; step < 40; ++step) {
        std::vector<float> l = MakeLogits(kN, static_cast<Shape>(shape), rng);
        std::vector<int32_t> known;
        top.EditedTokens({}, &known);
        const DeviceRow d = Reduce(l, known, kTop);
        ASSERT_TRUE(top.CanSampleTop(kTop));
        const int32_t want = full.Sample(l.data());
        const int32_t got = top.SampleTop(d.ids.data(), d.vals.data(), kTop, d.known.data(),
                                          d.known_raw.data(), static_cast<int32_t>(known.size()));
        ASSERT_EQ(got, want) << "shape " << shape << " setting " << setting << " step " << step;
        ++draws;
        edited_draws += std::find(known.begin(), known.end(), got) != known.end();
        if (shape != static_cast<int>(Shape::kHoles)) {  // logprobs of rows without NaN
          const engine::TokenLogprob a = engine::SequenceSampler::Logprobs(l.data(), kN, got, 20);
          const engine::TokenLogprob b = engine::SequenceSampler::Logprobs(d.Row(), got, 20);
          ASSERT_EQ(a.token, b.token);
          EXPECT_NEAR(a.logprob, b.logprob, 1e-5);
          max_err = std::max(max_err, std::abs(double(a.logprob) - b.logprob));
          ASSERT_EQ(a.top.size(), b.top.size());
          for (size_t i = 0; i < a.top.size(); ++i) {
            EXPECT_EQ(a.top[i].first, b.top[i].first) << i;
            EXPECT_NEAR(a.top[i].second, b.top[i].second, 1e-5) << i;
          }
        }
        full.Accept(got);
        top.Accept(got);
      }
    }
  }
  EXPECT_EQ(draws, 4 * 6 * 40);
  EXPECT_GT(edited_draws, 20) << "the edits should matter to some draws";
  std::printf("%d draws (%d of an edited token), logprob error <= %.2g\n", draws, edited_draws,
              max_err);
}

// SampleReduced on rows whose sampler edits tokens (logit bias, bans, each penalty): given the
// edited tokens' raw logits beside the best 64 of the rest, with that rest's max and log-sum-exp
// (as the device reduces them), and falling back to the whole row when it returns -1, it draws
// seed for seed what Sample draws from the whole row, token by token with each drawn token
// accepted into the penalty window, at temperatures 0.5..1.5 with top-p and min-p. The bias
// lifts a token from far down the row above the best 64 and the ban takes the best token away,
// so known tokens fall on both sides of the 64th. On peaked rows most draws are decided.
TEST(Sampler, SampleReducedWithEditsDrawsWhatTheWholeRowDraws) {
  std::mt19937 rng(2027);
  constexpr int32_t kN = 4000, kTop = 64;
  int64_t draws = 0, fallbacks = 0, peaked_draws = 0, peaked_fallbacks = 0, edited = 0;
  for (int shape = 0; shape < 5; ++shape) {
    for (int setting = 0; setting < 6; ++setting) {
      SamplingParams p = Plain();
      p.temperature = std::array<float, 6>{1.0f, 0.5f, 1.5f, 1.0f, 0.8f, 1.2f}[setting];
      p.top_p = setting == 3 ? 0.9f : 1.0f;
      p.min_p = setting == 4 ? 0.05f : 0.0f;
      p.seed = 1000 * shape + setting;
      p.penalty_last_n = 16;
      p.repeat_penalty = setting % 3 == 0 ? 1.3f : 1.0f;
      p.frequency_penalty = setting % 3 == 1 ? 0.4f : 0.0f;
      p.presence_penalty = setting % 3 == 2 || setting == 5 ? 0.7f : 0.0f;
      Sampler full(p, kN), reduced(p, kN);
      ASSERT_TRUE(reduced.CanSampleReduced());
      for (int step = 0; step < 40; ++step) {
        const std::vector<float> l = MakeLogits(kN, static_cast<Shape>(shape), rng);
        // The row's best banned; a token from far down lifted to the 4th place, one to the
        // 64th (the boundary of the device's list), one of the best 10 pushed down: known
        // tokens on both sides of the 64th. Both samplers the same edits.
        const std::vector<int32_t> order = BestFirst(l);
        const auto v = [&](int32_t id) { return std::isnan(l[id]) ? -INFINITY : l[id]; };
        const int32_t low = order[1000 + rng() % 2000], low2 = order[1000 + rng() % 2000];
        const auto lift = [&](int32_t id, int rank) {
          return std::isfinite(v(order[rank])) && std::isfinite(v(id))
                     ? v(order[rank]) - v(id) + 1e-3f
                     : 1.0f;
        };
        const std::vector<std::pair<int32_t, float>> bias = {
            {low, lift(low, 3)}, {low2, lift(low2, 63)}, {order[1 + rng() % 9], -3.0f}};
        for (Sampler* s : {&full, &reduced}) {
          s->SetLogitBias(bias);
          s->SetBanned({order[0]});
        }
        std::vector<int32_t> known;
        reduced.EditedTokens({}, &known);
        const DeviceRow d = Reduce(l, known, kTop);
        const int32_t want = full.Sample(l.data());
        int32_t got =
            reduced.SampleReduced(d.ids.data(), d.vals.data(), kTop, d.max, d.lse, d.known.data(),
                                  d.known_raw.data(), static_cast<int32_t>(known.size()));
        ++draws;
        peaked_draws += shape == static_cast<int>(Shape::kLlm);
        if (got < 0) {
          ++fallbacks;
          peaked_fallbacks += shape == static_cast<int>(Shape::kLlm);
          got = reduced.Sample(l.data());
        }
        ASSERT_EQ(got, want) << "shape " << shape << " setting " << setting << " step " << step;
        // A fallback took back its draw: the count a device's chained draws resume at is the
        // whole row's (draws()).
        ASSERT_EQ(reduced.draws(), full.draws()) << "shape " << shape << " step " << step;
        edited += std::find(known.begin(), known.end(), got) != known.end();
        full.Accept(got);
        reduced.Accept(got);
      }
    }
  }
  std::printf(
      "SampleReduced with edits: %lld of %lld draws fell back (peaked rows: %lld of %lld); "
      "%lld drew an edited token\n",
      static_cast<long long>(fallbacks), static_cast<long long>(draws),
      static_cast<long long>(peaked_fallbacks), static_cast<long long>(peaked_draws),
      static_cast<long long>(edited));
  EXPECT_EQ(draws, 5 * 6 * 40);
  EXPECT_LT(peaked_fallbacks * 4, peaked_draws);
  EXPECT_GT(edited, 20) << "the edited tokens should be drawn at times";
}

// Where the known tokens below the device's list carry much of the row's mass, SampleReduced
// must count them in the rest (else its bracket of the total is far off and it decides draws
// wrongly), and where a known token is the edited row's maximum, the weights and min-p are taken
// against it. A row of 300: 64 tokens at 2.0 (the list), 100 known tokens at 1.9 (a bias of 0:
// edited, so known; 58% of the mass), one known token lifted to 5.0 in some settings, the rest
// at -10. Every draw against Sample on the whole row, at temperatures 0.7, 1 and 1.4, with and
// without min-p.
TEST(Sampler, SampleReducedCountsTheKnownTokensBelowTheList) {
  constexpr int32_t kN = 300, kTop = 64;
  std::vector<float> l(kN, -10.0f);
  std::vector<std::pair<int32_t, float>> bias;
  for (int32_t id = 0; id < kN; ++id) {
    if (id % 3 == 0 && bias.size() < 100) {
      l[id] = 1.9f;
      bias.emplace_back(id, 0.0f);
    } else if (id % 3 == 1 && id < 200) {
      l[id] = 2.0f;
    }
  }
  int64_t decided = 0;
  for (int lifted = 0; lifted < 2; ++lifted) {
    for (float temp : {0.7f, 1.0f, 1.4f}) {
      for (float min_p : {0.0f, 0.05f}) {
        SamplingParams p = Plain();
        p.temperature = temp;
        p.min_p = min_p;
        p.seed = static_cast<uint64_t>(100 * lifted + 10 * temp + 1000 * min_p);
        std::vector<std::pair<int32_t, float>> b = bias;
        if (lifted) b.emplace_back(4, 3.0f);  // a token at 2.0 lifted to 5.0: the edited max
        Sampler full(p, kN), reduced(p, kN);
        full.SetLogitBias(b);
        reduced.SetLogitBias(b);
        ASSERT_TRUE(reduced.CanSampleReduced());
        std::vector<int32_t> known;
        reduced.EditedTokens({}, &known);
        const DeviceRow d = Reduce(l, known, kTop);
        ASSERT_EQ(d.vals[kTop - 1], 2.0f);  // the list: 64 of the tokens at 2.0
        for (int draw = 0; draw < 200; ++draw) {
          const int32_t want = full.Sample(l.data());
          int32_t got =
              reduced.SampleReduced(d.ids.data(), d.vals.data(), kTop, d.max, d.lse, d.known.data(),
                                    d.known_raw.data(), static_cast<int32_t>(known.size()));
          decided += got >= 0;
          if (got < 0) got = reduced.Sample(l.data());
          ASSERT_EQ(got, want) << "lifted " << lifted << " T " << temp << " min_p " << min_p
                               << " draw " << draw;
        }
      }
    }
  }
  // Of 2400 draws, those that land in the list's 64 or on the lifted token are decided: 896 here
  // (~37%); leaving the known tokens' mass out of the rest's lower bound (safe, but a wider
  // bracket) decides 760.
  std::printf("SampleReduced decided %lld of 2400 draws\n", static_cast<long long>(decided));
  EXPECT_GT(decided, 850);
}

// How often SampleReduced must fall back on LLM-like rows (a 128k vocabulary, a decaying head of
// 40 tokens 15-18 nats above a N(0, 1) background, so that the best 64 hold over 95% of the mass)
// at the OpenAI default (T = 1, no top-k, top-p 1). Sample walks the best 64 first, so a draw is
// decided unless u lands (a) past the best 64: probability (R + margin) / Z, R the tail's mass,
// or (b) within reach of one of the 65 interval ends (0, the 63 between candidates, the head's
// end): each loses at most 2 margins (2e-4 of the mass) plus the lse's uncertainty band (under
// 2e-4 of the mass for 128k tokens), so 65 * 4e-4 in all. The bound is computed from the rows;
// the count may exceed its expectation by 4 binomial sigmas. Every draw equals Sample's.
TEST(SampleReduced, FallsBackOnlyInTheTailOnLlmLikeRows) {
  constexpr int32_t kVocab = 128256, kTop = 64, kRows = 16, kDrawsPerRow = 100;
  std::mt19937 rng(28);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> top(15.0f, 18.0f), slope(0.2f, 0.6f);
  double expected = 0.0;
  int64_t draws = 0, fallbacks = 0;
  std::vector<float> l(kVocab);
  std::vector<int32_t> ids(kVocab);
  for (int row = 0; row < kRows; ++row) {
    for (float& x : l) x = g(rng);
    const float t = top(rng), s = slope(rng);
    for (int k = 0; k < 40; ++k) l[rng() % kVocab] = t - s * static_cast<float>(k);
    for (int32_t i = 0; i < kVocab; ++i) ids[i] = i;
    std::partial_sort(ids.begin(), ids.begin() + kTop, ids.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    std::vector<float> vals(kTop);
    for (int32_t i = 0; i < kTop; ++i) vals[i] = l[ids[i]];
    const float max = vals[0];
    double z = 0.0, head = 0.0;
    for (float x : l) z += std::exp(static_cast<double>(x) - max);
    for (float x : vals) head += std::exp(static_cast<double>(x) - max);
    const double tail = 1.0 - head / z;
    ASSERT_LT(tail, 0.05) << "row " << row;  // the rows are as peaked as stated
    const double bound = tail + Sampler::kReducedMargin + 65 * 4e-4;
    expected += bound * kDrawsPerRow;
    SamplingParams p = Plain();
    p.seed = 500 + row;
    Sampler full(p, kVocab), reduced(p, kVocab);
    const float lse = static_cast<float>(max + std::log(z));
    for (int d = 0; d < kDrawsPerRow; ++d) {
      int32_t got = reduced.SampleReduced(ids.data(), vals.data(), kTop, max, lse);
      ++draws;
      if (got < 0) {
        ++fallbacks;
        got = reduced.Sample(l.data());
      }
      ASSERT_EQ(got, full.Sample(l.data())) << "row " << row << " draw " << d;
    }
  }
  std::printf("LLM-like 128k rows at T = 1: %lld of %lld draws fell back (bound %.1f)\n",
              static_cast<long long>(fallbacks), static_cast<long long>(draws), expected);
  ASSERT_LT(expected / static_cast<double>(draws), 0.05);  // the rows keep the bound under 5%
  EXPECT_LE(static_cast<double>(fallbacks), expected + 4.0 * std::sqrt(expected));
}

// A sampled chain's edits (engine::ChainEditsFor) are the sampler's as it stands: its bias in
// order, then each other window token once, with its count in the window; the window oldest
// first, also once the ring has wrapped (the oldest token is the next overwritten). The room a
// forward's list of known tokens leaves (ChainKnownRoom) shrinks with the listed tokens, by one
// a step with penalties; a bias listing a token twice cannot chain (Sample() adds its values one
// at a time, a device their sum).
TEST(ChainEditsTest, FollowTheSamplersBiasAndWindow) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.presence_penalty = 0.5f;
  p.penalty_last_n = 4;
  Sampler s(p, 100);
  s.SetLogitBias({{7, 2.0f}, {3, -1.0f}});
  s.SetBanned({99});
  for (int32_t t : {1, 2, 3, 2, 5, 2}) s.Accept(t);  // the ring keeps 3, 2, 5, 2
  std::vector<int32_t> window;
  s.PenaltyWindow(&window);
  EXPECT_EQ(window, (std::vector<int32_t>{3, 2, 5, 2}));
  engine::ChainEditsHeld held;
  const model::ChainEdits e = engine::ChainEditsFor(s, &held);
  EXPECT_EQ(std::vector<int32_t>(e.ids.begin(), e.ids.end()), (std::vector<int32_t>{7, 3, 2, 5}));
  EXPECT_EQ(std::vector<float>(e.bias.begin(), e.bias.end()),
            (std::vector<float>{2.0f, -1.0f, 0.0f, 0.0f}));
  EXPECT_EQ(std::vector<int32_t>(e.counts.begin(), e.counts.end()),
            (std::vector<int32_t>{0, 1, 2, 1}));
  EXPECT_EQ(std::vector<int32_t>(e.window.begin(), e.window.end()), window);
  EXPECT_EQ(e.last_n, 4);
  EXPECT_EQ(e.presence_penalty, 0.5f);
  EXPECT_TRUE(s.CanChainSample(64));
  // 4 listed + the ban = 5; one a step with penalties.
  EXPECT_EQ(engine::ChainKnownRoom(s, 5), 0);
  EXPECT_EQ(engine::ChainKnownRoom(s, 20), 15);
  EXPECT_EQ(engine::ChainKnownRoom(s, 4), 0);
  // Without penalties the list does not grow: any room once it fits.
  SamplingParams q = p;
  q.presence_penalty = 0.0f;
  Sampler b(q, 100);
  b.SetLogitBias({{7, 2.0f}});
  EXPECT_EQ(engine::ChainKnownRoom(b, 1), model::kMaxSampledChainSteps);
  EXPECT_EQ(engine::ChainKnownRoom(b, 0), 0);
  const model::ChainEdits be = engine::ChainEditsFor(b, &held);
  EXPECT_EQ(be.last_n, 0);
  EXPECT_TRUE(be.window.empty());
  // Greedy: chained only with bias or penalties (else the arg-max chain).
  SamplingParams g = q;
  g.temperature = 0.0f;
  EXPECT_FALSE(Sampler(g, 100).CanChainSample(64));
  Sampler gb(g, 100);
  gb.SetLogitBias({{7, 2.0f}});
  EXPECT_TRUE(gb.CanChainSample(64));
  gb.SetLogitBias({{7, 2.0f}, {7, 1.0f}});
  EXPECT_FALSE(gb.CanChainSample(64));
  // The counts the sampler keeps as tokens enter and leave its window are the window's.
  SamplingParams w = p;
  w.penalty_last_n = 50;
  Sampler r(w, 100);
  std::mt19937 rng(3);
  for (int i = 0; i < 1000; ++i) {
    r.Accept(static_cast<int32_t>(rng() % 20));
    if (i % 97 != 0) continue;
    r.PenaltyWindow(&window);
    std::map<int32_t, int32_t> want;
    for (int32_t t : window) ++want[t];
    const std::map<int32_t, int32_t> got(r.window_counts().begin(), r.window_counts().end());
    ASSERT_EQ(got, want) << "after " << i + 1 << " tokens";
  }
  r.Reset();
  EXPECT_TRUE(r.window_counts().empty());
}

}  // namespace
}  // namespace uf::sampling
