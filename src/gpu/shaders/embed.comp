// x = the dequantized row step[0] of an embedding table in its uploaded layout (vk_kernels.cc):
// type 0 F32, 1 F16, 2 Q8_0, 3 Q4_0, 4 Q6_K (the same layouts the GEMVs read). One invocation per
// value.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer T { uint t[]; };
layout(std430, binding = 1) writeonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer Step { uint step[]; };
layout(push_constant) uniform P { uint type, cols, d_off; } p;

uint W6(uint i) { return t[i]; }
#include "q6_k.glsl"

void main() {
  const uint c = gl_GlobalInvocationID.x;
  if (c >= p.cols) return;
  const uint row = step[0];
  float v;
  if (p.type == 0) {
    v = uintBitsToFloat(t[row * p.cols + c]);
  } else if (p.type == 1) {
    const vec2 h = unpackHalf2x16(t[(row * p.cols + c) / 2]);
    v = (c & 1) != 0 ? h.y : h.x;
  } else if (p.type == 4) {
    const uint blocks = p.cols / 256, b = c / 256, j = c % 256;
    const uint h = j / 128, k = (j % 128) / 32, l = j % 32;
    const uint base = (row * blocks + b) * 52;
    const float d = uintBitsToFloat(t[p.d_off + row * blocks + b]);
    v = d * Q6Scale(base, h, l, k) * float(Q6Quant(base, h, l, k));
  } else {
    const uint blocks = p.cols / 32, b = c / 32, j = c % 32;
    const float d = uintBitsToFloat(t[p.d_off + row * blocks + b]);
    if (p.type == 2) {
      v = d * float(bitfieldExtract(int(t[(row * blocks + b) * 8 + j / 4]), int(8 * (j % 4)), 8));
    } else {
      const uint byte_index = j % 16;
      const uint word = t[(row * blocks + b) * 4 + byte_index / 4];
      const uint nib = (word >> (8 * (byte_index % 4) + (j >= 16 ? 4 : 0))) & 15u;
      v = d * float(int(nib) - 8);
    }
  }
  x[c] = v;
}
