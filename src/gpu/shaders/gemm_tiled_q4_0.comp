// The tiled GEMM (gemm_tiled.glsl) for Q4_0 weights (as uploaded: each block's 16 nibble bytes in
// 4 words [rows][blocks][4], byte j holding value j in its low nibble and value j + 16 in its
// high one, each stored + 8; the f32 scales [rows][blocks] at word w_d_off) against Q8_0
// activations. Invocation i takes word i % 4 of row i / 4's block: values 4 (i % 4) .. + 3 and
// 16 + 4 (i % 4) .. + 3, stored as (nibble - 8) x d in 4 f16-pair words.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "gemm_tiled.glsl"
#include "gemm_tiled_q8.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };

uint a_q;
float a_d;

void FetchA(uint k0) {
  const uint id = gl_LocalInvocationIndex, row = g_row0 + id / 4, b = k0 / 32;
  const uint blocks = p.cols / 32;
  if (row >= p.rows) {
    a_q = 0x88888888u;  // zeros
    a_d = 0.0;
    return;
  }
  a_q = w[(row * blocks + b) * 4 + id % 4];
  a_d = uintBitsToFloat(w[p.w_d_off + row * blocks + b]);
}

void StoreA() {
  const uint id = gl_LocalInvocationIndex, q = id % 4;
  const uint at = (id / 4) * kStride;
  [[unroll]] for (uint h = 0; h < 2; ++h) {  // low nibbles: values 4q..; high: 16 + 4q..
    const uint s = 4 * h;
    const vec4 nib = vec4(bitfieldExtract(a_q, int(s), 4), bitfieldExtract(a_q, int(8 + s), 4),
                          bitfieldExtract(a_q, int(16 + s), 4),
                          bitfieldExtract(a_q, int(24 + s), 4));
    const vec4 v = (nib - 8.0) * a_d;
    sh[at + 8 * h + 2 * q] = packHalf2x16(v.xy);
    sh[at + 8 * h + 2 * q + 1] = packHalf2x16(v.zw);
  }
}
