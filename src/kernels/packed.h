// Layouts private to the SIMD kernels: weight tiles repacked at load time and the activation
// formats the SIMD tiers convert to.
//
// Weight tiles interleave 16 rows so one 512-bit register holds 4 bytes of each of 16 rows: an
// int8 dot instruction with a broadcast activation then yields 16 row sums at once, with no
// horizontal reductions, and one f16->f32 conversion gives 16 rows' scales. A tile holds exactly
// the bytes of the 16 GGUF blocks it replaces (bandwidth is the decode bottleneck), only moved.
// A packed matrix is [ceil(rows / 16)][cols / block] tiles; missing tail rows are zero.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/types.h"
#include "kernels/blocks.h"
#include "kernels/dispatch.h"

namespace uf::kernels {

inline constexpr int kTileRows = 16;

// qs[k][r][i] = GGUF qs byte 4k + i of row r: low nibbles are values 4k + i, high nibbles
// values 16 + 4k + i.
struct TileQ4_0 {
  uint16_t d[kTileRows];
  uint8_t qs[4][kTileRows][4];
};
static_assert(sizeof(TileQ4_0) == kTileRows * sizeof(BlockQ4_0));

// qs[k][r][i] = value 4k + i of row r plus 128, as u8 (the int8 dot takes unsigned x signed;
// the +128 is undone with the activation's bias term). The AVX2 form (TileVariant 1) keeps the
// int8 values: its sign trick (|w| x sign(a, w)) wants them signed, and the +128 cost it an XOR
// per 32 bytes, one operation in six of a kernel that is compute-bound in cache.
struct TileQ8_0 {
  uint16_t d[kTileRows];
  uint8_t qs[8][kTileRows][4];
};
static_assert(sizeof(TileQ8_0) == kTileRows * sizeof(BlockQ8_0));

// scales[k][r][i] = GGUF scales byte 4k + i of row r (still 6-bit packed);
// qs[c][r][i] = GGUF qs byte 4c + i of row r.
struct TileQ4_K {
  uint16_t d[kTileRows];
  uint16_t dmin[kTileRows];
  uint8_t scales[3][kTileRows][4];
  uint8_t qs[32][kTileRows][4];
};
static_assert(sizeof(TileQ4_K) == kTileRows * sizeof(BlockQ4_K));

// scales[j][r] = sub-block j scale of row r. q holds the GGUF ql/qh bytes in the order the
// kernels consume them, so a tile is read front to back (a jumping order halved the streaming
// rate): step s = 8h + l (h = 0..1 half of the super-block, l = 0..7 group of 4 values) holds
// ql bytes 64h + 4l.. (values 128h + 4l.. low nibbles, + 64 high), ql bytes 64h + 32 + 4l..
// (values + 32 and + 96) and qh bytes 32h + 4l.. (2 high bits of all four).
//
// The AVX2 kernels read Q6_K steps in another form (TileVariant 1), where each of the three
// 4-byte groups carries one whole value in its low 6 bits: with V0..V3 the 6-bit values the step
// holds (value + 0, + 32, + 64, + 96), the groups are V0 | (V3 & 3) << 6, V1 | (V3 >> 2 & 3) << 6
// and V2 | (V3 >> 4) << 6. Three values then take one AND each and the fourth eight operations,
// against 17 operations for all four in the GGUF form: Q6_K decode is compute-bound on AVX2.
struct TileQ6_K {
  uint16_t d[kTileRows];
  int8_t scales[16][kTileRows];
  uint8_t q[16][3][kTileRows][4];
};
static_assert(sizeof(TileQ6_K) == kTileRows * sizeof(BlockQ6_K));

// e[r] = row r's E8M0 byte; qs[k][r][i] = GGUF qs byte 4k + i of row r (as TileQ4_0). Read by
// the AVX-512 tier only; AVX2 reads MXFP4 as GGUF rows.
struct TileMxfp4 {
  uint8_t e[kTileRows];
  uint8_t qs[4][kTileRows][4];
};
static_assert(sizeof(TileMxfp4) == kTileRows * sizeof(BlockMxfp4));

// Float weights are tiled the same way, one column at a time: F32 / F16 tiles are
// [cols][16 rows] elements (one 16-lane register per column, multiplied by a broadcast
// activation), BF16 tiles [ceil(cols / 2)][16 rows][2] (one vdpbf16ps per column pair; an odd
// last column is paired with a zero).

// True for the types whose SIMD kernels read tiles.
bool HasTileLayout(GgmlType type);
// Bytes of one tile row (16 rows x cols) of the packed copy.
size_t TileRowBytes(GgmlType type, int64_t cols);
// Bytes of the packed copy of a rows x cols matrix.
size_t PackedBytes(GgmlType type, int64_t rows, int64_t cols);
// Which form of `type`'s tiles the kernels of tier `isa` read: 0 for the layouts above, shared
// by the SIMD tiers, 1 for the AVX2 forms of Q6_K and Q8_0.
int TileVariant(GgmlType type, Isa isa);
// Packs GGUF rows [rows][src_row_bytes] into tiles at dst (PackedBytes(type, rows, cols)), in
// the form tier `isa` reads.
void PackMatrix(GgmlType type, Isa isa, const uint8_t* src, int64_t rows, int64_t cols,
                uint8_t* dst);

// Q8_0-family activations of the SIMD tiers: the reference Q8_0 block with its f16 scale
// widened and -128 * sum(qs), the correction for both the Q4_0 nibble offset (-8, scaled by
// 16, see the Q4_0 kernels) and the Q8_0 +128 weight bias.
struct ActQ8_0 {
  float d;
  int32_t bias;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(ActQ8_0) == 40);

// Q8_K-family activations: the reference Q8_K block plus the two sum terms the K-quant kernels
// need. Sub-block sums B_j (32 values) = 64 * min_hi[j] + min_lo[j] with min_lo in [0, 64), so
// the Q4_K min term is two int8 dots; q6_bias[j] = -32 * bsums[j] removes the Q6_K offset.
struct ActQ8_K {
  float d;
  int8_t qs[kQK_K];
  int8_t min_hi[8];
  int8_t min_lo[8];
  int32_t q6_bias[16];
};
static_assert(sizeof(ActQ8_K) == 4 + 256 + 16 + 64);

// Portable converters to the formats above (from the reference quantizers); the SIMD
// converters must produce the same bytes.
void ConvertActQ8_0(const float* x, void* dst, int64_t n);
void ConvertActQ8_K(const float* x, void* dst, int64_t n);

// Portable kernels for GGUF rows with the SIMD activation formats: used only when a matrix was
// created under a tier without tiles and a SIMD tier is selected later (tests). Slow.
GemmFn GemmRowsFromActQ8_0(GgmlType type);
GemmFn GemmRowsFromActQ8_K(GgmlType type);

}  // namespace uf::kernels
