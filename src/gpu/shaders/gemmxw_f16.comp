// The wide F16 GEMM over stacked experts, one slot per z (gemm.glsl with EXPERTS): the same
// arithmetic per slot as gemm1w_f16 per token.
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 1
#define EXPERTS
#include "gemm_f16w.glsl"
