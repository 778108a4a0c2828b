#include "kernels/packed.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "kernels/quant.h"

namespace uf::kernels {
namespace {

// Copies 4-byte group k of src into chunks[k][r] for k < n_groups.
inline void Scatter4(const uint8_t* src, int n_groups, int r, uint8_t (*chunks)[kTileRows][4]) {
  for (int k = 0; k < n_groups; ++k) std::memcpy(chunks[k][r], src + 4 * k, 4);
}

// Row r of every tile of a tile row: one sequential read of the source row.
void PackRow(const BlockQ4_0* src, int64_t nb, int r, TileQ4_0* tiles) {
  for (int64_t b = 0; b < nb; ++b) {
    tiles[b].d[r] = src[b].d;
    Scatter4(src[b].qs, 4, r, tiles[b].qs);
  }
}

void PackRow(const BlockMxfp4* src, int64_t nb, int r, TileMxfp4* tiles) {
  for (int64_t b = 0; b < nb; ++b) {
    tiles[b].e[r] = src[b].e;
    Scatter4(src[b].qs, 4, r, tiles[b].qs);
  }
}

// The AVX2 form of Q8_0 (packed.h): the int8 values as they are.
struct Q8_0Avx2 {};
void PackRow(const BlockQ8_0* src, int64_t nb, int r, TileQ8_0* tiles, Q8_0Avx2) {
  for (int64_t b = 0; b < nb; ++b) {
    tiles[b].d[r] = src[b].d;
    Scatter4(reinterpret_cast<const uint8_t*>(src[b].qs), 8, r, tiles[b].qs);
  }
}

void PackRow(const BlockQ8_0* src, int64_t nb, int r, TileQ8_0* tiles) {
  for (int64_t b = 0; b < nb; ++b) {
    tiles[b].d[r] = src[b].d;
    for (int k = 0; k < 8; ++k) {
      uint32_t v;
      std::memcpy(&v, src[b].qs + 4 * k, 4);
      v ^= 0x80808080u;  // int8 -> uint8 with +128
      std::memcpy(tiles[b].qs[k][r], &v, 4);
    }
  }
}

void PackRow(const BlockQ4_K* src, int64_t nb, int r, TileQ4_K* tiles) {
  for (int64_t b = 0; b < nb; ++b) {
    tiles[b].d[r] = src[b].d;
    tiles[b].dmin[r] = src[b].dmin;
    Scatter4(src[b].scales, 3, r, tiles[b].scales);
    Scatter4(src[b].qs, 32, r, tiles[b].qs);
  }
}

void PackRow(const BlockQ6_K* src, int64_t nb, int r, TileQ6_K* tiles) {
  for (int64_t b = 0; b < nb; ++b) {
    tiles[b].d[r] = src[b].d;
    for (int j = 0; j < 16; ++j) tiles[b].scales[j][r] = src[b].scales[j];
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 8; ++l) {
        uint8_t(*step)[kTileRows][4] = tiles[b].q[8 * h + l];
        std::memcpy(step[0][r], src[b].ql + 64 * h + 4 * l, 4);
        std::memcpy(step[1][r], src[b].ql + 64 * h + 32 + 4 * l, 4);
        std::memcpy(step[2][r], src[b].qh + 32 * h + 4 * l, 4);
      }
    }
  }
}

// The AVX2 form of Q6_K (packed.h): the same steps, each value whole in one group's low bits.
struct Q6KAvx2 {};
void PackRow(const BlockQ6_K* src, int64_t nb, int r, TileQ6_K* tiles, Q6KAvx2) {
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K& in = src[b];
    TileQ6_K& out = tiles[b];
    out.d[r] = in.d;
    for (int j = 0; j < 16; ++j) out.scales[j][r] = in.scales[j];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = in.ql + 64 * h;
      const uint8_t* qh = in.qh + 32 * h;
      for (int l = 0; l < 8; ++l) {
        for (int i = 0; i < 4; ++i) {
          const int e = 4 * l + i;  // value 128h + e (+ 32k for k = 0..3)
          const int v0 = (ql[e] & 0xF) | (qh[e] & 3) << 4;
          const int v1 = (ql[e + 32] & 0xF) | (qh[e] >> 2 & 3) << 4;
          const int v2 = (ql[e] >> 4) | (qh[e] >> 4 & 3) << 4;
          const int v3 = (ql[e + 32] >> 4) | (qh[e] >> 6 & 3) << 4;
          out.q[8 * h + l][0][r][i] = static_cast<uint8_t>(v0 | (v3 & 3) << 6);
          out.q[8 * h + l][1][r][i] = static_cast<uint8_t>(v1 | (v3 >> 2 & 3) << 6);
          out.q[8 * h + l][2][r][i] = static_cast<uint8_t>(v2 | (v3 >> 4) << 6);
        }
      }
    }
  }
}

// Float types: element (r, c) of a tile row goes to column c's group of 16 (pairs of columns
// for BF16). Reading 16 rows and writing one tile row keeps the writes within L2.
template <typename T, int kPair>
void PackFloat(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  const int64_t padded_cols = (cols + kPair - 1) / kPair * kPair;
  const size_t tile_row = kTileRows * padded_cols;
  T* out = reinterpret_cast<T*>(dst);
  const T* in = reinterpret_cast<const T*>(src);
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int n = static_cast<int>(std::min<int64_t>(kTileRows, rows - r0));
    std::memset(static_cast<void*>(out), 0, tile_row * sizeof(T));
    for (int r = 0; r < n; ++r) {
      const T* row = in + (r0 + r) * cols;
      for (int64_t c = 0; c < cols; ++c) {
        out[(c / kPair * kTileRows + r) * kPair + c % kPair] = row[c];
      }
    }
    out += tile_row;
  }
}

// nb blocks per row; Form... selects a PackRow overload other than the GGUF-order one.
template <typename Block, typename Tile, typename... Form>
void PackAll(const uint8_t* src, int64_t rows, int64_t nb, uint8_t* dst, Form... form) {
  Tile* out = reinterpret_cast<Tile*>(dst);
  const Block* in = reinterpret_cast<const Block*>(src);
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int n = static_cast<int>(std::min<int64_t>(kTileRows, rows - r0));
    if (n < kTileRows) std::memset(static_cast<void*>(out), 0, nb * sizeof(Tile));
    for (int r = 0; r < n; ++r) PackRow(in + (r0 + r) * nb, nb, r, out, form...);
    out += nb;
  }
}

}  // namespace

bool HasTileLayout(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
    case GgmlType::kMXFP4:
      return true;
    default:
      return false;
  }
}

size_t TileRowBytes(GgmlType type, int64_t cols) {
  if (type == GgmlType::kBF16) cols = (cols + 1) / 2 * 2;
  return kTileRows * KernelRowBytes(type, cols);
}

size_t PackedBytes(GgmlType type, int64_t rows, int64_t cols) {
  return TileRowBytes(type, cols) * static_cast<size_t>((rows + kTileRows - 1) / kTileRows);
}

int TileVariant(GgmlType type, Isa isa) {
  return (type == GgmlType::kQ6_K || type == GgmlType::kQ8_0) && isa == Isa::kAvx2 ? 1 : 0;
}

void PackMatrix(GgmlType type, Isa isa, const uint8_t* src, int64_t rows, int64_t cols,
                uint8_t* dst) {
  switch (type) {
    case GgmlType::kF32:
      return PackFloat<uint32_t, 1>(src, rows, cols, dst);
    case GgmlType::kF16:
      return PackFloat<uint16_t, 1>(src, rows, cols, dst);
    case GgmlType::kBF16:
      return PackFloat<uint16_t, 2>(src, rows, cols, dst);
    case GgmlType::kQ4_0:
      return PackAll<BlockQ4_0, TileQ4_0>(src, rows, cols / kQK4_0, dst);
    case GgmlType::kQ8_0:
      if (TileVariant(type, isa) == 1) {
        return PackAll<BlockQ8_0, TileQ8_0>(src, rows, cols / kQK8_0, dst, Q8_0Avx2{});
      }
      return PackAll<BlockQ8_0, TileQ8_0>(src, rows, cols / kQK8_0, dst);
    case GgmlType::kQ4_K:
      return PackAll<BlockQ4_K, TileQ4_K>(src, rows, cols / kQK_K, dst);
    case GgmlType::kMXFP4:
      return PackAll<BlockMxfp4, TileMxfp4>(src, rows, cols / kQKMxfp4, dst);
    case GgmlType::kQ6_K:
      if (TileVariant(type, isa) == 1) {
        return PackAll<BlockQ6_K, TileQ6_K>(src, rows, cols / kQK_K, dst, Q6KAvx2{});
      }
      return PackAll<BlockQ6_K, TileQ6_K>(src, rows, cols / kQK_K, dst);
    default:
      UF_CHECK(false) << "PackMatrix: no tile layout for type " << static_cast<int>(type);
  }
}

void ConvertActQ8_0(const float* x, void* dst, int64_t n) {
  ActQ8_0* out = static_cast<ActQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    BlockQ8_0 q;
    QuantizeRow(GgmlType::kQ8_0, x + b * kQK8_0, &q, kQK8_0);
    out[b].d = Fp16ToFp32(q.d);
    int sum = 0;
    for (int j = 0; j < kQK8_0; ++j) sum += q.qs[j];
    out[b].bias = -128 * sum;
    std::memcpy(out[b].qs, q.qs, kQK8_0);
  }
}

void ConvertActQ8_K(const float* x, void* dst, int64_t n) {
  ActQ8_K* out = static_cast<ActQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ8_K q;
    QuantizeRow(GgmlType::kQ8_K, x + b * kQK_K, &q, kQK_K);
    out[b].d = q.d;
    std::memcpy(out[b].qs, q.qs, kQK_K);
    for (int j = 0; j < 8; ++j) {
      const int s = q.bsums[2 * j] + q.bsums[2 * j + 1];
      out[b].min_hi[j] = static_cast<int8_t>(s >> 6);  // floor division by 64
      out[b].min_lo[j] = static_cast<int8_t>(s & 63);
    }
    for (int j = 0; j < 16; ++j) out[b].q6_bias[j] = -32 * q.bsums[j];
  }
}

namespace {

// Rebuilds the reference activation row from the SIMD format (exactly: the f32 scale came from
// an f16, and bsums = -q6_bias / 32), then uses the reference dot.
template <GgmlType kType>
void GemmRowsFromAct(const GemmTask& t, int64_t r0, int64_t r1) {
  constexpr bool kQ8K = kType == GgmlType::kQ4_K || kType == GgmlType::kQ6_K;
  using Ref = std::conditional_t<kQ8K, BlockQ8_K, BlockQ8_0>;
  const int64_t nb = t.cols / (kQ8K ? kQK_K : kQK8_0);
  std::vector<Ref> ref(nb);
  for (int64_t tok = 0; tok < t.n_tokens; ++tok) {
    const uint8_t* a = t.act + tok * t.act_row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      if constexpr (kQ8K) {
        const ActQ8_K& x = reinterpret_cast<const ActQ8_K*>(a)[b];
        ref[b].d = x.d;
        std::memcpy(ref[b].qs, x.qs, kQK_K);
        for (int j = 0; j < 16; ++j) ref[b].bsums[j] = static_cast<int16_t>(x.q6_bias[j] / -32);
      } else {
        const ActQ8_0& x = reinterpret_cast<const ActQ8_0*>(a)[b];
        ref[b].d = Fp32ToFp16(x.d);
        std::memcpy(ref[b].qs, x.qs, kQK8_0);
      }
    }
    for (int64_t r = r0; r < r1; ++r) {
      t.y[tok * t.ldy + r] = DotReference(kType, t.w + r * t.w_row_bytes, ref.data(), t.cols);
    }
  }
}

}  // namespace

GemmFn GemmRowsFromActQ8_0(GgmlType type) {
  return type == GgmlType::kQ4_0 ? GemmRowsFromAct<GgmlType::kQ4_0>
                                 : GemmRowsFromAct<GgmlType::kQ8_0>;
}

GemmFn GemmRowsFromActQ8_K(GgmlType type) {
  return type == GgmlType::kQ4_K ? GemmRowsFromAct<GgmlType::kQ4_K>
                                 : GemmRowsFromAct<GgmlType::kQ6_K>;
}

}  // namespace uf::kernels
