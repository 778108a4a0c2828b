// The wide one-token GEMM for Q4_0 weights (docs/gpu.md "The wide GEMV"): gemm1_q4_0's
// arithmetic to the bit (lane l takes blocks l, l + S, ... in order, each block's integer dot is
// exact, then acc += float(s) * (wd * xd) as there), so it is used for one token while batches
// keep gemm8_q4_0 and rows stay bit-identical across batch sizes. What differs is the loads: a
// block's 16 nibble bytes as one uvec4 (a 32-lane subgroup's load covers 512 contiguous bytes),
// its activation as two uvec4, and kUnroll blocks' loads issued before the first is used.
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

// The integer dot of one block: 32 nibbles (stored + 8) against 32 int8 activations.
int BlockDot(uvec4 wv, uvec4 lo, uvec4 hi) {
  int s = 0;
  [[unroll]] for (uint k = 0; k < 4; ++k) {
    s += SDot4(NibblesMinus8(wv[k], 0), lo[k]) + SDot4(NibblesMinus8(wv[k], 4), hi[k]);
  }
  return s;
}

// One token: its activation blocks start at the buffer's start (vec4 2 b for block b).
void GemmMain() {
  const uint row = SubgroupRow();
  if (row >= p.rows) return;
  const uint blocks = p.cols;
  const uint s = gl_SubgroupSize;
  float acc[1];
  acc[0] = 0.0;
  uint b = gl_SubgroupInvocationID;
  for (; b + (kUnroll - 1) * s < blocks; b += kUnroll * s) {
    uvec4 wv[kUnroll];
    float wd[kUnroll];
    [[unroll]] for (uint u = 0; u < kUnroll; ++u) {
      wv[u] = w4[row * blocks + b + u * s];
      wd[u] = uintBitsToFloat(wd_[p.w_d_off + row * blocks + b + u * s]);
    }
    [[unroll]] for (uint u = 0; u < kUnroll; ++u) {
      const uint bb = b + u * s;
      const int d = BlockDot(wv[u], x4[2 * bb], x4[2 * bb + 1]);
      acc[0] += float(d) * (wd[u] * uintBitsToFloat(xd_[p.x_d_off + bb]));
    }
  }
  for (; b < blocks; b += s) {
    const int d = BlockDot(w4[row * blocks + b], x4[2 * b], x4[2 * b + 1]);
    acc[0] += float(d) * (uintBitsToFloat(wd_[p.w_d_off + row * blocks + b]) *
                          uintBitsToFloat(xd_[p.x_d_off + b]));
  }
  StoreTile(acc, 0, row);
}
