// The wide F16 GEMM (gemm_f16w.glsl), tiles of 32 tokens: used with gemm1w_f16, gemmxw_f16
// and gemmgw_f16 when the wide GEMV is selected, so rows stay bit-identical across batch sizes.
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 32
#include "gemm_f16w.glsl"
