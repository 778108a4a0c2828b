// GEMM (gemm.glsl) for Q6_K weights, dequantized in the shader (q6_k.glsl) and multiplied with
// f32 activations (the CPU quantizes them to Q8_K; the difference is within the quantized
// tolerance, see tests/gpu_kernels_test.cc). A lane takes one l of a block's half at a time,
// which covers 4 values; cols counts blocks of 256.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };

uint W6(uint i) { return w[i]; }
#include "q6_k.glsl"

void main() {
  const uint row = SubgroupRow();
  if (row >= p.rows || Skip()) return;
  const uint wrow = WRow(row);  // the weight row (its expert's, for gemmx_*)
  const uint blocks = p.cols;
  const uint t0 = TileStart();
  float acc[kTile];
  [[unroll]] for (uint t = 0; t < kTile; ++t) acc[t] = 0.0;
  for (uint it = gl_SubgroupInvocationID; it < blocks * 64; it += gl_SubgroupSize) {
    const uint b = it / 64, h = (it / 32) % 2, l = it % 32;
    const uint base = (wrow * blocks + b) * 52;
    const float d = uintBitsToFloat(w[p.w_d_off + wrow * blocks + b]);
    float wq[4];
    for (uint k = 0; k < 4; ++k) wq[k] = Q6Scale(base, h, l, k) * float(Q6Quant(base, h, l, k));
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (InBatch(t0 + t)) {
        const uint xb = XTok(t0 + t) * p.x_stride + b * 256 + 128 * h + l;
        float s = 0.0;
        for (uint k = 0; k < 4; ++k) s += wq[k] * x[xb + 32 * k];
        acc[t] += d * s;
      }
    }
  }
  StoreTile(acc, t0, row);
}
