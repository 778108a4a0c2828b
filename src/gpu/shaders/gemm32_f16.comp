// GEMM for f16 weights, tiles of 32 tokens (gemm.glsl, gemm_f16.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 32
#include "gemm_f16.glsl"
