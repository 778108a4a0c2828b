#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "alloc_counter.h"
#include "kernels/matmul.h"
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

// Logits whose softmax is exactly `probs`.
std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::vector<double> Frequencies(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < n; ++i) f[s.Sample(logits.data())] += 1.0 / n;
  return f;
}

// With N draws a frequency has standard deviation sqrt(p (1 - p) / N) <= 0.5 / sqrt(N); for
// N = 200000 that is 0.0011, so 0.006 is more than 5 sigma (no flakiness with a fixed seed anyway,
// but a different seed must pass too).
constexpr int kDraws = 200000;
constexpr double kFreqTol = 0.006;

TEST(SamplingParams, ValidateRejectsBadValues) {
  SamplingParams p;
  EXPECT_TRUE(p.Validate().ok());
  p.temperature = -1;
  EXPECT_FALSE(p.Validate().ok());
  p = SamplingParams();
  p.top_p = 0;
  EXPECT_FALSE(p.Validate().ok());
  p = SamplingParams();
  p.min_p = 1.5f;
  EXPECT_FALSE(p.Validate().ok());
  p = SamplingParams();
  p.repeat_penalty = 0;
  EXPECT_FALSE(p.Validate().ok());
  p = SamplingParams();
  p.frequency_penalty = NAN;
  EXPECT_FALSE(p.Validate().ok());
  p = SamplingParams();
  p.penalty_last_n = -2;
  EXPECT_FALSE(p.Validate().ok());
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p = Plain();
  p.temperature = 0;
  Sampler s(p, 5);
  std::vector<float> l = {0.1f, 3.0f, -2.0f, 3.0f, 2.9f};
  EXPECT_EQ(s.Sample(l.data()), 1);
  l[4] = 3.5f;
  EXPECT_EQ(s.Sample(l.data()), 4);
}

TEST(Sampler, NanLogitsNeverChosen) {
  // 40 logits so the blocked scans (16 at a time) and their tails both see NaNs.
  std::vector<float> l(40, NAN);
  l[37] = 0.0f;
  l[5] = -1.0f;
  for (int mode = 0; mode < 3; ++mode) {
    SamplingParams p = Plain();
    if (mode == 1) p.top_k = 3;
    if (mode == 2) p.temperature = 0;
    Sampler s(p, l.size());
    for (int i = 0; i < 100; ++i) {
      const int32_t t = s.Sample(l.data());
      EXPECT_TRUE(t == 37 || t == 5) << "mode " << mode << " picked " << t;
    }
  }
}

// A broken model row (+inf, every token NaN or masked) must still give a token id in range on
// every path, never a crash or a read past the row.
TEST(Sampler, DegenerateRowsGiveATokenInRange) {
  const int32_t n = 1000;
  std::vector<std::vector<float>> rows(3, std::vector<float>(n, 0.5f));
  rows[0][17] = INFINITY, rows[0][900] = INFINITY;
  std::fill(rows[1].begin(), rows[1].end(), NAN);
  std::fill(rows[2].begin(), rows[2].end(), -INFINITY);
  for (int mode = 0; mode < 5; ++mode) {
    SamplingParams p = Plain();
    if (mode == 1) p.top_k = 10;
    if (mode == 2) p.top_p = 0.5f;
    if (mode == 3) p.min_p = 0.1f, p.top_k = 10, p.top_p = 0.9f;
    if (mode == 4) p.temperature = 0;
    Sampler s(p, n);
    for (const auto& row : rows) {
      const int32_t t = s.Sample(row.data());
      EXPECT_GE(t, 0) << mode;
      EXPECT_LT(t, n) << mode;
      s.Filter(row.data());
      EXPECT_FALSE(s.candidates().empty()) << mode;
    }
  }
}

TEST(Sampler, MatchesSoftmaxDistribution) {
  const std::vector<double> probs = {0.5, 0.25, 0.15, 0.07, 0.03};
  Sampler s(Plain(), probs.size());
  const auto f = Frequencies(s, LogitsOf(probs), kDraws);
  for (size_t i = 0; i < probs.size(); ++i) EXPECT_NEAR(f[i], probs[i], kFreqTol) << i;
}

TEST(Sampler, TemperatureSharpens) {
  // T = 0.5 squares the probabilities before renormalising.
  const std::vector<double> probs = {0.5, 0.3, 0.2};
  SamplingParams p = Plain();
  p.temperature = 0.5f;
  Sampler s(p, probs.size());
  const double z = 0.25 + 0.09 + 0.04;
  const auto f = Frequencies(s, LogitsOf(probs), kDraws);
  EXPECT_NEAR(f[0], 0.25 / z, kFreqTol);
  EXPECT_NEAR(f[1], 0.09 / z, kFreqTol);
  EXPECT_NEAR(f[2], 0.04 / z, kFreqTol);
}

TEST(Sampler, TopKKeepsKBestRenormalised) {
  const std::vector<double> probs = {0.1, 0.4, 0.05, 0.3, 0.15};
  SamplingParams p = Plain();
  p.top_k = 2;
  Sampler s(p, probs.size());
  s.Filter(LogitsOf(probs).data());
  ASSERT_EQ(s.candidates().size(), 2u);
  EXPECT_EQ(s.candidates()[0].id, 1);
  EXPECT_EQ(s.candidates()[1].id, 3);
  EXPECT_NEAR(s.candidates()[0].p, 0.4 / 0.7, 1e-6);
  EXPECT_NEAR(s.candidates()[1].p, 0.3 / 0.7, 1e-6);
  const auto f = Frequencies(s, LogitsOf(probs), kDraws);
  EXPECT_EQ(f[0] + f[2] + f[4], 0.0);
  EXPECT_NEAR(f[1], 0.4 / 0.7, kFreqTol);
}

TEST(Sampler, TopKMatchesFullSortOnLargeVocabWithTies) {
  std::vector<float> l(5000);
  std::mt19937 gen(7);
  for (float& x : l) x = static_cast<float>(gen() % 300) / 10.0f;  // many exact ties
  SamplingParams p = Plain();
  p.top_k = 100;
  Sampler s(p, l.size());
  s.Filter(l.data());
  std::vector<int32_t> order(l.size());
  for (size_t i = 0; i < l.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  ASSERT_EQ(s.candidates().size(), 100u);
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(s.candidates()[i].id, order[i]) << i;
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  const std::vector<double> probs = {0.05, 0.5, 0.15, 0.3};
  SamplingParams p = Plain();
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.5 + 0.3
  Sampler s(p, probs.size());
  s.Filter(LogitsOf(probs).data());
  ASSERT_EQ(s.candidates().size(), 2u);
  EXPECT_EQ(s.candidates()[0].id, 1);
  EXPECT_EQ(s.candidates()[1].id, 3);
  EXPECT_NEAR(s.candidates()[0].p, 0.5 / 0.8, 1e-6);
  p.top_p = 0.85f;  // needs the third token too
  Sampler s2(p, probs.size());
  s2.Filter(LogitsOf(probs).data());
  EXPECT_EQ(s2.candidates().size(), 3u);
  p.top_p = 0.4f;  // the best token alone
  Sampler s3(p, probs.size());
  s3.Filter(LogitsOf(probs).data());
  ASSERT_EQ(s3.candidates().size(), 1u);
  EXPECT_EQ(s3.candidates()[0].id, 1);
}

TEST(Sampler, TopPMeasuresMassAfterTopK) {
  // After top-k = 2 the set is {0.5, 0.3} renormalised to {0.625, 0.375}: top-p 0.6 keeps one.
  const std::vector<double> probs = {0.5, 0.3, 0.2};
  SamplingParams p = Plain();
  p.top_k = 2;
  p.top_p = 0.6f;
  Sampler s(p, probs.size());
  s.Filter(LogitsOf(probs).data());
  EXPECT_EQ(s.candidates().size(), 1u);
}

TEST(Sampler, MinPDropsTokensBelowFractionOfBest) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  SamplingParams p = Plain();
  p.min_p = 0.35f;  // threshold 0.175: keeps 0.5 and 0.3
  Sampler s(p, probs.size());
  s.Filter(LogitsOf(probs).data());
  ASSERT_EQ(s.candidates().size(), 2u);
  EXPECT_NEAR(s.candidates()[0].p, 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(s.candidates()[1].p, 0.3 / 0.8, 1e-6);
  p.min_p = 0.25f;  // threshold 0.125: keeps three
  Sampler s2(p, probs.size());
  s2.Filter(LogitsOf(probs).data());
  EXPECT_EQ(s2.candidates().size(), 3u);
}

TEST(Sampler, RepeatPenaltyDividesPositiveMultipliesNegative) {
  SamplingParams p = Plain();
  p.temperature = 0;
  p.repeat_penalty = 1.25f;
  Sampler s(p, 4);
  s.Accept(0);
  s.Accept(2);
  std::vector<float> l = {2.0f, 1.7f, -1.0f, -1.2f};
  // Token 0: 2.0 / 1.25 = 1.6 < 1.7, so token 1 wins.
  EXPECT_EQ(s.Sample(l.data()), 1);
  // Token 2: -1.0 * 1.25 = -1.25 < -1.2.
  std::vector<float> neg = {-5.0f, -5.0f, -1.0f, -1.2f};
  EXPECT_EQ(s.Sample(neg.data()), 3);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesExactValues) {
  SamplingParams p = Plain();
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p, 3);
  for (int32_t t : {1, 1, 1, 2}) s.Accept(t);
  const std::vector<float> l = {0.0f, 2.0f, 1.0f};
  s.Filter(l.data());
  // Token 1: 2 - 0.5 - 3 * 0.25 = 0.75; token 2: 1 - 0.5 - 0.25 = 0.25; token 0: 0.
  std::map<int32_t, float> got;
  for (const auto& c : s.candidates()) got[c.id] = c.logit;
  EXPECT_NEAR(got[1], 0.75f, 1e-6);
  EXPECT_NEAR(got[2], 0.25f, 1e-6);
  EXPECT_NEAR(got[0], 0.0f, 1e-6);
  const double z = std::exp(0.75) + std::exp(0.25) + 1.0;
  EXPECT_NEAR(s.candidates()[0].p, std::exp(0.75) / z, 1e-6);
}

TEST(Sampler, PenaltiesOnlySeeTheWindow) {
  SamplingParams p = Plain();
  p.temperature = 0;
  p.presence_penalty = 10.0f;
  p.penalty_last_n = 2;
  Sampler s(p, 4);
  const std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f};
  s.Accept(0);
  EXPECT_EQ(s.Sample(l.data()), 1);  // 0 penalised
  s.Accept(1);
  EXPECT_EQ(s.Sample(l.data()), 2);  // 0 and 1 penalised
  s.Accept(2);                       // 0 leaves the window
  EXPECT_EQ(s.Sample(l.data()), 0);
  s.Reset();
  EXPECT_EQ(s.Sample(l.data()), 0);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferent) {
  std::vector<float> l(1000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(static_cast<float>(i)) * 2.0f;
  SamplingParams p;  // defaults: temperature, top-k, top-p, min-p all on
  p.seed = 42;
  auto run = [&](const SamplingParams& params) {
    Sampler s(params, l.size());
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) {
      out.push_back(s.Sample(l.data()));
      s.Accept(out.back());
    }
    return out;
  };
  const auto a = run(p), b = run(p);
  EXPECT_EQ(a, b);
  p.seed = 43;
  EXPECT_NE(a, run(p));
}

TEST(Sampler, UniformIsInUnitIntervalAndUnbiased) {
  Sampler s(Plain(), 2);
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = s.NextUniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  // Mean of 1e5 uniforms: sd = 0.289 / sqrt(1e5) = 0.0009.
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
}

TEST(Sampler, KnownSequenceForSeed) {
  // mt19937_64 is fully specified by the C++ standard, so draws are portable as long as the
  // conversion to [0, 1) is ours: the top 53 bits of one output, scaled by 2^-53.
  SamplingParams p = Plain();
  p.seed = 5489;
  Sampler s(p, 2);
  std::mt19937_64 ref(5489);
  EXPECT_EQ(s.NextUniform(), static_cast<double>(ref() >> 11) * 0x1.0p-53);
}

// PeekUniforms gives the next draws (as floats) without taking them: a device draws with them
// ahead of the host (a sampled chain), and the host's own draws must then be those.
TEST(Sampler, PeekUniformsAreTheNextDrawsUntaken) {
  SamplingParams p = Plain();
  p.seed = 11;
  Sampler s(p, 2);
  s.NextUniform();
  std::vector<float> ahead(5);
  s.PeekUniforms(5, ahead.data());
  std::vector<float> again(5);
  s.PeekUniforms(5, again.data());
  EXPECT_EQ(ahead, again);
  EXPECT_EQ(s.draws(), 1);
  for (float u : ahead) EXPECT_EQ(static_cast<float>(s.NextUniform()), u);
  EXPECT_EQ(s.draws(), 6);
  s.PeekUniforms(1, again.data());
  EXPECT_NE(again[0], ahead[4]);
  s.Reset();
  EXPECT_EQ(s.draws(), 0);
}

// Draws without top-k map the uniform u onto the row's 64 best tokens first (best first: higher
// logit, then lower id), then onto the others in id order: a reference walk in double, on a row
// of 1,000 with ties, gives the same token for u away (1e-6) from the interval ends.
TEST(Sampler, DrawWalksTheBestSixtyFourFirstThenIdOrder) {
  std::mt19937 rng(64);
  std::normal_distribution<float> g(0.0f, 1.5f);
  std::vector<float> l(1000);
  for (float& x : l) x = std::round(g(rng) * 8.0f) / 8.0f;  // ties
  std::vector<int32_t> order(l.size());
  for (size_t i = 0; i < l.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  std::sort(order.begin() + 64, order.end());
  const float max = l[order[0]];
  for (float temp : {1.0f, 0.7f}) {
    std::vector<double> w(l.size());
    double z = 0.0;
    for (size_t i = 0; i < l.size(); ++i) z += w[i] = std::exp((l[i] - max) / temp);
    int checked = 0;
    for (uint64_t seed = 0; seed < 300; ++seed) {
      SamplingParams p = Plain();
      p.temperature = temp;
      p.seed = seed;
      std::mt19937_64 ref(seed);
      const double target = static_cast<double>(ref() >> 11) * 0x1.0p-53 * z;
      double cum = 0.0;
      int32_t want = -1;
      bool near_end = false;
      for (int32_t id : order) {
        near_end |= std::abs(target - cum) < 1e-6 * z;
        cum += w[id];
        if (target < cum) {
          want = id;
          near_end |= cum - target < 1e-6 * z;
          break;
        }
      }
      if (near_end || want < 0) continue;
      ++checked;
      EXPECT_EQ(Sampler(p, 1000).Sample(l.data()), want) << "T " << temp << " seed " << seed;
    }
    EXPECT_GT(checked, 290);
  }
}

// ---------------------------------------------------------------------------------------------
// The chain against a reference that does everything the slow, obvious way: a copy of the
// logits with bias, bans and penalties applied, a full sort, top-k, min-p on the logits, top-p
// as the shortest sorted prefix reaching the mass (against the top-k set's normaliser, in
// double), then temperature. Filter() must keep the same set with the same probabilities; the
// only latitude is a token whose cumulative mass sits within rounding of top_p itself.

struct RefResult {
  std::vector<int32_t> ids;   // kept, best first
  std::vector<double> p;      // their probabilities
  double boundary_slack = 0;  // |cum - top_p| at the last kept token (top-p decided the cut)
};

RefResult Reference(std::vector<float> l, const SamplingParams& sp,
                    const std::vector<std::pair<int32_t, float>>& bias,
                    const std::vector<int32_t>& banned, const std::vector<int32_t>& window) {
  const int32_t n = static_cast<int32_t>(l.size());
  for (const auto& [id, b] : bias) l[id] += b;
  if (sp.penalties()) {
    std::map<int32_t, int> counts;
    for (int32_t t : window) ++counts[t];
    for (const auto& [t, c] : counts) {
      float& v = l[t];
      v = v <= 0.0f ? v * sp.repeat_penalty : v / sp.repeat_penalty;
      v -= static_cast<float>(c) * sp.frequency_penalty + sp.presence_penalty;
    }
  }
  for (int32_t id : banned) l[id] = -INFINITY;
  std::vector<int32_t> order;
  for (int32_t i = 0; i < n; ++i) {
    if (!std::isnan(l[i])) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  if (sp.top_k > 0 && sp.top_k<n&& static_cast<int32_t>(order.size())> sp.top_k) {
    order.resize(sp.top_k);
  }
  RefResult r;
  if (order.empty() || l[order[0]] == -INFINITY) return r;  // everything masked
  const double max = l[order[0]];
  double z = 0;
  for (int32_t id : order) z += std::exp(l[id] - max);
  if (sp.min_p > 0) {
    const float threshold = static_cast<float>(max) + std::log(sp.min_p);
    std::erase_if(order, [&](int32_t id) { return l[id] < threshold; });
  }
  if (sp.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      cum += std::exp(l[order[i]] - max) / z;
      if (cum >= sp.top_p) {
        r.boundary_slack =
            std::min(cum - sp.top_p, sp.top_p - (cum - std::exp(l[order[i]] - max) / z));
        order.resize(i + 1);
        break;
      }
    }
  }
  double total = 0;
  for (int32_t id : order) total += std::exp((l[id] - max) / sp.temperature);
  for (int32_t id : order) {
    if (std::exp((l[id] - max) / sp.temperature) / total == 0.0) continue;  // no mass: no token
    r.ids.push_back(id);
    r.p.push_back(std::exp((l[id] - max) / sp.temperature) / total);
  }
  return r;
}

enum class Shape { kFlat, kPeaked, kTies, kHoles };

std::vector<float> MakeLogits(int32_t n, Shape shape, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, shape == Shape::kPeaked ? 4.0f : 0.7f);
  std::vector<float> l(n);
  for (float& x : l) x = g(rng);
  if (shape == Shape::kTies) {
    for (float& x : l) x = std::round(x * 4.0f) / 4.0f;  // many exact ties
  }
  if (shape == Shape::kHoles) {
    for (int32_t i = 0; i < n; i += 7) l[i] = (i % 2) ? NAN : -INFINITY;
  }
  return l;
}

TEST(SamplerReference, FilterKeepsTheReferenceSetOnRandomCases) {
  std::mt19937 rng(20261204);
  const int32_t kSizes[] = {1, 5, 17, 100, 1000, 5000, 40000};
  const int32_t kTopK[] = {0, 1, 3, 40, 2000};
  const float kTopP[] = {1.0f, 0.99f, 0.9f, 0.5f, 0.1f};
  const float kMinP[] = {0.0f, 0.05f, 0.3f};
  const float kTemp[] = {1.0f, 0.7f, 1.6f};
  int cases = 0, boundary_cases = 0;
  for (int32_t n : kSizes) {
    for (int shape = 0; shape < 4; ++shape) {
      for (int rep = 0; rep < 6; ++rep) {
        SamplingParams sp;
        sp.top_k = kTopK[rng() % 5];
        sp.top_p = kTopP[rng() % 5];
        sp.min_p = kMinP[rng() % 3];
        sp.temperature = kTemp[rng() % 3];
        sp.seed = rng();
        std::vector<std::pair<int32_t, float>> bias;
        std::vector<int32_t> banned, window;
        if (rep % 3 == 1) {
          bias = {{static_cast<int32_t>(rng() % n), 3.0f},
                  {static_cast<int32_t>(rng() % n), -2.0f}};
          banned = {static_cast<int32_t>(rng() % n)};
        }
        if (rep % 3 == 2) {
          sp.repeat_penalty = 1.3f;
          sp.presence_penalty = 0.4f;
          sp.frequency_penalty = 0.2f;
          sp.penalty_last_n = 64;
          for (int i = 0; i < 80; ++i) window.push_back(rng() % std::min(n, 300));
        }
        const std::vector<float> l = MakeLogits(n, static_cast<Shape>(shape), rng);
        Sampler s(sp, n);
        s.SetLogitBias(bias);
        s.SetBanned(banned);
        for (int32_t t : window) s.Accept(t);
        const std::vector<int32_t> window_kept(window.end() - std::min<size_t>(window.size(), 64),
                                               window.end());
        RefResult ref = Reference(l, sp, bias, banned, window_kept);
        if (ref.ids.empty()) continue;  // everything masked: covered by NanLogitsNeverChosen
        s.Filter(l.data());
        std::map<int32_t, double> got;
        for (const auto& c : s.candidates()) {
          if (c.p > 0) got[c.id] = c.p;
        }
        std::map<int32_t, double> want;
        for (size_t i = 0; i < ref.ids.size(); ++i) want[ref.ids[i]] = ref.p[i];
        ++cases;
        const std::string where = "n=" + std::to_string(n) + " shape=" + std::to_string(shape) +
                                  " rep=" + std::to_string(rep) + " k=" + std::to_string(sp.top_k) +
                                  " p=" + std::to_string(sp.top_p) +
                                  " min_p=" + std::to_string(sp.min_p);
        if (got.size() != want.size()) {
          // Only the token at the top-p boundary may differ, and only when its cumulative mass
          // is within float rounding (1e-5) of top_p.
          const size_t diff =
              got.size() > want.size() ? got.size() - want.size() : want.size() - got.size();
          EXPECT_EQ(diff, 1u) << where;
          EXPECT_LT(ref.boundary_slack, 1e-5) << where;
          ++boundary_cases;
          continue;
        }
        for (const auto& [id, p] : want) {
          ASSERT_TRUE(got.count(id)) << where << " missing " << id;
          EXPECT_NEAR(got[id], p, 1e-5 + 1e-4 * p) << where << " id " << id;
        }
      }
    }
  }
  EXPECT_GT(cases, 100);
  EXPECT_LE(boundary_cases, 3);
}

// The draw follows the filtered distribution on every path (row draw, kept-set draw, top-k).
TEST(SamplerReference, SampleFrequenciesMatchFilterOnEveryPath) {
  std::mt19937 rng(5);
  std::vector<float> l = MakeLogits(300, Shape::kPeaked, rng);
  for (float& x : l) x *= 0.5f;
  struct Case {
    int32_t top_k;
    float top_p, min_p, temperature;
  } cases[] = {{0, 1.0f, 0.0f, 1.0f},  {0, 1.0f, 0.0f, 0.6f}, {0, 0.8f, 0.0f, 1.0f},
               {0, 0.8f, 0.02f, 1.3f}, {0, 1.0f, 0.1f, 0.8f}, {20, 0.9f, 0.0f, 1.0f}};
  for (const Case& c : cases) {
    SamplingParams sp;
    sp.top_k = c.top_k;
    sp.top_p = c.top_p;
    sp.min_p = c.min_p;
    sp.temperature = c.temperature;
    sp.seed = 77;
    Sampler s(sp, l.size());
    s.SetLogitBias({{3, 1.5f}});
    s.Filter(l.data());
    std::map<int32_t, double> want;
    for (const auto& cand : s.candidates()) want[cand.id] = cand.p;
    std::map<int32_t, double> got;
    constexpr int kN = 200000;
    for (int i = 0; i < kN; ++i) got[s.Sample(l.data())] += 1.0 / kN;
    for (const auto& [id, f] : got) {
      ASSERT_TRUE(want.count(id)) << "drew filtered-out token " << id << " k=" << c.top_k
                                  << " p=" << c.top_p << " min_p=" << c.min_p;
    }
    for (const auto& [id, p] : want) EXPECT_NEAR(got[id], p, kFreqTol) << id;
  }
}

// ---------------------------------------------------------------------------------------------
// Work, counted: these fail if a full sort, a per-token copy of the row or an allocation comes
// back (timing would be flaky on a shared machine; counts are exact).

constexpr int32_t kQwenVocab = 151936;

std::vector<float> QwenSizedRow(Shape shape) {
  std::mt19937 rng(11);
  return MakeLogits(kQwenVocab, shape, rng);
}

TEST(SamplerWork, TemperatureOnlyReadsTheRowTwiceAndSortsNothing) {
  const std::vector<float> l = QwenSizedRow(Shape::kFlat);
  Sampler s(Plain(), kQwenVocab);
  s.Sample(l.data());
  // One max pass, one exp-sum pass, one scan for the 64 best (the draw walks them first), then
  // one 64-token block for the draw.
  EXPECT_LE(s.work().row_reads, 3 * kQwenVocab + 64);
  EXPECT_EQ(s.work().sorted, 0);
  EXPECT_EQ(s.work().gathered, 0);
}

TEST(SamplerWork, TopKTopPMinPTouchesTheRowOnceAndSortsAtMostK) {
  const std::vector<float> l = QwenSizedRow(Shape::kPeaked);
  SamplingParams p = Plain();
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  Sampler s(p, kQwenVocab);
  s.Sample(l.data());
  EXPECT_EQ(s.work().row_reads, kQwenVocab);
  EXPECT_LE(s.work().gathered, 40);
  EXPECT_LE(s.work().sorted, 40);
}

TEST(SamplerWork, TopPOnAFlatRowSortsOnlyTheBoundary) {
  // Random-weight models give nearly flat rows: top-p 0.9 keeps most of the vocabulary, which a
  // sort-based chain sorted in full (~4 ms per token on a 32k vocabulary).
  const std::vector<float> l = QwenSizedRow(Shape::kFlat);
  SamplingParams p = Plain();
  p.top_p = 0.9f;
  Sampler s(p, kQwenVocab);
  s.Sample(l.data());
  EXPECT_GT(s.work().gathered, kQwenVocab / 2);  // the kept set is large ...
  EXPECT_LE(s.work().sorted, 1024);              // ... yet only the tokens at the cut are sorted
  // max, weights, a bracket of cheap masked-sum passes, the gather and the draw's block sums.
  EXPECT_LE(s.work().row_reads, 40LL * kQwenVocab);
}

TEST(SamplerWork, PenaltiesAndBiasPatchBlocksInsteadOfCopyingTheRow) {
  const std::vector<float> l = QwenSizedRow(Shape::kFlat);
  SamplingParams p = Plain();
  p.presence_penalty = 0.5f;
  p.penalty_last_n = 256;
  Sampler s(p, kQwenVocab);
  s.SetLogitBias({{17, 2.0f}, {150000, -1.0f}});
  s.SetBanned({151643, 151645});
  for (int i = 0; i < 256; ++i) s.Accept((i * 7919) % kQwenVocab);
  s.Sample(l.data());
  EXPECT_EQ(s.work().edits, 256 + 4);
  EXPECT_LE(s.work().row_reads, 3 * kQwenVocab + 64);  // as without edits: no copy of the row
}

TEST(SamplerWork, SteadyStateAllocatesNothing) {
  if (!kCountsAllocations) GTEST_SKIP() << "allocations are not counted under AddressSanitizer";
  const std::vector<float> l = QwenSizedRow(Shape::kFlat);
  SamplingParams configs[5] = {Plain(), Plain(), Plain(), Plain(), Plain()};
  configs[1].top_k = 40, configs[1].top_p = 0.95f, configs[1].min_p = 0.05f;
  configs[2].top_p = 0.9f, configs[2].temperature = 0.7f;
  configs[3].min_p = 0.1f;
  configs[4].temperature = 0;
  for (const SamplingParams& p : configs) {
    Sampler s(p, kQwenVocab);
    s.SetLogitBias({{5, 1.0f}});
    s.SetBanned({151643});
    s.Sample(l.data());  // first call: scratch sized here
    s.Sample(l.data());
    const int64_t before = uf::testing_alloc::allocations.load();
    for (int i = 0; i < 20; ++i) s.Sample(l.data());
    EXPECT_EQ(uf::testing_alloc::allocations.load() - before, 0)
        << "top_k " << p.top_k << " top_p " << p.top_p;
  }
}

// Splitting the exp-sum over a pool must not change a seeded stream: block sums are per block
// and the total is summed in block order whatever the split.
TEST(SamplerPool, SameTokensWithAndWithoutAPool) {
  const std::vector<float> l = QwenSizedRow(Shape::kFlat);
  ThreadPool pool(3);
  for (float top_p : {1.0f, 0.9f}) {
    SamplingParams p = Plain();
    p.top_p = top_p;
    p.temperature = 0.9f;
    Sampler with(p, kQwenVocab), without(p, kQwenVocab);
    for (int i = 0; i < 50; ++i) {
      ASSERT_EQ(with.Sample(l.data(), &pool), without.Sample(l.data())) << i;
    }
  }
}

// Every ISA tier this CPU has gives the same chain (the kernels are the only per-tier part).
TEST(SamplerIsa, EveryTierKeepsTheSameSet) {
  const kernels::Isa best = kernels::ActiveIsa();
  const std::vector<float> l = QwenSizedRow(Shape::kFlat);
  SamplingParams p = Plain();
  p.top_p = 0.9f;
  p.min_p = 0.02f;
  std::vector<std::vector<int32_t>> sets;
  for (int isa = 0; isa <= static_cast<int>(best); ++isa) {
    kernels::SetIsaForTesting(static_cast<kernels::Isa>(isa));
    Sampler s(p, kQwenVocab);
    s.Filter(l.data());
    std::vector<int32_t> ids;
    for (const auto& c : s.candidates()) ids.push_back(c.id);
    std::sort(ids.begin(), ids.end());
    sets.push_back(ids);
  }
  kernels::SetIsaForTesting(best);
  for (size_t i = 1; i < sets.size(); ++i) {
    // Exp polynomials differ in the last bits between tiers: the boundary token may differ.
    std::vector<int32_t> diff;
    std::set_symmetric_difference(sets[0].begin(), sets[0].end(), sets[i].begin(), sets[i].end(),
                                  std::back_inserter(diff));
    EXPECT_LE(diff.size(), 1u) << "tier " << i;
    EXPECT_GT(sets[i].size(), 1000u);
  }
}

}  // namespace
}  // namespace uf::sampling
