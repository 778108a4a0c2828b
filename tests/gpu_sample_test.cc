// sample.comp (Kernels::SampleFeed), the device's draw of a chained sampled step, against the
// host sampler that checks it (engine::SampleFromTop: Sampler::SampleTop with top-k,
// SampleReduced without), on whatever Vulkan device the loader finds first (lavapipe in CI); the
// fixture is gpu_kernels_fixture.h. Each draw gets its own sampler (seed), whose next uniform the
// device draws with.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#if UF_HAVE_VULKAN
#include "engine/seq_sampler.h"
#include "gpu/top_row.h"
#include "gpu_kernels_fixture.h"
#endif

namespace uf::gpu {
namespace {

#if !UF_HAVE_VULKAN
TEST(GpuSample, NotBuilt) { GTEST_SKIP() << "built without the Vulkan backend"; }
#else

// Rows of n_vocab logits: `llm` (rank r at 12 - 2 ln(1 + r) plus noise, ids shuffled: the best
// 64 hold ~99% of the mass at T 1), `peaked` (one token 9 above the rest: min-p and top-p keep it
// alone, so a top-k draw takes no uniform), `flat` (noise only: the best 64 hold ~1%, so without
// top-k the host leaves most draws undecided).
std::vector<float> Row(const char* kind, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::vector<float> l(n_vocab);
  if (std::strcmp(kind, "flat") == 0) {
    for (float& x : l) x = noise(rng);
    return l;
  }
  std::vector<int32_t> ids(n_vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  for (int64_t r = 0; r < n_vocab; ++r) {
    l[ids[r]] = 12.0f - 2.0f * std::log1p(static_cast<float>(r)) + noise(rng);
  }
  if (std::strcmp(kind, "peaked") == 0) l[ids[0]] += 9.0f;
  return l;
}

// For each row and sampler setting, `trials` draws, each with a fresh sampler's next uniform:
// where the host's sampler decides the token from the device's reduced row, the device's draw
// must be the same token. The host decides only a margin (Sampler::kReducedMargin, 1e-4 of the
// mass) away from an interval's edge without top-k, while the two sum ~64 float terms in different
// orders (~1e-6 apart), so no draw may differ there; with top-k the host decides every draw, and
// one landing within float rounding of an edge (~1e-6 of the mass, ~1e-5 a draw) could differ:
// at most 1 of all the draws may. The device counts a draw exactly where the host takes one (a
// top-k row whose filters keep one token takes none), feeds each token to the next dispatch's
// input and copies the reduced row into its ring.
TEST_F(GpuKernelsTest, SampleFeedDrawsTheSamplersToken) {
  const int64_t n_vocab = 32000, k = Kernels::kMaxTopK, trials = 32;
  struct Setting {
    float temperature;
    int32_t top_k;
    float top_p, min_p;
  };
  const Setting settings[] = {{0.8f, 40, 0.95f, 0.05f}, {1.0f, 0, 1.0f, 0.0f},
                              {0.7f, 0, 0.9f, 0.0f},    {1.5f, 0, 1.0f, 0.1f},
                              {1.3f, 20, 1.0f, 0.0f},   {0.6f, 0, 1.0f, 0.0f},
                              {2.0f, 64, 0.5f, 0.0f},   {1.0f, 0, 0.95f, 0.05f}};
  const char* kinds[] = {"llm", "llm", "peaked", "flat"};
  Buffer top = std::move(*ctx_->CreateBuffer((2 * k + 2) * 4, Memory::kHost));
  Buffer part = Empty(Kernels::TopKPartWords(n_vocab, 1, k) * 4);
  Buffer ring = std::move(*ctx_->CreateBuffer(trials * 4, Memory::kHost));
  Buffer top_ring = std::move(*ctx_->CreateBuffer(trials * (2 * k + 2) * 4, Memory::kHost));
  Buffer bt = std::move(*ctx_->CreateBuffer(16, Memory::kHost));
  std::vector<Buffer> draws;
  for (int64_t t = 0; t < trials; ++t) {
    draws.push_back(
        std::move(*ctx_->CreateBuffer((Kernels::kDrawHeaderWords + 1) * 4, Memory::kHost)));
  }
  int64_t decided = 0, decided_reduced = 0, reduced = 0, differ = 0, no_draw = 0;
  for (size_t ri = 0; ri < std::size(kinds); ++ri) {
    const std::vector<float> l = Row(kinds[ri], n_vocab, 100 + static_cast<uint32_t>(ri));
    Buffer lb = Floats(l);
    Recorder reduce(ctx_);
    kernels_->TopK(&reduce, lb, top, part, n_vocab, 1, k);
    ASSERT_TRUE(reduce.Finish().ok());
    ASSERT_TRUE(reduce.Run().ok());
    const auto* tw = static_cast<const uint32_t*>(top.mapped());
    const model::TopRow row = TopRowOf(tw, k, n_vocab);
    for (size_t si = 0; si < std::size(settings); ++si) {
      const Setting& st = settings[si];
      SCOPED_TRACE(testing::Message() << "row " << ri << " (" << kinds[ri] << "), setting " << si);
      sampling::SamplingParams p;
      p.temperature = st.temperature;
      p.top_k = st.top_k;
      p.top_p = st.top_p;
      p.min_p = st.min_p;
      std::vector<float> u(trials);
      for (int64_t t = 0; t < trials; ++t) {
        p.seed = 7000 + 1000 * ri + 100 * si + t;
        sampling::Sampler s(p, static_cast<int32_t>(n_vocab));
        s.PeekUniforms(1, &u[t]);
        auto* d = static_cast<uint32_t*>(draws[t].mapped());
        std::memcpy(d + 0, &p.temperature, 4);
        std::memcpy(d + 1, &p.top_k, 4);
        std::memcpy(d + 2, &p.top_p, 4);
        std::memcpy(d + 3, &p.min_p, 4);
        d[4] = 0;
        d[5] = 1;
        std::memcpy(d + Kernels::kDrawHeaderWords, &u[t], 4);
      }
      // Dispatch t writes ring[(position + 1) % trials] and moves the position on by one.
      Buffer tok = Tok({{5, static_cast<uint32_t>(trials - 1), 0, 0}});
      const Kernels::Feed feed{&tok, &bt, &ring, 1, 0, trials};
      Recorder rec(ctx_);
      for (int64_t t = 0; t < trials; ++t) {
        kernels_->SampleFeed(&rec, top, draws[t], feed, top_ring, k, n_vocab, 1,
                             Kernels::kDrawHeaderWords + 1, top_ring);
      }
      ASSERT_TRUE(rec.Finish().ok());
      ASSERT_TRUE(rec.Run().ok());
      const auto* got = static_cast<const uint32_t*>(ring.mapped());
      const auto* tok_w = static_cast<const uint32_t*>(tok.mapped());
      EXPECT_EQ(tok_w[0], got[trials - 1]);
      EXPECT_EQ(tok_w[1], static_cast<uint32_t>(2 * trials - 1));
      for (int64_t t = 0; t < trials; ++t) {
        p.seed = 7000 + 1000 * ri + 100 * si + t;
        sampling::Sampler s(p, static_cast<int32_t>(n_vocab));
        const int32_t want = engine::SampleFromTop(s, row);
        const bool is_reduced = !s.CanSampleTop(row.n);
        reduced += is_reduced;
        ASSERT_EQ(std::memcmp(static_cast<const uint32_t*>(top_ring.mapped()) + t * (2 * k + 2), tw,
                              (2 * k + 2) * 4),
                  0)
            << "draw " << t << ": the ring's row is not the reduced row";
        if (want < 0) continue;
        ++decided;
        decided_reduced += is_reduced;
        differ += static_cast<int32_t>(got[t]) != want;
        if (is_reduced) {
          EXPECT_EQ(static_cast<int32_t>(got[t]), want) << "draw " << t << " u " << u[t];
        }
        float next;
        s.PeekUniforms(1, &next);
        const uint32_t took = next != u[t] ? 1u : 0u;
        no_draw += took == 0;
        EXPECT_EQ(static_cast<const uint32_t*>(draws[t].mapped())[4], took) << "draw " << t;
      }
    }
  }
  std::printf(
      "[gpu sample] %lld of %lld draws decided by the host (%lld of %lld without top-k), "
      "%lld took no uniform, %lld differ\n",
      static_cast<long long>(decided),
      static_cast<long long>(std::size(kinds) * std::size(settings) * trials),
      static_cast<long long>(decided_reduced), static_cast<long long>(reduced),
      static_cast<long long>(no_draw), static_cast<long long>(differ));
  EXPECT_LE(differ, 1) << "the device's draws are not the sampler's";
  EXPECT_GE(decided_reduced, reduced / 2) << "too few draws without top-k decided to test them";
  EXPECT_GT(no_draw, 0) << "no top-k row kept one token: the draw counter is untested";
}

#endif  // UF_HAVE_VULKAN

}  // namespace
}  // namespace uf::gpu
