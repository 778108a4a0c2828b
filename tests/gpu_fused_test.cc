// The fused kernels and the shared barriers of a decode step (issue 28: fewer dispatches and
// barriers per step), on whatever Vulkan device the loader finds first (Mesa's lavapipe in CI).
// Without a device every test skips, saying so.
//
// Every fusion is meant to give the unfused kernels' bits (the same operations per element, in
// the same order), so the comparisons here are exact, with no tolerance: RMSNorm + quantization
// and SwiGLU (+ gpt-oss's clamped SwiGLU) + quantization against the separate kernels; a GEMM or
// the experts' weighted sum that adds into y against the product followed by Add; the whole
// fused step against the unfused one (GpuForwardOptions::fuse) on every shared model. The
// numbers of dispatches and barriers of a recorded step are checked against what the model's
// structure implies (counted here from its layer count and weight types).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/kv_cache.h"
#include "gpu/backend.h"
#include "gpu/step_tuner.h"
#include "model/batch.h"
#include "model/model.h"
#include "model/synth.h"
#include "shared_data.h"

#if UF_HAVE_VULKAN
#include "gpu_kernels_fixture.h"
#endif

namespace uf::gpu {
namespace {

#if !UF_HAVE_VULKAN
TEST(GpuFused, NotBuilt) { GTEST_SKIP() << "built without the Vulkan backend"; }
#else

TEST_F(GpuKernelsTest, RmsNormQuantEqualsRmsNormThenQuantize) {
  const int64_t n = 512, rows = 3;
  const std::vector<float> x = ActivationValues(rows * n, 11), w = Random(n, 12);
  for (Activation act : kFusedFormats) {
    SCOPED_TRACE(FormatName(act));
    const uint64_t qbytes = ActBytes(rows * n);
    Buffer xb = Floats(x), wb = Floats(w), y1 = Empty(rows * n * 4), y2 = Empty(rows * n * 4),
           q1 = Empty(qbytes), q2 = Empty(qbytes);
    Recorder rec(ctx_);
    kernels_->RmsNorm(&rec, xb, 0, wb, y1, 0, rows, n, 1e-5f);
    kernels_->QuantizeAs(&rec, act, y1, 0, rows * n, q1);
    kernels_->RmsNormQuant(&rec, xb, wb, y2, rows, n, 1e-5f, act, q2);
    ASSERT_TRUE(rec.Finish().ok());
    ASSERT_TRUE(rec.Run().ok());
    ExpectSameOutputs(ctx_, act, rows * n, y1, y2, q1, q2);
  }
}

TEST_F(GpuKernelsTest, SwiGluQuantEqualsSwiGluThenQuantize) {
  const int64_t n = 11 * 512;  // 2.75 spans of swiglu_q's workgroups
  const std::vector<float> g = ActivationValues(n, 13), u = Random(n, 14);
  for (Activation act : kFusedFormats) {
    SCOPED_TRACE(FormatName(act));
    const uint64_t qbytes = ActBytes(n);
    Buffer g1 = Floats(g), g2 = Floats(g), ub = Floats(u), q1 = Empty(qbytes), q2 = Empty(qbytes);
    Recorder rec(ctx_);
    kernels_->SwiGlu(&rec, g1, ub, g1, n);  // in place, as the decoder runs it
    kernels_->QuantizeAs(&rec, act, g1, 0, n, q1);
    kernels_->SwiGluQuant(&rec, g2, ub, g2, n, act, q2);
    ASSERT_TRUE(rec.Finish().ok());
    ASSERT_TRUE(rec.Run().ok());
    ExpectSameOutputs(ctx_, act, n, g1, g2, q1, q2);
  }
}

// gpt-oss's clamped SwiGLU over 5 slots of 1,024 values with 3 experts' biases (values past
// the clamps of 7 included).
TEST_F(GpuKernelsTest, SwiGluOaiQuantEqualsSwiGluOaiThenQuantize) {
  const int64_t slots = 5, ff = 1024, n = slots * ff;
  const std::vector<float> g = Random(n, 15, 4.0f), u = Random(n, 16, 4.0f),
                           gbias = Random(3 * ff, 17), ubias = Random(3 * ff, 18);
  const std::vector<uint32_t> ids = {2, 0, 1, 1, 2};
  for (Activation act : kFusedFormats) {
    SCOPED_TRACE(FormatName(act));
    const uint64_t qbytes = ActBytes(n);
    Buffer g1 = Floats(g), g2 = Floats(g), ub = Floats(u), gb = Floats(gbias), ubb = Floats(ubias),
           q1 = Empty(qbytes), q2 = Empty(qbytes), idb = Empty(slots * 4);
    ASSERT_TRUE(ctx_->Upload(idb, 0, ids.data(), slots * 4).ok());
    Recorder rec(ctx_);
    kernels_->SwiGluOai(&rec, g1, ub, gb, ubb, idb, slots, ff);
    kernels_->QuantizeAs(&rec, act, g1, 0, n, q1);
    kernels_->SwiGluOaiQuant(&rec, g2, ub, gb, ubb, idb, slots, ff, act, q2);
    ASSERT_TRUE(rec.Finish().ok());
    ASSERT_TRUE(rec.Run().ok());
    ExpectSameOutputs(ctx_, act, n, g1, g2, q1, q2);
  }
}

// The GEMM's two epilogues against the product followed by Add, for every weight type, 1, 9 and
// 33 tokens (gemm1_*, a partial tile of 16, a partial tile of 32), with both GEMV variants where
// they differ: y += W x (the residual add folded into the GEMM) against W x into a scratch row
// then Add into y; y = W x + b (qwen2's and gpt-oss's q/k/v biases) against W x then Add of the
// bias.
TEST_F(GpuKernelsTest, GemmAccumulateAndBiasEqualGemmThenAdd) {
  const int64_t rows = 67, cols = 512;
  const std::vector<float> wf = Random(rows * cols, 19, 0.1f), bias = Random(rows, 24);
  Buffer bb = Floats(bias);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                        GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    std::vector<uint8_t> data;
    const kernels::Matrix m = type == GgmlType::kF32
                                  ? *kernels::Matrix::Create(type, wf.data(), rows, cols)
                                  : Quantized(type, wf, rows, cols, &data);
    auto gm = UploadMatrix(ctx_, m);
    ASSERT_TRUE(gm.ok()) << gm.status().ToString();
    for (const Kernels* k : Variants(type)) {
      for (int64_t n : {1, 9, 33}) {
        SCOPED_TRACE(std::string(GgmlTypeName(type)) + " " + VariantName(k) +
                     " n=" + std::to_string(n));
        const std::vector<float> x = Random(n * cols, 20), y0 = Random(n * rows, 21);
        Buffer xb = Floats(x), q = Empty(ActBytes(n * cols)), tmp = Empty(n * rows * 4),
               y1 = Floats(y0), y2 = Floats(y0), b1 = Empty(n * rows * 4), b2 = Empty(n * rows * 4);
        Recorder rec(ctx_);
        const Buffer& in = QuantizeFor(&rec, type, xb, n * cols, q) ? q : xb;
        k->Gemm(&rec, *gm, in, n, tmp);
        k->Add(&rec, tmp, 0, y1, 0, n * rows);
        k->Gemm(&rec, *gm, in, n, y2, 0, 0, /*accumulate=*/true);
        k->Gemm(&rec, *gm, in, n, b1);
        k->Add(&rec, bb, 0, b1, 0, n * rows, rows);
        k->Gemm(&rec, *gm, in, n, b2, 0, 0, /*accumulate=*/false, &bb);
        ASSERT_TRUE(rec.Finish().ok());
        ASSERT_TRUE(rec.Run().ok());
        EXPECT_EQ(Words(ctx_, y1, n * rows * 4), Words(ctx_, y2, n * rows * 4)) << "accumulate";
        EXPECT_EQ(Words(ctx_, b1, n * rows * 4), Words(ctx_, b2, n * rows * 4)) << "bias";
      }
    }
  }
}

// The experts' weighted sum added into y against the sum followed by Add: 5 tokens, k = 2 and 4,
// with and without gpt-oss's down biases.
TEST_F(GpuKernelsTest, MoeSumAccumulateEqualsMoeSumThenAdd) {
  const int64_t n = 5, cols = 96, n_expert = 4;
  for (int64_t k : {2, 4}) {
    for (bool bias : {false, true}) {
      SCOPED_TRACE("k=" + std::to_string(k) + (bias ? " bias" : ""));
      const std::vector<float> out = Random(n * k * cols, 22), w = Random(n * k, 23),
                               y0 = Random(n * cols, 24), b = Random(n_expert * cols, 25);
      std::vector<uint32_t> ids(n * k);
      for (int64_t s = 0; s < n * k; ++s) ids[s] = static_cast<uint32_t>((s * 3) % n_expert);
      Buffer ob = Floats(out), wb = Floats(w), bb = Floats(b), tmp = Empty(n * cols * 4),
             y1 = Floats(y0), y2 = Floats(y0), idb = Empty(n * k * 4);
      ASSERT_TRUE(ctx_->Upload(idb, 0, ids.data(), n * k * 4).ok());
      Recorder rec(ctx_);
      kernels_->MoeSum(&rec, ob, wb, tmp, n, k, cols, bias ? &bb : nullptr, bias ? &idb : nullptr);
      kernels_->Add(&rec, tmp, 0, y1, 0, n * cols);
      kernels_->MoeSum(&rec, ob, wb, y2, n, k, cols, bias ? &bb : nullptr, bias ? &idb : nullptr,
                       /*accumulate=*/true);
      ASSERT_TRUE(rec.Finish().ok());
      ASSERT_TRUE(rec.Run().ok());
      EXPECT_EQ(Words(ctx_, y1, n * cols * 4), Words(ctx_, y2, n * cols * 4));
    }
  }
}

// The K/V store that rotates K itself against Rope then the store: the cache's words bit for
// bit, f16 and Q8_0 caches, normal and NEOX pairs, the whole head rotated and half of it, 3
// tokens at scattered positions and cache rows.
TEST_F(GpuKernelsTest, KvStoreRopeEqualsRopeThenKvStore) {
  const int64_t n = 3, n_kv = 2, hd = 64, n_rows = 12, max_pos = 40;
  const std::vector<float> ks = Random(n * n_kv * hd, 29), vs = Random(n * n_kv * hd, 30);
  std::vector<float> cs(max_pos * hd);
  for (int64_t i = 0; i < max_pos * hd / 2; ++i) {
    cs[2 * i] = std::cos(0.37f * static_cast<float>(i));
    cs[2 * i + 1] = std::sin(0.37f * static_cast<float>(i));
  }
  const std::vector<std::array<uint32_t, 4>> tok_rows = {
      {5, 3, 7, 0}, {9, 17, 2, 0}, {11, 39, 10, 0}};
  for (bool q8 : {false, true}) {
    for (bool neox : {false, true}) {
      for (int64_t rope_dim : {hd, hd / 2}) {
        SCOPED_TRACE(std::string(q8 ? "q8_0" : "f16") + (neox ? " neox" : " normal") +
                     " rope_dim=" + std::to_string(rope_dim));
        AttentionShape as;
        as.n_head_kv = n_kv;
        as.head_dim = hd;
        as.n_rows = n_rows;
        as.q8 = q8;
        const uint64_t words = 2 * n_kv * n_rows * as.row_words();
        as.k_off = 0;
        as.v_off = static_cast<uint32_t>(words / 2);
        std::vector<float> rope_cs(max_pos * rope_dim);
        for (int64_t p = 0; p < max_pos; ++p) {
          std::copy(cs.begin() + p * hd, cs.begin() + p * hd + rope_dim,
                    rope_cs.begin() + p * rope_dim);
        }
        Buffer k1 = Floats(ks), k2 = Floats(ks), vb = Floats(vs), csb = Floats(rope_cs),
               tok = Tok(tok_rows);
        const std::vector<float> zeros(words, 0.0f);
        Buffer c1 = Floats(zeros), c2 = Floats(zeros);
        Recorder rec(ctx_);
        kernels_->Rope(&rec, k1, csb, tok, n, n_kv, hd, rope_dim, neox);
        kernels_->KvStore(&rec, k1, vb, c1, tok, n, as);
        const Kernels::KvRope kr{.cs = &csb, .rope_dim = rope_dim, .neox = neox};
        kernels_->KvStore(&rec, k2, vb, c2, tok, n, as, &kr);
        ASSERT_TRUE(rec.Finish().ok());
        ASSERT_TRUE(rec.Run().ok());
        EXPECT_EQ(Words(ctx_, c1, words * 4), Words(ctx_, c2, words * 4));
        EXPECT_EQ(Read(k2, ks.size()), ks);  // k itself is not rotated
      }
    }
  }
}

// Attention that also writes its output's Q8_0 blocks or f16 / bf16 pairs (the o-projection's
// activation) against attention then the separate quantizer, bitwise: unsplit and split over
// positions (chunks of 4: the combine writes them), f16 and Q8_0 caches, head_dim 64 and 128 (2
// and 4 blocks a head), a batch of 5 queries at positions 0..12 over a scrambled block table,
// with and without sinks.
TEST_F(GpuKernelsTest, AttentionQuantEqualsAttentionThenQuantize) {
  const int64_t n_head = 4, n_kv = 2, bs = 4, n_blocks = 5, n_pos = 13;
  const int64_t n_rows = n_blocks * bs, max_blocks = 4, max_len = max_blocks * bs;
  const std::vector<int32_t> table = {3, 0, 4, 1};
  const auto row_of = [&](uint32_t pos) { return uint32_t(table[pos / bs] * bs + pos % bs); };
  const std::vector<uint32_t> positions = {12, 4, 0, 7, 9};
  const int64_t nq = static_cast<int64_t>(positions.size());
  Buffer bt = std::move(*ctx_->CreateBuffer(max_blocks * 4, Memory::kHost));
  std::memcpy(bt.mapped(), table.data(), max_blocks * 4);
  for (int64_t hd : {64, 128}) {
    for (bool q8 : {false, true}) {
      for (int64_t chunk : {0, 4}) {
        for (bool sinks : {false, true}) {
          for (Activation act : {Activation::kQ8_0, Activation::kF16, Activation::kBF16}) {
            SCOPED_TRACE("head_dim " + std::to_string(hd) + (q8 ? " q8_0" : " f16") + " chunk " +
                         std::to_string(chunk) + (sinks ? " sinks " : " ") + FormatName(act));
            AttentionShape as;
            as.n_head = n_head;
            as.n_head_kv = n_kv;
            as.head_dim = hd;
            as.n_rows = n_rows;
            as.q8 = q8;
            as.scale = 1.0f / std::sqrt(static_cast<float>(hd));
            as.block_size = bs;
            as.max_blocks = max_blocks;
            as.max_len = max_len;
            as.chunk = chunk;
            const uint64_t words = 2 * n_kv * n_rows * as.row_words();
            as.v_off = static_cast<uint32_t>(words / 2);
            std::vector<std::array<uint32_t, 4>> all;
            for (uint32_t p = 0; p < n_pos; ++p) all.push_back({0, p, row_of(p), 0});
            Buffer cache = Empty(words * 4), kb = Floats(Random(n_pos * n_kv * hd, 31)),
                   vb = Floats(Random(n_pos * n_kv * hd, 32)), tok_all = Tok(all);
            std::vector<std::array<uint32_t, 4>> rows;
            for (uint32_t p : positions) rows.push_back({0, p, row_of(p), 0});
            const int64_t values = nq * n_head * hd;
            Buffer tok = Tok(rows), qb = Floats(Random(values, 33)),
                   scores = Empty(nq * n_head * max_len * 4),
                   part1 = Empty(nq * n_head * as.part_floats() * 4),
                   part2 = Empty(nq * n_head * as.part_floats() * 4),
                   sk = Floats(Random(n_head, 34)), o1 = Empty(values * 4), o2 = Empty(values * 4),
                   q1 = Empty(ActBytes(values)), q2 = Empty(ActBytes(values));
            Recorder rec(ctx_);
            kernels_->KvStore(&rec, kb, vb, cache, tok_all, n_pos, as);
            const Buffer* sp = sinks ? &sk : nullptr;
            kernels_->Attention(&rec, qb, cache, scores, o1, tok, bt, nq, as, &part1, sp);
            kernels_->QuantizeAs(&rec, act, o1, 0, values, q1);
            kernels_->Attention(&rec, qb, cache, scores, o2, tok, bt, nq, as, &part2, sp, &q2, act);
            ASSERT_TRUE(rec.Finish().ok());
            ASSERT_TRUE(rec.Run().ok());
            ExpectSameOutputs(ctx_, act, values, o1, o2, q1, q2);
          }
        }
      }
    }
  }
}

// A group's dispatches share one barrier, recorded only ahead of a following dispatch, and give
// what the same dispatches give with a barrier after each.
TEST_F(GpuKernelsTest, RecorderGroupSharesOneBarrier) {
  const int64_t n = 256;
  const std::vector<float> a = Random(n, 26), b = Random(n, 27), c = Random(n, 28);
  std::vector<float> got[2][2];
  for (int grouped = 0; grouped < 2; ++grouped) {
    Buffer ab = Floats(a), bb = Floats(b), cb = Floats(c), y1 = Empty(n * 4), y2 = Empty(n * 4);
    Recorder rec(ctx_);
    kernels_->SwiGlu(&rec, ab, bb, y1, n);
    if (grouped) rec.BeginGroup();
    kernels_->SwiGlu(&rec, ab, cb, y2, n);  // reads a and c
    kernels_->Add(&rec, ab, 0, bb, 0, n);   // writes b (read before the group), reads a
    if (grouped) rec.EndGroup();
    EXPECT_EQ(rec.dispatches(), 3);
    EXPECT_EQ(rec.barriers(), grouped ? 1 : 2);
    kernels_->Add(&rec, y1, 0, y2, 0, n);  // the group's barrier comes ahead of it
    ASSERT_TRUE(rec.Finish().ok());
    EXPECT_EQ(rec.barriers(), grouped ? 2 : 3);  // none after the last: Finish's covers it
    ASSERT_TRUE(rec.Run().ok());
    got[grouped][0] = Read(y2, n);
    got[grouped][1] = Read(bb, n);
  }
  EXPECT_EQ(got[0][0], got[1][0]);
  EXPECT_EQ(got[0][1], got[1][1]);
}

#endif  // UF_HAVE_VULKAN

// --- whole steps (backend.h) ---

std::string StepSkipReason() {
  if (!VulkanCompiledIn()) return "built without the Vulkan backend";
  auto devices = ListDevices();
  if (!devices.ok()) return "no usable Vulkan device: " + devices.status().ToString();
  return "";
}

constexpr DeviceSpec kVulkan{.vulkan = true, .index = -1};

engine::KvCacheOptions CacheFor(const model::Model& m, int64_t ctx) {
  engine::KvCacheOptions co;
  co.n_layer = m.config().n_layer;
  co.n_head_kv = m.config().n_head_kv;
  co.head_dim = m.config().head_dim;
  co.block_size = 4;
  co.max_seqs = 1;
  co.max_seq_len = ctx;
  co.n_blocks = engine::KvCacheOptions::BlocksFor(ctx, 1, co.block_size);
  co.type = engine::KvType::kF16;
  co.host_storage = false;
  return co;
}

struct Counts {
  int dispatches = 0, barriers = 0;
};

// One one-token step (logits back) with fuse on or off (and the norm tail): its recording's
// counts.
Counts StepCounts(const model::Model& m, bool fuse, bool norm_tail = false) {
  auto cache = engine::KvCache::Create(CacheFor(m, 16));
  EXPECT_TRUE(cache.ok());
  // The basic GEMV (gemm1_qkv_* and gemm1_glu_* have gemm1_*'s bits, not the wide kernel's)
  // whatever UF_GPU_GEMV says.
  auto fwd = GpuForward::Create(m, kVulkan, cache->get(),
                                {.max_batch = 8,
                                 .gemv = GemvVariant::kBasic,
                                 .fuse = fuse,
                                 .norm_tail = norm_tail ? NormTail::kOn : NormTail::kOff});
  EXPECT_TRUE(fwd.ok()) << fwd.status().ToString();
  if (!fwd.ok()) return {};
  model::Batch b;
  b.Add(1, 0, 0, true);
  EXPECT_TRUE((*fwd)->Forward(b).ok());
  return {(*fwd)->last_step_dispatches(), (*fwd)->last_step_barriers()};
}

// GpuForwardOptions::profile: the last step's GPU time per kernel covers every dispatch of the
// step once (the per-kernel counts add up to last_step_dispatches()), with the step's products
// among them, and the step's logits are those of an unprofiled forward (timestamps only).
TEST(GpuStep, ProfileCoversEveryDispatch) {
  const std::string skip = StepSkipReason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  UF_REQUIRE_SHARED();
  auto m = model::Model::Load("../shared/models/tiny-llama-256-q8_0.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<float> logits[2];
  for (int profile = 0; profile < 2; ++profile) {
    auto cache = engine::KvCache::Create(CacheFor(**m, 16));
    ASSERT_TRUE(cache.ok());
    auto fwd =
        GpuForward::Create(**m, kVulkan, cache->get(), {.max_batch = 8, .profile = profile != 0});
    ASSERT_TRUE(fwd.ok()) << fwd.status().ToString();
    model::Batch b;
    b.Add(1, 0, 0, true);
    ASSERT_TRUE((*fwd)->Forward(b).ok());
    const int64_t n_vocab = (*m)->config().n_vocab;
    logits[profile].assign((*fwd)->logits(0), (*fwd)->logits(0) + n_vocab);
    const std::vector<KernelTime> p = (*fwd)->last_step_profile();
    if (profile == 0) {
      EXPECT_TRUE(p.empty());
      continue;
    }
    if ((*fwd)->last_step_gpu_seconds() == 0.0) GTEST_SKIP() << "no device timestamps";
    int dispatches = 0;
    bool gemm = false;
    for (const KernelTime& k : p) {
      dispatches += k.dispatches;
      EXPECT_GE(k.seconds, 0.0) << k.name;
      gemm = gemm || k.name.rfind("gemm1_q8_0", 0) == 0;
    }
    EXPECT_EQ(dispatches, (*fwd)->last_step_dispatches());
    EXPECT_TRUE(gemm);
  }
  EXPECT_EQ(logits[0], logits[1]);
}

// The dispatches of a one-token step of a llama model (no biases, no q/k norms, attention
// unsplit: 16 positions, an f16 cache) whose matrices, lm_head included, all take one activation
// format (`act`: Q8_0, Q8_K, f16 or bf16 pairs are quantized; f32 values are not), computed from
// its structure. Unfused, one dispatch per operation and a barrier between each two:
//   embed; per layer: norm, [quantize], q, k, v, rope q, rope k, kv store, attention,
//   [quantize], o, add, norm, [quantize], gate, up, swiglu, [quantize], down, add;
//   gather, norm, [quantize], lm_head.
// Fused: the quantizations after a norm or SwiGLU in that kernel, the embedding with the first
// norm, K's RoPE in the K/V store, the residual adds in the o and down GEMMs, and one barrier
// after each group of independent dispatches, so the barriers are the stages less one:
//   embed+norm+q; per layer: {q, k, v} | {rope q, kv store rotating k} | attention+q | o+= |
//   norm+q | {gate, up} | swiglu+q | down+= | [next layer's] norm+q; gather | norm+q | lm_head.
// (attention+q: attention writes the o-projection's Q8_0 blocks or pairs itself when head_dim is
// a multiple of the block (32, 2); else a quantize dispatch and stage of its own follow it.)
// With the GEMMs' RoPE / store epilogue (`epilogue`: a workgroup of the one-row GEMMs holds
// whole RoPE pairs, i.e. 64 / subgroup size is even) {q, k, v} | {rope q, kv store} is one
// stage of 3 dispatches. With f16 or bf16 pairs (F16 / BF16 weights) it is one dispatch, Q, K and
// V with both RoPEs and the store (gemm_qkv.glsl), and {gate, up} | swiglu+q is one too
// (gemm_glu.glsl): 7 dispatches and 7 stages a layer.
Counts Expected(int64_t layers, Activation act, int64_t head_dim, bool fuse, bool epilogue) {
  const bool quantized = act != Activation::kF32;
  const int q = quantized ? 1 : 0;
  if (!fuse) {
    const int d = 1 + static_cast<int>(layers) * (16 + 4 * q) + 3 + q;
    return {d, d - 1};
  }
  const int attn_q = quantized && head_dim % ActivationBlock(act) != 0 ? 1 : 0;
  int per_layer = 13 + attn_q, stages_per_layer = 9 + attn_q;
  if (act == Activation::kF16 || act == Activation::kBF16) {
    per_layer -= 6;
    stages_per_layer -= 2;
  } else if (epilogue) {
    per_layer -= 2;
    stages_per_layer -= 1;
  }
  const int d = static_cast<int>(layers) * per_layer + 3;
  const int stages = static_cast<int>(layers) * stages_per_layer + 3;
  return {d, stages - 1};
}

TEST(GpuStep, DispatchAndBarrierCountsFollowTheModel) {
  const std::string skip = StepSkipReason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  UF_REQUIRE_SHARED();
  // The device's subgroups: a workgroup of 64 invocations holds 64 / lanes one-row GEMM rows.
  auto devices = ListDevices();
  ASSERT_TRUE(devices.ok() && !devices->empty());
  const bool epilogue = (64 / (*devices)[0].subgroup_size) % 2 == 0;
  // Q8_0 weights and a tied Q8_0 lm_head; F16 and BF16 weights and lm_head (f16 / bf16 pairs:
  // gemm1_qkv_*); F32 (f32 values).
  for (const auto& [name, act] :
       std::vector<std::pair<std::string, Activation>>{{"tiny-llama-256-q8_0", Activation::kQ8_0},
                                                       {"tiny-llama-256-f16", Activation::kF16},
                                                       {"tiny-llama-256-bf16", Activation::kBF16},
                                                       {"tiny-llama-f32", Activation::kF32}}) {
    SCOPED_TRACE(name);
    auto m = model::Model::Load("../shared/models/" + name + ".gguf");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const int64_t layers = (*m)->config().n_layer;
    for (bool fuse : {false, true}) {
      const Counts got = StepCounts(**m, fuse),
                   want = Expected(layers, act, (*m)->config().head_dim, fuse, epilogue);
      EXPECT_EQ(got.dispatches, want.dispatches) << (fuse ? "fused" : "unfused");
      EXPECT_EQ(got.barriers, want.barriers) << (fuse ? "fused" : "unfused");
      std::printf("[gpu step] %-22s %d layers, %s: %d dispatches, %d barriers\n", name.c_str(),
                  static_cast<int>(layers), fuse ? "fused" : "unfused", got.dispatches,
                  got.barriers);
    }
    // The norm tail: the FFN norm of every layer, the attention norm of every layer but the
    // first and the final norm come from the o and down GEMMs before them (the one-token
    // step's one logits row needs no gather either), each a dispatch and a barrier fewer.
    const Counts tail = StepCounts(**m, true, true),
                 fused = Expected(layers, act, (*m)->config().head_dim, true, epilogue);
    EXPECT_EQ(tail.dispatches, fused.dispatches - (2 * layers + 1)) << "norm tail";
    EXPECT_EQ(tail.barriers, fused.barriers - (2 * layers + 1)) << "norm tail";
  }
  // qwen3's per-head q/k norms: fused, in the Q and K products' head tails (each head finished
  // by its last workgroup) with V's store as its epilogue, so a layer is the llama layer with
  // the GEMMs' epilogue; without it (64-lane subgroups), the two norms, Q's RoPE and the K/V
  // store are one dispatch (qk_norm_rope.comp) after {q, k, v}: the llama layer without the
  // epilogue less one dispatch. Unfused, two norms more.
  auto m = model::Model::Load("../shared/models/tiny-qwen3-256-q8_0.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const int64_t layers = (*m)->config().n_layer, hd = (*m)->config().head_dim;
  const Counts fused = StepCounts(**m, true), unfused = StepCounts(**m, false);
  const Counts want = Expected(layers, Activation::kQ8_0, hd, true, epilogue),
               want_unfused = Expected(layers, Activation::kQ8_0, hd, false, false);
  EXPECT_EQ(fused.dispatches, want.dispatches - (epilogue ? 0 : layers)) << "qwen3 fused";
  EXPECT_EQ(fused.barriers, want.barriers) << "qwen3 fused";
  EXPECT_EQ(unfused.dispatches, want_unfused.dispatches + 2 * layers) << "qwen3 unfused";
  EXPECT_EQ(unfused.barriers, want_unfused.barriers + 2 * layers) << "qwen3 unfused";
  std::printf("[gpu step] tiny-qwen3-256-q8_0 %d layers: %d dispatches, %d barriers fused\n",
              static_cast<int>(layers), fused.dispatches, fused.barriers);
}

// The fused and the unfused step of the model at `path` give the same logits bit for bit: 20
// positions one token at a time, then 8 more as one batch (the tiled GEMMs; for experts, the
// slots grouped by expert). attention_chunk: GpuForwardOptions' (8 splits these positions into
// up to 4 chunks: the combine then writes the o-projection's Q8_0 blocks).
// With norm_tail, a third run, fused with the GEMMs' norm tail (GpuForwardOptions::norm_tail),
// gives them too. A mixture of experts' tails (GpuForwardOptions::moe_tails) are off in the
// second run and on in the third. barriers_out: the three runs' barriers of a one-token step.
void ExpectFusedEqualsUnfused(const std::string& path, int64_t attention_chunk = 256,
                              bool norm_tail = false, int* barriers_out = nullptr) {
  SCOPED_TRACE(path);
  auto m = model::Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const int64_t n_vocab = (*m)->config().n_vocab;
  const int runs = norm_tail ? 3 : 2;  // unfused, fused, fused with the norm tail
  std::vector<std::vector<float>> rows[3];
  int barriers[3] = {0, 0, 0};  // of a one-token step
  for (int run = 0; run < runs; ++run) {
    auto cache = engine::KvCache::Create(CacheFor(**m, 32));
    ASSERT_TRUE(cache.ok());
    auto fwd = GpuForward::Create(**m, kVulkan, cache->get(),
                                  {.max_batch = 8,
                                   .attention_chunk = attention_chunk,
                                   .fuse = run > 0,
                                   .norm_tail = run == 2 ? NormTail::kOn : NormTail::kOff,
                                   .moe_tails = run == 2});
    ASSERT_TRUE(fwd.ok()) << fwd.status().ToString();
    model::Batch b;
    const auto token = [&](int32_t p) { return (p * 7919 + 13) % (n_vocab - 1) + 1; };
    for (int32_t p = 0; p < 20; ++p) {
      b.Clear();
      b.Add(token(p), p, 0, true);
      ASSERT_TRUE((*fwd)->Forward(b).ok());
      rows[run].emplace_back((*fwd)->logits(0), (*fwd)->logits(0) + n_vocab);
    }
    barriers[run] = (*fwd)->last_step_barriers();
    b.Clear();
    for (int32_t p = 20; p < 28; ++p) b.Add(token(p), p, 0, true);
    ASSERT_TRUE((*fwd)->Forward(b).ok());
    for (int64_t i = 0; i < 8; ++i) {
      rows[run].emplace_back((*fwd)->logits(i), (*fwd)->logits(i) + n_vocab);
    }
  }
  const int64_t layers = (*m)->config().n_layer;
  for (int run = 1; run < runs; ++run) {
    SCOPED_TRACE(run == 2 ? "fused, norm tail" : "fused");
    ASSERT_EQ(rows[0].size(), rows[run].size());
    for (size_t i = 0; i < rows[0].size(); ++i) {
      EXPECT_EQ(std::memcmp(rows[0][i].data(), rows[run][i].data(), n_vocab * 4), 0) << "row " << i;
    }
    // Every layer groups or fuses something (Q, K and V at least; with the tail, both norms but
    // the first).
    EXPECT_LE(barriers[run], barriers[0] - (run == 2 ? 4 : 2) * layers + 1);
  }
  std::printf(
      "[gpu step] %s: %d barriers a one-token step unfused, %d fused, %d with the norm "
      "tail (-1: not run)\n",
      std::filesystem::path(path).filename().c_str(), barriers[0], barriers[1],
      norm_tail ? barriers[2] : -1);
  if (barriers_out != nullptr) std::copy(barriers, barriers + 3, barriers_out);
}

TEST(GpuStep, FusedStepEqualsUnfusedBitwise) {
  const std::string skip = StepSkipReason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  UF_REQUIRE_SHARED();
  int models = 0, tails = 0;
  for (const auto& entry : std::filesystem::directory_iterator("../shared/models")) {
    if (entry.path().extension() != ".gguf") continue;
    // The norm tail for each format it writes (Q8_0, Q8_K, f16 and bf16 pairs, f32) and with
    // qwen2's biases: its code does not depend on the weights' type otherwise.
    const std::string stem = entry.path().stem().string();
    const bool tail = stem == "tiny-llama-256-q8_0" || stem == "tiny-llama-256-q4_k_m" ||
                      stem == "tiny-llama-256-f16" || stem == "tiny-llama-256-bf16" ||
                      stem == "tiny-llama-f32" || stem == "tiny-qwen2-256-q8_0";
    ExpectFusedEqualsUnfused(entry.path().string(), 256, tail);
    tails += tail ? 1 : 0;
    ++models;
  }
  EXPECT_GE(models, 10);
  EXPECT_EQ(tails, 6);
}

// The same with attention split over positions, for the weight types whose o-projection takes
// Q8_0 activations (written by attention_combine.comp when fused).
TEST(GpuStep, FusedSplitStepEqualsUnfusedBitwise) {
  const std::string skip = StepSkipReason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  UF_REQUIRE_SHARED();
  for (const char* name : {"tiny-llama-256-q8_0", "tiny-llama-256-q4_0"}) {
    ExpectFusedEqualsUnfused(std::string("../shared/models/") + name + ".gguf", 8);
  }
}

// The same for mixtures of experts written by synth: qwen3moe with Q4_K_M experts (Q8_K
// activations), Mixtral in Q8_0, gpt-oss in MXFP4 (its clamped SwiGLU with the experts' biases,
// the down biases in the weighted sum, the output bias kept out of the o GEMM).
TEST(GpuStep, FusedMoeStepEqualsUnfusedBitwise) {
  const std::string skip = StepSkipReason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  for (const auto& [preset, type] : std::vector<std::pair<std::string, model::SynthFileType>>{
           {"tiny-qwen3moe", model::SynthFileType::kQ4_K_M},
           {"tiny-mixtral", model::SynthFileType::kQ8_0},
           {"tiny-gpt-oss", model::SynthFileType::kMXFP4}}) {
    auto p = model::FindSynthPreset(preset);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto plan = model::PlanSynth(*p, type);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("uf_gpufused_" + preset + "_" + std::to_string(getpid()) + ".gguf"))
                                 .string();
    model::SynthOptions so;
    so.seed = 7;
    so.n_threads = 2;
    ASSERT_TRUE(model::WriteSynth(*plan, so, path).ok());
    int barriers[3] = {0, 0, 0};
    ExpectFusedEqualsUnfused(path, 256, /*norm_tail=*/true, barriers);
    std::filesystem::remove(path);
    // The tails of a one-token step: every layer's route (the router GEMM's), its weighted sum
    // (the down experts' GEMM's), its next norm (there too: the attention norms, the final norm
    // and with it the gather) and, without gpt-oss's o bias, its FFN norm (the o GEMM's): a
    // barrier fewer each.
    const int64_t layers = p->n_layer;
    const int64_t saved = 2 * layers + layers + 1 + (preset == "tiny-gpt-oss" ? 0 : layers);
    EXPECT_EQ(barriers[1] - barriers[2], saved);
  }
}

// The tuned choices (the defaults: NormTail::kTune, GemvVariant::kTune, AttentionTiles::kTune),
// one at a time: the first 2 x kTrials one-token steps alternate the norm tail off and on (their
// barrier counts say which ran), the next 2 x kTrials the basic and the wide Q8_0 GEMV (the
// profile's kernel names say which), each step a tuner's trial, the other choice held; then
// attention's class of the step's depth. Every step's logits are the bits of a forward with all
// three fixed.
TEST(GpuStep, TunedChoicesTryBothWaysOneAtATimeWithTheSameBits) {
  const std::string skip = StepSkipReason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  UF_REQUIRE_SHARED();
  auto m = model::Model::Load("../shared/models/tiny-llama-256-q8_0.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const int64_t n_vocab = (*m)->config().n_vocab, layers = (*m)->config().n_layer;
  constexpr int kTrialSteps = 2 * StepTuner::kTrials, kSteps = 2 * kTrialSteps + 2;
  const int order[kTrialSteps] = {0, 1, 1, 0, 0, 1};  // StepTuner's balanced pairs
  struct Run {
    GemvVariant gemv;
    NormTail tail;
    AttentionTiles attention;
    std::vector<std::vector<float>> rows;
    std::vector<int> barriers;
    std::vector<bool> trials, wide;  // per step: a trial; the wide Q8_0 GEMV ran
    std::vector<std::string> tuning;
  };
  Run runs[3] = {{GemvVariant::kBasic, NormTail::kOff, AttentionTiles::kToken},
                 {GemvVariant::kBasic, NormTail::kTune, AttentionTiles::kToken},
                 {GemvVariant::kTune, NormTail::kTune, AttentionTiles::kTune}};
  for (Run& run : runs) {
    auto cache = engine::KvCache::Create(CacheFor(**m, 32));
    ASSERT_TRUE(cache.ok());
    auto fwd = GpuForward::Create(**m, kVulkan, cache->get(),
                                  {.max_batch = 8,
                                   .gemv = run.gemv,
                                   .norm_tail = run.tail,
                                   .attention_tiles = run.attention,
                                   .profile = true});
    ASSERT_TRUE(fwd.ok()) << fwd.status().ToString();
    model::Batch b;
    for (int32_t p = 0; p < kSteps; ++p) {
      b.Clear();
      b.Add((p * 7919 + 13) % (n_vocab - 1) + 1, p, 0, true);
      ASSERT_TRUE((*fwd)->Forward(b).ok());
      run.rows.emplace_back((*fwd)->logits(0), (*fwd)->logits(0) + n_vocab);
      run.barriers.push_back((*fwd)->last_step_barriers());
      run.trials.push_back((*fwd)->last_step_trial());
      const std::vector<KernelTime> profile = (*fwd)->last_step_profile();
      if (profile.empty()) GTEST_SKIP() << "no timestamps on this device";
      run.wide.push_back(std::any_of(profile.begin(), profile.end(), [](const KernelTime& k) {
        return k.name.rfind("gemm1w_q8_0", 0) == 0;
      }));
    }
    run.tuning = (*fwd)->step_tuning();
  }
  const int off = runs[0].barriers[0];
  for (int r = 1; r < 3; ++r) {
    SCOPED_TRACE(r == 1 ? "tail tuned" : "tail, GEMV and attention tuned");
    const Run& run = runs[r];
    for (int p = 0; p < kSteps; ++p) {
      EXPECT_EQ(std::memcmp(runs[0].rows[p].data(), run.rows[p].data(), n_vocab * 4), 0)
          << "step " << p;
    }
    // Off, on, on, off, off, on: the tail takes the o and down norms' barriers away (2 a layer,
    // the final norm's too); the GEMV basic meanwhile.
    for (int p = 0; p < kTrialSteps; ++p) {
      EXPECT_TRUE(run.trials[p]) << "step " << p;
      EXPECT_EQ(run.barriers[p], order[p] == 0 ? off : off - 2 * layers - 1) << "step " << p;
      EXPECT_FALSE(run.wide[p]) << "step " << p;
    }
    for (int p = kTrialSteps + 1; p < kSteps; ++p) {
      EXPECT_EQ(run.barriers[p], run.barriers[kTrialSteps]) << "step " << p;
    }
    ASSERT_FALSE(run.tuning.empty());
    EXPECT_NE(run.tuning[0].find("norm tail, single tokens, tokens < 2, any depth"),
              std::string::npos)
        << run.tuning[0];
    EXPECT_NE(run.tuning[0].find("(medians of 3, 3): o"), std::string::npos) << run.tuning[0];
  }
  // GEMV and attention fixed: nothing left to try, never the wide kernel.
  for (int p = kTrialSteps; p < kSteps; ++p) {
    EXPECT_FALSE(runs[1].trials[p]) << "step " << p;
    EXPECT_FALSE(runs[1].wide[p]) << "step " << p;
  }
  EXPECT_EQ(runs[1].tuning.size(), 1u);
  // Tuned: basic, wide, wide, basic, ... with the tail held; then attention's class of depth 13
  // (a new power of two), with the GEMV held.
  const Run& all = runs[2];
  for (int p = kTrialSteps; p < 2 * kTrialSteps; ++p) {
    EXPECT_TRUE(all.trials[p]) << "step " << p;
    EXPECT_EQ(all.wide[p], order[p - kTrialSteps] == 1) << "step " << p;
  }
  EXPECT_TRUE(all.trials[2 * kTrialSteps]);
  EXPECT_EQ(all.wide[2 * kTrialSteps], all.wide[2 * kTrialSteps + 1]);
  ASSERT_GE(all.tuning.size(), 3u);
  EXPECT_NE(all.tuning[1].find("Q8_0 / Q4_0 GEMV, single tokens, tokens < 2, any depth"),
            std::string::npos)
      << all.tuning[1];
  EXPECT_NE(all.tuning[1].find("(medians of 3, 3): "), std::string::npos) << all.tuning[1];
  EXPECT_NE(all.tuning[2].find("attention, single tokens"), std::string::npos) << all.tuning[2];
  for (const std::string& line : all.tuning) std::printf("[gpu tune] %s\n", line.c_str());
}

}  // namespace
}  // namespace uf::gpu
