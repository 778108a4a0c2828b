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

std::vector<uint32_t> Words(Context* ctx, const Buffer& b, uint64_t bytes) {
  std::vector<uint32_t> v(bytes / 4);
  EXPECT_TRUE(ctx->Download(b, 0, v.data(), bytes).ok());
  return v;
}

// Rows of 512 values (two Q8_K blocks, 16 Q8_0 blocks) with a zero block and a value repeated
// with both signs at the largest magnitude (the Q8_K quantizer keeps the first one's sign).
std::vector<float> ActivationValues(int64_t n, uint32_t seed) {
  std::vector<float> x = Random(n, seed);
  std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
  x[300] = -4.0f;
  x[301] = 4.0f;
  return x;
}

// The formats the fused kernels write, and their names.
constexpr Activation kFusedFormats[] = {Activation::kQ8_0, Activation::kQ8_K, Activation::kF16,
                                        Activation::kBF16};
const char* FormatName(Activation a) {
  return a == Activation::kQ8_0   ? "Q8_0"
         : a == Activation::kQ8_K ? "Q8_K"
         : a == Activation::kF16  ? "f16 pairs"
                                  : "bf16 pairs";
}

// The separate kernels' n floats and their activations against the fused kernel's, bitwise.
void ExpectSameOutputs(Context* ctx, Activation act, int64_t n, const Buffer& y1, const Buffer& y2,
                       const Buffer& q1, const Buffer& q2) {
  EXPECT_EQ(Words(ctx, y1, n * 4), Words(ctx, y2, n * 4));
  const uint64_t used = act == Activation::kQ8_K   ? Q8KActivationBytes(n)
                        : act == Activation::kQ8_0 ? Q8ActivationBytes(n)
                                                   : PairActivationBytes(n);
  EXPECT_EQ(Words(ctx, q1, used), Words(ctx, q2, used));
}

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

// The GEMM's norm tail (the last workgroup normalizes the rows the product wrote) against the
// product followed by RmsNormQuant (RmsNorm for f32), bitwise: every weight type and GEMV
// variant, 1 and 3 tokens, y += W x (the residual product) and y = W x, every format the tail
// writes (f32 values, Q8_0, Q8_K, f16 and bf16 pairs); 768 rows (3 Q8_K blocks, partial workgroups
// nowhere but 96-192 of them to count). Each recording runs twice: the counter is zero again
// after a dispatch, so a replayed step normalizes again.
TEST_F(GpuKernelsTest, GemmNormTailEqualsGemmThenRmsNorm) {
  const int64_t rows = 768, cols = 256;
  const std::vector<float> wf = Random(rows * cols, 50, 0.1f), nw = Random(rows, 51);
  Buffer nwb = Floats(nw), counter = Floats({0.0f});
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                        GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    std::vector<uint8_t> data;
    const kernels::Matrix m = type == GgmlType::kF32
                                  ? *kernels::Matrix::Create(type, wf.data(), rows, cols)
                                  : Quantized(type, wf, rows, cols, &data);
    auto gm = UploadMatrix(ctx_, m);
    ASSERT_TRUE(gm.ok()) << gm.status().ToString();
    for (const Kernels* k : Variants(type)) {
      for (int64_t n : {1, 3}) {
        for (bool acc : {true, false}) {
          for (Activation act : {Activation::kF32, Activation::kQ8_0, Activation::kQ8_K,
                                 Activation::kF16, Activation::kBF16}) {
            SCOPED_TRACE(std::string(GgmlTypeName(type)) + " " + VariantName(k) +
                         " n=" + std::to_string(n) + (acc ? " y += W x" : " y = W x") + " tail " +
                         (act == Activation::kF32 ? "f32" : FormatName(act)));
            const std::vector<float> x = Random(n * cols, 52), y0 = ActivationValues(n * rows, 53);
            Buffer xb = Floats(x), xq = Empty(ActBytes(n * cols)), y1 = Floats(y0), y2 = Floats(y0),
                   n1 = Empty(n * rows * 4), n2 = Empty(n * rows * 4),
                   q1 = Empty(ActBytes(n * rows)), q2 = Empty(ActBytes(n * rows));
            Recorder quant(ctx_);
            const bool quantized = QuantizeFor(&quant, type, xb, n * cols, xq);
            ASSERT_TRUE(quant.Finish().ok());
            ASSERT_TRUE(quant.Run().ok());
            const Buffer& in = quantized ? xq : xb;
            Recorder ref(ctx_), tail(ctx_);
            k->Gemm(&ref, *gm, in, n, y1, 0, 0, acc);
            if (act == Activation::kF32) {
              k->RmsNorm(&ref, y1, 0, nwb, n1, 0, n, rows, 1e-5f);
            } else {
              k->RmsNormQuant(&ref, y1, nwb, n1, n, rows, 1e-5f, act, q1);
            }
            const Kernels::NormTail nt{
                .w = &nwb, .y = &n2, .q = &q2, .counter = &counter, .eps = 1e-5f, .act = act};
            k->Gemm(&tail, *gm, in, n, y2, 0, 0, acc, nullptr, &nt);
            ASSERT_TRUE(ref.Finish().ok());
            ASSERT_TRUE(tail.Finish().ok());
            for (int run = 0; run < 2; ++run) {
              ASSERT_TRUE(ref.Run().ok());
              ASSERT_TRUE(tail.Run().ok());
              EXPECT_EQ(Words(ctx_, y1, n * rows * 4), Words(ctx_, y2, n * rows * 4)) << run;
              EXPECT_EQ(Words(ctx_, n1, n * rows * 4), Words(ctx_, n2, n * rows * 4)) << run;
              if (act != Activation::kF32) {
                const uint64_t used = act == Activation::kQ8_K   ? Q8KActivationBytes(n * rows)
                                      : act == Activation::kQ8_0 ? Q8ActivationBytes(n * rows)
                                                                 : PairActivationBytes(n * rows);
                EXPECT_EQ(Words(ctx_, q1, used), Words(ctx_, q2, used)) << run;
              }
              EXPECT_EQ(Words(ctx_, counter, 4), std::vector<uint32_t>{0u}) << run;
            }
          }
        }
      }
    }
  }
}

// The embedding with the first norm in one dispatch against Embed then RmsNormQuant (RmsNorm for
// f32), bitwise: every table type, every format, 3 tokens (one repeated) of a 512-wide table.
TEST_F(GpuKernelsTest, EmbedNormEqualsEmbedThenRmsNorm) {
  const int64_t rows = 9, cols = 512, n = 3;
  const std::vector<float> tf = Random(rows * cols, 60), nw = Random(cols, 61);
  const std::vector<uint32_t> tok = {7, 0, 0, 0, 2, 1, 1, 0, 7, 2, 2, 0};  // [n][4]
  Buffer nwb = Floats(nw), tb = Empty(tok.size() * 4);
  ASSERT_TRUE(ctx_->Upload(tb, 0, tok.data(), tok.size() * 4).ok());
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                        GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    std::vector<uint8_t> data;
    const kernels::Matrix m = type == GgmlType::kF32
                                  ? *kernels::Matrix::Create(type, tf.data(), rows, cols)
                                  : Quantized(type, tf, rows, cols, &data);
    auto table = UploadMatrix(ctx_, m);
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    for (Activation act : {Activation::kF32, Activation::kQ8_0, Activation::kQ8_K, Activation::kF16,
                           Activation::kBF16}) {
      SCOPED_TRACE(std::string(GgmlTypeName(type)) + " " +
                   (act == Activation::kF32 ? "f32" : FormatName(act)));
      Buffer x1 = Empty(n * cols * 4), x2 = Empty(n * cols * 4), y1 = Empty(n * cols * 4),
             y2 = Empty(n * cols * 4), q1 = Empty(ActBytes(n * cols)),
             q2 = Empty(ActBytes(n * cols));
      Recorder rec(ctx_);
      kernels_->Embed(&rec, *table, x1, tb, n);
      if (act == Activation::kF32) {
        kernels_->RmsNorm(&rec, x1, 0, nwb, y1, 0, n, cols, 1e-5f);
      } else {
        kernels_->RmsNormQuant(&rec, x1, nwb, y1, n, cols, 1e-5f, act, q1);
      }
      kernels_->EmbedNorm(&rec, *table, x2, tb, n, nwb, y2, 1e-5f, act, q2);
      ASSERT_TRUE(rec.Finish().ok());
      ASSERT_TRUE(rec.Run().ok());
      EXPECT_EQ(Words(ctx_, x1, n * cols * 4), Words(ctx_, x2, n * cols * 4));
      if (act == Activation::kF32) {
        EXPECT_EQ(Words(ctx_, y1, n * cols * 4), Words(ctx_, y2, n * cols * 4));
      } else {
        ExpectSameOutputs(ctx_, act, n * cols, y1, y2, q1, q2);
      }
    }
  }
}

// The gate/up GEMMs with SwiGLU in one dispatch against Gemm(gate), Gemm(up) and SwiGluQuant's
// pairs, bitwise, for F16 and BF16: 70 rows (35 row pairs: a partial last workgroup at every
// subgroup size) of 520 columns (260 words: a partial last pass of the lanes), 1, 3 and 8 tokens
// (gemm1_glu_*, a partial and a whole tile of 8). Also what CanGemmGlu refuses.
TEST_F(GpuKernelsTest, GemmGluEqualsGemmsThenSwiGluQuant) {
  const int64_t rows = 70, cols = 520;
  const std::vector<float> gf = Random(rows * cols, 40, 0.2f), uf = Random(rows * cols, 41, 0.2f);
  for (GgmlType type : {GgmlType::kF16, GgmlType::kBF16}) {
    std::vector<uint8_t> gd, ud;
    auto gate = UploadMatrix(ctx_, Quantized(type, gf, rows, cols, &gd));
    auto up = UploadMatrix(ctx_, Quantized(type, uf, rows, cols, &ud));
    ASSERT_TRUE(gate.ok() && up.ok());
    EXPECT_FALSE(kernels_->CanGemmGlu(*gate, *up, 9));  // past a tile of 8
    if (type == GgmlType::kF16) {
      EXPECT_FALSE(wide_->CanGemmGlu(*gate, *up, 1));  // the wide F16 GEMV's order differs
    }
    const Activation act = ActivationFor(type);
    for (int64_t n : {1, 3, 8}) {
      SCOPED_TRACE(std::string(GgmlTypeName(type)) + " n=" + std::to_string(n));
      ASSERT_TRUE(kernels_->CanGemmGlu(*gate, *up, n));
      const std::vector<float> x = ActivationValues(n * cols, 42);
      Buffer xb = Floats(x), xq = Empty(ActBytes(n * cols)), g = Empty(n * rows * 4),
             u = Empty(n * rows * 4), q1 = Empty(ActBytes(n * rows)),
             h = Floats(std::vector<float>(n * rows, 7.0f));
      Recorder rec(ctx_);
      kernels_->QuantizeAs(&rec, act, xb, 0, n * cols, xq);
      kernels_->Gemm(&rec, *gate, xq, n, g);
      kernels_->Gemm(&rec, *up, xq, n, u);
      kernels_->SwiGluQuant(&rec, g, u, g, n * rows, act, q1);
      kernels_->GemmGlu(&rec, *gate, *up, xq, n, h);
      ASSERT_TRUE(rec.Finish().ok());
      ASSERT_TRUE(rec.Run().ok());
      const std::vector<uint32_t> want = Words(ctx_, q1, PairActivationBytes(n * rows)),
                                  got = Words(ctx_, h, PairActivationBytes(n * rows));
      EXPECT_EQ(got, want);
      // Not vacuous: the pairs are the SwiGLU of nonzero sums.
      EXPECT_GT(std::count_if(want.begin(), want.end(), [](uint32_t w) { return w != 0; }),
                static_cast<long>(want.size()) / 2);
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

// Q, K and V in one dispatch with RoPE and the K/V store (gemm*_qkv_*) against Gemm x3, Rope of q
// and KvStore rotating k, bit for bit: q (rotated), k (unrotated), v and every cache word, F16 and
// BF16 weights, the whole head rotated and part of it, batches of 1, 3, 8, 9 and 33 tokens (every
// tile, whole and partial) at scattered positions and cache rows. The shapes: head_dim 64 (4 / 2
// heads: 192 row pairs, whole workgroups at every subgroup size) and rope_dim 64 or 32; head_dim 6
// with rope_dim 4 over 5 / 1 heads: 21 row pairs, so the last workgroup is partial and a workgroup
// holds pairs of two or three matrices at any subgroup size from 4 lanes.
TEST_F(GpuKernelsTest, GemmQkvRopeEqualsGemmsRopeKvStore) {
  struct Shape {
    int64_t n_head, n_kv, hd, rope_dim, cols;
  };
  const int64_t n_rows = 40, max_pos = 40;
  for (GgmlType type : {GgmlType::kF16, GgmlType::kBF16}) {
    for (const Shape& sh :
         {Shape{4, 2, 64, 64, 256}, Shape{4, 2, 64, 32, 256}, Shape{5, 1, 6, 4, 96}}) {
      SCOPED_TRACE(std::string(GgmlTypeName(type)) + " head_dim " + std::to_string(sh.hd) +
                   " rope_dim " + std::to_string(sh.rope_dim));
      const int64_t q_rows = sh.n_head * sh.hd, kv_rows = sh.n_kv * sh.hd;
      std::vector<uint8_t> dq, dk, dv;
      auto wq = UploadMatrix(
          ctx_, Quantized(type, Random(q_rows * sh.cols, 40, 0.1f), q_rows, sh.cols, &dq));
      auto wk = UploadMatrix(
          ctx_, Quantized(type, Random(kv_rows * sh.cols, 41, 0.1f), kv_rows, sh.cols, &dk));
      auto wv = UploadMatrix(
          ctx_, Quantized(type, Random(kv_rows * sh.cols, 42, 0.1f), kv_rows, sh.cols, &dv));
      ASSERT_TRUE(wq.ok() && wk.ok() && wv.ok());
      std::vector<float> cs(max_pos * sh.rope_dim);
      for (int64_t i = 0; i < max_pos * sh.rope_dim / 2; ++i) {
        cs[2 * i] = std::cos(0.37f * static_cast<float>(i));
        cs[2 * i + 1] = std::sin(0.37f * static_cast<float>(i));
      }
      AttentionShape as;
      as.n_head = sh.n_head;
      as.n_head_kv = sh.n_kv;
      as.head_dim = sh.hd;
      as.n_rows = n_rows;
      const uint64_t words = 2 * sh.n_kv * n_rows * as.row_words();
      as.v_off = static_cast<uint32_t>(words / 2);
      Buffer csb = Floats(cs), c1 = Floats(std::vector<float>(words, 0.0f)),
             c2 = Floats(std::vector<float>(words, 0.0f));
      const Kernels::KvRope kr{.cs = &csb, .rope_dim = sh.rope_dim, .neox = false};
      ASSERT_TRUE(kernels_->QkvRopeFits(*wq, *wk, *wv, 1, as, kr));
      // Not for NEOX pairs or a Q8_0 cache; nor the wide F16 GEMV (other bits).
      const Kernels::KvRope neox{.cs = &csb, .rope_dim = sh.rope_dim, .neox = true};
      EXPECT_FALSE(kernels_->QkvRopeFits(*wq, *wk, *wv, 1, as, neox));
      AttentionShape q8 = as;
      q8.q8 = true;
      EXPECT_FALSE(kernels_->QkvRopeFits(*wq, *wk, *wv, 1, q8, kr));
      if (type == GgmlType::kF16 && sh.cols % 8 == 0) {
        EXPECT_FALSE(wide_->QkvRopeFits(*wq, *wk, *wv, 1, as, kr));
      }
      for (int64_t n : {1, 3, 8, 9, 33}) {
        SCOPED_TRACE("n=" + std::to_string(n));
        ASSERT_TRUE(kernels_->QkvRopeFits(*wq, *wk, *wv, n, as, kr));
        // Token t at position (17 t + 13 n) % 40, cache row (7 t + n) % 40: distinct rows.
        std::vector<std::array<uint32_t, 4>> tok_rows;
        for (uint32_t t = 0; t < n; ++t) {
          tok_rows.push_back({5 + t, static_cast<uint32_t>((17 * t + 13 * n) % max_pos),
                              static_cast<uint32_t>((7 * t + n) % n_rows), 0});
        }
        Buffer xb = Floats(Random(n * sh.cols, 43 + static_cast<uint32_t>(n))),
               xq = Empty(ActBytes(n * sh.cols)), tok = Tok(tok_rows), q1 = Empty(n * q_rows * 4),
               q2 = Empty(n * q_rows * 4), k1 = Empty(n * kv_rows * 4), k2 = Empty(n * kv_rows * 4),
               v1 = Empty(n * kv_rows * 4), v2 = Empty(n * kv_rows * 4);
        Recorder rec(ctx_);
        ASSERT_TRUE(QuantizeFor(&rec, type, xb, n * sh.cols, xq));
        kernels_->Gemm(&rec, *wq, xq, n, q1);
        kernels_->Gemm(&rec, *wk, xq, n, k1);
        kernels_->Gemm(&rec, *wv, xq, n, v1);
        kernels_->Rope(&rec, q1, csb, tok, n, sh.n_head, sh.hd, sh.rope_dim, false);
        kernels_->KvStore(&rec, k1, v1, c1, tok, n, as, &kr);
        kernels_->GemmQkvRope(&rec, *wq, *wk, *wv, xq, n, q2, k2, v2, c2, tok, as, kr);
        ASSERT_TRUE(rec.Finish().ok());
        ASSERT_TRUE(rec.Run().ok());
        EXPECT_EQ(Words(ctx_, q1, n * q_rows * 4), Words(ctx_, q2, n * q_rows * 4)) << "q";
        EXPECT_EQ(Words(ctx_, k1, n * kv_rows * 4), Words(ctx_, k2, n * kv_rows * 4)) << "k";
        EXPECT_EQ(Words(ctx_, v1, n * kv_rows * 4), Words(ctx_, v2, n * kv_rows * 4)) << "v";
      }
      const std::vector<uint32_t> cache = Words(ctx_, c2, words * 4);
      EXPECT_EQ(Words(ctx_, c1, words * 4), cache) << "cache";
      EXPECT_NE(cache, std::vector<uint32_t>(words, 0u)) << "nothing stored";
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
  auto fwd = GpuForward::Create(
      m, kVulkan, cache->get(),
      {.max_batch = 8, .gemv = GemvVariant::kBasic, .fuse = fuse, .norm_tail = norm_tail});
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
// Fused: the quantizations after a norm or SwiGLU in that kernel, K's RoPE in the K/V store, the
// residual adds in the o and down GEMMs, and one barrier after each group of independent
// dispatches ({q, k, v}, {rope q, kv store}, {gate, up}), so the barriers are the stages less
// one:
// The embedding and the first layer's norm+q are one dispatch, embed+norm+q:
//   embed; per layer: norm+q | {q, k, v} | {rope q, kv store rotating k} | attention+q |
//   o+= | norm+q | {gate, up} | swiglu+q | down+=; gather | norm+q | lm_head.
// With F16 / BF16 weights (pairs) {gate, up} | swiglu+q is one dispatch, gate+up+swiglu+q.
// (attention+q: attention writes the o-projection's Q8_0 blocks or pairs itself when head_dim is
// a multiple of the block (32, 2); else a quantize dispatch and stage of its own follow it.)
// With f16 or bf16 pairs (F16 / BF16 weights: gemm1_qkv_*) the first two stages after the norm
// are one dispatch, Q, K and V with both RoPEs and the store: 4 dispatches and a stage fewer a
// layer (9 dispatches, 8 barriers):
//   per layer: norm+q | q,k,v+rope+store | attention+q | o+= | norm+q | {gate, up} | swiglu+q |
//   down+=.
Counts Expected(int64_t layers, Activation act, int64_t head_dim, bool fuse) {
  const bool quantized = act != Activation::kF32;
  const int q = quantized ? 1 : 0;
  if (!fuse) {
    const int d = 1 + static_cast<int>(layers) * (16 + 4 * q) + 3 + q;
    return {d, d - 1};
  }
  const int attn_q = quantized && head_dim % ActivationBlock(act) != 0 ? 1 : 0;
  // F16 / BF16: {q, k, v} | {rope q, kv store} is one dispatch (gemm_qkv.glsl), and so is
  // {gate, up} | swiglu+q (gemm_glu.glsl).
  const int pairs = act == Activation::kF16 || act == Activation::kBF16 ? 1 : 0;
  const int per_layer = 13 + attn_q - 6 * pairs, stages_per_layer = 9 + attn_q - 2 * pairs;
  // The embedding and the first norm are one dispatch (embed_q.comp).
  const int d = static_cast<int>(layers) * per_layer + 3;
  const int stages = static_cast<int>(layers) * stages_per_layer + 3;
  return {d, stages - 1};
}

TEST(GpuStep, DispatchAndBarrierCountsFollowTheModel) {
  const std::string skip = StepSkipReason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  UF_REQUIRE_SHARED();
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
                   want = Expected(layers, act, (*m)->config().head_dim, fuse);
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
                 fused = Expected(layers, act, (*m)->config().head_dim, true);
    EXPECT_EQ(tail.dispatches, fused.dispatches - (2 * layers + 1)) << "norm tail";
    EXPECT_EQ(tail.barriers, fused.barriers - (2 * layers + 1)) << "norm tail";
  }
}

// The fused and the unfused step of the model at `path` give the same logits bit for bit: 20
// positions one token at a time, then 8 more as one batch (the tiled GEMMs; for experts, the
// slots grouped by expert). attention_chunk: GpuForwardOptions' (8 splits these positions into
// up to 4 chunks: the combine then writes the o-projection's Q8_0 blocks).
// With norm_tail, the fused step runs the GEMMs' norm tail (GpuForwardOptions::norm_tail) too.
void ExpectFusedEqualsUnfused(const std::string& path, int64_t attention_chunk = 256,
                              bool norm_tail = false) {
  SCOPED_TRACE(path + (norm_tail ? " (norm tail)" : ""));
  auto m = model::Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const int64_t n_vocab = (*m)->config().n_vocab;
  std::vector<std::vector<float>> rows[2];
  int barriers[2] = {0, 0};  // of a one-token step
  for (int fuse = 0; fuse < 2; ++fuse) {
    auto cache = engine::KvCache::Create(CacheFor(**m, 32));
    ASSERT_TRUE(cache.ok());
    auto fwd = GpuForward::Create(**m, kVulkan, cache->get(),
                                  {.max_batch = 8,
                                   .attention_chunk = attention_chunk,
                                   .fuse = fuse != 0,
                                   .norm_tail = norm_tail && fuse != 0});
    ASSERT_TRUE(fwd.ok()) << fwd.status().ToString();
    model::Batch b;
    const auto token = [&](int32_t p) { return (p * 7919 + 13) % (n_vocab - 1) + 1; };
    for (int32_t p = 0; p < 20; ++p) {
      b.Clear();
      b.Add(token(p), p, 0, true);
      ASSERT_TRUE((*fwd)->Forward(b).ok());
      rows[fuse].emplace_back((*fwd)->logits(0), (*fwd)->logits(0) + n_vocab);
    }
    barriers[fuse] = (*fwd)->last_step_barriers();
    b.Clear();
    for (int32_t p = 20; p < 28; ++p) b.Add(token(p), p, 0, true);
    ASSERT_TRUE((*fwd)->Forward(b).ok());
    for (int64_t i = 0; i < 8; ++i) {
      rows[fuse].emplace_back((*fwd)->logits(i), (*fwd)->logits(i) + n_vocab);
    }
  }
  ASSERT_EQ(rows[0].size(), rows[1].size());
  for (size_t i = 0; i < rows[0].size(); ++i) {
    EXPECT_EQ(std::memcmp(rows[0][i].data(), rows[1][i].data(), n_vocab * 4), 0) << "row " << i;
  }
  // Every layer groups or fuses something (Q, K and V at least; with the tail, both norms but
  // the first).
  EXPECT_LE(barriers[1], barriers[0] - (norm_tail ? 4 : 2) * (*m)->config().n_layer + 1);
  std::printf("[gpu step] %s: %d barriers a one-token step unfused, %d fused\n",
              std::filesystem::path(path).filename().c_str(), barriers[0], barriers[1]);
}

TEST(GpuStep, FusedStepEqualsUnfusedBitwise) {
  const std::string skip = StepSkipReason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  UF_REQUIRE_SHARED();
  int models = 0, tails = 0;
  for (const auto& entry : std::filesystem::directory_iterator("../shared/models")) {
    if (entry.path().extension() != ".gguf") continue;
    ExpectFusedEqualsUnfused(entry.path().string());
    // The norm tail for each format it writes (Q8_0, Q8_K, f16 and bf16 pairs, f32) and with
    // qwen2's biases: its code does not depend on the weights' type otherwise.
    const std::string stem = entry.path().stem().string();
    if (stem == "tiny-llama-256-q8_0" || stem == "tiny-llama-256-q4_k_m" ||
        stem == "tiny-llama-256-f16" || stem == "tiny-llama-256-bf16" || stem == "tiny-llama-f32" ||
        stem == "tiny-qwen2-256-q8_0") {
      ExpectFusedEqualsUnfused(entry.path().string(), 256, /*norm_tail=*/true);
      ++tails;
    }
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
    ExpectFusedEqualsUnfused(path);
    ExpectFusedEqualsUnfused(path, 256, /*norm_tail=*/true);
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace uf::gpu
