// The GPU kernels (src/gpu/shaders) against the CPU kernels of src/kernels, on whatever Vulkan
// device the loader finds first (Mesa's lavapipe in CI). Sizes are tiny so that a CPU driver on 2
// cores runs the whole file in seconds. Without a Vulkan device every test skips, saying so.
//
// Tolerances: the GPU sums in another order than the CPU (a subgroup's lanes, then across them),
// so results differ by rounding: relative to the sum of |terms| of each output, 1e-5 for F32
// products, and 1e-4 where activations are rounded to F16 or quantized to Q8_0 first (a value
// that sits on a rounding boundary may round the other way on one side). Elementwise ops use
// the same formula as the CPU and must agree to 1e-5 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#if UF_HAVE_VULKAN
#include "base/thread_pool.h"
#include "gpu/vk_context.h"
#include "gpu/vk_kernels.h"
#include "kernels/blocks.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#endif

namespace uf::gpu {
namespace {

#if !UF_HAVE_VULKAN
TEST(GpuKernels, NotBuilt) { GTEST_SKIP() << "built without the Vulkan backend"; }
#else

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

class GpuKernelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto ctx = Context::Create(-1);
    if (!ctx.ok()) {
      skip_reason_ = new std::string(ctx.status().ToString());
      return;
    }
    ctx_ = ctx->release();
    auto k = Kernels::Create(ctx_);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    kernels_ = new Kernels(*k);
  }
  static void TearDownTestSuite() {
    delete kernels_;
    delete ctx_;
    kernels_ = nullptr;
    ctx_ = nullptr;
  }
  void SetUp() override {
    if (ctx_ == nullptr) {
      GTEST_SKIP() << "no usable Vulkan device: " << (skip_reason_ ? *skip_reason_ : "");
    }
  }

  Buffer Floats(const std::vector<float>& v) {
    auto b = ctx_->CreateBuffer(v.size() * 4, Memory::kDevice);
    EXPECT_TRUE(b.ok());
    EXPECT_TRUE(ctx_->Upload(*b, 0, v.data(), v.size() * 4).ok());
    return std::move(*b);
  }
  Buffer Empty(uint64_t bytes) { return std::move(*ctx_->CreateBuffer(bytes, Memory::kDevice)); }
  std::vector<float> Read(const Buffer& b, size_t n) {
    std::vector<float> v(n);
    EXPECT_TRUE(ctx_->Download(b, 0, v.data(), n * 4).ok());
    return v;
  }
  Buffer Step(uint32_t token, uint32_t pos) {
    Buffer b = std::move(*ctx_->CreateBuffer(16, Memory::kHost));
    auto* s = static_cast<uint32_t*>(b.mapped());
    s[0] = token;
    s[1] = pos;
    return b;
  }

  static Context* ctx_;
  static Kernels* kernels_;
  static std::string* skip_reason_;
};
Context* GpuKernelsTest::ctx_ = nullptr;
Kernels* GpuKernelsTest::kernels_ = nullptr;
std::string* GpuKernelsTest::skip_reason_ = nullptr;

TEST_F(GpuKernelsTest, DeviceIsListed) {
  auto devices = ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_FALSE(devices->empty());
  EXPECT_GT((*devices)[0].subgroup_size, 0u);
  std::printf("[gpu] %s (%s, Vulkan %s), subgroup %u\n", ctx_->info().name.c_str(),
              ctx_->info().type.c_str(), ctx_->info().api_version.c_str(),
              ctx_->info().subgroup_size);
}

// Each weight type's GEMV against kernels::MatMul on the same weights (rows not a multiple of
// the rows per workgroup, so the tail is covered), and the recorder replayed.
TEST_F(GpuKernelsTest, GemvMatchesCpu) {
  const int64_t rows = 67, cols = 256;
  const std::vector<float> wf = Random(rows * cols, 1, 0.5f), x = Random(cols, 2);
  ThreadPool pool(1);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    SCOPED_TRACE(GgmlTypeName(type));
    const size_t row_bytes = kernels::KernelRowBytes(type, cols);
    std::vector<uint8_t> data(rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      kernels::QuantizeRow(type, wf.data() + r * cols, data.data() + r * row_bytes, cols);
    }
    auto m = kernels::Matrix::Create(type, data.data(), rows, cols);
    ASSERT_TRUE(m.ok());
    std::vector<float> want(rows);
    kernels::MatMul(*m, x.data(), 1, want.data(), &pool);

    auto gm = UploadMatrix(ctx_, *m);
    ASSERT_TRUE(gm.ok()) << gm.status().ToString();
    Buffer xb = Floats(x), xq = Empty(Q8ActivationBytes(cols)), y = Empty(rows * 4);
    Recorder rec(ctx_);
    const bool quantized = type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0;
    if (quantized) kernels_->Quantize(&rec, xb, 0, cols, xq);
    kernels_->Gemv(&rec, *gm, quantized ? xq : xb, 0, y, 0);
    ASSERT_TRUE(rec.Finish().ok());
    for (int rep = 0; rep < 2; ++rep) {  // recorded once, replayed
      ASSERT_TRUE(rec.Run().ok());
      const std::vector<float> got = Read(y, rows);
      const double tol = type == GgmlType::kF32 ? 1e-5 : 1e-4;
      for (int64_t r = 0; r < rows; ++r) {
        double norm = 0.0;
        for (int64_t c = 0; c < cols; ++c) norm += std::fabs(wf[r * cols + c] * x[c]);
        ASSERT_NEAR(got[r], want[r], tol * norm) << "row " << r;
      }
    }
  }
}

// The activation quantizer gives the CPU reference quantizer's blocks.
TEST_F(GpuKernelsTest, QuantizeMatchesCpu) {
  const int64_t cols = 128;
  std::vector<float> x = Random(cols, 3);
  x[40] = 0.0f;
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // an all-zero block: scale 0
  std::vector<kernels::BlockQ8_0> want(cols / 32);
  kernels::QuantizeRow(GgmlType::kQ8_0, x.data(), want.data(), cols);
  Buffer xb = Floats(x), q = Empty(Q8ActivationBytes(cols));
  Recorder rec(ctx_);
  kernels_->Quantize(&rec, xb, 0, cols, q);
  ASSERT_TRUE(rec.Finish().ok());
  ASSERT_TRUE(rec.Run().ok());
  std::vector<uint32_t> got(Q8ActivationBytes(cols) / 4);
  ASSERT_TRUE(ctx_->Download(q, 0, got.data(), got.size() * 4).ok());
  for (int64_t b = 0; b < cols / 32; ++b) {
    float d_want;
    kernels::DequantizeRow(GgmlType::kF16, &want[b].d, &d_want, 1);
    float d_got;
    std::memcpy(&d_got, &got[(cols / 32) * 8 + b], 4);
    EXPECT_EQ(d_got, d_want) << "block " << b;
    EXPECT_EQ(std::memcmp(&got[b * 8], want[b].qs, 32), 0) << "block " << b;
  }
}

TEST_F(GpuKernelsTest, RmsNormAddSwiGluMatchCpu) {
  const int64_t n = 96, rows = 3;
  const std::vector<float> x = Random(rows * n, 4), w = Random(n, 5), g = Random(n, 6),
                           u = Random(n, 7);
  Buffer xb = Floats(x), wb = Floats(w), yb = Empty(rows * n * 4), gb = Floats(g), ub = Floats(u),
         ob = Empty(n * 4), acc = Floats(g);
  Recorder rec(ctx_);
  kernels_->RmsNorm(&rec, xb, 0, wb, yb, 0, rows, n, 1e-5f);
  kernels_->SwiGlu(&rec, gb, ub, ob, n);
  kernels_->Add(&rec, ub, 0, acc, 0, n);
  ASSERT_TRUE(rec.Finish().ok());
  ASSERT_TRUE(rec.Run().ok());
  const std::vector<float> y = Read(yb, rows * n), o = Read(ob, n), a = Read(acc, n);
  std::vector<float> want(rows * n), want_o(n), want_a = g;
  for (int64_t r = 0; r < rows; ++r) {
    kernels::RmsNorm(x.data() + r * n, w.data(), want.data() + r * n, n, 1e-5f);
  }
  kernels::SwiGlu(g.data(), u.data(), want_o.data(), n);
  kernels::AddInPlace(want_a.data(), u.data(), n);
  for (int64_t i = 0; i < rows * n; ++i) {
    EXPECT_NEAR(y[i], want[i], 1e-5 * std::max(1.0f, std::fabs(want[i]))) << i;
  }
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(o[i], want_o[i], 1e-5 * std::max(1.0f, std::fabs(want_o[i]))) << i;
    EXPECT_EQ(a[i], want_a[i]) << i;
  }
}

TEST_F(GpuKernelsTest, RopeMatchesCpu) {
  const int64_t heads = 3, hd = 64, max_pos = 40;
  for (bool neox : {false, true}) {
    kernels::RopeParams rp;
    rp.rope_dim = hd;
    rp.freq_base = 10000.0f;
    rp.neox = neox;
    std::vector<float> cs(max_pos * hd);
    for (int64_t p = 0; p < max_pos; ++p) kernels::RopeAngles(rp, p, cs.data() + p * hd);
    const std::vector<float> x = Random(heads * hd, 8);
    Buffer xb = Floats(x), csb = Floats(cs), step = Step(0, 37);
    Recorder rec(ctx_);
    kernels_->Rope(&rec, xb, 0, csb, step, heads, hd, hd, neox);
    ASSERT_TRUE(rec.Finish().ok());
    ASSERT_TRUE(rec.Run().ok());
    std::vector<float> want = x;
    kernels::ApplyRope(rp, cs.data() + 37 * hd, want.data(), heads, hd);
    const std::vector<float> got = Read(xb, heads * hd);
    for (int64_t i = 0; i < heads * hd; ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  }
}

// K/V stored step by step (the recorder replayed with a new position each time), then attention
// of 4 query heads over 2 KV heads against a double-precision softmax of the f16-rounded cache.
TEST_F(GpuKernelsTest, DecodeAttentionMatchesReference) {
  const int64_t n_head = 4, n_kv = 2, hd = 64, max_ctx = 16, n_pos = 11;
  const uint32_t k_off = 0, v_off = n_kv * max_ctx * hd / 2;
  Buffer cache = Empty(2 * n_kv * max_ctx * hd * 2), kb = Empty(n_kv * hd * 4),
         vb = Empty(n_kv * hd * 4), step = Step(0, 0);
  std::vector<std::vector<float> > ks, vs;
  {
    Recorder rec(ctx_);
    kernels_->KvStore(&rec, kb, vb, cache, step, n_kv, hd, max_ctx, k_off, v_off);
    ASSERT_TRUE(rec.Finish().ok());
    for (int64_t p = 0; p < n_pos; ++p) {
      ks.push_back(Random(n_kv * hd, 100 + p));
      vs.push_back(Random(n_kv * hd, 200 + p));
      ASSERT_TRUE(ctx_->Upload(kb, 0, ks.back().data(), n_kv * hd * 4).ok());
      ASSERT_TRUE(ctx_->Upload(vb, 0, vs.back().data(), n_kv * hd * 4).ok());
      static_cast<uint32_t*>(step.mapped())[1] = p;
      ASSERT_TRUE(rec.Run().ok());
    }
  }
  const std::vector<float> q = Random(n_head * hd, 9);
  Buffer qb = Floats(q), scores = Empty(n_head * max_ctx * 4), out = Empty(n_head * hd * 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Recorder rec(ctx_);
  kernels_->Attention(&rec, qb, cache, scores, out, step, n_head, n_kv, hd, max_ctx, k_off, v_off,
                      scale);
  ASSERT_TRUE(rec.Finish().ok());
  const auto half = [](float v) {
    uint16_t h;
    kernels::F32ToF16(&v, &h, 1);
    float f;
    kernels::DequantizeRow(GgmlType::kF16, &h, &f, 1);
    return static_cast<double>(f);
  };
  for (int64_t last : {n_pos - 1, int64_t{4}}) {  // the same recording at two positions
    static_cast<uint32_t*>(step.mapped())[1] = last;
    ASSERT_TRUE(rec.Run().ok());
    const std::vector<float> got = Read(out, n_head * hd);
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t kvh = h / (n_head / n_kv);
      std::vector<double> s(last + 1);
      double mx = -1e300, sum = 0.0;
      for (int64_t t = 0; t <= last; ++t) {
        double dot = 0.0;
        for (int64_t i = 0; i < hd; ++i) dot += q[h * hd + i] * half(ks[t][kvh * hd + i]);
        s[t] = dot * scale;
        mx = std::max(mx, s[t]);
      }
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double want = 0.0;
        for (int64_t t = 0; t <= last; ++t) want += s[t] * half(vs[t][kvh * hd + i]);
        want /= sum;
        EXPECT_NEAR(got[h * hd + i], want, 1e-4) << "pos " << last << " head " << h << " dim " << i;
      }
    }
  }
}

// The embedding row of each table type is the CPU dequantization of that row (Q6_K in the same
// float operation order, so exactly).
TEST_F(GpuKernelsTest, EmbedMatchesDequantize) {
  const int64_t rows = 5, cols = 512;
  const std::vector<float> wf = Random(rows * cols, 10);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    SCOPED_TRACE(GgmlTypeName(type));
    const size_t row_bytes = kernels::KernelRowBytes(type, cols);
    std::vector<uint8_t> data(rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      kernels::QuantizeRow(type, wf.data() + r * cols, data.data() + r * row_bytes, cols);
    }
    auto m = kernels::Matrix::Create(type, data.data(), rows, cols);
    ASSERT_TRUE(m.ok());
    auto gm = UploadMatrix(ctx_, *m);
    ASSERT_TRUE(gm.ok());
    Buffer x = Empty(cols * 4), step = Step(3, 0);
    Recorder rec(ctx_);
    kernels_->Embed(&rec, *gm, x, step);
    ASSERT_TRUE(rec.Finish().ok());
    ASSERT_TRUE(rec.Run().ok());
    std::vector<float> want(cols);
    kernels::DequantizeRow(type, data.data() + 3 * row_bytes, want.data(), cols);
    EXPECT_EQ(Read(x, cols), want);
  }
}

// BF16 and Q4_K have no kernel yet: they are stored as F16 and multiplied with F16 activations;
// Q6_K has its kernel but takes f32 activations. The CPU uses BF16 / Q8_K activations; the
// products agree to the coarser of the two activation roundings (Q8_K: 1/127 of a block's
// largest value).
TEST_F(GpuKernelsTest, ConvertedTypesMatchCpu) {
  const int64_t rows = 19, cols = 512;
  const std::vector<float> wf = Random(rows * cols, 11, 0.5f), x = Random(cols, 12);
  ThreadPool pool(1);
  for (GgmlType type : {GgmlType::kBF16, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    SCOPED_TRACE(GgmlTypeName(type));
    const GgmlType stored = type == GgmlType::kQ6_K ? GgmlType::kQ6_K : GgmlType::kF16;
    const size_t row_bytes = kernels::KernelRowBytes(type, cols);
    std::vector<uint8_t> data(rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      kernels::QuantizeRow(type, wf.data() + r * cols, data.data() + r * row_bytes, cols);
    }
    auto m = kernels::Matrix::Create(type, data.data(), rows, cols);
    ASSERT_TRUE(m.ok());
    std::vector<float> want(rows);
    kernels::MatMul(*m, x.data(), 1, want.data(), &pool);
    auto gm = UploadMatrix(ctx_, *m);
    ASSERT_TRUE(gm.ok()) << gm.status().ToString();
    EXPECT_EQ(gm->type, stored);
    EXPECT_EQ(gm->converted_from, type);
    Buffer xb = Floats(x), y = Empty(rows * 4);
    Recorder rec(ctx_);
    kernels_->Gemv(&rec, *gm, xb, 0, y, 0);
    ASSERT_TRUE(rec.Finish().ok());
    ASSERT_TRUE(rec.Run().ok());
    const std::vector<float> got = Read(y, rows);
    for (int64_t r = 0; r < rows; ++r) {
      double norm = 0.0;
      for (int64_t c = 0; c < cols; ++c) norm += std::fabs(wf[r * cols + c] * x[c]);
      // norm / sqrt(cols) is the size of a typical output (7 here); Q8_K activations err by
      // ~1% of it (measured up to 1.2%), a wrong layout or dequantization by all of it.
      ASSERT_NEAR(got[r], want[r], 3e-2 * norm / std::sqrt(static_cast<double>(cols))) << r;
    }
  }
}

#endif  // UF_HAVE_VULKAN

}  // namespace
}  // namespace uf::gpu
