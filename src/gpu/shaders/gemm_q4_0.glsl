// GEMM (gemm.glsl) for Q4_0 weights against Q8_0 activations (quantize_q8_0). Weights as
// uploaded (vk_kernels.cc): each block's 16 nibble bytes in 4 words ([rows][blocks][4]; byte j
// holds value j in its low nibble and value j + 16 in its high one, each stored + 8), then the
// f32 scales [rows][blocks] at word w_d_off. With MXFP4 defined, the nibbles are E2M1 codes
// taken as twice their value (kernels::kMxfp4Doubled) and the scale is half the E8M0 one: the
// CPU's integer dot (kernels::DotMxfp4).
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"
#include "dot4.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { uint xq[]; };

#ifdef MXFP4
const int kDoubled[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
int Nib(uint v) { return kDoubled[v]; }
#endif

void GemmMain() {
  const uint row = SubgroupRow();
  if (row >= p.rows || Skip()) return;
  const uint wrow = WRow(row);  // the weight row (its expert's, for gemmx_*)
  const uint blocks = p.cols;
  const uint t0 = TileStart();
  float acc[kTile];
  [[unroll]] for (uint t = 0; t < kTile; ++t) acc[t] = 0.0;
  for (uint b = gl_SubgroupInvocationID; b < blocks; b += gl_SubgroupSize) {
    const uint wb = (wrow * blocks + b) * 4;
    // The block's 32 values decoded once, as int8 four to a word in the activation's order
    // (words 0-3: values 0-15, the low nibbles; words 4-7: values 16-31, the high ones), so a
    // token's dot is Q8_0's. Decoding per token instead made the 32-token kernels slow to
    // compile on lavapipe (MXFP4's table: ~55 s) and repeats the work on a GPU. The dot is an
    // integer sum, exact in any order, so the bits are the same either way.
    uint wq[8];
    [[unroll]] for (uint k = 0; k < 4; ++k) {
      const uint wv = w[wb + k];
#ifdef MXFP4
      wq[k] = 0;
      wq[k + 4] = 0;
      [[unroll]] for (uint j = 0; j < 4; ++j) {
        wq[k] = bitfieldInsert(wq[k], uint(Nib((wv >> (8 * j)) & 15u)), int(8 * j), 8);
        wq[k + 4] = bitfieldInsert(wq[k + 4], uint(Nib((wv >> (8 * j + 4)) & 15u)), int(8 * j), 8);
      }
#else
      wq[k] = NibblesMinus8(wv, 0);  // four values a few operations, not four extract-inserts
      wq[k + 4] = NibblesMinus8(wv, 4);
#endif
    }
    const float wd = uintBitsToFloat(w[p.w_d_off + wrow * blocks + b]);
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (InBatch(t0 + t)) {
        const uint xb = XTok(t0 + t) * p.x_stride + b * 8;
        int s = 0;
        [[unroll]] for (uint k = 0; k < 8; ++k) s += SDot4(wq[k], xq[xb + k]);
        const float xd = uintBitsToFloat(xq[p.x_d_off + XTok(t0 + t) * blocks + b]);
        acc[t] += float(s) * (wd * xd);
      }
    }
  }
  StoreTile(acc, t0, row);
}
