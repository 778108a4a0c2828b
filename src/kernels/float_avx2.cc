// AVX2 kernels for F32 / F16 / BF16 weights (16-row column tiles read as two 8-row halves,
// packed.h; GGUF rows as a fallback), the AVX2 activation converters and the bandwidth probe.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/avx2.h"
#include "kernels/avx2_rows.h"
#include "kernels/dispatch.h"
#include "kernels/packed.h"
#include "kernels/quant.h"

namespace uf::kernels {
namespace {

// Small fixed-trip loops over registers must be unrolled, or the compiler keeps the register
// arrays in memory.
#define UF_UNROLL _Pragma("GCC unroll 16")

float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

int HorizontalSumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline __m256 Abs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// 32 int32 lanes -> 32 int8 in order, saturating (= clamping to [-128, 127]).
void Pack32(__m256i q0, __m256i q1, __m256i q2, __m256i q3, int8_t* out) {
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  const __m256i ordered = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ordered);
}

// ---------------------------------------------------------------------------------------------
// Activation converters: same float operations in the same order as the portable ones.

void ConvertQ8_0Block(const float* x, ActQ8_0* out) {
  __m256 v[4];
  __m256 amax_v = _mm256_setzero_ps();
  UF_UNROLL
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax_v = _mm256_max_ps(amax_v, Abs(v[i]));
  }
  const float amax = HorizontalMax(amax_v);
  const float d = amax / 127.0f;
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  __m256i q[4];
  UF_UNROLL
  for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
  out->d = Fp16ToFp32(Fp32ToFp16(d));
  out->bias = -128 * HorizontalSumI32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                                       _mm256_add_epi32(q[2], q[3])));
  Pack32(q[0], q[1], q[2], q[3], out->qs);
}

void ConvertQ8_KBlock(const float* x, ActQ8_K* out) {
  __m256 amax_v = _mm256_setzero_ps();
  for (int i = 0; i < 32; ++i) amax_v = _mm256_max_ps(amax_v, Abs(_mm256_loadu_ps(x + 8 * i)));
  const float amax = HorizontalMax(amax_v);
  if (!(amax > 0.0f)) {
    std::memset(out, 0, sizeof(*out));
    return;
  }
  float max = 0.0f;  // the first value of largest magnitude, as in the reference
  for (int i = 0; i < 32; ++i) {
    const int m = _mm256_movemask_ps(
        _mm256_cmp_ps(Abs(_mm256_loadu_ps(x + 8 * i)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
    if (m != 0) {
      max = x[8 * i + __builtin_ctz(m)];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m256 vs = _mm256_set1_ps(iscale);
  const __m256i cap = _mm256_set1_epi32(127);
  int bsums[16];
  for (int g = 0; g < 8; ++g) {
    __m256i q[4];
    UF_UNROLL
    for (int i = 0; i < 4; ++i) {
      q[i] = _mm256_min_epi32(
          _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + 32 * g + 8 * i))), cap);
    }
    bsums[2 * g] = HorizontalSumI32(_mm256_add_epi32(q[0], q[1]));
    bsums[2 * g + 1] = HorizontalSumI32(_mm256_add_epi32(q[2], q[3]));
    Pack32(q[0], q[1], q[2], q[3], out->qs + 32 * g);
  }
  out->d = 1.0f / iscale;
  for (int j = 0; j < 8; ++j) {
    const int s = bsums[2 * j] + bsums[2 * j + 1];
    out->min_hi[j] = static_cast<int8_t>(s >> 6);
    out->min_lo[j] = static_cast<int8_t>(s & 63);
  }
  for (int j = 0; j < 16; ++j) out->q6_bias[j] = -32 * bsums[j];
}

// f32 -> f16 -> f32: the values the reference multiplies F16 weights with.
void ConvertF16AsF32(const float* x, void* dst, int64_t n) {
  float* out = static_cast<float*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = Fp16ToFp32(Fp32ToFp16(x[i]));
}

// Fp32ToBf16 then back, in integer arithmetic (round half to even, quiet NaN).
void ConvertBf16AsF32(const float* x, void* dst, int64_t n) {
  float* out = static_cast<float*>(dst);
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF)));
    const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    const __m256i hi = _mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(hi));
  }
  for (; i < n; ++i) out[i] = Bf16ToFp32(Fp32ToBf16(x[i]));
}

// ---------------------------------------------------------------------------------------------
// Float GEMM on GGUF rows (the fallback for matrices created while no SIMD tier was active):
// NR rows x NT tokens of 8-lane accumulators; a scalar tail for cols % 8. Activations are f32.

enum class WKind { kF32, kF16, kBf16 };

template <WKind K>
inline __m256 LoadW(const uint8_t* row, int64_t c) {
  if constexpr (K == WKind::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
  } else if constexpr (K == WKind::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + c)));
  } else {
    const __m128i h = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + c));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

inline __m256i Load(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Column c of half h (8 rows) of an F32 / F16 tile.
template <WKind K>
inline __m256 TileColumn(const uint8_t* tile, int64_t c, int h) {
  if constexpr (K == WKind::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(tile) + kTileRows * c + 8 * h);
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
        reinterpret_cast<const uint16_t*>(tile) + kTileRows * c + 8 * h)));
  }
}

template <WKind K>
inline float ScalarW(const uint8_t* row, int64_t c) {
  if constexpr (K == WKind::kF32) {
    return reinterpret_cast<const float*>(row)[c];
  } else if constexpr (K == WKind::kF16) {
    return Fp16ToFp32(reinterpret_cast<const uint16_t*>(row)[c]);
  } else {
    return Bf16ToFp32(reinterpret_cast<const uint16_t*>(row)[c]);
  }
}

template <WKind K, int NR, int NT>
void Block(const GemmTask& t, int64_t r, int64_t t0) {
  const uint8_t* w[NR];
  const float* a[NT];
  UF_UNROLL
  for (int i = 0; i < NR; ++i) w[i] = t.w + (r + i) * t.w_row_bytes;
  UF_UNROLL
  for (int j = 0; j < NT; ++j)
    a[j] = reinterpret_cast<const float*>(t.act + (t0 + j) * t.act_row_bytes);
  __m256 acc[NR][NT];
  UF_UNROLL
  for (int i = 0; i < NR; ++i) {
    UF_UNROLL
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t c = 0;
  for (; c + 8 <= t.cols; c += 8) {
    __m256 wv[NR];
    UF_UNROLL
    for (int i = 0; i < NR; ++i) wv[i] = LoadW<K>(w[i], c);
    UF_UNROLL
    for (int j = 0; j < NT; ++j) {
      const __m256 av = _mm256_loadu_ps(a[j] + c);
      UF_UNROLL
      for (int i = 0; i < NR; ++i) acc[i][j] = _mm256_fmadd_ps(wv[i], av, acc[i][j]);
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int j = 0; j < NT; ++j) {
      float s = HorizontalSum(acc[i][j]);
      for (int64_t cc = c; cc < t.cols; ++cc) s += ScalarW<K>(w[i], cc) * a[j][cc];
      t.y[(t0 + j) * t.ldy + r + i] = s;
    }
  }
}

template <WKind K, int NR>
void BlockTokens(const GemmTask& t, int64_t r, int64_t t0, int64_t nt) {
  if (nt >= 2) return Block<K, NR, 2>(t, r, t0);
  Block<K, NR, 1>(t, r, t0);
}

// Row blocks sized so their weights stay in L2 while every token group passes over them.
constexpr size_t kL2Budget = 512 * 1024;

template <WKind K>
void GemmFloat(const GemmTask& t, int64_t r0, int64_t r1) {
  const int64_t block_rows =
      std::max<int64_t>(4, static_cast<int64_t>(kL2Budget / t.w_row_bytes) / 4 * 4);
  for (int64_t b0 = r0; b0 < r1; b0 += block_rows) {
    const int64_t b1 = std::min(r1, b0 + block_rows);
    for (int64_t t0 = 0; t0 < t.n_tokens; t0 += 2) {
      const int64_t nt = std::min<int64_t>(2, t.n_tokens - t0);
      int64_t r = b0;
      for (; r + 4 <= b1; r += 4) BlockTokens<K, 4>(t, r, t0, nt);
      for (; r < b1; ++r) BlockTokens<K, 1>(t, r, t0, nt);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Float tiles (see float_avx512.cc): per column, 8 rows' weights of one half tile times a
// broadcast activation. BF16 column pairs are split into their even and odd columns.

// BF16 tiles prefetch each line 1 KiB ahead (PrefetchAhead): kernels_bench, 2 threads, 7 ABAB
// rounds against the read bandwidth probed beside it, 0.87-0.88 -> 0.94-0.96 (median ratio
// 1.11). F16 measured the same with it (0.905 -> 0.898 at 1 KiB, 0.92 -> 0.85 at 2 KiB) and
// issues none.
// NH = 2 reads both 8-row halves of each column (pair) in one pass: one token's decode streams
// the tile once instead of twice (the second half from L2 while DRAM idles). NH = 1 serves
// 3-4 tokens, where the accumulators of both halves would not fit in 16 registers.
template <WKind K, int NT, int NH>
void FloatTile(const uint8_t* tile, int64_t cols, int h0, const float* const* a,
               __m256 (*out)[NT]) {
  // Two chains per output whatever NT and NH: each sum then adds the same terms in the same
  // order for every batch size, so a token's logits do not depend on the tokens beside it
  // (speculative decoding's verify rows must equal single-token decode bit for bit). Four
  // chains for one token measured no faster: decode is bound by the weight stream.
  constexpr int U = 2;
  __m256 acc[NH][NT][U];
  UF_UNROLL
  for (int hh = 0; hh < NH; ++hh) {
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      UF_UNROLL
      for (int u = 0; u < U; ++u) acc[hh][t][u] = _mm256_setzero_ps();
    }
  }
  if constexpr (K == WKind::kBf16) {
    // The accumulator index must be a compile-time constant (unrolled u): indexed by a runtime
    // p % U, acc lived on the stack and BF16 ran at 0.6 of the read bandwidth against F16's 0.75.
    const __m256i hi_half = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    auto pair = [&](int64_t p, int u, bool has_odd) __attribute__((always_inline)) {
      UF_UNROLL
      for (int hh = 0; hh < NH; ++hh) {
        __m256i x = Load(tile + 4 * (kTileRows * p + 8 * (h0 + hh)));
        if (hh == 0) PrefetchAhead(tile + 4 * kTileRows * p, x);  // a column pair is one line
        const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
        const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(x, hi_half));
        UF_UNROLL
        for (int t = 0; t < NT; ++t) {
          acc[hh][t][u] = _mm256_fmadd_ps(even, _mm256_broadcast_ss(a[t] + 2 * p), acc[hh][t][u]);
          if (has_odd) {
            acc[hh][t][u] =
                _mm256_fmadd_ps(odd, _mm256_broadcast_ss(a[t] + 2 * p + 1), acc[hh][t][u]);
          }
        }
      }
    };
    const int64_t full_pairs = cols / 2;
    int64_t p = 0;
    for (; p + U <= full_pairs; p += U) {
      UF_UNROLL
      for (int u = 0; u < U; ++u) pair(p + u, u, true);
    }
    for (; p < full_pairs; ++p) pair(p, 0, true);
    if (cols % 2 != 0) pair(full_pairs, 0, false);  // the last column, paired with a zero
  } else {
    auto column = [&](int64_t c, int u) __attribute__((always_inline)) {
      UF_UNROLL
      for (int hh = 0; hh < NH; ++hh) {
        const __m256 w = TileColumn<K>(tile, c, h0 + hh);
        UF_UNROLL
        for (int t = 0; t < NT; ++t) {
          acc[hh][t][u] = _mm256_fmadd_ps(w, _mm256_broadcast_ss(a[t] + c), acc[hh][t][u]);
        }
      }
    };
    int64_t c = 0;
    for (; c + U <= cols; c += U) {
      UF_UNROLL
      for (int u = 0; u < U; ++u) column(c + u, u);
    }
    for (; c < cols; ++c) column(c, 0);
  }
  UF_UNROLL
  for (int hh = 0; hh < NH; ++hh) {
    UF_UNROLL
    for (int t = 0; t < NT; ++t) {
      __m256 s = acc[hh][t][0];
      UF_UNROLL
      for (int u = 1; u < U; ++u) s = _mm256_add_ps(s, acc[hh][t][u]);
      out[hh][t] = s;
    }
  }
}

// Halves h0 .. h0 + NH - 1 of the tile at `row`, for tokens t0 .. t0 + NT - 1.
template <WKind K, int NT, int NH>
void RunFloat(const GemmTask& t, const uint8_t* tile, int64_t row, int h0, int64_t t0) {
  const float* a[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i)
    a[i] = reinterpret_cast<const float*>(t.act + (t0 + i) * t.act_row_bytes);
  __m256 out[NH][NT];
  FloatTile<K, NT, NH>(tile, t.cols, h0, a, out);
  for (int hh = 0; hh < NH; ++hh) {
    const int64_t r = row + 8 * (h0 + hh);
    const int64_t valid = std::min<int64_t>(8, t.ldy - r);
    if (valid <= 0) break;
    for (int i = 0; i < NT; ++i) {
      float* y = t.y + (t0 + i) * t.ldy + r;
      StoreRows8(y, out[hh][i], valid);
    }
  }
}

constexpr GgmlType TypeOf(WKind k) {
  return k == WKind::kF32 ? GgmlType::kF32 : k == WKind::kF16 ? GgmlType::kF16 : GgmlType::kBF16;
}

template <WKind K>
void GemmFloatTiles(const GemmTask& t, int64_t r0, int64_t r1) {
  const size_t tile_row_bytes = TileRowBytes(TypeOf(K), t.cols);
  const int64_t group_rows =
      kTileRows * std::max<int64_t>(1, static_cast<int64_t>(kL2Budget / tile_row_bytes));
  for (int64_t g0 = r0; g0 < r1; g0 += group_rows) {
    const int64_t g1 = std::min(r1, g0 + group_rows);
    for (int64_t t0 = 0; t0 < t.n_tokens;) {
      const int64_t nt = std::min<int64_t>(4, t.n_tokens - t0);
      for (int64_t row = g0; row < g1; row += kTileRows) {
        const uint8_t* tile = t.w + row / kTileRows * tile_row_bytes;
        if (nt <= 2 && row + 8 < g1) {
          if (nt == 1) {
            RunFloat<K, 1, 2>(t, tile, row, 0, t0);
          } else {
            RunFloat<K, 2, 2>(t, tile, row, 0, t0);
          }
          continue;
        }
        for (int h = 0; h < 2 && row + 8 * h < g1; ++h) {
          switch (nt) {
            case 1:
              RunFloat<K, 1, 1>(t, tile, row, h, t0);
              break;
            case 2:
              RunFloat<K, 2, 1>(t, tile, row, h, t0);
              break;
            case 3:
              RunFloat<K, 3, 1>(t, tile, row, h, t0);
              break;
            default:
              RunFloat<K, 4, 1>(t, tile, row, h, t0);
              break;
          }
        }
      }
      t0 += nt;
    }
  }
}

}  // namespace

void ConvertActQ8_0Avx2(const float* x, void* dst, int64_t n) {
  ActQ8_0* out = static_cast<ActQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK8_0; ++b) ConvertQ8_0Block(x + b * kQK8_0, out + b);
}

void ConvertActQ8_KAvx2(const float* x, void* dst, int64_t n) {
  ActQ8_K* out = static_cast<ActQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) ConvertQ8_KBlock(x + b * kQK_K, out + b);
}

void FillAvx2FloatKernels(GgmlType type, KernelSet* ks) {
  switch (type) {
    case GgmlType::kF32:
      ks->gemm = GemmFloat<WKind::kF32>;  // activations used as given
      ks->gemm_tiles = GemmFloatTiles<WKind::kF32>;
      break;
    case GgmlType::kF16:
      ks->gemm = GemmFloat<WKind::kF16>;
      ks->gemm_tiles = GemmFloatTiles<WKind::kF16>;
      ks->convert = ConvertF16AsF32;
      ks->act_block = 1;
      ks->act_block_bytes = sizeof(float);
      break;
    case GgmlType::kBF16:
      ks->gemm = GemmFloat<WKind::kBf16>;
      ks->gemm_tiles = GemmFloatTiles<WKind::kBf16>;
      ks->convert = ConvertBf16AsF32;
      ks->act_block = 1;
      ks->act_block_bytes = sizeof(float);
      break;
    default:
      return;
  }
}

uint64_t SumBytesAvx2(const uint8_t* p, size_t n) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    s0 = _mm256_add_epi64(s0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    s1 = _mm256_add_epi64(s1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    s2 = _mm256_add_epi64(s2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    s3 = _mm256_add_epi64(s3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  uint64_t total = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) total += p[i];
  return total;
}

}  // namespace uf::kernels
