// The device's sampling reductions (argmax.comp, topk.comp, mask_rows.comp, allow_rows.comp)
// against the host sampler, on whatever Vulkan device the loader finds first (lavapipe in CI); the
// fixture is gpu_kernels_fixture.h. Tolerances are stated in each test.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#if UF_HAVE_VULKAN
#include "gpu/top_row.h"
#include "gpu_kernels_fixture.h"
#include "grammar/token_mask.h"
#endif

namespace uf::gpu {
namespace {

#if !UF_HAVE_VULKAN
TEST(GpuTopK, NotBuilt) { GTEST_SKIP() << "built without the Vulkan backend"; }
#else

// The device arg-max picks what sampling::ArgMax picks: the first of equal maxima, never a NaN,
// 0 for a row of -inf.
TEST_F(GpuKernelsTest, ArgMaxMatchesSampler) {
  const int64_t n_vocab = 1000, rows = 6;
  std::vector<float> l = Random(rows * n_vocab, 40);
  l[0 * n_vocab + 700] = 9.0f;  // row 0: a tie, the first wins
  l[0 * n_vocab + 300] = 9.0f;
  l[1 * n_vocab + 999] = 7.0f;  // row 1: the last value, a NaN ahead of it
  l[1 * n_vocab + 5] = std::nanf("");
  std::fill(l.begin() + 2 * n_vocab, l.begin() + 3 * n_vocab, -INFINITY);  // row 2
  l[3 * n_vocab + 0] = 8.0f;                                               // row 3: the first value
  l[4 * n_vocab + 130] = 6.0f;  // row 4: equal maxima in the same chunk of 64 and in later ones
  l[4 * n_vocab + 129] = 6.0f;
  l[4 * n_vocab + 640] = 6.0f;
  l[4 * n_vocab + 999] = 6.0f;
  std::fill(l.begin() + 5 * n_vocab, l.begin() + 5 * n_vocab + 500, -INFINITY);  // row 5: a
  l[5 * n_vocab + 200] = std::nanf("");  // chunk of only -inf and a NaN ahead of the maximum
  Buffer lb = Floats(l);
  // One chunk a row (4096), several (64: chunks of one value an invocation; 100: a partial
  // last chunk).
  for (int64_t chunk : {Kernels::kArgMaxChunk, int64_t{64}, int64_t{100}}) {
    SCOPED_TRACE(testing::Message() << "chunk " << chunk);
    Buffer out = std::move(*ctx_->CreateBuffer(rows * 4, Memory::kHost));
    Buffer part = Empty(Kernels::ArgMaxPartWords(n_vocab, rows, chunk) * 4);
    Recorder rec(ctx_);
    kernels_->ArgMax(&rec, lb, out, part, n_vocab, rows, chunk);
    ASSERT_TRUE(rec.Finish().ok());
    ASSERT_TRUE(rec.Run().ok());
    const auto* got = static_cast<const uint32_t*>(out.mapped());
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(static_cast<int32_t>(got[r]),
                sampling::ArgMax(l.data() + r * n_vocab, static_cast<int32_t>(n_vocab)))
          << "row " << r;
    }
    EXPECT_EQ(got[0], 300u);
    EXPECT_EQ(got[1], 999u);
    EXPECT_EQ(got[2], 0u);
    EXPECT_EQ(got[3], 0u);
    EXPECT_EQ(got[4], 129u);
  }
}

// The sampler's order of a row's tokens: higher logit, then lower id; NaN ranks as -inf.
std::vector<int32_t> BestFirst(const float* l, int64_t n) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(i);
  const auto v = [&](int32_t i) { return std::isnan(l[i]) ? -INFINITY : l[i]; };
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return v(a) > v(b) || (v(a) == v(b) && a < b); });
  return ids;
}

// The device's best tokens of each row are the sampler's top-k set in its order (ties by id at
// and across the cut, NaN as -inf, -0 tied with +0, a row shorter than k padded), with the raw
// logits, the max and the log-sum-exp; and a sampler given only them draws, seed for seed, the
// token it draws from the whole row (Sampler::SampleTop against Sample).
TEST_F(GpuKernelsTest, TopKMatchesSamplerAndSamplesTheSameTokens) {
  const int64_t n_vocab = 3000, rows = 6, k = Kernels::kMaxTopK;
  std::vector<float> l = Random(rows * n_vocab, 50, 2.0f);
  float* r1 = l.data() + 1 * n_vocab;  // quarter steps: ties everywhere, across the cut too
  for (int64_t i = 0; i < n_vocab; ++i) r1[i] = std::round(r1[i] * 4.0f) / 4.0f;
  float* r2 = l.data() + 2 * n_vocab;  // all equal but a NaN and signed zeros below
  std::fill(r2, r2 + n_vocab, 1.0f);
  r2[7] = std::nanf("");
  float* r3 = l.data() + 3 * n_vocab;  // -inf but for 10 values and a NaN: fewer than k finite
  std::fill(r3, r3 + n_vocab, -INFINITY);
  for (int i = 0; i < 10; ++i) r3[i * 271 + 5] = static_cast<float>(i % 4);
  r3[100] = std::nanf("");
  float* r4 = l.data() + 4 * n_vocab;  // all -inf
  std::fill(r4, r4 + n_vocab, -INFINITY);
  float* r5 = l.data() + 5 * n_vocab;  // the best are +0 and -0, interleaved
  for (int64_t i = 0; i < n_vocab; ++i) r5[i] = -std::fabs(r5[i]) - 0.5f;
  for (int i = 0; i < 100; ++i) r5[i * 29] = i % 2 == 0 ? 0.0f : -0.0f;
  Buffer lb = Floats(l);
  // One chunk a row (4096); several, with ties across them and a partial last one (256, 300);
  // chunks of k and shorter than k (64, 37: candidates padded in every chunk).
  for (int64_t chunk : {Kernels::kTopKChunk, int64_t{256}, int64_t{300}, k, int64_t{37}}) {
    SCOPED_TRACE(testing::Message() << "chunk " << chunk);
    Buffer out = std::move(*ctx_->CreateBuffer(rows * (2 * k + 2) * 4, Memory::kHost));
    Recorder rec(ctx_);
    Buffer part = Empty(Kernels::TopKPartWords(n_vocab, rows, k, chunk) * 4);
    kernels_->TopK(&rec, lb, out, part, n_vocab, rows, k, chunk);
    ASSERT_TRUE(rec.Finish().ok());
    ASSERT_TRUE(rec.Run().ok());
    const auto* w = static_cast<const uint32_t*>(out.mapped());
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = l.data() + r * n_vocab;
      const uint32_t* o = w + r * (2 * k + 2);
      const auto* ids = reinterpret_cast<const int32_t*>(o);
      const auto* vals = reinterpret_cast<const float*>(o + k);
      const std::vector<int32_t> want = BestFirst(row, n_vocab);
      for (int64_t i = 0; i < k; ++i) {
        ASSERT_EQ(ids[i], want[i]) << "row " << r << " rank " << i;
        ASSERT_EQ(std::memcmp(&vals[i], &row[want[i]], 4), 0) << "row " << r << " rank " << i;
      }
      float max, lse;
      std::memcpy(&max, o + 2 * k, 4);
      std::memcpy(&lse, o + 2 * k + 1, 4);
      const float want_max = std::isnan(row[want[0]]) ? -INFINITY : row[want[0]];
      EXPECT_EQ(max, want_max) << "row " << r;
      if (want_max == -INFINITY) {
        EXPECT_EQ(lse, -INFINITY) << "row " << r;
      } else {
        double z = 0.0;
        for (int64_t i = 0; i < n_vocab; ++i) {
          if (row[i] > -INFINITY) z += std::exp(static_cast<double>(row[i]) - want_max);
        }
        EXPECT_NEAR(lse, want_max + std::log(z), 1e-4) << "row " << r;
      }
      // Seed for seed, the same tokens from the best k as from the whole row.
      std::vector<sampling::SamplingParams> settings(6);
      settings[0].temperature = 0.0f;
      settings[1].top_k = 1;
      settings[2].top_k = 5, settings[2].top_p = 1.0f, settings[2].min_p = 0.0f;
      settings[2].temperature = 0.7f;
      settings[3].top_k = 40, settings[3].top_p = 0.9f, settings[3].min_p = 0.05f;
      settings[3].temperature = 1.3f;
      settings[4].top_k = 64, settings[4].top_p = 0.5f, settings[4].min_p = 0.0f;
      settings[5].top_k = 64, settings[5].top_p = 1.0f, settings[5].min_p = 0.0f;
      settings[5].temperature = 5.0f;
      for (size_t si = 0; si < settings.size(); ++si) {
        sampling::SamplingParams p = settings[si];
        p.seed = 1000 + si + 10 * r;
        sampling::Sampler full(p, static_cast<int32_t>(n_vocab)),
            top(p, static_cast<int32_t>(n_vocab));
        ASSERT_TRUE(top.CanSampleTop(static_cast<int32_t>(k)));
        for (int draw = 0; draw < 64; ++draw) {
          ASSERT_EQ(top.SampleTop(ids, vals, static_cast<int32_t>(k)), full.Sample(row))
              << "row " << r << " settings " << si << " draw " << draw;
        }
      }
    }
  }

  // A row shorter than k: all of it, then padding.
  const int64_t short_n = 40;
  Buffer sb = Floats(std::vector<float>(l.begin() + n_vocab, l.begin() + n_vocab + short_n));
  Buffer out2 = std::move(*ctx_->CreateBuffer((2 * k + 2) * 4, Memory::kHost));
  Buffer part2 = Empty(Kernels::TopKPartWords(short_n, 1, k) * 4);
  Recorder rec2(ctx_);
  kernels_->TopK(&rec2, sb, out2, part2, short_n, 1, k);
  ASSERT_TRUE(rec2.Finish().ok());
  ASSERT_TRUE(rec2.Run().ok());
  const std::vector<int32_t> want = BestFirst(l.data() + n_vocab, short_n);
  const auto* w2 = static_cast<const uint32_t*>(out2.mapped());
  for (int64_t i = 0; i < k; ++i) {
    EXPECT_EQ(static_cast<int32_t>(w2[i]), i < short_n ? want[i] : -1) << "rank " << i;
  }
}

// The device path of a row whose sampler edits logits: mask_rows.comp reads the edited tokens
// (bias with a repeated id and a -inf bias, banned tokens, the penalty window) out raw and masks
// them, topk.comp reduces the rest; Sampler::SampleTop applies the edits on the host. Over
// seeded draws on four rows (one with ties everywhere), greedy and top-k 1..64 with top-p and
// min-p, each penalty alone and all together, each drawn token accepted into the window: the
// same token as the full-row sampler in every draw, and the logprobs (the token's and the top
// 20) those of the whole row, ids exactly and values within 1e-5.
TEST_F(GpuKernelsTest, MaskedTopKSamplesWithEditsAsTheWholeRow) {
  const int64_t n_vocab = 3000, rows = 4, k = Kernels::kMaxTopK, cap = 256;
  std::vector<float> l = Random(rows * n_vocab, 77, 2.0f);
  for (int64_t i = 0; i < n_vocab; ++i) l[n_vocab + i] = std::round(l[n_vocab + i] * 4.0f) / 4.0f;
  for (int64_t i = 0; i < n_vocab; ++i) l[3 * n_vocab + i] *= 3.0f;  // peaked
  Buffer lb = Floats(l);
  Buffer known = std::move(*ctx_->CreateBuffer(rows * (cap + 1) * 4, Memory::kHost));
  Buffer raw = std::move(*ctx_->CreateBuffer(rows * cap * 4, Memory::kHost));
  Buffer out = std::move(*ctx_->CreateBuffer(rows * (2 * k + 2) * 4, Memory::kHost));
  Recorder rec(ctx_);
  Buffer part = Empty(Kernels::TopKPartWords(n_vocab, rows, k) * 4);
  kernels_->MaskRows(&rec, lb, known, raw, n_vocab, rows, cap);
  kernels_->TopK(&rec, lb, out, part, n_vocab, rows, k);
  ASSERT_TRUE(rec.Finish().ok());
  int draws = 0, edited_draws = 0;
  double max_err = 0.0;
  for (int setting = 0; setting < 6; ++setting) {
    sampling::SamplingParams p;
    p.temperature = setting == 0 ? 0.0f : 0.6f + 0.25f * setting;
    p.top_k = std::array<int32_t, 6>{0, 1, 5, 40, 64, 20}[setting];
    p.top_p = setting == 5 ? 1.0f : 0.9f;
    p.min_p = setting == 4 ? 0.0f : 0.03f;
    p.penalty_last_n = 24;
    p.repeat_penalty = setting % 3 == 0 || setting == 5 ? 1.4f : 1.0f;
    p.frequency_penalty = setting % 3 == 1 || setting == 5 ? 0.6f : 0.0f;
    p.presence_penalty = setting % 3 == 2 || setting == 5 ? 0.9f : 0.0f;
    std::vector<sampling::Sampler> full, top;
    for (int64_t r = 0; r < rows; ++r) {
      p.seed = 10 * setting + r;
      full.emplace_back(p, static_cast<int32_t>(n_vocab));
      top.emplace_back(p, static_cast<int32_t>(n_vocab));
      for (sampling::Sampler* s : {&full.back(), &top.back()}) {
        s->SetLogitBias({{11, 3.0f}, {12, -0.5f}, {11, 0.125f}, {2999, 4.0f}, {500, -INFINITY}});
        s->SetBanned({0, 1, 2});
      }
    }
    std::vector<std::vector<int32_t> > known_ids(rows);
    for (int step = 0; step < 25; ++step) {
      ASSERT_TRUE(ctx_->Upload(lb, 0, l.data(), l.size() * 4).ok());  // unmasked again
      auto* kw = static_cast<uint32_t*>(known.mapped());
      for (int64_t r = 0; r < rows; ++r) {
        top[r].EditedTokens({}, &known_ids[r]);
        ASSERT_LE(static_cast<int64_t>(known_ids[r].size()), cap);
        kw[r * (cap + 1)] = static_cast<uint32_t>(known_ids[r].size());
        for (size_t i = 0; i < known_ids[r].size(); ++i)
          kw[r * (cap + 1) + 1 + i] = known_ids[r][i];
      }
      ASSERT_TRUE(rec.Run().ok());
      const auto* w = static_cast<const uint32_t*>(out.mapped());
      const auto* rw = static_cast<const float*>(raw.mapped());
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = l.data() + r * n_vocab;
        const uint32_t* o = w + r * (2 * k + 2);
        model::TopRow t = TopRowOf(o, k, n_vocab);
        t.n_known = static_cast<int32_t>(known_ids[r].size());
        t.known_ids = known_ids[r].data();
        t.known_logits = rw + r * cap;
        for (int32_t i = 0; i < t.n_known; ++i) {
          ASSERT_EQ(std::memcmp(&t.known_logits[i], &row[t.known_ids[i]], 4), 0);
        }
        const int32_t want = full[r].Sample(row);
        const int32_t got =
            top[r].SampleTop(t.ids, t.logits, t.n, t.known_ids, t.known_logits, t.n_known);
        ASSERT_EQ(got, want) << "setting " << setting << " step " << step << " row " << r;
        ++draws;
        edited_draws +=
            std::find(known_ids[r].begin(), known_ids[r].end(), got) != known_ids[r].end();
        const engine::TokenLogprob a =
            engine::SequenceSampler::Logprobs(row, static_cast<int32_t>(n_vocab), got, 20);
        const engine::TokenLogprob b = engine::SequenceSampler::Logprobs(t, got, 20);
        EXPECT_NEAR(a.logprob, b.logprob, 1e-5);
        max_err = std::max(max_err, std::abs(static_cast<double>(a.logprob) - b.logprob));
        ASSERT_EQ(a.top.size(), b.top.size());
        for (size_t i = 0; i < a.top.size(); ++i) {
          EXPECT_EQ(a.top[i].first, b.top[i].first) << "rank " << i;
          EXPECT_NEAR(a.top[i].second, b.top[i].second, 1e-5) << "rank " << i;
        }
        full[r].Accept(got);
        top[r].Accept(got);
      }
    }
  }
  EXPECT_GT(edited_draws, 10) << "the edits should matter to some draws";
  std::printf(
      "[gpu kernels] %d draws with edits (%d of an edited token): all equal to the "
      "whole row's; logprob error <= %.2g\n",
      draws, edited_draws, max_err);
}

// A row whose request follows a grammar: allow_rows.comp sets the tokens its mask forbids to -inf
// and topk.comp reduces what is left, so the row is grammar::TokenConstraint::Apply's masked row
// bit for bit, its best tokens, max and log-sum-exp are the masked row's, and a sampler given
// only them draws, seed for seed, the token it draws from the masked row (greedy, top-k with
// top-p, and without top-k through SampleReduced where that decides). Masks: about half the
// tokens, all but five, three tokens (fewer than k), and a row without one (left alone), over a
// vocabulary whose last 64-bit mask word is partial (3001 = 46 x 64 + 57).
TEST_F(GpuKernelsTest, GrammarMaskedTopKSamplesAsTheMaskedRow) {
  const int64_t n_vocab = 3001, rows = 4, k = Kernels::kMaxTopK;
  const int64_t words64 = (n_vocab + 63) / 64, aw = Kernels::AllowWords(n_vocab);
  ASSERT_EQ(aw, 2 * words64 + 1);
  const std::vector<float> l = Random(rows * n_vocab, 91, 2.0f);
  std::vector<std::vector<uint64_t> > masks(rows, std::vector<uint64_t>(words64, 0));
  std::mt19937_64 rng(5);
  for (uint64_t& w : masks[0]) w = rng();
  for (int64_t i = 0; i < n_vocab; ++i) masks[1][i / 64] |= uint64_t{1} << (i % 64);
  for (int64_t i : {3, 700, 1500, 2222, 3000}) masks[1][i / 64] &= ~(uint64_t{1} << (i % 64));
  for (int64_t i : {17, 1024, 2999}) masks[2][i / 64] |= uint64_t{1} << (i % 64);
  Buffer lb = Floats(l);
  Buffer allow = std::move(*ctx_->CreateBuffer(rows * aw * 4, Memory::kHost));
  auto* aw_words = static_cast<uint32_t*>(allow.mapped());
  for (int64_t r = 0; r < rows; ++r) {
    aw_words[r * aw] = r == 3 ? 0u : 1u;
    std::memcpy(aw_words + r * aw + 1, masks[r].data(), words64 * 8);
  }
  Buffer out = std::move(*ctx_->CreateBuffer(rows * (2 * k + 2) * 4, Memory::kHost));
  Buffer part = Empty(Kernels::TopKPartWords(n_vocab, rows, k) * 4);
  Recorder rec(ctx_);
  kernels_->AllowRows(&rec, lb, allow, n_vocab, rows);
  kernels_->TopK(&rec, lb, out, part, n_vocab, rows, k);
  ASSERT_TRUE(rec.Finish().ok());
  ASSERT_TRUE(rec.Run().ok());
  const std::vector<float> masked_dev = Read(lb, rows * n_vocab);
  const auto* w = static_cast<const uint32_t*>(out.mapped());
  int draws = 0;
  for (int64_t r = 0; r < rows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    std::vector<float> masked(l.begin() + r * n_vocab, l.begin() + (r + 1) * n_vocab);
    if (r != 3) {
      grammar::TokenConstraint::Apply(masks[r].data(), l.data() + r * n_vocab,
                                      static_cast<int32_t>(n_vocab), masked.data());
    }
    ASSERT_EQ(std::memcmp(masked_dev.data() + r * n_vocab, masked.data(), n_vocab * 4), 0);
    const uint32_t* o = w + r * (2 * k + 2);
    const model::TopRow t = TopRowOf(o, k, n_vocab);
    const std::vector<int32_t> want = BestFirst(masked.data(), n_vocab);
    for (int64_t i = 0; i < k; ++i) ASSERT_EQ(t.ids[i], want[i]) << "rank " << i;
    EXPECT_EQ(t.max, masked[want[0]]);
    double z = 0.0;
    for (float v : masked) {
      if (v > -INFINITY) z += std::exp(static_cast<double>(v) - t.max);
    }
    EXPECT_NEAR(t.log_sum_exp, t.max + std::log(z), 1e-4);
    for (int setting = 0; setting < 4; ++setting) {
      sampling::SamplingParams p;
      p.temperature = setting == 0 ? 0.0f : 0.8f + 0.3f * setting;
      p.top_k = std::array<int32_t, 4>{0, 40, 64, 0}[setting];
      p.top_p = setting == 3 ? 1.0f : 0.9f;
      p.min_p = 0.0f;
      p.seed = 7 * setting + r;
      sampling::Sampler full(p, static_cast<int32_t>(n_vocab)),
          top(p, static_cast<int32_t>(n_vocab));
      for (int draw = 0; draw < 32; ++draw) {
        const int32_t want_token = full.Sample(masked.data());
        int32_t got = -1;
        if (top.CanSampleTop(static_cast<int32_t>(k))) {
          got = top.SampleTop(t.ids, t.logits, t.n);
        } else {
          ASSERT_TRUE(top.CanSampleReduced());
          got = top.SampleReduced(t.ids, t.logits, t.n, t.max, t.log_sum_exp);
          // -1: the engine fetches the row whole and samples it.
          if (got < 0) got = top.Sample(masked.data());
        }
        ASSERT_EQ(got, want_token) << "setting " << setting << " draw " << draw;
        ++draws;
        full.Accept(want_token);
        top.Accept(got);
      }
    }
  }
  std::printf("[gpu kernels] %d draws from grammar-masked rows: all equal to the masked row's\n",
              draws);
}

#endif  // UF_HAVE_VULKAN

}  // namespace
}  // namespace uf::gpu
