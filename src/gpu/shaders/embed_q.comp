// embed.comp and the first layer's RMSNorm with the quantization of its output (rmsnorm_q.comp)
// in one dispatch, one workgroup per token: the token's row of the table into x (embed.glsl, the
// same values), then norm_q.glsl over it, so x, y and q are the two kernels' bits with no
// dispatch and barrier between them. format and d_off as rmsnorm_q.comp takes them (0: y only,
// rmsnorm.comp's bits). cols a multiple of the format's block; y may not alias x.
#version 450
#extension GL_GOOGLE_include_directive : require
#define kGroupSize 256
#include "common.glsl"

layout(std430, binding = 0) readonly buffer T { uint t[]; };
// coherent: the workgroup reads back the values its invocations wrote.
layout(std430, binding = 1) coherent buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer Tok { uint tok[]; };  // [n][4]: token, pos, row, seq
layout(std430, binding = 3) readonly buffer Wt { float w[]; };
layout(std430, binding = 4) writeonly buffer Y { float y[]; };
layout(std430, binding = 5) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform P { uint type, cols, d_off; float eps; uint format, q_d_off, n; } p;

#include "embed.glsl"

float NormX(uint i) { return x[i]; }
float NormW(uint j) { return w[j]; }
void NormY(uint i, float v) { y[i] = v; }

#include "norm_q.glsl"

void main() {
  const uint token = GroupIndex();
  if (token >= p.n) return;  // the grid's last row of groups may run past n (uniform per group)
  const uint row = tok[4 * token];
  for (uint c = gl_LocalInvocationID.x; c < p.cols; c += kGroupSize) {
    x[token * p.cols + c] = EmbedValue(row, c);
  }
  memoryBarrierBuffer();
  barrier();
  NormRow(token, p.cols, p.eps, p.format, p.q_d_off);
}
