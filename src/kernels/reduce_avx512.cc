// AVX-512 reductions over a logit row for the sampler: the memory-bound scans, 16 tokens per
// instruction with mask registers (ExpSum keeps the AVX2 polynomial: it is compute-light next to
// the read). Called only when the CPU has AVX-512F/BW/VL/DQ.
// GCC 12 reports false -Wuninitialized inside its own AVX-512 intrinsic headers (GCC PR 105593);
// the pragmas must precede the header to cover it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/avx512.h"
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

double ExpSumAvx512(const float* x, int64_t n, float shift, float scale, float* out,
                    double* block_sums) {
  const __m512 vshift = _mm512_set1_ps(shift), vscale = _mm512_set1_ps(scale);
  const __m512 floor = _mm512_set1_ps(-87.0f);
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kExpSumBlock) {
    const int64_t end = std::min(n, b + kExpSumBlock);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = b; i < end; i += 16) {
      const __mmask16 valid = end - i >= 16 ? static_cast<__mmask16>(0xFFFF)
                                            : static_cast<__mmask16>((1u << (end - i)) - 1);
      const __m512 a =
          _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(valid, x + i), vshift), vscale);
      // Ordered compare: false for NaN, so NaN, tiny terms and the lanes past n are exactly 0.
      const __mmask16 keep = _mm512_mask_cmp_ps_mask(valid, a, floor, _CMP_GE_OQ);
      const __m512 e = _mm512_maskz_mov_ps(keep, Exp16(a));
      if (out != nullptr) _mm512_mask_storeu_ps(out + i, valid, e);
      acc = _mm512_add_ps(acc, e);
    }
    // The lane sum in a fixed order (GCC 12's _mm512_reduce_add_ps trips its own warnings).
    const __m256 h =
        _mm256_add_ps(_mm512_castps512_ps256(acc),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    const float sum = _mm_cvtss_f32(q);
    if (block_sums != nullptr) block_sums[b / kExpSumBlock] = sum;
    total += sum;
  }
  return total;
}

int64_t FirstAboveAvx512(const float* x, int64_t n, float t) {
  const __m512 vt = _mm512_set1_ps(t);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __mmask16 a = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), vt, _CMP_GT_OQ);
    const __mmask16 b = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i + 16), vt, _CMP_GT_OQ);
    const __mmask16 c = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i + 32), vt, _CMP_GT_OQ);
    const __mmask16 d = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i + 48), vt, _CMP_GT_OQ);
    const uint64_t m = static_cast<uint64_t>(a) | static_cast<uint64_t>(b) << 16 |
                       static_cast<uint64_t>(c) << 32 | static_cast<uint64_t>(d) << 48;
    if (m != 0) return i + __builtin_ctzll(m);
  }
  for (; i < n; i += 16) {
    const __mmask16 valid =
        n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __mmask16 k =
        _mm512_mask_cmp_ps_mask(valid, _mm512_maskz_loadu_ps(valid, x + i), vt, _CMP_GT_OQ);
    if (k != 0) return i + __builtin_ctz(k);
  }
  return n;
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
