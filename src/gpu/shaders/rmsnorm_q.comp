// rmsnorm.comp and the activation quantization after it in one dispatch: y = x / sqrt(mean(x^2) +
// eps) * w over each of `rows` rows of n values (one workgroup per row), and y quantized into q as
// quantize_q8_0 (format kActQ8_0), quantize_q8_k (kActQ8_K) or quantize_pairs (kActF16, kActBF16)
// would quantize it: each lane recomputes the values it quantizes with rmsnorm's operations, so y
// and q are the two kernels' bits without reading y back. The row's Q8 blocks are spread over the
// workgroup's subgroups, each block quantized by a whole subgroup (quant_q8.glsl). n must be a
// multiple of the block (32, 256 or 2); y may not alias x.
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

float g_scale = 0.0;  // the row's 1 / rms
uint g_row0 = 0;      // index of the row's first value

float QIn(uint i) { return x[i] * g_scale * w[i - g_row0]; }

#include "quant_q8.glsl"

void main() {
  const uint row = GroupIndex();
  if (row >= p.rows) return;
  const uint xb = row * p.n;
  float ss = 0.0;
  const uint lid = gl_LocalInvocationID.x;
  for (uint i = lid; i < p.n; i += kGroupSize) ss += x[xb + i] * x[xb + i];
  ss = WorkgroupSum(ss);
  const float scale = 1.0 / sqrt(ss / float(p.n) + p.eps);
  for (uint i = lid; i < p.n; i += kGroupSize) y[xb + i] = x[xb + i] * scale * w[i];
  g_scale = scale;
  g_row0 = xb;
  if (p.format == kActF16 || p.format == kActBF16) {  // pairs: a word per two values, the row's n / 2 words from xb / 2
    for (uint i = lid; i < p.n / 2; i += kGroupSize) {
      q[xb / 2 + i] = PackPair(QIn(xb + 2 * i), QIn(xb + 2 * i + 1), p.format == kActBF16);
    }
    return;
  }
  const uint per_row = p.n / (p.format == kActQ8_K ? 256 : 32);
  QuantLanes();
  if (p.format == kActQ8_K) {
    QuantizeRangeQ8_K(row * per_row, row * per_row + per_row, p.d_off);
  } else {
    QuantizeRangeQ8_0(row * per_row, row * per_row + per_row, p.d_off);
  }
}
