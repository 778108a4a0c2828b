// GEMM for q6_k weights, tiles of 16 tokens (gemm.glsl, gemm_q6_k.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 16
#include "gemm_q6_k.glsl"
