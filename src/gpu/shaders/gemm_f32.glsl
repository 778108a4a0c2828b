// GEMM (gemm.glsl) for F32 weights.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"

layout(std430, binding = 0) readonly buffer W { float w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };

void GemmMain() {
  const uint row = SubgroupRow();
  if (row >= p.rows || Skip()) return;
  const uint wrow = WRow(row);  // the weight row (its expert's, for gemmx_*)
  const uint base = wrow * p.cols;
  const uint t0 = TileStart();
  float acc[kTile];
  [[unroll]] for (uint t = 0; t < kTile; ++t) acc[t] = 0.0;
  for (uint c = gl_SubgroupInvocationID; c < p.cols; c += gl_SubgroupSize) {
    const float wv = w[base + c];
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (InBatch(t0 + t)) acc[t] += wv * x[XTok(t0 + t) * p.x_stride + c];
    }
  }
  StoreTile(acc, t0, row);
}
