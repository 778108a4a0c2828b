// The wide GEMM (gemm.glsl) for F16 weights (docs/gpu.md "The wide GEMV"): each lane reads 16
// bytes (8 weights, one uvec4) at a time, lane l taking the row's 16-byte chunks l, l + S,
// l + 2 S, ... (S: subgroup size), so one load instruction of a 32-lane subgroup covers 512
// contiguous bytes, and kUnroll of them are issued before the first is used. The activations
// come as two vec4 per chunk (rounded to f16 first, as the CPU kernels do).
// The sum is formed in another order than gemm_f16.glsl's (a lane's columns differ), so within
// a run every F16 GEMM uses this file or none does (Kernels picks gemm1w/gemm8w/gemmxw/gemmgw
// together): a token's row stays the same bits whatever the batch. A lane adds its chunks in
// increasing order, each chunk's 4 pairs in order, whether or not the loop is unrolled and
// whatever kTile is. Needs cols % 8 == 0 (16-byte aligned rows; Kernels checks).
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"

layout(std430, binding = 0) readonly buffer W { uvec4 w4[]; };
layout(std430, binding = 1) readonly buffer X { vec4 x4[]; };

// Chunks a lane has in flight per loop iteration: 4 x 16 bytes (2 KiB per 32-lane subgroup),
// for the one-token and 8-token kernels, whose few products per chunk leave the loads' latency
// exposed. The 16- and 32-token tiles take one chunk at a time: each chunk feeds 16-32 tokens'
// products, which cover the next load, and 4 unrolled copies of a 32-token chunk took lavapipe
// ~20 s to compile (1 chunk: ~2 s).
#if kTile >= 16
const uint kUnroll = 1;
#else
const uint kUnroll = 4;
#endif

// Adds chunk `c` (weights wv: 8 values) into every token's acc.
void Chunk(inout float acc[kTile], uvec4 wv, uint c, uint t0) {
  const vec2 w0 = unpackHalf2x16(wv.x), w1 = unpackHalf2x16(wv.y);
  const vec2 w2 = unpackHalf2x16(wv.z), w3 = unpackHalf2x16(wv.w);
  [[unroll]] for (uint t = 0; t < kTile; ++t) {
    if (InBatch(t0 + t)) {
      const uint xc = XTok(t0 + t) * (p.x_stride / 4) + 2 * c;  // vec4 index
      const vec4 a = x4[xc], b = x4[xc + 1];
      acc[t] += w0.x * RoundF16(a.x) + w0.y * RoundF16(a.y);
      acc[t] += w1.x * RoundF16(a.z) + w1.y * RoundF16(a.w);
      acc[t] += w2.x * RoundF16(b.x) + w2.y * RoundF16(b.y);
      acc[t] += w3.x * RoundF16(b.z) + w3.y * RoundF16(b.w);
    }
  }
}

void main() {
  const uint row = SubgroupRow();
  if (row >= p.rows || Skip()) return;
  const uint wrow = WRow(row);  // the weight row (its expert's, for gemmx_*)
  const uint chunks = p.cols / 8;
  const uint base = wrow * chunks;
  const uint t0 = TileStart();
  const uint s = gl_SubgroupSize;
  float acc[kTile];
  [[unroll]] for (uint t = 0; t < kTile; ++t) acc[t] = 0.0;
  uint c = gl_SubgroupInvocationID;
  for (; c + (kUnroll - 1) * s < chunks; c += kUnroll * s) {
    uvec4 wv[kUnroll];
    [[unroll]] for (uint u = 0; u < kUnroll; ++u) wv[u] = w4[base + c + u * s];
    [[unroll]] for (uint u = 0; u < kUnroll; ++u) Chunk(acc, wv[u], c + u * s, t0);
  }
#if kTile < 16
  for (; c < chunks; c += s) Chunk(acc, w4[base + c], c, t0);  // the tail
#endif
  StoreTile(acc, t0, row);
}
