// Internal to src/kernels: functions of the AVX2 tier shared between its translation units.
// Only callable after GetCpuFeatures() reported AVX2 + FMA + F16C.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/dispatch.h"

namespace uf::kernels {

// Same bytes as ConvertActQ8_0 / ConvertActQ8_K (packed.h).
void ConvertActQ8_0Avx2(const float* x, void* dst, int64_t n);
void ConvertActQ8_KAvx2(const float* x, void* dst, int64_t n);

// Software prefetch distance of the streaming kernels: the hardware prefetcher alone leaves
// 10-25% of the read bandwidth unused on the Zen 3 VM (tables in kernels_avx2.cc).
// PrefetchAhead requests the line kPrefetchDistance past `line` where `anchor`, a register just
// loaded from `line`, is: the asm ties it there. A plain _mm_prefetch depends on nothing, and GCC
// gathered the 32-52 prefetches of a K-quant tile at the tile's top, a burst that stalls on the
// core's miss buffers: kernels_bench Q4_K streamed at 0.60 of the bandwidth that way against
// 0.82-0.86 with no prefetch or with the requests spread out.
inline constexpr int kPrefetchDistance = 1024;
inline void PrefetchAhead(const void* line, __m256i& anchor) {
  asm volatile("prefetcht0 %1"
               : "+x"(anchor)
               : "m"(*(static_cast<const char*>(line) + kPrefetchDistance)));
}

// Sum of the 8 lanes.
inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x, 8 lanes: x = n ln2 + r with |r| <= ln2 / 2, e^r by the Cephes expf polynomial (relative
// error ~1e-7, about an ulp), times 2^n through the exponent bits. x is clamped to
// [-87.3, 88.7], where 2^n and the result stay normal floats: below, ~1e-38 instead of a
// denormal or 0; above, 3.3e38 instead of infinity. Neither changes a softmax (whose sum is at
// least 1) or a SiLU (g / (1 + e^-g) is then within a float of 0 or of g).
inline __m256 Exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 split in two so that n * ln2 is exact to float precision.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
}

// MXFP4 weights as GGUF rows against ActQ8_0 activations (mxfp4_avx2.cc).
void GemmMxfp4Avx2(const GemmTask& t, int64_t r0, int64_t r1);
// The same from packed.h TileMxfp4 tiles.
void GemmMxfp4TilesAvx2(const GemmTask& t, int64_t r0, int64_t r1);

// F32, F16 and BF16 weights; leaves other types untouched.
void FillAvx2FloatKernels(GgmlType type, KernelSet* ks);

}  // namespace uf::kernels
