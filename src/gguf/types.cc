#include "gguf/types.h"

#include <array>
#include <cctype>

#include "base/check.h"

namespace uf {
namespace {

struct TypeEntry {
  GgmlType type;
  GgmlTypeInfo info;
};

// Geometry from the ggml block structs (ggml-common.h): e.g. Q3_K = hmask[32] + qs[64] +
// scales[12] + f16 d = 110 bytes per 256 values; TQ1_0 = qs[48] + qh[4] + f16 d = 54.
constexpr std::array<TypeEntry, 32> kTypes = {{
    {GgmlType::kF32, {"f32", 1, 4}},
    {GgmlType::kF16, {"f16", 1, 2}},
    {GgmlType::kQ4_0, {"q4_0", 32, 18}},
    {GgmlType::kQ4_1, {"q4_1", 32, 20}},
    {GgmlType::kQ5_0, {"q5_0", 32, 22}},
    {GgmlType::kQ5_1, {"q5_1", 32, 24}},
    {GgmlType::kQ8_0, {"q8_0", 32, 34}},
    {GgmlType::kQ8_1, {"q8_1", 32, 36}},
    {GgmlType::kQ2_K, {"q2_K", 256, 84}},
    {GgmlType::kQ3_K, {"q3_K", 256, 110}},
    {GgmlType::kQ4_K, {"q4_K", 256, 144}},
    {GgmlType::kQ5_K, {"q5_K", 256, 176}},
    {GgmlType::kQ6_K, {"q6_K", 256, 210}},
    {GgmlType::kQ8_K, {"q8_K", 256, 292}},
    {GgmlType::kIQ2_XXS, {"iq2_xxs", 256, 66}},
    {GgmlType::kIQ2_XS, {"iq2_xs", 256, 74}},
    {GgmlType::kIQ3_XXS, {"iq3_xxs", 256, 98}},
    {GgmlType::kIQ1_S, {"iq1_s", 256, 50}},
    {GgmlType::kIQ4_NL, {"iq4_nl", 32, 18}},
    {GgmlType::kIQ3_S, {"iq3_s", 256, 110}},
    {GgmlType::kIQ2_S, {"iq2_s", 256, 82}},
    {GgmlType::kIQ4_XS, {"iq4_xs", 256, 136}},
    {GgmlType::kI8, {"i8", 1, 1}},
    {GgmlType::kI16, {"i16", 1, 2}},
    {GgmlType::kI32, {"i32", 1, 4}},
    {GgmlType::kI64, {"i64", 1, 8}},
    {GgmlType::kF64, {"f64", 1, 8}},
    {GgmlType::kIQ1_M, {"iq1_m", 256, 56}},
    {GgmlType::kBF16, {"bf16", 1, 2}},
    {GgmlType::kTQ1_0, {"tq1_0", 256, 54}},
    {GgmlType::kTQ2_0, {"tq2_0", 256, 66}},
    {GgmlType::kMXFP4, {"mxfp4", 32, 17}},  // u8 e (E8M0) + qs[16]
}};

const TypeEntry* FindEntry(uint32_t type) {
  for (const TypeEntry& e : kTypes) {
    if (static_cast<uint32_t>(e.type) == type) return &e;
  }
  return nullptr;
}

}  // namespace

std::optional<GgmlTypeInfo> GetGgmlTypeInfo(uint32_t type) {
  const TypeEntry* e = FindEntry(type);
  if (e == nullptr) return std::nullopt;
  return e->info;
}

bool IsComputeSupported(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
    case GgmlType::kMXFP4:
      return true;
    default:
      return false;
  }
}

std::string_view GgmlTypeName(GgmlType type) {
  const TypeEntry* e = FindEntry(static_cast<uint32_t>(type));
  return e == nullptr ? std::string_view("unknown") : e->info.name;
}

size_t GgmlRowBytes(GgmlType type, int64_t n) {
  const TypeEntry* e = FindEntry(static_cast<uint32_t>(type));
  UF_CHECK(e != nullptr) << "unknown ggml type " << static_cast<uint32_t>(type);
  UF_CHECK(n >= 0 && n % e->info.block_size == 0)
      << "row of " << n << " values is not a multiple of the " << e->info.name << " block size "
      << e->info.block_size;
  return static_cast<size_t>(n / e->info.block_size) * e->info.type_size;
}

std::optional<GgmlType> ParseGgmlType(std::string_view name) {
  for (const TypeEntry& e : kTypes) {
    if (e.info.name.size() != name.size()) continue;
    bool equal = true;
    for (size_t i = 0; i < name.size() && equal; ++i) {
      equal = std::tolower(static_cast<unsigned char>(name[i])) ==
              std::tolower(static_cast<unsigned char>(e.info.name[i]));
    }
    if (equal) return e.type;
  }
  return std::nullopt;
}

}  // namespace uf
