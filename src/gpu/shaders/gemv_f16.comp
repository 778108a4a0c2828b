// y[row] = dot(W[row], x) for F16 weights (two per word), activations rounded to f16 first as the
// CPU kernels do, products summed in f32. One subgroup per row.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint rows, cols, x_off, y_off; } p;

void main() {
  const uint row = SubgroupRow();
  if (row >= p.rows) return;
  const uint pairs = p.cols / 2;
  const uint base = row * pairs;
  float acc = 0.0;
  for (uint i = gl_SubgroupInvocationID; i < pairs; i += gl_SubgroupSize) {
    const vec2 wv = unpackHalf2x16(w[base + i]);
    const uint c = p.x_off + 2 * i;
    acc += wv.x * RoundF16(x[c]) + wv.y * RoundF16(x[c + 1]);
  }
  acc = subgroupAdd(acc);
  if (subgroupElect()) y[p.y_off + row] = acc;
}
