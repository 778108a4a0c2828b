// GEMM (gemm.glsl) for Q6_K weights against Q8_K activations (quantize_q8_k.comp), with the
// arithmetic of the CPU's scalar kernel (kernels::DotQ6_K) per (row, token): per block of 256
// the integer sum of scale * (q - 32) * q8 (exact, so in any order), then (d * xd) * isum in
// f32, added to the token's sum block by block in order. Every lane holds that sum, so a row is
// the scalar tier's bits whatever the subgroup size, and the same for every batch size.
// A subgroup takes S / 4 blocks of its row at once (kq_cluster.glsl): lane q of a block's 4
// takes half h = q / 2 and c = q % 2: the ql words 16 h + 8 c + k (k < 8: values l = 4 k + 0..3,
// low nibbles for the values 32 c + l, high ones for 32 (c + 2) + l) and the qh words 8 h + k
// (2 bits of each on top). Before, the whole subgroup took one block at a time with two
// subgroup reductions a (block, token).
// Activations as quantize_q8_k writes them: x_stride words per token (72 a block), the f32 d of
// each block at word x_d_off, token-major.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"
#include "dot4.glsl"
#include "kq_cluster.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { uint xq[]; };

uint W6(uint i) { return w[i]; }
#include "q6_k.glsl"

// The integer dot of 4 6-bit values (nibbles at bit `shift` of qlw's bytes, 2 bits at bit
// `hshift` of qhw's bytes on top, minus 32) with 4 int8 values. The four values q (0-63) are
// byte lanes; (q | 0x80) - 32 cannot borrow across bytes and ^ 0x80 leaves q - 32 as int8 (as
// NibblesMinus8 does for 4 bits).
int Dot6(uint qlw, uint shift, uint qhw, uint hshift, uint xv) {
  const uint q = ((qlw >> shift) & 0x0F0F0F0Fu) | (((qhw >> hshift) & 0x03030303u) << 4);
  return SDot4(((q | 0x80808080u) - 0x20202020u) ^ 0x80808080u, xv);
}

int Scale(uint base, uint i) { return bitfieldExtract(int(w[base + 48 + i / 4]), int(8 * (i % 4)), 8); }

void GemmMain() {
  const uint row = SubgroupRow();
  if (row >= p.rows || Skip()) return;
  const uint wrow = WRow(row);  // the weight row (its expert's, for gemmx_*)
  const uint blocks = p.cols;
  const uint t0 = TileStart();
  const uint q = gl_SubgroupInvocationID % kCluster;
  const uint h = q / 2, c = q % 2;
  precise float acc[kTile];
  [[unroll]] for (uint t = 0; t < kTile; ++t) acc[t] = 0.0;
  for (uint b0 = 0; b0 < blocks; b0 += ClusterBlocks()) {
    const uint b = b0 + gl_SubgroupInvocationID / kCluster;  // this lane's block
    const bool valid = b < blocks;
    uint qlw[8], qhw[8];
    int sc_a[2], sc_b[2];  // scales[8 h + k / 4 + 2 c] and 4 later, for k < 4 and k >= 4
    float d = 0.0;
    if (valid) {
      const uint base = (wrow * blocks + b) * 52;
      d = uintBitsToFloat(w[p.w_d_off + wrow * blocks + b]);
      [[unroll]] for (uint k = 0; k < 8; ++k) {
        qlw[k] = w[base + 16 * h + 8 * c + k];
        qhw[k] = w[base + 32 + 8 * h + k];
      }
      [[unroll]] for (uint i = 0; i < 2; ++i) {
        sc_a[i] = Scale(base, 8 * h + i + 2 * c);
        sc_b[i] = Scale(base, 8 * h + i + 2 * c + 4);
      }
    }
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (InBatch(t0 + t)) {  // uniform: every lane has the same t0
        int part = 0;  // this lane's share of the block's integer sum
        float xd = 0.0;
        if (valid) {
          // value l + 32 k of half h: word 32 h + 8 k + lw of the block's values
          const uint xb = XTok(t0 + t) * p.x_stride + b * 72 + 32 * h + 8 * c;
          [[unroll]] for (uint k = 0; k < 8; ++k) {
            part += sc_a[k / 4] * Dot6(qlw[k], 0, qhw[k], 2 * c, xq[xb + k]) +
                    sc_b[k / 4] * Dot6(qlw[k], 4, qhw[k], 2 * c + 4, xq[xb + 16 + k]);
          }
          xd = uintBitsToFloat(xq[p.x_d_off + XTok(t0 + t) * blocks + b]);
        }
        const int s = ClusterAdd(part);
        AddBlocksInOrder(acc[t], (d * xd) * float(s), b0, blocks);
      }
    }
  }
  StoreTileUniform(acc, t0, row);
}
