// Q, K and V in one dispatch with RoPE and the K/V store (gemm_qkv.glsl), BF16 weights, tiles of
// 16 tokens: each row the bits of gemm16_bf16 (and so of gemm1_bf16).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 16
#define QKV
#include "gemm_bf16.glsl"
