// Activations to Q8_0 blocks of 32 (what the CPU kernels dot Q8_0 and Q4_0 weights with;
// quant_q8.glsl). A batch's rows are contiguous, so its n rows of cols values are n * cols / 32
// blocks in token order. Output: the int8 values packed four per word ([blocks][8] words), then
// the blocks' scales as f32 bits at word d_off. One invocation per block.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform P { uint blocks, x_off, d_off; } p;

float QIn(uint i) { return x[p.x_off + i]; }

#include "quant_q8.glsl"

void main() {
  const uint b = ItemIndex();
  if (b >= p.blocks) return;
  QuantizeBlockQ8_0(b, p.d_off);
}
