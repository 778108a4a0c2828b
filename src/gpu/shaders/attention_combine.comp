// The second pass of attention split over positions (attention.comp with chunk > 0): for each
// (query head, token), the chunks covering the token's positions 0..pos, each with its max m_c,
// exp-sum s_c and unnormalised value sums a_c, become o = sum_c a_c e^(m_c - M) / sum_c s_c
// e^(m_c - M), M the largest m_c, the chunks added in order. The chunk count follows from the
// position alone, so the result does not depend on the batch; a chunk at the maximum is weighted
// by exactly 1, so one chunk gives the unsplit kernel's bits. One workgroup of 64 per (head,
// token): the grid's x is the head, y the token. With window > 0 the chunks wholly before the
// token's window (which attention.comp left unwritten) are skipped; with has_sinks the head's
// sink adds e^(sink - M) to the denominator. With quant kActQ8_0 (head_dim a multiple of 32) the head's
// output is also written as Q8_0 blocks into q (as attention.comp's quant: quantize_q8_0's bits
// of o), through shared memory; with quant kActF16 or kActBF16 as f16 or bf16 pairs (quantize_pairs' bits).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Part { float part[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(std430, binding = 2) readonly buffer Tok { uint tok[]; };
layout(std430, binding = 3) readonly buffer Sinks { float sinks[]; };
layout(std430, binding = 4) writeonly buffer QOut { uint q[]; };
layout(push_constant) uniform P {
  uint n_head, head_dim, chunk, n_chunks, window, has_sinks;
  uint quant, q_d_off;
} p;

const uint kMaxHeadDim = 1024;  // with quant (the host checks)
shared float s_o[kMaxHeadDim];
uint g_first = 0;  // the head's first output value, s_o[0]
float QIn(uint i) { return s_o[i - g_first]; }

#include "quant_q8.glsl"

float Weight(float m, float mx) { return m == mx ? 1.0 : exp(m - mx); }

void main() {
  const uint h = gl_WorkGroupID.x, token = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x;
  const uint n_keys = tok[4 * token + 1] + 1;
  const uint nc = (n_keys + p.chunk - 1) / p.chunk, stride = p.head_dim + 2;
  const uint c0 = p.window != 0 && n_keys > p.window ? (n_keys - p.window) / p.chunk : 0;
  const uint base = (token * p.n_head + h) * p.n_chunks * stride;
  float mx = -1.0 / 0.0;
  for (uint c = c0; c < nc; ++c) mx = max(mx, part[base + c * stride + p.head_dim]);
  float sum = 0.0;
  for (uint c = c0; c < nc; ++c) {
    const uint pc = base + c * stride + p.head_dim;
    sum += part[pc + 1] * Weight(part[pc], mx);
  }
  if (p.has_sinks != 0) sum += exp(sinks[h] - mx);
  const float inv = 1.0 / sum;
  for (uint i = lid; i < p.head_dim; i += 64) {
    float acc = 0.0;
    for (uint c = c0; c < nc; ++c) {
      acc += part[base + c * stride + i] * Weight(part[base + c * stride + p.head_dim], mx);
    }
    const float v = acc * inv;
    o[(token * p.n_head + h) * p.head_dim + i] = v;
    if (p.quant != 0) s_o[i] = v;
  }
  if (p.quant != 0) {  // workgroup-uniform
    barrier();
    g_first = (token * p.n_head + h) * p.head_dim;
    if (p.quant != kActQ8_0) {
      for (uint i = lid; i < p.head_dim / 2; i += 64) {
        q[g_first / 2 + i] = PackPair(s_o[2 * i], s_o[2 * i + 1], p.quant == kActBF16);
      }
      return;
    }
    QuantLanes();
    QuantizeRangeQ8_0(g_first / 32, (g_first + p.head_dim) / 32, p.q_d_off);
  }
}
