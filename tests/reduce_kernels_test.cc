// The sampler's row reductions (kernels/ops.h: MaxValue, ExpSum, FirstAbove, IndicesInRange,
// MassAtLeast, MaskedBlockSums) on every ISA tier this CPU has, against plain loops, on lengths
// that exercise every tail (not a multiple of 8, 16 or 64) and rows with NaN and infinities.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace uf::kernels {
namespace {

std::vector<Isa> Tiers() {
  std::vector<Isa> v;
  for (int i = 0; i <= static_cast<int>(ActiveIsa()); ++i) v.push_back(static_cast<Isa>(i));
  return v;
}

class ReduceTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void TearDown() override { SetIsaForTesting(best_); }
  std::vector<float> Row(bool holes) {
    std::mt19937 rng(static_cast<uint32_t>(GetParam()));
    std::normal_distribution<float> g(0.0f, 3.0f);
    std::vector<float> x(GetParam());
    for (float& v : x) v = g(rng);
    if (holes) {
      for (size_t i = 3; i < x.size(); i += 11) x[i] = (i % 2) ? NAN : -INFINITY;
    }
    return x;
  }
  const Isa best_ = ActiveIsa();
};

TEST_P(ReduceTest, MaxAndFirstAboveMatchLoops) {
  const int64_t n = GetParam();
  const std::vector<float> x = Row(true);
  float want = -INFINITY;
  for (float v : x) want = v > want ? v : want;
  for (Isa isa : Tiers()) {
    SetIsaForTesting(isa);
    EXPECT_EQ(MaxValue(x.data(), n), want) << IsaName(isa);
    for (float t : {-1e9f, -1.0f, 0.0f, 2.5f, want, 1e9f}) {
      int64_t first = n;
      for (int64_t i = 0; i < n; ++i) {
        if (x[i] > t) {
          first = i;
          break;
        }
      }
      EXPECT_EQ(FirstAbove(x.data(), n, t), first) << IsaName(isa) << " t " << t;
    }
  }
}

TEST_P(ReduceTest, ExpSumTermsAndBlocks) {
  const int64_t n = GetParam();
  const std::vector<float> x = Row(true);
  const float max = 12.0f;
  for (float scale : {1.0f, 0.5f, 3.0f}) {
    std::vector<double> want_blocks((n + kExpSumBlock - 1) / kExpSumBlock, 0.0);
    std::vector<double> want_terms(n);
    double want = 0;
    for (int64_t i = 0; i < n; ++i) {
      // The argument rounded as the kernels round it (in float): at -35 its ulp alone moves e^a
      // by 4e-6 relative.
      const double a = (x[i] - max) * scale;
      want_terms[i] = a >= -87.0 ? std::exp(a) : 0.0;  // NaN compares false: 0
      want_blocks[i / kExpSumBlock] += want_terms[i];
      want += want_terms[i];
    }
    for (Isa isa : Tiers()) {
      SetIsaForTesting(isa);
      std::vector<float> terms(n, -1.0f);
      std::vector<double> blocks(want_blocks.size(), -1.0);
      const double got = ExpSum(x.data(), n, max, scale, terms.data(), blocks.data());
      // The polynomial is within ~2 ulp of exp; sums in float per 64-token block.
      EXPECT_NEAR(got, want, 1e-5 * want + 1e-30) << IsaName(isa);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(terms[i], want_terms[i], 1e-6 * want_terms[i]) << IsaName(isa) << " " << i;
      }
      for (size_t b = 0; b < blocks.size(); ++b) {
        EXPECT_NEAR(blocks[b], want_blocks[b], 1e-5 * want_blocks[b] + 1e-30) << b;
      }
      EXPECT_EQ(ExpSum(x.data(), n, max, scale, nullptr, nullptr), got) << IsaName(isa);
    }
  }
}

TEST_P(ReduceTest, RangeGatherMassAndMaskedSums) {
  const int64_t n = GetParam();
  const std::vector<float> x = Row(true);
  std::vector<float> w(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    w[i] = std::isnan(x[i]) ? 0.0f : std::exp(std::min(x[i], 0.0f) / 4.0f);
    v[i] = w[i] * w[i];
  }
  for (Isa isa : Tiers()) {
    SetIsaForTesting(isa);
    for (auto [lo, hi] : {std::pair{-1.0f, 1.0f}, {0.5f, 0.9f}, {-INFINITY, INFINITY}}) {
      std::vector<int32_t> want;
      for (int64_t i = 0; i < n; ++i) {
        if (x[i] >= lo && x[i] < hi) want.push_back(static_cast<int32_t>(i));
      }
      std::vector<int32_t> got(n);
      got.resize(IndicesInRange(x.data(), n, lo, hi, got.data()));
      EXPECT_EQ(got, want) << IsaName(isa) << " [" << lo << ", " << hi << ")";
    }
    for (float t : {0.0f, 0.3f, 0.7f, 1.0f}) {
      double want_mass = 0, want_v = 0;
      int64_t want_count = 0;
      std::vector<double> want_blocks((n + kExpSumBlock - 1) / kExpSumBlock, 0.0);
      for (int64_t i = 0; i < n; ++i) {
        if (w[i] >= t) {
          want_mass += w[i], ++want_count, want_v += v[i];
          want_blocks[i / kExpSumBlock] += v[i];
        }
      }
      int64_t count = -1;
      EXPECT_NEAR(MassAtLeast(w.data(), n, t, &count), want_mass, 1e-5 * want_mass);
      EXPECT_EQ(count, want_count) << IsaName(isa) << " t " << t;
      std::vector<double> blocks(want_blocks.size());
      EXPECT_NEAR(MaskedBlockSums(w.data(), v.data(), n, t, blocks.data()), want_v, 1e-5 * want_v);
      for (size_t b = 0; b < blocks.size(); ++b) {
        EXPECT_NEAR(blocks[b], want_blocks[b], 1e-5 * want_blocks[b] + 1e-30);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, ReduceTest,
                         ::testing::Values(1, 7, 15, 16, 63, 64, 65, 200, 1001));

}  // namespace
}  // namespace uf::kernels
