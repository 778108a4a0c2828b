// GEMM for bf16 weights, tiles of 32 tokens (gemm.glsl, gemm_bf16.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 32
#include "gemm_bf16.glsl"
