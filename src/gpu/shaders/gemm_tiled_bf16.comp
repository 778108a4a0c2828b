// The tiled GEMM (gemm_tiled.glsl) for BF16 weights ([rows][cols] as in GGUF) and the bf16 pairs of
// quantize_pairs.comp ([n][x_stride] words), converted to f16 pairs in the shared blocks: exact
// for every value in f16's normal range (bf16 keeps 8 mantissa bits, f16 11), those below it
// become f16 subnormals (an absolute error under 2^-25) and those above 65504 would overflow: a
// BF16 model whose activations reach that (the token-tiled kernels take it in f32) must keep the
// tiled GEMM off. Loads as gemm_tiled_f16.comp's.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "gemm_tiled.glsl"

layout(std430, binding = 0) readonly buffer W { uvec4 w[]; };  // [rows][cols / 8]
layout(std430, binding = 1) readonly buffer X { uvec4 x[]; };  // [n][x_stride / 4]

uvec4 a_reg, b_reg[2];

// A word of two bf16 values as the same two values in f16.
uint F16OfBf16(uint v) {
  return packHalf2x16(vec2(uintBitsToFloat(v << 16), uintBitsToFloat(v & 0xFFFF0000u)));
}

void FetchA(uint k0) {
  const uint row = g_row0 + gl_LocalInvocationIndex / 4;
  a_reg = row < p.rows ? w[row * (p.cols / 8) + k0 / 8 + gl_LocalInvocationIndex % 4] : uvec4(0);
}

void StoreA() {
  const uint id = gl_LocalInvocationIndex;
  [[unroll]] for (uint c = 0; c < 4; ++c) {
    sh[(id / 4) * kStride + 4 * (id % 4) + c] = F16OfBf16(a_reg[c]);
  }
}

void FetchB(uint k0) {
  const uint id = gl_LocalInvocationIndex;
  [[unroll]] for (uint j = 0; j < 2; ++j) {
    const uint t = g_t0 + id / 4 + 32 * j;
    b_reg[j] = t < p.n ? x[t * (p.x_stride / 4) + k0 / 8 + id % 4] : uvec4(0);
  }
}

void StoreB() {
  const uint id = gl_LocalInvocationIndex;
  [[unroll]] for (uint j = 0; j < 2; ++j) {
    [[unroll]] for (uint c = 0; c < 4; ++c) {
      sh[kBOff + (id / 4 + 32 * j) * kStride + 4 * (id % 4) + c] = F16OfBf16(b_reg[j][c]);
    }
  }
}
