// rmsnorm.comp and the activation quantization after it in one dispatch: y = x / sqrt(mean(x^2) +
// eps) * w over each of `rows` rows of n values (one workgroup per row), and y quantized into q as
// quantize_q8_0 (format kActQ8_0), quantize_q8_k (kActQ8_K) or quantize_pairs (kActF16, kActBF16)
// would quantize it: each lane recomputes the values it quantizes with rmsnorm's operations, so y
// and q are the two kernels' bits without reading y back (norm_q.glsl, which the GEMMs' norm
// tail shares). The row's Q8 blocks are spread over the workgroup's subgroups, each block
// quantized by a whole subgroup (quant_q8.glsl). n must be a multiple of the block (32, 256 or 2);
// y may not alias x.
#version 450
#extension GL_GOOGLE_include_directive : require
// 256 invocations a row: a decode step's row (2,048-8,192 values) is one workgroup, whose
// passes over it are latency-bound; 64 left ~32-128 loop trips an invocation per pass.
#define kGroupSize 256
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform P { uint rows, n; float eps; uint format, d_off; } p;

float NormX(uint i) { return x[i]; }
float NormW(uint j) { return w[j]; }
void NormY(uint i, float v) { y[i] = v; }

#include "norm_q.glsl"

void main() {
  const uint row = GroupIndex();
  if (row >= p.rows) return;
  NormRow(row, p.n, p.eps, p.format, p.d_off);
}
