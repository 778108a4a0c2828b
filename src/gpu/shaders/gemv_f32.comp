// GEMM (gemm.glsl) for F32 weights.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"

layout(std430, binding = 0) readonly buffer W { float w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };

void main() {
  const uint row = SubgroupRow();
  if (row >= p.rows) return;
  const uint base = row * p.cols;
  for (uint t0 = 0; t0 < p.n; t0 += kTile) {
    float acc[kTile];
    for (uint t = 0; t < kTile; ++t) acc[t] = 0.0;
    for (uint c = gl_SubgroupInvocationID; c < p.cols; c += gl_SubgroupSize) {
      const float wv = w[base + c];
      for (uint t = 0; t < kTile; ++t) {
        if (t0 + t < p.n) acc[t] += wv * x[(t0 + t) * p.x_stride + c];
      }
    }
    StoreTile(acc, t0, row);
  }
}
