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
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#if UF_HAVE_VULKAN
#include "base/thread_pool.h"
#include "engine/seq_sampler.h"
#include "gpu/vk_context.h"
#include "gpu/vk_kernels.h"
#include "kernels/blocks.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "sampling/sampler.h"
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
    auto k = Kernels::Create(ctx_, GemvVariant::kBasic);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    kernels_ = new Kernels(*k);
    auto w = Kernels::Create(ctx_, GemvVariant::kWide);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    wide_ = new Kernels(*w);
  }
  static void TearDownTestSuite() {
    delete kernels_;
    delete wide_;
    wide_ = nullptr;
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
  // The per-token inputs of a batch: {token, position, cache row, sequence} each.
  Buffer Tok(const std::vector<std::array<uint32_t, 4> >& rows) {
    Buffer b = std::move(*ctx_->CreateBuffer(rows.size() * 16, Memory::kHost));
    std::memcpy(b.mapped(), rows.data(), rows.size() * 16);
    return b;
  }
  // Weights of `type` quantized from wf, as a kernels::Matrix over data.
  static kernels::Matrix Quantized(GgmlType type, const std::vector<float>& wf, int64_t rows,
                                   int64_t cols, std::vector<uint8_t>* data) {
    const size_t row_bytes = kernels::KernelRowBytes(type, cols);
    data->resize(rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      kernels::QuantizeRow(type, wf.data() + r * cols, data->data() + r * row_bytes, cols);
    }
    return *kernels::Matrix::Create(type, data->data(), rows, cols);
  }

  // The activation a GEMM of `type` reads: values of x quantized into q (Q8_0 or Q8_K) as the
  // decoder does; false (nothing recorded) when the type takes f32 values.
  static bool QuantizeFor(Recorder* r, GgmlType type, const Buffer& x, int64_t values,
                          const Buffer& q) {
    if (TakesQ8KActivation(type)) {
      kernels_->QuantizeK(r, x, 0, values, q);
      return true;
    }
    if (TakesQ8Activation(type)) {
      kernels_->Quantize(r, x, 0, values, q);
      return true;
    }
    return false;
  }
  static uint64_t ActBytes(int64_t values) {
    return std::max(Q8ActivationBytes(values), Q8KActivationBytes(values));
  }

  // Paged attention over an f16 or Q8_0 cache (PagedAttentionMatchesReference).
  std::vector<float> PagedAttention(bool q8, int64_t chunk);

  // The GEMV variants that differ for `type`: the basic kernels, and the wide ones (GemvVariant)
  // for the types that have them (F16, Q8_0, Q4_0).
  static std::vector<const Kernels*> Variants(GgmlType type) {
    if (type == GgmlType::kF16 || type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0) {
      return {kernels_, wide_};
    }
    return {kernels_};
  }
  static const char* VariantName(const Kernels* k) { return k == wide_ ? "wide" : "basic"; }

  static Context* ctx_;
  static Kernels* kernels_;
  static Kernels* wide_;  // GemvVariant::kWide
  static std::string* skip_reason_;
};
Context* GpuKernelsTest::ctx_ = nullptr;
Kernels* GpuKernelsTest::kernels_ = nullptr;
Kernels* GpuKernelsTest::wide_ = nullptr;
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

constexpr GgmlType kAllTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,
                                  GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K,
                                  GgmlType::kQ6_K, GgmlType::kMXFP4};

// Each weight type's GEMM over 3 tokens against kernels::MatMul on the same weights (rows not a
// multiple of the rows per workgroup, so the tail is covered), and the recorder replayed. F32,
// F16, BF16, Q8_0 and Q4_0 take the CPU's activations (f32, rounded to f16 / bf16, quantized to
// Q8_0) and agree to rounding. Q4_K and Q6_K take Q8_K activations (quantize_q8_k) and form each
// block's sum as the CPU's scalar tier does (kernels::DotReference), adding the blocks in the
// same order: bit-identical to it, over 2 and 3 blocks a row. F16, Q8_0 and Q4_0 run with both
// GEMV variants (GemvVariant: basic and wide), to the same tolerances.
TEST_F(GpuKernelsTest, GemmMatchesCpu) {
  const int64_t rows = 67, n = 3;
  ThreadPool pool(1);
  for (int64_t cols : {int64_t{512}, int64_t{768}}) {
    const std::vector<float> wf = Random(rows * cols, 1, 0.5f), x = Random(n * cols, 2);
    for (GgmlType type : kAllTypes) {
      SCOPED_TRACE(std::string(GgmlTypeName(type)) + " cols " + std::to_string(cols));
      std::vector<uint8_t> data;
      const kernels::Matrix m = Quantized(type, wf, rows, cols, &data);
      std::vector<float> want(n * rows);
      kernels::MatMul(m, x.data(), n, want.data(), &pool);
      const bool k_quant = TakesQ8KActivation(type);
      std::vector<float> scalar(n * rows);  // the CPU's scalar tier, K-quants only
      if (k_quant) {
        std::vector<kernels::BlockQ8_K> xk(n * cols / 256);
        kernels::QuantizeRow(GgmlType::kQ8_K, x.data(), xk.data(), n * cols);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            scalar[t * rows + r] = kernels::DotReference(type, data.data() + r * m.row_bytes(),
                                                         xk.data() + t * cols / 256, cols);
          }
        }
      }

      auto gm = UploadMatrix(ctx_, m);
      ASSERT_TRUE(gm.ok()) << gm.status().ToString();
      EXPECT_EQ(gm->type, type);
      for (const Kernels* kern : Variants(type)) {
        SCOPED_TRACE(VariantName(kern));
        Buffer xb = Floats(x), xq = Empty(ActBytes(n * cols)), y = Empty(n * rows * 4);
        Recorder rec(ctx_);
        const bool q8 = QuantizeFor(&rec, type, xb, n * cols, xq);
        kern->Gemm(&rec, *gm, q8 ? xq : xb, n, y);
        ASSERT_TRUE(rec.Finish().ok());
        for (int rep = 0; rep < 2; ++rep) {  // recorded once, replayed
          ASSERT_TRUE(rec.Run().ok());
          const std::vector<float> got = Read(y, n * rows);
          if (k_quant) {
            for (int64_t i = 0; i < n * rows; ++i) {
              ASSERT_EQ(got[i], scalar[i]) << "token " << i / rows << " row " << i % rows;
            }
          }
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
              double norm = 0.0;
              for (int64_t c = 0; c < cols; ++c) {
                norm += std::fabs(wf[r * cols + c] * x[t * cols + c]);
              }
              const double tol = type == GgmlType::kF32 ? 1e-5 * norm : 1e-4 * norm;
              ASSERT_NEAR(got[t * rows + r], want[t * rows + r], tol)
                  << "token " << t << " row " << r;
            }
          }
        }
      }
    }
  }
}

// The property speculation rests on: a token's row of an n-token GEMM is bit-identical to the
// same token alone, for every weight type and for batch sizes around the token tile (8); for
// F16, Q8_0 and Q4_0 under both GEMV variants (the wide one-token kernels against the batched
// kernels of the same variant).
TEST_F(GpuKernelsTest, GemmRowsDoNotDependOnBatchSize) {
  const int64_t rows = 37, cols = 256, max_n = 17;
  const std::vector<float> wf = Random(rows * cols, 21, 0.5f), x = Random(max_n * cols, 22);
  for (GgmlType type : kAllTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    std::vector<uint8_t> data;
    auto gm = UploadMatrix(ctx_, Quantized(type, wf, rows, cols, &data));
    ASSERT_TRUE(gm.ok());
    for (const Kernels* kern : Variants(type)) {
      SCOPED_TRACE(VariantName(kern));
      Buffer xb = Floats(x), xq = Empty(ActBytes(max_n * cols)), y = Empty(max_n * rows * 4);
      std::vector<std::vector<float> > by_n;
      for (int64_t n : {int64_t{1}, int64_t{8}, int64_t{9}, max_n}) {
        Recorder rec(ctx_);
        const bool q8 = QuantizeFor(&rec, type, xb, n * cols, xq);
        kern->Gemm(&rec, *gm, q8 ? xq : xb, n, y);
        ASSERT_TRUE(rec.Finish().ok());
        ASSERT_TRUE(rec.Run().ok());
        by_n.push_back(Read(y, n * rows));
      }
      for (size_t i = 1; i < by_n.size(); ++i) {
        // Row 0 of every batch is token 0; the larger batches share their first 8 and 9 tokens.
        EXPECT_EQ(std::memcmp(by_n[i].data(), by_n[0].data(), rows * 4), 0) << "batch " << i;
        const size_t common = std::min(by_n[i].size(), by_n[i - 1].size());
        EXPECT_EQ(std::memcmp(by_n[i].data(), by_n[i - 1].data(), common * 4), 0) << "batch " << i;
      }
    }
  }
}

// The wide GEMV (GemvVariant::kWide) on one token over odd shapes: row counts that leave a
// partial workgroup, rows shorter than a subgroup's lanes and rows long enough for the unrolled
// loop (4 x subgroup-size chunks or blocks) plus a tail. Q8_0 and Q4_0 give the basic kernel's
// bits; F16 sums in another order and agrees with the CPU to GemmMatchesCpu's F16 bound (1e-4 of
// the sum of |terms|); an F16 matrix whose columns are not a multiple of 8 runs the basic kernel
// (the same bits).
TEST_F(GpuKernelsTest, WideGemvMatchesBasicAndCpu) {
  ThreadPool pool(1);
  for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{67}}) {
    for (int64_t cols : {int64_t{32}, int64_t{1056}, int64_t{4128}, int64_t{1030}}) {
      const std::vector<float> wf = Random(rows * cols, 50 + static_cast<uint32_t>(cols), 0.5f);
      const std::vector<float> x = Random(cols, 51);
      for (GgmlType type : {GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_0}) {
        if (type != GgmlType::kF16 && cols % 32 != 0) continue;
        SCOPED_TRACE(std::string(GgmlTypeName(type)) + " rows " + std::to_string(rows) + " cols " +
                     std::to_string(cols));
        std::vector<uint8_t> data;
        const kernels::Matrix m = Quantized(type, wf, rows, cols, &data);
        std::vector<float> want(rows);
        kernels::MatMul(m, x.data(), 1, want.data(), &pool);
        auto gm = UploadMatrix(ctx_, m);
        ASSERT_TRUE(gm.ok()) << gm.status().ToString();
        std::vector<float> got[2];
        for (int v = 0; v < 2; ++v) {
          const Kernels* kern = v == 0 ? kernels_ : wide_;
          Buffer xb = Floats(x), xq = Empty(ActBytes(cols)), y = Empty(rows * 4);
          Recorder rec(ctx_);
          const bool q8 = QuantizeFor(&rec, type, xb, cols, xq);
          kern->Gemm(&rec, *gm, q8 ? xq : xb, 1, y);
          ASSERT_TRUE(rec.Finish().ok());
          ASSERT_TRUE(rec.Run().ok());
          got[v] = Read(y, rows);
        }
        if (type != GgmlType::kF16 || cols % 8 != 0) {
          EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), rows * 4), 0);
        }
        for (int64_t r = 0; r < rows; ++r) {
          double norm = 0.0;
          for (int64_t c = 0; c < cols; ++c) norm += std::fabs(wf[r * cols + c] * x[c]);
          ASSERT_NEAR(got[1][r], want[r], 1e-4 * norm) << "row " << r;
        }
      }
    }
  }
}

// The expert GEMM (gemmx_*) over a stacked upload of 3 experts: each (token, rank) slot's row
// is bit for bit the one-token GEMM (gemm1_*) of its expert's matrix alone on its token's
// activation, for every weight type; gate/up (x_div = k: the token's row) and down (x_div = 1:
// the slot's own row). The grouped form (GroupSlots, gemmg_*: 22 slots, 6-9 per expert, so
// full and partial tiles of 8) gives the same bits. F16, Q8_0 and Q4_0 under both GEMV variants.
TEST_F(GpuKernelsTest, ExpertGemmEqualsEachExpertsGemm) {
  const int64_t rows = 37, cols = 256, n_exp = 3, n = 11, k = 2;
  std::vector<uint32_t> ids(n * k);  // [n][k], the two of a token different
  for (int64_t t = 0; t < n; ++t) {
    ids[t * k] = static_cast<uint32_t>((5 * t + 1) % n_exp);
    ids[t * k + 1] = static_cast<uint32_t>((ids[t * k] + 1 + t % 2) % n_exp);
  }
  const std::vector<float> x = Random(n * k * cols, 32);
  for (GgmlType type : kAllTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    std::vector<std::vector<uint8_t> > data(n_exp);
    std::vector<kernels::Matrix> experts;
    for (int64_t e = 0; e < n_exp; ++e) {
      experts.push_back(Quantized(type, Random(rows * cols, 40 + e, 0.5f), rows, cols, &data[e]));
    }
    auto stacked = UploadExperts(ctx_, experts);
    ASSERT_TRUE(stacked.ok()) << stacked.status().ToString();
    EXPECT_EQ(stacked->rows, rows);
    EXPECT_EQ(stacked->n_experts, n_exp);
    const bool q8 = TakesQ8Activation(type) || TakesQ8KActivation(type);
    Buffer idb = Empty(ids.size() * 4);
    ASSERT_TRUE(ctx_->Upload(idb, 0, ids.data(), ids.size() * 4).ok());
    for (const Kernels* kern : Variants(type))
      for (int64_t x_div : {k, int64_t{1}}) {
        SCOPED_TRACE(VariantName(kern));
        const int64_t n_x = n * k / x_div;
        Buffer xb = Floats(std::vector<float>(x.begin(), x.begin() + n_x * cols));
        Buffer xq = Empty(ActBytes(n_x * cols)), y = Empty(n * k * rows * 4);
        Recorder rec(ctx_);
        QuantizeFor(&rec, type, xb, n_x * cols, xq);
        kern->GemmExperts(&rec, *stacked, q8 ? xq : xb, idb, n * k, x_div, y);
        ASSERT_TRUE(rec.Finish().ok());
        ASSERT_TRUE(rec.Run().ok());
        const std::vector<float> got = Read(y, n * k * rows);
        Buffer order = Empty(n * k * 4), tiles = Empty(Kernels::MaxExpertTiles(n * k, n_exp) * 12);
        Buffer yg = Empty(n * k * rows * 4);
        Recorder rg(ctx_);
        QuantizeFor(&rg, type, xb, n_x * cols, xq);
        kern->GroupSlots(&rg, idb, order, tiles, n * k, n_exp);
        kern->GemmExpertsGrouped(&rg, *stacked, q8 ? xq : xb, tiles, order, n * k, x_div, yg);
        ASSERT_TRUE(rg.Finish().ok());
        ASSERT_TRUE(rg.Run().ok());
        EXPECT_EQ(std::memcmp(Read(yg, n * k * rows).data(), got.data(), got.size() * 4), 0)
            << "grouped slots differ, x_div " << x_div;
        for (int64_t slot = 0; slot < n * k; ++slot) {
          auto one = UploadMatrix(ctx_, experts[ids[slot]]);
          ASSERT_TRUE(one.ok());
          const int64_t row = slot / x_div;
          Buffer x1 =
              Floats(std::vector<float>(x.begin() + row * cols, x.begin() + (row + 1) * cols));
          Buffer x1q = Empty(ActBytes(cols)), y1 = Empty(rows * 4);
          Recorder r1(ctx_);
          QuantizeFor(&r1, type, x1, cols, x1q);
          kern->Gemm(&r1, *one, q8 ? x1q : x1, 1, y1);
          ASSERT_TRUE(r1.Finish().ok());
          ASSERT_TRUE(r1.Run().ok());
          const std::vector<float> want = Read(y1, rows);
          EXPECT_EQ(std::memcmp(got.data() + slot * rows, want.data(), rows * 4), 0)
              << "slot " << slot << " x_div " << x_div;
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

// The Q8_K quantizer (quantize_q8_k) gives kernels::QuantizeQ8_K's values, d and sub-block sums
// bit for bit: a block whose largest magnitude appears with both signs (the first one sets the
// sign), an all-zero block, a block of one value, and values exactly at half-way points.
TEST_F(GpuKernelsTest, QuantizeQ8KMatchesCpu) {
  const int64_t cols = 1024;
  std::vector<float> x = Random(cols, 4);
  x[10] = -5.0f;
  x[20] = 5.0f;  // the same magnitude later: the block's max stays -5
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);
  std::fill(x.begin() + 512, x.begin() + 768, 0.0f);
  x[600] = 0.25f;
  // The last block: max -127/64, so iscale is 64 exactly and (k + 0.5) / 64 lands half-way.
  for (int i = 1; i < 256; ++i) x[768 + i] = ((i % 64) - 32 + 0.5f) / 64.0f;
  x[768] = -127.0f / 64.0f;
  std::vector<kernels::BlockQ8_K> want(cols / 256);
  kernels::QuantizeRow(GgmlType::kQ8_K, x.data(), want.data(), cols);
  Buffer xb = Floats(x), q = Empty(Q8KActivationBytes(cols));
  Recorder rec(ctx_);
  kernels_->QuantizeK(&rec, xb, 0, cols, q);
  ASSERT_TRUE(rec.Finish().ok());
  ASSERT_TRUE(rec.Run().ok());
  std::vector<uint32_t> got(Q8KActivationBytes(cols) / 4);
  ASSERT_TRUE(ctx_->Download(q, 0, got.data(), got.size() * 4).ok());
  for (int64_t b = 0; b < cols / 256; ++b) {
    float d_got;
    std::memcpy(&d_got, &got[(cols / 256) * 72 + b], 4);
    EXPECT_EQ(d_got, want[b].d) << "block " << b;
    EXPECT_EQ(std::memcmp(&got[b * 72], want[b].qs, 256), 0) << "block " << b;
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(static_cast<int32_t>(got[b * 72 + 64 + j]),
                want[b].bsums[2 * j] + want[b].bsums[2 * j + 1])
          << "block " << b << " sub-block " << j;
    }
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
    // Two tokens at positions 37 and 5.
    const std::vector<float> x = Random(2 * heads * hd, 8);
    Buffer xb = Floats(x), csb = Floats(cs), tok = Tok({{0, 37, 0, 0}, {0, 5, 0, 0}});
    Recorder rec(ctx_);
    kernels_->Rope(&rec, xb, csb, tok, 2, heads, hd, hd, neox);
    ASSERT_TRUE(rec.Finish().ok());
    ASSERT_TRUE(rec.Run().ok());
    std::vector<float> want = x;
    kernels::ApplyRope(rp, cs.data() + 37 * hd, want.data(), heads, hd);
    kernels::ApplyRope(rp, cs.data() + 5 * hd, want.data() + heads * hd, heads, hd);
    const std::vector<float> got = Read(xb, 2 * heads * hd);
    for (int64_t i = 0; i < 2 * heads * hd; ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  }
}

// K/V of 11 positions stored into a paged cache (blocks of 4 in a scrambled block table, two
// batches: 7 tokens, then 4), then attention of 4 query heads over 2 KV heads for a batch of
// queries at several positions, against a double-precision softmax of the cache as the CPU
// would round it (F16, or Q8_0 blocks: the device quantizes K/V as the CPU cache does).
// Unsplit and split over positions (chunks of 4 positions: 1 to 3 chunks per query), against
// the reference; the query at position 0 (one chunk) gives the unsplit kernel's bits.
TEST_F(GpuKernelsTest, PagedAttentionMatchesReference) {
  for (bool q8 : {false, true}) {
    SCOPED_TRACE(q8 ? "q8_0 cache" : "f16 cache");
    const std::vector<float> whole = PagedAttention(q8, 0), split = PagedAttention(q8, 4);
    const int64_t n_head = 4, hd = 64, t = 2;  // the query at position 0
    EXPECT_EQ(std::memcmp(whole.data() + t * n_head * hd, split.data() + t * n_head * hd,
                          n_head * hd * 4),
              0);
  }
}

std::vector<float> GpuKernelsTest::PagedAttention(bool q8, int64_t chunk) {
  const int64_t n_head = 4, n_kv = 2, hd = 64, bs = 4, n_blocks = 5, n_pos = 11;
  const int64_t n_rows = n_blocks * bs, max_blocks = 3, max_len = max_blocks * bs;
  const std::vector<int32_t> table = {3, 0, 4};  // sequence 0's blocks
  const auto row_of = [&](uint32_t pos) { return uint32_t(table[pos / bs] * bs + pos % bs); };
  const int64_t row_words = q8 ? hd / 32 * 9 : hd / 2;
  const uint32_t k_off = 0, v_off = n_kv * n_rows * row_words;
  AttentionShape as;
  as.n_head = n_head;
  as.n_head_kv = n_kv;
  as.head_dim = hd;
  as.n_rows = n_rows;
  as.k_off = k_off;
  as.v_off = v_off;
  as.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  as.block_size = bs;
  as.max_blocks = max_blocks;
  as.max_len = max_len;
  as.q8 = q8;
  as.chunk = chunk;
  Buffer cache = Empty(2 * n_kv * n_rows * row_words * 4), kb = Empty(n_pos * n_kv * hd * 4),
         vb = Empty(n_pos * n_kv * hd * 4);
  std::vector<float> ks = Random(n_pos * n_kv * hd, 100), vs = Random(n_pos * n_kv * hd, 200);
  for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 7}, {7, 4}}) {
    std::vector<std::array<uint32_t, 4> > rows;
    for (int64_t p = first; p < first + count; ++p) rows.push_back({0, uint32_t(p), row_of(p), 0});
    Buffer tok = Tok(rows);
    EXPECT_TRUE(ctx_->Upload(kb, 0, ks.data() + first * n_kv * hd, count * n_kv * hd * 4).ok());
    EXPECT_TRUE(ctx_->Upload(vb, 0, vs.data() + first * n_kv * hd, count * n_kv * hd * 4).ok());
    Recorder rec(ctx_);
    kernels_->KvStore(&rec, kb, vb, cache, tok, count, as);
    EXPECT_TRUE(rec.Finish().ok());
    EXPECT_TRUE(rec.Run().ok());
  }
  const std::vector<uint32_t> positions = {10, 4, 0, 7};
  std::vector<std::array<uint32_t, 4> > rows;
  for (uint32_t p : positions) rows.push_back({0, p, row_of(p), 0});
  Buffer tok = Tok(rows);
  Buffer bt = std::move(*ctx_->CreateBuffer(max_blocks * 4, Memory::kHost));
  std::memcpy(bt.mapped(), table.data(), max_blocks * 4);
  const int64_t nq = static_cast<int64_t>(positions.size());
  const std::vector<float> q = Random(nq * n_head * hd, 9);
  Buffer qb = Floats(q), scores = Empty(nq * n_head * max_len * 4),
         out = Empty(nq * n_head * hd * 4);
  Buffer part = Empty(nq * n_head * as.part_floats() * 4);
  Recorder rec(ctx_);
  kernels_->Attention(&rec, qb, cache, scores, out, tok, bt, nq, as, &part);
  EXPECT_TRUE(rec.Finish().ok());
  EXPECT_TRUE(rec.Run().ok());
  // The cache's rounding of every head row, by the CPU's own conversion (F16, or Q8_0 blocks).
  const auto stored = [&](std::vector<float> x) {
    const GgmlType type = q8 ? GgmlType::kQ8_0 : GgmlType::kF16;
    std::vector<uint8_t> row(kernels::KernelRowBytes(type, hd));
    for (size_t r = 0; r < x.size(); r += hd) {
      kernels::QuantizeRow(type, x.data() + r, row.data(), hd);
      kernels::DequantizeRow(type, row.data(), x.data() + r, hd);
    }
    return x;
  };
  const std::vector<float> ks_c = stored(ks), vs_c = stored(vs);
  const std::vector<float> got = Read(out, nq * n_head * hd);
  for (int64_t t = 0; t < nq; ++t) {
    const int64_t last = positions[t];
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t kvh = h / (n_head / n_kv);
      const float* qh = q.data() + (t * n_head + h) * hd;
      std::vector<double> sc(last + 1);
      double mx = -1e300, sum = 0.0;
      for (int64_t p = 0; p <= last; ++p) {
        double dot = 0.0;
        for (int64_t i = 0; i < hd; ++i) dot += qh[i] * ks_c[(p * n_kv + kvh) * hd + i];
        sc[p] = dot * as.scale;
        mx = std::max(mx, sc[p]);
      }
      for (double& v : sc) sum += (v = std::exp(v - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double want = 0.0;
        for (int64_t p = 0; p <= last; ++p) want += sc[p] * vs_c[(p * n_kv + kvh) * hd + i];
        want /= sum;
        EXPECT_NEAR(got[(t * n_head + h) * hd + i], want, 1e-4)
            << "pos " << last << " head " << h << " dim " << i;
      }
    }
  }
  return got;
}

// The embedding rows of each table type are the CPU dequantization of those rows (exactly, but
// for Q4_K, where the shader may fuse d * q - m into one rounding).
TEST_F(GpuKernelsTest, EmbedMatchesDequantize) {
  const int64_t rows = 5, cols = 512;
  const std::vector<float> wf = Random(rows * cols, 10);
  for (GgmlType type : kAllTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    std::vector<uint8_t> data;
    const kernels::Matrix m = Quantized(type, wf, rows, cols, &data);
    auto gm = UploadMatrix(ctx_, m);
    ASSERT_TRUE(gm.ok());
    Buffer x = Empty(2 * cols * 4), tok = Tok({{3, 0, 0, 0}, {1, 1, 0, 0}});
    Recorder rec(ctx_);
    kernels_->Embed(&rec, *gm, x, tok, 2);
    ASSERT_TRUE(rec.Finish().ok());
    ASSERT_TRUE(rec.Run().ok());
    std::vector<float> want(2 * cols);
    kernels::DequantizeRow(type, data.data() + 3 * m.row_bytes(), want.data(), cols);
    kernels::DequantizeRow(type, data.data() + 1 * m.row_bytes(), want.data() + cols, cols);
    const std::vector<float> got = Read(x, 2 * cols);
    for (int64_t i = 0; i < 2 * cols; ++i) {
      if (type == GgmlType::kQ4_K) {
        ASSERT_NEAR(got[i], want[i], 1e-6 * std::max(1.0f, std::fabs(want[i]))) << i;
      } else {
        ASSERT_EQ(got[i], want[i]) << i;
      }
    }
  }
}

// Gather picks rows in the order given.
TEST_F(GpuKernelsTest, GatherPicksRows) {
  const int64_t cols = 96;
  const std::vector<float> x = Random(4 * cols, 30);
  Buffer xb = Floats(x), y = Empty(2 * cols * 4);
  Buffer idx = std::move(*ctx_->CreateBuffer(8, Memory::kHost));
  const uint32_t pick[2] = {3, 1};
  std::memcpy(idx.mapped(), pick, 8);
  Recorder rec(ctx_);
  kernels_->Gather(&rec, xb, y, idx, cols, 2);
  ASSERT_TRUE(rec.Finish().ok());
  ASSERT_TRUE(rec.Run().ok());
  const std::vector<float> got = Read(y, 2 * cols);
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + cols, x.begin() + 3 * cols));
  EXPECT_TRUE(std::equal(got.begin() + cols, got.end(), x.begin() + cols));
}

// The device arg-max picks what sampling::ArgMax picks: the first of equal maxima, never a NaN,
// 0 for a row of -inf.
TEST_F(GpuKernelsTest, ArgMaxMatchesSampler) {
  const int64_t n_vocab = 1000, rows = 5;
  std::vector<float> l = Random(rows * n_vocab, 40);
  l[0 * n_vocab + 700] = 9.0f;  // row 0: a tie, the first wins
  l[0 * n_vocab + 300] = 9.0f;
  l[1 * n_vocab + 999] = 7.0f;  // row 1: the last value, a NaN ahead of it
  l[1 * n_vocab + 5] = std::nanf("");
  std::fill(l.begin() + 2 * n_vocab, l.begin() + 3 * n_vocab, -INFINITY);  // row 2
  l[3 * n_vocab + 0] = 8.0f;                                               // row 3: the first value
  Buffer lb = Floats(l);
  Buffer out = std::move(*ctx_->CreateBuffer(rows * 4, Memory::kHost));
  Recorder rec(ctx_);
  kernels_->ArgMax(&rec, lb, out, n_vocab, rows);
  ASSERT_TRUE(rec.Finish().ok());
  ASSERT_TRUE(rec.Run().ok());
  const auto* got = static_cast<const uint32_t*>(out.mapped());
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(static_cast<int32_t>(got[r]),
              sampling::ArgMax(l.data() + r * n_vocab, static_cast<int32_t>(n_vocab)))
        << "row " << r;
  }
  EXPECT_EQ(got[0], 300u);
  EXPECT_EQ(got[1], 999u);
  EXPECT_EQ(got[2], 0u);
  EXPECT_EQ(got[3], 0u);
}

// The sampler's order of a row's tokens: higher logit, then lower id; NaN ranks as -inf.
std::vector<int32_t> BestFirst(const float* l, int64_t n) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(i);
  const auto v = [&](int32_t i) { return std::isnan(l[i]) ? -INFINITY : l[i]; };
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return v(a) > v(b) || (v(a) == v(b) && a < b); });
  return ids;
}

// The device's best tokens of each row are the sampler's top-k set in its order (ties by id at
// and across the cut, NaN as -inf, -0 tied with +0, a row shorter than k padded), with the raw
// logits, the max and the log-sum-exp; and a sampler given only them draws, seed for seed, the
// token it draws from the whole row (Sampler::SampleTop against Sample).
TEST_F(GpuKernelsTest, TopKMatchesSamplerAndSamplesTheSameTokens) {
  const int64_t n_vocab = 3000, rows = 6, k = Kernels::kMaxTopK;
  std::vector<float> l = Random(rows * n_vocab, 50, 2.0f);
  float* r1 = l.data() + 1 * n_vocab;  // quarter steps: ties everywhere, across the cut too
  for (int64_t i = 0; i < n_vocab; ++i) r1[i] = std::round(r1[i] * 4.0f) / 4.0f;
  float* r2 = l.data() + 2 * n_vocab;  // all equal but a NaN and signed zeros below
  std::fill(r2, r2 + n_vocab, 1.0f);
  r2[7] = std::nanf("");
  float* r3 = l.data() + 3 * n_vocab;  // -inf but for 10 values and a NaN: fewer than k finite
  std::fill(r3, r3 + n_vocab, -INFINITY);
  for (int i = 0; i < 10; ++i) r3[i * 271 + 5] = static_cast<float>(i % 4);
  r3[100] = std::nanf("");
  float* r4 = l.data() + 4 * n_vocab;  // all -inf
  std::fill(r4, r4 + n_vocab, -INFINITY);
  float* r5 = l.data() + 5 * n_vocab;  // the best are +0 and -0, interleaved
  for (int64_t i = 0; i < n_vocab; ++i) r5[i] = -std::fabs(r5[i]) - 0.5f;
  for (int i = 0; i < 100; ++i) r5[i * 29] = i % 2 == 0 ? 0.0f : -0.0f;
  Buffer lb = Floats(l);
  Buffer out = std::move(*ctx_->CreateBuffer(rows * (2 * k + 2) * 4, Memory::kHost));
  Recorder rec(ctx_);
  kernels_->TopK(&rec, lb, out, n_vocab, rows, k);
  ASSERT_TRUE(rec.Finish().ok());
  ASSERT_TRUE(rec.Run().ok());
  const auto* w = static_cast<const uint32_t*>(out.mapped());
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = l.data() + r * n_vocab;
    const uint32_t* o = w + r * (2 * k + 2);
    const auto* ids = reinterpret_cast<const int32_t*>(o);
    const auto* vals = reinterpret_cast<const float*>(o + k);
    const std::vector<int32_t> want = BestFirst(row, n_vocab);
    for (int64_t i = 0; i < k; ++i) {
      ASSERT_EQ(ids[i], want[i]) << "row " << r << " rank " << i;
      ASSERT_EQ(std::memcmp(&vals[i], &row[want[i]], 4), 0) << "row " << r << " rank " << i;
    }
    float max, lse;
    std::memcpy(&max, o + 2 * k, 4);
    std::memcpy(&lse, o + 2 * k + 1, 4);
    const float want_max = std::isnan(row[want[0]]) ? -INFINITY : row[want[0]];
    EXPECT_EQ(max, want_max) << "row " << r;
    if (want_max == -INFINITY) {
      EXPECT_EQ(lse, -INFINITY) << "row " << r;
    } else {
      double z = 0.0;
      for (int64_t i = 0; i < n_vocab; ++i) {
        if (row[i] > -INFINITY) z += std::exp(static_cast<double>(row[i]) - want_max);
      }
      EXPECT_NEAR(lse, want_max + std::log(z), 1e-4) << "row " << r;
    }
    // Seed for seed, the same tokens from the best k as from the whole row.
    std::vector<sampling::SamplingParams> settings(6);
    settings[0].temperature = 0.0f;
    settings[1].top_k = 1;
    settings[2].top_k = 5, settings[2].top_p = 1.0f, settings[2].min_p = 0.0f;
    settings[2].temperature = 0.7f;
    settings[3].top_k = 40, settings[3].top_p = 0.9f, settings[3].min_p = 0.05f;
    settings[3].temperature = 1.3f;
    settings[4].top_k = 64, settings[4].top_p = 0.5f, settings[4].min_p = 0.0f;
    settings[5].top_k = 64, settings[5].top_p = 1.0f, settings[5].min_p = 0.0f;
    settings[5].temperature = 5.0f;
    for (size_t si = 0; si < settings.size(); ++si) {
      sampling::SamplingParams p = settings[si];
      p.seed = 1000 + si + 10 * r;
      sampling::Sampler full(p, static_cast<int32_t>(n_vocab)),
          top(p, static_cast<int32_t>(n_vocab));
      ASSERT_TRUE(top.CanSampleTop(static_cast<int32_t>(k)));
      for (int draw = 0; draw < 64; ++draw) {
        ASSERT_EQ(top.SampleTop(ids, vals, static_cast<int32_t>(k)), full.Sample(row))
            << "row " << r << " settings " << si << " draw " << draw;
      }
    }
  }
  // A row shorter than k: all of it, then padding.
  const int64_t short_n = 40;
  Buffer sb = Floats(std::vector<float>(l.begin() + n_vocab, l.begin() + n_vocab + short_n));
  Recorder rec2(ctx_);
  kernels_->TopK(&rec2, sb, out, short_n, 1, k);
  ASSERT_TRUE(rec2.Finish().ok());
  ASSERT_TRUE(rec2.Run().ok());
  const std::vector<int32_t> want = BestFirst(l.data() + n_vocab, short_n);
  for (int64_t i = 0; i < k; ++i) {
    EXPECT_EQ(static_cast<int32_t>(w[i]), i < short_n ? want[i] : -1) << "rank " << i;
  }
}

// The device path of a row whose sampler edits logits: mask_rows.comp reads the edited tokens
// (bias with a repeated id and a -inf bias, banned tokens, the penalty window) out raw and masks
// them, topk.comp reduces the rest; Sampler::SampleTop applies the edits on the host. Over
// seeded draws on four rows (one with ties everywhere), greedy and top-k 1..64 with top-p and
// min-p, each penalty alone and all together, each drawn token accepted into the window: the
// same token as the full-row sampler in every draw, and the logprobs (the token's and the top
// 20) those of the whole row, ids exactly and values within 1e-5.
TEST_F(GpuKernelsTest, MaskedTopKSamplesWithEditsAsTheWholeRow) {
  const int64_t n_vocab = 3000, rows = 4, k = Kernels::kMaxTopK, cap = 256;
  std::vector<float> l = Random(rows * n_vocab, 77, 2.0f);
  for (int64_t i = 0; i < n_vocab; ++i) l[n_vocab + i] = std::round(l[n_vocab + i] * 4.0f) / 4.0f;
  for (int64_t i = 0; i < n_vocab; ++i) l[3 * n_vocab + i] *= 3.0f;  // peaked
  Buffer lb = Floats(l);
  Buffer known = std::move(*ctx_->CreateBuffer(rows * (cap + 1) * 4, Memory::kHost));
  Buffer raw = std::move(*ctx_->CreateBuffer(rows * cap * 4, Memory::kHost));
  Buffer out = std::move(*ctx_->CreateBuffer(rows * (2 * k + 2) * 4, Memory::kHost));
  Recorder rec(ctx_);
  kernels_->MaskRows(&rec, lb, known, raw, n_vocab, rows, cap);
  kernels_->TopK(&rec, lb, out, n_vocab, rows, k);
  ASSERT_TRUE(rec.Finish().ok());
  int draws = 0, edited_draws = 0;
  double max_err = 0.0;
  for (int setting = 0; setting < 6; ++setting) {
    sampling::SamplingParams p;
    p.temperature = setting == 0 ? 0.0f : 0.6f + 0.25f * setting;
    p.top_k = std::array<int32_t, 6>{0, 1, 5, 40, 64, 20}[setting];
    p.top_p = setting == 5 ? 1.0f : 0.9f;
    p.min_p = setting == 4 ? 0.0f : 0.03f;
    p.penalty_last_n = 24;
    p.repeat_penalty = setting % 3 == 0 || setting == 5 ? 1.4f : 1.0f;
    p.frequency_penalty = setting % 3 == 1 || setting == 5 ? 0.6f : 0.0f;
    p.presence_penalty = setting % 3 == 2 || setting == 5 ? 0.9f : 0.0f;
    std::vector<sampling::Sampler> full, top;
    for (int64_t r = 0; r < rows; ++r) {
      p.seed = 10 * setting + r;
      full.emplace_back(p, static_cast<int32_t>(n_vocab));
      top.emplace_back(p, static_cast<int32_t>(n_vocab));
      for (sampling::Sampler* s : {&full.back(), &top.back()}) {
        s->SetLogitBias({{11, 3.0f}, {12, -0.5f}, {11, 0.125f}, {2999, 4.0f}, {500, -INFINITY}});
        s->SetBanned({0, 1, 2});
      }
    }
    std::vector<std::vector<int32_t> > known_ids(rows);
    for (int step = 0; step < 25; ++step) {
      ASSERT_TRUE(ctx_->Upload(lb, 0, l.data(), l.size() * 4).ok());  // unmasked again
      auto* kw = static_cast<uint32_t*>(known.mapped());
      for (int64_t r = 0; r < rows; ++r) {
        top[r].EditedTokens({}, &known_ids[r]);
        ASSERT_LE(static_cast<int64_t>(known_ids[r].size()), cap);
        kw[r * (cap + 1)] = static_cast<uint32_t>(known_ids[r].size());
        for (size_t i = 0; i < known_ids[r].size(); ++i)
          kw[r * (cap + 1) + 1 + i] = known_ids[r][i];
      }
      ASSERT_TRUE(rec.Run().ok());
      const auto* w = static_cast<const uint32_t*>(out.mapped());
      const auto* rw = static_cast<const float*>(raw.mapped());
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = l.data() + r * n_vocab;
        const uint32_t* o = w + r * (2 * k + 2);
        model::TopRow t;
        t.n = static_cast<int32_t>(k);
        t.ids = reinterpret_cast<const int32_t*>(o);
        t.logits = reinterpret_cast<const float*>(o + k);
        std::memcpy(&t.max, o + 2 * k, 4);
        std::memcpy(&t.log_sum_exp, o + 2 * k + 1, 4);
        t.n_known = static_cast<int32_t>(known_ids[r].size());
        t.known_ids = known_ids[r].data();
        t.known_logits = rw + r * cap;
        for (int32_t i = 0; i < t.n_known; ++i) {
          ASSERT_EQ(std::memcmp(&t.known_logits[i], &row[t.known_ids[i]], 4), 0);
        }
        const int32_t want = full[r].Sample(row);
        const int32_t got =
            top[r].SampleTop(t.ids, t.logits, t.n, t.known_ids, t.known_logits, t.n_known);
        ASSERT_EQ(got, want) << "setting " << setting << " step " << step << " row " << r;
        ++draws;
        edited_draws +=
            std::find(known_ids[r].begin(), known_ids[r].end(), got) != known_ids[r].end();
        const engine::TokenLogprob a =
            engine::SequenceSampler::Logprobs(row, static_cast<int32_t>(n_vocab), got, 20);
        const engine::TokenLogprob b = engine::SequenceSampler::Logprobs(t, got, 20);
        EXPECT_NEAR(a.logprob, b.logprob, 1e-5);
        max_err = std::max(max_err, std::abs(static_cast<double>(a.logprob) - b.logprob));
        ASSERT_EQ(a.top.size(), b.top.size());
        for (size_t i = 0; i < a.top.size(); ++i) {
          EXPECT_EQ(a.top[i].first, b.top[i].first) << "rank " << i;
          EXPECT_NEAR(a.top[i].second, b.top[i].second, 1e-5) << "rank " << i;
        }
        full[r].Accept(got);
        top[r].Accept(got);
      }
    }
  }
  EXPECT_GT(edited_draws, 10) << "the edits should matter to some draws";
  std::printf(
      "[gpu kernels] %d draws with edits (%d of an edited token): all equal to the "
      "whole row's; logprob error <= %.2g\n",
      draws, edited_draws, max_err);
}

#endif  // UF_HAVE_VULKAN

}  // namespace
}  // namespace uf::gpu
