// Rotates the first rope_dim values of each of n_heads heads of token t's row of x (x_stride
// floats per token, head_dim per head) in place by the angles of the token's position tok[t].pos:
// cs holds [positions][rope_dim] cos/sin pairs computed on the host by kernels::RopeAngles (so
// the angles are the CPU path's to the bit). neox pairs (i, i + rope_dim/2), else (2i, 2i+1).
// One invocation per pair; the grid's y is the token.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "rope.glsl"
layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer CS { float cs[]; };
layout(std430, binding = 2) readonly buffer Tok { uint tok[]; };
layout(push_constant) uniform P { uint n_heads, head_dim, rope_dim, neox, x_stride; } p;

void main() {
  const uint half_dim = p.rope_dim / 2;
  const uint id = gl_GlobalInvocationID.x;
  if (id >= p.n_heads * half_dim) return;
  const uint token = gl_WorkGroupID.y;
  const uint h = id / half_dim, i = id % half_dim;
  const uint cb = tok[4 * token + 1] * p.rope_dim + 2 * i;
  const float c = cs[cb], s = cs[cb + 1];
  const uint base = token * p.x_stride + h * p.head_dim;
  const uint i0 = p.neox != 0 ? base + i : base + 2 * i;
  const uint i1 = p.neox != 0 ? base + i + half_dim : base + 2 * i + 1;
  const float x0 = x[i0], x1 = x[i1];
  const vec2 r = RotatePair(x0, x1, c, s);
  x[i0] = r.x;
  x[i1] = r.y;
}
