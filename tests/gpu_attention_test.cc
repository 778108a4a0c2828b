// attention_tiled.comp against attention.comp: the tiled kernel must give every row the token
// kernel's bits (a row must not depend on which kernel its batch took, or decode rows would no
// longer be verify rows' bits), so these compare bit for bit rather than within a tolerance.
// attention.comp itself is checked against a double-precision softmax in gpu_kernels_test.cc
// (PagedAttentionMatchesReference).
#include <map>
#include <numeric>
#include <tuple>

#if UF_HAVE_VULKAN
#include "gpu_kernels_fixture.h"
#endif

namespace uf::gpu {
namespace {

#if !UF_HAVE_VULKAN
TEST(GpuAttention, NotBuilt) { GTEST_SKIP() << "built without the Vulkan backend"; }
#else

struct Case {
  int64_t n_head, n_kv, head_dim;
  bool q8;         // a Q8_0 cache, else f16
  int64_t chunk;   // 0: unsplit; else split over positions, combined by attention_combine.comp
  bool sinks;      // gpt-oss's sink logits
  Activation out;  // kF32: no quantized output; else attention's o-projection activation
};

std::string Name(const Case& c) {
  const char* out = c.out == Activation::kQ8_0   ? " q8_0 out"
                    : c.out == Activation::kF16  ? " f16 out"
                    : c.out == Activation::kBF16 ? " bf16 out"
                                                 : "";
  return std::to_string(c.n_head) + "/" + std::to_string(c.n_kv) + " heads, head_dim " +
         std::to_string(c.head_dim) + (c.q8 ? ", q8_0 cache" : ", f16 cache") +
         (c.chunk ? ", chunks of " + std::to_string(c.chunk) : ", unsplit") +
         (c.sinks ? ", sinks" : "") + out;
}

class GpuAttentionTest : public GpuKernelsTest {
 protected:
  struct Result {
    std::vector<float> o;
    std::vector<uint32_t> q;  // the quantized output's words (c.out != kF32)
  };

  // Three sequences in a scrambled block table (blocks of 8), K/V of every position stored by
  // KvStore, and a batch mixing them: a long run of sequence 0 (positions 30-70, several tiles
  // and, split, several chunks), a run of sequence 1 from position 0, a lone token of sequence
  // 2, sequence 0 again, then sequence 1 again (runs that start inside a tile). The same batch
  // through either kernel.
  Result Run(const Case& c, int64_t tile) {
    const int64_t bs = 8, max_blocks = 12, max_len = max_blocks * bs, n_seqs = 3;
    const int64_t n_blocks = n_seqs * max_blocks, n_rows = n_blocks * bs;
    std::vector<int32_t> table(n_seqs * max_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(7));
    const auto row_of = [&](uint32_t seq, uint32_t pos) {
      return uint32_t(table[seq * max_blocks + pos / bs] * bs + pos % bs);
    };
    AttentionShape as;
    as.n_head = c.n_head;
    as.n_head_kv = c.n_kv;
    as.head_dim = c.head_dim;
    as.n_rows = n_rows;
    as.q8 = c.q8;
    as.k_off = 0;
    as.v_off = static_cast<uint32_t>(c.n_kv * n_rows * as.row_words());
    as.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    as.block_size = bs;
    as.max_blocks = max_blocks;
    as.max_len = max_len;
    as.chunk = c.chunk;
    as.tile = tile;
    // The cache: positions 0 .. 90 of every sequence.
    const int64_t n_pos = 91, hd = c.head_dim;
    Buffer cache = Empty(2 * c.n_kv * n_rows * as.row_words() * 4);
    {
      std::vector<std::array<uint32_t, 4> > rows;
      for (uint32_t s = 0; s < n_seqs; ++s) {
        for (uint32_t p = 0; p < n_pos; ++p) rows.push_back({0, p, row_of(s, p), s});
      }
      const auto n = static_cast<int64_t>(rows.size());
      Buffer tok = Tok(rows), kb = Floats(Random(n * c.n_kv * hd, 100)),
             vb = Floats(Random(n * c.n_kv * hd, 200));
      Recorder rec(ctx_);
      kernels_->KvStore(&rec, kb, vb, cache, tok, n, as);
      EXPECT_TRUE(rec.Finish().ok());
      EXPECT_TRUE(rec.Run().ok());
    }
    std::vector<std::array<uint32_t, 4> > rows;
    const auto add = [&](uint32_t seq, uint32_t first, uint32_t last) {
      for (uint32_t p = first; p <= last; ++p) rows.push_back({0, p, row_of(seq, p), seq});
    };
    add(0, 30, 70);
    add(1, 0, 4);
    add(2, 90, 90);
    add(0, 71, 73);
    add(1, 5, 12);
    const auto n = static_cast<int64_t>(rows.size());
    Buffer tok = Tok(rows);
    Buffer bt = std::move(*ctx_->CreateBuffer(table.size() * 4, Memory::kHost));
    std::memcpy(bt.mapped(), table.data(), table.size() * 4);
    const int64_t values = n * c.n_head * hd;
    Buffer qb = Floats(Random(values, 9)), scores = Empty(n * c.n_head * max_len * 4),
           out = Empty(values * 4), part = Empty(n * c.n_head * as.part_floats() * 4),
           sinks = Floats(Random(c.n_head, 11)), q_out = Empty(ActBytes(values));
    Recorder rec(ctx_);
    kernels_->Attention(&rec, qb, cache, scores, out, tok, bt, n, as, c.chunk > 0 ? &part : nullptr,
                        c.sinks ? &sinks : nullptr, c.out != Activation::kF32 ? &q_out : nullptr,
                        c.out);
    EXPECT_TRUE(rec.Finish().ok());
    EXPECT_TRUE(rec.Run().ok());
    Result r;
    r.o = Read(out, values);
    if (c.out == Activation::kQ8_0) r.q = Words(ctx_, q_out, Q8ActivationBytes(values));
    if (c.out == Activation::kF16 || c.out == Activation::kBF16) {
      r.q = Words(ctx_, q_out, PairActivationBytes(values));
    }
    return r;
  }
};

// Every shape the tiled kernel takes: one query head a KV head (tiles of 32 tokens), 4 (8), 8
// (4) and 32 (one token a tile); head dims 32, 64 and 128 (the largest it takes); both caches;
// unsplit and split into chunks of 16 positions (1 to 6 chunks a token); sinks; each output.
TEST_F(GpuAttentionTest, TiledRowsAreTheTokenKernelsBits) {
  std::vector<Case> cases;
  for (auto [nh, nkv, hd] :
       {std::tuple<int64_t, int64_t, int64_t>{4, 4, 32}, {8, 2, 64}, {16, 2, 128}, {32, 1, 64}}) {
    for (bool q8 : {false, true}) {
      for (int64_t chunk : {0, 16})
        cases.push_back({nh, nkv, hd, q8, chunk, false, Activation::kF32});
    }
  }
  for (Activation out : {Activation::kQ8_0, Activation::kF16, Activation::kBF16}) {
    for (int64_t chunk : {0, 16}) cases.push_back({8, 2, 64, false, chunk, true, out});
  }
  cases.push_back({16, 2, 128, true, 0, true, Activation::kF32});
  for (const Case& c : cases) {
    SCOPED_TRACE(Name(c));
    AttentionShape s;
    s.n_head = c.n_head;
    s.n_head_kv = c.n_kv;
    s.head_dim = c.head_dim;
    ASSERT_TRUE(kernels_->TiledAttentionFits(s)) << "the device's shared memory is too small";
    const Result token = Run(c, 0);
    // Not vacuous: finite, and no head's row left unwritten (all zeros).
    for (size_t row = 0; row < token.o.size(); row += c.head_dim) {
      bool written = false;
      for (int64_t i = 0; i < c.head_dim; ++i) {
        ASSERT_TRUE(std::isfinite(token.o[row + i]));
        written |= token.o[row + i] != 0.0f;
      }
      ASSERT_TRUE(written) << "row " << row / c.head_dim;
    }
    // Tiles of as many tokens as the kernel's 32 rows hold, and of one token (decode batches).
    for (int64_t tile : {Kernels::kTiledAttentionRows / (c.n_head / c.n_kv), int64_t{1}}) {
      SCOPED_TRACE("tiles of " + std::to_string(tile));
      const Result tiled = Run(c, tile);
      ASSERT_EQ(token.o.size(), tiled.o.size());
      int64_t differ = 0, first = -1;
      for (size_t i = 0; i < token.o.size(); ++i) {
        if (std::memcmp(&token.o[i], &tiled.o[i], 4) != 0) {
          if (differ++ == 0) first = static_cast<int64_t>(i);
        }
      }
      EXPECT_EQ(differ, 0) << "of " << token.o.size() << " values; the first at " << first << ": "
                           << token.o[std::max<int64_t>(first, 0)] << " vs "
                           << tiled.o[std::max<int64_t>(first, 0)];
      EXPECT_EQ(token.q, tiled.q);
    }
  }
}

// Which shapes it refuses: a sliding window, head_dim past 128 or odd, more than 32 query heads
// a KV head.
TEST_F(GpuAttentionTest, TiledKernelRefusesWhatItCannotTake) {
  AttentionShape s;
  s.n_head = 32;
  s.n_head_kv = 8;
  s.head_dim = 64;
  EXPECT_TRUE(kernels_->TiledAttentionFits(s));
  const auto refused = [&](void (*edit)(AttentionShape*)) {
    AttentionShape t = s;
    edit(&t);
    return !kernels_->TiledAttentionFits(t);
  };
  EXPECT_TRUE(refused([](AttentionShape* t) { t->window = 128; }));
  EXPECT_TRUE(refused([](AttentionShape* t) { t->head_dim = 256; }));
  EXPECT_TRUE(refused([](AttentionShape* t) { t->head_dim = 63; }));
  EXPECT_TRUE(refused([](AttentionShape* t) {
    t->n_head = 64;
    t->n_head_kv = 1;
  }));
}

#endif  // UF_HAVE_VULKAN

}  // namespace
}  // namespace uf::gpu
