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

// out[t] = row w . activations act[t], for NT tokens sharing each decoded pair of blocks.
template <int NT>
void RowMxfp4(const BlockMxfp4* w, int64_t nb, const ActQ8_0* const* act, float* out) {
  const __m128i table128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Doubled));
  const __m512i table = _mm512_broadcast_i32x4(table128);
  const __m256i table256 = _mm256_broadcastsi128_si256(table128);
  __m512 acc[NT];
  UF_UNROLL
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i codes =
        _mm512_inserti64x4(_mm512_castsi256_si512(Codes(w[b])), Codes(w[b + 1]), 1);
    const __m512i v = _mm512_shuffle_epi8(table, codes);  // signed doubled values
    const __m512i mag = _mm512_abs_epi8(v);               // |v| <= 12, as u8
    const __mmask64 neg = _mm512_movepi8_mask(v);
    const __m256 d0 = _mm256_set1_ps(E8M0Half(w[b].e));
    const __m256 d1 = _mm256_set1_ps(E8M0Half(w[b + 1].e));
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_0& a0 = act[t][b];
      const ActQ8_0& a1 = act[t][b + 1];
      const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(LoadActQs(a0)), LoadActQs(a1), 1);
      // a * sign(v); |a| <= 127, so the negation cannot overflow.
      const __m512i s = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
      const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), mag, s);
      const __m512 scale =
          _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_mul_ps(d0, _mm256_set1_ps(a0.d))),
                             _mm256_mul_ps(d1, _mm256_set1_ps(a1.d)), 1);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc[t]);
    }
  }
  if (b < nb) {  // odd block count: the last block at 256 bits
    const __m256i v = _mm256_shuffle_epi8(table256, Codes(w[b]));
    const __m256i mag = _mm256_abs_epi8(v);
    const __mmask32 neg = _mm256_movepi8_mask(v);
    const float dw = E8M0Half(w[b].e);
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_0& a = act[t][b];
      const __m256i q = LoadActQs(a);
      const __m256i s = _mm256_mask_sub_epi8(q, neg, _mm256_setzero_si256(), q);
      const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), mag, s);
      const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(dw * a.d));
      acc[t] = _mm512_add_ps(acc[t], _mm512_zextps256_ps512(f));
    }
  }
  UF_UNROLL
  for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_ps(acc[t]);
}

template <int NT>
void RowTokens(const GemmTask& t, const BlockMxfp4* w, int64_t nb, int64_t r, int64_t t0) {
  const ActQ8_0* act[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) {
    act[i] = reinterpret_cast<const ActQ8_0*>(t.act + (t0 + i) * t.act_row_bytes);
  }
  float out[NT];
  RowMxfp4<NT>(w, nb, act, out);
  for (int i = 0; i < NT; ++i) t.y[(t0 + i) * t.ldy + r] = out[i];
}

}  // namespace

// Row by row, tokens in groups of 4 sharing each decoded pair of blocks (the row stays in L1 for
// the next group). Not tuned: no tiles, no prefetch, one accumulator chain per token.
void GemmMxfp4Avx512(const GemmTask& t, int64_t r0, int64_t r1) {
  const int64_t nb = t.cols / kQKMxfp4;
  for (int64_t r = r0; r < r1; ++r) {
    const BlockMxfp4* w = reinterpret_cast<const BlockMxfp4*>(t.w + r * t.w_row_bytes);
    int64_t t0 = 0;
    for (; t0 + 4 <= t.n_tokens; t0 += 4) RowTokens<4>(t, w, nb, r, t0);
    for (; t0 < t.n_tokens; ++t0) RowTokens<1>(t, w, nb, r, t0);
  }
}

}  // namespace uf::kernels
