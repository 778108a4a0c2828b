// A mixture-of-experts router (model::Decoder::Route): from each token's n_expert logits (plus
// the router's bias when has_bias), its k experts, best first, ties to the lower index, into
// ids[t * k + i], and their weights into weights[t * k + i]: with softmax_all the selected
// experts' probabilities of the softmax over all experts (qwen3moe, Mixtral), else a softmax
// over the k selected logits (gpt-oss); then divided by their sum (norm; the sum clamped below
// at the smallest normal f16, as the reference) and multiplied by scale (0 or 1: none). One
// workgroup of 64 per token (an invocation per token walked the experts with an insertion sort
// through device memory, a chain of dependent loads per expert: microseconds a token on a GPU,
// per MoE layer of a decode step). Each expert's rank (the experts ahead of it: a higher logit,
// or an equal one at a lower index) is counted from shared memory in parallel, and the experts
// ranked below k are the CPU insertion's k in its order. The sums stay serial, in expert order,
// over values computed in parallel (the same operations per value), so the weights keep the
// bits of the one-invocation kernel. A NaN logit ranks as -inf (the insertion kept one it met
// first; a NaN router is a broken model either way).
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

const uint kMaxExperts = 512;  // checked by the host (Kernels::kMaxExperts)
shared float lg[kMaxExperts];  // the token's logits (plus bias), NaN as -inf
shared float ex[kMaxExperts];  // exp(logit - max) of every expert (softmax_all)
shared uint top[64];           // the k best, best first (k <= 64: checked by the host)

void main() {
  const uint t = GroupIndex();
  if (t >= p.n) return;  // uniform: the whole workgroup
  const uint lid = gl_LocalInvocationID.x;
  const uint o = t * p.k;
  for (uint x = lid; x < p.n_expert; x += 64) {
    const float v = logits[t * p.n_expert + x];
    const float b = p.has_bias != 0 ? v + bias[x] : v;
    lg[x] = isnan(b) ? -1.0 / 0.0 : b;
  }
  barrier();
  for (uint x = lid; x < p.n_expert; x += 64) {
    const float v = lg[x];
    uint rank = 0;
    for (uint y = 0; y < p.n_expert; ++y) {
      const float u = lg[y];
      rank += (u > v || (u == v && y < x)) ? 1u : 0u;
    }
    if (rank < p.k) top[rank] = x;
  }
  barrier();
  const float mx = lg[top[0]];
  if (p.softmax_all != 0) {
    for (uint x = lid; x < p.n_expert; x += 64) ex[x] = exp(lg[x] - mx);
  }
  barrier();
  if (lid != 0) return;
  for (uint i = 0; i < p.k; ++i) ids[o + i] = top[i];
  float sum = 0.0;
  if (p.softmax_all != 0) {
    for (uint x = 0; x < p.n_expert; ++x) sum += ex[x];
    for (uint i = 0; i < p.k; ++i) weights[o + i] = ex[top[i]] / sum;
  } else {
    for (uint i = 0; i < p.k; ++i) {
      const float e = exp(lg[top[i]] - mx);
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
