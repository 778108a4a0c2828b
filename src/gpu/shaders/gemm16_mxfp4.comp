// GEMM for MXFP4 weights (gemm_q4_0.glsl with MXFP4: Q4_0's layout, E2M1 values):
// tiles of 16 tokens.
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 16
#define MXFP4
#include "gemm_q4_0.glsl"
