// GEMM (gemm.glsl) for Q4_0 weights against Q8_0 activations (quantize_q8_0). Weights as
// uploaded (vk_kernels.cc): each block's 16 nibble bytes in 4 words ([rows][blocks][4]; byte j
// holds value j in its low nibble and value j + 16 in its high one, each stored + 8), then the
// f32 scales [rows][blocks] at word w_d_off.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { uint xq[]; };

void main() {
  const uint row = SubgroupRow();
  if (row >= p.rows) return;
  const uint wrow = WRow(row);  // the weight row (its expert's, for gemmx_*)
  const uint blocks = p.cols;
  const uint t0 = TileStart();
  float acc[kTile];
  [[unroll]] for (uint t = 0; t < kTile; ++t) acc[t] = 0.0;
  for (uint b = gl_SubgroupInvocationID; b < blocks; b += gl_SubgroupSize) {
    const uint wb = (wrow * blocks + b) * 4;
    uint wv[4];
    for (uint k = 0; k < 4; ++k) wv[k] = w[wb + k];
    const float wd = uintBitsToFloat(w[p.w_d_off + wrow * blocks + b]);
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (t0 + t < p.n) {
        const uint xb = XTok(t0 + t) * p.x_stride + b * 8;
        int s = 0;
        for (uint k = 0; k < 4; ++k) {
          const int lo = int(xq[xb + k]), hi = int(xq[xb + 4 + k]);
          for (uint j = 0; j < 4; ++j) {
            const int q_lo = int((wv[k] >> (8 * j)) & 15u) - 8;
            const int q_hi = int((wv[k] >> (8 * j + 4)) & 15u) - 8;
            s += q_lo * bitfieldExtract(lo, int(8 * j), 8) +
                 q_hi * bitfieldExtract(hi, int(8 * j), 8);
          }
        }
        const float xd = uintBitsToFloat(xq[p.x_d_off + XTok(t0 + t) * blocks + b]);
        acc[t] += float(s) * (wd * xd);
      }
    }
  }
  StoreTile(acc, t0, row);
}
