// AVX-512 (F/BW/VL/DQ/VNNI) kernels for the quantized weight types, reading 16-row tiles
// (packed.h). Each int8 dot (vpdpbusd) multiplies 4 weight bytes of each of 16 rows with 4
// broadcast activation bytes, so a 512-bit accumulator holds 16 row sums; scales are applied
// once per block for 16 rows. Several tokens share each unpacked weight register (prefill).
// GCC 12 reports false -Wuninitialized inside its own AVX-512 intrinsic headers (GCC PR 105593);
// the pragmas must precede the header to cover it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/avx512.h"
#include "kernels/dispatch.h"
#include "kernels/packed.h"

namespace uf::kernels {
namespace {

// Small fixed-trip loops over registers must be unrolled, or the compiler keeps the register
// arrays in memory.
#define UF_UNROLL _Pragma("GCC unroll 16")

inline __m512i Bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

inline __m512i Load(const void* p) { return _mm512_loadu_si512(p); }

inline __m512 LoadHalf16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Software prefetch in the K-quant kernels: only Q4_K's one-token path, which requests the next
// tile a quarter per group of the current one (9 lines at a time, 2.3 KiB ahead).
// - On the Zen 4 VM this project first measured on, kernels_bench --threads=1 --clock=cpu on
//   768x2048 / 2048x768 matrices (the experts of Qwen3-30B-A3B) streamed Q6_K at 0.41-0.44 of
//   the read bandwidth with a request for the tile two tiles ahead at the top of each tile and
//   0.87-0.88 without (4096x4096: 0.45 -> 0.85; its 53 requests at once stall on the core's miss
//   buffers); Q4_K at 0.77-0.83 with it and 0.80-0.83 without. Per-line requests tied to each
//   load, as the AVX2 tier makes, gave Q6_K 0.48-0.56 and Q4_K 0.57-0.66.
// - On the Intel (AVX-512 VNNI/BF16, AMX) VM of 2026-12-05, Q4_K with the next tile requested a
//   quarter per group: medians of 5 alternating rounds 0.90-0.91 -> 0.98-1.00 at 1 thread (CPU
//   clock; 768x2048, 2048x768, 4096x4096; above 1 where the probe pass ran slow) and 0.84-0.86
//   -> 0.92-0.93 at 2 threads (docs/models.md, MoE speed). The same for Q6_K (the next tile, a
//   quarter per (h, quad); 2 threads) took 4096x4096 from 0.79-0.84 to ~0.90 but 2048x768 from
//   0.76-0.80 to 0.70-0.75, and a cut-down Qwen3-30B-A3B decode 5% slower (its output matrix): Q6_K
//   has none. The Q4_K requests are not measured on Zen 4 yet (its hardware prefetcher kept up
//   alone there).

// A prefetch the compiler keeps where it is written: GCC gathered the 36 _mm_prefetch of a
// Q4_K tile at its top, which streamed 4096x4096 at 0.71 of the read bandwidth (2 runs of 3)
// against 1.01-1.06 spread over the tile (a volatile asm is not moved past the loads around it).
inline void PrefetchInPlace(const char* p) { asm volatile("prefetcht0 %0" : : "m"(*p)); }

// c ? a : b, bitwise.
inline __m512i Select(__m512i c, __m512i a, __m512i b) {
  return _mm512_ternarylogic_epi32(a, b, c, 0xE4);
}

// ---------------------------------------------------------------------------------------------
// Q4_0: nibbles as u8; the high nibbles are used in place (x & 0xF0 = 16 * w), so their sum
// is 16x and is shifted back after the bias -128 * sum(a) = 16 * (-8 * sum(a)) is added.

template <int NT>
void RowTileQ4_0(const TileQ4_0* tiles, int64_t nb, const ActQ8_0* const* act, __m512* acc) {
  const __m512i lo_mask = _mm512_set1_epi8(0x0F);
  const __m512i hi_mask = _mm512_set1_epi8(static_cast<char>(0xF0));
  for (int64_t b = 0; b < nb; ++b) {
    const TileQ4_0& tl = tiles[b];
    __m512i lo[4], hi[4];
    UF_UNROLL
    for (int k = 0; k < 4; ++k) {
      const __m512i x = Load(tl.qs[k]);
      lo[k] = _mm512_and_si512(x, lo_mask);
      hi[k] = _mm512_and_si512(x, hi_mask);
    }
    const __m512 dw = LoadHalf16(tl.d);
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_0& a = act[t][b];
      const __m512i zero = _mm512_setzero_si512();
      __m512i sl, sh;
      if constexpr (NT >= 4) {
        // Enough tokens in flight to hide dpbusd latency (~5 cycles) with two chains per token;
        // at batch 8 the kernel is bound by instruction throughput, and this saves 2 adds of
        // ~26 operations per token and block.
        sl = _mm512_dpbusd_epi32(zero, lo[0], Bcast4(a.qs + 0));
        sh = _mm512_dpbusd_epi32(_mm512_set1_epi32(a.bias), hi[0], Bcast4(a.qs + 16));
        UF_UNROLL
        for (int k = 1; k < 4; ++k) {
          sl = _mm512_dpbusd_epi32(sl, lo[k], Bcast4(a.qs + 4 * k));
          sh = _mm512_dpbusd_epi32(sh, hi[k], Bcast4(a.qs + 16 + 4 * k));
        }
      } else {
        // Four short dependency chains rather than two long ones: dpbusd latency is ~5 cycles.
        __m512i sl0 = _mm512_dpbusd_epi32(zero, lo[0], Bcast4(a.qs + 0));
        __m512i sl1 = _mm512_dpbusd_epi32(zero, lo[2], Bcast4(a.qs + 8));
        __m512i sh0 = _mm512_dpbusd_epi32(_mm512_set1_epi32(a.bias), hi[0], Bcast4(a.qs + 16));
        __m512i sh1 = _mm512_dpbusd_epi32(zero, hi[2], Bcast4(a.qs + 24));
        sl0 = _mm512_dpbusd_epi32(sl0, lo[1], Bcast4(a.qs + 4));
        sl1 = _mm512_dpbusd_epi32(sl1, lo[3], Bcast4(a.qs + 12));
        sh0 = _mm512_dpbusd_epi32(sh0, hi[1], Bcast4(a.qs + 20));
        sh1 = _mm512_dpbusd_epi32(sh1, hi[3], Bcast4(a.qs + 28));
        sl = _mm512_add_epi32(sl0, sl1);
        sh = _mm512_add_epi32(sh0, sh1);
      }
      const __m512i s = _mm512_add_epi32(sl, _mm512_srai_epi32(sh, 4));
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(a.d)), acc[t]);
    }
  }
}

// Q8_0: weights stored as u8 = w + 128; the bias -128 * sum(a) removes the offset.
template <int NT>
void RowTileQ8_0(const TileQ8_0* tiles, int64_t nb, const ActQ8_0* const* act, __m512* acc) {
  for (int64_t b = 0; b < nb; ++b) {
    const TileQ8_0& tl = tiles[b];
    __m512i w[8];
    UF_UNROLL
    for (int k = 0; k < 8; ++k) w[k] = Load(tl.qs[k]);
    const __m512 dw = LoadHalf16(tl.d);
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_0& a = act[t][b];
      const __m512i zero = _mm512_setzero_si512();
      __m512i s;
      if constexpr (NT >= 4) {
        // Two chains per token suffice with 4+ tokens in flight (see RowTileQ4_0).
        __m512i s0 = _mm512_dpbusd_epi32(_mm512_set1_epi32(a.bias), w[0], Bcast4(a.qs + 0));
        __m512i s1 = _mm512_dpbusd_epi32(zero, w[1], Bcast4(a.qs + 4));
        UF_UNROLL
        for (int k = 2; k < 8; k += 2) {
          s0 = _mm512_dpbusd_epi32(s0, w[k], Bcast4(a.qs + 4 * k));
          s1 = _mm512_dpbusd_epi32(s1, w[k + 1], Bcast4(a.qs + 4 * k + 4));
        }
        s = _mm512_add_epi32(s0, s1);
      } else {
        __m512i s0 = _mm512_dpbusd_epi32(_mm512_set1_epi32(a.bias), w[0], Bcast4(a.qs + 0));
        __m512i s1 = _mm512_dpbusd_epi32(zero, w[2], Bcast4(a.qs + 8));
        __m512i s2 = _mm512_dpbusd_epi32(zero, w[4], Bcast4(a.qs + 16));
        __m512i s3 = _mm512_dpbusd_epi32(zero, w[6], Bcast4(a.qs + 24));
        s0 = _mm512_dpbusd_epi32(s0, w[1], Bcast4(a.qs + 4));
        s1 = _mm512_dpbusd_epi32(s1, w[3], Bcast4(a.qs + 12));
        s2 = _mm512_dpbusd_epi32(s2, w[5], Bcast4(a.qs + 20));
        s3 = _mm512_dpbusd_epi32(s3, w[7], Bcast4(a.qs + 28));
        s = _mm512_add_epi32(_mm512_add_epi32(s0, s1), _mm512_add_epi32(s2, s3));
      }
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(a.d)), acc[t]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Q4_K. Per row: d * sum_j sc_j * <q_j, a_j> - dmin * sum_j m_j * B_j over 8 sub-blocks of 32.
// The 6-bit scales/mins are unpacked per lane from the 3 packed dwords; the min term is two
// int8 dots of the u8 mins with B_j split as 64 * hi + lo (ActQ8_K).

constexpr int kQ4KPrefetchBytes = sizeof(TileQ4_K) / 4;
static_assert(kQ4KPrefetchBytes % 64 == 0);

template <int NT>
void RowTileQ4_K(const TileQ4_K* tiles, int64_t nb, const ActQ8_K* const* act, __m512* acc) {
  const __m512i lo_mask = _mm512_set1_epi8(0x0F);
  const __m512i hi_mask = _mm512_set1_epi8(static_cast<char>(0xF0));
  const __m512i six_bits = _mm512_set1_epi8(0x3F);
  const __m512i top_bits = _mm512_set1_epi8(static_cast<char>(0xC0));
  // Byte k of each dword, zero-extended to the dword (vpshufb index, 0x80 = zero).
  __m512i byte_of[4];
  UF_UNROLL
  for (int k = 0; k < 4; ++k) {
    const uint32_t idx = 0x80808000u | k;
    byte_of[k] =
        _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(idx)),
                         _mm512_set_epi32(12, 8, 4, 0, 12, 8, 4, 0, 12, 8, 4, 0, 12, 8, 4, 0));
  }
  for (int64_t b = 0; b < nb; ++b) {
    const TileQ4_K& tl = tiles[b];
    const __m512i d0 = Load(tl.scales[0]), d1 = Load(tl.scales[1]), d2 = Load(tl.scales[2]);
    const __m512i sc03 = _mm512_and_si512(d0, six_bits);
    const __m512i m03 = _mm512_and_si512(d1, six_bits);
    const __m512i sc47 = Select(lo_mask, d2, _mm512_srli_epi32(_mm512_and_si512(d0, top_bits), 2));
    const __m512i m47 = Select(lo_mask, _mm512_srli_epi32(d2, 4),
                               _mm512_srli_epi32(_mm512_and_si512(d1, top_bits), 2));
    __m512i isum[NT];
    UF_UNROLL
    for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
    UF_UNROLL
    for (int g = 0; g < 4; ++g) {
      if constexpr (NT == 1) {
        // A quarter of the next tile per group (see the note on prefetching above).
        const char* next = reinterpret_cast<const char*>(tiles + b + 1) + g * kQ4KPrefetchBytes;
        UF_UNROLL
        for (int l = 0; l < kQ4KPrefetchBytes / 64; ++l) PrefetchInPlace(next + 64 * l);
      }
      const __m512i sc_lo = _mm512_shuffle_epi8(g < 2 ? sc03 : sc47, byte_of[(2 * g) & 3]);
      const __m512i sc_hi = _mm512_shuffle_epi8(g < 2 ? sc03 : sc47, byte_of[(2 * g + 1) & 3]);
      __m512i lo[8], hi[8];
      UF_UNROLL
      for (int c = 0; c < 8; ++c) {
        const __m512i x = Load(tl.qs[8 * g + c]);
        lo[c] = _mm512_and_si512(x, lo_mask);
        hi[c] = _mm512_and_si512(x, hi_mask);
      }
      UF_UNROLL
      for (int t = 0; t < NT; ++t) {
        const int8_t* q = act[t][b].qs + 64 * g;
        // Four chains of 4 rather than two of 8 (dpbusd latency ~5 cycles).
        __m512i sl0 = _mm512_setzero_si512(), sl1 = sl0, sh0 = sl0, sh1 = sl0;
        UF_UNROLL
        for (int c = 0; c < 8; c += 2) {
          sl0 = _mm512_dpbusd_epi32(sl0, lo[c], Bcast4(q + 4 * c));
          sl1 = _mm512_dpbusd_epi32(sl1, lo[c + 1], Bcast4(q + 4 * c + 4));
          sh0 = _mm512_dpbusd_epi32(sh0, hi[c], Bcast4(q + 32 + 4 * c));
          sh1 = _mm512_dpbusd_epi32(sh1, hi[c + 1], Bcast4(q + 36 + 4 * c));
        }
        const __m512i sl = _mm512_add_epi32(sl0, sl1), sh = _mm512_add_epi32(sh0, sh1);
        // sh is 16x the high-nibble sum; the product stays a multiple of 16.
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(sl, sc_lo));
        isum[t] = _mm512_add_epi32(isum[t], _mm512_srai_epi32(_mm512_mullo_epi32(sh, sc_hi), 4));
      }
    }
    const __m512 dw = LoadHalf16(tl.d);
    const __m512 dmw = LoadHalf16(tl.dmin);
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_K& a = act[t][b];
      __m512i mh = _mm512_dpbusd_epi32(_mm512_setzero_si512(), m03, Bcast4(a.min_hi));
      mh = _mm512_dpbusd_epi32(mh, m47, Bcast4(a.min_hi + 4));
      __m512i ml = _mm512_dpbusd_epi32(_mm512_setzero_si512(), m03, Bcast4(a.min_lo));
      ml = _mm512_dpbusd_epi32(ml, m47, Bcast4(a.min_lo + 4));
      const __m512i mins = _mm512_add_epi32(_mm512_slli_epi32(mh, 6), ml);
      const __m512 da = _mm512_set1_ps(a.d);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, da), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dmw, da), acc[t]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Q6_K. 6-bit values rebuilt from a nibble and 2 high bits; 16 sub-blocks of 16 with int8
// scales. Each sub-block sum starts at -32 * sum(a_j) (ActQ8_K::q6_bias) to remove the offset.

template <int NT>
void RowTileQ6_K(const TileQ6_K* tiles, int64_t nb, const ActQ8_K* const* act, __m512* acc) {
  const __m512i lo_mask = _mm512_set1_epi8(0x0F);
  const __m512i two_bits = _mm512_set1_epi8(0x33);
  for (int64_t b = 0; b < nb; ++b) {
    const TileQ6_K& tl = tiles[b];
    __m512i isum[NT];
    UF_UNROLL
    for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
    UF_UNROLL
    for (int h = 0; h < 2; ++h) {
      UF_UNROLL
      for (int quad = 0; quad < 2; ++quad) {
        // Values 128h + 32v + 4lc + i for v = 0..3, lc in this quad: sub-block 8h + 2v + quad.
        __m512i v[4][4];
        UF_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int lc = 4 * quad + i;
          const __m512i qla = Load(tl.q[8 * h + lc][0]);
          const __m512i qlb = Load(tl.q[8 * h + lc][1]);
          const __m512i qh = Load(tl.q[8 * h + lc][2]);
          const __m512i qhm = _mm512_and_si512(qh, two_bits);  // bits 0-1 and 4-5
          const __m512i qhn = _mm512_and_si512(_mm512_srli_epi32(qh, 2), two_bits);
          v[0][i] = Select(lo_mask, qla, _mm512_slli_epi32(qhm, 4));
          v[1][i] = Select(lo_mask, qlb, _mm512_slli_epi32(qhn, 4));
          v[2][i] = Select(lo_mask, _mm512_srli_epi32(qla, 4), qhm);
          v[3][i] = Select(lo_mask, _mm512_srli_epi32(qlb, 4), qhn);
        }
        __m512i sc[4];
        UF_UNROLL
        for (int k = 0; k < 4; ++k) {
          sc[k] = _mm512_cvtepi8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(tl.scales[8 * h + 2 * k + quad])));
        }
        UF_UNROLL
        for (int t = 0; t < NT; ++t) {
          const ActQ8_K& a = act[t][b];
          UF_UNROLL
          for (int k = 0; k < 4; ++k) {
            const int j = 8 * h + 2 * k + quad;
            __m512i s = _mm512_set1_epi32(a.q6_bias[j]);
            UF_UNROLL
            for (int i = 0; i < 4; ++i) {
              s = _mm512_dpbusd_epi32(s, v[k][i], Bcast4(a.qs + 16 * j + 4 * i));
            }
            isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s, sc[k]));
          }
        }
      }
    }
    const __m512 dw = LoadHalf16(tl.d);
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]),
                               _mm512_mul_ps(dw, _mm512_set1_ps(act[t][b].d)), acc[t]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Driver: groups of kGroupTiles row tiles x groups of up to kMaxNT tokens, so a group's weights
// stay in L2 while every token group passes over them and each activation row is re-read once
// per group rather than once per tile.

constexpr int64_t kGroupTiles = 4;

template <typename Tile, typename Act, int NT,
          void (*Kernel)(const Tile*, int64_t, const Act* const*, __m512*)>
void RunTile(const GemmTask& t, const Tile* tiles, int64_t nb, int64_t row, int64_t t0) {
  const Act* act[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) {
    act[i] = reinterpret_cast<const Act*>(t.act + (t0 + i) * t.act_row_bytes);
  }
  __m512 acc[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  Kernel(tiles, nb, act, acc);
  const int64_t valid = std::min<int64_t>(kTileRows, t.ldy - row);
  const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1);
  UF_UNROLL
  for (int i = 0; i < NT; ++i) _mm512_mask_storeu_ps(t.y + (t0 + i) * t.ldy + row, mask, acc[i]);
}

template <typename Tile, typename Act, int kMaxNT, template <int> class K>
void GemmTiles(const GemmTask& t, int64_t r0, int64_t r1) {
  const int64_t nb = t.w_row_bytes / (sizeof(Tile) / kTileRows);
  const size_t tile_row_bytes = kTileRows * t.w_row_bytes;
  for (int64_t g0 = r0; g0 < r1; g0 += kGroupTiles * kTileRows) {
    const int64_t g1 = std::min(r1, g0 + kGroupTiles * kTileRows);
    for (int64_t t0 = 0; t0 < t.n_tokens; t0 += kMaxNT) {
      const int64_t nt = std::min<int64_t>(kMaxNT, t.n_tokens - t0);
      for (int64_t row = g0; row < g1; row += kTileRows) {
        const Tile* tiles = reinterpret_cast<const Tile*>(t.w + row / kTileRows * tile_row_bytes);
        K<1>::Dispatch(static_cast<int>(nt), t, tiles, nb, row, t0);
      }
    }
  }
}

// Maps a runtime token count 1..kMaxNT onto the kernel instantiation.
#define UF_TILE_DISPATCHER(Name, Tile, Act, Kernel, MaxNT)                                      \
  template <int N>                                                                              \
  struct Name {                                                                                 \
    static void Dispatch(int nt, const GemmTask& t, const Tile* tiles, int64_t nb, int64_t row, \
                         int64_t t0) {                                                          \
      if constexpr (N < MaxNT) {                                                                \
        if (nt > N) return Name<N + 1>::Dispatch(nt, t, tiles, nb, row, t0);                    \
      }                                                                                         \
      RunTile<Tile, Act, N, Kernel<N>>(t, tiles, nb, row, t0);                                  \
    }                                                                                           \
  };

// Token tiles: 8 for the 32-value types (their unpacked weights take 8 registers), 4 for the
// K-quants (16 registers of unpacked weights plus per-token integer sums).
UF_TILE_DISPATCHER(DispatchQ4_0, TileQ4_0, ActQ8_0, RowTileQ4_0, 8)
UF_TILE_DISPATCHER(DispatchQ8_0, TileQ8_0, ActQ8_0, RowTileQ8_0, 8)
UF_TILE_DISPATCHER(DispatchQ4_K, TileQ4_K, ActQ8_K, RowTileQ4_K, 4)
UF_TILE_DISPATCHER(DispatchQ6_K, TileQ6_K, ActQ8_K, RowTileQ6_K, 4)
#undef UF_TILE_DISPATCHER

void GemmQ4_0(const GemmTask& t, int64_t r0, int64_t r1) {
  GemmTiles<TileQ4_0, ActQ8_0, 8, DispatchQ4_0>(t, r0, r1);
}
void GemmQ8_0(const GemmTask& t, int64_t r0, int64_t r1) {
  GemmTiles<TileQ8_0, ActQ8_0, 8, DispatchQ8_0>(t, r0, r1);
}
void GemmQ4_K(const GemmTask& t, int64_t r0, int64_t r1) {
  GemmTiles<TileQ4_K, ActQ8_K, 4, DispatchQ4_K>(t, r0, r1);
}
void GemmQ6_K(const GemmTask& t, int64_t r0, int64_t r1) {
  GemmTiles<TileQ6_K, ActQ8_K, 4, DispatchQ6_K>(t, r0, r1);
}

}  // namespace

void FillAvx512Kernels(GgmlType type, KernelSet* ks) {
  KernelSet k = *ks;
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
      k.gemm_tiles = type == GgmlType::kQ4_0 ? GemmQ4_0 : GemmQ8_0;
      k.convert = ConvertActQ8_0Avx512;
      k.act_block = kQK8_0;
      k.act_block_bytes = sizeof(ActQ8_0);
      k.gemm = GemmRowsFromActQ8_0(type);
      break;
    case GgmlType::kMXFP4:
      k.gemm_tiles = GemmMxfp4TilesAvx512;
      k.gemm = GemmMxfp4Avx512;
      k.convert = ConvertActQ8_0Avx512;
      k.act_block = kQK8_0;
      k.act_block_bytes = sizeof(ActQ8_0);
      break;
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
      k.gemm_tiles = type == GgmlType::kQ4_K ? GemmQ4_K : GemmQ6_K;
      k.convert = ConvertActQ8_KAvx512;
      k.act_block = kQK_K;
      k.act_block_bytes = sizeof(ActQ8_K);
      k.gemm = GemmRowsFromActQ8_K(type);
      break;
    default:
      FillAvx512FloatKernels(type, &k);
      break;
  }
  *ks = k;
}

}  // namespace uf::kernels
