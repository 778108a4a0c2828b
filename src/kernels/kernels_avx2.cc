// AVX2 (+FMA, F16C) kernels for the quantized weight types, reading the same 16-row tiles as
// the AVX-512 tier (packed.h) as two halves of 8 rows: a 256-bit register holds 4 bytes of each
// of 8 rows. Without VNNI the int8 dot is vpmaddubsw (u8 x s8 -> saturating i16 pairs) then
// vpmaddwd; every use below keeps the i16 pair sums inside their range (bounds noted inline).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/avx2.h"
#include "kernels/avx2_rows.h"
#include "kernels/dispatch.h"
#include "kernels/packed.h"

namespace uf::kernels {
namespace {

// Small fixed-trip loops over registers must be unrolled, or the compiler keeps the register
// arrays in memory.
#define UF_UNROLL _Pragma("GCC unroll 16")

inline __m256i Bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

inline __m256i Load(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline __m256 LoadHalf8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Software prefetch, 1 KiB ahead (avx2.h). Q4_0 / Q8_0 request a whole (small) tile ahead at
// the start of each tile. Q4_K requests one line per line it reads, tied to that line's load
// (PrefetchAhead): its tiles are 36 lines, and requesting them all at the top of a tile stalls.
// The Q6_K half kernels, which read lines in order, stream best with the hardware prefetcher
// alone (the per-line row below); DecodeQ6_K, which does not, prefetches in line order.
// kernels_bench, 2 threads, against the read bandwidth probed beside it (this Zen 3 VM):
//   distance          none        512 B       1 KiB       1.5-2 KiB
//   Q4_0 (per tile)   0.83-0.85   0.85        0.92-0.93   0.87-0.90
//   Q8_0 (per tile)   0.79-0.81   0.87-0.92   0.92-0.93   0.86-0.90
//   Q4_K (per tile)   0.65-0.79   0.75-0.77   0.59-0.61   0.56-0.64
//   Q6_K (per tile)   0.60-0.63   0.59-0.63   0.55-0.62   0.51-0.56
//   Q4_K (per line)   0.71-0.84               0.86-0.98   (512 B: 0.85x of 1 KiB, 2 KiB 0.97x)
//   Q6_K (per line)   0.80-0.83               0.76-0.79
// (per-line rows: 3-5 rounds each, alternating binaries; medians Q4_K 0.76 -> 0.93, Q6_K
// 0.82 -> 0.77.)
template <typename Tile>
inline void PrefetchTile(const Tile* t) {
  const char* p = reinterpret_cast<const char*>(t) + kPrefetchDistance;
  UF_UNROLL
  for (size_t i = 0; i < sizeof(Tile); i += 64) _mm_prefetch(p + i, _MM_HINT_T0);
}

// An empty asm that claims to change v: GCC then cannot reassociate an accumulation chain
// across it. Left alone, it turns a chain of 8 vpaddw into a tree, which needs every vpmaddubsw
// result live at once and spills them (16 ymm registers).
inline void Pin(__m256i& v) { asm("" : "+x"(v)); }

inline __m256i Ones16() { return _mm256_set1_epi16(1); }

// i16 pairs -> i32 lanes.
inline __m256i Widen(__m256i s16) { return _mm256_madd_epi16(s16, Ones16()); }

// acc + (i32 block sums) x weight scales x activation scale: every kernel's block epilogue.
inline __m256 AddScaled(__m256 acc, __m256i sums, __m256 dw, __m256 da) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(dw, da), acc);
}

// ---------------------------------------------------------------------------------------------
// Q4_0, one 8-row half. |pair| <= 2 * 15 * 127 = 3810, so all 8 products of a block sum in i16
// (<= 30480) before one widening.

template <int NT>
[[gnu::always_inline]] inline void HalfQ4_0(const TileQ4_0* tiles, int64_t nb, int h,
                                            const ActQ8_0* const* act, __m256* acc) {
  const __m256i lo_mask = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const TileQ4_0& tl = tiles[b];
    if (h == 0) PrefetchTile(&tl);
    __m256i lo[4], hi[4];
    UF_UNROLL
    for (int k = 0; k < 4; ++k) {
      const __m256i x = Load(tl.qs[k][8 * h]);
      lo[k] = _mm256_and_si256(x, lo_mask);
      hi[k] = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo_mask);
    }
    const __m256 dw = LoadHalf8(tl.d + 8 * h);
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_0& a = act[t][b];
      __m256i s16 = _mm256_maddubs_epi16(lo[0], Bcast4(a.qs));
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi[0], Bcast4(a.qs + 16)));
      UF_UNROLL
      for (int k = 1; k < 4; ++k) {
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lo[k], Bcast4(a.qs + 4 * k)));
        Pin(s16);
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi[k], Bcast4(a.qs + 16 + 4 * k)));
        Pin(s16);
      }
      // bias = -128 * sum(a) = 16 * (-8 * sum(a)): the nibble offset.
      const __m256i s = _mm256_add_epi32(Widen(s16), _mm256_set1_epi32(a.bias >> 4));
      acc[t] = AddScaled(acc[t], s, dw, _mm256_set1_ps(a.d));
    }
  }
}

// Q8_0 (the AVX2 tile form: int8 as stored in GGUF), with the sign trick (|w| x sign(a, w)):
// |pair| <= 2 * 128 * 127 = 32512 fits i16, two pairs would not.
template <int NT>
[[gnu::always_inline]] inline void HalfQ8_0(const TileQ8_0* tiles, int64_t nb, int h,
                                            const ActQ8_0* const* act, __m256* acc) {
  for (int64_t b = 0; b < nb; ++b) {
    const TileQ8_0& tl = tiles[b];
    if (h == 0) PrefetchTile(&tl);
    __m256i aw[8], w[8];
    UF_UNROLL
    for (int k = 0; k < 8; ++k) {
      w[k] = Load(tl.qs[k][8 * h]);
      aw[k] = _mm256_abs_epi8(w[k]);
    }
    const __m256 dw = LoadHalf8(tl.d + 8 * h);
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_0& a = act[t][b];
      __m256i s = _mm256_setzero_si256();
      UF_UNROLL
      for (int k = 0; k < 8; ++k) {
        const __m256i p = _mm256_maddubs_epi16(aw[k], _mm256_sign_epi8(Bcast4(a.qs + 4 * k), w[k]));
        s = _mm256_add_epi32(s, Widen(p));
        Pin(s);
      }
      acc[t] = AddScaled(acc[t], s, dw, _mm256_set1_ps(a.d));
    }
  }
}

// Decode (1-2 tokens) over both halves of a tile, each activation broadcast feeding both and each
// unpacked weight register every token: the same products as HalfQ4_0 / HalfQ8_0.
// acc[2 * t + h] = token t, half h. Q8_0's chains of eight i32 adds are Pin()ned; Q4_0's four
// i16 adds did not spill at one token and measured the same either way.
template <int NT>
void DecodeQ4_0(const TileQ4_0* tiles, int64_t nb, const ActQ8_0* const* act, __m256* acc) {
  const __m256i lo_mask = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const TileQ4_0& tl = tiles[b];
    PrefetchTile(&tl);
    __m256i s16[NT][2];
    UF_UNROLL
    for (int k = 0; k < 4; ++k) {
      UF_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m256i x = Load(tl.qs[k][8 * h]);
        const __m256i lo = _mm256_and_si256(x, lo_mask);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo_mask);
        UF_UNROLL
        for (int t = 0; t < NT; ++t) {
          const int8_t* q = act[t][b].qs;
          const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, Bcast4(q + 4 * k)),
                                             _mm256_maddubs_epi16(hi, Bcast4(q + 16 + 4 * k)));
          s16[t][h] = k == 0 ? p : _mm256_add_epi16(s16[t][h], p);
          if constexpr (NT > 1) Pin(s16[t][h]);
        }
      }
    }
    const __m256 dw[2] = {LoadHalf8(tl.d), LoadHalf8(tl.d + 8)};  // once for all tokens
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_0& a = act[t][b];
      const __m256i bias = _mm256_set1_epi32(a.bias >> 4);
      const __m256 da = _mm256_set1_ps(a.d);
      UF_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m256i s = _mm256_add_epi32(Widen(s16[t][h]), bias);
        acc[2 * t + h] = AddScaled(acc[2 * t + h], s, dw[h], da);
      }
    }
  }
}

template <int NT>
void DecodeQ8_0(const TileQ8_0* tiles, int64_t nb, const ActQ8_0* const* act, __m256* acc) {
  for (int64_t b = 0; b < nb; ++b) {
    const TileQ8_0& tl = tiles[b];
    PrefetchTile(&tl);
    __m256i s[NT][2];
    UF_UNROLL
    for (int k = 0; k < 8; ++k) {
      UF_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m256i w = Load(tl.qs[k][8 * h]);
        const __m256i aw = _mm256_abs_epi8(w);
        UF_UNROLL
        for (int t = 0; t < NT; ++t) {
          const __m256i ak = Bcast4(act[t][b].qs + 4 * k);
          const __m256i p = Widen(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(ak, w)));
          s[t][h] = k == 0 ? p : _mm256_add_epi32(s[t][h], p);
          Pin(s[t][h]);
        }
      }
    }
    const __m256 dw[2] = {LoadHalf8(tl.d), LoadHalf8(tl.d + 8)};  // once for all tokens
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const __m256 da = _mm256_set1_ps(act[t][b].d);
      UF_UNROLL
      for (int h = 0; h < 2; ++h) acc[2 * t + h] = AddScaled(acc[2 * t + h], s[t][h], dw[h], da);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Q4_K, one 8-row half (see the AVX-512 kernel for the formulation). A sub-block's 8 chunks
// sum in i16: 8 * 2 * 15 * 127 = 30480.

template <int NT>
[[gnu::always_inline]] inline void HalfQ4_K(const TileQ4_K* tiles, int64_t nb, int h,
                                            const ActQ8_K* const* act, __m256* acc) {
  const __m256i lo_mask = _mm256_set1_epi8(0x0F);
  const __m256i six_bits = _mm256_set1_epi8(0x3F);
  const __m256i top_bits = _mm256_set1_epi8(static_cast<char>(0xC0));
  const __m256i hi_nib = _mm256_set1_epi8(0x30);
  __m256i byte_of[4];
  UF_UNROLL
  for (int k = 0; k < 4; ++k) {
    byte_of[k] = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(0x80808000u | k)),
                                  _mm256_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12));
  }
  for (int64_t b = 0; b < nb; ++b) {
    const TileQ4_K& tl = tiles[b];
    const __m256i d0 = Load(tl.scales[0][8 * h]);
    const __m256i d1 = Load(tl.scales[1][8 * h]);
    const __m256i d2 = Load(tl.scales[2][8 * h]);
    const __m256i sc03 = _mm256_and_si256(d0, six_bits);
    const __m256i m03 = _mm256_and_si256(d1, six_bits);
    const __m256i sc47 = _mm256_or_si256(
        _mm256_and_si256(d2, lo_mask),
        _mm256_and_si256(_mm256_srli_epi32(_mm256_and_si256(d0, top_bits), 2), hi_nib));
    const __m256i m47 = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32(d2, 4), lo_mask),
        _mm256_and_si256(_mm256_srli_epi32(_mm256_and_si256(d1, top_bits), 2), hi_nib));
    __m256i isum[NT];
    UF_UNROLL
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    UF_UNROLL
    for (int g = 0; g < 4; ++g) {
      __m256i sl[NT], sh[NT];
      UF_UNROLL
      for (int t = 0; t < NT; ++t) sl[t] = sh[t] = _mm256_setzero_si256();
      UF_UNROLL
      for (int c = 0; c < 8; ++c) {
        const __m256i x = Load(tl.qs[8 * g + c][8 * h]);
        const __m256i lo = _mm256_and_si256(x, lo_mask);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo_mask);
        UF_UNROLL
        for (int t = 0; t < NT; ++t) {
          const int8_t* q = act[t][b].qs + 64 * g;
          sl[t] = _mm256_add_epi16(sl[t], _mm256_maddubs_epi16(lo, Bcast4(q + 4 * c)));
          sh[t] = _mm256_add_epi16(sh[t], _mm256_maddubs_epi16(hi, Bcast4(q + 32 + 4 * c)));
          Pin(sl[t]);
          Pin(sh[t]);
        }
      }
      const __m256i sc_lo = _mm256_shuffle_epi8(g < 2 ? sc03 : sc47, byte_of[(2 * g) & 3]);
      const __m256i sc_hi = _mm256_shuffle_epi8(g < 2 ? sc03 : sc47, byte_of[(2 * g + 1) & 3]);
      UF_UNROLL
      for (int t = 0; t < NT; ++t) {
        isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(Widen(sl[t]), sc_lo));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(Widen(sh[t]), sc_hi));
      }
    }
    const __m256 dw = LoadHalf8(tl.d + 8 * h);
    const __m256 dmw = LoadHalf8(tl.dmin + 8 * h);
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_K& a = act[t][b];
      // Mins <= 63, parts |hi| <= 64, lo < 64: two pairs sum to <= 16128 in i16.
      const __m256i mh = Widen(_mm256_add_epi16(_mm256_maddubs_epi16(m03, Bcast4(a.min_hi)),
                                                _mm256_maddubs_epi16(m47, Bcast4(a.min_hi + 4))));
      const __m256i ml = Widen(_mm256_add_epi16(_mm256_maddubs_epi16(m03, Bcast4(a.min_lo)),
                                                _mm256_maddubs_epi16(m47, Bcast4(a.min_lo + 4))));
      const __m256i mins = _mm256_add_epi32(_mm256_slli_epi32(mh, 6), ml);
      const __m256 da = _mm256_set1_ps(a.d);
      acc[t] = AddScaled(acc[t], isum[t], dw, da);
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dmw, da), acc[t]);
    }
  }
}

// Q4_K decode (one token): both 8-row halves of a tile per block, each activation broadcast
// feeding both. The half kernel above, instantiated twice per block, made GCC keep ~2.8 KB of
// hoisted values on the stack (16 ymm registers); this one spills next to nothing and streams
// a matrix from L2 ~1.5x as fast (24-27 against 16-20 GB/s on one Zen 3 core).
// The sub-block scale is applied with one vpmaddwd on the i16 pair sums (scale <= 63, pair
// sum <= 30480: fits i32), which also widens, instead of widening and then vpmulld.

// Byte j of every 32-bit lane to both of its i16 halves (a vpshufb pattern).
inline __m256i ScaleSpread(int j) {
  const int b = j & 3;
  const int lane = b | 0x8000 | (b << 16) | (0x8000 << 16);
  return _mm256_add_epi32(_mm256_set1_epi32(lane), _mm256_setr_epi32(0, 0x40004, 0x80008, 0xC000C,
                                                                     0, 0x40004, 0x80008, 0xC000C));
}

template <int NT>
void DecodeQ4_K(const TileQ4_K* tiles, int64_t nb, const ActQ8_K* const* act, __m256* acc) {
  const __m256i lo_mask = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const TileQ4_K& tl = tiles[b];
    // [half][0: sub-blocks 0-3, 1: 4-7] 6-bit scales and mins, one byte per sub-block in each
    // row's 32-bit lane.
    __m256i sc[2][2], mn[2][2];
    UF_UNROLL
    for (int h = 0; h < 2; ++h) {
      const __m256i six_bits = _mm256_set1_epi8(0x3F);
      const __m256i top_bits = _mm256_set1_epi8(static_cast<char>(0xC0));
      const __m256i hi_nib = _mm256_set1_epi8(0x30);
      const __m256i d0 = Load(tl.scales[0][8 * h]);
      const __m256i d1 = Load(tl.scales[1][8 * h]);
      const __m256i d2 = Load(tl.scales[2][8 * h]);
      sc[h][0] = _mm256_and_si256(d0, six_bits);
      mn[h][0] = _mm256_and_si256(d1, six_bits);
      sc[h][1] = _mm256_or_si256(
          _mm256_and_si256(d2, lo_mask),
          _mm256_and_si256(_mm256_srli_epi32(_mm256_and_si256(d0, top_bits), 2), hi_nib));
      mn[h][1] = _mm256_or_si256(
          _mm256_and_si256(_mm256_srli_epi32(d2, 4), lo_mask),
          _mm256_and_si256(_mm256_srli_epi32(_mm256_and_si256(d1, top_bits), 2), hi_nib));
    }
    __m256i isum[NT][2];
    UF_UNROLL
    for (int t = 0; t < NT; ++t) isum[t][0] = isum[t][1] = _mm256_setzero_si256();
    UF_UNROLL
    for (int g = 0; g < 4; ++g) {
      __m256i sl[NT][2], sh[NT][2];
      UF_UNROLL
      for (int c = 0; c < 8; ++c) {
        UF_UNROLL
        for (int h = 0; h < 2; ++h) {
          __m256i x = Load(tl.qs[8 * g + c][8 * h]);
          if (h == 0) PrefetchAhead(tl.qs[8 * g + c], x);
          const __m256i lo = _mm256_and_si256(x, lo_mask);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo_mask);
          UF_UNROLL
          for (int t = 0; t < NT; ++t) {
            const int8_t* q = act[t][b].qs + 64 * g;
            const __m256i pl = _mm256_maddubs_epi16(lo, Bcast4(q + 4 * c));
            const __m256i ph = _mm256_maddubs_epi16(hi, Bcast4(q + 32 + 4 * c));
            sl[t][h] = c == 0 ? pl : _mm256_add_epi16(sl[t][h], pl);
            sh[t][h] = c == 0 ? ph : _mm256_add_epi16(sh[t][h], ph);
            Pin(sl[t][h]);
            Pin(sh[t][h]);
          }
        }
      }
      UF_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m256i s = sc[h][g >> 1];
        const __m256i s_lo = _mm256_shuffle_epi8(s, ScaleSpread(2 * g));
        const __m256i s_hi = _mm256_shuffle_epi8(s, ScaleSpread(2 * g + 1));
        UF_UNROLL
        for (int t = 0; t < NT; ++t) {
          isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(sl[t][h], s_lo));
          isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(sh[t][h], s_hi));
        }
      }
    }
    // Row scales once for all tokens.
    const __m256 dw[2] = {LoadHalf8(tl.d), LoadHalf8(tl.d + 8)};
    const __m256 dmw[2] = {LoadHalf8(tl.dmin), LoadHalf8(tl.dmin + 8)};
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      const ActQ8_K& a = act[t][b];
      const __m256 da = _mm256_set1_ps(a.d);
      UF_UNROLL
      for (int h = 0; h < 2; ++h) {
        // Mins <= 63, parts |hi| <= 64, lo < 64: two pairs sum to <= 16128 in i16.
        const __m256i mh =
            Widen(_mm256_add_epi16(_mm256_maddubs_epi16(mn[h][0], Bcast4(a.min_hi)),
                                   _mm256_maddubs_epi16(mn[h][1], Bcast4(a.min_hi + 4))));
        const __m256i ml =
            Widen(_mm256_add_epi16(_mm256_maddubs_epi16(mn[h][0], Bcast4(a.min_lo)),
                                   _mm256_maddubs_epi16(mn[h][1], Bcast4(a.min_lo + 4))));
        const __m256i mins = _mm256_add_epi32(_mm256_slli_epi32(mh, 6), ml);
        __m256& out = acc[2 * t + h];
        out = AddScaled(out, isum[t][h], dw[h], da);
        out = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dmw[h], da), out);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Q6_K tiles in the AVX2 form (packed.h): value k (0..3) of a step for the 8 rows from row r0.
// Values 0-2 are their group's low 6 bits; value 3 is assembled from the groups' top 2 bits.
[[gnu::always_inline]] inline __m256i Q6Value(const uint8_t (*step)[kTileRows][4], int r0, int k) {
  if (k < 3) return _mm256_and_si256(Load(step[k][r0]), _mm256_set1_epi8(0x3F));
  // Masked to its top 2 bits first, a byte shifts within a 16-bit lane without pulling bits in
  // from its neighbour, so all three pieces share one mask.
  const __m256i top = _mm256_set1_epi8(static_cast<char>(0xC0));
  const __m256i a = _mm256_srli_epi16(_mm256_and_si256(Load(step[0][r0]), top), 6);
  const __m256i b = _mm256_srli_epi16(_mm256_and_si256(Load(step[1][r0]), top), 4);
  const __m256i c = _mm256_srli_epi16(_mm256_and_si256(Load(step[2][r0]), top), 2);
  return _mm256_or_si256(_mm256_or_si256(a, b), c);
}

// Chunk i (0..3) of a Q6_K sub-block, p = its vpmaddubsw: even chunks wait in s16, odd ones
// add the pair (<= 2 * 16002, fits i16) to the i32 sum.
[[gnu::always_inline]] inline void AddQ6Chunk(int i, __m256i p, __m256i& s16, __m256i& s32) {
  if (i % 2 == 0) {
    s16 = p;
  } else {
    s32 = _mm256_add_epi32(s32, Widen(_mm256_add_epi16(s16, p)));
    Pin(s32);
  }
}

// Sub-block j's int8 scales of the 8 rows from row r0, as i32 lanes.
[[gnu::always_inline]] inline __m256i Q6Scales(const TileQ6_K& tl, int j, int r0) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tl.scales[j] + r0)));
}

// Q6_K, one 8-row half. Values <= 63: a pair <= 2 * 63 * 127 = 16002, so two chunks sum in i16.
// The kernel is bound by its instruction count on this Zen 3 VM: 1 token computes at only
// 1.1-1.4x the rate decode streams at, and a build that skipped value 3's assembly (wrong
// results, for timing only) streamed 12% more of the bandwidth. The shared mask in Q6Value and
// the Pin on s32 (without it GCC spilled 80 registers per block, now 20) took the median
// L2-resident rate (1 thread, CPU time, 10 runs each) from 22.7 to 26.8 GB/s and decode
// streaming from 0.73 to 0.77 of the read bandwidth (kernels_bench, 6 alternating rounds).
// Decode of 2 tokens runs it too (RunBoth); 1 token runs DecodeQ6_K.
// It goes one sub-block at a time (k outer within a quad): each value, value 3's eight-operation
// assembly included, is extracted once for all NT tokens, and a token keeps three sums live
// (eight with all four sub-blocks of a quad at once, which capped it at 2 tokens and spilled).
// A quad's lines are still first read in order. 1 thread, CPU time, against that older order:
// 64-token GEMM 89 -> 106 GFLOP/s (median of 10 runs, with 4-token groups), 2-token decode
// x1.03, 4-token decode x1.06 (6 runs each); 2-token streaming at 2 threads 0.71 -> 0.69-0.75
// of the read bandwidth (5 rounds, median ratio 0.98: within this host's noise).

template <int NT>
[[gnu::always_inline]] inline void HalfQ6_K(const TileQ6_K* tiles, int64_t nb, int h8,
                                            const ActQ8_K* const* act, __m256* acc) {
  for (int64_t b = 0; b < nb; ++b) {
    const TileQ6_K& tl = tiles[b];
    __m256i isum[NT];
    UF_UNROLL
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      UF_UNROLL
      for (int quad = 0; quad < 2; ++quad) {
        UF_UNROLL
        for (int k = 0; k < 4; ++k) {
          const int j = 8 * h + 2 * k + quad;
          __m256i s16[NT], s32[NT];
          UF_UNROLL
          for (int t = 0; t < NT; ++t) s32[t] = _mm256_set1_epi32(act[t][b].q6_bias[j]);
          UF_UNROLL
          for (int i = 0; i < 4; ++i) {
            const __m256i v = Q6Value(tl.q[8 * h + 4 * quad + i], 8 * h8, k);
            UF_UNROLL
            for (int t = 0; t < NT; ++t) {
              const __m256i p = _mm256_maddubs_epi16(v, Bcast4(act[t][b].qs + 16 * j + 4 * i));
              AddQ6Chunk(i, p, s16[t], s32[t]);
            }
          }
          const __m256i sc = Q6Scales(tl, j, 8 * h8);
          UF_UNROLL
          for (int t = 0; t < NT; ++t) {
            isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(s32[t], sc));
          }
        }
      }
    }
    const __m256 dw = LoadHalf8(tl.d + 8 * h8);
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      acc[t] = AddScaled(acc[t], isum[t], dw, _mm256_set1_ps(act[t][b].d));
    }
  }
}

// Q6_K decode of one token over both halves of a tile: each activation broadcast and bias feeds
// both halves, 7-10% fewer instructions than HalfQ6_K twice. It goes sub-block by sub-block (k
// outer) so that the sums fit the 16 registers, and so first touches a quad's lines 3 lines
// apart, which the hardware prefetcher does not follow: without the software prefetch in step
// order it computed 13% faster from L2 (1 thread, median of 10 runs, 24.9 -> 28.1 GB/s) but
// streamed 0.82 -> 0.71 of the read bandwidth. With it, 12 alternating kernels_bench rounds gave
// 0.80 -> 0.81 (per-round ratios 1.07 and 1.01), and 4 rounds of `bench` on the Q4_0 file (its
// output matrix is Q6_K) 0.77 -> 0.80 of the roofline; a later 3 rounds showed no difference
// there. 2 KiB ahead: 0.82 -> 0.74.
template <int NT>
void DecodeQ6_K(const TileQ6_K* tiles, int64_t nb, const ActQ8_K* const* act, __m256* acc) {
  static_assert(NT == 1);
  for (int64_t b = 0; b < nb; ++b) {
    const TileQ6_K& tl = tiles[b];
    const ActQ8_K& a = act[0][b];
    __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int h = 0; h < 2; ++h) {
      UF_UNROLL
      for (int quad = 0; quad < 2; ++quad) {
        UF_UNROLL
        for (int k = 0; k < 4; ++k) {
          const int j = 8 * h + 2 * k + quad;
          const __m256i bias = _mm256_set1_epi32(a.q6_bias[j]);
          __m256i s32[2] = {bias, bias};
          __m256i s16[2];
          UF_UNROLL
          for (int i = 0; i < 4; ++i) {
            const int lc = 4 * quad + i;
            const __m256i av = Bcast4(a.qs + 16 * j + 4 * i);
            UF_UNROLL
            for (int hh = 0; hh < 2; ++hh) {
              __m256i v = Q6Value(tl.q[8 * h + lc], 8 * hh, k);
              if (k == 0 && hh == 0) {
                UF_UNROLL
                for (int g = 0; g < 3; ++g) PrefetchAhead(tl.q[8 * h + lc][g], v);
              }
              AddQ6Chunk(i, _mm256_maddubs_epi16(v, av), s16[hh], s32[hh]);
            }
          }
          UF_UNROLL
          for (int hh = 0; hh < 2; ++hh) {
            isum[hh] =
                _mm256_add_epi32(isum[hh], _mm256_mullo_epi32(s32[hh], Q6Scales(tl, j, 8 * hh)));
            Pin(isum[hh]);
          }
        }
      }
    }
    const __m256 da = _mm256_set1_ps(a.d);
    UF_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      acc[hh] = AddScaled(acc[hh], isum[hh], LoadHalf8(tl.d + 8 * hh), da);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Driver: per row tile, each 8-row half streams all its blocks for a group of tokens.

template <typename Tile, typename Act, int NT,
          void (*Kernel)(const Tile*, int64_t, int, const Act* const*, __m256*)>
void RunHalf(const GemmTask& t, const Tile* tiles, int64_t nb, int64_t row, int h, int64_t t0) {
  const Act* act[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) {
    act[i] = reinterpret_cast<const Act*>(t.act + (t0 + i) * t.act_row_bytes);
  }
  __m256 acc[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) acc[i] = _mm256_setzero_ps();
  Kernel(tiles, nb, h, act, acc);
  const int64_t r = row + 8 * h;
  const int64_t valid = std::min<int64_t>(8, t.ldy - r);
  for (int i = 0; i < NT; ++i) {
    float* y = t.y + (t0 + i) * t.ldy + r;
    StoreRows8(y, acc[i], valid);
  }
}

// Decode (1-2 tokens) of the types without both-halves kernels (Q6_K): both halves of a tile,
// block by block, in one pass, through the half kernel. Streaming the halves
// one after the other (RunHalf) reads every cache line twice, the second time from L2 while DRAM
// idles: it cost 10-20% of the streaming rate. For 4 tokens compute dominates and RunHalf's
// weight registers, reused across the tokens, win.
template <typename Tile, typename Act, int NT,
          void (*Kernel)(const Tile*, int64_t, int, const Act* const*, __m256*)>
void RunBoth(const GemmTask& t, const Tile* tiles, int64_t nb, int64_t row, int64_t t0) {
  const Act* act[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) {
    act[i] = reinterpret_cast<const Act*>(t.act + (t0 + i) * t.act_row_bytes);
  }
  __m256 acc[2][NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) acc[0][i] = acc[1][i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Act* ab[NT];
    UF_UNROLL
    for (int i = 0; i < NT; ++i) ab[i] = act[i] + b;
    Kernel(tiles + b, 1, 0, ab, acc[0]);
    Kernel(tiles + b, 1, 1, ab, acc[1]);
  }
  for (int h = 0; h < 2; ++h) {
    const int64_t r = row + 8 * h;
    const int64_t valid = std::min<int64_t>(8, t.ldy - r);
    if (valid <= 0) break;
    for (int i = 0; i < NT; ++i) {
      float* y = t.y + (t0 + i) * t.ldy + r;
      StoreRows8(y, acc[h][i], valid);
    }
  }
}

// NT tokens against a whole tile with a kernel that reads both halves itself (DecodeQ4_K).
template <typename Tile, typename Act>
using DecodeFn = void (*)(const Tile*, int64_t, const Act* const*, __m256*);

template <typename Tile, typename Act, int NT, DecodeFn<Tile, Act> Kernel>
void RunDecode(const GemmTask& t, const Tile* tiles, int64_t nb, int64_t row, int64_t t0 = 0) {
  const Act* act[NT];
  __m256 acc[2 * NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) {
    act[i] = reinterpret_cast<const Act*>(t.act + (t0 + i) * t.act_row_bytes);
    acc[2 * i] = acc[2 * i + 1] = _mm256_setzero_ps();
  }
  Kernel(tiles, nb, act, acc);
  for (int i = 0; i < NT; ++i) {
    float* y = t.y + (t0 + i) * t.ldy + row;
    StoreRows8(y, acc[2 * i], 8);
    StoreRows8(y + 8, acc[2 * i + 1], std::min<int64_t>(8, t.ldy - row - 8));
  }
}

// Tokens in groups of up to 4 (3 and 4 only where KD3 / KD4 exist): full tiles go to the
// both-halves kernels KD*, one pass over the tile row per group (the row stays in L1/L2 for the
// next group); a tail tile of at most 8 rows, and types without them, go to the half kernels.
template <typename Tile, typename Act, int kMaxNT,
          void (*K1)(const Tile*, int64_t, int, const Act* const*, __m256*),
          void (*K2)(const Tile*, int64_t, int, const Act* const*, __m256*),
          void (*K4)(const Tile*, int64_t, int, const Act* const*, __m256*),
          DecodeFn<Tile, Act> KD1 = nullptr, DecodeFn<Tile, Act> KD2 = nullptr,
          DecodeFn<Tile, Act> KD3 = nullptr, DecodeFn<Tile, Act> KD4 = nullptr>
void GemmTiles(const GemmTask& t, int64_t r0, int64_t r1) {
  const int64_t nb = t.w_row_bytes / (sizeof(Tile) / kTileRows);
  const size_t tile_row_bytes = kTileRows * t.w_row_bytes;
  constexpr int64_t kGroup = KD4 != nullptr ? 4 : KD2 != nullptr ? 2 : 0;
  for (int64_t row = r0; row < r1; row += kTileRows) {
    const Tile* tiles = reinterpret_cast<const Tile*>(t.w + row / kTileRows * tile_row_bytes);
    if constexpr (kGroup > 0) {
      if (row + 8 < r1) {
        int64_t t0 = 0;
        for (; t0 + kGroup <= t.n_tokens; t0 += kGroup) {
          RunDecode<Tile, Act, kGroup, kGroup == 4 ? KD4 : KD2>(t, tiles, nb, row, t0);
        }
        const int64_t rest = t.n_tokens - t0;
        if constexpr (KD3 != nullptr) {
          if (rest == 3) RunDecode<Tile, Act, 3, KD3>(t, tiles, nb, row, t0);
        }
        if (rest == 2) RunDecode<Tile, Act, 2, KD2>(t, tiles, nb, row, t0);
        if (rest == 1) RunDecode<Tile, Act, 1, KD1>(t, tiles, nb, row, t0);
        continue;
      }
    } else if (t.n_tokens <= 2 && row + 8 < r1) {
      // Types with a one-token both-halves kernel but no batched ones (Q6_K): KD1 for 1 token.
      if (t.n_tokens == 2) {
        RunBoth<Tile, Act, 2, K2>(t, tiles, nb, row, 0);
      } else if constexpr (KD1 != nullptr) {
        RunDecode<Tile, Act, 1, KD1>(t, tiles, nb, row, 0);
      } else {
        RunBoth<Tile, Act, 1, K1>(t, tiles, nb, row, 0);
      }
      continue;
    }
    for (int h = 0; h < 2 && row + 8 * h < r1; ++h) {
      int64_t t0 = 0;
      for (; kMaxNT >= 4 && t0 + 4 <= t.n_tokens; t0 += 4) {
        RunHalf<Tile, Act, 4, K4>(t, tiles, nb, row, h, t0);
      }
      for (; t0 + 2 <= t.n_tokens; t0 += 2) RunHalf<Tile, Act, 2, K2>(t, tiles, nb, row, h, t0);
      for (; t0 < t.n_tokens; ++t0) RunHalf<Tile, Act, 1, K1>(t, tiles, nb, row, h, t0);
    }
  }
}

// Token groups: 4 for Q4_0/Q8_0 and Q6_K, 2 for Q4_K (its per-token partial sums take the
// registers).
void GemmQ4_0(const GemmTask& t, int64_t r0, int64_t r1) {
  GemmTiles<TileQ4_0, ActQ8_0, 4, HalfQ4_0<1>, HalfQ4_0<2>, HalfQ4_0<4>, DecodeQ4_0<1>,
            DecodeQ4_0<2>, DecodeQ4_0<3>, DecodeQ4_0<4>>(t, r0, r1);
}
void GemmQ8_0(const GemmTask& t, int64_t r0, int64_t r1) {
  GemmTiles<TileQ8_0, ActQ8_0, 4, HalfQ8_0<1>, HalfQ8_0<2>, HalfQ8_0<4>, DecodeQ8_0<1>,
            DecodeQ8_0<2>, DecodeQ8_0<3>, DecodeQ8_0<4>>(t, r0, r1);
}
void GemmQ4_K(const GemmTask& t, int64_t r0, int64_t r1) {
  GemmTiles<TileQ4_K, ActQ8_K, 2, HalfQ4_K<1>, HalfQ4_K<2>, HalfQ4_K<2>, DecodeQ4_K<1>,
            DecodeQ4_K<2>>(t, r0, r1);
}
void GemmQ6_K(const GemmTask& t, int64_t r0, int64_t r1) {
  GemmTiles<TileQ6_K, ActQ8_K, 4, HalfQ6_K<1>, HalfQ6_K<2>, HalfQ6_K<4>, DecodeQ6_K<1>>(t, r0, r1);
}

}  // namespace

void FillAvx2Kernels(GgmlType type, KernelSet* ks) {
  KernelSet k = *ks;
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
      k.gemm_tiles = type == GgmlType::kQ4_0 ? GemmQ4_0 : GemmQ8_0;
      k.gemm = GemmRowsFromActQ8_0(type);
      k.convert = ConvertActQ8_0Avx2;
      k.act_block = kQK8_0;
      k.act_block_bytes = sizeof(ActQ8_0);
      break;
    case GgmlType::kMXFP4:
      k.gemm_tiles = GemmMxfp4TilesAvx2;
      k.gemm = GemmMxfp4Avx2;
      k.convert = ConvertActQ8_0Avx2;
      k.act_block = kQK8_0;
      k.act_block_bytes = sizeof(ActQ8_0);
      break;
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
      k.gemm_tiles = type == GgmlType::kQ4_K ? GemmQ4_K : GemmQ6_K;
      k.gemm = GemmRowsFromActQ8_K(type);
      k.convert = ConvertActQ8_KAvx2;
      k.act_block = kQK_K;
      k.act_block_bytes = sizeof(ActQ8_K);
      break;
    default:
      FillAvx2FloatKernels(type, &k);
      break;
  }
  *ks = k;
}

}  // namespace uf::kernels
