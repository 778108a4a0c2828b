// y = x / sqrt(mean(x^2) + eps) * w over each of `rows` rows of n values (one workgroup per
// row; w shared by the rows: the per-head q/k norms of qwen3 use rows = heads). y may alias x.
#version 450
#extension GL_GOOGLE_include_directive : require
// 256 invocations a row: a decode step's row (2,048-8,192 values) is one workgroup, whose
// passes over it are latency-bound; 64 left ~32-128 loop trips an invocation per pass.
#define kGroupSize 256
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform P { uint rows, n, x_off, y_off; float eps; } p;

void main() {
  const uint row = GroupIndex();
  if (row >= p.rows) return;
  const uint xb = p.x_off + row * p.n, yb = p.y_off + row * p.n;
  float ss = 0.0;
  const uint lid = gl_LocalInvocationID.x;
  for (uint i = lid; i < p.n; i += kGroupSize) ss += x[xb + i] * x[xb + i];
  ss = WorkgroupSum(ss);
  const float scale = 1.0 / sqrt(ss / float(p.n) + p.eps);
  for (uint i = lid; i < p.n; i += kGroupSize) y[yb + i] = x[xb + i] * scale * w[i];
}
