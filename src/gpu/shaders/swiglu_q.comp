// swiglu.comp (or swiglu_oai.comp, oai 1) and the activation quantization after it in one dispatch:
// out[i] = silu(gate[i]) * up[i], and out quantized into q as quantize_q8_0 (format kActQ8_0),
// quantize_q8_k (1) or quantize_pairs (2: f16 pairs, 3: bf16 pairs) would quantize it. A
// workgroup takes kSpan values: each invocation computes values lid, lid + 256, ... with the
// separate kernel's operations (one each, coalesced), writes them to out and to shared memory,
// then the subgroups quantize the span's blocks (16 of Q8_0, 2 of Q8_K; quant_q8.glsl spreads
// them over the subgroups; pairs: a word per two values) from those exact floats, so out and q
// are the two kernels' bits. out may alias gate (each value is read and written by one
// invocation). With oai, gpt-oss's clamped SwiGLU with each slot's expert biases (ids[slot] its
// expert; ff values a slot): x = min(gate + gb, 7), y = clamp(up + ub, -7, 7), out = x
// sigmoid(1.702 x) (y + 1). Without it bindings 4-6 are not read.
#version 450
#extension GL_GOOGLE_include_directive : require
// 256 invocations and 512 values a workgroup (2 each): a decode step's 8,192 FFN values are 16
// workgroups, not 4 of 64 invocations walking 32 values each.
#define kGroupSize 256
#include "common.glsl"

layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 3) writeonly buffer Q { uint q[]; };
layout(std430, binding = 4) readonly buffer GB { float gb[]; };
layout(std430, binding = 5) readonly buffer UB { float ub[]; };
layout(std430, binding = 6) readonly buffer Ids { uint ids[]; };
layout(push_constant) uniform P { uint n, format, d_off, oai, ff; } p;

const uint kSpan = 512;  // values a workgroup (Kernels' kSwiGluSpan): whole Q8_K blocks
shared float span[kSpan];
uint g_first = 0;  // the workgroup's first value

float QIn(uint i) { return span[i - g_first]; }

#include "quant_q8.glsl"

float Act(uint i) {
  if (p.oai != 0) {
    const uint b = ids[i / p.ff] * p.ff + i % p.ff;
    const float x = min(g[i] + gb[b], 7.0);
    const float y = clamp(u[i] + ub[b], -7.0, 7.0);
    return x / (1.0 + exp(-1.702 * x)) * (y + 1.0);
  }
  return SwiGlu(g[i], u[i]);
}

void main() {
  g_first = GroupIndex() * kSpan;
  const uint lid = gl_LocalInvocationID.x;
  for (uint j = lid; j < kSpan; j += kGroupSize) {
    const uint i = g_first + j;
    if (i < p.n) {
      const float v = Act(i);
      span[j] = v;
      o[i] = v;
    }
  }
  barrier();
  if (p.format == kActF16 || p.format == kActBF16) {  // pairs (n even): the span's words from g_first / 2
    for (uint j = lid; 2 * j < kSpan && g_first + 2 * j < p.n; j += kGroupSize) {
      q[g_first / 2 + j] = PackPair(span[2 * j], span[2 * j + 1], p.format == kActBF16);
    }
    return;
  }
  const uint len = p.format == kActQ8_K ? 256 : 32;
  const uint first_block = g_first / len, blocks = p.n / len;
  const uint end = min(first_block + kSpan / len, blocks);
  QuantLanes();
  if (p.format == kActQ8_K) {
    QuantizeRangeQ8_K(first_block, end, p.d_off);
  } else {
    QuantizeRangeQ8_0(first_block, end, p.d_off);
  }
}
