// AVX2+FMA attention loops and softmax (compiled with -mavx2 -mfma; called only when the CPU
// has them).
#include <immintrin.h>

#include <cmath>

#include "kernels/avx2.h"
#include "kernels/blocks.h"
#include "kernels/ops.h"

namespace uf::kernels::internal {

void SoftmaxInPlaceAvx2(float* x, int64_t n, float scale) {
  const int64_t n8 = n & ~int64_t{7};
  const __m256 vs = _mm256_set1_ps(scale);
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    _mm256_storeu_ps(x + i, v);
    vmax = _mm256_max_ps(vmax, v);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  float max = _mm_cvtss_f32(m4);
  for (int64_t i = n8; i < n; ++i) {
    x[i] *= scale;
    max = std::fmax(max, x[i]);
  }
  // The sum in double, as the scalar version and the reference engine keep it.
  const __m256 vm = _mm256_set1_ps(max);
  __m256d sum0 = _mm256_setzero_pd(), sum1 = _mm256_setzero_pd();
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    sum0 = _mm256_add_pd(sum0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    sum1 = _mm256_add_pd(sum1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(sum0, sum1));
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (int64_t i = n8; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
  for (int64_t i = 0; i < n8; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  for (int64_t i = n8; i < n; ++i) x[i] *= static_cast<float>(1.0 / sum);
}

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

namespace {

// 8 values of a cached row as f32: F32 rows as they are, F16 rows widened exactly (F16C).
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float Widen(float x) { return x; }
inline float Widen(uint16_t x) { return _cvtsh_ss(x); }

// Scores of 8 rows at once (d a multiple of 8): one accumulator per row, then a transposing
// reduction (3 levels of vhaddps and a lane fold) gives all 8 sums in one register. Reducing
// each row on its own took ~6 operations per score, as many as the 8 FMAs of a 64-wide head.
template <typename T>
inline void Dot8Rows(const float* q, const T* k, int64_t d, float* scores) {
  __m256 a[8];
  for (int r = 0; r < 8; ++r) a[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < d; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(qv, Load8(k + r * d + i), a[r]);
  }
  const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  // Lane l of h0123: row (l & 3) partial sums of the 128-bit half l / 4; likewise h4567.
  const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
  const __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
  const __m256 hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
  _mm256_storeu_ps(scores, _mm256_add_ps(lo, hi));
}

// out[0, 8N) += sum_s w[s] * v[s * d + ...]: N independent accumulators, one per 8 columns.
// One accumulator per 8 columns walked over all rows before the next made every FMA wait for
// the previous one (4 cycles each, against 2 per cycle when independent).
template <int N, typename T>
inline void AxpyColumns(const float* w, const T* v, int64_t m, int64_t d, float* out) {
  __m256 acc[N];
#pragma GCC unroll 8
  for (int j = 0; j < N; ++j) acc[j] = _mm256_loadu_ps(out + 8 * j);
  for (int64_t s = 0; s < m; ++s) {
    const __m256 ws = _mm256_set1_ps(w[s]);
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) {
      acc[j] = _mm256_fmadd_ps(ws, Load8(v + s * d + 8 * j), acc[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < N; ++j) _mm256_storeu_ps(out + 8 * j, acc[j]);
}

template <typename T>
void DotRowsT(const float* q, const T* k, int64_t m, int64_t d, float* scores) {
  int64_t s = 0;
  if (d % 8 == 0) {
    for (; s + 8 <= m; s += 8) Dot8Rows(q, k + s * d, d, scores + s);
  }
  const int64_t d8 = d & ~int64_t{7};
  for (; s < m; ++s) {
    const T* kr = k + s * d;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= d8; i += 16) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), Load8(kr + i), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), Load8(kr + i + 8), a1);
    }
    if (i < d8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), Load8(kr + i), a0);
    float sum = HorizontalSum(_mm256_add_ps(a0, a1));
    for (i = d8; i < d; ++i) sum += q[i] * Widen(kr[i]);
    scores[s] = sum;
  }
}

template <typename T>
void AxpyRowsT(const float* w, const T* v, int64_t m, int64_t d, float* out) {
  const int64_t d8 = d & ~int64_t{7};
  int64_t i = 0;
  for (; i + 64 <= d8; i += 64) AxpyColumns<8>(w, v + i, m, d, out + i);
  // The last 8-56 columns in blocks of 32, 16 and 8.
  if (i + 32 <= d8) {
    AxpyColumns<4>(w, v + i, m, d, out + i);
    i += 32;
  }
  if (i + 16 <= d8) {
    AxpyColumns<2>(w, v + i, m, d, out + i);
    i += 16;
  }
  if (i + 8 <= d8) AxpyColumns<1>(w, v + i, m, d, out + i);
  for (i = d8; i < d; ++i) {
    float acc = out[i];
    for (int64_t s = 0; s < m; ++s) acc += w[s] * Widen(v[s * d + i]);
    out[i] = acc;
  }
}

}  // namespace

void DotRowsAvx2(const float* q, const float* k, int64_t m, int64_t d, float* scores) {
  DotRowsT(q, k, m, d, scores);
}
void AxpyRowsAvx2(const float* w, const float* v, int64_t m, int64_t d, float* out) {
  AxpyRowsT(w, v, m, d, out);
}
void DotRowsF16Avx2(const float* q, const uint16_t* k, int64_t m, int64_t d, float* scores) {
  DotRowsT(q, k, m, d, scores);
}
void AxpyRowsF16Avx2(const float* w, const uint16_t* v, int64_t m, int64_t d, float* out) {
  AxpyRowsT(w, v, m, d, out);
}

void RmsNormAvx2(const float* x, const float* w, float* y, int64_t n, float eps) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256d x0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    const __m256d x1 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    const __m256d x2 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 8));
    const __m256d x3 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 12));
    a0 = _mm256_fmadd_pd(x0, x0, a0);
    a1 = _mm256_fmadd_pd(x1, x1, a1);
    a2 = _mm256_fmadd_pd(x2, x2, a2);
    a3 = _mm256_fmadd_pd(x3, x3, a3);
  }
  const __m256d a = _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  const __m256 vs = _mm256_set1_ps(scale);
  i = 0;
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

// 8 int8 of a q8_0 block as floats.
inline __m256 Int8x8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

void DotRowsQ8_0Avx2(const float* q, const void* k, int64_t m, int64_t d, float* scores) {
  const auto* rows = static_cast<const BlockQ8_0*>(k);
  const int64_t nb = d / kQK8_0;
  for (int64_t s = 0; s < m; ++s) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_0& blk = rows[s * nb + b];
      const float* qb = q + b * kQK8_0;
      __m256 t0 = _mm256_mul_ps(_mm256_loadu_ps(qb), Int8x8(blk.qs));
      __m256 t1 = _mm256_mul_ps(_mm256_loadu_ps(qb + 8), Int8x8(blk.qs + 8));
      t0 = _mm256_fmadd_ps(_mm256_loadu_ps(qb + 16), Int8x8(blk.qs + 16), t0);
      t1 = _mm256_fmadd_ps(_mm256_loadu_ps(qb + 24), Int8x8(blk.qs + 24), t1);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(blk.d)), _mm256_add_ps(t0, t1), acc);
    }
    scores[s] = HorizontalSum(acc);
  }
}

void AxpyRowsQ8_0Avx2(const float* w, const void* v, int64_t m, int64_t d, float* out) {
  const auto* rows = static_cast<const BlockQ8_0*>(v);
  const int64_t nb = d / kQK8_0;
  // One 32-column block at a time, its 4 accumulators kept over all rows.
  for (int64_t b = 0; b < nb; ++b) {
    float* ob = out + b * kQK8_0;
    __m256 a0 = _mm256_loadu_ps(ob), a1 = _mm256_loadu_ps(ob + 8);
    __m256 a2 = _mm256_loadu_ps(ob + 16), a3 = _mm256_loadu_ps(ob + 24);
    for (int64_t s = 0; s < m; ++s) {
      const BlockQ8_0& blk = rows[s * nb + b];
      const __m256 ws = _mm256_set1_ps(w[s] * _cvtsh_ss(blk.d));
      a0 = _mm256_fmadd_ps(ws, Int8x8(blk.qs), a0);
      a1 = _mm256_fmadd_ps(ws, Int8x8(blk.qs + 8), a1);
      a2 = _mm256_fmadd_ps(ws, Int8x8(blk.qs + 16), a2);
      a3 = _mm256_fmadd_ps(ws, Int8x8(blk.qs + 24), a3);
    }
    _mm256_storeu_ps(ob, a0);
    _mm256_storeu_ps(ob + 8, a1);
    _mm256_storeu_ps(ob + 16, a2);
    _mm256_storeu_ps(ob + 24, a3);
  }
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
