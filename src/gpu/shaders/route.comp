// A mixture-of-experts router (model::Decoder::Route) over n tokens, one workgroup of 64 each:
// route.glsl's RouteToken, from the logits plus the router's bias when has_bias, into
// ids[t * k + i] and weights[t * k + i]. A one-token step's router GEMM runs the same code as its
// route tail instead (gemm.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer L { float logits[]; };
layout(std430, binding = 1) readonly buffer B { float bias[]; };
layout(std430, binding = 2) writeonly buffer I { uint ids[]; };
layout(std430, binding = 3) writeonly buffer W { float weights[]; };
layout(push_constant) uniform P {
  uint n, n_expert, k, softmax_all, norm, has_bias;
  float scale;
} p;

float RouteLogit(uint t, uint x) {
  const float v = logits[t * p.n_expert + x];
  return p.has_bias != 0 ? v + bias[x] : v;
}

void RouteOut(uint slot, uint id, float w) {
  ids[slot] = id;
  weights[slot] = w;
}

#include "route.glsl"

void main() {
  const uint t = GroupIndex();
  if (t >= p.n) return;  // uniform: the whole workgroup
  RouteToken(t, p.n_expert, p.k, p.softmax_all != 0, p.norm != 0, p.scale);
}
