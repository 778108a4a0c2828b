// AVX2+FMA reductions over a logit row for the sampler (compiled with -mavx2 -mfma; called only
// when the CPU has them).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/avx2.h"
#include "kernels/ops.h"

namespace uf::kernels::internal {

float MaxValueAvx2(const float* x, int64_t n) {
  // maxps returns its second operand when either is NaN, so a NaN input never replaces the
  // running maximum. Four accumulators hide the 4-cycle latency of vmaxps.
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
    m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
  m0 = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  float max = _mm_cvtss_f32(m);
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;
  return max;
}

double ExpSumAvx2(const float* x, int64_t n, float shift, float scale, float* out,
                  double* block_sums) {
  const __m256 vshift = _mm256_set1_ps(shift), vscale = _mm256_set1_ps(scale);
  const __m256 floor = _mm256_set1_ps(-87.0f);
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kExpSumBlock) {
    const int64_t end = std::min(n, b + kExpSumBlock);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = b;
    for (; i + 8 <= end; i += 8) {
      const __m256 a = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vshift), vscale);
      // Ordered compare: false for NaN, so NaN and tiny terms become exactly 0.
      const __m256 keep = _mm256_cmp_ps(a, floor, _CMP_GE_OQ);
      const __m256 e = _mm256_and_ps(Exp8(a), keep);
      if (out != nullptr) _mm256_storeu_ps(out + i, e);
      acc = _mm256_add_ps(acc, e);
    }
    float sum = HorizontalSum(acc);
    for (; i < end; ++i) {
      const float a = (x[i] - shift) * scale;
      const float e = a >= -87.0f ? std::exp(a) : 0.0f;
      if (out != nullptr) out[i] = e;
      sum += e;
    }
    if (block_sums != nullptr) block_sums[b / kExpSumBlock] = sum;
    total += sum;
  }
  return total;
}

int64_t FirstAboveAvx2(const float* x, int64_t n, float t) {
  const __m256 vt = _mm256_set1_ps(t);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    // Four compares OR-ed: one branch per 32 tokens while nothing enters.
    const __m256 a = _mm256_cmp_ps(_mm256_loadu_ps(x + i), vt, _CMP_GT_OQ);
    const __m256 b = _mm256_cmp_ps(_mm256_loadu_ps(x + i + 8), vt, _CMP_GT_OQ);
    const __m256 c = _mm256_cmp_ps(_mm256_loadu_ps(x + i + 16), vt, _CMP_GT_OQ);
    const __m256 d = _mm256_cmp_ps(_mm256_loadu_ps(x + i + 24), vt, _CMP_GT_OQ);
    if (_mm256_movemask_ps(_mm256_or_ps(_mm256_or_ps(a, b), _mm256_or_ps(c, d))) == 0) continue;
    const uint32_t m = static_cast<uint32_t>(_mm256_movemask_ps(a)) |
                       static_cast<uint32_t>(_mm256_movemask_ps(b)) << 8 |
                       static_cast<uint32_t>(_mm256_movemask_ps(c)) << 16 |
                       static_cast<uint32_t>(_mm256_movemask_ps(d)) << 24;
    return i + __builtin_ctz(m);
  }
  for (; i < n; ++i) {
    if (x[i] > t) return i;
  }
  return n;
}

int64_t IndicesInRangeAvx2(const float* x, int64_t n, float lo, float hi, int32_t* ids) {
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  int64_t m = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    // Ordered compares: false for NaN.
    unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(
        _mm256_and_ps(_mm256_cmp_ps(v, vlo, _CMP_GE_OQ), _mm256_cmp_ps(v, vhi, _CMP_LT_OQ))));
    // Most blocks hold no survivor: two compares and one branch per 8 tokens.
    while (mask != 0) {
      ids[m++] = static_cast<int32_t>(i + __builtin_ctz(mask));
      mask &= mask - 1;
    }
  }
  for (; i < n; ++i) {
    if (x[i] >= lo && x[i] < hi) ids[m++] = static_cast<int32_t>(i);
  }
  return m;
}

double MassAtLeastAvx2(const float* w, int64_t n, float t, int64_t* count) {
  const __m256 vt = _mm256_set1_ps(t);
  double total = 0.0;
  __m256i c = _mm256_setzero_si256();
  int64_t tail_count = 0;
  for (int64_t b = 0; b < n; b += kExpSumBlock) {
    const int64_t end = std::min(n, b + kExpSumBlock);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = b;
    for (; i + 8 <= end; i += 8) {
      const __m256 v = _mm256_loadu_ps(w + i);
      const __m256 keep = _mm256_cmp_ps(v, vt, _CMP_GE_OQ);
      acc = _mm256_add_ps(acc, _mm256_and_ps(v, keep));
      c = _mm256_sub_epi32(c, _mm256_castps_si256(keep));  // all-ones lanes are -1
    }
    float sum = HorizontalSum(acc);
    for (; i < end; ++i) {
      if (w[i] >= t) sum += w[i], ++tail_count;
    }
    total += sum;
  }
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), c);
  int64_t cnt = tail_count;
  for (int32_t l : lanes) cnt += static_cast<uint32_t>(l);
  *count = cnt;
  return total;
}

double MaskedBlockSumsAvx2(const float* w, const float* v, int64_t n, float t, double* block_sums) {
  const __m256 vt = _mm256_set1_ps(t);
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kExpSumBlock) {
    const int64_t end = std::min(n, b + kExpSumBlock);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = b;
    for (; i + 8 <= end; i += 8) {
      const __m256 keep = _mm256_cmp_ps(_mm256_loadu_ps(w + i), vt, _CMP_GE_OQ);
      acc = _mm256_add_ps(acc, _mm256_and_ps(_mm256_loadu_ps(v + i), keep));
    }
    float sum = HorizontalSum(acc);
    for (; i < end; ++i) {
      if (w[i] >= t) sum += v[i];
    }
    block_sums[b / kExpSumBlock] = sum;
    total += sum;
  }
  return total;
}

}  // namespace uf::kernels::internal
