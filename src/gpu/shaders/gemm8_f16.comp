// GEMM for f16 weights, tiles of 8 tokens (gemm.glsl, gemm_f16.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 8
#include "gemm_f16.glsl"
