// AVX2+FMA elementwise ops: SwiGLU, RMS norm, F32 -> F16 (compiled with -mavx2 -mfma -mf16c;
// called only when the CPU has them).
#include <immintrin.h>

#include <cmath>

#include "kernels/avx2.h"
#include "kernels/blocks.h"
#include "kernels/ops.h"

namespace uf::kernels::internal {

void SwiGluAvx2(const float* gate, const float* up, float* out, int64_t n) {
  const int64_t n8 = n & ~int64_t{7};
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (int64_t i = n8; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// Sum of squares in double as RmsNorm takes it: 16 lanes in four 4-lane chains, reduced, then
// the tail in order. With `add`, x += add first, in the same pass (the residual add before a
// norm): the sum sees the stored values, so the result is the same bits as AddInPlace then
// RmsNorm.
template <bool kAdd>
double SumSquaresAvx2(float* x, const float* add, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128 v[4];
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm_loadu_ps(x + i + 4 * j);
      if constexpr (kAdd) {
        v[j] = _mm_add_ps(v[j], _mm_loadu_ps(add + i + 4 * j));
        _mm_storeu_ps(x + i + 4 * j, v[j]);
      }
    }
    const __m256d x0 = _mm256_cvtps_pd(v[0]), x1 = _mm256_cvtps_pd(v[1]);
    const __m256d x2 = _mm256_cvtps_pd(v[2]), x3 = _mm256_cvtps_pd(v[3]);
    a0 = _mm256_fmadd_pd(x0, x0, a0);
    a1 = _mm256_fmadd_pd(x1, x1, a1);
    a2 = _mm256_fmadd_pd(x2, x2, a2);
    a3 = _mm256_fmadd_pd(x3, x3, a3);
  }
  const __m256d a = _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; i < n; ++i) {
    if constexpr (kAdd) x[i] += add[i];
    sum += static_cast<double>(x[i]) * x[i];
  }
  return sum;
}

void ScaleAvx2(const float* x, const float* w, float* y, int64_t n, double sum, float eps) {
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  const __m256 vs = _mm256_set1_ps(scale);
  int64_t i = 0;
  if (w != nullptr) {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(
          y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
    }
    for (; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; ++i) y[i] = x[i] * scale;
  }
}

void RmsNormAvx2(const float* x, const float* w, float* y, int64_t n, float eps) {
  ScaleAvx2(x, w, y, n, SumSquaresAvx2<false>(const_cast<float*>(x), nullptr, n), eps);
}

void AddRmsNormAvx2(float* x, const float* add, const float* w, float* y, int64_t n, float eps) {
  ScaleAvx2(x, w, y, n, SumSquaresAvx2<true>(x, add, n), eps);
}

void F32ToF16Avx2(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

}  // namespace uf::kernels::internal
