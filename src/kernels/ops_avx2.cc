// AVX2+FMA attention loops (compiled with -mavx2 -mfma; called only when the CPU has them).
#include <immintrin.h>

#include "kernels/ops.h"

namespace uf::kernels::internal {
namespace {

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace

void DotRowsAvx2(const float* q, const float* k, int64_t m, int64_t d, float* scores) {
  const int64_t d8 = d & ~int64_t{7};
  for (int64_t s = 0; s < m; ++s) {
    const float* kr = k + s * d;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= d8; i += 16) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kr + i), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(kr + i + 8), a1);
    }
    if (i < d8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kr + i), a0);
    float sum = HorizontalSum(_mm256_add_ps(a0, a1));
    for (i = d8; i < d; ++i) sum += q[i] * kr[i];
    scores[s] = sum;
  }
}

void AxpyRowsAvx2(const float* w, const float* v, int64_t m, int64_t d, float* out) {
  const int64_t d8 = d & ~int64_t{7};
  for (int64_t i = 0; i < d8; i += 8) {
    __m256 acc = _mm256_loadu_ps(out + i);
    for (int64_t s = 0; s < m; ++s) {
      acc = _mm256_fmadd_ps(_mm256_set1_ps(w[s]), _mm256_loadu_ps(v + s * d + i), acc);
    }
    _mm256_storeu_ps(out + i, acc);
  }
  for (int64_t i = d8; i < d; ++i) {
    float acc = out[i];
    for (int64_t s = 0; s < m; ++s) acc += w[s] * v[s * d + i];
    out[i] = acc;
  }
}

}  // namespace uf::kernels::internal
