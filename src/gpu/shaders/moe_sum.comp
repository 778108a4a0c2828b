// The weighted sum of a token's k expert outputs (model::Decoder::MoeFfn's last step):
// y[t][i] = w[t][0] out[t k][i] + w[t][1] out[t k + 1][i] + ..., in rank order as the CPU adds
// them. n = tokens * cols items, one invocation each.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer O { float o[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n, k, cols; } p;

void main() {
  const uint j = ItemIndex();
  if (j >= p.n) return;
  const uint t = j / p.cols, i = j % p.cols;
  const uint s0 = t * p.k;
  float acc = w[s0] * o[s0 * p.cols + i];
  for (uint r = 1; r < p.k; ++r) acc += w[s0 + r] * o[(s0 + r) * p.cols + i];
  y[j] = acc;
}
