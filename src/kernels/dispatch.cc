#include "kernels/dispatch.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "base/check.h"
#include "base/log.h"
#include "kernels/blocks.h"
#include "kernels/quant.h"

namespace uf::kernels {
namespace {

Isa BestSupportedIsa() {
  const CpuFeatures& f = GetCpuFeatures();
  if (f.avx512 && f.avx2) return Isa::kAvx512;
  if (f.avx2) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa IsaFromEnvironment() {
  Isa isa = BestSupportedIsa();
  const char* env = std::getenv("UF_ISA");
  if (env == nullptr || *env == '\0') return isa;
  const std::string_view v(env);
  Isa cap = isa;
  if (v == "scalar") {
    cap = Isa::kScalar;
  } else if (v == "avx2") {
    cap = Isa::kAvx2;
  } else if (v == "avx512") {
    cap = Isa::kAvx512;
  } else {
    UF_LOG(WARNING) << "UF_ISA=" << v << " not one of scalar|avx2|avx512; ignored";
  }
  return static_cast<int>(cap) < static_cast<int>(isa) ? cap : isa;
}

std::atomic<int>& IsaOverride() {
  static std::atomic<int> isa{static_cast<int>(IsaFromEnvironment())};
  return isa;
}

// The scalar tier: the reference dot product per (row, token). Slow, exact oracle.
void GemmScalar(GgmlType type, const GemmTask& t, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* w = t.w + r * t.w_row_bytes;
    for (int64_t tok = 0; tok < t.n_tokens; ++tok) {
      t.y[tok * t.ldy + r] = DotReference(type, w, t.act + tok * t.act_row_bytes, t.cols);
    }
  }
}

template <GgmlType kType>
void GemmScalarT(const GemmTask& t, int64_t r0, int64_t r1) {
  GemmScalar(kType, t, r0, r1);
}

template <GgmlType kAct>
void ConvertScalarT(const float* x, void* dst, int64_t n) {
  QuantizeRow(kAct, x, dst, n);
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    // Raw CPUID + XGETBV rather than __builtin_cpu_supports: clang 14 (used for the fuzz
    // builds) rejects some feature names, and the OS must also have enabled the YMM/ZMM state.
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) >= 7) {
      __cpuid_count(1, 0, a, b, c, d);
      const bool fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1,
                 f16c = (c >> 29) & 1;
      uint64_t xcr0 = 0;
      if (osxsave) {
        uint32_t lo = 0, hi = 0;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
      }
      const bool ymm_os = (xcr0 & 0x6) == 0x6;
      const bool zmm_os = (xcr0 & 0xe6) == 0xe6;
      __cpuid_count(7, 0, a, b, c, d);
      const bool avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1,
                 avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1, avx512vnni = (c >> 11) & 1;
      __cpuid_count(7, 1, a, b, c, d);
      const bool avx512bf16 = (a >> 5) & 1;
      f.avx2 = avx && ymm_os && avx2 && fma && f16c;
      f.avx512 = f.avx2 && zmm_os && avx512f && avx512bw && avx512vl && avx512dq && avx512vnni;
      f.avx512bf16 = f.avx512 && avx512bf16;
    }
#endif
    return f;
  }();
  return features;
}

Isa ActiveIsa() { return static_cast<Isa>(IsaOverride().load(std::memory_order_relaxed)); }

void SetIsaForTesting(Isa isa) {
  UF_CHECK(static_cast<int>(isa) <= static_cast<int>(BestSupportedIsa()))
      << "SetIsaForTesting(" << IsaName(isa) << "): not supported by this CPU";
  IsaOverride().store(static_cast<int>(isa), std::memory_order_relaxed);
}

std::string IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

void FillScalarKernels(GgmlType type, KernelSet* ks) {
  const GgmlType act = ActivationType(type);
  KernelSet k;
  switch (type) {
    case GgmlType::kF32:
      k.gemm = GemmScalarT<GgmlType::kF32>;
      break;
    case GgmlType::kF16:
      k.gemm = GemmScalarT<GgmlType::kF16>;
      break;
    case GgmlType::kBF16:
      k.gemm = GemmScalarT<GgmlType::kBF16>;
      break;
    case GgmlType::kQ8_0:
      k.gemm = GemmScalarT<GgmlType::kQ8_0>;
      break;
    case GgmlType::kQ4_0:
      k.gemm = GemmScalarT<GgmlType::kQ4_0>;
      break;
    case GgmlType::kQ4_K:
      k.gemm = GemmScalarT<GgmlType::kQ4_K>;
      break;
    case GgmlType::kQ6_K:
      k.gemm = GemmScalarT<GgmlType::kQ6_K>;
      break;
    case GgmlType::kMXFP4:
      k.gemm = GemmScalarT<GgmlType::kMXFP4>;
      break;
    default:
      return;
  }
  switch (act) {
    case GgmlType::kQ8_0:
      k.convert = ConvertScalarT<GgmlType::kQ8_0>;
      break;
    case GgmlType::kQ8_K:
      k.convert = ConvertScalarT<GgmlType::kQ8_K>;
      break;
    case GgmlType::kF16:
      k.convert = ConvertScalarT<GgmlType::kF16>;
      break;
    case GgmlType::kBF16:
      k.convert = ConvertScalarT<GgmlType::kBF16>;
      break;
    default:
      k.convert = ConvertScalarT<GgmlType::kF32>;
      break;
  }
  k.act_block = KernelBlockSize(act);
  k.act_block_bytes = KernelTypeSize(act);
  *ks = k;
}

const KernelSet& GetKernels(GgmlType type, Isa isa) {
  constexpr int kMaxType = 64;
  // [isa][type], filled once: scalar everywhere, then each tier the CPU supports on top.
  static const auto* table = [] {
    auto* t = new KernelSet[3][kMaxType];
    const CpuFeatures& f = GetCpuFeatures();
    for (int ty = 0; ty < kMaxType; ++ty) {
      const GgmlType gt = static_cast<GgmlType>(ty);
      for (int i = 0; i < 3; ++i) {
        FillScalarKernels(gt, &t[i][ty]);
        if (i >= 1 && f.avx2) FillAvx2Kernels(gt, &t[i][ty]);
        if (i >= 2 && f.avx2 && f.avx512) FillAvx512Kernels(gt, &t[i][ty]);
      }
    }
    return t;
  }();
  static const KernelSet kNone;
  const int ty = static_cast<int>(type);
  if (ty < 0 || ty >= kMaxType) return kNone;
  return table[static_cast<int>(isa)][ty];
}

uint64_t SumBytesScalar(const uint8_t* p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t v[4];
    std::memcpy(v, p + i, 32);
    s0 += v[0];
    s1 += v[1];
    s2 += v[2];
    s3 += v[3];
  }
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

}  // namespace uf::kernels
