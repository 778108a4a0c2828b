// GEMM for q4_k weights over stacked experts, one slot per z (gemm.glsl with EXPERTS): the
// same arithmetic per slot as gemm1_q4_k per token.
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 1
#define EXPERTS
#include "gemm_q4_k.glsl"
