// The wide one-token GEMM for Q8_0 weights (docs/gpu.md "The wide GEMV"): gemm1_q8_0's
// arithmetic to the bit (lane l takes blocks l, l + S, ... in order, each block's integer dot is
// exact, then acc += float(s) * (wd * xd) as there), so it is used for one token while batches
// keep gemm8_q8_0 and rows stay bit-identical across batch sizes. What differs is the loads: a
// block's 32 int8 weights as two uvec4, its activation as two uvec4, and kUnroll blocks' loads
// issued before the first is used.
#version 450
#extension GL_GOOGLE_include_directive : require
#define kTile 1
#include "gemm.glsl"
#include "dot4.glsl"

// The same buffers seen as 16-byte vectors (the quants) and as words (the scales).
layout(std430, binding = 0) readonly buffer W { uvec4 w4[]; };
layout(std430, binding = 0) readonly buffer Wd { uint wd_[]; };
layout(std430, binding = 1) readonly buffer X { uvec4 x4[]; };
layout(std430, binding = 1) readonly buffer Xd { uint xd_[]; };

const uint kUnroll = 4;

int Dot16(uvec4 a, uvec4 b) {
  int s = 0;
  [[unroll]] for (uint k = 0; k < 4; ++k) s += SDot4(a[k], b[k]);
  return s;
}

void GemmMain() {
  const uint row = SubgroupRow();
  if (row >= p.rows) return;
  const uint blocks = p.cols;
  const uint s = gl_SubgroupSize;
  float acc[1];
  acc[0] = 0.0;
  uint b = gl_SubgroupInvocationID;
  for (; b + (kUnroll - 1) * s < blocks; b += kUnroll * s) {
    uvec4 w0[kUnroll], w1[kUnroll];
    float wd[kUnroll];
    [[unroll]] for (uint u = 0; u < kUnroll; ++u) {
      const uint i = row * blocks + b + u * s;
      w0[u] = w4[2 * i];
      w1[u] = w4[2 * i + 1];
      wd[u] = uintBitsToFloat(wd_[p.w_d_off + i]);
    }
    [[unroll]] for (uint u = 0; u < kUnroll; ++u) {
      const uint bb = b + u * s;
      const int d = Dot16(w0[u], x4[2 * bb]) + Dot16(w1[u], x4[2 * bb + 1]);
      acc[0] += float(d) * (wd[u] * uintBitsToFloat(xd_[p.x_d_off + bb]));
    }
  }
  for (; b < blocks; b += s) {
    const uint i = row * blocks + b;
    const int d = Dot16(w4[2 * i], x4[2 * b]) + Dot16(w4[2 * i + 1], x4[2 * b + 1]);
    acc[0] += float(d) * (uintBitsToFloat(wd_[p.w_d_off + i]) *
                          uintBitsToFloat(xd_[p.x_d_off + b]));
  }
  StoreTile(acc, 0, row);
}
