// qwen3's per-head q/k norms, Q's RoPE and the K/V store in one dispatch: what rmsnorm.comp (q
// and k in place with their norms' weights), rope.comp (q) and kv_store.comp (k rotated, v; an
// f16 cache) leave in q and the cache, the same bits, with one barrier where those took two. A
// workgroup of 256 per (head, token): slots 0 .. n_head - 1 are Q's heads, then the KV heads
// (K's and V's rows). The head's sum of squares is rmsnorm.comp's (256 lanes, WorkgroupSum), its
// normalized row goes to shared memory as the f32 values rmsnorm.comp stores, and the pairs are
// rotated by rope.glsl's RotatePair from the same angles. k itself is left as the GEMM wrote it
// (only the cache is read after this). Grid: x the slot, y the token.
#version 450
#extension GL_GOOGLE_include_directive : require
#define kGroupSize 256
#include "common.glsl"
#include "rope.glsl"

layout(std430, binding = 0) buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer QW { float qw[]; };
layout(std430, binding = 4) readonly buffer KW { float kw[]; };
layout(std430, binding = 5) readonly buffer CS { float cs[]; };
layout(std430, binding = 6) readonly buffer Tok { uint tok[]; };
layout(std430, binding = 7) writeonly buffer C { uint cache[]; };
layout(push_constant) uniform P {
  uint n_head, kv_heads, head_dim, rope_dim, neox, n_rows, k_off, v_off, row_words;
  float eps;
} p;

const uint kMaxHeadDim = 512;  // checked by the host (Kernels::QkNormRopeFits)
shared float row[kMaxHeadDim];

float In(bool is_q, uint i) { return is_q ? q[i] : k[i]; }

// Value j of the normalized row, rotated where j < rope_dim (kv_store.comp's KIn).
float Rotated(uint pos, uint j) {
  if (j >= p.rope_dim) return row[j];
  const uint half_dim = p.rope_dim / 2;
  const uint i = p.neox != 0 ? j % half_dim : j / 2;
  const bool first = p.neox != 0 ? j < half_dim : j % 2 == 0;
  const uint cb = pos * p.rope_dim + 2 * i;
  const uint i0 = p.neox != 0 ? i : 2 * i;
  const uint i1 = p.neox != 0 ? i + half_dim : 2 * i + 1;
  const vec2 r = RotatePair(row[i0], row[i1], cs[cb], cs[cb + 1]);
  return first ? r.x : r.y;
}

void main() {
  const uint slot = gl_WorkGroupID.x, t = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x;
  const uint hd = p.head_dim;
  const bool is_q = slot < p.n_head;
  const uint h = is_q ? slot : slot - p.n_head;
  const uint base = (t * (is_q ? p.n_head : p.kv_heads) + h) * hd;
  float ss = 0.0;
  for (uint i = lid; i < hd; i += kGroupSize) ss += In(is_q, base + i) * In(is_q, base + i);
  ss = WorkgroupSum(ss);
  const float scale = 1.0 / sqrt(ss / float(hd) + p.eps);
  for (uint i = lid; i < hd; i += kGroupSize) {
    row[i] = In(is_q, base + i) * scale * (is_q ? qw[i] : kw[i]);
  }
  barrier();
  const uint pos = tok[4 * t + 1];
  if (is_q) {
    // rope.comp's pairs, then the values past rope_dim as the norm left them.
    const uint half_dim = p.rope_dim / 2;
    for (uint i = lid; i < half_dim; i += kGroupSize) {
      const uint cb = pos * p.rope_dim + 2 * i;
      const uint i0 = p.neox != 0 ? i : 2 * i;
      const uint i1 = p.neox != 0 ? i + half_dim : 2 * i + 1;
      const vec2 r = RotatePair(row[i0], row[i1], cs[cb], cs[cb + 1]);
      q[base + i0] = r.x;
      q[base + i1] = r.y;
    }
    for (uint j = p.rope_dim + lid; j < hd; j += kGroupSize) q[base + j] = row[j];
    return;
  }
  // kv_store.comp's f16 pairs: K rotated, V as the GEMM wrote it.
  const uint dst = (h * p.n_rows + tok[4 * t + 2]) * p.row_words;
  for (uint i = lid; i < hd / 2; i += kGroupSize) {
    cache[p.k_off + dst + i] = packHalf2x16(vec2(Rotated(pos, 2 * i), Rotated(pos, 2 * i + 1)));
    cache[p.v_off + dst + i] = packHalf2x16(vec2(v[base + 2 * i], v[base + 2 * i + 1]));
  }
}
