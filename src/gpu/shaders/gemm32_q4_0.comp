// GEMM for q4_0 weights, tiles of 32 tokens (gemm.glsl, gemm_q4_0.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 32
#include "gemm_q4_0.glsl"
