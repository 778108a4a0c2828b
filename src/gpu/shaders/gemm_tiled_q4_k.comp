// The tiled GEMM (gemm_tiled.glsl) for Q4_K weights (q4_k.glsl's layout: 35 words a block of 256,
// d and dmin as f32 at w_d_off + 2 b) against Q8_K activations: a step's 32 columns are sub-block
// j of a block. Invocation i takes values 8 (i % 4) .. + 7 of row i / 4's sub-block (2 words of
// nibbles, low for even j, high for odd), stored as (d x scale_j) x q - dmin x min_j (the CPU's
// kernels::DequantizeQ4_K) in 4 f16-pair words.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "gemm_tiled.glsl"
#define ACT_Q8K
#include "gemm_tiled_q8.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
uint W4(uint i) { return w[i]; }
#include "q4_k.glsl"

uvec2 a_q;
float a_scale, a_min;  // d x scale_j and dmin x min_j
uint a_shift;          // 0: low nibbles (even j), 4: high

void FetchA(uint k0) {
  const uint id = gl_LocalInvocationIndex, row = g_row0 + id / 4;
  const uint b = k0 / 256, j = (k0 % 256) / 32, blocks = p.cols / 256;
  a_shift = 4 * (j % 2);
  if (row >= p.rows) {
    a_q = uvec2(0);
    a_scale = a_min = 0.0;
    return;
  }
  const uint base = (row * blocks + b) * 35, at = base + 8 * (j / 2) + 2 * (id % 4);
  a_q = uvec2(w[at], w[at + 1]);
  float sc, m;
  Q4ScaleMin(base, j, sc, m);
  const uint d_at = p.w_d_off + 2 * (row * blocks + b);
  a_scale = uintBitsToFloat(w[d_at]) * sc;
  a_min = uintBitsToFloat(w[d_at + 1]) * m;
}

void StoreA() {
  const uint id = gl_LocalInvocationIndex;
  const uint at = (id / 4) * kStride + (id % 4) * 4;
  [[unroll]] for (uint c = 0; c < 2; ++c) {
    [[unroll]] for (uint h = 0; h < 2; ++h) {
      const uint v = a_q[c] >> (16 * h);  // two bytes: values 2 h, 2 h + 1 of this word
      const vec2 q = vec2(float((v >> a_shift) & 15u), float((v >> (8 + a_shift)) & 15u));
      sh[at + 2 * c + h] = packHalf2x16(a_scale * q - a_min);
    }
  }
}
