// GEMM for bf16 weights, tiles of 8 tokens (gemm.glsl, gemm_bf16.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 8
#include "gemm_bf16.glsl"
