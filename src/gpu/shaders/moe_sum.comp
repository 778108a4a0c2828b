// The weighted sum of a token's k expert outputs (model::Decoder::MoeFfn's last step):
// y[t][i] = w[t][0] out[t k][i] + w[t][1] out[t k + 1][i] + ..., in rank order as the CPU adds
// them. n = tokens * cols items, one invocation each. With has_bias (gpt-oss) each output first
// gets its expert's down bias (bias[ids[slot]][i]), as the CPU adds it. With acc, y[t][i] += the
// sum (the residual add: y + sum, add.comp's bits when the sum ends in an add, k >= 2).
// A one-token step's down experts add the same sum in their GEMM's tail instead (gemm.glsl's
// SumTail, moe_sum.glsl's expression).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer O { float o[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer B { float bias[]; };
layout(std430, binding = 4) readonly buffer Ids { uint ids[]; };
layout(push_constant) uniform P { uint n, k, cols, has_bias, acc; } p;

float MoeOut(uint s, uint i) {
  const float v = o[s * p.cols + i];
  return p.has_bias != 0 ? v + bias[ids[s] * p.cols + i] : v;
}
float MoeWeight(uint s) { return w[s]; }
#include "moe_sum.glsl"

void main() {
  const uint j = ItemIndex();
  if (j >= p.n) return;
  const uint t = j / p.cols, i = j % p.cols;
  const float acc = MoeSlotSum(t * p.k, p.k, i);
  y[j] = p.acc != 0 ? y[j] + acc : acc;
}
