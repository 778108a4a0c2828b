// HostOnlyForward (bench --serve --host-only): its reduced rows are what a GPU forward's would be
// for the same full row (the 64 best, best first, the max and log-sum-exp, the known tokens'
// raw logits and the grammar's -inf), so the serving path stepped on it takes the paths it takes
// on a device; and the samplers draw from its reductions the tokens they draw from the full rows.
#include "engine/host_only_forward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "sampling/sampler.h"

namespace uf::engine {
namespace {

constexpr int64_t kVocab = 5000;

// Row i of the last Forward whole, through FetchLogits.
std::vector<float> Whole(HostOnlyForward* f, int64_t i) {
  const int64_t rows[] = {i};
  EXPECT_TRUE(f->FetchLogits(rows).ok());
  return std::vector<float>(f->logits(i), f->logits(i) + kVocab);
}

// The ids of row, best first (higher logit, then lower id), without the excluded ones.
std::vector<int32_t> Ranked(const std::vector<float>& row, const std::vector<bool>& excluded) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < kVocab; ++id) {
    if (!excluded[id]) ids.push_back(id);
  }
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  return ids;
}

// The top list, max and log-sum-exp against the whole row with `excluded` at -inf.
void ExpectReductionOf(const model::TopRow& t, const std::vector<float>& row,
                       const std::vector<bool>& excluded) {
  const std::vector<int32_t> ranked = Ranked(row, excluded);
  ASSERT_EQ(t.n, HostOnlyForward::kTop);
  double top = -INFINITY, mass = 0.0;
  for (int32_t id : ranked) top = std::max<double>(top, row[id]);
  for (int32_t id : ranked) mass += std::exp(row[id] - top);
  for (int32_t k = 0; k < t.n; ++k) {
    if (k < static_cast<int32_t>(ranked.size())) {
      EXPECT_EQ(t.ids[k], ranked[k]) << "rank " << k;
      EXPECT_EQ(t.logits[k], row[ranked[k]]) << "rank " << k;
    } else {
      EXPECT_TRUE(excluded[t.ids[k]]) << "rank " << k;
      EXPECT_EQ(t.logits[k], -INFINITY) << "rank " << k;
    }
  }
  EXPECT_EQ(t.max, row[ranked[0]]);
  EXPECT_NEAR(t.log_sum_exp, top + std::log(mass), 1e-5);
}

model::Batch OneRow(bool top_only) {
  model::Batch b;
  b.Add(1, 0, 0, true);
  b.top_only.assign(1, top_only ? 1 : 0);
  return b;
}

TEST(HostOnlyForward, ReducedRowIsTheWholeRowsBest) {
  HostOnlyForward f(kVocab, 4);
  model::Batch b;
  for (int32_t t = 0; t < 3; ++t) b.Add(t, t, 0, t != 1);  // rows 0 and 1 (tokens 0 and 2)
  b.top_only.assign(3, 1);
  ASSERT_TRUE(f.Forward(b).ok());
  ASSERT_EQ(f.n_outputs(), 2);
  const std::vector<bool> none(kVocab, false);
  const model::TopRow t0 = f.top(0), t1 = f.top(1);
  ExpectReductionOf(t0, Whole(&f, 0), none);
  ExpectReductionOf(t1, Whole(&f, 1), none);
  EXPECT_EQ(t0.n_known, 0);
  // Peaked: the best 64 hold ~99% of the mass at temperature 1.
  double best = 0.0;
  for (int32_t k = 0; k < t0.n; ++k) best += std::exp(t0.logits[k] - t0.log_sum_exp);
  EXPECT_GT(best, 0.98);
  EXPECT_LT(best, 1.0);
  // Each token its own ranking; the same batch the same rows.
  EXPECT_NE(t0.ids[0], t1.ids[0]);
  const int32_t first = t0.ids[0];
  ASSERT_TRUE(f.Forward(b).ok());
  EXPECT_EQ(f.top(0).ids[0], first);
  b.tokens[0] = 7;
  ASSERT_TRUE(f.Forward(b).ok());
  EXPECT_NE(f.top(0).ids[0], first);
}

TEST(HostOnlyForward, KnownTokensComeApartWithTheirRawLogits) {
  HostOnlyForward f(kVocab, 1);
  ASSERT_TRUE(f.Forward(OneRow(true)).ok());
  const std::vector<float> row = Whole(&f, 0);
  const std::vector<bool> none(kVocab, false);
  const std::vector<int32_t> ranked = Ranked(row, none);
  // The row's best, its 10th and a token far down.
  const std::vector<int32_t> known = {ranked[0], ranked[9], ranked[4000]};
  model::Batch b = OneRow(true);
  b.known_begin = {0, 3};
  b.known_ids = known;
  ASSERT_TRUE(f.Forward(b).ok());
  const std::vector<float> row2 = Whole(&f, 0);
  std::vector<bool> excluded(kVocab, false);
  for (int32_t id : known) excluded[id] = true;
  const model::TopRow t = f.top(0);
  ExpectReductionOf(t, row2, excluded);
  ASSERT_EQ(t.n_known, 3);
  for (int32_t k = 0; k < 3; ++k) {
    EXPECT_EQ(t.known_ids[k], known[k]);
    EXPECT_EQ(t.known_logits[k], row2[known[k]]);
  }
}

TEST(HostOnlyForward, GrammarMaskLeavesTheAllowedTokensThenMinusInfinity) {
  HostOnlyForward f(kVocab, 1);
  std::vector<uint64_t> mask((kVocab + 63) / 64, 0);
  std::vector<bool> excluded(kVocab, true);
  for (int32_t id = 100; id < 4000; id += 400) {  // 10 tokens
    mask[id / 64] |= uint64_t{1} << (id % 64);
    excluded[id] = false;
  }
  model::Batch b = OneRow(true);
  b.allowed = {mask.data()};
  ASSERT_TRUE(f.Forward(b).ok());
  const model::TopRow t = f.top(0);
  ExpectReductionOf(t, Whole(&f, 0), excluded);
}

// A whole row where the batch does not ask for the reduction; too many rows is an error.
TEST(HostOnlyForward, WholeRowsAndRefusals) {
  HostOnlyForward f(kVocab, 1);
  ASSERT_TRUE(f.Forward(OneRow(false)).ok());
  const std::vector<float> row(f.logits(0), f.logits(0) + kVocab);
  for (int32_t id = 0; id < kVocab; id += 97) EXPECT_EQ(row[id], f.Logit(0, id));
  model::Batch two;
  two.Add(1, 0, 0, true);
  two.Add(2, 1, 0, true);
  EXPECT_FALSE(f.Forward(two).ok());
  const int64_t bad[] = {3};
  EXPECT_FALSE(f.FetchLogits(bad).ok());
}

// The samplers draw the same tokens from the reductions as from the whole rows: greedy and top-k
// through SampleTop, temperature 1 without top-k through SampleReduced (which gives up, -1, only
// for a draw it cannot place: then the whole row decides, as on a GPU).
TEST(HostOnlyForward, SamplersDrawTheWholeRowsTokens) {
  HostOnlyForward f(kVocab, 1);
  sampling::SamplingParams greedy{.temperature = 0.0f};
  sampling::SamplingParams top_k{.temperature = 1.0f, .top_k = 40, .top_p = 1.0f, .min_p = 0.0f};
  sampling::SamplingParams open{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
  int reduced = 0;
  for (int step = 0; step < 200; ++step) {
    ASSERT_TRUE(f.Forward(OneRow(true)).ok());
    const model::TopRow t = f.top(0);
    const std::vector<float> row = Whole(&f, 0);
    for (sampling::SamplingParams p : {greedy, top_k, open}) {
      p.seed = static_cast<uint64_t>(step);
      sampling::Sampler whole(p, kVocab), part(p, kVocab);
      const int32_t want = whole.Sample(row.data());
      int32_t got = -1;
      if (part.CanSampleTop(t.n)) {
        got = part.SampleTop(t.ids, t.logits, t.n);
      } else {
        ASSERT_TRUE(part.CanSampleReduced());
        got = part.SampleReduced(t.ids, t.logits, t.n, t.max, t.log_sum_exp);
        if (got < 0)
          got = part.Sample(row.data());
        else
          ++reduced;
      }
      EXPECT_EQ(got, want) << "step " << step << ", temperature " << p.temperature;
    }
  }
  EXPECT_GT(reduced, 190);  // the best 64 decide almost every open draw
}

}  // namespace
}  // namespace uf::engine
