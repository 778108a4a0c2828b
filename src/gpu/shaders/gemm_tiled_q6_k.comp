// The tiled GEMM (gemm_tiled.glsl) for Q6_K weights (q6_k.glsl's layout: 52 words a block of 256,
// d as f32 at w_d_off + b) against Q8_K activations: a step's 32 columns are values 32 k .. + 31
// of half h of a block (k = j % 4, h = j / 4 for step j of the block). Invocation i takes values
// l = 8 (i % 4) .. + 7 of row i / 4's: 2 words of ql, 2 of qh and their one scale (l / 16 is the
// same for all 8), stored as d x scale x (q - 32) (the CPU's kernels::DequantizeQ6_K) in 4 f16-pair
// words.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "gemm_tiled.glsl"
#define ACT_Q8K
#include "gemm_tiled_q8.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
uint W6(uint i) { return w[i]; }
#include "q6_k.glsl"

uvec2 a_ql, a_qh;
float a_scale;  // d x scale
uint a_k;

void FetchA(uint k0) {
  const uint id = gl_LocalInvocationIndex, row = g_row0 + id / 4, q = id % 4;
  const uint b = k0 / 256, j = (k0 % 256) / 32, blocks = p.cols / 256;
  const uint h = j / 4;
  a_k = j % 4;
  if (row >= p.rows) {
    a_ql = a_qh = uvec2(0);
    a_scale = 0.0;
    return;
  }
  const uint base = (row * blocks + b) * 52;
  const uint ql_at = base + (64 * h + 32 * (a_k & 1u)) / 4 + 2 * q;
  const uint qh_at = base + 32 + 8 * h + 2 * q;
  a_ql = uvec2(w[ql_at], w[ql_at + 1]);
  a_qh = uvec2(w[qh_at], w[qh_at + 1]);
  a_scale = uintBitsToFloat(w[p.w_d_off + row * blocks + b]) * Q6Scale(base, h, 8 * q, a_k);
}

void StoreA() {
  const uint id = gl_LocalInvocationIndex;
  const uint at = (id / 4) * kStride + (id % 4) * 4;
  const uint nib_shift = a_k < 2 ? 0u : 4u;
  [[unroll]] for (uint c = 0; c < 2; ++c) {
    [[unroll]] for (uint h = 0; h < 2; ++h) {
      vec2 v;
      [[unroll]] for (uint e = 0; e < 2; ++e) {
        const uint byte = 2 * h + e;  // of the word
        const uint nib = (a_ql[c] >> (8 * byte + nib_shift)) & 15u;
        const uint hi = (a_qh[c] >> (8 * byte + 2 * a_k)) & 3u;
        v[e] = a_scale * float(int(nib | (hi << 4)) - 32);
      }
      sh[at + 2 * c + h] = packHalf2x16(v);
    }
  }
}
