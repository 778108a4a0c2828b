// AVX-512 reductions over a logit row for the sampler: the memory-bound scans, 16 tokens per
// instruction with mask registers (ExpSum keeps the AVX2 polynomial: it is compute-light next to
// the read). Called only when the CPU has AVX-512F/BW/VL/DQ.
// GCC 12 reports false -Wuninitialized inside its own AVX-512 intrinsic headers (GCC PR 105593);
// the pragmas must precede the header to cover it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>

#include "kernels/ops.h"

namespace uf::kernels::internal {

float MaxValueAvx512(const float* x, int64_t n) {
  // vmaxps returns its second operand when either is NaN: NaN never replaces the maximum.
  __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
    m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
    m2 = _mm512_max_ps(_mm512_loadu_ps(x + i + 32), m2);
    m3 = _mm512_max_ps(_mm512_loadu_ps(x + i + 48), m3);
  }
  for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1);
    m1 = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, x + i), m1);
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

int64_t IndicesInRangeAvx512(const float* x, int64_t n, float lo, float hi, int32_t* ids) {
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t m = 0, i = 0;
  for (; i < n; i += 16) {
    const __mmask16 valid = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(valid, x + i);
    const __mmask16 k = _mm512_mask_cmp_ps_mask(_mm512_mask_cmp_ps_mask(valid, v, vlo, _CMP_GE_OQ),
                                                v, vhi, _CMP_LT_OQ);
    if (k == 0) continue;
    // vpcompressd writes the surviving indices contiguously.
    const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(i)), lane);
    _mm512_mask_compressstoreu_epi32(ids + m, k, idx);
    m += __builtin_popcount(k);
  }
  return m;
}

}  // namespace uf::kernels::internal
