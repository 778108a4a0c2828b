// Decode attention for one token at position step[1] over the f16 cache (kv_store layout): one
// workgroup per query head, the head's KV head shared by n_head / n_head_kv query heads (GQA).
// Scores go to scratch ([n_head][max_ctx]) so any depth fits; softmax with the max subtracted,
// then each invocation sums its dims of the values. Simple and exact, not fast: a tiled,
// split-over-positions kernel is the next step (docs/gpu.md).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer C { uint cache[]; };
layout(std430, binding = 2) buffer S { float scores[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(std430, binding = 4) readonly buffer Step { uint step[]; };
layout(push_constant) uniform P {
  uint n_head, n_head_kv, head_dim, max_ctx, k_off, v_off;
  float scale;
} p;

void main() {
  const uint h = GroupIndex();
  if (h >= p.n_head) return;
  const uint lid = gl_LocalInvocationID.x;
  const uint n_keys = step[1] + 1;
  const uint kvh = h / (p.n_head / p.n_head_kv);
  const uint hp = p.head_dim / 2;
  const uint qb = h * p.head_dim;
  const uint sb = h * p.max_ctx;
  float mx = -1.0 / 0.0;
  for (uint t = lid; t < n_keys; t += 64) {
    const uint kb = p.k_off + (kvh * p.max_ctx + t) * hp;
    float dot = 0.0;
    for (uint i = 0; i < hp; ++i) {
      const vec2 kv = unpackHalf2x16(cache[kb + i]);
      dot += q[qb + 2 * i] * kv.x + q[qb + 2 * i + 1] * kv.y;
    }
    dot *= p.scale;
    scores[sb + t] = dot;
    mx = max(mx, dot);
  }
  mx = WorkgroupMax(mx);
  float sum = 0.0;
  for (uint t = lid; t < n_keys; t += 64) {
    const float e = exp(scores[sb + t] - mx);
    scores[sb + t] = e;
    sum += e;
  }
  sum = WorkgroupSum(sum);
  // The exponentials written above by other invocations must be visible before they are read.
  memoryBarrierBuffer();
  barrier();
  const float inv = 1.0 / sum;
  for (uint i = lid; i < hp; i += 64) {
    vec2 acc = vec2(0.0);
    for (uint t = 0; t < n_keys; ++t) {
      acc += scores[sb + t] * unpackHalf2x16(cache[p.v_off + (kvh * p.max_ctx + t) * hp + i]);
    }
    o[qb + 2 * i] = acc.x * inv;
    o[qb + 2 * i + 1] = acc.y * inv;
  }
}
