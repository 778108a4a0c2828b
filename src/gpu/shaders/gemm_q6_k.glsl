// GEMM (gemm.glsl) for Q6_K weights against Q8_K activations (quantize_q8_k.comp), with the
// arithmetic of the CPU's scalar kernel (kernels::DotQ6_K) per (row, token): per block of 256
// the integer sum of scale * (q - 32) * q8, split over the lanes and added with an integer
// subgroupAdd (exact, so in any order), then (d * xd) * isum in f32 (not fused into the add: Unfused), added to the token's sum
// block by block in order. Every lane holds that sum, so a row is the scalar tier's bits
// whatever the subgroup size, and the same for every batch size.
// A lane takes unit u < 32 of a block: half h = u / 16, c = (u / 8) % 2, word lw = u % 8 of l
// (values l = 4 lw + 0..3): the ql word serves k = c (low nibbles) and k = c + 2 (high), the qh
// word 8 h + lw both; 8 values.
// Activations as quantize_q8_k writes them: x_stride words per token (72 a block), the f32 d of
// each block at word x_d_off, token-major.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"
#include "dot4.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { uint xq[]; };

uint W6(uint i) { return w[i]; }
#include "q6_k.glsl"

// The integer dot of 4 6-bit values (nibbles at bit `shift` of qlw's bytes, 2 bits at bit
// `hshift` of qhw's bytes on top, minus 32) with 4 int8 values.
// The four 6-bit values q (0-63) are byte lanes; (q | 0x80) - 32 cannot borrow across bytes and
// ^ 0x80 leaves q - 32 as int8 (as NibblesMinus8 does for 4 bits).
int Dot6(uint qlw, uint shift, uint qhw, uint hshift, uint xv) {
  const uint q = ((qlw >> shift) & 0x0F0F0F0Fu) | (((qhw >> hshift) & 0x03030303u) << 4);
  return SDot4(((q | 0x80808080u) - 0x20202020u) ^ 0x80808080u, xv);
}

void main() {
  const uint row = SubgroupRow();
  if (row >= p.rows || Skip()) return;
  const uint wrow = WRow(row);  // the weight row (its expert's, for gemmx_*)
  const uint blocks = p.cols;
  const uint t0 = TileStart();
  const uint lane = gl_SubgroupInvocationID;
  precise float acc[kTile];
  [[unroll]] for (uint t = 0; t < kTile; ++t) acc[t] = 0.0;
  for (uint b = 0; b < blocks; ++b) {
    const uint base = (wrow * blocks + b) * 52;
    const float d = uintBitsToFloat(w[p.w_d_off + wrow * blocks + b]);
    int part[kTile];  // this lane's share of the block's integer sum per token
    [[unroll]] for (uint t = 0; t < kTile; ++t) part[t] = 0;
    for (uint u = lane; u < 32; u += gl_SubgroupSize) {
      const uint h = u / 16, c = (u / 8) % 2, lw = u % 8;
      const uint qlw = w[base + 16 * h + 8 * c + lw], qhw = w[base + 32 + 8 * h + lw];
      // scales[8 h + l / 16 + 2 k], l / 16 = lw / 4
      const uint si = 8 * h + lw / 4 + 2 * c;
      const int sc_a = bitfieldExtract(int(w[base + 48 + si / 4]), int(8 * (si % 4)), 8);
      const int sc_b = bitfieldExtract(int(w[base + 48 + (si + 4) / 4]), int(8 * ((si + 4) % 4)), 8);
      [[unroll]] for (uint t = 0; t < kTile; ++t) {
        if (InBatch(t0 + t)) {
          // value l + 32 k of half h: word 32 h + 8 k + lw of the block's values
          const uint xb = XTok(t0 + t) * p.x_stride + b * 72 + 32 * h + 8 * c + lw;
          part[t] += sc_a * Dot6(qlw, 0, qhw, 2 * c, xq[xb]) +
                     sc_b * Dot6(qlw, 4, qhw, 2 * c + 4, xq[xb + 16]);
        }
      }
    }
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (InBatch(t0 + t)) {  // uniform: every lane has the same t0
        const int s = subgroupAdd(part[t]);
        const float xd = uintBitsToFloat(xq[p.x_d_off + XTok(t0 + t) * blocks + b]);
        precise const float dd = d * xd;
        acc[t] += Unfused(dd * float(s));
      }
    }
  }
  StoreTileUniform(acc, t0, row);
}
