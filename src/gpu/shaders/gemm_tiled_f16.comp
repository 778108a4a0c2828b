// The tiled GEMM (gemm_tiled.glsl) for F16 weights and f16 pairs: copied as they are.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "gemm_tiled.glsl"

uint AsF16Pair(uint v) { return v; }
#include "gemm_tiled_pairs.glsl"
