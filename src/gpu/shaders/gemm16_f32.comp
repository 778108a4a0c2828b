// GEMM for f32 weights, tiles of 16 tokens (gemm.glsl, gemm_f32.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 16
#include "gemm_f32.glsl"
