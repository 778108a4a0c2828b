// The tiled GEMM (gemm_tiled.glsl) for BF16 weights and bf16 pairs, converted to f16 pairs in the
// shared blocks: exact for every value in f16's normal range (bf16 keeps 8 mantissa bits, f16
// 11), those below it become f16 subnormals (an absolute error under 2^-25) and those above 65504
// would overflow: a BF16 model whose activations reach that (the token-tiled kernels take it in
// f32) must keep the tiled GEMM off.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "gemm_tiled.glsl"

// A word of two bf16 values as the same two values in f16.
uint AsF16Pair(uint v) {
  return packHalf2x16(vec2(uintBitsToFloat(v << 16), uintBitsToFloat(v & 0xFFFF0000u)));
}
#include "gemm_tiled_pairs.glsl"
