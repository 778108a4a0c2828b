// Activations to Q8_K blocks of 256 (what the CPU kernels dot Q4_K and Q6_K weights with;
// quant_q8.glsl: kernels::QuantizeQ8_K's bits). A batch's rows are contiguous, so its n rows of
// cols values are n * cols / 256 blocks in token order. Output: per block 72 words, the int8
// values four per word (64 words) and the sums of the 8 sub-blocks of 32 values as ints (8 words;
// the CPU's bsums in pairs), then the blocks' d as f32 bits at word d_off. One subgroup per
// block (quant_q8.glsl): the first maximum and every rounding are the CPU's. A workgroup takes
// per_group blocks, one per subgroup (the host sizes it to its subgroups).
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
  QuantizeRangeQ8_K(first, min(first + p.per_group, p.blocks), p.d_off);
}
