// The wide GEMM (gemm.glsl) for F16 weights (docs/gpu.md "The wide GEMV"): each lane reads 16
// bytes (8 weights, one uvec4) at a time, lane l taking the row's 16-byte chunks l, l + S,
// l + 2 S, ... (S: subgroup size), so one load instruction of a 32-lane subgroup covers 512
// contiguous bytes, and kUnroll of them are issued before the first is used. The activations
// come as F16 pairs (quantize_pairs.comp: rounded once, as the CPU kernels round them), one uvec4
// of 8 values per chunk.
// The sum is formed in another order than gemm_f16.glsl's (a lane's columns differ), so within
// a run every F16 GEMM uses this file or none does (Kernels picks gemm1w/gemm8w/gemmxw/gemmgw
// together): a token's row stays the same bits whatever the batch. A lane adds its chunks in
// increasing order, each chunk's 4 pairs in order, whether or not the loop is unrolled and
// whatever kTile is. Needs cols % 8 == 0 (16-byte aligned rows; Kernels checks).
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"

layout(std430, binding = 0) readonly buffer W { uvec4 w4[]; };
layout(std430, binding = 1) readonly buffer X { uvec4 x4[]; };  // [n][cols / 8] chunks of pairs

// Chunks a lane has in flight per loop iteration: 4 x 16 bytes (2 KiB per 32-lane subgroup),
// for the one-token and 8-token kernels, whose few products per chunk leave the loads' latency
// exposed. The 16- and 32-token tiles take one chunk at a time: each chunk feeds 16-32 tokens'
// products, which cover the next load, and 4 unrolled copies of a 32-token chunk took lavapipe
// ~20 s to compile (1 chunk: ~2 s). Those compute kRows = 2 rows a subgroup instead (register
// tiling over rows, as gemm_pairs.glsl: each activation chunk loaded once for both rows; the
// host's Kernels::RowsPerSubgroup agrees).
#if kTile >= 16
const uint kUnroll = 1;
#define kRows 2
#else
const uint kUnroll = 4;
#define kRows 1
#endif

// Adds chunk `c` of each row (weights wv[j]: 8 values) into every token's acc.
void Chunk(inout float acc[kRows][kTile], uvec4 wv[kRows], uint c, uint t0) {
  vec2 w[kRows][4];
  [[unroll]] for (uint j = 0; j < kRows; ++j) {
    w[j][0] = unpackHalf2x16(wv[j].x);
    w[j][1] = unpackHalf2x16(wv[j].y);
    w[j][2] = unpackHalf2x16(wv[j].z);
    w[j][3] = unpackHalf2x16(wv[j].w);
  }
  [[unroll]] for (uint t = 0; t < kTile; ++t) {
    if (InBatch(t0 + t)) {
      const uvec4 xa = x4[XTok(t0 + t) * (p.x_stride / 4) + c];
      const vec2 a0 = unpackHalf2x16(xa.x), a1 = unpackHalf2x16(xa.y);
      const vec2 a2 = unpackHalf2x16(xa.z), a3 = unpackHalf2x16(xa.w);
      [[unroll]] for (uint j = 0; j < kRows; ++j) {
        acc[j][t] += w[j][0].x * a0.x + w[j][0].y * a0.y;
        acc[j][t] += w[j][1].x * a1.x + w[j][1].y * a1.y;
        acc[j][t] += w[j][2].x * a2.x + w[j][2].y * a2.y;
        acc[j][t] += w[j][3].x * a3.x + w[j][3].y * a3.y;
      }
    }
  }
}

void GemmMain() {
  const uint row0 = SubgroupRow() * kRows;
  if (row0 >= p.rows || Skip()) return;
  const uint chunks = p.cols / 8;
  uint base[kRows];  // each row's first chunk (its expert's, for gemmx_*); past the end: the last
  [[unroll]] for (uint j = 0; j < kRows; ++j) base[j] = WRow(min(row0 + j, p.rows - 1)) * chunks;
  const uint t0 = TileStart();
  const uint s = gl_SubgroupSize;
  float acc[kRows][kTile];
  [[unroll]] for (uint j = 0; j < kRows; ++j) {
    [[unroll]] for (uint t = 0; t < kTile; ++t) acc[j][t] = 0.0;
  }
  uint c = gl_SubgroupInvocationID;
  for (; c + (kUnroll - 1) * s < chunks; c += kUnroll * s) {
    uvec4 wv[kUnroll][kRows];
    [[unroll]] for (uint u = 0; u < kUnroll; ++u) {
      [[unroll]] for (uint j = 0; j < kRows; ++j) wv[u][j] = w4[base[j] + c + u * s];
    }
    [[unroll]] for (uint u = 0; u < kUnroll; ++u) Chunk(acc, wv[u], c + u * s, t0);
  }
#if kTile < 16
  for (; c < chunks; c += s) {  // the tail
    const uvec4 wv[1] = {w4[base[0] + c]};
    Chunk(acc, wv, c, t0);
  }
#endif
  [[unroll]] for (uint j = 0; j < kRows; ++j) {
    if (row0 + j < p.rows) StoreTile(acc[j], t0, row0 + j);  // uniform
  }
}
