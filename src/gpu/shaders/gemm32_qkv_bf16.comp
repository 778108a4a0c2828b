// Q, K and V in one dispatch with RoPE and the K/V store (gemm_qkv.glsl), BF16 weights, tiles of
// 32 tokens: each row the bits of gemm32_bf16 (and so of gemm1_bf16).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 32
#define QKV
#include "gemm_bf16.glsl"
