// gpt-oss's expert activation (model/moe.cc SwiGluOai), in place in the gate rows of the slots:
// with each slot's expert biases added first (ids[slot] its expert), x = min(gate, 7),
// y = clamp(up, -7, 7), gate = x sigmoid(1.702 x) (y + 1). n = slots * ff items, one each.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) readonly buffer GB { float gb[]; };
layout(std430, binding = 3) readonly buffer UB { float ub[]; };
layout(std430, binding = 4) readonly buffer Ids { uint ids[]; };
layout(push_constant) uniform P { uint n, ff; } p;

void main() {
  const uint j = ItemIndex();
  if (j >= p.n) return;
  const uint b = ids[j / p.ff] * p.ff + j % p.ff;
  const float x = min(g[j] + gb[b], 7.0);
  const float y = clamp(u[j] + ub[b], -7.0, 7.0);
  g[j] = x / (1.0 + exp(-1.702 * x)) * (y + 1.0);
}
