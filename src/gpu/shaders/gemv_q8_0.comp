// y[row] = dot(W[row], x) for Q8_0 weights against Q8_0 activations (quantize_q8_0): per block of
// 32 an integer dot, scaled by both blocks' scales, summed in f32 (the CPU kernels' arithmetic).
// Weights as uploaded (vk_kernels.cc): int8 values four per word, [rows][blocks][8] words, then
// the f32 scales [rows][blocks] at word w_d_off. One subgroup per row.
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
    const uint wb = (row * p.blocks + b) * 8;
    int s = 0;
    for (uint k = 0; k < 8; ++k) {
      const int wv = int(w[wb + k]), xv = int(xq[b * 8 + k]);
      for (int j = 0; j < 32; j += 8) s += bitfieldExtract(wv, j, 8) * bitfieldExtract(xv, j, 8);
    }
    acc += float(s) * (uintBitsToFloat(w[p.w_d_off + row * p.blocks + b]) *
                       uintBitsToFloat(xq[p.x_d_off + b]));
  }
  acc = subgroupAdd(acc);
  if (subgroupElect()) y[p.y_off + row] = acc;
}
