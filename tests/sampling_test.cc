#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

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

}  // namespace
}  // namespace uf::sampling
