// Q, K and V in one dispatch with RoPE and the K/V store (gemm_qkv.glsl), F16 weights, one
// token: each row the bits of gemm1_f16.
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 1
#define QKV
#include "gemm_f16.glsl"
