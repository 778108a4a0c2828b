// Internal to src/kernels: functions of the AVX-512 tier shared between its translation units.
// Only callable after GetCpuFeatures() reported AVX-512 (and BF16 where named).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/dispatch.h"

namespace uf::kernels {

// e^x, 16 lanes: the AVX2 tier's Cephes polynomial (kernels/avx2.h, Exp8), so both tiers give
// the same terms to the last bit or two.
inline __m512 Exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
}

// Same bytes as ConvertActQ8_0 / ConvertActQ8_K (packed.h).
void ConvertActQ8_0Avx512(const float* x, void* dst, int64_t n);
void ConvertActQ8_KAvx512(const float* x, void* dst, int64_t n);

// MXFP4 weights as GGUF rows against ActQ8_0 activations (mxfp4_avx512.cc).
void GemmMxfp4Avx512(const GemmTask& t, int64_t r0, int64_t r1);
// The same from packed.h TileMxfp4 tiles.
void GemmMxfp4TilesAvx512(const GemmTask& t, int64_t r0, int64_t r1);

// F32, F16 and (with AVX512_BF16) BF16 weights; leaves other types untouched.
void FillAvx512FloatKernels(GgmlType type, KernelSet* ks);

}  // namespace uf::kernels
