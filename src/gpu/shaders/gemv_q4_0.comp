// y[row] = dot(W[row], x) for Q4_0 weights against Q8_0 activations (quantize_q8_0). Weights as
// uploaded (vk_kernels.cc): each block's 16 nibble bytes in 4 words ([rows][blocks][4]; byte j
// holds value j in its low nibble and value j + 16 in its high one, each stored + 8), then the
// f32 scales [rows][blocks] at word w_d_off. One subgroup per row.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { uint xq[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint rows, blocks, w_d_off, x_d_off, y_off; } p;

void main() {
  const uint row = SubgroupRow();
  if (row >= p.rows) return;
  float acc = 0.0;
  for (uint b = gl_SubgroupInvocationID; b < p.blocks; b += gl_SubgroupSize) {
    const uint wb = (row * p.blocks + b) * 4;
    int s = 0;
    for (uint k = 0; k < 4; ++k) {
      const uint wv = w[wb + k];
      const int lo = int(xq[b * 8 + k]), hi = int(xq[b * 8 + 4 + k]);
      for (uint j = 0; j < 4; ++j) {
        const int q_lo = int((wv >> (8 * j)) & 15u) - 8, q_hi = int((wv >> (8 * j + 4)) & 15u) - 8;
        s += q_lo * bitfieldExtract(lo, int(8 * j), 8) + q_hi * bitfieldExtract(hi, int(8 * j), 8);
      }
    }
    acc += float(s) * (uintBitsToFloat(w[p.w_d_off + row * p.blocks + b]) *
                       uintBitsToFloat(xq[p.x_d_off + b]));
  }
  acc = subgroupAdd(acc);
  if (subgroupElect()) y[p.y_off + row] = acc;
}
