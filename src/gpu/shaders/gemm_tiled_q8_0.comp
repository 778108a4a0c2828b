// The tiled GEMM (gemm_tiled.glsl) for Q8_0 weights (as uploaded: the quants [rows][blocks][8
// words], the f32 scales [rows][blocks] at word w_d_off) against Q8_0 activations: a step's 32
// columns are one block a row. Invocation i takes 2 words (8 values) of row i / 4's block, stored
// as q x d in 4 f16-pair words.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "gemm_tiled.glsl"
#include "gemm_tiled_q8.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };

uvec2 a_q;
float a_d;

void FetchA(uint k0) {
  const uint id = gl_LocalInvocationIndex, row = g_row0 + id / 4, b = k0 / 32;
  const uint blocks = p.cols / 32;
  if (row >= p.rows) {
    a_q = uvec2(0);
    a_d = 0.0;
    return;
  }
  const uint at = (row * blocks + b) * 8 + (id % 4) * 2;
  a_q = uvec2(w[at], w[at + 1]);
  a_d = uintBitsToFloat(w[p.w_d_off + row * blocks + b]);
}

void StoreA() {
  const uint id = gl_LocalInvocationIndex;
  const uint at = (id / 4) * kStride + (id % 4) * 4;
  [[unroll]] for (uint c = 0; c < 2; ++c) {
    const uvec2 pw = PairsOfQ8(a_q[c], a_d);
    sh[at + 2 * c] = pw.x;
    sh[at + 2 * c + 1] = pw.y;
  }
}
