// AVX2 kernels for MXFP4 weights (blocks.h BlockMxfp4) against the tier's Q8_0-family
// activations (packed.h ActQ8_0): the tile kernel (packed.h TileMxfp4, the form Matrix::Create
// packs) and a row kernel over the GGUF blocks for matrices created under another tier. Both
// use the integers and scales of the scalar DotMxfp4 (doubled E2M1 values, half the E8M0 scale
// times the activation scale per block), so results differ from it only in the order of float
// additions.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/avx2.h"
#include "kernels/avx2_rows.h"
#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/mxfp4_rows.h"
#include "kernels/packed.h"

namespace uf::kernels {
namespace {

#define UF_UNROLL _Pragma("GCC unroll 16")

// ---------------------------------------------------------------------------------------------
// GGUF rows: one vpshufb maps a block's 32 codes to their doubled values as int8; vpmaddubsw
// takes |w| (u8) against the activations with w's sign applied (vpsignb).

// Codes of one block in value order: the low nibbles (values 0..15) then the high (16..31).
inline __m256i Codes(const BlockMxfp4& b) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// out[r * NT + t] = row w[r] . activations act[t], for NR rows and NT tokens: each block of the
// NR rows is decoded once and each activation load serves all NR rows (independent accumulator
// chains). NR x NT is at most 4 (16 ymm registers: NR weights, NR x NT accumulators, temps).
template <int NR, int NT>
void RowsMxfp4(const BlockMxfp4* const* w, int64_t nb, const ActQ8_0* const* act, float* out) {
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Doubled)));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NR][NT];
  UF_UNROLL
  for (int r = 0; r < NR; ++r) {
    UF_UNROLL
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i v[NR];
    float dw[NR];
    UF_UNROLL
    for (int r = 0; r < NR; ++r) {
      v[r] = _mm256_shuffle_epi8(table, Codes(w[r][b]));  // signed doubled values
      dw[r] = E8M0Half(w[r][b].e);
    }
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_0& a = act[t][b];
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
      UF_UNROLL
      for (int r = 0; r < NR; ++r) {
        // |v| (<= 12, as u8) times a * sign(v) (0 where v is 0); |a| <= 127, so the negation
        // cannot overflow, and pairs stay within |2 * 12 * 127| = 3048, far inside i16.
        const __m256i mag = _mm256_sign_epi8(v[r], v[r]);
        const __m256i s = _mm256_sign_epi8(q, v[r]);
        const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(mag, s), ones);
        // dw * a.d: the same f32 product as the scalar reference's per-block scale.
        acc[r][t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(dw[r] * a.d), acc[r][t]);
      }
    }
  }
  UF_UNROLL
  for (int r = 0; r < NR; ++r) {
    UF_UNROLL
    for (int t = 0; t < NT; ++t) out[r * NT + t] = HorizontalSum(acc[r][t]);
  }
}

template <int NR, int NT>
void Run(const GemmTask& t, int64_t nb, int64_t r0, int64_t t0) {
  RunMxfp4Rows<NR, NT, RowsMxfp4<NR, NT>>(t, nb, r0, t0);
}

// ---------------------------------------------------------------------------------------------
// Tiles (packed.h TileMxfp4), read as two halves of 8 rows: a 256-bit register holds 4 code bytes
// of each of 8 rows. The codes map to their doubled values plus 12 (0..24, u8 for vpmaddubsw);
// -12 * sum(a), from the activation's bias (-128 * sum(a)), removes the offset exactly.

inline __m256i Bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Half scales 2^(e - 128) of 8 rows, exact: the f32 bits (e - 1) << 23 for e >= 2, and the
// subnormals 2^-128, 2^-127 (0x00200000 << e) for e = 0, 1.
inline __m256 HalfScales8(const uint8_t* e) {
  int64_t v;
  std::memcpy(&v, e, 8);
  const __m256i e32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e32, _mm256_set1_epi32(1)), 23);
  const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e32);
  const __m256i is_normal = _mm256_cmpgt_epi32(e32, _mm256_set1_epi32(1));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(sub, normal, is_normal));
}

template <int NT>
void HalfTile(const TileMxfp4* tiles, int64_t nb, int h, const ActQ8_0* const* act, __m256* acc) {
  alignas(16) int8_t offset[16];
  for (int i = 0; i < 16; ++i) offset[i] = static_cast<int8_t>(kMxfp4Doubled[i] + 12);
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(offset)));
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const TileMxfp4& tl = tiles[b];
    __m256i lo[4], hi[4];
    UF_UNROLL
    for (int k = 0; k < 4; ++k) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tl.qs[k][8 * h]));
      lo[k] = _mm256_shuffle_epi8(table, _mm256_and_si256(x, nibble));
      hi[k] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble));
    }
    const __m256 dw = HalfScales8(tl.e + 8 * h);
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_0& a = act[t][b];
      // Pairs <= 2 * 24 * 127 = 6096: four of them sum in i16 (24384) before widening.
      __m256i sl = _mm256_maddubs_epi16(lo[0], Bcast4(a.qs));
      __m256i sh = _mm256_maddubs_epi16(hi[0], Bcast4(a.qs + 16));
      UF_UNROLL
      for (int k = 1; k < 4; ++k) {
        sl = _mm256_add_epi16(sl, _mm256_maddubs_epi16(lo[k], Bcast4(a.qs + 4 * k)));
        sh = _mm256_add_epi16(sh, _mm256_maddubs_epi16(hi[k], Bcast4(a.qs + 16 + 4 * k)));
      }
      const __m256i s = _mm256_add_epi32(
          _mm256_add_epi32(_mm256_madd_epi16(sl, ones), _mm256_madd_epi16(sh, ones)),
          _mm256_set1_epi32(a.bias / 128 * 12));
      // dw * a.d: the same f32 product as the scalar reference's per-block scale.
      acc[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(a.d)), acc[t]);
    }
  }
}

template <int NT>
void RunHalf(const GemmTask& t, const TileMxfp4* tiles, int64_t nb, int64_t row, int h,
             int64_t t0) {
  const ActQ8_0* act[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) {
    act[i] = reinterpret_cast<const ActQ8_0*>(t.act + (t0 + i) * t.act_row_bytes);
  }
  __m256 acc[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) acc[i] = _mm256_setzero_ps();
  HalfTile<NT>(tiles, nb, h, act, acc);
  const int64_t r = row + 8 * h;
  const int64_t valid = std::min<int64_t>(8, t.ldy - r);
  for (int i = 0; i < NT; ++i) StoreRows8(t.y + (t0 + i) * t.ldy + r, acc[i], valid);
}

}  // namespace

// Per 16-row tile, each 8-row half against the tokens in groups of 4, 2, 1 (the half stays in
// L1 for the next group). r0 is a multiple of 16 (MatMulTask's row alignment).
void GemmMxfp4TilesAvx2(const GemmTask& t, int64_t r0, int64_t r1) {
  const int64_t nb = t.cols / kQKMxfp4;
  const size_t tile_row_bytes = kTileRows * t.w_row_bytes;
  for (int64_t row = r0; row < r1; row += kTileRows) {
    const auto* tiles = reinterpret_cast<const TileMxfp4*>(t.w + row / kTileRows * tile_row_bytes);
    for (int h = 0; h < 2 && row + 8 * h < r1; ++h) {
      int64_t t0 = 0;
      for (; t0 + 4 <= t.n_tokens; t0 += 4) RunHalf<4>(t, tiles, nb, row, h, t0);
      for (; t0 + 2 <= t.n_tokens; t0 += 2) RunHalf<2>(t, tiles, nb, row, h, t0);
      for (; t0 < t.n_tokens; ++t0) RunHalf<1>(t, tiles, nb, row, h, t0);
    }
  }
}

// Decode (fewer than 4 tokens): 4 rows at a time, token by token (the 4 rows stay in L1).
// Batches: one row at a time against groups of 4 tokens. Used only for matrices created under
// another tier (tests); not tuned.
void GemmMxfp4Avx2(const GemmTask& t, int64_t r0, int64_t r1) {
  const int64_t nb = t.cols / kQKMxfp4;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    int64_t t0 = 0;
    for (; t0 + 4 <= t.n_tokens; t0 += 4) {
      for (int i = 0; i < 4; ++i) Run<1, 4>(t, nb, r + i, t0);
    }
    for (; t0 < t.n_tokens; ++t0) Run<4, 1>(t, nb, r, t0);
  }
  for (; r < r1; ++r) {
    int64_t t0 = 0;
    for (; t0 + 4 <= t.n_tokens; t0 += 4) Run<1, 4>(t, nb, r, t0);
    for (; t0 < t.n_tokens; ++t0) Run<1, 1>(t, nb, r, t0);
  }
}

}  // namespace uf::kernels
