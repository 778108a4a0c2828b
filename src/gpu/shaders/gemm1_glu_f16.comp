// Gate/up GEMMs and SwiGLU for f16 weights, one token (gemm_glu.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 1
#define GLU
#include "gemm_f16.glsl"
