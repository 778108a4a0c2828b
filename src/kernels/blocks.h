// GGML block layouts, byte-for-byte as stored in GGUF files. Every quantized row is an array of
// these structs; the static_asserts pin the on-disk sizes so a padding change cannot go unnoticed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gguf/types.h"

namespace uf::kernels {

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK_K = 256;  // super-block of the K-quants
inline constexpr int kKScaleBytes = 12;

// 4-bit, one f16 scale per 32 values. Value j is (qs[j] & 15) - 8, value j+16 is (qs[j] >> 4) - 8.
struct BlockQ4_0 {
  uint16_t d;              // f16 scale
  uint8_t qs[kQK4_0 / 2];  // nibbles
};
static_assert(sizeof(BlockQ4_0) == 18, "block_q4_0 must be 18 bytes");

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34, "block_q8_0 must be 34 bytes");

// 4-bit K-quant: 8 sub-blocks of 32 with 6-bit scales and mins packed into 12 bytes
// (see GetScaleMinK4). Value = d * scale_j * q - dmin * min_j.
struct BlockQ4_K {
  uint16_t d;     // f16 super-block scale of the sub-block scales
  uint16_t dmin;  // f16 super-block scale of the sub-block mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];  // 4 groups of 64 values: low nibbles = first 32, high = next 32
};
static_assert(sizeof(BlockQ4_K) == 144, "block_q4_K must be 144 bytes");

// 6-bit K-quant: 16 sub-blocks of 16 with int8 scales. Value = d * scales[j] * (q - 32).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // low 4 bits
  uint8_t qh[kQK_K / 4];      // high 2 bits
  int8_t scales[kQK_K / 16];  // sub-block scales
  uint16_t d;                 // f16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210, "block_q6_K must be 210 bytes");

// Activation type of the K-quant dot products. bsums lets the Q4_K min term be one multiply per
// 16 values instead of one per value.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sum of qs in groups of 16
};
static_assert(sizeof(BlockQ8_K) == 292, "block_q8_K must be 292 bytes");

// MXFP4 (OCP microscaling FP4) as GGUF stores it: 32 values share one E8M0 scale 2^(e - 127);
// each value is FP4 E2M1 (sign, 2-bit exponent, 1-bit mantissa: magnitudes 0, 0.5, 1, 1.5, 2, 3,
// 4, 6). Value j is the low nibble of qs[j], value j + 16 the high nibble (as Q4_0).
inline constexpr int kQKMxfp4 = 32;
struct BlockMxfp4 {
  uint8_t e;                 // E8M0 shared exponent
  uint8_t qs[kQKMxfp4 / 2];  // E2M1 codes
};
static_assert(sizeof(BlockMxfp4) == 17, "block_mxfp4 must be 17 bytes");

// E2M1 code -> twice its value, as int8 (all integers, so dot products stay in integers); the
// scale is halved to match (E8M0Half).
inline constexpr int8_t kMxfp4Doubled[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                             0, -1, -2, -3, -4, -6, -8, -12};

// Half the E8M0 scale: 2^(e - 128), exact in f32 for every e (2^-128 and 2^-127 are subnormal).
// e = 255 (NaN in the OCP spec) is the scale 2^128 (half: 2^127) as in the reference engine;
// no NaN is produced.
inline float E8M0Half(uint8_t e) {
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : 0x00200000u << e;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Geometry of the types the kernels handle (the kernels do not depend on gguf/types.cc).
// Returns 0 for types the kernels do not handle.
constexpr int64_t KernelBlockSize(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 1;
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
    case GgmlType::kMXFP4:
      return 32;
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
    case GgmlType::kQ8_K:
      return kQK_K;
    default:
      return 0;
  }
}

constexpr size_t KernelTypeSize(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
      return 4;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 2;
    case GgmlType::kQ4_0:
      return sizeof(BlockQ4_0);
    case GgmlType::kQ8_0:
      return sizeof(BlockQ8_0);
    case GgmlType::kMXFP4:
      return sizeof(BlockMxfp4);
    case GgmlType::kQ4_K:
      return sizeof(BlockQ4_K);
    case GgmlType::kQ6_K:
      return sizeof(BlockQ6_K);
    case GgmlType::kQ8_K:
      return sizeof(BlockQ8_K);
    default:
      return 0;
  }
}

// Bytes of n values of type t; n must be a multiple of KernelBlockSize(t).
constexpr size_t KernelRowBytes(GgmlType t, int64_t n) {
  return static_cast<size_t>(n / KernelBlockSize(t)) * KernelTypeSize(t);
}

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K block: the first four use
// the low 6 bits of bytes 0..7; the last four take 4 bits from bytes 8..11 and their top 2 bits
// from the spare high bits of bytes 0..7.
inline void GetScaleMinK4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace uf::kernels
