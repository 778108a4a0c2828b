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
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#if UF_HAVE_VULKAN
#include "gpu_kernels_fixture.h"
#endif

namespace uf::gpu {
namespace {

#if !UF_HAVE_VULKAN
TEST(GpuKernels, NotBuilt) { GTEST_SKIP() << "built without the Vulkan backend"; }
#else

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
// same token alone (gemm1_*), for every weight type and for batch sizes that take each token
// tile (Kernels::GemmTile: 8, 16, 32) whole and with a partial last tile; for F16, Q8_0 and
// Q4_0 under both GEMV variants (the wide one-token kernels against the batched kernels of the
// same variant). 288 columns (9 blocks of 32) for the types with blocks of 32 or none, so the
// wide F16 kernels' unrolled loop leaves a tail (36 chunks of 8); 256 for the K-quants. 37 rows:
// the F16 / BF16 tiles of 16 and 32, two rows a subgroup, end in a partial row group (and a lone
// last row) at every subgroup size.
TEST_F(GpuKernelsTest, GemmRowsDoNotDependOnBatchSize) {
  const int64_t rows = 37, max_n = 70;
  const int64_t batches[] = {2, 8, 9, 16, 17, 31, 32, 33, 64, 70};
  for (GgmlType type : kAllTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    const int64_t cols = TakesQ8KActivation(type) ? 256 : 288;
    const std::vector<float> wf = Random(rows * cols, 21, 0.5f), x = Random(max_n * cols, 22);
    std::vector<uint8_t> data;
    auto gm = UploadMatrix(ctx_, Quantized(type, wf, rows, cols, &data));
    ASSERT_TRUE(gm.ok());
    for (const Kernels* kern : Variants(type)) {
      SCOPED_TRACE(VariantName(kern));
      Buffer xq = Empty(ActBytes(max_n * cols)), y = Empty(max_n * rows * 4);
      // Each token alone (its own activation buffers, the one-token kernel), in one recording.
      std::vector<Buffer> xt, xqt;
      Recorder solo(ctx_);
      for (int64_t t = 0; t < max_n; ++t) {
        xt.push_back(Floats(std::vector<float>(x.begin() + t * cols, x.begin() + (t + 1) * cols)));
        xqt.push_back(Empty(ActBytes(cols)));
        const bool q8 = QuantizeFor(&solo, type, xt.back(), cols, xqt.back());
        kern->Gemm(&solo, *gm, q8 ? xqt.back() : xt.back(), 1, y, static_cast<uint32_t>(t * rows));
      }
      ASSERT_TRUE(solo.Finish().ok());
      ASSERT_TRUE(solo.Run().ok());
      const std::vector<float> alone = Read(y, max_n * rows);
      Buffer xb = Floats(x);
      for (int64_t n : batches) {
        SCOPED_TRACE("batch " + std::to_string(n) + ", tile " + std::to_string(kern->GemmTile(n)));
        Recorder rec(ctx_);
        const bool q8 = QuantizeFor(&rec, type, xb, n * cols, xq);
        kern->Gemm(&rec, *gm, q8 ? xq : xb, n, y);
        ASSERT_TRUE(rec.Finish().ok());
        ASSERT_TRUE(rec.Run().ok());
        const std::vector<float> got = Read(y, n * rows);
        for (int64_t t = 0; t < n; ++t) {
          ASSERT_EQ(std::memcmp(got.data() + t * rows, alone.data() + t * rows, rows * 4), 0)
              << "token " << t;
        }
      }
    }
  }
}

// The token tile per batch size: one token alone, then the narrowest tile that needs no more
// tiles than the widest allowed (UF_GPU_TILE / max_tile; 8 is the policy before 16 and 32).
TEST_F(GpuKernelsTest, GemmTilePolicy) {
  const std::vector<std::pair<int64_t, std::array<int64_t, 3> > > want = {
      // n: the tile with max_tile 8, 16, 32
      {1, {1, 1, 1}},    {2, {8, 8, 8}},     {8, {8, 8, 8}},    {9, {8, 16, 16}},
      {16, {8, 16, 16}}, {17, {8, 16, 32}},  {32, {8, 16, 32}}, {33, {8, 16, 32}},
      {64, {8, 16, 32}}, {512, {8, 16, 32}},
  };
  const int64_t max_tiles[] = {8, 16, 32};
  for (int i = 0; i < 3; ++i) {
    auto k = Kernels::Create(ctx_, GemvVariant::kBasic, max_tiles[i]);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    for (const auto& [n, tiles] : want) {
      EXPECT_EQ(k->GemmTile(n), tiles[i]) << "n " << n << ", max tile " << max_tiles[i];
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
    std::vector<std::vector<uint8_t> > data;
    std::vector<kernels::Matrix> experts;
    auto stacked = RandomExperts(type, n_exp, rows, cols, 40, &data, &experts);
    ASSERT_TRUE(stacked.ok()) << stacked.status().ToString();
    EXPECT_EQ(stacked->rows, rows);
    EXPECT_EQ(stacked->n_experts, n_exp);
    const bool q8 = ActivationFor(type) != Activation::kF32;
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

// The activation quantizer gives the CPU reference quantizer's blocks, bit for bit: a batch of
// 3 rows of 2,080 values (195 blocks: not a whole number of workgroups), quantized as one, with
// an all-zero block, a block of one value, the largest magnitude with both signs (and in words
// that different lanes of a subgroup hold), and values at half-way points of the rounding.
TEST_F(GpuKernelsTest, QuantizeMatchesCpu) {
  const int64_t rows = 3, cols = 2080, n = rows * cols, blocks = n / 32;
  std::vector<float> x = Random(n, 3);
  x[40] = 0.0f;
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // an all-zero block: scale 0
  std::fill(x.begin() + 96, x.begin() + 128, 0.0f);
  x[101] = -0.75f;      // a block of one value
  x[cols + 4] = -3.0f;  // equal magnitudes, both signs, in words 1 and 6 of a block
  x[cols + 25] = 3.0f;
  x[cols + 26] = -3.0f;
  // A block with amax 127: x * 127 / 127 lands on k + 0.5 exactly.
  for (int i = 0; i < 32; ++i) x[2 * cols + 32 + i] = static_cast<float>(i % 16) - 7.5f;
  x[2 * cols + 32] = 127.0f;
  std::vector<kernels::BlockQ8_0> want(blocks);
  kernels::QuantizeRow(GgmlType::kQ8_0, x.data(), want.data(), n);
  const std::vector<uint32_t> got = DeviceQuantize(x, /*q8k=*/false);
  for (int64_t b = 0; b < blocks; ++b) {
    float d_want;
    kernels::DequantizeRow(GgmlType::kF16, &want[b].d, &d_want, 1);
    float d_got;
    std::memcpy(&d_got, &got[blocks * 8 + b], 4);
    EXPECT_EQ(d_got, d_want) << "block " << b;
    EXPECT_EQ(std::memcmp(&got[b * 8], want[b].qs, 32), 0) << "block " << b;
  }
}

// The pair quantizer (quantize_pairs) gives the CPU's f16 and bf16 roundings (QuantizeRow of
// kF16 / kBF16, whose 16-bit values in order are the words' halves, low first), bit for bit:
// 2 rows of 1,030 values (515 words: not a whole number of workgroups) with values half-way
// between two f16 / two bf16 values (to even: down and up), zeros of both signs, values f16
// holds only as subnormals and values past f16's range (to infinity).
TEST_F(GpuKernelsTest, QuantizePairsMatchesCpu) {
  const int64_t n = 2 * 1030;
  std::vector<float> x = Random(n, 5);
  const float f16_half = std::ldexp(1.0f, -11), bf16_half = std::ldexp(1.0f, -8);
  const float special[] = {1.0f + f16_half,
                           1.0f + 3 * f16_half,
                           -1.0f - f16_half,
                           1.0f + bf16_half,
                           1.0f + 3 * bf16_half,
                           0.0f,
                           -0.0f,
                           3e-6f,
                           -4e-7f,
                           70000.0f,
                           -1e9f,
                           65504.0f};
  for (size_t i = 0; i < std::size(special); ++i) x[1029 + i] = special[i];
  for (GgmlType type : {GgmlType::kF16, GgmlType::kBF16}) {
    SCOPED_TRACE(GgmlTypeName(type));
    std::vector<uint16_t> want(n);
    kernels::QuantizeRow(type, x.data(), want.data(), n);
    Buffer xb = Floats(x), q = Empty(PairActivationBytes(n));
    Recorder rec(ctx_);
    kernels_->QuantizePairs(&rec, xb, 0, n, type == GgmlType::kBF16, q);
    ASSERT_TRUE(rec.Finish().ok());
    ASSERT_TRUE(rec.Run().ok());
    std::vector<uint16_t> got(n);
    ASSERT_TRUE(ctx_->Download(q, 0, got.data(), n * 2).ok());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], want[i]) << "value " << i << " = " << x[i];
    }
  }
}

// The Q8_K quantizer (quantize_q8_k) gives kernels::QuantizeQ8_K's values, d and sub-block sums
// bit for bit over a batch of 3 rows of 1,280 values (15 blocks, quantized as one): the largest
// magnitude with both signs (the first one sets the sign) where the first lies in a word a
// later lane holds than the second's (words 1 and 32: lanes 1 and 0 for 8 or 32 lanes), within
// one word, three times, and at the block's last value; all-zero blocks, a block of one value,
// and values exactly at half-way points.
TEST_F(GpuKernelsTest, QuantizeQ8KMatchesCpu) {
  const int64_t rows = 3, cols = 1280, n = rows * cols, blocks = n / 256;
  std::vector<float> x = Random(n, 4);
  x[10] = -5.0f;
  x[20] = 5.0f;  // the same magnitude later: the block's max stays -5
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);
  std::fill(x.begin() + 512, x.begin() + 768, 0.0f);
  x[600] = 0.25f;
  // Block 3: max -127/64, so iscale is 64 exactly and (k + 0.5) / 64 lands half-way.
  for (int i = 1; i < 256; ++i) x[768 + i] = ((i % 64) - 32 + 0.5f) / 64.0f;
  x[768] = -127.0f / 64.0f;
  x[1024 + 128] = 6.0f;  // block 4: +6 at index 128 (word 32), -6 first at index 4 (word 1)
  x[1024 + 4] = -6.0f;
  x[cols + 5] = 7.0f;  // block 5: +7 at index 5 first, then -7 at 133 and 255
  x[cols + 133] = -7.0f;
  x[cols + 255] = -7.0f;
  x[cols + 256 + 2] = 8.0f;  // block 6: -8 then +8 in one word
  x[cols + 256 + 1] = -8.0f;
  x[cols + 512 + 255] = -9.0f;  // block 7: the largest at the last value
  std::fill(x.begin() + 2 * cols, x.begin() + 2 * cols + 256, 0.0f);  // block 10: zero
  std::vector<kernels::BlockQ8_K> want(blocks);
  kernels::QuantizeRow(GgmlType::kQ8_K, x.data(), want.data(), n);
  const std::vector<uint32_t> got = DeviceQuantize(x, /*q8k=*/true);
  // The ties' first values set d's sign (d = -max / 127): -6 in block 4, +7 in block 5.
  EXPECT_GT(want[4].d, 0.0f);
  EXPECT_LT(want[5].d, 0.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    float d_got;
    std::memcpy(&d_got, &got[blocks * 72 + b], 4);
    EXPECT_EQ(d_got, want[b].d) << "block " << b;
    EXPECT_EQ(std::memcmp(&got[b * 72], want[b].qs, 256), 0) << "block " << b;
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(static_cast<int32_t>(got[b * 72 + 64 + j]),
                want[b].bsums[2 * j] + want[b].bsums[2 * j + 1])
          << "block " << b << " sub-block " << j;
    }
  }
}

// The Q8_K scales over 4,096 blocks whose largest magnitudes have random mantissas, exponents
// from 2^-40 to 2^40 and either sign: iscale = -127 / max and d = 1 / iscale are the CPU's
// correctly rounded divisions (DivRounded: a `/` estimate corrected by its exact remainder),
// 8,192 divisions checked through d and the values.
TEST_F(GpuKernelsTest, QuantizeQ8KScalesMatchCpu) {
  const int64_t blocks = 4096, n = blocks * 256;
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-40, 40), pos(0, 255);
  std::vector<float> x(n);
  for (int64_t b = 0; b < blocks; ++b) {
    const float scale = std::ldexp(mant(rng), expo(rng));
    for (int64_t i = 0; i < 256; ++i) x[b * 256 + i] = unit(rng) * scale;
    x[b * 256 + pos(rng)] = (rng() & 1 ? -1.0f : 1.0f) * scale * 1.0001f;
  }
  std::vector<kernels::BlockQ8_K> want(blocks);
  kernels::QuantizeRow(GgmlType::kQ8_K, x.data(), want.data(), n);
  const std::vector<uint32_t> got = DeviceQuantize(x, /*q8k=*/true);
  int bad = 0;
  for (int64_t b = 0; b < blocks && bad < 10; ++b) {
    float d_got;
    std::memcpy(&d_got, &got[blocks * 72 + b], 4);
    const bool same = d_got == want[b].d && std::memcmp(&got[b * 72], want[b].qs, 256) == 0;
    EXPECT_TRUE(same) << "block " << b << ": d " << d_got << " want " << want[b].d;
    bad += same ? 0 : 1;
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

}  // namespace

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

namespace {

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

// SubmitAndWait's polling of the fence (Context::spin_us) gives the step's results whether the
// fence signals while it polls (a budget of a second: lavapipe finishes a gather in
// milliseconds) or after it gives up and blocks (1 us), as the blocking wait alone does (0).
TEST_F(GpuKernelsTest, FencePollingGivesTheStepsResults) {
  const int64_t saved = ctx_->spin_us();
  const int64_t cols = 4096;
  const std::vector<float> x = Random(4 * cols, 31);
  Buffer xb = Floats(x);
  Buffer idx = std::move(*ctx_->CreateBuffer(8, Memory::kHost));
  const uint32_t pick[2] = {2, 0};
  std::memcpy(idx.mapped(), pick, 8);
  for (int64_t spin : {int64_t{0}, int64_t{1}, int64_t{1000000}}) {
    SCOPED_TRACE("spin " + std::to_string(spin) + " us");
    ctx_->set_spin_us(spin);
    Buffer y = Empty(2 * cols * 4);
    Recorder rec(ctx_);
    kernels_->Gather(&rec, xb, y, idx, cols, 2);
    ASSERT_TRUE(rec.Finish().ok());
    for (int rep = 0; rep < 3; ++rep) ASSERT_TRUE(rec.Run().ok());
    const std::vector<float> got = Read(y, 2 * cols);
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + cols, x.begin() + 2 * cols));
    EXPECT_TRUE(std::equal(got.begin() + cols, got.end(), x.begin()));
  }
  ctx_->set_spin_us(saved);
  // A CPU driver's shaders run on the cores a polling thread would take: no polling there.
  if (ctx_->info().type == "cpu" && std::getenv("UF_GPU_SPIN_US") == nullptr) {
    EXPECT_EQ(saved, 0);
  }
}

#endif  // UF_HAVE_VULKAN

}  // namespace
}  // namespace uf::gpu
