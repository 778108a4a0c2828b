// AVX-512 (BW/VL/DQ/VNNI) kernels for MXFP4 weights (blocks.h BlockMxfp4) against the tier's
// Q8_0-family activations (packed.h ActQ8_0): the tile kernel (packed.h TileMxfp4, the form
// Matrix::Create packs) and a row kernel over the GGUF blocks for matrices created under another
// tier. Both use the integers and scales of the scalar DotMxfp4 (doubled E2M1 values, half the
// E8M0 scale times the activation scale per block), so results differ from it only in the
// order of float additions. vpshufb looks codes up in one 16-entry table per 128-bit lane.
// GCC 12 reports false -Wuninitialized inside its own AVX-512 intrinsic headers (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/avx512.h"
#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/mxfp4_rows.h"
#include "kernels/packed.h"

namespace uf::kernels {
namespace {

#define UF_UNROLL _Pragma("GCC unroll 16")

// GGUF rows, two blocks per 512-bit register: vpdpbusd takes |w| (u8) against the activations
// with w's sign applied (a masked negation).

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
  RunMxfp4Rows<NR, NT, RowsMxfp4<NR, NT>>(t, nb, r0, t0);
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

// ---------------------------------------------------------------------------------------------
// Tiles (packed.h TileMxfp4): one register holds 4 code bytes of each of 16 rows, so vpshufb
// decodes 128 codes at once and each vpdpbusd with a broadcast activation yields 16 row sums.
// The codes map to their doubled values plus 12 (0..24, u8 for vpdpbusd); -12 * sum(a), from
// the activation's bias (-128 * sum(a)), removes the offset exactly.

inline __m512i Bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

template <int NT>
void TileKernel(const TileMxfp4* tiles, int64_t nb, const ActQ8_0* const* act, __m512* acc) {
  alignas(16) int8_t offset[16];
  for (int i = 0; i < 16; ++i) offset[i] = static_cast<int8_t>(kMxfp4Doubled[i] + 12);
  const __m512i table =
      _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(offset)));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t b = 0; b < nb; ++b) {
    const TileMxfp4& tl = tiles[b];
    __m512i lo[4], hi[4];
    UF_UNROLL
    for (int k = 0; k < 4; ++k) {
      const __m512i x = _mm512_loadu_si512(tl.qs[k]);
      lo[k] = _mm512_shuffle_epi8(table, _mm512_and_si512(x, nibble));
      hi[k] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(x, 4), nibble));
    }
    // The 16 rows' half scales 2^(e - 128), exact (vscalefps keeps the subnormal 2^-128 and
    // 2^-127 of e = 0 and 1).
    const __m512 e = _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tl.e))));
    const __m512 dw =
        _mm512_scalef_ps(_mm512_set1_ps(1.0f), _mm512_sub_ps(e, _mm512_set1_ps(128.0f)));
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_0& a = act[t][b];
      // Four short chains (dpbusd latency ~5 cycles); |sum| <= 32 * 24 * 127.
      __m512i s0 = _mm512_dpbusd_epi32(_mm512_set1_epi32(a.bias / 128 * 12), lo[0], Bcast4(a.qs));
      __m512i s1 = _mm512_dpbusd_epi32(zero, lo[2], Bcast4(a.qs + 8));
      __m512i s2 = _mm512_dpbusd_epi32(zero, hi[0], Bcast4(a.qs + 16));
      __m512i s3 = _mm512_dpbusd_epi32(zero, hi[2], Bcast4(a.qs + 24));
      s0 = _mm512_dpbusd_epi32(s0, lo[1], Bcast4(a.qs + 4));
      s1 = _mm512_dpbusd_epi32(s1, lo[3], Bcast4(a.qs + 12));
      s2 = _mm512_dpbusd_epi32(s2, hi[1], Bcast4(a.qs + 20));
      s3 = _mm512_dpbusd_epi32(s3, hi[3], Bcast4(a.qs + 28));
      const __m512i s = _mm512_add_epi32(_mm512_add_epi32(s0, s1), _mm512_add_epi32(s2, s3));
      // dw * a.d: the same f32 product as the scalar reference's per-block scale.
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(a.d)), acc[t]);
    }
  }
}

template <int NT>
void RunTile(const GemmTask& t, const TileMxfp4* tiles, int64_t nb, int64_t row, int64_t t0) {
  const ActQ8_0* act[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) {
    act[i] = reinterpret_cast<const ActQ8_0*>(t.act + (t0 + i) * t.act_row_bytes);
  }
  __m512 acc[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  TileKernel<NT>(tiles, nb, act, acc);
  const int64_t valid = std::min<int64_t>(kTileRows, t.ldy - row);
  const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1);
  UF_UNROLL
  for (int i = 0; i < NT; ++i) _mm512_mask_storeu_ps(t.y + (t0 + i) * t.ldy + row, mask, acc[i]);
}

}  // namespace

// Groups of 4 row tiles x up to 8 tokens: a group's weights stay in L2 while the token groups
// pass over them. r0 is a multiple of 16 (MatMulTask's row alignment).
void GemmMxfp4TilesAvx512(const GemmTask& t, int64_t r0, int64_t r1) {
  const int64_t nb = t.cols / kQKMxfp4;
  const size_t tile_row_bytes = kTileRows * t.w_row_bytes;
  constexpr int64_t kGroupRows = 4 * kTileRows;
  for (int64_t g0 = r0; g0 < r1; g0 += kGroupRows) {
    const int64_t g1 = std::min(r1, g0 + kGroupRows);
    for (int64_t t0 = 0; t0 < t.n_tokens;) {
      const int64_t nt = std::min<int64_t>(8, t.n_tokens - t0);
      for (int64_t row = g0; row < g1; row += kTileRows) {
        const auto* tiles =
            reinterpret_cast<const TileMxfp4*>(t.w + row / kTileRows * tile_row_bytes);
        switch (nt) {
          case 8:
            RunTile<8>(t, tiles, nb, row, t0);
            break;
          case 7:
            RunTile<7>(t, tiles, nb, row, t0);
            break;
          case 6:
            RunTile<6>(t, tiles, nb, row, t0);
            break;
          case 5:
            RunTile<5>(t, tiles, nb, row, t0);
            break;
          case 4:
            RunTile<4>(t, tiles, nb, row, t0);
            break;
          case 3:
            RunTile<3>(t, tiles, nb, row, t0);
            break;
          case 2:
            RunTile<2>(t, tiles, nb, row, t0);
            break;
          default:
            RunTile<1>(t, tiles, nb, row, t0);
            break;
        }
      }
      t0 += nt;
    }
  }
}

// Rows in groups of 4 (the rows stay in L1 across the token groups). Used only for matrices
// created under another tier (tests); not tuned.
void GemmMxfp4Avx512(const GemmTask& t, int64_t r0, int64_t r1) {
  const int64_t nb = t.cols / kQKMxfp4;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) RunRows<4>(t, nb, r);
  for (; r < r1; ++r) RunRows<1>(t, nb, r);
}

}  // namespace uf::kernels
