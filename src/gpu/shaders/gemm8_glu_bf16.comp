// Gate/up GEMMs and SwiGLU for bf16 weights, tiles of 8 tokens (gemm_glu.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 8
#define GLU
#include "gemm_bf16.glsl"
