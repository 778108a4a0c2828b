// GEMM for q4_k weights, one token (decode of one sequence): the same arithmetic per token as
// gemm8_q4_k (so rows stay bit-identical across batch sizes), without the 7 idle token slots a
// CPU driver would still execute.
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 1
#include "gemm_q4_k.glsl"
