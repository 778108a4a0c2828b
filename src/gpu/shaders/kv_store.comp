// Writes each token's K and V (f32, [n][kv_heads][head_dim]) into the paged f16 cache at the
// token's cache row tok[t].row (block * block_size + position % block_size, from the engine's
// block table). Cache layout per layer: [kv_heads][n_rows][head_dim / 2] words of two halves; K
// at word k_off, V at word v_off. One invocation per pair of values; the grid's y is the token.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 1) readonly buffer V { float v[]; };
layout(std430, binding = 2) writeonly buffer C { uint cache[]; };
layout(std430, binding = 3) readonly buffer Tok { uint tok[]; };
layout(push_constant) uniform P { uint kv_heads, head_dim, n_rows, k_off, v_off; } p;

void main() {
  const uint hp = p.head_dim / 2;
  const uint id = gl_GlobalInvocationID.x;
  if (id >= p.kv_heads * hp) return;
  const uint token = gl_WorkGroupID.y;
  const uint h = id / hp, i = id % hp;
  const uint dst = (h * p.n_rows + tok[4 * token + 2]) * hp + i;
  const uint src = token * p.kv_heads * p.head_dim + h * p.head_dim + 2 * i;
  cache[p.k_off + dst] = packHalf2x16(vec2(k[src], k[src + 1]));
  cache[p.v_off + dst] = packHalf2x16(vec2(v[src], v[src + 1]));
}
