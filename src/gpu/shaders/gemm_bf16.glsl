// GEMM (gemm_pairs.glsl; gemm_qkv.glsl where the includer defines QKV, gemm_glu.glsl GLU) for BF16 weights with
// BF16-pair activations (quantize_pairs.comp, bf16 1: the values rounded to bf16, nearest even, as
// the CPU kernels round them), products summed in f32.
#extension GL_GOOGLE_include_directive : require

// A bf16 is the high half of an f32.
vec2 Unpack(uint v) { return vec2(uintBitsToFloat(v << 16), uintBitsToFloat(v & 0xFFFF0000u)); }

// With GLU defined: the gate/up GEMMs with SwiGLU (gemm_glu.glsl), pairs of this format out.
#if defined(GLU)
const bool kBf16Pairs = true;
#include "gemm_glu.glsl"
#elif defined(QKV)
#include "gemm_qkv.glsl"
#else
#include "gemm_pairs.glsl"
#endif
