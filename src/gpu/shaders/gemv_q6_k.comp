// y[row] = dot(W[row], x) for Q6_K weights, dequantized in the shader (q6_k.glsl) and multiplied
// with f32 activations (the CPU quantizes them to Q8_K; the difference is within the quantized
// tolerance, see tests/gpu_kernels_test.cc). One subgroup per row; a lane takes one l of a
// block's half at a time, which covers 4 values.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint rows, blocks, w_d_off, x_off, y_off; } p;

uint W6(uint i) { return w[i]; }
#include "q6_k.glsl"

void main() {
  const uint row = SubgroupRow();
  if (row >= p.rows) return;
  float acc = 0.0;
  for (uint it = gl_SubgroupInvocationID; it < p.blocks * 64; it += gl_SubgroupSize) {
    const uint b = it / 64, h = (it / 32) % 2, l = it % 32;
    const uint base = (row * p.blocks + b) * 52;
    const float d = uintBitsToFloat(w[p.w_d_off + row * p.blocks + b]);
    const uint xb = p.x_off + b * 256 + 128 * h + l;
    float s = 0.0;
    for (uint k = 0; k < 4; ++k) {
      s += Q6Scale(base, h, l, k) * float(Q6Quant(base, h, l, k)) * x[xb + 32 * k];
    }
    acc += d * s;
  }
  acc = subgroupAdd(acc);
  if (subgroupElect()) y[p.y_off + row] = acc;
}
