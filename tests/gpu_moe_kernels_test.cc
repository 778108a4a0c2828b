// The mixture-of-experts kernels around the products: route.comp (Kernels::Route) against
// model::RouteExperts, the CPU decoder's router; moe_group.comp (Kernels::GroupSlots), the
// grouping of a batch's (token, expert) slots by expert into tiles of 8, 16 or 32, against the
// stable counting sort it must equal; and the grouped products of every tile (gemmg_*,
// gemmg16_*, gemmg32_*) against the ungrouped one, bit for bit. Tolerances are stated in each
// test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if UF_HAVE_VULKAN
#include "gpu_kernels_fixture.h"
#include "model/decoder.h"
#include "scoped_env.h"
#endif

namespace uf::gpu {
namespace {

#if !UF_HAVE_VULKAN
TEST(GpuMoeGroup, NotBuilt) { GTEST_SKIP() << "built without the Vulkan backend"; }
#else

// The experts exactly (ties included), the weights within 1e-6 relative + 1e-7 absolute: the
// shader's exp is not the host's std::exp (Vulkan allows a few ulp).
TEST_F(GpuKernelsTest, RouteMatchesDecoderRoute) {
  struct Case {
    int64_t ne, k;
    bool softmax_all, norm, bias;
    float scale;
  };
  const std::vector<Case> cases = {
      {128, 8, true, true, false, 1.0f},  // qwen3moe
      {8, 2, true, false, false, 0.0f},   // Mixtral
      {32, 4, false, false, true, 1.0f},  // gpt-oss
      {512, 64, true, true, true, 2.5f},  // the limits, a bias and a scale
      {3, 3, false, true, false, 0.5f},   // k == n_expert
      {130, 1, true, false, true, 1.0f},  // a row past 2 x 64 experts, k 1
  };
  const int64_t n = 37;  // tokens
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.k << " of " << c.ne << (c.softmax_all ? " all" : "")
                                    << (c.norm ? " norm" : "") << (c.bias ? " bias" : ""));
    std::vector<float> logits = Random(n * c.ne, static_cast<uint32_t>(c.ne + c.k));
    // Ties: token 1 all equal; token 2 ties across the k-th place; token 3 one value repeated
    // in blocks; token 4 a NaN-free row of -1 and 1 only.
    for (int64_t x = 0; x < c.ne; ++x) {
      logits[1 * c.ne + x] = 0.25f;
      if (x % 3 == 0) logits[2 * c.ne + x] = 0.5f;
      logits[3 * c.ne + x] = static_cast<float>(x / 4 % 5);
      logits[4 * c.ne + x] = (x * 7) % 3 == 0 ? 1.0f : -1.0f;
    }
    const std::vector<float> bias = Random(c.ne, 5, 0.3f);
    Kernels::RouteParams rp;
    rp.n_expert = c.ne;
    rp.k = c.k;
    rp.softmax_all = c.softmax_all;
    rp.norm = c.norm;
    rp.scale = c.scale;
    model::ModelConfig mc;  // the CPU router's view of the same parameters
    mc.n_expert = c.ne;
    mc.n_expert_used = c.k;
    mc.expert_gating =
        c.softmax_all ? model::ExpertGating::kSoftmax : model::ExpertGating::kSoftmaxWeight;
    mc.expert_weights_norm = c.norm;
    mc.expert_weights_scale = c.scale;
    Buffer lb = Floats(logits), bb = Floats(bias);
    Buffer ids = Empty(n * c.k * 4), weights = Empty(n * c.k * 4);
    Recorder rec(ctx_);
    kernels_->Route(&rec, lb, c.bias ? &bb : nullptr, ids, weights, n, rp);
    ASSERT_TRUE(rec.Finish().ok());
    ASSERT_TRUE(rec.Run().ok());
    std::vector<uint32_t> got_ids(n * c.k);
    ASSERT_TRUE(ctx_->Download(ids, 0, got_ids.data(), got_ids.size() * 4).ok());
    const std::vector<float> got_w = Read(weights, n * c.k);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> l(logits.begin() + t * c.ne, logits.begin() + (t + 1) * c.ne);
      if (c.bias) {
        for (int64_t x = 0; x < c.ne; ++x) l[x] += bias[x];
      }
      std::vector<int32_t> sel(c.k);
      std::vector<float> w(c.k);
      model::RouteExperts(mc, l.data(), sel.data(), w.data());
      for (int64_t i = 0; i < c.k; ++i) {
        EXPECT_EQ(got_ids[t * c.k + i], static_cast<uint32_t>(sel[i]))
            << "token " << t << " rank " << i;
        EXPECT_NEAR(got_w[t * c.k + i], w[i], 1e-6f * std::abs(w[i]) + 1e-7f)
            << "token " << t << " rank " << i;
      }
    }
  }
}

// The grouping as the host would compute it, tile triples (expert, first, count <= tile).
void ReferenceGroups(const std::vector<uint32_t>& ids, int64_t n_expert, int64_t max_tiles,
                     uint32_t tile_size, std::vector<uint32_t>* order,
                     std::vector<uint32_t>* tiles) {
  order->clear();
  tiles->assign(3 * max_tiles, 0xDEADBEEFu);
  int64_t tile = 0;
  for (uint32_t e = 0; e < n_expert; ++e) {
    const auto first = static_cast<uint32_t>(order->size());
    for (size_t s = 0; s < ids.size(); ++s) {
      if (ids[s] == e) order->push_back(static_cast<uint32_t>(s));
    }
    const auto count = static_cast<uint32_t>(order->size()) - first;
    for (uint32_t j = 0; j < count; j += tile_size, ++tile) {
      (*tiles)[3 * tile] = e;
      (*tiles)[3 * tile + 1] = first + j;
      (*tiles)[3 * tile + 2] = std::min(tile_size, count - j);
    }
  }
  for (; tile < max_tiles; ++tile) (*tiles)[3 * tile + 2] = 0;
}

TEST_F(GpuKernelsTest, GroupSlotsIsAStableCountingSort) {
  struct Case {
    int64_t n_slots, n_expert;
    const char* pattern;  // how the ids are drawn
  };
  // Single slots; a decode batch; a 512-token prefill of a top-8 model (16 chunks of 256);
  // up to kMaxExperts experts; one expert taking every slot (its 129 tiles written by one
  // invocation); only the last experts, owned by the last invocations; runs of one expert.
  const std::vector<Case> cases = {
      {1, 8, "random"},      {7, 8, "random"},  {300, 128, "random"}, {4096, 128, "random"},
      {2000, 512, "random"}, {1027, 32, "one"}, {256, 512, "high"},   {513, 3, "runs"},
  };
  for (const Case& c : cases)
    for (int64_t tile : {int64_t{8}, int64_t{16}, int64_t{32}}) {
      SCOPED_TRACE(testing::Message() << c.n_slots << " slots, " << c.n_expert << " experts, "
                                      << c.pattern << ", tiles of " << tile);
      std::mt19937 rng(static_cast<uint32_t>(c.n_slots * 31 + c.n_expert));
      std::vector<uint32_t> ids(c.n_slots);
      for (int64_t s = 0; s < c.n_slots; ++s) {
        const std::string pat = c.pattern;
        ids[s] = pat == "one"    ? 17u
                 : pat == "high" ? static_cast<uint32_t>(c.n_expert - 1 - rng() % 3)
                 : pat == "runs" ? static_cast<uint32_t>((s / 50) % c.n_expert)
                                 : static_cast<uint32_t>(rng() % c.n_expert);
      }
      const int64_t max_tiles = Kernels::MaxExpertTiles(c.n_slots, c.n_expert, tile);
      std::vector<uint32_t> want_order, want_tiles;
      ReferenceGroups(ids, c.n_expert, max_tiles, static_cast<uint32_t>(tile), &want_order,
                      &want_tiles);

      Buffer idb = Empty(ids.size() * 4), order = Empty(ids.size() * 4);
      Buffer tiles = Empty(max_tiles * 12);
      ASSERT_TRUE(ctx_->Upload(idb, 0, ids.data(), ids.size() * 4).ok());
      // Poison the outputs, so a tile or place the kernel skips shows.
      const std::vector<uint32_t> poison(std::max<size_t>(3 * max_tiles, ids.size()), 0xDEADBEEFu);
      ASSERT_TRUE(ctx_->Upload(tiles, 0, poison.data(), 3 * max_tiles * 4).ok());
      ASSERT_TRUE(ctx_->Upload(order, 0, poison.data(), ids.size() * 4).ok());
      Recorder rec(ctx_);
      kernels_->GroupSlots(&rec, idb, order, tiles, c.n_slots, c.n_expert, tile);
      ASSERT_TRUE(rec.Finish().ok());
      ASSERT_TRUE(rec.Run().ok());
      std::vector<uint32_t> got_order(ids.size()), got_tiles(3 * max_tiles);
      ASSERT_TRUE(ctx_->Download(order, 0, got_order.data(), got_order.size() * 4).ok());
      ASSERT_TRUE(ctx_->Download(tiles, 0, got_tiles.data(), got_tiles.size() * 4).ok());
      EXPECT_EQ(got_order, want_order);
      // Only the counts of the unused tiles are written; their other words stay as they were.
      for (int64_t t = 0; t < max_tiles; ++t) {
        if (want_tiles[3 * t + 2] == 0) {
          EXPECT_EQ(got_tiles[3 * t + 2], 0u) << "tile " << t;
        } else {
          for (int k = 0; k < 3; ++k) {
            EXPECT_EQ(got_tiles[3 * t + k], want_tiles[3 * t + k]) << "tile " << t << " word " << k;
          }
        }
      }
    }
}

// Kernels::GroupTile: the narrowest of 8, 16, 32 holding an expert's average share of the slots
// (rounded up), never above the token tile cap.
TEST_F(GpuKernelsTest, GroupTileHoldsAnExpertsShare) {
  struct Case {
    int64_t n_slots, n_expert, want;
  };
  // clang-format off
  const std::vector<Case> cases = {
      {2, 8, 8},       {512, 128, 8},  {1024, 128, 8},   {1025, 128, 16},  // decode batches
      {128, 8, 16},    {129, 8, 32},   {4096, 128, 32},  {100000, 8, 32},  // Mixtral, prefill
      {256, 32, 8},    {257, 32, 16},  {33, 1, 32},      {16, 1, 16},
  };
  // clang-format on
  for (const Case& c : cases) {
    EXPECT_EQ(kernels_->GroupTile(c.n_slots, c.n_expert), c.want)
        << c.n_slots << " slots over " << c.n_expert << " experts";
  }
  for (int64_t cap : {int64_t{8}, int64_t{16}}) {
    auto k = Kernels::Create(ctx_, GemvVariant::kBasic, cap);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    // UF_GPU_GROUP_TILE caps the grouped tile alone; the token tile keeps its cap (32 here).
    ScopedEnv env("UF_GPU_GROUP_TILE", cap == 8 ? "8" : "16");
    auto g = Kernels::Create(ctx_, GemvVariant::kBasic, 32);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(g->GemmTile(100), 32);
    for (const Case& c : cases) {
      EXPECT_EQ(k->GroupTile(c.n_slots, c.n_expert), std::min(c.want, cap))
          << c.n_slots << " slots over " << c.n_expert << " experts, cap " << cap;
      EXPECT_EQ(g->GroupTile(c.n_slots, c.n_expert), std::min(c.want, cap))
          << c.n_slots << " slots over " << c.n_expert << " experts, UF_GPU_GROUP_TILE " << cap;
    }
  }
}

// The grouped expert GEMM in tiles of 8, 16 and 32 gives every slot the bits of the ungrouped
// one (gemmx_*, which ExpertGemmEqualsEachExpertsGemm holds to the one-token GEMM): 3 experts
// taking 35, 45 and 20 of 100 slots, so each width has full and partial tiles, F16 and BF16's
// two-row tiles of 16 and 32 included; every weight type, both GEMV variants where they differ,
// gate/up (x_div = k) and down (x_div = 1). 37 rows: an odd count, whose last two-row subgroup
// computes one row.
TEST_F(GpuKernelsTest, GroupedTilesGiveTheUngroupedBits) {
  const int64_t rows = 37, cols = 256, n_exp = 3, n = 50, k = 2;
  std::vector<uint32_t> ids(n * k);
  for (int64_t t = 0; t < n; ++t) {
    ids[t * k] = t % 10 < 6 ? 0u : (t % 10 < 9 ? 1u : 2u);
    ids[t * k + 1] = (ids[t * k] + 1) % n_exp;
  }
  const std::vector<float> x = Random(n * k * cols, 71);
  Buffer idb = Empty(ids.size() * 4);
  ASSERT_TRUE(ctx_->Upload(idb, 0, ids.data(), ids.size() * 4).ok());
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                            GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kMXFP4};
  for (GgmlType type : types) {
    SCOPED_TRACE(GgmlTypeName(type));
    std::vector<std::vector<uint8_t> > data;
    std::vector<kernels::Matrix> experts;
    auto stacked = RandomExperts(type, n_exp, rows, cols, 72, &data, &experts);
    ASSERT_TRUE(stacked.ok()) << stacked.status().ToString();
    const bool q8 = ActivationFor(type) != Activation::kF32;
    for (const Kernels* kern : Variants(type))
      for (int64_t x_div : {k, int64_t{1}}) {
        SCOPED_TRACE(testing::Message() << VariantName(kern) << ", x_div " << x_div);
        const int64_t n_x = n * k / x_div;
        Buffer xb = Floats(std::vector<float>(x.begin(), x.begin() + n_x * cols));
        Buffer xq = Empty(ActBytes(n_x * cols)), ye = Empty(n * k * rows * 4);
        Buffer order = Empty(n * k * 4), tiles = Empty(Kernels::MaxExpertTiles(n * k, n_exp) * 12);
        std::vector<Buffer> yg;
        Recorder rec(ctx_);
        QuantizeFor(&rec, type, xb, n_x * cols, xq);
        kern->GemmExperts(&rec, *stacked, q8 ? xq : xb, idb, n * k, x_div, ye);
        for (int64_t tile : {int64_t{8}, int64_t{16}, int64_t{32}}) {
          // Each width's grouping and product in turn (the tiles buffer is reused).
          yg.push_back(Empty(n * k * rows * 4));
          kern->GroupSlots(&rec, idb, order, tiles, n * k, n_exp, tile);
          kern->GemmExpertsGrouped(&rec, *stacked, q8 ? xq : xb, tiles, order, n * k, x_div,
                                   yg.back(), tile);
        }
        ASSERT_TRUE(rec.Finish().ok());
        ASSERT_TRUE(rec.Run().ok());
        const std::vector<float> want = Read(ye, n * k * rows);
        for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(std::isfinite(want[i])) << i;
        for (size_t g = 0; g < yg.size(); ++g) {
          const std::vector<float> got = Read(yg[g], n * k * rows);
          for (int64_t slot = 0; slot < n * k; ++slot) {
            ASSERT_EQ(std::memcmp(got.data() + slot * rows, want.data() + slot * rows, rows * 4), 0)
                << "tiles of " << (8 << g) << ", slot " << slot << " (expert " << ids[slot] << ")";
          }
        }
      }
  }
}

#endif  // UF_HAVE_VULKAN

}  // namespace
}  // namespace uf::gpu
