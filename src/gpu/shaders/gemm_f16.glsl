// GEMM (gemm.glsl) for F16 weights (two per word), activations rounded to f16 first as the CPU
// kernels do, products summed in f32.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };

void main() {
  const uint row = SubgroupRow();
  if (row >= p.rows || Skip()) return;
  const uint wrow = WRow(row);  // the weight row (its expert's, for gemmx_*)
  const uint pairs = p.cols / 2;
  const uint base = wrow * pairs;
  const uint t0 = TileStart();
  float acc[kTile];
  [[unroll]] for (uint t = 0; t < kTile; ++t) acc[t] = 0.0;
  for (uint i = gl_SubgroupInvocationID; i < pairs; i += gl_SubgroupSize) {
    const vec2 wv = unpackHalf2x16(w[base + i]);
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (InBatch(t0 + t)) {
        const uint c = XTok(t0 + t) * p.x_stride + 2 * i;
        acc[t] += wv.x * RoundF16(x[c]) + wv.y * RoundF16(x[c + 1]);
      }
    }
  }
  StoreTile(acc, t0, row);
}
