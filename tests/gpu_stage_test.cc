// The kernels that take a whole stage out of a decode step (docs/gpu.md, "Fewer stages", and
// "One step"'s Q/K/V with RoPE): each against the kernels it replaces, bit for bit, with no
// tolerance (the unfused kernels are the ones the goldens and the CPU comparisons check). The
// norm tail (the last workgroup of a residual GEMM normalizes), a mixture of experts' tails (the
// router GEMM's last workgroup routes, the down experts' GEMM adds the weighted sum), qwen3's q/k
// norms with RoPE and the K/V store, the embedding with the first norm, gate/up with SwiGLU, Q/K/V
// with RoPE and the f16 K/V store (F16 / BF16 weights), and the GEMMs' RoPE / store epilogue (every
// weight type). Without a Vulkan device every test skips, saying so; whole steps are compared in
// gpu_fused_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#if UF_HAVE_VULKAN
#include "gpu_kernels_fixture.h"
#endif

namespace uf::gpu {
namespace {

#if !UF_HAVE_VULKAN
TEST(GpuStage, NotBuilt) { GTEST_SKIP() << "built without the Vulkan backend"; }
#else

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
    ASSERT_TRUE(kernels_->AddStages(ctx_, type).ok());
    ASSERT_TRUE(wide_->AddStages(ctx_, type).ok());
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

// The router GEMM's route tail (the last workgroup routes the token the product scored) against
// the product followed by Route, bitwise (ids and weights; Route itself is checked against the
// CPU router in gpu_moe_kernels_test.cc): every weight type and GEMV variant, the shared models'
// routers (qwen3moe's 8 of 128, Mixtral's 2 of 8, gpt-oss's 4 of 32 with a bias and a softmax
// over the k) and the limits (64 of 512, a bias, a scale; k 1 of 130). Each recording runs
// twice: the counter is zero again after a dispatch. Not for several tokens or another shape.
TEST_F(GpuKernelsTest, GemmRouteTailEqualsGemmThenRoute) {
  struct Case {
    int64_t ne, k;
    bool softmax_all, norm, bias;
    float scale;
  };
  const std::vector<Case> cases = {{128, 8, true, true, false, 1.0f},
                                   {8, 2, true, false, false, 0.0f},
                                   {32, 4, false, false, true, 1.0f},
                                   {512, 64, true, true, true, 2.5f},
                                   {130, 1, true, false, true, 1.0f}};
  const int64_t cols = 256;
  Buffer counter = Floats({0.0f});
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                        GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    ASSERT_TRUE(kernels_->AddMoeTails(ctx_, type, GgmlType::kF32).ok());
    ASSERT_TRUE(wide_->AddMoeTails(ctx_, type, GgmlType::kF32).ok());
    for (const Case& c : cases) {
      // Weights of 0.5 make near ties, which the rank order must break as Route does.
      const std::vector<float> wf = Random(c.ne * cols, static_cast<uint32_t>(60 + c.ne), 0.5f);
      std::vector<uint8_t> data;
      const kernels::Matrix m = type == GgmlType::kF32
                                    ? *kernels::Matrix::Create(type, wf.data(), c.ne, cols)
                                    : Quantized(type, wf, c.ne, cols, &data);
      auto gm = UploadMatrix(ctx_, m);
      ASSERT_TRUE(gm.ok()) << gm.status().ToString();
      const Kernels::RouteParams rp{.n_expert = c.ne,
                                    .k = c.k,
                                    .softmax_all = c.softmax_all,
                                    .norm = c.norm,
                                    .scale = c.scale};
      const std::vector<float> x = Random(cols, 61), bias = Random(c.ne, 62, 0.3f);
      Buffer xb = Floats(x), xq = Empty(ActBytes(cols)), bb = Floats(bias);
      Recorder quant(ctx_);
      const bool quantized = QuantizeFor(&quant, type, xb, cols, xq);
      ASSERT_TRUE(quant.Finish().ok());
      ASSERT_TRUE(quant.Run().ok());
      const Buffer& in = quantized ? xq : xb;
      for (const Kernels* k : Variants(type)) {
        SCOPED_TRACE(testing::Message() << GgmlTypeName(type) << " " << VariantName(k) << " " << c.k
                                        << " of " << c.ne << (c.bias ? " bias" : ""));
        ASSERT_TRUE(k->CanRouteTail(*gm, 1, rp));
        EXPECT_FALSE(k->CanRouteTail(*gm, 2, rp));  // one token only
        Kernels::RouteParams other = rp;
        other.n_expert = c.ne + 1;
        EXPECT_FALSE(k->CanRouteTail(*gm, 1, other));  // a row a logit
        Buffer y1 = Empty(c.ne * 4), y2 = Empty(c.ne * 4), ids1 = Empty(c.k * 4),
               ids2 = Empty(c.k * 4), w1 = Empty(c.k * 4), w2 = Empty(c.k * 4);
        Recorder ref(ctx_), tail(ctx_);
        k->Gemm(&ref, *gm, in, 1, y1);
        k->Route(&ref, y1, c.bias ? &bb : nullptr, ids1, w1, 1, rp);
        const Kernels::RouteTail rt{
            .params = rp, .ids = &ids2, .weights = &w2, .counter = &counter};
        k->Gemm(&tail, *gm, in, 1, y2, 0, 0, false, c.bias ? &bb : nullptr, nullptr, nullptr, &rt);
        ASSERT_TRUE(ref.Finish().ok());
        ASSERT_TRUE(tail.Finish().ok());
        for (int run = 0; run < 2; ++run) {
          ASSERT_TRUE(ref.Run().ok());
          ASSERT_TRUE(tail.Run().ok());
          EXPECT_EQ(Words(ctx_, ids1, c.k * 4), Words(ctx_, ids2, c.k * 4)) << run;
          EXPECT_EQ(Words(ctx_, w1, c.k * 4), Words(ctx_, w2, c.k * 4)) << run;
          EXPECT_EQ(Words(ctx_, counter, 4), std::vector<uint32_t>{0u}) << run;
        }
      }
    }
  }
}

// The down experts' sum tail (Kernels::ExpertSum: the last of a row group's slots adds the
// group's rows of the weighted sum into the residual stream, then optionally the last row group
// normalizes it) against GemmExperts, MoeSum (accumulating) and RmsNormQuant (RmsNorm for f32),
// bitwise: every weight type and GEMV variant, 2 and 8 slots of 8 experts (a repeated expert
// among the 8), with and without gpt-oss's down biases, without the norm and with every format
// it writes; 768 rows (3 Q8_K blocks; 96-768 row groups to count on lavapipe's 8 lanes and a
// GPU's 32). Each recording runs twice: the counters are zero again after a dispatch.
TEST_F(GpuKernelsTest, ExpertSumTailEqualsGemmExpertsThenMoeSum) {
  const int64_t rows = 768, cols = 256, n_exp = 8;
  const std::vector<float> nw = Random(rows, 70), bias = Random(n_exp * rows, 71, 0.2f);
  Buffer nwb = Floats(nw), bb = Floats(bias);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                        GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    std::vector<std::vector<uint8_t> > data;
    std::vector<kernels::Matrix> experts;
    auto w = RandomExperts(type, n_exp, rows, cols, 72, &data, &experts);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE(kernels_->AddMoeTails(ctx_, GgmlType::kF32, type).ok());
    ASSERT_TRUE(wide_->AddMoeTails(ctx_, GgmlType::kF32, type).ok());
    for (const Kernels* kern : Variants(type)) {
      ASSERT_TRUE(kern->CanSumTail(*w));
      const std::vector<uint32_t> zeros(kern->SumCounterWords(*w), 0u);
      Buffer counter = Empty(zeros.size() * 4);
      ASSERT_TRUE(ctx_->Upload(counter, 0, zeros.data(), zeros.size() * 4).ok());
      for (int64_t k : {2, 8}) {
        std::vector<uint32_t> ids(k);
        for (int64_t s = 0; s < k; ++s) ids[s] = static_cast<uint32_t>((s * 5 + 3) % 7);
        const std::vector<float> x = Random(k * cols, 73), sw = Random(k, 74),
                                 x0 = ActivationValues(rows, 75);
        Buffer idb = Empty(k * 4), xb = Floats(x), xq = Empty(ActBytes(k * cols)), wb = Floats(sw);
        ASSERT_TRUE(ctx_->Upload(idb, 0, ids.data(), ids.size() * 4).ok());
        Recorder quant(ctx_);
        const Buffer& in = QuantizeFor(&quant, type, xb, k * cols, xq) ? xq : xb;
        ASSERT_TRUE(quant.Finish().ok());
        ASSERT_TRUE(quant.Run().ok());
        for (bool with_bias : {false, true}) {
          for (int norm = 0; norm < 6; ++norm) {  // none, then f32, Q8_0, Q8_K, f16, bf16
            const Activation act = norm <= 1 ? Activation::kF32 : static_cast<Activation>(norm - 1);
            SCOPED_TRACE(testing::Message() << GgmlTypeName(type) << " " << VariantName(kern)
                                            << " k=" << k << (with_bias ? " bias " : " ")
                                            << (norm == 0                 ? "no norm"
                                                : act == Activation::kF32 ? "f32"
                                                                          : FormatName(act)));
            Buffer y1 = Empty(k * rows * 4), y2 = Empty(k * rows * 4), x1 = Floats(x0),
                   x2 = Floats(x0), n1 = Empty(rows * 4), n2 = Empty(rows * 4),
                   q1 = Empty(ActBytes(rows)), q2 = Empty(ActBytes(rows));
            const Buffer* b = with_bias ? &bb : nullptr;
            Recorder ref(ctx_), tail(ctx_);
            kern->GemmExperts(&ref, *w, in, idb, k, 1, y1);
            kern->MoeSum(&ref, y1, wb, x1, 1, k, rows, b, with_bias ? &idb : nullptr, true);
            if (norm == 1) kern->RmsNorm(&ref, x1, 0, nwb, n1, 0, 1, rows, 1e-5f);
            if (norm > 1) kern->RmsNormQuant(&ref, x1, nwb, n1, 1, rows, 1e-5f, act, q1);
            const Kernels::NormTail nt{.w = &nwb, .y = &n2, .q = &q2, .eps = 1e-5f, .act = act};
            const Kernels::ExpertSum sum{.weights = &wb,
                                         .x = &x2,
                                         .bias = b,
                                         .counter = &counter,
                                         .norm = norm > 0 ? &nt : nullptr};
            kern->GemmExperts(&tail, *w, in, idb, k, 1, y2, &sum);
            ASSERT_TRUE(ref.Finish().ok());
            ASSERT_TRUE(tail.Finish().ok());
            for (int run = 0; run < 2; ++run) {
              ASSERT_TRUE(ref.Run().ok());
              ASSERT_TRUE(tail.Run().ok());
              EXPECT_EQ(Words(ctx_, y1, k * rows * 4), Words(ctx_, y2, k * rows * 4)) << run;
              EXPECT_EQ(Words(ctx_, x1, rows * 4), Words(ctx_, x2, rows * 4)) << run;
              if (norm > 0) {
                EXPECT_EQ(Words(ctx_, n1, rows * 4), Words(ctx_, n2, rows * 4)) << run;
              }
              if (norm > 1) {
                const uint64_t used = act == Activation::kQ8_K   ? Q8KActivationBytes(rows)
                                      : act == Activation::kQ8_0 ? Q8ActivationBytes(rows)
                                                                 : PairActivationBytes(rows);
                EXPECT_EQ(Words(ctx_, q1, used), Words(ctx_, q2, used)) << run;
              }
              EXPECT_EQ(Words(ctx_, counter, zeros.size() * 4), zeros) << run;
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
    ASSERT_TRUE(kernels_->AddStages(ctx_, type).ok());
    ASSERT_TRUE(wide_->AddStages(ctx_, type).ok());
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
      ASSERT_TRUE(kernels_->AddStages(ctx_, type).ok());
      ASSERT_TRUE(wide_->AddStages(ctx_, type).ok());
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
        std::vector<std::array<uint32_t, 4> > tok_rows;
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

// The GEMMs' RoPE / store epilogue (Kernels::RopeStore) against Gemm, Rope and KvStore (with its
// rope), bit for bit, for every weight type: Q rotated in place as Rope rotates it, K left
// unrotated with its rotated f16 pairs in the cache as KvStore stores them, V's pairs in the cache;
// rope_dim whole and half of head_dim 64, 1, 3, 9 and 33 tokens (gemm1, partial tiles of 8, 16
// and 32) at scattered positions and cache rows. Refused for NEOX pairs and a Q8_0 cache, and
// only at 64 lanes for a one-row-a-subgroup GEMM (a workgroup of one row holds no whole pair).
TEST_F(GpuKernelsTest, GemmRopeStoreEqualsGemmThenRopeAndKvStore) {
  const int64_t n_head = 4, n_kv = 2, hd = 64, cols = 256, n_rows = 40, max_pos = 40;
  const int64_t q_rows = n_head * hd, kv_rows = n_kv * hd;
  uint64_t words = 0;
  const AttentionShape as = CacheShape(n_head, n_kv, hd, n_rows, &words);
  int ran = 0;
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                        GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    std::vector<uint8_t> dq, dk, dv;
    auto wq = RandomMatrix(type, q_rows, cols, 70, &dq),
         wk = RandomMatrix(type, kv_rows, cols, 71, &dk),
         wv = RandomMatrix(type, kv_rows, cols, 72, &dv);
    ASSERT_TRUE(wq.ok() && wk.ok() && wv.ok());
    ASSERT_TRUE(kernels_->AddStages(ctx_, type).ok());
    EXPECT_TRUE(kernels_->HasStages(type));
    AttentionShape q8 = as;
    q8.q8 = true;
    EXPECT_FALSE(kernels_->CanRopeStore(*wq, 1, as, /*neox=*/true));
    EXPECT_FALSE(kernels_->CanRopeStore(*wq, 1, q8, false));
    for (int64_t rope_dim : {hd, hd / 2}) {
      Buffer csb = Floats(TestAngles(max_pos, rope_dim)),
             c1 = Floats(std::vector<float>(words, 0.0f)),
             c2 = Floats(std::vector<float>(words, 0.0f));
      const Kernels::KvRope kr{.cs = &csb, .rope_dim = rope_dim, .neox = false};
      for (int64_t n : {1, 3, 9, 33}) {
        SCOPED_TRACE(std::string(GgmlTypeName(type)) + " rope_dim " + std::to_string(rope_dim) +
                     " n=" + std::to_string(n));
        if (!kernels_->CanRopeStore(*wq, n, as, false)) {
          EXPECT_EQ(ctx_->info().subgroup_size, 64u) << "refused at " << ctx_->info().subgroup_size;
          continue;
        }
        ASSERT_TRUE(kernels_->CanRopeStore(*wk, n, as, false));
        std::vector<std::array<uint32_t, 4> > tok_rows;
        for (uint32_t t = 0; t < n; ++t) {
          tok_rows.push_back({3 + t, static_cast<uint32_t>((11 * t + 7 * n) % max_pos),
                              static_cast<uint32_t>((13 * t + n) % n_rows), 0});
        }
        Buffer xb = Floats(Random(n * cols, 73 + static_cast<uint32_t>(n))),
               xq = Empty(ActBytes(n * cols)), tok = Tok(tok_rows), q1 = Empty(n * q_rows * 4),
               q2 = Empty(n * q_rows * 4), k1 = Empty(n * kv_rows * 4), k2 = Empty(n * kv_rows * 4),
               v1 = Empty(n * kv_rows * 4), v2 = Empty(n * kv_rows * 4);
        using Of = Kernels::RopeStoreOf;
        const Kernels::RopeStore rq{
            .of = Of::kQ, .cs = &csb, .tok = &tok, .shape = &as, .rope_dim = rope_dim};
        const Kernels::RopeStore rk{.of = Of::kK,
                                    .cs = &csb,
                                    .cache = &c2,
                                    .tok = &tok,
                                    .shape = &as,
                                    .rope_dim = rope_dim};
        const Kernels::RopeStore rv{.of = Of::kV,
                                    .cs = &csb,
                                    .cache = &c2,
                                    .tok = &tok,
                                    .shape = &as,
                                    .rope_dim = rope_dim};
        Recorder rec(ctx_);
        const Buffer& in = QuantizeFor(&rec, type, xb, n * cols, xq) ? xq : xb;
        kernels_->Gemm(&rec, *wq, in, n, q1);
        kernels_->Gemm(&rec, *wk, in, n, k1);
        kernels_->Gemm(&rec, *wv, in, n, v1);
        kernels_->Rope(&rec, q1, csb, tok, n, n_head, hd, rope_dim, false);
        kernels_->KvStore(&rec, k1, v1, c1, tok, n, as, &kr);
        kernels_->Gemm(&rec, *wq, in, n, q2, 0, 0, false, nullptr, nullptr, &rq);
        kernels_->Gemm(&rec, *wk, in, n, k2, 0, 0, false, nullptr, nullptr, &rk);
        kernels_->Gemm(&rec, *wv, in, n, v2, 0, 0, false, nullptr, nullptr, &rv);
        ASSERT_TRUE(rec.Finish().ok());
        ASSERT_TRUE(rec.Run().ok());
        EXPECT_EQ(Words(ctx_, q1, n * q_rows * 4), Words(ctx_, q2, n * q_rows * 4)) << "q";
        EXPECT_EQ(Words(ctx_, k1, n * kv_rows * 4), Words(ctx_, k2, n * kv_rows * 4)) << "k";
        EXPECT_EQ(Words(ctx_, v1, n * kv_rows * 4), Words(ctx_, v2, n * kv_rows * 4)) << "v";
        ++ran;
      }
      const std::vector<uint32_t> cache = Words(ctx_, c2, words * 4);
      EXPECT_EQ(Words(ctx_, c1, words * 4), cache) << "cache";
      if (ran > 0) {
        EXPECT_NE(cache, std::vector<uint32_t>(words, 0u)) << "nothing stored";
      }
    }
  }
  if (ctx_->info().subgroup_size < 64) {
    EXPECT_EQ(ran, 8 * 2 * 4);
  }
}

// qwen3's q/k norms, Q's RoPE and the K/V store in one dispatch (Kernels::QkNormRopeStore)
// against RmsNorm over Q's and K's heads, Rope and KvStore (with its rope), bit for bit: q as
// Rope leaves it, the cache's words as KvStore stores them; head_dim 64, 128 and 512 (two values
// a lane in the sum), rope_dim whole and half, llama and NEOX pairs, 1 and 3 tokens at scattered
// positions and cache rows. Refused for a Q8_0 cache, an odd head_dim or one past kMaxHeadDim.
TEST_F(GpuKernelsTest, QkNormRopeStoreEqualsNormsRopeAndKvStore) {
  const int64_t n_head = 4, n_kv = 2, n_rows = 40, max_pos = 40;
  ASSERT_TRUE(kernels_->AddQkNormRope(ctx_).ok());
  for (int64_t hd : {64, 128, 512}) {
    uint64_t words = 0;
    const AttentionShape as = CacheShape(n_head, n_kv, hd, n_rows, &words);
    ASSERT_TRUE(kernels_->QkNormRopeFits(as));
    AttentionShape other = as;
    other.q8 = true;
    EXPECT_FALSE(kernels_->QkNormRopeFits(other));
    other = as;
    other.head_dim = hd + 1;
    EXPECT_FALSE(kernels_->QkNormRopeFits(other));
    other.head_dim = Kernels::kMaxHeadDim + 2;
    EXPECT_FALSE(kernels_->QkNormRopeFits(other));
    const std::vector<float> qw = Random(hd, 80), kw = Random(hd, 81);
    Buffer qwb = Floats(qw), kwb = Floats(kw);
    for (int64_t rope_dim : {hd, hd / 2}) {
      Buffer csb = Floats(TestAngles(max_pos, rope_dim));
      for (bool neox : {false, true}) {
        const Kernels::KvRope kr{.cs = &csb, .rope_dim = rope_dim, .neox = neox};
        for (int64_t n : {1, 3}) {
          SCOPED_TRACE(testing::Message() << "head_dim " << hd << " rope_dim " << rope_dim
                                          << (neox ? " neox" : "") << " n=" << n);
          std::vector<std::array<uint32_t, 4> > tok_rows;
          for (uint32_t t = 0; t < n; ++t) {
            tok_rows.push_back({3 + t, static_cast<uint32_t>((11 * t + 7 * n) % max_pos),
                                static_cast<uint32_t>((13 * t + n) % n_rows), 0});
          }
          const std::vector<float> q = Random(n * n_head * hd, 82, 3.0f),
                                   k = Random(n * n_kv * hd, 83, 3.0f),
                                   v = Random(n * n_kv * hd, 84);
          Buffer tok = Tok(tok_rows), q1 = Floats(q), q2 = Floats(q), k1 = Floats(k),
                 k2 = Floats(k), vb = Floats(v), c1 = Floats(std::vector<float>(words, 0.0f)),
                 c2 = Floats(std::vector<float>(words, 0.0f));
          Recorder rec(ctx_);
          kernels_->RmsNorm(&rec, q1, 0, qwb, q1, 0, n * n_head, hd, 1e-6f);
          kernels_->RmsNorm(&rec, k1, 0, kwb, k1, 0, n * n_kv, hd, 1e-6f);
          kernels_->Rope(&rec, q1, csb, tok, n, n_head, hd, rope_dim, neox);
          kernels_->KvStore(&rec, k1, vb, c1, tok, n, as, &kr);
          kernels_->QkNormRopeStore(&rec, q2, k2, vb, qwb, kwb, 1e-6f, c2, tok, n, as, kr);
          ASSERT_TRUE(rec.Finish().ok());
          ASSERT_TRUE(rec.Run().ok());
          EXPECT_EQ(Words(ctx_, q1, n * n_head * hd * 4), Words(ctx_, q2, n * n_head * hd * 4))
              << "q";
          EXPECT_EQ(Words(ctx_, k2, n * n_kv * hd * 4), Words(ctx_, Floats(k), n * n_kv * hd * 4))
              << "k unchanged";
          const std::vector<uint32_t> cache = Words(ctx_, c2, words * 4);
          EXPECT_EQ(Words(ctx_, c1, words * 4), cache) << "cache";
          EXPECT_NE(cache, std::vector<uint32_t>(words, 0u)) << "nothing stored";
        }
      }
    }
  }
}

// qwen3's head tails (RopeStoreOf::kQNorm / kKNorm: the last of a head's workgroups normalizes
// the head, rotates Q in place or stores K rotated; V's store the plain epilogue) against the
// three products followed by QkNormRopeStore (itself held to RmsNorm, Rope and KvStore above),
// bit for bit: every weight type, one token, head_dim 64, 128 and 256 (the tail's limit), rope_dim
// whole and half, llama and NEOX pairs; each recording run twice (the counters are zero again).
// Refused for several tokens, a Q8_0 cache and heads past 256 values.
TEST_F(GpuKernelsTest, GemmHeadTailsEqualGemmsThenQkNormRopeStore) {
  const int64_t n_head = 4, n_kv = 2, cols = 256, n_rows = 40, max_pos = 40;
  ASSERT_TRUE(kernels_->AddQkNormRope(ctx_).ok());
  int ran = 0;
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                        GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    ASSERT_TRUE(kernels_->AddStages(ctx_, type).ok());
    for (int64_t hd : {64, 128, 256}) {
      uint64_t words = 0;
      const AttentionShape as = CacheShape(n_head, n_kv, hd, n_rows, &words);
      std::vector<uint8_t> dq, dk, dv;
      auto wq = RandomMatrix(type, n_head * hd, cols, 90, &dq),
           wk = RandomMatrix(type, n_kv * hd, cols, 91, &dk),
           wv = RandomMatrix(type, n_kv * hd, cols, 92, &dv);
      ASSERT_TRUE(wq.ok() && wk.ok() && wv.ok());
      if (!kernels_->CanHeadNorm(*wq, 1, as) || !kernels_->CanRopeStore(*wv, 1, as, false)) {
        EXPECT_EQ(ctx_->info().subgroup_size, 64u) << "refused at " << ctx_->info().subgroup_size;
        continue;
      }
      ASSERT_TRUE(kernels_->CanHeadNorm(*wk, 1, as));
      EXPECT_FALSE(kernels_->CanHeadNorm(*wq, 2, as));
      AttentionShape other = as;
      other.q8 = true;
      EXPECT_FALSE(kernels_->CanHeadNorm(*wq, 1, other));
      const std::vector<float> qw = Random(hd, 93), kw = Random(hd, 94);
      const std::vector<uint32_t> zeros(n_head, 0u);
      Buffer qwb = Floats(qw), kwb = Floats(kw), cq = Empty(n_head * 4), ck = Empty(n_kv * 4);
      ASSERT_TRUE(ctx_->Upload(cq, 0, zeros.data(), n_head * 4).ok());
      ASSERT_TRUE(ctx_->Upload(ck, 0, zeros.data(), n_kv * 4).ok());
      for (int64_t rope_dim : {hd, hd / 2}) {
        Buffer csb = Floats(TestAngles(max_pos, rope_dim));
        for (bool neox : {false, true}) {
          SCOPED_TRACE(testing::Message() << GgmlTypeName(type) << " head_dim " << hd
                                          << " rope_dim " << rope_dim << (neox ? " neox" : ""));
          const Kernels::KvRope kr{.cs = &csb, .rope_dim = rope_dim, .neox = neox};
          Buffer xb = Floats(Random(cols, 95)), xq = Empty(ActBytes(cols)),
                 tok = Tok({{3, 17, 29, 0}}), q1 = Empty(n_head * hd * 4),
                 q2 = Empty(n_head * hd * 4), k1 = Empty(n_kv * hd * 4), k2 = Empty(n_kv * hd * 4),
                 v1 = Empty(n_kv * hd * 4), v2 = Empty(n_kv * hd * 4),
                 c1 = Floats(std::vector<float>(words, 0.0f)),
                 c2 = Floats(std::vector<float>(words, 0.0f));
          using Of = Kernels::RopeStoreOf;
          const Kernels::RopeStore rq{.of = Of::kQNorm,
                                      .cs = &csb,
                                      .tok = &tok,
                                      .shape = &as,
                                      .rope_dim = rope_dim,
                                      .norm = &qwb,
                                      .counter = &cq,
                                      .eps = 1e-6f,
                                      .neox = neox};
          Kernels::RopeStore rk = rq, rv = rq;
          rk.of = Of::kKNorm;
          rk.cache = rv.cache = &c2;
          rk.norm = &kwb;
          rk.counter = &ck;
          rv.of = Of::kV;
          rv.norm = rv.counter = nullptr;
          Recorder quant(ctx_), ref(ctx_), tail(ctx_);
          const Buffer& in = QuantizeFor(&quant, type, xb, cols, xq) ? xq : xb;
          ASSERT_TRUE(quant.Finish().ok());
          ASSERT_TRUE(quant.Run().ok());
          kernels_->Gemm(&ref, *wq, in, 1, q1);
          kernels_->Gemm(&ref, *wk, in, 1, k1);
          kernels_->Gemm(&ref, *wv, in, 1, v1);
          kernels_->QkNormRopeStore(&ref, q1, k1, v1, qwb, kwb, 1e-6f, c1, tok, 1, as, kr);
          kernels_->Gemm(&tail, *wq, in, 1, q2, 0, 0, false, nullptr, nullptr, &rq);
          kernels_->Gemm(&tail, *wk, in, 1, k2, 0, 0, false, nullptr, nullptr, &rk);
          kernels_->Gemm(&tail, *wv, in, 1, v2, 0, 0, false, nullptr, nullptr, &rv);
          ASSERT_TRUE(ref.Finish().ok());
          ASSERT_TRUE(tail.Finish().ok());
          for (int run = 0; run < 2; ++run) {
            ASSERT_TRUE(ref.Run().ok());
            ASSERT_TRUE(tail.Run().ok());
            EXPECT_EQ(Words(ctx_, q1, n_head * hd * 4), Words(ctx_, q2, n_head * hd * 4)) << run;
            const std::vector<uint32_t> cache = Words(ctx_, c2, words * 4);
            EXPECT_EQ(Words(ctx_, c1, words * 4), cache) << run;
            EXPECT_NE(cache, std::vector<uint32_t>(words, 0u)) << "nothing stored";
            EXPECT_EQ(Words(ctx_, cq, n_head * 4), zeros) << run;
            EXPECT_EQ(Words(ctx_, ck, n_kv * 4), std::vector<uint32_t>(n_kv, 0u)) << run;
          }
          ++ran;
        }
      }
    }
  }
  if (ctx_->info().subgroup_size < 64) {
    EXPECT_EQ(ran, 8 * 3 * 2 * 2);
  }
}

#endif  // UF_HAVE_VULKAN

}  // namespace
}  // namespace uf::gpu
