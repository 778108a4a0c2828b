// The tiled attention kernel on AVX2+FMA+F16C (8 lanes); only called after the CPU check.
#include <immintrin.h>

#include "kernels/attention_simd.h"
#include "kernels/avx2.h"

namespace uf::kernels::internal {
namespace {

struct Avx2 {
  using Reg = __m256;
  static constexpr int kWidth = 8;
  static Reg Zero() { return _mm256_setzero_ps(); }
  static Reg Set1(float x) { return _mm256_set1_ps(x); }
  static Reg Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, Reg x) { _mm256_storeu_ps(p, x); }
  static Reg Add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg Sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg Max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg Fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg Exp(Reg x) { return Exp8(x); }
  static Reg Keep(Reg x, int64_t n, float fill) {
    if (n >= 8) return x;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 keep =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane));
    return _mm256_blendv_ps(_mm256_set1_ps(fill), x, keep);
  }
  static float ReduceMax(Reg x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static float ReduceSum(Reg x) { return HorizontalSum(x); }
  // Three levels of vhaddps and a lane fold: all 8 sums in one register.
  static void StoreSums(const Reg* a, float* out) {
    const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
    const __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
    const __m256 hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
    _mm256_storeu_ps(out, _mm256_add_ps(lo, hi));
  }
  static Reg LoadF16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Reg LoadQ8_0(const BlockQ8_0& b, int64_t at) {
    const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + at));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)),
                         _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
  }
  static void WidenQ8_0(const BlockQ8_0* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      const __m256 s = _mm256_set1_ps(_cvtsh_ss(src[b].d));
      for (int i = 0; i < kQK8_0; i += 8) {
        const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src[b].qs + i));
        const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
        _mm256_storeu_ps(dst + b * kQK8_0 + i, _mm256_mul_ps(s, x));
      }
    }
  }
};

}  // namespace

bool AttendChunkAvx2(const AttentionKv& kv, const float* q, int64_t nq, const int32_t* visible,
                     float scale, AttentionState out, float* scratch) {
  return AttentionKernel<Avx2>::Run(kv, q, nq, visible, scale, out, scratch);
}

}  // namespace uf::kernels::internal
