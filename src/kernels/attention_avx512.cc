// The tiled attention kernel on AVX-512 (16 lanes); only called after the CPU check.
// GCC 12 reports false -Wuninitialized inside its own AVX-512 intrinsic headers (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/attention_simd.h"
#include "kernels/avx512.h"

namespace uf::kernels::internal {
namespace {

struct Avx512 {
  using Reg = __m512;
  static constexpr int kWidth = 16;
  static Reg Zero() { return _mm512_setzero_ps(); }
  static Reg Set1(float x) { return _mm512_set1_ps(x); }
  static Reg Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, Reg x) { _mm512_storeu_ps(p, x); }
  static Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg Sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg Max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg Fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg Exp(Reg x) { return Exp16(x); }
  static Reg Keep(Reg x, int64_t n, float fill) {
    if (n >= 16) return x;
    const __mmask16 keep = static_cast<__mmask16>((1u << n) - 1);
    return _mm512_mask_blend_ps(keep, _mm512_set1_ps(fill), x);
  }
  static float ReduceMax(Reg x) { return _mm512_reduce_max_ps(x); }
  static float ReduceSum(Reg x) { return _mm512_reduce_add_ps(x); }
  // Folds each accumulator to 8 lanes, then the AVX2 transposing reduction on rows 0-7 and 8-15.
  static void StoreSums(const Reg* a, float* out) {
    __m256 h[16];
    for (int r = 0; r < 16; ++r) {
      h[r] = _mm256_add_ps(_mm512_castps512_ps256(a[r]),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[r]), 1)));
    }
    for (int g = 0; g < 2; ++g) {
      const __m256* b = h + 8 * g;
      const __m256 h01 = _mm256_hadd_ps(b[0], b[1]), h23 = _mm256_hadd_ps(b[2], b[3]);
      const __m256 h45 = _mm256_hadd_ps(b[4], b[5]), h67 = _mm256_hadd_ps(b[6], b[7]);
      const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
      const __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
      const __m256 hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
      _mm256_storeu_ps(out + 8 * g, _mm256_add_ps(lo, hi));
    }
  }
  static Reg LoadF16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Reg LoadQ8_0(const BlockQ8_0& b, int64_t at) {
    const __m128i q8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + at));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.d)),
                         _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q8)));
  }
  static void WidenQ8_0(const BlockQ8_0* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      const __m512 s = _mm512_set1_ps(_cvtsh_ss(src[b].d));
      for (int i = 0; i < kQK8_0; i += 16) {
        const __m128i q8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[b].qs + i));
        const __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q8));
        _mm512_storeu_ps(dst + b * kQK8_0 + i, _mm512_mul_ps(s, x));
      }
    }
  }
};

}  // namespace

bool AttendChunkAvx512(const AttentionKv& kv, const float* q, int64_t nq, const int32_t* visible,
                       float scale, AttentionState out, float* scratch) {
  return AttentionKernel<Avx512>::Run(kv, q, nq, visible, scale, out, scratch);
}

}  // namespace uf::kernels::internal
