// GEMM (gemm_pairs.glsl; gemm_qkv.glsl where the includer defines QKV) for BF16 weights with
// BF16-pair activations (quantize_pairs.comp, bf16 1: the values rounded to bf16, nearest even, as
// the CPU kernels round them), products summed in f32.
#extension GL_GOOGLE_include_directive : require

// A bf16 is the high half of an f32.
vec2 Unpack(uint v) { return vec2(uintBitsToFloat(v << 16), uintBitsToFloat(v & 0xFFFF0000u)); }

#ifdef QKV
#include "gemm_qkv.glsl"
#else
#include "gemm_pairs.glsl"
#endif
