#include "kernels/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "kernels/blocks.h"
#include "kernels/kquants.h"

namespace uf::kernels {
namespace {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

void DequantizeQ8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = x[i].qs[j] * d;
  }
}

void DequantizeQ4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[i * kQK4_0 + j] = ((x[i].qs[j] & 0xF) - 8) * d;
      y[i * kQK4_0 + j + kQK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeQ4_K(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const float dmin = Fp16ToFp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    // Each 32 bytes of qs hold two sub-blocks: low nibbles then high nibbles.
    for (int g = 0; g < 4; ++g) {
      uint8_t sc, m;
      GetScaleMinK4(2 * g, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      GetScaleMinK4(2 * g + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
    }
  }
}

void DequantizeQ6_K(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    // Two halves of 128 values; within a half, value l + 32k takes a nibble of ql and 2 bits of
    // qh[l] (bits 2k..2k+1).
    for (int half = 0; half < 2; ++half) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void DequantizeMxfp4(const BlockMxfp4* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = E8M0Half(x[i].e);
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      y[i * kQKMxfp4 + j] = kMxfp4Doubled[x[i].qs[j] & 0xF] * d;
      y[i * kQKMxfp4 + j + kQKMxfp4 / 2] = kMxfp4Doubled[x[i].qs[j] >> 4] * d;
    }
  }
}

// The E2M1 code nearest v (v already divided by the block scale); ties go to the smaller
// magnitude as in the reference engine, magnitudes past 6 saturate to 6, -0 becomes +0.
uint8_t NearestE2M1(float v) {
  const float a = std::fabs(v);
  int best = 0;
  float best_err = a;
  for (int k = 1; k < 8; ++k) {
    const float err = std::fabs(a - 0.5f * kMxfp4Doubled[k]);
    if (err < best_err) {
      best = k;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(v) && best != 0 ? 8 : 0));
}

// The shared exponent puts the block's largest magnitude in [4, 8) units of the scale (E2M1's
// top binade), as the reference engine does: 2^(floor(log2 amax) - 2). Values above 6 units
// saturate to 6. An all-zero block gets e = 0.
void QuantizeMxfp4(const float* x, BlockMxfp4* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQKMxfp4;
    float amax = 0.0f;
    for (int j = 0; j < kQKMxfp4; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    int e = 0;
    if (amax > 0.0f && std::isfinite(amax)) {
      int exp2 = 0;
      std::frexp(amax, &exp2);  // amax = m * 2^exp2, m in [0.5, 1): floor(log2 amax) = exp2 - 1
      e = std::clamp(exp2 - 1 - 2 + 127, 0, 254);
    }
    y[i].e = static_cast<uint8_t>(e);
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      // ldexp is exact (a power-of-two scaling) unless it leaves the float range.
      const uint8_t lo = NearestE2M1(std::ldexp(xb[j], 127 - e));
      const uint8_t hi = NearestE2M1(std::ldexp(xb[j + kQKMxfp4 / 2], 127 - e));
      y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void DequantizeQ8_K(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    for (int j = 0; j < kQK_K; ++j) y[i * kQK_K + j] = x[i].d * x[i].qs[j];
  }
}

// The reference engine's x86 activation quantizer: scale by 127/amax, round half to even.
// (Its portable reference multiplies by 1/(amax/127) and rounds half away from zero; the two
// differ only on exact ties and 1-ulp scale differences.)
void QuantizeQ8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQK8_0; ++j) {
      const float v = std::nearbyint(xb[j] * id);
      y[i].qs[j] = static_cast<int8_t>(std::fmax(-128.0f, std::fmin(127.0f, v)));
    }
  }
}

// d = -max/8 with the sign of the largest-magnitude value, so that value maps to q = 0 exactly
// and the full range -8..7 is used.
void QuantizeQ4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK4_0;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (amax < std::fabs(xb[j])) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(xb[j] * id + 8.5f)));
      const int q1 =
          std::min(15, static_cast<int>(static_cast<int8_t>(xb[j + kQK4_0 / 2] * id + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// d = 1/(-127/max) with the sign of the largest-magnitude value; q clamped to 127 (the value
// -max maps to -127... or 128 before the clamp when rounding pushes it over).
void QuantizeQ8_K(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK_K;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = static_cast<int>(std::nearbyint(iscale * xb[j]));
      y[i].qs[j] = static_cast<int8_t>(std::min(127, v));
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[g * 16 + l];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

float DotQ8_0(const BlockQ8_0* x, const BlockQ8_0* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK8_0; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    sum += sumi * (Fp16ToFp32(x[i].d) * Fp16ToFp32(y[i].d));
  }
  return sum;
}

float DotQ4_0(const BlockQ4_0* x, const BlockQ8_0* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      sumi += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j];
      sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + kQK4_0 / 2];
    }
    sum += sumi * (Fp16ToFp32(x[i].d) * Fp16ToFp32(y[i].d));
  }
  return sum;
}

// Integer sums of doubled E2M1 values times int8 activations, scaled by half the E8M0 scale:
// the reference engine's formulation, so results match it to float rounding.
float DotMxfp4(const BlockMxfp4* x, const BlockQ8_0* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      sumi += kMxfp4Doubled[x[i].qs[j] & 0xF] * y[i].qs[j];
      sumi += kMxfp4Doubled[x[i].qs[j] >> 4] * y[i].qs[j + kQKMxfp4 / 2];
    }
    sum += sumi * (E8M0Half(x[i].e) * Fp16ToFp32(y[i].d));
  }
  return sum;
}

// Integer formulation: sum_j scale_j * <q4_j, q8_j> times d, minus dmin * sum_j min_j * (sum of
// the activations of sub-block j), the latter from the precomputed bsums.
float DotQ4_K(const BlockQ4_K* x, const BlockQ8_K* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int32_t sum_scaled = 0, sum_mins = 0;
    const uint8_t* q4 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    for (int g = 0; g < 4; ++g) {
      uint8_t sc_lo, m_lo, sc_hi, m_hi;
      GetScaleMinK4(2 * g, x[i].scales, &sc_lo, &m_lo);
      GetScaleMinK4(2 * g + 1, x[i].scales, &sc_hi, &m_hi);
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        lo += (q4[l] & 0xF) * q8[l];
        hi += (q4[l] >> 4) * q8[l + 32];
      }
      sum_scaled += sc_lo * lo + sc_hi * hi;
      sum_mins += m_lo * (y[i].bsums[4 * g] + y[i].bsums[4 * g + 1]) +
                  m_hi * (y[i].bsums[4 * g + 2] + y[i].bsums[4 * g + 3]);
      q4 += 32;
      q8 += 64;
    }
    const float d = Fp16ToFp32(x[i].d) * y[i].d;
    const float dmin = Fp16ToFp32(x[i].dmin) * y[i].d;
    sum += d * sum_scaled - dmin * sum_mins;
  }
  return sum;
}

float DotQ6_K(const BlockQ6_K* x, const BlockQ8_K* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int32_t isum = 0;
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* q8 = y[i].qs;
    for (int half = 0; half < 2; ++half) {
      const int8_t* sc = x[i].scales + 8 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        isum += sc[is + 0] * q1 * q8[l] + sc[is + 2] * q2 * q8[l + 32] +
                sc[is + 4] * q3 * q8[l + 64] + sc[is + 6] * q4 * q8[l + 96];
      }
      ql += 64;
      qh += 32;
      q8 += 128;
    }
    sum += Fp16ToFp32(x[i].d) * y[i].d * isum;
  }
  return sum;
}

}  // namespace

float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float.
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return BitsFloat(sign | 0x7F800000 | (mant << 13));
  return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t Fp32ToFp16(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t a = x & 0x7FFFFFFF;
  if (a > 0x7F800000) {
    return sign | 0x7E00 | ((a >> 13) & 0x3FF);  // NaN: quiet, payload truncated
  }
  // 65520 = halfway between 65504 (max half) and 65536 rounds to even, which is infinity.
  if (a >= 0x477FF000) return sign | 0x7C00;
  if (a < 0x38800000) {
    // Below the smallest normal half (2^-14): units of 2^-24; the scaling is exact and
    // nearbyint rounds half to even in the default rounding mode.
    const float v = BitsFloat(a) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(v));
  }
  // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits half to even; a carry
  // out of the mantissa correctly bumps the exponent.
  a += 0xC8000FFFu + ((a >> 13) & 1);
  return sign | static_cast<uint16_t>(a >> 13);
}

float Bf16ToFp32(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

uint16_t Fp32ToBf16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);
  return static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  const int64_t bs = KernelBlockSize(type);
  UF_CHECK(bs > 0) << "DequantizeRow: unsupported type " << static_cast<int>(type);
  UF_CHECK(n % bs == 0) << "DequantizeRow: " << n << " values not a multiple of " << bs;
  const int64_t nb = n / bs;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case GgmlType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(s[i]);
      return;
    }
    case GgmlType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(s[i]);
      return;
    }
    case GgmlType::kQ8_0:
      return DequantizeQ8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case GgmlType::kQ4_0:
      return DequantizeQ4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case GgmlType::kQ4_K:
      return DequantizeQ4_K(static_cast<const BlockQ4_K*>(src), dst, nb);
    case GgmlType::kQ6_K:
      return DequantizeQ6_K(static_cast<const BlockQ6_K*>(src), dst, nb);
    case GgmlType::kQ8_K:
      return DequantizeQ8_K(static_cast<const BlockQ8_K*>(src), dst, nb);
    case GgmlType::kMXFP4:
      return DequantizeMxfp4(static_cast<const BlockMxfp4*>(src), dst, nb);
    default:
      break;
  }
  UF_CHECK(false) << "unreachable";
}

void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  const int64_t bs = KernelBlockSize(type);
  UF_CHECK(bs > 0) << "QuantizeRow: unsupported type " << static_cast<int>(type);
  UF_CHECK(n % bs == 0) << "QuantizeRow: " << n << " values not a multiple of " << bs;
  const int64_t nb = n / bs;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case GgmlType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = Fp32ToFp16(src[i]);
      return;
    }
    case GgmlType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = Fp32ToBf16(src[i]);
      return;
    }
    case GgmlType::kQ8_0:
      return QuantizeQ8_0(src, static_cast<BlockQ8_0*>(dst), nb);
    case GgmlType::kQ4_0:
      return QuantizeQ4_0(src, static_cast<BlockQ4_0*>(dst), nb);
    case GgmlType::kQ4_K:
      return QuantizeRowQ4_K(src, static_cast<BlockQ4_K*>(dst), nb);
    case GgmlType::kQ6_K:
      return QuantizeRowQ6_K(src, static_cast<BlockQ6_K*>(dst), nb);
    case GgmlType::kQ8_K:
      return QuantizeQ8_K(src, static_cast<BlockQ8_K*>(dst), nb);
    case GgmlType::kMXFP4:
      return QuantizeMxfp4(src, static_cast<BlockMxfp4*>(dst), nb);
    default:
      break;
  }
  UF_CHECK(false) << "unreachable";
}

GgmlType ActivationType(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
    case GgmlType::kMXFP4:
      return GgmlType::kQ8_0;
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
      return GgmlType::kQ8_K;
    case GgmlType::kF16:
      return GgmlType::kF16;
    case GgmlType::kBF16:
      return GgmlType::kBF16;
    default:
      return GgmlType::kF32;
  }
}

float DotReference(GgmlType weight_type, const void* w, const void* a, int64_t n) {
  const int64_t bs = KernelBlockSize(weight_type);
  UF_CHECK(bs > 0 && n % bs == 0) << "DotReference: bad type or length";
  const int64_t nb = n / bs;
  switch (weight_type) {
    case GgmlType::kF32: {
      const float* x = static_cast<const float*>(w);
      const float* y = static_cast<const float*>(a);
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * y[i];
      return static_cast<float>(sum);
    }
    case GgmlType::kF16:
    case GgmlType::kBF16: {
      const uint16_t* x = static_cast<const uint16_t*>(w);
      const uint16_t* y = static_cast<const uint16_t*>(a);
      auto cvt = weight_type == GgmlType::kF16 ? Fp16ToFp32 : Bf16ToFp32;
      // Products of two halves are exact in double; the sum is the best available oracle.
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(cvt(x[i])) * cvt(y[i]);
      return static_cast<float>(sum);
    }
    case GgmlType::kQ8_0:
      return DotQ8_0(static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0*>(a), nb);
    case GgmlType::kQ4_0:
      return DotQ4_0(static_cast<const BlockQ4_0*>(w), static_cast<const BlockQ8_0*>(a), nb);
    case GgmlType::kQ4_K:
      return DotQ4_K(static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(a), nb);
    case GgmlType::kQ6_K:
      return DotQ6_K(static_cast<const BlockQ6_K*>(w), static_cast<const BlockQ8_K*>(a), nb);
    case GgmlType::kMXFP4:
      return DotMxfp4(static_cast<const BlockMxfp4*>(w), static_cast<const BlockQ8_0*>(a), nb);
    default:
      break;
  }
  UF_CHECK(false) << "DotReference: unsupported weight type " << static_cast<int>(weight_type);
  return 0.0f;
}

}  // namespace uf::kernels
