// swiglu.comp (or swiglu_oai.comp, oai 1) and the activation quantization after it in one
// dispatch: out[i] = silu(gate[i]) * up[i], and out quantized into q as quantize_q8_0 (q8k 0) or
// quantize_q8_k (q8k 1) would quantize it. One invocation per block of 32 or 256 values: it
// quantizes its block (recomputing each value with the separate kernel's operations, so q is
// that kernel's bits), then writes its block of out (out may alias gate: only this invocation
// reads or writes the block). With oai, gpt-oss's clamped SwiGLU with each slot's expert biases
// (ids[slot] its expert; ff values a slot): x = min(gate + gb, 7), y = clamp(up + ub, -7, 7),
// out = x sigmoid(1.702 x) (y + 1). Without it bindings 4-6 are not read.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 3) writeonly buffer Q { uint q[]; };
layout(std430, binding = 4) readonly buffer GB { float gb[]; };
layout(std430, binding = 5) readonly buffer UB { float ub[]; };
layout(std430, binding = 6) readonly buffer Ids { uint ids[]; };
layout(push_constant) uniform P { uint blocks, q8k, d_off, oai, ff; } p;

float QIn(uint i) {
  if (p.oai != 0) {
    const uint b = ids[i / p.ff] * p.ff + i % p.ff;
    const float x = min(g[i] + gb[b], 7.0);
    const float y = clamp(u[i] + ub[b], -7.0, 7.0);
    return x / (1.0 + exp(-1.702 * x)) * (y + 1.0);
  }
  const float v = g[i];
  return v / (1.0 + exp(-v)) * u[i];
}

#include "quant_q8.glsl"

void main() {
  const uint b = ItemIndex();
  if (b >= p.blocks) return;
  const uint len = p.q8k != 0 ? 256 : 32;
  if (p.q8k != 0) {
    QuantizeBlockQ8_K(b, p.d_off);
  } else {
    QuantizeBlockQ8_0(b, p.d_off);
  }
  // After the quantizer's reads: out may be gate.
  float v[32];
  for (uint c = 0; c < len; c += 32) {
    for (uint j = 0; j < 32; ++j) v[j] = QIn(b * len + c + j);
    for (uint j = 0; j < 32; ++j) o[b * len + c + j] = v[j];
  }
}
