// GEMM (gemm.glsl) for BF16 weights (two per word), activations rounded to bf16 first (round to
// nearest even) as the CPU kernels do, products summed in f32.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };

float RoundBf16(float v) {
  const uint u = floatBitsToUint(v);
  return uintBitsToFloat((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
}

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
    const uint wv = w[base + i];
    const float w0 = uintBitsToFloat(wv << 16), w1 = uintBitsToFloat(wv & 0xFFFF0000u);
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (InBatch(t0 + t)) {
        const uint c = XTok(t0 + t) * p.x_stride + 2 * i;
        acc[t] += w0 * RoundBf16(x[c]) + w1 * RoundBf16(x[c + 1]);
      }
    }
  }
  StoreTile(acc, t0, row);
}
