// Activations as 16-bit pairs for the F16 (bf16 0) and BF16 (bf16 1) GEMMs: q[i] = the values
// x[x_off + 2 i] and x[x_off + 2 i + 1] rounded to f16 / bf16 (common.glsl's PackPair), so a
// GEMM reads one word per two activations and rounds nothing per row. A batch's rows are
// contiguous, so n rows of cols values are n * cols / 2 words in token order.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform P { uint pairs, x_off, bf16; } p;

void main() {
  const uint i = ItemIndex();
  if (i >= p.pairs) return;
  const uint c = p.x_off + 2 * i;
  q[i] = PackPair(x[c], x[c + 1], p.bf16 != 0);
}
