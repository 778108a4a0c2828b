// GEMM (gemm.glsl) for 16-bit weights (two per word) and activations taken as pairs of the same
// format (quantize_pairs.comp: rounded once, as the CPU kernels round them), products summed in
// f32. The includer defines Unpack (a word to its two values: gemm_f16.glsl, gemm_bf16.glsl).
// The dot loop is gemm_pairs_loop.glsl's (shared with gemm_qkv.glsl), then subgroupAdd: a row's
// sum is the same bits whatever kTile and kRows.
//
// Register tiling over rows: the tiles of 16 and 32 tokens compute kRows = 2 rows a subgroup
// (rows 2 g and 2 g + 1 of subgroup g), each activation word loaded once for both rows, so
// activation loads per product halve. 32 x 2 f32 accumulators a lane at tile 32. The host
// dispatches rows / (rows per workgroup x kRows) workgroups (Kernels::RowsPerSubgroup); a row
// past the last (an odd row count) reads the last row's weights again and is not stored.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"

#if kTile >= 16
#define kRows 2
#else
#define kRows 1
#endif

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { uint x[]; };  // [n][cols / 2] pairs

void GemmMain() {
  const uint row0 = SubgroupRow() * kRows;
  if (row0 >= p.rows || Skip()) return;
  const uint pairs = p.cols / 2;
  uint base[kRows];  // each row's first word (its expert's, for gemmx_* / gemmg_*)
  [[unroll]] for (uint j = 0; j < kRows; ++j) base[j] = WRow(min(row0 + j, p.rows - 1)) * pairs;
  const uint t0 = TileStart();
  float acc[kRows][kTile];
#define PAIRS_W w
#include "gemm_pairs_loop.glsl"
  [[unroll]] for (uint j = 0; j < kRows; ++j) {
    if (row0 + j < p.rows) StoreTile(acc[j], t0, row0 + j);  // uniform
  }
}
