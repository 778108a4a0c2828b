// The weighted sum of a token's k expert outputs (model::Decoder::MoeFfn's last step):
// y[t][i] = w[t][0] out[t k][i] + w[t][1] out[t k + 1][i] + ..., in rank order as the CPU adds
// them. n = tokens * cols items, one invocation each. With has_bias (gpt-oss) each output first
// gets its expert's down bias (bias[ids[slot]][i]), as the CPU adds it. With acc, y[t][i] += the
// sum (the residual add: y + sum, add.comp's bits when the sum ends in an add, k >= 2).
// moe_sum_stages (compiled with STAGES) also takes the norm tail: with norm, its last workgroup
// to finish normalizes the tokens' rows of y into xn and their activation of `format` into q
// (norm_q.glsl: rmsnorm_q.comp's bits), as the GEMMs' norm tail does (gemm.glsl): the next
// layer's attention norm (or the final one) needs no dispatch and barrier of its own. The plain
// kernel carries no barrier() (lavapipe runs every shader that has one 2-3x slower).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer O { float o[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
#ifdef STAGES
layout(std430, binding = 2) coherent buffer Y { float y[]; };
#else
layout(std430, binding = 2) buffer Y { float y[]; };
#endif
layout(std430, binding = 3) readonly buffer B { float bias[]; };
layout(std430, binding = 4) readonly buffer Ids { uint ids[]; };
layout(push_constant) uniform P {
  uint n, k, cols, has_bias, acc, norm, format, q_d_off;
  float eps;
} p;

float Out(uint s, uint i) {
  const float v = o[s * p.cols + i];
  return p.has_bias != 0 ? v + bias[ids[s] * p.cols + i] : v;
}

#ifdef STAGES
layout(std430, binding = 5) readonly buffer NormWt { float nw[]; };
layout(std430, binding = 6) writeonly buffer XN { float xn[]; };
layout(std430, binding = 7) writeonly buffer Q { uint q[]; };
layout(std430, binding = 8) coherent buffer Counter { uint counter[]; };

float NormX(uint i) { return y[i]; }
float NormW(uint j) { return nw[j]; }
void NormY(uint i, float v) { xn[i] = v; }
#include "norm_q.glsl"

shared bool g_last_group;

void NormTail() {
  memoryBarrierBuffer();  // this invocation's value of y, before its workgroup counts itself done
  barrier();
  if (gl_LocalInvocationIndex == 0) {
    const uint groups = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z;
    g_last_group = atomicAdd(counter[0], 1u) == groups - 1;
  }
  barrier();
  if (!g_last_group) return;
  memoryBarrierBuffer();  // every other workgroup's values, published before its count
  for (uint t = 0; t < p.n / p.cols; ++t) NormRow(t, p.cols, p.eps, p.format, p.q_d_off);
  if (gl_LocalInvocationIndex == 0) counter[0] = 0;
}
#endif

void main() {
  const uint j = ItemIndex();
  if (j < p.n) {
    const uint t = j / p.cols, i = j % p.cols;
    const uint s0 = t * p.k;
    float acc = w[s0] * Out(s0, i);
    for (uint r = 1; r < p.k; ++r) acc += w[s0 + r] * Out(s0 + r, i);
    y[j] = p.acc != 0 ? y[j] + acc : acc;
  }
#ifdef STAGES
  if (p.norm != 0) NormTail();
#endif
}
