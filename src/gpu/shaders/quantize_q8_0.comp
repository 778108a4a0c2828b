// Activations to Q8_0 blocks of 32 (what the CPU kernels dot Q8_0 and Q4_0 weights with): the
// scale is amax / 127 rounded to f16, each value round-half-even(x * 127 / amax). A batch's rows
// are contiguous, so its n rows of cols values are n * cols / 32 blocks in token order. Output:
// the int8 values packed four per word ([blocks][8] words), then the blocks' scales as f32 bits
// at word d_off. One invocation per block.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform P { uint blocks, x_off, d_off; } p;

void main() {
  const uint b = ItemIndex();
  if (b >= p.blocks) return;
  const uint base = p.x_off + b * 32;
  float amax = 0.0;
  for (uint j = 0; j < 32; ++j) amax = max(amax, abs(x[base + j]));
  const float d = unpackHalf2x16(packHalf2x16(vec2(amax / 127.0, 0.0))).x;
  const float id = amax != 0.0 ? 127.0 / amax : 0.0;
  for (uint k = 0; k < 8; ++k) {
    uint word = 0;
    for (uint j = 0; j < 4; ++j) {
      const float v = clamp(roundEven(x[base + 4 * k + j] * id), -128.0, 127.0);
      word |= (uint(int(v)) & 0xFFu) << (8 * j);
    }
    q[b * 8 + k] = word;
  }
  q[p.d_off + b] = floatBitsToUint(d);
}
