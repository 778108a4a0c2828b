// GEMM for Q6_K weights over stacked experts, grouped by expert: tiles of up to 8 slots of one
// expert (gemm.glsl with GROUPED).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 8
#define GROUPED
#include "gemm_q6_k.glsl"
