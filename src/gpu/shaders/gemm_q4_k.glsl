// GEMM (gemm.glsl) for Q4_K weights, dequantized in the shader (q4_k.glsl) and multiplied with
// f32 activations (the CPU quantizes them to Q8_K; the difference is within the quantized
// tolerance, see tests/gpu_kernels_test.cc). A lane takes one l of a block at a time: 8 values,
// two in each group of 64; cols counts blocks of 256.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };

uint W4(uint i) { return w[i]; }
#include "q4_k.glsl"

void main() {
  const uint row = SubgroupRow();
  if (row >= p.rows || Skip()) return;
  const uint wrow = WRow(row);  // the weight row (its expert's, for gemmx_*)
  const uint blocks = p.cols;
  const uint t0 = TileStart();
  float acc[kTile];
  [[unroll]] for (uint t = 0; t < kTile; ++t) acc[t] = 0.0;
  for (uint it = gl_SubgroupInvocationID; it < blocks * 32; it += gl_SubgroupSize) {
    const uint b = it / 32, l = it % 32;
    const uint base = (wrow * blocks + b) * 35;
    const uint db = p.w_d_off + 2 * (wrow * blocks + b);
    const float d = uintBitsToFloat(w[db]), dmin = uintBitsToFloat(w[db + 1]);
    float wq[8];
    for (uint g = 0; g < 4; ++g) {
      const uint q = Q4Byte(base, 32 * g + l);
      float sc, m;
      Q4ScaleMin(base, 2 * g, sc, m);
      wq[2 * g] = (d * sc) * float(q & 15u) - dmin * m;
      Q4ScaleMin(base, 2 * g + 1, sc, m);
      wq[2 * g + 1] = (d * sc) * float(q >> 4) - dmin * m;
    }
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (InBatch(t0 + t)) {
        const uint xb = XTok(t0 + t) * p.x_stride + b * 256 + l;
        float s = 0.0;
        for (uint g = 0; g < 4; ++g) {
          s += wq[2 * g] * x[xb + 64 * g] + wq[2 * g + 1] * x[xb + 64 * g + 32];
        }
        acc[t] += s;
      }
    }
  }
  StoreTile(acc, t0, row);
}
