// Activations to Q8_K blocks of 256 (what the CPU kernels dot Q4_K and Q6_K weights with), as
// kernels::QuantizeQ8_K rounds them: max is the first value of the largest magnitude, iscale =
// -127 / max, each value round-half-even(iscale * x) capped at 127, d = 1 / iscale. A batch's
// rows are contiguous, so its n rows of cols values are n * cols / 256 blocks in token order.
// Output: per block 72 words, the int8 values four per word (64 words) and the sums of the 8
// sub-blocks of 32 values as ints (8 words; the CPU's bsums in pairs), then the blocks' d as f32
// bits at word d_off. One invocation per block, in the CPU's order, so the first maximum and
// every rounding are the CPU's (the divisions correctly rounded: DivRounded).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform P { uint blocks, x_off, d_off; } p;

void main() {
  const uint b = ItemIndex();
  if (b >= p.blocks) return;
  const uint base = p.x_off + b * 256;
  float amax = 0.0, mx = 0.0;
  for (uint j = 0; j < 256; ++j) {
    const float v = x[base + j];
    if (abs(v) > amax) {
      amax = abs(v);
      mx = v;
    }
  }
  if (amax == 0.0) {
    for (uint k = 0; k < 72; ++k) q[b * 72 + k] = 0;
    q[p.d_off + b] = 0;
    return;
  }
  const float iscale = DivRounded(-127.0, mx);
  for (uint s = 0; s < 8; ++s) {
    int sum = 0;
    for (uint k = 0; k < 8; ++k) {
      uint word = 0;
      for (uint j = 0; j < 4; ++j) {
        precise const float t = iscale * x[base + 32 * s + 4 * k + j];
        const int v = min(127, int(roundEven(t)));
        sum += v;
        word |= (uint(v) & 0xFFu) << (8 * j);
      }
      q[b * 72 + 8 * s + k] = word;
    }
    q[b * 72 + 64 + s] = uint(sum);
  }
  const float d = DivRounded(1.0, iscale);
  q[p.d_off + b] = floatBitsToUint(d);
}
