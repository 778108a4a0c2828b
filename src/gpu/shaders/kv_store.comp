// Writes each token's K and V (f32, [n][kv_heads][head_dim]) into the paged cache at the token's
// cache row tok[t].row (block * block_size + position % block_size, from the engine's block
// table). Cache layout per layer: [kv_heads][n_rows][row_words] words; K at word k_off, V at word
// v_off. A row is f16 pairs (head_dim / 2 words; one invocation per pair) or, with q8 set, Q8_0
// blocks of 32 values as 9 words each: 8 of int8 values, then the f16-rounded scale as an f32
// (one invocation per block; the quantizer of quantize_q8_0, i.e. the CPU cache's). The grid's
// y is the token. With rope set, K is stored rotated as rope.comp rotates it (its pairs, angles
// cs and operations: the same bits), so K needs no RoPE dispatch and barrier of its own; k itself
// is left as it was.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "div_rounded.glsl"
#include "rope.glsl"
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 1) readonly buffer V { float v[]; };
layout(std430, binding = 2) writeonly buffer C { uint cache[]; };
layout(std430, binding = 3) readonly buffer Tok { uint tok[]; };
layout(std430, binding = 4) readonly buffer CS { float cs[]; };
layout(push_constant) uniform P {
  uint kv_heads, head_dim, n_rows, k_off, v_off, row_words, q8, rope, rope_dim, neox;
} p;

// K value j of the head whose row starts at base (token `token`), rotated when rope is set.
float KIn(uint token, uint base, uint j) {
  if (p.rope == 0 || j >= p.rope_dim) return k[base + j];
  const uint half_dim = p.rope_dim / 2;
  const uint i = p.neox != 0 ? j % half_dim : j / 2;
  const bool first = p.neox != 0 ? j < half_dim : j % 2 == 0;
  const uint cb = tok[4 * token + 1] * p.rope_dim + 2 * i;
  const float c = cs[cb], s = cs[cb + 1];
  const uint i0 = p.neox != 0 ? base + i : base + 2 * i;
  const uint i1 = p.neox != 0 ? base + i + half_dim : base + 2 * i + 1;
  const float x0 = k[i0], x1 = k[i1];
  const vec2 r = RotatePair(x0, x1, c, s);
  return first ? r.x : r.y;
}

// Value j of the head row at base: V's, or K's (rotated).
float In(bool is_v, uint token, uint base, uint j) {
  return is_v ? v[base + j] : KIn(token, base, j);
}

// The Q8_0 block of 32 values from value j0 of the head row at base.
void StoreBlock(uint token, uint base, uint j0, uint dst, bool is_v) {
  float amax = 0.0;
  for (uint j = 0; j < 32; ++j) amax = max(amax, abs(In(is_v, token, base, j0 + j)));
  const float d = unpackHalf2x16(packHalf2x16(vec2(DivRounded(amax, 127.0), 0.0))).x;
  const float id = amax != 0.0 ? DivRounded(127.0, amax) : 0.0;
  for (uint w = 0; w < 8; ++w) {
    uint word = 0;
    for (uint j = 0; j < 4; ++j) {
      const float x = In(is_v, token, base, j0 + 4 * w + j);
      const float q = clamp(roundEven(x * id), -128.0, 127.0);
      word |= (uint(int(q)) & 0xFFu) << (8 * j);
    }
    cache[dst + w] = word;
  }
  cache[dst + 8] = floatBitsToUint(d);
}

void main() {
  const uint id = gl_GlobalInvocationID.x;
  const uint token = gl_WorkGroupID.y;
  const uint row = tok[4 * token + 2];
  if (p.q8 != 0) {
    const uint bpr = p.head_dim / 32;  // blocks per row
    if (id >= p.kv_heads * bpr) return;
    const uint h = id / bpr, b = id % bpr;
    const uint dst = (h * p.n_rows + row) * p.row_words + 9 * b;
    const uint base = token * p.kv_heads * p.head_dim + h * p.head_dim;
    StoreBlock(token, base, 32 * b, p.k_off + dst, false);
    StoreBlock(token, base, 32 * b, p.v_off + dst, true);
    return;
  }
  const uint hp = p.head_dim / 2;
  if (id >= p.kv_heads * hp) return;
  const uint h = id / hp, i = id % hp;
  const uint dst = (h * p.n_rows + row) * p.row_words + i;
  const uint base = token * p.kv_heads * p.head_dim + h * p.head_dim;
  cache[p.k_off + dst] = packHalf2x16(vec2(KIn(token, base, 2 * i), KIn(token, base, 2 * i + 1)));
  cache[p.v_off + dst] = packHalf2x16(vec2(v[base + 2 * i], v[base + 2 * i + 1]));
}
