// moe_group.comp (Kernels::GroupSlots), the device's grouping of a mixture-of-experts batch's
// (token, expert) slots by expert, against the stable counting sort it must equal: order = the
// slots sorted by expert, slot order within an expert; tiles of up to 8 slots of one expert in
// expert order, the unused tiles' counts 0. Exact equality: the output is integers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#if UF_HAVE_VULKAN
#include "gpu_kernels_fixture.h"
#endif

namespace uf::gpu {
namespace {

#if !UF_HAVE_VULKAN
TEST(GpuMoeGroup, NotBuilt) { GTEST_SKIP() << "built without the Vulkan backend"; }
#else

// The grouping as the host would compute it, tile triples (expert, first, count).
void ReferenceGroups(const std::vector<uint32_t>& ids, int64_t n_expert, int64_t max_tiles,
                     std::vector<uint32_t>* order, std::vector<uint32_t>* tiles) {
  order->clear();
  tiles->assign(3 * max_tiles, 0xDEADBEEFu);
  int64_t tile = 0;
  for (uint32_t e = 0; e < n_expert; ++e) {
    const auto first = static_cast<uint32_t>(order->size());
    for (size_t s = 0; s < ids.size(); ++s) {
      if (ids[s] == e) order->push_back(static_cast<uint32_t>(s));
    }
    const auto count = static_cast<uint32_t>(order->size()) - first;
    for (uint32_t j = 0; j < count; j += 8, ++tile) {
      (*tiles)[3 * tile] = e;
      (*tiles)[3 * tile + 1] = first + j;
      (*tiles)[3 * tile + 2] = std::min(8u, count - j);
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
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << c.n_slots << " slots, " << c.n_expert << " experts, " << c.pattern);
    std::mt19937 rng(static_cast<uint32_t>(c.n_slots * 31 + c.n_expert));
    std::vector<uint32_t> ids(c.n_slots);
    for (int64_t s = 0; s < c.n_slots; ++s) {
      const std::string pat = c.pattern;
      ids[s] = pat == "one"    ? 17u
               : pat == "high" ? static_cast<uint32_t>(c.n_expert - 1 - rng() % 3)
               : pat == "runs" ? static_cast<uint32_t>((s / 50) % c.n_expert)
                               : static_cast<uint32_t>(rng() % c.n_expert);
    }
    const int64_t max_tiles = Kernels::MaxExpertTiles(c.n_slots, c.n_expert);
    std::vector<uint32_t> want_order, want_tiles;
    ReferenceGroups(ids, c.n_expert, max_tiles, &want_order, &want_tiles);

    Buffer idb = Empty(ids.size() * 4), order = Empty(ids.size() * 4);
    Buffer tiles = Empty(max_tiles * 12);
    ASSERT_TRUE(ctx_->Upload(idb, 0, ids.data(), ids.size() * 4).ok());
    // Poison the outputs, so a tile or place the kernel skips shows.
    const std::vector<uint32_t> poison(std::max<size_t>(3 * max_tiles, ids.size()), 0xDEADBEEFu);
    ASSERT_TRUE(ctx_->Upload(tiles, 0, poison.data(), 3 * max_tiles * 4).ok());
    ASSERT_TRUE(ctx_->Upload(order, 0, poison.data(), ids.size() * 4).ok());
    Recorder rec(ctx_);
    kernels_->GroupSlots(&rec, idb, order, tiles, c.n_slots, c.n_expert);
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

#endif  // UF_HAVE_VULKAN

}  // namespace
}  // namespace uf::gpu
