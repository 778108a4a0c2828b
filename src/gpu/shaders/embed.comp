// x[t] = the dequantized row tok[t].token of an embedding table in its uploaded layout
// (embed.glsl). One invocation per value; the grid's y is the token.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer T { uint t[]; };
layout(std430, binding = 1) writeonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer Tok { uint tok[]; };  // [n][4]: token, pos, row, seq
layout(push_constant) uniform P { uint type, cols, d_off; } p;

#include "embed.glsl"

void main() {
  const uint c = gl_GlobalInvocationID.x;
  if (c >= p.cols) return;
  const uint token = gl_WorkGroupID.y;
  x[token * p.cols + c] = EmbedValue(tok[4 * token], c);
}
