// GEMM (gemm_pairs.glsl; gemm_qkv.glsl where the includer defines QKV, gemm_glu.glsl GLU) for F16 weights with
// F16-pair activations (quantize_pairs.comp, bf16 0: the values rounded to f16 as the CPU kernels
// round them), products summed in f32.
#extension GL_GOOGLE_include_directive : require

vec2 Unpack(uint v) { return unpackHalf2x16(v); }

// With GLU defined: the gate/up GEMMs with SwiGLU (gemm_glu.glsl), pairs of this format out.
#if defined(GLU)
const bool kBf16Pairs = false;
#include "gemm_glu.glsl"
#elif defined(QKV)
#include "gemm_qkv.glsl"
#else
#include "gemm_pairs.glsl"
#endif
