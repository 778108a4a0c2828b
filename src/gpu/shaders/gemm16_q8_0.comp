// GEMM for q8_0 weights, tiles of 16 tokens (gemm.glsl, gemm_q8_0.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 16
#include "gemm_q8_0.glsl"
