// The wide F16 GEMM over stacked experts, grouped by expert: tiles of up to 8 (16, 32) slots
// of one expert (gemm.glsl with GROUPED), each slot's sum as gemm1w_f16 forms a token's.
#version 450
#extension GL_GOOGLE_include_directive : require
#ifndef kTile  // gemmg16_* and gemmg32_*: -DkTile (CMakeLists.txt)
#define kTile 8
#endif
#define GROUPED
#include "gemm_f16w.glsl"
