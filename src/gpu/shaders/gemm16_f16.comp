// GEMM for f16 weights, tiles of 16 tokens (gemm.glsl, gemm_f16.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 16
#include "gemm_f16.glsl"
