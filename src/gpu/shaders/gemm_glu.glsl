// The gate and up GEMMs of a dense FFN and SwiGLU in one dispatch, for F16 / BF16 weights
// (gemm_f16.glsl / gemm_bf16.glsl with GLU defined: their Unpack) and pair activations: h[t] =
// SwiGlu(Wg x[t], Wu x[t]) written as the 16-bit pairs the down GEMM reads. A decode step loses
// the SwiGLU dispatch and its barrier (~1.9 us on an H200 by issue 28's probe) and the gate and
// up sums never go to memory; each activation word is loaded once for four rows.
// Subgroup m computes rows 2m and 2m + 1 of gate and of up for the tile's tokens. Each row's sum
// is formed as gemm_pairs.glsl forms it (lane l takes words l, l + S, ... into acc as w.x * a.x +
// w.y * a.y, then subgroupAdd): the bits of gemm1_* / gemm8_*, so h is the bits of the two GEMMs
// followed by swiglu_q.comp's pairs (tests/gpu_fused_test.cc checks it), whatever the batch.
// Push constants: rows (of gate and of up, even), cols (even), n tokens. x: [n][cols / 2] words,
// h: [n][rows / 2] words. The grid's x is the token tile (kTile 1 or 8).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#define TILES_INNER  // the token tile is the grid's x (common.glsl)
#include "common.glsl"

#ifndef kTile
#define kTile 1
#endif

layout(std430, binding = 0) readonly buffer WG { uint wg[]; };
layout(std430, binding = 1) readonly buffer WU { uint wu[]; };
layout(std430, binding = 2) readonly buffer X { uint x[]; };
layout(std430, binding = 3) writeonly buffer H { uint h[]; };
layout(push_constant) uniform P { uint rows, cols, n; } p;

void main() {
  const uint m = SubgroupRow();
  if (2 * m >= p.rows) return;
  const uint pairs = p.cols / 2;
  const uint b0 = 2 * m * pairs, b1 = b0 + pairs;  // the words of rows 2m and 2m + 1
  const uint t0 = TileIndex() * kTile;
  float g0[kTile], g1[kTile], u0[kTile], u1[kTile];
  [[unroll]] for (uint t = 0; t < kTile; ++t) {
    g0[t] = 0.0;
    g1[t] = 0.0;
    u0[t] = 0.0;
    u1[t] = 0.0;
  }
  for (uint i = gl_SubgroupInvocationID; i < pairs; i += gl_SubgroupSize) {
    const vec2 wg0 = Unpack(wg[b0 + i]), wg1 = Unpack(wg[b1 + i]);
    const vec2 wu0 = Unpack(wu[b0 + i]), wu1 = Unpack(wu[b1 + i]);
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (t0 + t < p.n) {  // uniform
        const vec2 a = Unpack(x[(t0 + t) * pairs + i]);
        g0[t] += wg0.x * a.x + wg0.y * a.y;
        g1[t] += wg1.x * a.x + wg1.y * a.y;
        u0[t] += wu0.x * a.x + wu0.y * a.y;
        u1[t] += wu1.x * a.x + wu1.y * a.y;
      }
    }
  }
  [[unroll]] for (uint t = 0; t < kTile; ++t) {
    if (t0 + t < p.n) {
      const float h0 = SwiGlu(subgroupAdd(g0[t]), subgroupAdd(u0[t]));
      const float h1 = SwiGlu(subgroupAdd(g1[t]), subgroupAdd(u1[t]));
      if (subgroupElect()) h[(t0 + t) * (p.rows / 2) + m] = PackPair(h0, h1, kBf16Pairs);
    }
  }
}
