// Model loading validation (synthetic GGUF files built in memory) and forward-pass batching
// semantics on a real tiny model: several sequences in one batch, rewinds, and bad batches.
#include "model/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "model/batch.h"
#include "model/decoder.h"
#include "shared_data.h"

namespace uf::model {
namespace {

using gguf::Value;

// A small llama-style file: n_embd 8, 2 heads of 4, 1 kv head, n_ff 16, vocab 10, one layer.
struct SynthSpec {
  std::string arch = "llama";
  int64_t n_embd = 8, n_head = 2, n_head_kv = 1, n_ff = 16, n_vocab = 10;
  std::function<void(gguf::GgufWriter&)> extra_metadata;
  std::string skip_tensor;  // leave this tensor out
  std::string bad_shape;    // give this tensor one extra column
  bool biases = false;      // qwen2
  bool qk_norm = false;     // qwen3
  int64_t rope_freqs = 0;   // add rope_freqs.weight with this many values
};

class SynthFile {
 public:
  explicit SynthFile(const SynthSpec& s) : spec_(s) {}

  StatusOr<std::unique_ptr<Model>> Load() {
    gguf::GgufWriter w;
    const std::string a = spec_.arch;
    w.Set("general.architecture", Value::String(a));
    w.Set(a + ".embedding_length", Value::U32(spec_.n_embd));
    w.Set(a + ".block_count", Value::U32(1));
    w.Set(a + ".attention.head_count", Value::U32(spec_.n_head));
    w.Set(a + ".attention.head_count_kv", Value::U32(spec_.n_head_kv));
    w.Set(a + ".feed_forward_length", Value::U32(spec_.n_ff));
    w.Set(a + ".context_length", Value::U32(64));
    w.Set(a + ".attention.layer_norm_rms_epsilon", Value::F32(1e-5f));
    w.Set(a + ".vocab_size", Value::U32(spec_.n_vocab));
    if (spec_.extra_metadata) spec_.extra_metadata(w);
    // Shapes stay non-empty even when the metadata under test is nonsense.
    const int64_t heads = std::max<int64_t>(spec_.n_head, 1);
    const int64_t e = spec_.n_embd, hd = std::max<int64_t>(e / heads, 1);
    const int64_t q = heads * hd, kv = std::max<int64_t>(spec_.n_head_kv, 1) * hd;
    Add(w, "token_embd.weight", {e, spec_.n_vocab});
    Add(w, "output_norm.weight", {e});
    Add(w, "blk.0.attn_norm.weight", {e});
    Add(w, "blk.0.attn_q.weight", {e, q});
    Add(w, "blk.0.attn_k.weight", {e, kv});
    Add(w, "blk.0.attn_v.weight", {e, kv});
    Add(w, "blk.0.attn_output.weight", {q, e});
    Add(w, "blk.0.ffn_norm.weight", {e});
    Add(w, "blk.0.ffn_gate.weight", {e, spec_.n_ff});
    Add(w, "blk.0.ffn_up.weight", {e, spec_.n_ff});
    Add(w, "blk.0.ffn_down.weight", {spec_.n_ff, e});
    if (spec_.biases) {
      Add(w, "blk.0.attn_q.bias", {q});
      Add(w, "blk.0.attn_k.bias", {kv});
      Add(w, "blk.0.attn_v.bias", {kv});
    }
    if (spec_.qk_norm) {
      Add(w, "blk.0.attn_q_norm.weight", {hd});
      Add(w, "blk.0.attn_k_norm.weight", {hd});
    }
    if (spec_.rope_freqs > 0) Add(w, "rope_freqs.weight", {spec_.rope_freqs});
    auto buf = w.WriteToBuffer();
    if (!buf.ok()) return buf.status();
    auto file = gguf::GgufFile::FromBuffer(buf->data(), buf->size());
    if (!file.ok()) return file.status();
    return Model::FromFile(std::move(file).value());
  }

 private:
  void Add(gguf::GgufWriter& w, const std::string& name, std::vector<int64_t> ne) {
    if (name == spec_.skip_tensor) return;
    if (name == spec_.bad_shape) ne[0] += 1;
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    auto& data = data_.emplace_back(n);
    std::mt19937 gen(data_.size());
    std::normal_distribution<float> dist(0.0f, 0.5f);
    for (float& x : data) x = dist(gen);
    if (name == "rope_freqs.weight") {
      for (float& x : data) x = 1.0f + std::fabs(x);  // frequency divisors must be positive
    }
    const Status s = w.AddTensor(name, GgmlType::kF32, ne, data.data());
    ASSERT_TRUE(s.ok()) << name << ": " << s.ToString();
  }

  SynthSpec spec_;
  std::vector<std::vector<float>> data_;  // tensor bytes must outlive WriteToBuffer
};

Status LoadStatus(const SynthSpec& spec) {
  SynthFile f(spec);
  auto m = f.Load();
  return m.ok() ? OkStatus() : m.status();
}

TEST(ModelConfig, ValidLlamaLoads) {
  SynthFile f({});
  auto m = f.Load();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.rope_dim, 4);
  EXPECT_EQ(c.rope_type, RopeType::kNormal);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(c.n_vocab, 10);
  // q, k, v, o, gate, up, down + tied output, all F32.
  EXPECT_EQ((*m)->bytes_per_token(), 4u * (8 * 8 + 8 * 4 + 8 * 4 + 8 * 8 + 3 * 8 * 16 + 10 * 8));
  // A dense model's step reads each matrix once, however many tokens it holds.
  EXPECT_EQ(BytesPerStep((*m)->weights(), c, 64), static_cast<double>((*m)->bytes_per_token()));
}

TEST(ModelConfig, QwenArchitecturesUseNeoxRopeAndTheirExtraTensors) {
  SynthSpec s;
  s.arch = "qwen2";
  s.biases = true;
  SynthFile f2(s);
  auto m2 = f2.Load();
  ASSERT_TRUE(m2.ok()) << m2.status().ToString();
  EXPECT_EQ((*m2)->config().rope_type, RopeType::kNeox);
  EXPECT_EQ((*m2)->weights().layers[0].bq.size(), 8u);

  s.biases = false;
  const Status missing = LoadStatus(s);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("blk.0.attn_q.bias"), std::string::npos) << missing.message();

  s.arch = "qwen3";
  s.qk_norm = true;
  SynthFile f3(s);
  auto m3 = f3.Load();
  ASSERT_TRUE(m3.ok()) << m3.status().ToString();
  EXPECT_EQ((*m3)->weights().layers[0].k_norm.size(), 4u);
}

TEST(ModelConfig, UnknownArchitectureIsUnimplementedAndNamed) {
  SynthSpec s;
  s.arch = "mamba";
  const Status st = LoadStatus(s);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("mamba"), std::string::npos) << st.message();
}

TEST(ModelConfig, BadHeadCountsAreInvalid) {
  SynthSpec s;
  s.n_head = 3;  // 8 is not a multiple of 3
  EXPECT_EQ(LoadStatus(s).code(), StatusCode::kInvalidArgument);
  s = SynthSpec();
  s.n_head_kv = 3;  // more kv heads than heads
  EXPECT_EQ(LoadStatus(s).code(), StatusCode::kInvalidArgument);
  s = SynthSpec();
  s.n_head = 0;
  EXPECT_EQ(LoadStatus(s).code(), StatusCode::kInvalidArgument);
}

TEST(ModelConfig, MissingOrMisshapenTensorsAreNamed) {
  SynthSpec s;
  s.skip_tensor = "blk.0.ffn_up.weight";
  Status st = LoadStatus(s);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("blk.0.ffn_up.weight"), std::string::npos) << st.message();
  s = SynthSpec();
  s.bad_shape = "blk.0.attn_k.weight";
  st = LoadStatus(s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("blk.0.attn_k.weight"), std::string::npos) << st.message();
  s = SynthSpec();
  s.skip_tensor = "token_embd.weight";
  EXPECT_EQ(LoadStatus(s).code(), StatusCode::kNotFound);
}

TEST(ModelConfig, RopeScaling) {
  SynthSpec s;
  s.extra_metadata = [](gguf::GgufWriter& w) {
    w.Set("llama.rope.scaling.type", Value::String("linear"));
    w.Set("llama.rope.scaling.factor", Value::F32(4.0f));
  };
  SynthFile f(s);
  auto m = f.Load();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FLOAT_EQ((*m)->config().rope_freq_scale, 0.25f);

  // YaRN: the ramp ends from the reference's formula, n_dims ln(ctx / (2 pi beta)) / (2 ln base)
  // floored / ceiled (rope_dim 4, base 10000, ctx 2048: beta 32 -> 0.50 -> 0; beta 1 ->
  // 1.26 -> 2), and a magnitude of 1 + 0.1 ln 4 = 1.1386.
  s.extra_metadata = [](gguf::GgufWriter& w) {
    w.Set("llama.rope.scaling.type", Value::String("yarn"));
    w.Set("llama.rope.scaling.factor", Value::F32(4.0f));
    w.Set("llama.rope.scaling.original_context_length", Value::U32(2048));
  };
  SynthFile fy(s);
  auto my = fy.Load();
  ASSERT_TRUE(my.ok()) << my.status().ToString();
  const model::ModelConfig& cy = (*my)->config();
  EXPECT_FLOAT_EQ(cy.rope_freq_scale, 0.25f);
  EXPECT_EQ(cy.rope_ext_factor, 1.0f);
  EXPECT_EQ(cy.rope_n_ctx_orig, 2048);
  EXPECT_EQ(cy.rope_yarn_low, 0.0f);
  EXPECT_EQ(cy.rope_yarn_high, 2.0f);
  EXPECT_NEAR(cy.rope_mscale, 1.0 + 0.1 * std::log(4.0), 1e-5);

  s.extra_metadata = [](gguf::GgufWriter& w) {
    w.Set("llama.rope.scaling.type", Value::String("longrope"));
  };
  const Status st = LoadStatus(s);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("longrope"), std::string::npos);

  s = SynthSpec();
  s.rope_freqs = 2;  // rope_dim / 2
  SynthFile f2(s);
  auto m2 = f2.Load();
  ASSERT_TRUE(m2.ok()) << m2.status().ToString();
  EXPECT_TRUE((*m2)->config().has_rope_freq_factors);
  s.rope_freqs = 3;
  EXPECT_EQ(LoadStatus(s).code(), StatusCode::kInvalidArgument);
}

// ---- Elementwise ops against their formulas.

TEST(Ops, RopeAnglesMatchFormula) {
  kernels::RopeParams p;
  p.rope_dim = 64;
  p.freq_base = 10000.0f;
  const float factors[32] = {1, 2, 4, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                             1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3};
  float cs[64];
  for (int pass = 0; pass < 3; ++pass) {
    p.freq_scale = pass == 1 ? 0.25f : 1.0f;
    p.freq_factors = pass == 2 ? factors : nullptr;
    for (int32_t pos : {0, 1, 17, 1000}) {
      kernels::RopeAngles(p, pos, cs);
      for (int i = 0; i < 32; ++i) {
        double theta = pos * std::pow(10000.0, -2.0 * i / 64) * p.freq_scale;
        if (p.freq_factors) theta /= factors[i];
        // Angles come from repeated float multiplication (as the reference computes them):
        // ~i float roundings of theta, < 1e-4 rad at position 1000.
        EXPECT_NEAR(cs[2 * i], std::cos(theta), 1e-4) << pos << " " << i;
        EXPECT_NEAR(cs[2 * i + 1], std::sin(theta), 1e-4) << pos << " " << i;
      }
    }
  }
}

TEST(Ops, ApplyRopeRotatesTheRightPairs) {
  kernels::RopeParams p;
  p.rope_dim = 4;  // of head_dim 6: the last two dims pass through
  float cs[4];
  p.freq_base = 10000.0f;
  kernels::RopeAngles(p, 3, cs);
  const float x[12] = {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6};
  for (bool neox : {false, true}) {
    p.neox = neox;
    float y[12];
    std::copy(x, x + 12, y);
    kernels::ApplyRope(p, cs, y, 2, 6);
    for (int h = 0; h < 2; ++h) {
      const float* a = x + 6 * h;
      const float* b = y + 6 * h;
      for (int i = 0; i < 2; ++i) {
        const int i0 = neox ? i : 2 * i, i1 = neox ? i + 2 : 2 * i + 1;
        const float c = cs[2 * i], s = cs[2 * i + 1];
        EXPECT_NEAR(b[i0], a[i0] * c - a[i1] * s, 1e-6);
        EXPECT_NEAR(b[i1], a[i0] * s + a[i1] * c, 1e-6);
      }
      EXPECT_EQ(b[4], a[4]);
      EXPECT_EQ(b[5], a[5]);
    }
  }
}

TEST(Ops, RmsNormSwiGlu) {
  const float x[4] = {1, -2, 3, -4};
  const float w[4] = {1, 2, 0.5f, -1};
  float y[4];
  kernels::RmsNorm(x, w, y, 4, 1e-6f);
  const double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] / rms * w[i], 1e-6);

  const float g[2] = {1.5f, -3.0f}, u[2] = {2.0f, 0.5f};
  float o[2];
  kernels::SwiGlu(g, u, o, 2);
  EXPECT_NEAR(o[0], 1.5 / (1 + std::exp(-1.5)) * 2.0, 1e-6);
  EXPECT_NEAR(o[1], -3.0 / (1 + std::exp(3.0)) * 0.5, 1e-6);
}

// RMS norm: the AVX2 version sums the squares in double in another order than the scalar one,
// so results agree to float rounding (1 ulp of the scale, 2^-23 relative, plus the products').
TEST(Ops, RmsNormAgreesAcrossIsas) {
  for (int64_t n : {1, 7, 8, 15, 16, 17, 64, 100, 256, 2048}) {
    std::vector<float> x(n), w(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(3.0 * std::sin(0.37 * i + 1.0));
      w[i] = static_cast<float>(1.0 + 0.5 * std::cos(0.11 * i));
    }
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
    const kernels::Isa best = kernels::ActiveIsa();
    for (kernels::Isa isa : {kernels::Isa::kScalar, best}) {
      kernels::SetIsaForTesting(isa);
      for (const float* wp :
           {static_cast<const float*>(w.data()), static_cast<const float*>(nullptr)}) {
        std::vector<float> y(n);
        kernels::RmsNorm(x.data(), wp, y.data(), n, 1e-5f);
        for (int64_t i = 0; i < n; ++i) {
          const double want = x[i] * scale * (wp ? w[i] : 1.0);
          EXPECT_NEAR(y[i], want, 4e-7 * std::max(1.0, std::fabs(want))) << n << " " << i;
        }
        // In place.
        std::vector<float> z = x;
        kernels::RmsNorm(z.data(), wp, z.data(), n, 1e-5f);
        EXPECT_EQ(z, y);
      }
    }
    kernels::SetIsaForTesting(best);
  }
}

// The fused residual add + norm gives the same bits as the two steps, on every tier, and the
// same sums as the add alone.
TEST(Ops, AddRmsNormEqualsAddThenRmsNorm) {
  const kernels::Isa best = kernels::ActiveIsa();
  for (kernels::Isa isa : {kernels::Isa::kScalar, best}) {
    kernels::SetIsaForTesting(isa);
    for (int64_t n : {1, 7, 15, 16, 17, 33, 256, 2050}) {
      std::vector<float> x(n), r(n), w(n);
      for (int64_t i = 0; i < n; ++i) {
        x[i] = static_cast<float>(3.0 * std::sin(0.37 * i + 1.0));
        r[i] = static_cast<float>(0.7 * std::cos(0.53 * i) + 1e-3 * i);
        w[i] = static_cast<float>(1.0 + 0.5 * std::cos(0.11 * i));
      }
      std::vector<float> x2 = x, want(n), got(n);
      kernels::AddInPlace(x.data(), r.data(), n);
      kernels::RmsNorm(x.data(), w.data(), want.data(), n, 1e-5f);
      kernels::AddRmsNorm(x2.data(), r.data(), w.data(), got.data(), n, 1e-5f);
      EXPECT_EQ(x2, x) << kernels::IsaName(isa) << " n=" << n;
      EXPECT_EQ(got, want) << kernels::IsaName(isa) << " n=" << n;
    }
  }
  kernels::SetIsaForTesting(best);
}

TEST(Ops, SwiGluAgreesAcrossIsas) {
  // Gates from -120 to 120 (both clamps of the SIMD exp), lengths around the 8-float step;
  // against double precision within 1e-6 relative plus the float rounding of the gate's
  // exponent argument (2^-24 of |g|, relative), and 1e-30 absolute where silu is ~0.
  for (int64_t n : {1, 7, 8, 9, 100}) {
    std::vector<float> g(n), u(n);
    for (int64_t i = 0; i < n; ++i) {
      g[i] = static_cast<float>(120.0 * std::sin(0.61 * i + 0.2) * (i % 3 == 0 ? 1.0 : 0.05));
      u[i] = static_cast<float>(std::cos(0.3 * i));
    }
    const kernels::Isa best = kernels::ActiveIsa();
    for (kernels::Isa isa : {kernels::Isa::kScalar, best}) {
      kernels::SetIsaForTesting(isa);
      std::vector<float> out(n);
      kernels::SwiGlu(g.data(), u.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double want = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
        const double tol = (1e-6 + 1.2e-7 * std::abs(g[i])) * std::abs(want) + 1e-30;
        EXPECT_NEAR(out[i], want, tol) << n << " " << g[i];
      }
    }
    kernels::SetIsaForTesting(best);
  }
}

// ---- Forward-pass batching on a real model (F32: our products equal the reference's to ~1e-6).

constexpr char kF32Model[] = "../shared/models/tiny-llama-f32.gguf";

class ForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    UF_REQUIRE_SHARED();
    auto m = Model::Load(kF32Model);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
    engine::KvCacheOptions o;
    o.n_layer = model_->config().n_layer;
    o.n_head_kv = model_->config().n_head_kv;
    o.head_dim = model_->config().head_dim;
    o.block_size = 4;  // small blocks: sequences span several, exercising the block tables
    o.n_blocks = 24;
    o.max_seqs = 3;
    auto c = engine::KvCache::Create(o);
    ASSERT_TRUE(c.ok());
    cache_ = std::move(c).value();
    auto d = Decoder::Create(*model_, cache_.get(), {.max_batch = 32}, &pool_);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    decoder_ = std::move(d).value();
  }

  // Logits at every position of tokens, run alone in seq (one token per forward).
  std::vector<std::vector<float>> Alone(const std::vector<int32_t>& tokens, int seq) {
    cache_->Remove(seq);
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      Batch b;
      b.Add(tokens[i], i, seq, true);
      EXPECT_TRUE(decoder_->Forward(b).ok());
      const float* l = decoder_->logits(0);
      out.emplace_back(l, l + model_->config().n_vocab);
    }
    cache_->Remove(seq);
    return out;
  }

  void ExpectClose(const float* got, const std::vector<float>& want, const char* what) {
    double max_err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      max_err = std::max<double>(max_err, std::fabs(got[i] - want[i]));
    }
    // F32 throughout; only summation order may differ between batch shapes.
    EXPECT_LT(max_err, 1e-4) << what;
  }

  ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  std::unique_ptr<engine::KvCache> cache_;
  std::unique_ptr<Decoder> decoder_;
};

TEST_F(ForwardTest, InterleavedSequencesMatchSeparateRuns) {
  const std::vector<int32_t> a = {1, 9038, 2501, 263, 931, 29892, 727, 471, 263};
  const std::vector<int32_t> b = {1, 450, 4996, 17354, 1701, 29916};
  const auto ra = Alone(a, 0), rb = Alone(b, 1);
  Batch batch;
  size_t ia = 0, ib = 0;
  std::vector<std::pair<char, size_t>> order;
  while (ia < a.size() || ib < b.size()) {
    if (ia < a.size()) {
      batch.Add(a[ia], ia, 2, true);
      order.push_back({'a', ia++});
    }
    if (ib < b.size()) {
      batch.Add(b[ib], ib, 0, true);
      order.push_back({'b', ib++});
    }
  }
  ASSERT_TRUE(decoder_->Forward(batch).ok());
  ASSERT_EQ(decoder_->n_outputs(), static_cast<int64_t>(a.size() + b.size()));
  for (size_t j = 0; j < order.size(); ++j) {
    const auto& [which, pos] = order[j];
    ExpectClose(decoder_->logits(j), which == 'a' ? ra[pos] : rb[pos], "interleaved");
  }
  EXPECT_EQ(cache_->Length(2), static_cast<int64_t>(a.size()));
  EXPECT_EQ(cache_->Length(0), static_cast<int64_t>(b.size()));

  // Continue: decode one token of a while prefilling nothing else; only that row wants logits.
  Batch next;
  next.Add(100, a.size(), 2, true);
  next.Add(101, b.size(), 0, false);
  ASSERT_TRUE(decoder_->Forward(next).ok());
  EXPECT_EQ(decoder_->n_outputs(), 1);
  auto a2 = a;
  a2.push_back(100);
  ExpectClose(decoder_->logits(0), Alone(a2, 1).back(), "continued");
}

TEST_F(ForwardTest, RewindOverwritesLaterPositions) {
  const std::vector<int32_t> a = {1, 9038, 2501, 263, 931, 29892, 727};
  Batch b;
  for (size_t i = 0; i < a.size(); ++i) b.Add(a[i], i, 0, false);
  ASSERT_TRUE(decoder_->Forward(b).ok());
  EXPECT_EQ(decoder_->n_outputs(), 0);
  // Rewrite from position 3 with other tokens.
  const std::vector<int32_t> c = {1, 9038, 2501, 500, 600};
  b.Clear();
  b.Add(c[3], 3, 0, false);
  b.Add(c[4], 4, 0, true);
  ASSERT_TRUE(decoder_->Forward(b).ok());
  EXPECT_EQ(cache_->Length(0), 5);
  ExpectClose(decoder_->logits(0), Alone(c, 1).back(), "rewound");
}

TEST_F(ForwardTest, BadBatchesAreRejectedWithoutTouchingTheCache) {
  Batch ok;
  for (int i = 0; i < 5; ++i) ok.Add(1 + i, i, 0, true);
  ASSERT_TRUE(decoder_->Forward(ok).ok());
  const int64_t free_before = cache_->free_blocks();

  Batch b;
  EXPECT_EQ(decoder_->Forward(b).code(), StatusCode::kInvalidArgument);  // empty
  b.Add(32000, 5, 0, true);  // token past the vocabulary
  EXPECT_EQ(decoder_->Forward(b).code(), StatusCode::kInvalidArgument);
  b.Clear();
  b.Add(-1, 5, 0, true);
  EXPECT_EQ(decoder_->Forward(b).code(), StatusCode::kInvalidArgument);
  b.Clear();
  b.Add(5, 7, 0, true);  // skips positions 5 and 6
  EXPECT_EQ(decoder_->Forward(b).code(), StatusCode::kInvalidArgument);
  b.Clear();
  b.Add(5, 5, 0, true);
  b.Add(6, 7, 0, true);  // not consecutive
  EXPECT_EQ(decoder_->Forward(b).code(), StatusCode::kInvalidArgument);
  b.Clear();
  b.Add(5, 0, 3, true);  // sequence id past max_seqs
  EXPECT_EQ(decoder_->Forward(b).code(), StatusCode::kInvalidArgument);
  b.Clear();
  for (int i = 0; i < 33; ++i) b.Add(1, i, 1, false);  // more than max_batch
  EXPECT_EQ(decoder_->Forward(b).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache_->Length(0), 5);
  EXPECT_EQ(cache_->free_blocks(), free_before);

  // Out of KV blocks: 24 blocks of 4 = 96 positions; seq 0 holds 2 blocks.
  b.Clear();
  for (int i = 0; i < 32; ++i) b.Add(1, i, 1, false);
  ASSERT_TRUE(decoder_->Forward(b).ok());  // 8 blocks
  b.Clear();
  for (int i = 0; i < 32; ++i) b.Add(1, 32 + i, 1, false);
  ASSERT_TRUE(decoder_->Forward(b).ok());  // 16 blocks
  b.Clear();
  for (int i = 0; i < 32; ++i) b.Add(1, i, 2, false);  // needs 8, 6 free
  const Status s = decoder_->Forward(b);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(cache_->Length(2), 0);
  EXPECT_EQ(cache_->free_blocks(), 6);
  EXPECT_EQ(cache_->Length(0), 5);
  // The surviving sequence still decodes correctly.
  b.Clear();
  b.Add(7, 5, 0, true);
  ASSERT_TRUE(decoder_->Forward(b).ok());
  ExpectClose(decoder_->logits(0), Alone({1, 2, 3, 4, 5, 7}, 2).back(), "after errors");
}

}  // namespace
}  // namespace uf::model
