// GEMM for q4_k weights, tiles of 32 tokens (gemm.glsl, gemm_q4_k.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 32
#include "gemm_q4_k.glsl"
