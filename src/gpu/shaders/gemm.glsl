// Shared by the GEMM shaders (gemm_*.comp): y[t][row] = dot(W[row], x[t]) for the n tokens of a
// batch. One subgroup per weight row, as the single-token GEMV had; the tokens are taken in tiles
// of kTile, so each weight element is read once per tile and multiplied into every token of it.
// Each (row, token) sum is formed the same way whatever n is: the same lane takes the same
// columns in the same order into acc[t], and subgroupAdd reduces it. So a token's row of a
// k + 1-token verify batch is bit-identical to the same token run alone (speculation stays
// lossless; tests/gpu_batch_test.cc checks it).
//
// Push constants: rows; cols (values for float weights, blocks for quantized ones); w_d_off (word
// of the weights' block scales); n tokens; x_stride (per token: floats, or words of a Q8_0
// activation); x_d_off (word of the Q8_0 activations' scales, token-major); y_off, y_stride.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#define kTile 8

layout(push_constant) uniform P {
  uint rows, cols, w_d_off, n, x_stride, x_d_off, y_off, y_stride;
} p;

layout(std430, binding = 2) writeonly buffer Y { float y[]; };

// Sums each token's partial over the subgroup and writes it.
void StoreTile(float acc[kTile], uint t0, uint row) {
  for (uint t = 0; t < kTile; ++t) {
    if (t0 + t >= p.n) break;  // uniform: every lane has the same t0
    const float s = subgroupAdd(acc[t]);
    if (subgroupElect()) y[p.y_off + (t0 + t) * p.y_stride + row] = s;
  }
}
