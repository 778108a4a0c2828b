// GEMM (gemm.glsl) for Q8_0 weights against Q8_0 activations (quantize_q8_0): per block of 32
// an integer dot, scaled by both blocks' scales, summed in f32 (the CPU kernels' arithmetic).
// Weights as uploaded (vk_kernels.cc): int8 values four per word, [rows][blocks][8] words, then
// the f32 scales [rows][blocks] at word w_d_off.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"
#include "dot4.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { uint xq[]; };

void GemmMain() {
  const uint row = SubgroupRow();
  if (row >= p.rows || Skip()) return;
  const uint wrow = WRow(row);  // the weight row (its expert's, for gemmx_*)
  const uint blocks = p.cols;
  const uint t0 = TileStart();
  float acc[kTile];
  [[unroll]] for (uint t = 0; t < kTile; ++t) acc[t] = 0.0;
  for (uint b = gl_SubgroupInvocationID; b < blocks; b += gl_SubgroupSize) {
    const uint wb = (wrow * blocks + b) * 8;
    uint wv[8];
    [[unroll]] for (uint k = 0; k < 8; ++k) wv[k] = w[wb + k];
    const float wd = uintBitsToFloat(w[p.w_d_off + wrow * blocks + b]);
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (InBatch(t0 + t)) {
        const uint xb = XTok(t0 + t) * p.x_stride + b * 8;
        int s = 0;
        [[unroll]] for (uint k = 0; k < 8; ++k) s += SDot4(wv[k], xq[xb + k]);
        const float xd = uintBitsToFloat(xq[p.x_d_off + XTok(t0 + t) * blocks + b]);
        acc[t] += float(s) * (wd * xd);
      }
    }
  }
  StoreTile(acc, t0, row);
}
