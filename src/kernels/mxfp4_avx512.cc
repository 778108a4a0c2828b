// AVX-512 (BW/VL/DQ/VNNI) kernels for MXFP4 weights (blocks.h BlockMxfp4), read as GGUF rows (no
// tile layout yet) against the tier's Q8_0-family activations (packed.h ActQ8_0). Two blocks per
// 512-bit register: vpshufb (one 16-entry table per 128-bit lane) maps the E2M1 codes to their
// doubled values as int8 (kMxfp4Doubled), vpdpbusd takes |w| (u8) against the activations with
// w's sign applied (a masked negation), and each block's i32 sums are scaled by half the E8M0
// scale times the activation scale: the integers and scales of the scalar DotMxfp4, so results
// differ from it only in the order of float additions.
// GCC 12 reports false -Wuninitialized inside its own AVX-512 intrinsic headers (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/avx512.h"
#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/packed.h"

namespace uf::kernels {
namespace {

#define UF_UNROLL _Pragma("GCC unroll 16")

// Codes of one block in value order: the low nibbles (values 0..15) then the high (16..31).
inline __m256i Codes(const BlockMxfp4& b) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

inline __m256i LoadActQs(const ActQ8_0& a) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
}

// out[r * NT + t] = row w[r] . activations act[t], for NR rows and NT tokens: each pair of
// blocks of the NR rows is decoded once and each activation load serves all NR rows (the
// NR x NT accumulator chains are independent, hiding the dpbusd -> fma latency).
template <int NR, int NT>
void RowsMxfp4(const BlockMxfp4* const* w, int64_t nb, const ActQ8_0* const* act, float* out) {
  const __m128i table128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Doubled));
  const __m512i table = _mm512_broadcast_i32x4(table128);
  const __m256i table256 = _mm256_broadcastsi128_si256(table128);
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[NR][NT];
  UF_UNROLL
  for (int r = 0; r < NR; ++r) {
    UF_UNROLL
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    __m512i mag[NR];
    __mmask64 neg[NR];
    __m512 dw[NR];
    UF_UNROLL
    for (int r = 0; r < NR; ++r) {
      const __m512i codes =
          _mm512_inserti64x4(_mm512_castsi256_si512(Codes(w[r][b])), Codes(w[r][b + 1]), 1);
      const __m512i v = _mm512_shuffle_epi8(table, codes);  // signed doubled values
      mag[r] = _mm512_abs_epi8(v);                          // |v| <= 12, as u8
      neg[r] = _mm512_movepi8_mask(v);
      dw[r] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(E8M0Half(w[r][b].e))),
                                 _mm256_set1_ps(E8M0Half(w[r][b + 1].e)), 1);
    }
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_0& a0 = act[t][b];
      const ActQ8_0& a1 = act[t][b + 1];
      const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(LoadActQs(a0)), LoadActQs(a1), 1);
      const __m512 da =
          _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(a0.d)), _mm256_set1_ps(a1.d), 1);
      UF_UNROLL
      for (int r = 0; r < NR; ++r) {
        // a * sign(v); |a| <= 127, so the negation cannot overflow.
        const __m512i s = _mm512_mask_sub_epi8(a, neg[r], zero, a);
        const __m512i sums = _mm512_dpbusd_epi32(zero, mag[r], s);
        // dw * da: the same f32 product as the scalar reference's per-block scale.
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(dw[r], da), acc[r][t]);
      }
    }
  }
  if (b < nb) {  // odd block count: the last block at 256 bits
    UF_UNROLL
    for (int r = 0; r < NR; ++r) {
      const __m256i v = _mm256_shuffle_epi8(table256, Codes(w[r][b]));
      const __m256i mag = _mm256_abs_epi8(v);
      const __mmask32 neg = _mm256_movepi8_mask(v);
      const float dw = E8M0Half(w[r][b].e);
      UF_UNROLL
      for (int t = 0; t < NT; ++t) {
        const ActQ8_0& a = act[t][b];
        const __m256i q = LoadActQs(a);
        const __m256i s = _mm256_mask_sub_epi8(q, neg, _mm256_setzero_si256(), q);
        const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), mag, s);
        const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(dw * a.d));
        acc[r][t] = _mm512_add_ps(acc[r][t], _mm512_zextps256_ps512(f));
      }
    }
  }
  UF_UNROLL
  for (int r = 0; r < NR; ++r) {
    UF_UNROLL
    for (int t = 0; t < NT; ++t) out[r * NT + t] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

template <int NR, int NT>
void Run(const GemmTask& t, int64_t nb, int64_t r0, int64_t t0) {
  const BlockMxfp4* w[NR];
  UF_UNROLL
  for (int r = 0; r < NR; ++r) {
    w[r] = reinterpret_cast<const BlockMxfp4*>(t.w + (r0 + r) * t.w_row_bytes);
  }
  const ActQ8_0* act[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) {
    act[i] = reinterpret_cast<const ActQ8_0*>(t.act + (t0 + i) * t.act_row_bytes);
  }
  float out[NR * NT];
  RowsMxfp4<NR, NT>(w, nb, act, out);
  for (int r = 0; r < NR; ++r) {
    for (int i = 0; i < NT; ++i) t.y[(t0 + i) * t.ldy + r0 + r] = out[r * NT + i];
  }
}

// All tokens for NR rows from r0, in groups of 4, 2 and 1.
template <int NR>
void RunRows(const GemmTask& t, int64_t nb, int64_t r0) {
  int64_t t0 = 0;
  for (; t0 + 4 <= t.n_tokens; t0 += 4) Run<NR, 4>(t, nb, r0, t0);
  if (t0 + 2 <= t.n_tokens) {
    Run<NR, 2>(t, nb, r0, t0);
    t0 += 2;
  }
  if (t0 < t.n_tokens) Run<NR, 1>(t, nb, r0, t0);
}

}  // namespace

// Rows in groups of 4 (the rows stay in L1 across the token groups). Not tuned further: no
// tiles, no prefetch.
void GemmMxfp4Avx512(const GemmTask& t, int64_t r0, int64_t r1) {
  const int64_t nb = t.cols / kQKMxfp4;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) RunRows<4>(t, nb, r);
  for (; r < r1; ++r) RunRows<1>(t, nb, r);
}

}  // namespace uf::kernels
