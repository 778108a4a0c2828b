#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/blocks.h"
#include "shared_data.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace uf::kernels {
namespace {

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

float Bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> Gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Dequantization against the independent decoder's output in ../shared/quant.

struct DequantCase {
  const char* name;
  GgmlType type;
  bool exact;
};

class DequantVectorsTest : public ::testing::TestWithParam<DequantCase> {};

TEST_P(DequantVectorsTest, MatchesReferenceDecoder) {
  UF_REQUIRE_SHARED();
  const DequantCase& c = GetParam();
  const std::string base = std::string("../shared/quant/") + c.name;
  const std::vector<uint8_t> raw = ReadFile(base + ".bin");
  const std::vector<uint8_t> expected_bytes = ReadFile(base + ".f32");
  constexpr int64_t kRows = 256, kCols = 256;  // per ../shared/quant/README.md
  ASSERT_EQ(expected_bytes.size(), kRows * kCols * sizeof(float));
  const size_t row_bytes = KernelRowBytes(c.type, kCols);
  ASSERT_EQ(raw.size(), kRows * row_bytes);
  std::vector<float> expected(kRows * kCols);
  std::memcpy(expected.data(), expected_bytes.data(), expected_bytes.size());

  std::vector<float> got(kRows * kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    DequantizeRow(c.type, raw.data() + r * row_bytes, got.data() + r * kCols, kCols);
  }
  int bad = 0;
  for (int64_t i = 0; i < kRows * kCols && bad < 10; ++i) {
    if (c.exact) {
      // One multiply of exact operands (f16 scale x small integer): no freedom in rounding.
      if (FloatBits(got[i]) != FloatBits(expected[i])) {
        ++bad;
        ADD_FAILURE() << c.name << " value " << i << ": got " << got[i] << " want " << expected[i];
      }
    } else {
      // K-quants: d * scale * q may be associated differently, each product rounding by at
      // most 2^-24 relative; and d1 * q - m1 can cancel, so the absolute slack is relative to
      // the largest value of the 256-value super-block. A wrong scale or nibble is >= 1e-1 off.
      const int64_t b0 = i / 256 * 256;
      float block_max = 0.0f;
      for (int64_t j = b0; j < b0 + 256; ++j)
        block_max = std::fmax(block_max, std::fabs(expected[j]));
      const float tol = 1e-6f * std::fabs(expected[i]) + 1e-6f * block_max;
      if (!(std::fabs(got[i] - expected[i]) <= tol)) {
        ++bad;
        ADD_FAILURE() << c.name << " value " << i << ": got " << got[i] << " want " << expected[i];
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantVectorsTest,
                         ::testing::Values(DequantCase{"f16", GgmlType::kF16, true},
                                           DequantCase{"bf16", GgmlType::kBF16, true},
                                           DequantCase{"q8_0", GgmlType::kQ8_0, true},
                                           DequantCase{"q4_0", GgmlType::kQ4_0, true},
                                           DequantCase{"q4_k", GgmlType::kQ4_K, false},
                                           DequantCase{"q6_k", GgmlType::kQ6_K, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Quantize -> dequantize round trips on Gaussian data, with bounds derived from each format.

std::vector<float> RoundTrip(GgmlType type, const std::vector<float>& x) {
  std::vector<uint8_t> q(KernelRowBytes(type, x.size()));
  QuantizeRow(type, x.data(), q.data(), x.size());
  std::vector<float> y(x.size());
  DequantizeRow(type, q.data(), y.data(), x.size());
  return y;
}

double RelativeRmse(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    ref += double(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

TEST(QuantRoundTripTest, Q8_0WithinHalfStep) {
  const auto x = Gaussian(32 * 512, 1);
  const auto y = RoundTrip(GgmlType::kQ8_0, x);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f;
    const float d16 = Fp16ToFp32(Fp32ToFp16(d));
    // Rounding to the grid costs d/2; storing d as f16 moves each of up to 127 steps by
    // |d - d16|; 1e-6 * amax covers float rounding of x * 127 / amax.
    const float bound = 0.5f * d + 127.0f * std::fabs(d - d16) + 1e-6f * amax;
    for (int j = 0; j < 32; ++j) {
      ASSERT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), bound) << "block " << b;
    }
  }
}

TEST(QuantRoundTripTest, Q8_KWithinHalfStep) {
  const auto x = Gaussian(256 * 64, 2);
  std::vector<BlockQ8_K> q(64);
  QuantizeRow(GgmlType::kQ8_K, x.data(), q.data(), x.size());
  std::vector<float> y(x.size());
  DequantizeRow(GgmlType::kQ8_K, q.data(), y.data(), x.size());
  for (size_t b = 0; b < q.size(); ++b) {
    const float d = std::fabs(q[b].d);  // f32 scale: no storage error
    int bsum_check[16] = {};
    for (int j = 0; j < 256; ++j) {
      ASSERT_LE(std::fabs(x[b * 256 + j] - y[b * 256 + j]), 0.5f * d * (1 + 1e-5f));
      bsum_check[j / 16] += q[b].qs[j];
    }
    for (int g = 0; g < 16; ++g) EXPECT_EQ(q[b].bsums[g], bsum_check[g]);
  }
}

TEST(QuantRoundTripTest, Q4_0WithinStep) {
  const auto x = Gaussian(32 * 512, 3);
  const auto y = RoundTrip(GgmlType::kQ4_0, x);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[b * 32 + j]) > amax) {
        amax = std::fabs(x[b * 32 + j]);
        max = x[b * 32 + j];
      }
    }
    const float d = max / -8.0f;
    const float d16 = Fp16ToFp32(Fp32ToFp16(d));
    for (int j = 0; j < 32; ++j) {
      // Levels -8..7 times d: values with x/d in [-8, 7.5] round to within d/2; the side
      // opposite the extreme value (up to x/d = 8) is clamped to 7, so within one step.
      const float xd = x[b * 32 + j] / d;
      const float step = xd <= 7.5f ? 0.5f * std::fabs(d) : std::fabs(d);
      const float bound = step + 8.0f * std::fabs(d - d16) + 1e-6f * amax;
      ASSERT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), bound) << "block " << b;
    }
  }
}

// For the K-quants the scales are fitted, so the bound is statistical: a uniform quantizer with
// step s has RMS error s / sqrt(12). Q4_K spans a 32-value sub-block (about 4.1 sigma for
// Gaussian data) with 15 steps: 4.1 / 15 / sqrt(12) = 0.079 sigma; Q6_K spans 16 values
// (+-1.77 sigma, the expected extreme of 16 samples) with 63 steps: 0.016 sigma. Measured
// with this seed: 0.072 and 0.0177. Bounds leave ~30% slack for the quantized scales; a broken
// fit or packing gives errors near 1.
TEST(QuantRoundTripTest, Q4_KRmse) {
  const auto x = Gaussian(256 * 128, 4, 0.02f);
  const auto y = RoundTrip(GgmlType::kQ4_K, x);
  const double rel = RelativeRmse(x, y);
  EXPECT_LT(rel, 0.095) << "relative RMSE";
  // Must beat the simpler Q4_0 (same bits per value minus the min term).
  EXPECT_LT(rel, RelativeRmse(x, RoundTrip(GgmlType::kQ4_0, x)));
}

TEST(QuantRoundTripTest, Q6_KRmse) {
  const auto x = Gaussian(256 * 128, 5, 3.0f);
  const auto y = RoundTrip(GgmlType::kQ6_K, x);
  EXPECT_LT(RelativeRmse(x, y), 0.021) << "relative RMSE";
}

TEST(QuantRoundTripTest, KQuantsOfZeroAndConstantRows) {
  for (GgmlType t :
       {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_K, GgmlType::kQ4_0, GgmlType::kQ8_0}) {
    const std::vector<float> zeros(256, 0.0f);
    for (float v : RoundTrip(t, zeros)) EXPECT_EQ(v, 0.0f) << static_cast<int>(t);
    const std::vector<float> ones(256, 1.5f);
    for (float v : RoundTrip(t, ones)) EXPECT_NEAR(v, 1.5f, 0.02f);
  }
}

TEST(QuantRoundTripTest, F16AndBf16RelativeError) {
  const auto x = Gaussian(4096, 6, 10.0f);
  const auto h = RoundTrip(GgmlType::kF16, x);
  const auto b = RoundTrip(GgmlType::kBF16, x);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x[i]) < 6.2e-5f) continue;  // f16 subnormal range: absolute error instead
    EXPECT_LE(std::fabs(h[i] - x[i]), std::ldexp(std::fabs(x[i]), -11));  // half ulp, 10 bits
    EXPECT_LE(std::fabs(b[i] - x[i]), std::ldexp(std::fabs(x[i]), -8));   // half ulp, 7 bits
  }
}

// ---------------------------------------------------------------------------------------------
// FP16 / BF16 conversion edge cases.

TEST(Fp16Test, DecodesSpecialValues) {
  EXPECT_EQ(FloatBits(Fp16ToFp32(0x0000)), 0u);
  EXPECT_EQ(FloatBits(Fp16ToFp32(0x8000)), 0x80000000u);  // -0 keeps its sign
  EXPECT_EQ(Fp16ToFp32(0x3C00), 1.0f);
  EXPECT_EQ(Fp16ToFp32(0xC000), -2.0f);
  EXPECT_EQ(Fp16ToFp32(0x7BFF), 65504.0f);
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(Fp16ToFp32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(Fp16ToFp32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(Fp16ToFp32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Fp16ToFp32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(Fp16ToFp32(0x7E00)));
  EXPECT_TRUE(std::isnan(Fp16ToFp32(0x7C01)));  // signalling NaN stays NaN
}

TEST(Fp16Test, EncodesWithRoundToNearestEven) {
  EXPECT_EQ(Fp32ToFp16(0.0f), 0x0000);
  EXPECT_EQ(Fp32ToFp16(-0.0f), 0x8000);
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3C00);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(65519.99f), 0x7BFF);  // below the halfway point to 65536
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7C00);   // tie rounds to even = infinity
  EXPECT_EQ(Fp32ToFp16(1e10f), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(-1e10f), 0xFC00);
  EXPECT_EQ(Fp32ToFp16(std::numeric_limits<float>::infinity()), 0x7C00);
  const uint16_t nan = Fp32ToFp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_NE(Fp32ToFp16(Bits(0x7F800001)) & 0x03FF, 0);  // payload only in dropped bits: still NaN
  // Ties between neighbours 1 and 1 + 2^-10 go to the even mantissa.
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(Fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  // Subnormals, in units of 2^-24.
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);     // 0.5 unit: tie to even 0
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.5f, -25)), 0x0001);     // 0.75 unit
  EXPECT_EQ(Fp32ToFp16(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 units: tie to 2
  EXPECT_EQ(Fp32ToFp16(std::ldexp(5.0f, -25)), 0x0002);     // 2.5 units: tie to 2
  EXPECT_EQ(Fp32ToFp16(std::ldexp(2047.0f, -25)), 0x0400);  // 1023.5 units: up to normal
  EXPECT_EQ(Fp32ToFp16(-std::ldexp(1.0f, -30)), 0x8000);
}

TEST(Fp16Test, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(Fp32ToFp16(f), h) << std::hex << h;
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("f16c"))) uint16_t HardwareFp16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float HardwareFp32(uint16_t h) { return _cvtsh_ss(h); }

// The CPU's own conversion is an independent oracle for every rounding case.
TEST(Fp16Test, MatchesF16cHardware) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t u = rng();
    const float f = Bits(u);
    if (std::isnan(f)) continue;
    ASSERT_EQ(Fp32ToFp16(f), HardwareFp16(f)) << std::hex << u;
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = Fp16ToFp32(static_cast<uint16_t>(h)),
                b = HardwareFp32(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a));
    } else {
      ASSERT_EQ(FloatBits(a), FloatBits(b)) << std::hex << h;
    }
  }
}
#endif

TEST(Bf16Test, ConvertsWithRoundToNearestEven) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(Bf16ToFp32(0x3F80), 1.0f);
  EXPECT_EQ(Fp32ToBf16(-0.0f), 0x8000);
  EXPECT_EQ(Fp32ToBf16(Bits(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(Fp32ToBf16(Bits(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(Fp32ToBf16(Bits(0x3F808001)), 0x3F81);  // above the tie
  EXPECT_EQ(Fp32ToBf16(Bits(0x7F7FFFFF)), 0x7F80);  // max float rounds to infinity
  EXPECT_EQ(Fp32ToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(Fp32ToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // NaN whose payload sits only in the dropped bits must not become infinity.
  const uint16_t nan = Fp32ToBf16(Bits(0x7F800001));
  EXPECT_TRUE(std::isnan(Bf16ToFp32(nan)));
  EXPECT_NE(nan & 0x0040, 0);                       // quiet
  EXPECT_EQ(Fp32ToBf16(Bits(0x00000001)), 0x0000);  // smallest subnormal rounds to zero
  EXPECT_EQ(Fp32ToBf16(Bits(0x00018000)), 0x0002);  // subnormals round like normals (no flush)
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Bf16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(Fp32ToBf16(f), h);
  }
}

// ---------------------------------------------------------------------------------------------
// MXFP4 against the format's definition (OCP MX: value = 2^(e - 127) x E2M1 code), computed here
// in double from the bit fields, independently of the engine's halved table and scale.

double E2M1FromBits(int code) {
  const int sign = code >> 3, exp = (code >> 1) & 3, mant = code & 1;
  // E2M1: bias 1; exponent 0 is subnormal (0.5 x mantissa), else 2^(exp - 1) x (1 + mant / 2).
  const double mag = exp == 0 ? 0.5 * mant : std::ldexp(1.0 + 0.5 * mant, exp - 1);
  return sign ? -mag : mag;
}

TEST(Mxfp4Test, E2M1BitsGiveTheOcpTable) {
  const double want[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(E2M1FromBits(c), (c & 8 ? -1 : 1) * want[c & 7]) << c;
}

// Every scale byte (0 and 1 decode to subnormal floats; 255, NaN in the OCP spec, decodes as
// 2^128 like the reference engine, so codes of 2 and up overflow to infinity) and every code in
// both nibble positions: qs[j] = j | (15 - j) << 4 puts code j at value j and 15 - j at j + 16.
TEST(Mxfp4Test, DequantizeMatchesTheDefinition) {
  std::vector<BlockMxfp4> blocks(256);
  for (int e = 0; e < 256; ++e) {
    blocks[e].e = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) blocks[e].qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  }
  std::vector<float> got(256 * 32);
  DequantizeRow(GgmlType::kMXFP4, blocks.data(), got.data(), got.size());
  for (int e = 0; e < 256; ++e) {
    const double scale = std::ldexp(1.0, e - 127);
    for (int i = 0; i < 32; ++i) {
      const int code = i < 16 ? i : 15 - (i - 16);
      const float want = static_cast<float>(E2M1FromBits(code) * scale);  // exact or +-inf
      ASSERT_EQ(got[e * 32 + i], want) << "e " << e << " value " << i << " code " << code;
    }
  }
  EXPECT_EQ(got[127 * 32 + 7], 6.0f);     // e = 127: scale 1
  EXPECT_EQ(got[0 * 32 + 1], 0x1p-128f);  // smallest: 0.5 x 2^-127
  EXPECT_TRUE(std::isinf(got[255 * 32 + 7]));
}

// The quantizer picks 2^(floor(log2 amax) - 2) (the block max lands in E2M1's top binade, 4..8
// units) and the nearest code: within half the gap of the E2M1 grid around |x| / scale (gaps
// 0.5 up to 2, 1 up to 4, 2 up to 6), or saturated at 6 units beyond.
TEST(Mxfp4Test, QuantizeRoundsToTheNearestCode) {
  auto x = Gaussian(32 * 256, 21);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] *= std::ldexp(1.0f, static_cast<int>(i / 32) % 40 - 20);
  for (int j = 0; j < 32; ++j) x[7 * 32 + j] = 0.0f;  // an all-zero block
  std::vector<BlockMxfp4> q(x.size() / 32);
  QuantizeRow(GgmlType::kMXFP4, x.data(), q.data(), x.size());
  std::vector<float> y(x.size());
  DequantizeRow(GgmlType::kMXFP4, q.data(), y.data(), x.size());
  for (size_t b = 0; b < q.size(); ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[b * 32 + j]));
    if (amax == 0.0f) {
      for (int j = 0; j < 32; ++j) ASSERT_EQ(y[b * 32 + j], 0.0f);
      continue;
    }
    const int e = static_cast<int>(std::floor(std::log2(double(amax)))) - 2;
    ASSERT_EQ(q[b].e, e + 127) << "block " << b;
    const double s = std::ldexp(1.0, e);
    for (int j = 0; j < 32; ++j) {
      const double u = std::fabs(x[b * 32 + j]) / s;
      const double bound = u <= 2 ? 0.25 : u <= 4 ? 0.5 : u <= 6 ? 1.0 : u - 6.0;
      ASSERT_LE(std::fabs(double(x[b * 32 + j]) - y[b * 32 + j]), bound * s * (1 + 1e-6))
          << "block " << b << " value " << j;
      ASSERT_TRUE(y[b * 32 + j] == 0.0f ||
                  std::signbit(y[b * 32 + j]) == std::signbit(x[b * 32 + j]));
    }
  }
  // Relative RMSE on Gaussian data: measured 0.116 with this seed (Q4_0: 0.086; E2M1's grid is
  // coarse at the top and the scale a power of two). A wrong nibble order or scale gives ~1.
  const auto g = Gaussian(32 * 512, 22);
  EXPECT_LT(RelativeRmse(g, RoundTrip(GgmlType::kMXFP4, g)), 0.14);
}

// ---------------------------------------------------------------------------------------------
// The reference dot products against dequantize-then-dot in double.

TEST(DotReferenceTest, MatchesDequantizedDot) {
  for (GgmlType wt : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                      GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    const int64_t n = 1024;
    const auto w = Gaussian(n, 11);
    const auto a = Gaussian(n, 12);
    const GgmlType at = ActivationType(wt);
    std::vector<uint8_t> wq(KernelRowBytes(wt, n)), aq(KernelRowBytes(at, n));
    QuantizeRow(wt, w.data(), wq.data(), n);
    QuantizeRow(at, a.data(), aq.data(), n);
    std::vector<float> wd(n), ad(n);
    DequantizeRow(wt, wq.data(), wd.data(), n);
    DequantizeRow(at, aq.data(), ad.data(), n);
    double expected = 0.0, abs_sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      expected += double(wd[i]) * ad[i];
      abs_sum += std::fabs(double(wd[i]) * ad[i]);
    }
    // Both sides compute the same products of the same decoded values; only float rounding of
    // scales and partial sums differs: a few ulps of the sum of |terms|.
    EXPECT_NEAR(DotReference(wt, wq.data(), aq.data(), n), expected, 1e-5 * abs_sum)
        << static_cast<int>(wt);
  }
}

TEST(ActivationTypeTest, PairsLikeTheReference) {
  EXPECT_EQ(ActivationType(GgmlType::kQ4_0), GgmlType::kQ8_0);
  EXPECT_EQ(ActivationType(GgmlType::kQ8_0), GgmlType::kQ8_0);
  EXPECT_EQ(ActivationType(GgmlType::kMXFP4), GgmlType::kQ8_0);
  EXPECT_EQ(ActivationType(GgmlType::kQ4_K), GgmlType::kQ8_K);
  EXPECT_EQ(ActivationType(GgmlType::kQ6_K), GgmlType::kQ8_K);
  EXPECT_EQ(ActivationType(GgmlType::kF16), GgmlType::kF16);
  EXPECT_EQ(ActivationType(GgmlType::kBF16), GgmlType::kBF16);
  EXPECT_EQ(ActivationType(GgmlType::kF32), GgmlType::kF32);
}

}  // namespace
}  // namespace uf::kernels
