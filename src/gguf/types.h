// GGML tensor types as numbered in the GGUF format, with their block geometry.
// Block layouts (see src/kernels/blocks.h for the structs):
//   Q4_0: 32 values, f16 d + 16 bytes of nibbles                     = 18 bytes
//   Q8_0: 32 values, f16 d + 32 int8                                  = 34 bytes
//   Q4_K: 256 values, f16 d, f16 dmin, 12 bytes scales, 128 nibbles   = 144 bytes
//   Q6_K: 256 values, 128 ql, 64 qh, 16 int8 scales, f16 d            = 210 bytes
//   Q8_K: 256 values, f32 d, 256 int8, 16 int16 bsums                 = 292 bytes (activations)
//   MXFP4: 32 values, E8M0 scale byte + 16 bytes of FP4 E2M1 nibbles  = 17 bytes
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace uf {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeInfo {
  std::string_view name;  // "q4_K" style, as other tools print it
  int64_t block_size;     // values per block
  size_t type_size;       // bytes per block
};

// Geometry of any type the GGUF format defines (so files with types we cannot run still parse and
// `info` can list them); nullopt for numbers the format does not define.
std::optional<GgmlTypeInfo> GetGgmlTypeInfo(uint32_t type);

// Types the engine can compute with: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, MXFP4.
bool IsComputeSupported(GgmlType type);

std::string_view GgmlTypeName(GgmlType type);

// Bytes of a row of n values; n must be a multiple of the block size (checked by callers).
size_t GgmlRowBytes(GgmlType type, int64_t n);

// Parses names like "f16", "bf16", "q8_0", "q4_k" (case-insensitive).
std::optional<GgmlType> ParseGgmlType(std::string_view name);

}  // namespace uf
