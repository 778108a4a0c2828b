#include "engine/kv_cache.h"

#include <gtest/gtest.h>

#include <set>

namespace uf::engine {
namespace {

KvCacheOptions Small(int64_t n_blocks, int max_seqs = 2) {
  KvCacheOptions o;
  o.n_layer = 2;
  o.n_head_kv = 2;
  o.head_dim = 4;
  o.block_size = 4;
  o.n_blocks = n_blocks;
  o.max_seqs = max_seqs;
  return o;
}

TEST(KvCache, RejectsBadOptions) {
  KvCacheOptions o = Small(4);
  o.n_blocks = 0;
  EXPECT_EQ(KvCache::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = Small(4);
  o.head_dim = -1;
  EXPECT_EQ(KvCache::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = Small(4);
  o.max_seqs = 0;
  EXPECT_EQ(KvCache::Create(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(KvCache, HugePoolFailsCleanly) {
  KvCacheOptions o = Small(1 << 29);
  o.n_layer = 1000;
  o.head_dim = 1000;
  auto c = KvCache::Create(o);
  EXPECT_FALSE(c.ok());
}

TEST(KvCache, BlocksForCoversContextPerSequence) {
  EXPECT_EQ(KvCacheOptions::BlocksFor(16, 1, 16), 1);
  EXPECT_EQ(KvCacheOptions::BlocksFor(17, 1, 16), 2);
  EXPECT_EQ(KvCacheOptions::BlocksFor(32, 4, 16), 5);
}

TEST(KvCache, ReserveAllocatesWholeBlocksAndRemoveFrees) {
  auto c = KvCache::Create(Small(4)).value();
  EXPECT_EQ(c->free_blocks(), 4);
  ASSERT_TRUE(c->Reserve(0, 5).ok());  // 2 blocks of 4
  EXPECT_EQ(c->Capacity(0), 8);
  EXPECT_EQ(c->free_blocks(), 2);
  ASSERT_TRUE(c->Reserve(0, 8).ok());  // already covered
  EXPECT_EQ(c->free_blocks(), 2);
  c->SetLength(0, 5);
  EXPECT_EQ(c->Length(0), 5);
  c->Remove(0);
  EXPECT_EQ(c->Length(0), 0);
  EXPECT_EQ(c->Capacity(0), 0);
  EXPECT_EQ(c->free_blocks(), 4);
}

TEST(KvCache, OutOfBlocksIsResourceExhaustedAndAllocatesNothing) {
  auto c = KvCache::Create(Small(3)).value();
  ASSERT_TRUE(c->Reserve(0, 8).ok());
  const Status s = c->Reserve(1, 8);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(c->free_blocks(), 1);
  EXPECT_EQ(c->Capacity(1), 0);
  ASSERT_TRUE(c->Reserve(1, 4).ok());
  EXPECT_EQ(c->free_blocks(), 0);
  c->Remove(0);
  EXPECT_TRUE(c->Reserve(1, 12).ok());
}

TEST(KvCache, PastMaxSeqLenIsOutOfRange) {
  KvCacheOptions o = Small(8);
  o.max_seq_len = 10;
  auto c = KvCache::Create(o).value();
  EXPECT_TRUE(c->Reserve(0, 10).ok());
  EXPECT_EQ(c->Reserve(0, 11).code(), StatusCode::kOutOfRange);
}

TEST(KvCache, SequencesGetDistinctBlocksAndDataStaysPut) {
  auto c = KvCache::Create(Small(6)).value();
  ASSERT_TRUE(c->Reserve(0, 12).ok());
  ASSERT_TRUE(c->Reserve(1, 12).ok());
  std::set<int32_t> ids;
  for (int s = 0; s < 2; ++s) {
    for (int b = 0; b < 3; ++b) ids.insert(c->BlockTable(s)[b]);
  }
  EXPECT_EQ(ids.size(), 6u);
  // Write a distinct value into every slot of every slice of both layers, then read back.
  const int64_t per_slice = 4 * 4;  // block_size * head_dim
  auto value = [](int64_t layer, int32_t b, int64_t h, int64_t i) {
    return static_cast<float>(layer * 10000 + b * 1000 + h * 100 + i);
  };
  for (int64_t layer = 0; layer < 2; ++layer) {
    for (int32_t b : ids) {
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t i = 0; i < per_slice; ++i) {
          c->KeySliceF32(layer, b, h)[i] = value(layer, b, h, i);
          c->ValueSliceF32(layer, b, h)[i] = -value(layer, b, h, i);
        }
      }
    }
  }
  for (int64_t layer = 0; layer < 2; ++layer) {
    for (int32_t b : ids) {
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t i = 0; i < per_slice; ++i) {
          ASSERT_EQ(c->KeySliceF32(layer, b, h)[i], value(layer, b, h, i));
          ASSERT_EQ(c->ValueSliceF32(layer, b, h)[i], -value(layer, b, h, i));
        }
      }
    }
  }
}

TEST(KvCache, TruncateReturnsOnlyUnneededBlocks) {
  auto c = KvCache::Create(Small(4)).value();
  ASSERT_TRUE(c->Reserve(0, 16).ok());
  c->SetLength(0, 16);
  const int32_t first = c->BlockTable(0)[0];
  c->Truncate(0, 5);  // positions 0..4 need 2 blocks
  EXPECT_EQ(c->Length(0), 5);
  EXPECT_EQ(c->Capacity(0), 8);
  EXPECT_EQ(c->free_blocks(), 2);
  EXPECT_EQ(c->BlockTable(0)[0], first);
  c->Truncate(0, 8);  // never grows
  EXPECT_EQ(c->Length(0), 5);
}

TEST(KvCache, ReuseAfterChurnKeepsPoolConsistent) {
  auto c = KvCache::Create(Small(8, 4)).value();
  for (int round = 0; round < 50; ++round) {
    for (int s = 0; s < 4; ++s) {
      const int64_t want = (round * 7 + s * 3) % 9;
      (void)c->Reserve(s, want);
      if (round % 3 == s % 3) c->Remove(s);
    }
    int64_t used = 0;
    for (int s = 0; s < 4; ++s) used += c->Capacity(s) / 4;
    ASSERT_EQ(used + c->free_blocks(), 8);
  }
}

TEST(KvCache, F16StoresHalfTheBytes) {
  KvCacheOptions o;
  o.n_layer = 2;
  o.n_head_kv = 2;
  o.head_dim = 8;
  o.block_size = 4;
  o.n_blocks = 6;
  auto f32 = KvCache::Create(o);
  o.type = KvType::kF16;
  auto f16 = KvCache::Create(o);
  ASSERT_TRUE(f32.ok() && f16.ok());
  EXPECT_EQ((*f32)->bytes(), 2u * 2 * 6 * 2 * 4 * 8 * 4);
  EXPECT_EQ((*f16)->bytes() * 2, (*f32)->bytes());
  EXPECT_EQ((*f16)->bytes_per_token(), 2u * 2 * 2 * 8 * 2);
  // Slices of an F16 cache are 2-byte elements, laid out as the F32 ones: head-major, so one
  // head's consecutive blocks are adjacent.
  const auto* b0 = static_cast<const uint8_t*>((*f16)->KeySlice(0, 0, 0));
  const auto* b1 = static_cast<const uint8_t*>((*f16)->KeySlice(0, 1, 0));
  const auto* h1 = static_cast<const uint8_t*>((*f16)->KeySlice(0, 0, 1));
  const auto* l1 = static_cast<const uint8_t*>((*f16)->KeySlice(1, 0, 0));
  EXPECT_EQ((*f16)->slice_bytes(), 4u * 8 * 2);
  EXPECT_EQ(b1 - b0, 4 * 8 * 2);
  EXPECT_EQ(h1 - b0, 6 * (4 * 8 * 2));
  EXPECT_EQ(l1 - b0, 2 * 6 * (4 * 8 * 2));
  EXPECT_DEATH((*f16)->KeySliceF32(0, 0, 0), "F32 access");
  EXPECT_EQ(ParseKvType("f16").value(), KvType::kF16);
  EXPECT_EQ(ParseKvType("f32").value(), KvType::kF32);
  EXPECT_FALSE(ParseKvType("q4").ok());
  EXPECT_EQ(ParseKvType("q8_0").value(), KvType::kQ8_0);
  // Q8_0: 34 bytes per 32 values, and only whole blocks per head row.
  o.type = KvType::kQ8_0;
  auto bad = KvCache::Create(o);  // head_dim 8
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("multiple of 32"), std::string::npos);
  o.head_dim = 64;
  auto q8 = KvCache::Create(o);
  ASSERT_TRUE(q8.ok());
  EXPECT_EQ((*q8)->bytes_per_token(), 2u * 2 * 2 * 68);
  EXPECT_EQ((*q8)->bytes(), 2u * 2 * 6 * 2 * 4 * 68);
  EXPECT_STREQ(KvTypeName(KvType::kF16), "f16");
}

}  // namespace
}  // namespace uf::engine
