// A mixture-of-experts router (model::Decoder::Route): from each token's n_expert logits (plus
// the router's bias when has_bias), its k experts, best first, ties to the lower index, into
// ids[t * k + i], and their weights into weights[t * k + i]: with softmax_all the selected
// experts' probabilities of the softmax over all experts (qwen3moe, Mixtral), else a softmax
// over the k selected logits (gpt-oss); then divided by their sum (norm; the sum clamped below
// at the smallest normal f16, as the reference) and multiplied by scale (0 or 1: none). One
// invocation per token: n_expert is small (8-128) and k at most a few.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer L { float logits[]; };
layout(std430, binding = 1) readonly buffer B { float bias[]; };
layout(std430, binding = 2) buffer I { uint ids[]; };
layout(std430, binding = 3) buffer W { float weights[]; };
layout(push_constant) uniform P {
  uint n, n_expert, k, softmax_all, norm, has_bias;
  float scale;
} p;

float Logit(uint t, uint x) {
  const float v = logits[t * p.n_expert + x];
  return p.has_bias != 0 ? v + bias[x] : v;
}

void main() {
  const uint t = ItemIndex();
  if (t >= p.n) return;
  const uint o = t * p.k;
  // Insertion into the sorted k best, as the CPU does (a later equal logit does not pass).
  uint have = 0;
  for (uint x = 0; x < p.n_expert; ++x) {
    const float v = Logit(t, x);
    if (have == p.k && !(v > Logit(t, ids[o + p.k - 1]))) continue;
    uint i = have < p.k ? have++ : p.k - 1;
    while (i > 0 && v > Logit(t, ids[o + i - 1])) {
      ids[o + i] = ids[o + i - 1];
      --i;
    }
    ids[o + i] = x;
  }
  const float mx = Logit(t, ids[o]);
  float sum = 0.0;
  if (p.softmax_all != 0) {
    for (uint x = 0; x < p.n_expert; ++x) sum += exp(Logit(t, x) - mx);
    for (uint i = 0; i < p.k; ++i) weights[o + i] = exp(Logit(t, ids[o + i]) - mx) / sum;
  } else {
    for (uint i = 0; i < p.k; ++i) {
      const float e = exp(Logit(t, ids[o + i]) - mx);
      weights[o + i] = e;
      sum += e;
    }
    for (uint i = 0; i < p.k; ++i) weights[o + i] /= sum;
  }
  if (p.norm != 0) {
    float s = 0.0;
    for (uint i = 0; i < p.k; ++i) s += weights[o + i];
    s = max(s, 6.103515625e-5);
    for (uint i = 0; i < p.k; ++i) weights[o + i] /= s;
  }
  if (p.scale != 0.0 && p.scale != 1.0) {
    for (uint i = 0; i < p.k; ++i) weights[o + i] *= p.scale;
  }
}
