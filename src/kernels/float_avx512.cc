// AVX-512 kernels for F32 / F16 / BF16 weights (16-row column tiles, packed.h; GGUF rows as a
// fallback), the activation converters of the tier and the bandwidth probe.
// GCC 12 reports false -Wuninitialized inside its own AVX-512 intrinsic headers (GCC PR 105593);
// the pragmas must precede the header to cover it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/avx512.h"
#include "kernels/packed.h"
#include "kernels/quant.h"

namespace uf::kernels {
namespace {

// Small fixed-trip loops over registers must be unrolled, or the compiler keeps the register
// arrays in memory.
#define UF_UNROLL _Pragma("GCC unroll 16")

// ---------------------------------------------------------------------------------------------
// Activation converters. Each matches the portable converter bit for bit: same float
// operations in the same order, round-to-nearest-even conversions.

void ConvertQ8_0Block(const float* x, ActQ8_0* out) {
  const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const __m512 vid = _mm512_set1_ps(id);
  const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
  const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
  out->d = Fp16ToFp32(Fp32ToFp16(d));
  out->bias = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out->qs), _mm512_cvtsepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out->qs + 16), _mm512_cvtsepi32_epi8(q1));
}

void ConvertQ8_KBlock(const float* x, ActQ8_K* out) {
  __m512 v[16];
  __m512 amax_v = _mm512_setzero_ps();
  UF_UNROLL
  for (int i = 0; i < 16; ++i) {
    v[i] = _mm512_loadu_ps(x + 16 * i);
    amax_v = _mm512_max_ps(amax_v, _mm512_abs_ps(v[i]));
  }
  const float amax = _mm512_reduce_max_ps(amax_v);
  if (!(amax > 0.0f)) {
    std::memset(out, 0, sizeof(*out));
    return;
  }
  // The first value of largest magnitude sets the sign of the scale, as in the reference.
  float max = 0.0f;
  UF_UNROLL
  for (int i = 0; i < 16; ++i) {
    const __mmask16 m = _mm512_cmp_ps_mask(_mm512_abs_ps(v[i]), _mm512_set1_ps(amax), _CMP_EQ_OQ);
    if (m != 0) {
      max = x[16 * i + __builtin_ctz(m)];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m512 vs = _mm512_set1_ps(iscale);
  int bsums[16];
  UF_UNROLL
  for (int i = 0; i < 16; ++i) {
    const __m512i q =
        _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(vs, v[i])), _mm512_set1_epi32(127));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out->qs + 16 * i), _mm512_cvtsepi32_epi8(q));
    bsums[i] = _mm512_reduce_add_epi32(q);
  }
  out->d = 1.0f / iscale;
  UF_UNROLL
  for (int j = 0; j < 8; ++j) {
    const int s = bsums[2 * j] + bsums[2 * j + 1];
    out->min_hi[j] = static_cast<int8_t>(s >> 6);
    out->min_lo[j] = static_cast<int8_t>(s & 63);
  }
  UF_UNROLL
  for (int j = 0; j < 16; ++j) out->q6_bias[j] = -32 * bsums[j];
}

// f32 -> f16 -> f32: the values the reference multiplies F16 weights with, kept in f32 for the
// broadcasts of the tile kernels.
void ConvertF16AsF32(const float* x, void* dst, int64_t n) {
  float* out = static_cast<float*>(dst);
  int64_t i = 0;
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i), kRound)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(
        out + i, m, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), kRound)));
  }
}

// f32 -> bf16 in integer arithmetic (round half to even, quiet NaN), exactly as Fp32ToBf16;
// the hardware instruction would also flush subnormals.
__m256i Bf16Of(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

void ConvertBf16(const float* x, void* dst, int64_t n) {
  uint16_t* out = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), Bf16Of(_mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(out + i, m, Bf16Of(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// ---------------------------------------------------------------------------------------------
// Float GEMM: NR rows x NT tokens of 16-lane accumulators, reduced horizontally at the end.

enum class WKind { kF32, kF16, kBf16 };

// Values per step: 16 f32 lanes, or 32 bf16 pairs for vdpbf16ps.
template <WKind K>
constexpr int64_t kStep = K == WKind::kBf16 ? 32 : 16;

template <WKind K>
inline __m512 LoadW(const uint8_t* row, int64_t c, __mmask32 m, bool masked) {
  if constexpr (K == WKind::kF32) {
    const float* p = reinterpret_cast<const float*>(row) + c;
    return masked ? _mm512_maskz_loadu_ps(static_cast<__mmask16>(m), p) : _mm512_loadu_ps(p);
  } else if constexpr (K == WKind::kF16) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + c;
    return _mm512_cvtph_ps(masked ? _mm256_maskz_loadu_epi16(static_cast<__mmask16>(m), p)
                                  : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + c;
    return _mm512_castsi512_ps(masked ? _mm512_maskz_loadu_epi16(m, p) : _mm512_loadu_si512(p));
  }
}

template <WKind K>
inline __m512 LoadA(const uint8_t* row, int64_t c, __mmask32 m, bool masked) {
  if constexpr (K == WKind::kBf16) {
    return LoadW<K>(row, c, m, masked);  // bf16 pairs, as the weights
  } else {
    return LoadW<WKind::kF32>(row, c, m, masked);
  }
}

template <WKind K>
inline __m512 Fma(__m512 w, __m512 a, __m512 acc) {
  if constexpr (K == WKind::kBf16) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_castps_si512(a),
                            (__m512bh)_mm512_castps_si512(w));
  } else {
    return _mm512_fmadd_ps(w, a, acc);
  }
}

template <WKind K, int NR, int NT>
void Block(const GemmTask& t, int64_t r, int64_t t0) {
  const uint8_t* w[NR];
  const uint8_t* a[NT];
  UF_UNROLL
  for (int i = 0; i < NR; ++i) w[i] = t.w + (r + i) * t.w_row_bytes;
  UF_UNROLL
  for (int j = 0; j < NT; ++j) a[j] = t.act + (t0 + j) * t.act_row_bytes;
  __m512 acc[NR][NT];
  UF_UNROLL
  for (int i = 0; i < NR; ++i) {
    UF_UNROLL
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  auto step = [&](int64_t c, __mmask32 m, bool masked) {
    __m512 wv[NR];
    UF_UNROLL
    for (int i = 0; i < NR; ++i) wv[i] = LoadW<K>(w[i], c, m, masked);
    UF_UNROLL
    for (int j = 0; j < NT; ++j) {
      const __m512 av = LoadA<K>(a[j], c, m, masked);
      UF_UNROLL
      for (int i = 0; i < NR; ++i) acc[i][j] = Fma<K>(wv[i], av, acc[i][j]);
    }
  };
  constexpr int64_t s = kStep<K>;
  int64_t c = 0;
  for (; c + s <= t.cols; c += s) step(c, 0, false);
  if (c < t.cols) step(c, static_cast<__mmask32>((1ull << (t.cols - c)) - 1), true);
  UF_UNROLL
  for (int i = 0; i < NR; ++i) {
    UF_UNROLL
    for (int j = 0; j < NT; ++j) t.y[(t0 + j) * t.ldy + r + i] = _mm512_reduce_add_ps(acc[i][j]);
  }
}

template <WKind K, int NR>
void BlockTokens(const GemmTask& t, int64_t r, int64_t t0, int64_t nt) {
  switch (nt) {
    case 1:
      return Block<K, NR, 1>(t, r, t0);
    case 2:
      return Block<K, NR, 2>(t, r, t0);
    case 3:
      return Block<K, NR, 3>(t, r, t0);
    default:
      return Block<K, NR, 4>(t, r, t0);
  }
}

// Row blocks sized so their weights stay in L2 while every token group passes over them.
constexpr size_t kL2Budget = 512 * 1024;

// GGUF rows: the fallback for matrices created while no SIMD tier was active.
template <WKind K>
void GemmFloat(const GemmTask& t, int64_t r0, int64_t r1) {
  const int64_t block_rows =
      std::max<int64_t>(4, static_cast<int64_t>(kL2Budget / t.w_row_bytes) / 4 * 4);
  for (int64_t b0 = r0; b0 < r1; b0 += block_rows) {
    const int64_t b1 = std::min(r1, b0 + block_rows);
    for (int64_t t0 = 0; t0 < t.n_tokens; t0 += 4) {
      const int64_t nt = std::min<int64_t>(4, t.n_tokens - t0);
      int64_t r = b0;
      for (; r + 4 <= b1; r += 4) BlockTokens<K, 4>(t, r, t0, nt);
      for (; r < b1; ++r) BlockTokens<K, 1>(t, r, t0, nt);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Float tiles: per column, 16 rows' weights in one register times a broadcast activation, so a
// tile row is one sequential stream and no horizontal sums are needed. U = 4 accumulators per
// token cover the FMA latency of a single token's decode.

template <WKind K>
inline __m512 TileColumn(const uint8_t* tile, int64_t c) {
  if constexpr (K == WKind::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(tile) + kTileRows * c);
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(tile) + kTileRows * c)));
  }
}

inline __m512 Bcast(const float* p) { return _mm512_set1_ps(*p); }

// Two bf16 activations (columns 2p, 2p + 1) in every 32-bit lane.
inline __m512bh BcastPair(const uint16_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(v));
}

template <WKind K, int NT>
void FloatTileRow(const uint8_t* tile, int64_t cols, const uint8_t* const* act, __m512* out) {
  // Four chains per output whatever NT: each sum then adds the same terms in the same order for
  // every batch size, so a token's logits do not depend on the tokens beside it (speculative
  // decoding's verify rows must equal single-token decode bit for bit). NT <= 4 keeps the
  // 4 x NT accumulators in registers.
  constexpr int U = 4;
  static_assert(NT <= 4);
  __m512 acc[NT][U];
  UF_UNROLL
  for (int t = 0; t < NT; ++t) {
    UF_UNROLL
    for (int u = 0; u < U; ++u) acc[t][u] = _mm512_setzero_ps();
  }
  if constexpr (K == WKind::kBf16) {
    const uint16_t* a[NT];
    UF_UNROLL
    for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const uint16_t*>(act[t]);
    const int64_t pairs = cols / 2;
    int64_t p = 0;
    for (; p + U <= pairs; p += U) {
      UF_UNROLL
      for (int u = 0; u < U; ++u) {
        const __m512bh w = (__m512bh)_mm512_loadu_si512(tile + 64 * (p + u));
        UF_UNROLL
        for (int t = 0; t < NT; ++t) {
          acc[t][u] = _mm512_dpbf16_ps(acc[t][u], BcastPair(a[t] + 2 * (p + u)), w);
        }
      }
    }
    for (; p < pairs; ++p) {
      const __m512bh w = (__m512bh)_mm512_loadu_si512(tile + 64 * p);
      UF_UNROLL
      for (int t = 0; t < NT; ++t)
        acc[t][0] = _mm512_dpbf16_ps(acc[t][0], BcastPair(a[t] + 2 * p), w);
    }
    if (cols % 2 != 0) {  // the last column, paired with a zero weight: read only its value
      const __m512bh w = (__m512bh)_mm512_loadu_si512(tile + 64 * pairs);
      UF_UNROLL
      for (int t = 0; t < NT; ++t) {
        const __m512bh v = (__m512bh)_mm512_set1_epi32(a[t][cols - 1]);
        acc[t][0] = _mm512_dpbf16_ps(acc[t][0], v, w);
      }
    }
  } else {
    const float* a[NT];
    UF_UNROLL
    for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const float*>(act[t]);
    int64_t c = 0;
    for (; c + U <= cols; c += U) {
      UF_UNROLL
      for (int u = 0; u < U; ++u) {
        const __m512 w = TileColumn<K>(tile, c + u);
        UF_UNROLL
        for (int t = 0; t < NT; ++t) acc[t][u] = _mm512_fmadd_ps(w, Bcast(a[t] + c + u), acc[t][u]);
      }
    }
    for (; c < cols; ++c) {
      const __m512 w = TileColumn<K>(tile, c);
      UF_UNROLL
      for (int t = 0; t < NT; ++t) acc[t][0] = _mm512_fmadd_ps(w, Bcast(a[t] + c), acc[t][0]);
    }
  }
  UF_UNROLL
  for (int t = 0; t < NT; ++t) {
    __m512 s = acc[t][0];
    UF_UNROLL
    for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, acc[t][u]);
    out[t] = s;
  }
}

template <WKind K, int NT>
void RunFloatTile(const GemmTask& t, const uint8_t* tile, int64_t row, int64_t t0) {
  const uint8_t* act[NT];
  UF_UNROLL
  for (int i = 0; i < NT; ++i) act[i] = t.act + (t0 + i) * t.act_row_bytes;
  __m512 out[NT];
  FloatTileRow<K, NT>(tile, t.cols, act, out);
  const int64_t valid = std::min<int64_t>(kTileRows, t.ldy - row);
  const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1);
  UF_UNROLL
  for (int i = 0; i < NT; ++i) _mm512_mask_storeu_ps(t.y + (t0 + i) * t.ldy + row, mask, out[i]);
}

template <WKind K>
void RunFloatTileTokens(const GemmTask& t, const uint8_t* tile, int64_t row, int64_t t0,
                        int64_t nt) {
  switch (nt) {
    case 1:
      return RunFloatTile<K, 1>(t, tile, row, t0);
    case 2:
      return RunFloatTile<K, 2>(t, tile, row, t0);
    case 3:
      return RunFloatTile<K, 3>(t, tile, row, t0);
    default:
      return RunFloatTile<K, 4>(t, tile, row, t0);
  }
}

constexpr GgmlType TypeOf(WKind k) {
  return k == WKind::kF32 ? GgmlType::kF32 : k == WKind::kF16 ? GgmlType::kF16 : GgmlType::kBF16;
}

// Groups of tile rows that fit L2 x groups of up to 4 tokens.
template <WKind K>
void GemmFloatTiles(const GemmTask& t, int64_t r0, int64_t r1) {
  const size_t tile_row_bytes = TileRowBytes(TypeOf(K), t.cols);
  const int64_t group_rows =
      kTileRows * std::max<int64_t>(1, static_cast<int64_t>(kL2Budget / tile_row_bytes));
  for (int64_t g0 = r0; g0 < r1; g0 += group_rows) {
    const int64_t g1 = std::min(r1, g0 + group_rows);
    for (int64_t t0 = 0; t0 < t.n_tokens; t0 += 4) {
      const int64_t nt = std::min<int64_t>(4, t.n_tokens - t0);
      for (int64_t row = g0; row < g1; row += kTileRows) {
        RunFloatTileTokens<K>(t, t.w + row / kTileRows * tile_row_bytes, row, t0, nt);
      }
    }
  }
}

}  // namespace

void ConvertActQ8_0Avx512(const float* x, void* dst, int64_t n) {
  ActQ8_0* out = static_cast<ActQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK8_0; ++b) ConvertQ8_0Block(x + b * kQK8_0, out + b);
}

void ConvertActQ8_KAvx512(const float* x, void* dst, int64_t n) {
  ActQ8_K* out = static_cast<ActQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) ConvertQ8_KBlock(x + b * kQK_K, out + b);
}

void FillAvx512FloatKernels(GgmlType type, KernelSet* ks) {
  switch (type) {
    case GgmlType::kF32:
      ks->gemm = GemmFloat<WKind::kF32>;
      ks->gemm_tiles = GemmFloatTiles<WKind::kF32>;
      // Activations are used as given (MatMul skips the conversion for F32).
      break;
    case GgmlType::kF16:
      ks->gemm = GemmFloat<WKind::kF16>;
      ks->gemm_tiles = GemmFloatTiles<WKind::kF16>;
      ks->convert = ConvertF16AsF32;
      ks->act_block = 1;
      ks->act_block_bytes = sizeof(float);
      break;
    case GgmlType::kBF16:
      if (!GetCpuFeatures().avx512bf16) break;  // keep the AVX2 kernels
      ks->gemm = GemmFloat<WKind::kBf16>;
      ks->gemm_tiles = GemmFloatTiles<WKind::kBf16>;
      ks->convert = ConvertBf16;
      ks->act_block = 1;
      ks->act_block_bytes = sizeof(uint16_t);
      break;
    default:
      break;
  }
}

uint64_t SumBytesAvx512(const uint8_t* p, size_t n) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p + i));
    s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(p + i + 64));
    s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(p + i + 128));
    s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(p + i + 192));
  }
  uint64_t s =
      _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
  for (; i < n; ++i) s += p[i];
  return s;
}

}  // namespace uf::kernels
