// y[row] = dot(W[row], x) for F32 weights, one subgroup per row.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer W { float w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint rows, cols, x_off, y_off; } p;

void main() {
  const uint row = SubgroupRow();
  if (row >= p.rows) return;
  const uint base = row * p.cols;
  float acc = 0.0;
  for (uint c = gl_SubgroupInvocationID; c < p.cols; c += gl_SubgroupSize) acc += w[base + c] * x[p.x_off + c];
  acc = subgroupAdd(acc);
  if (subgroupElect()) y[p.y_off + row] = acc;
}
