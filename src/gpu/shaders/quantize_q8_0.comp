// Activations to Q8_0 blocks of 32 (what the CPU kernels dot Q8_0 and Q4_0 weights with;
// quant_q8.glsl). A batch's rows are contiguous, so its n rows of cols values are n * cols / 32
// blocks in token order. Output: the int8 values packed four per word ([blocks][8] words), then
// the blocks' scales as f32 bits at word d_off. A workgroup takes per_group blocks, its
// subgroups a pass of 1-4 blocks each (quant_q8.glsl); the host sizes per_group to its subgroups.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform P { uint blocks, x_off, d_off, per_group; } p;

float QIn(uint i) { return x[p.x_off + i]; }

#include "quant_q8.glsl"

void main() {
  QuantLanes();
  const uint first = GroupIndex() * p.per_group;
  QuantizeRangeQ8_0(first, min(first + p.per_group, p.blocks), p.d_off);
}
