// The tiled attention kernel (kernels/attention.h) against a double-precision softmax attention
// on the same cached values, on every ISA tier this CPU has; and the decoder's flash-decoding
// split against its unsplit path, bit for bit.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "kernels/blocks.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "model/decoder.h"
#include "shared_data.h"
#include "test_models.h"

namespace uf {
namespace {

using kernels::Isa;

std::vector<Isa> Tiers() {
  std::vector<Isa> v;
  for (int i = 0; i <= static_cast<int>(kernels::ActiveIsa()); ++i)
    v.push_back(static_cast<Isa>(i));
  return v;
}

struct Case {
  GgmlType type;
  bool transposed;
  int64_t head_dim, block_size, nq, n_keys;
};

// A chunk's K/V in the layout the cache uses, blocks scattered in a pool (as a paged cache's
// are), and the exact values the kernel must see (dequantized).
struct Chunk {
  std::vector<uint8_t> pool_k, pool_v;
  std::vector<const void*> k, v;
  std::vector<float> kf, vf;  // [n_keys][head_dim] values as stored
};

Chunk MakeChunk(const Case& c, std::mt19937& rng) {
  const int64_t d = c.head_dim, bs = c.block_size;
  const int64_t nb = (c.n_keys + bs - 1) / bs;
  const size_t row = GgmlRowBytes(c.type, d), slice = bs * row;
  Chunk ch;
  ch.pool_k.assign((nb + 3) * slice, 0);
  ch.pool_v.assign((nb + 3) * slice, 0);
  ch.kf.assign(nb * bs * d, 0.0f);
  ch.vf.assign(nb * bs * d, 0.0f);
  std::vector<int64_t> order(nb + 3);
  for (int64_t i = 0; i < nb + 3; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(d);
  std::vector<uint8_t> enc(row);
  for (int64_t j = 0; j < nb * bs; ++j) {
    uint8_t* kslice = ch.pool_k.data() + order[j / bs] * slice;
    uint8_t* vslice = ch.pool_v.data() + order[j / bs] * slice;
    for (int pass = 0; pass < 2; ++pass) {
      for (float& e : x) e = g(rng) * (pass == 0 ? 2.0f : 1.0f);
      float* exact = (pass == 0 ? ch.kf : ch.vf).data() + j * d;
      if (c.type == GgmlType::kF16) {
        auto* h = reinterpret_cast<uint16_t*>(enc.data());
        kernels::F32ToF16(x.data(), h, d);
        for (int64_t i = 0; i < d; ++i) exact[i] = kernels::Fp16ToFp32(h[i]);
      } else if (c.type == GgmlType::kQ8_0) {
        kernels::QuantizeRow(GgmlType::kQ8_0, x.data(), enc.data(), d);
        kernels::DequantizeRow(GgmlType::kQ8_0, enc.data(), exact, d);
      } else {
        std::memcpy(enc.data(), x.data(), row);
        std::memcpy(exact, x.data(), row);
      }
      uint8_t* dst = pass == 0 ? kslice : vslice;
      if (pass == 0 && c.transposed) {
        const size_t es = c.type == GgmlType::kF16 ? 2 : 4;
        for (int64_t i = 0; i < d; ++i) {
          std::memcpy(dst + (i * bs + j % bs) * es, enc.data() + i * es, es);
        }
      } else {
        std::memcpy(dst + (j % bs) * row, enc.data(), row);
      }
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    ch.k.push_back(ch.pool_k.data() + order[b] * slice);
    ch.v.push_back(ch.pool_v.data() + order[b] * slice);
  }
  return ch;
}

class AttendChunkTest : public ::testing::TestWithParam<Case> {
 protected:
  void TearDown() override { kernels::SetIsaForTesting(best_); }
  const Isa best_ = kernels::ActiveIsa();
};

// The kernel's output, max and sum against softmax(scale q.k) v in double over the visible keys
// (from each row's first key, with a sliding window).
// Tolerance: float accumulation over <= 512 keys of unit-variance values and the exp polynomial
// (~1e-7 relative): 2e-5 relative on the sum, 2e-5 x (1 + |out|) absolute on the output.
TEST_P(AttendChunkTest, MatchesDoubleSoftmaxAttention) {
  const Case c = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(c.head_dim * 131 + c.nq * 7 + c.n_keys));
  const Chunk ch = MakeChunk(c, rng);
  const int64_t d = c.head_dim;
  std::vector<float> q(c.nq * d);
  std::normal_distribution<float> g(0.0f, 1.0f);
  // Every other row 8x larger: scores spanning e^-60 and more below the max (the exp
  // polynomial's clamp at -87 must give no weight, not a wrong one).
  for (size_t i = 0; i < q.size(); ++i) q[i] = g(rng) * ((i / d) % 2 ? 8.0f : 1.0f);
  // Rows see a causal-like spread of prefixes: none, one key, part, all, past the end.
  std::vector<int32_t> visible(c.nq);
  for (int64_t r = 0; r < c.nq; ++r) {
    const int64_t pick[] = {c.n_keys, 1, c.n_keys / 2 + 1, 0, c.n_keys + 5, c.n_keys - 3};
    visible[r] = static_cast<int32_t>(std::max<int64_t>(0, pick[r % 6]));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  kernels::AttentionKv kv;
  kv.type = c.type;
  kv.head_dim = d;
  kv.block_size = c.block_size;
  kv.k = ch.k.data();
  kv.v = ch.v.data();
  kv.k_transposed = c.transposed;
  kv.n_keys = c.n_keys;
  kv.n_blocks = static_cast<int64_t>(ch.k.size());
  kv.prefetch_blocks = 0;
  // Sliding windows (gpt-oss): rows also start at a first key: before the chunk, inside the
  // visible keys, at the last one, past them (an empty row). Each tier without, then with.
  std::vector<int32_t> first(c.nq);
  for (int64_t r = 0; r < c.nq; ++r) {
    const int64_t vis = std::min<int64_t>(visible[r], c.n_keys);
    const int64_t pick[] = {-4, vis / 3, vis - 1, vis + 2, 1};
    first[r] = static_cast<int32_t>(pick[r % 5]);
  }
  const auto tiers = Tiers();
  for (size_t pass = 0; pass < 2 * tiers.size(); ++pass) {
    const Isa isa = tiers[pass % tiers.size()];
    const bool window = pass >= tiers.size();
    kernels::SetIsaForTesting(isa);
    kv.first = window ? first.data() : nullptr;
    std::vector<float> scratch(kernels::AttentionScratchFloats(c.nq, d, c.block_size, 512));
    std::vector<float> mx(c.nq), sum(c.nq), acc(c.nq * d), out(c.nq * d);
    kernels::AttentionState st{mx.data(), sum.data(), acc.data()};
    kernels::AttendChunk(kv, q.data(), c.nq, visible.data(), scale, st, scratch.data());
    kernels::FinishAttention(c.nq, d, st, out.data());
    for (int64_t r = 0; r < c.nq; ++r) {
      const int64_t vis = std::min<int64_t>(visible[r], c.n_keys);
      const int64_t lo = window ? std::max<int64_t>(0, first[r]) : 0;
      if (vis <= lo) {
        EXPECT_EQ(mx[r], -INFINITY) << kernels::IsaName(isa) << " row " << r;
        EXPECT_EQ(sum[r], 0.0f);
        for (int64_t i = 0; i < d; ++i) ASSERT_EQ(out[r * d + i], 0.0f);
        continue;
      }
      std::vector<double> s(vis);
      double m = -INFINITY;
      for (int64_t j = lo; j < vis; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += double(q[r * d + i]) * ch.kf[j * d + i];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      double z = 0;
      std::vector<double> want(d, 0.0);
      for (int64_t j = lo; j < vis; ++j) {
        const double p = std::exp(s[j] - m);
        z += p;
        for (int64_t i = 0; i < d; ++i) want[i] += p * ch.vf[j * d + i];
      }
      EXPECT_NEAR(mx[r], m, 1e-5 * (1 + std::fabs(m))) << kernels::IsaName(isa) << " row " << r;
      EXPECT_NEAR(sum[r], z, 2e-5 * z) << kernels::IsaName(isa) << " row " << r;
      for (int64_t i = 0; i < d; ++i) {
        const double w = want[i] / z;
        ASSERT_NEAR(out[r * d + i], w, 2e-5 * (1 + std::fabs(w)))
            << kernels::IsaName(isa) << " row " << r << " col " << i;
      }
    }
  }
}

std::vector<Case> Cases() {
  std::vector<Case> v;
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_0}) {
    for (bool transposed : {true, false}) {
      if (t == GgmlType::kQ8_0 && transposed) continue;
      for (int64_t d : {16, 32, 64, 128}) {
        if (t == GgmlType::kQ8_0 && d % 32 != 0) continue;
        // Block sizes of 16 and 32 take the SIMD path (with the cache's layouts); 8 the scalar.
        for (int64_t bs : {8, 16, 32}) {
          for (int64_t nq : {1, 4, 7}) {
            for (int64_t keys : {1, 17, 100, 512}) {
              if (keys > 512 / bs * bs) continue;
              v.push_back({t, transposed, d, bs, nq, keys});
            }
          }
        }
      }
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttendChunkTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return std::string(GgmlTypeName(c.type)) +
                                  (c.transposed ? "_kt" : "_kr") + "_d" +
                                  std::to_string(c.head_dim) + "_bs" +
                                  std::to_string(c.block_size) + "_q" + std::to_string(c.nq) +
                                  "_n" + std::to_string(c.n_keys);
                         });

// Partials of two halves merged equal the partial of the whole (to float rounding), and merging
// into an empty state copies exactly.
TEST(MergeAttention, TwoHalvesEqualTheWhole) {
  const Case c{GgmlType::kF32, true, 64, 16, 4, 512};
  std::mt19937 rng(5);
  const Chunk ch = MakeChunk(c, rng);
  std::vector<float> q(c.nq * c.head_dim);
  for (float& e : q) e = std::normal_distribution<float>(0, 1)(rng);
  std::vector<int32_t> visible(c.nq, 512);
  std::vector<float> scratch(kernels::AttentionScratchFloats(c.nq, 64, 16, 512));
  auto run = [&](int64_t first_block, int64_t keys, std::vector<float>& buf) {
    buf.assign(c.nq * 66, 0.0f);
    kernels::AttentionState st{buf.data(), buf.data() + c.nq, buf.data() + 2 * c.nq};
    kernels::AttentionKv kv;
    kv.type = c.type;
    kv.head_dim = 64;
    kv.block_size = 16;
    kv.k_transposed = true;
    kv.k = ch.k.data() + first_block;
    kv.v = ch.v.data() + first_block;
    kv.n_keys = keys;
    kv.n_blocks = keys / 16;
    kernels::AttendChunk(kv, q.data(), c.nq, visible.data(), 0.125f, st, scratch.data());
    return st;
  };
  std::vector<float> whole, a, b, empty(c.nq * 66, 0.0f);
  const kernels::AttentionState sw = run(0, 512, whole);
  const kernels::AttentionState sa = run(0, 256, a);
  const kernels::AttentionState sb = run(16, 256, b);
  kernels::AttentionState se{empty.data(), empty.data() + c.nq, empty.data() + 2 * c.nq};
  std::fill(se.max, se.max + c.nq, -INFINITY);
  kernels::MergeAttention(c.nq, 64, sa, se);
  EXPECT_EQ(std::memcmp(empty.data(), a.data(), empty.size() * sizeof(float)), 0);
  kernels::MergeAttention(c.nq, 64, sb, se);
  std::vector<float> o1(c.nq * 64), o2(c.nq * 64);
  kernels::FinishAttention(c.nq, 64, sw, o1.data());
  kernels::FinishAttention(c.nq, 64, se, o2.data());
  for (size_t i = 0; i < o1.size(); ++i) EXPECT_NEAR(o1[i], o2[i], 1e-5 * (1 + std::fabs(o1[i])));
}

// F32 -> F16 rounds to nearest even on every tier, bit for bit, within half an f16 step.
TEST(F32ToF16, SameBitsOnEveryTier) {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.7 * i) * (1 + i % 5) * 1e-3f * (i % 97);
  const Isa best = kernels::ActiveIsa();
  kernels::SetIsaForTesting(Isa::kScalar);
  std::vector<uint16_t> want(x.size()), got(x.size());
  kernels::F32ToF16(x.data(), want.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(kernels::Fp16ToFp32(want[i]), x[i], std::fabs(x[i]) * 4.9e-4 + 6e-8);
  }
  for (Isa isa : Tiers()) {
    kernels::SetIsaForTesting(isa);
    kernels::F32ToF16(x.data(), got.data(), x.size() - 3);  // a tail past the vector width
    got.back() = want.back(), got[x.size() - 2] = want[x.size() - 2];
    got[x.size() - 3] = want[x.size() - 3];
    EXPECT_EQ(got, want) << kernels::IsaName(isa);
  }
  kernels::SetIsaForTesting(best);
}

// The decoder splits a decode step's attention over (KV head, 512-key chunk) units when there
// are fewer KV heads than twice the threads (flash-decoding) and merges the partials after; one
// thread never splits. The result must be the same bits either way, and the same as a row of a
// multi-token batch (the lossless-speculation requirement), past several chunks.
TEST(FlashDecoding, SplitStepsAreBitIdenticalToUnsplitOnes) {
  UF_REQUIRE_SHARED();
  const testing_models::Loaded& l = testing_models::TinyQwen2();
  const model::ModelConfig& c = l.model->config();
  ASSERT_LT(c.n_head_kv, 8) << "the 4-thread run must split";
  constexpr int64_t kPrompt = 1300;  // 3 chunks
  auto logits_of = [&](int threads, engine::KvType kv_type, int batch) {
    engine::KvCacheOptions co;
    co.n_layer = c.n_layer;
    co.n_head_kv = c.n_head_kv;
    co.head_dim = c.head_dim;
    co.type = kv_type;
    co.max_seq_len = kPrompt + 8;
    co.n_blocks = engine::KvCacheOptions::BlocksFor(co.max_seq_len, 1, co.block_size);
    ThreadPool pool(threads);
    auto cache = engine::KvCache::Create(co);
    EXPECT_TRUE(cache.ok());
    model::DecoderOptions dopt;
    dopt.max_batch = 256;
    auto dec = model::Decoder::Create(*l.model, cache->get(), dopt, &pool);
    EXPECT_TRUE(dec.ok());
    model::Batch b;
    int64_t pos = 0;
    while (pos < kPrompt - batch) {
      b.Clear();
      for (int i = 0; i < 256 && pos < kPrompt - batch; ++i, ++pos) {
        b.Add(static_cast<int32_t>((pos * 7919 + 11) % c.n_vocab), static_cast<int32_t>(pos), 0,
              false);
      }
      EXPECT_TRUE((*dec)->Forward(b).ok());
    }
    b.Clear();
    for (int i = 0; i < batch; ++i, ++pos) {
      b.Add(static_cast<int32_t>((pos * 7919 + 11) % c.n_vocab), static_cast<int32_t>(pos), 0,
            true);
    }
    EXPECT_TRUE((*dec)->Forward(b).ok());
    const float* last = (*dec)->logits(batch - 1);
    return std::vector<float>(last, last + c.n_vocab);
  };
  for (engine::KvType t : {engine::KvType::kF16, engine::KvType::kQ8_0, engine::KvType::kF32}) {
    const std::vector<float> one = logits_of(1, t, 1);
    EXPECT_EQ(logits_of(4, t, 1), one) << engine::KvTypeName(t) << ": split decode step";
    EXPECT_EQ(logits_of(2, t, 3), one) << engine::KvTypeName(t) << ": last row of a 3-token batch";
  }
}

}  // namespace
}  // namespace uf
