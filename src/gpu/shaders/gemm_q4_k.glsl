// GEMM (gemm.glsl) for Q4_K weights against Q8_K activations (quantize_q8_k.comp), with the
// arithmetic of the CPU's scalar kernel (kernels::DotQ4_K) per (row, token): per block of 256
// the integer sums sum_j scale_j <q4_j, q8_j> and sum_j min_j * (sum of sub-block j's q8)
// (exact, so in any order), then (d * xd) * sum_scaled - (dmin * xd) * sum_mins in f32, each
// product rounded on its own, added to the token's sum block by block in order. Every lane holds
// that sum, so a row is the scalar tier's bits whatever the subgroup size, and the same for
// every batch size.
// A subgroup takes S / 4 blocks of its row at once (kq_cluster.glsl): lane q of a block's 4
// takes its group q (sub-blocks 2q and 2q + 1): the 8 words of nibbles of the group (word k holds
// values 4k + 0..3, low nibbles sub-block 2q, high ones 2q + 1, the values 32 later), and the
// two sub-blocks' mins. Before, the whole subgroup took one block at a time, with three subgroup
// reductions a (block, token): on an H200 ~60 instructions a block against ~15 now (an
// estimate), which left a Q4_K GEMV bound by issue rather than by its reads.
// Activations as quantize_q8_k writes them: x_stride words per token (72 a block: 64 of int8
// values, 8 of sub-block sums), the f32 d of each block at word x_d_off, token-major.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"
#include "dot4.glsl"
#include "kq_cluster.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { uint xq[]; };

uint W4(uint i) { return w[i]; }
#include "q4_k.glsl"

void GemmMain() {
  const uint row = SubgroupRow();
  if (row >= p.rows || Skip()) return;
  const uint wrow = WRow(row);  // the weight row (its expert's, for gemmx_*)
  const uint blocks = p.cols;
  const uint t0 = TileStart();
  const uint q = gl_SubgroupInvocationID % kCluster;  // this lane's group of its block
  precise float acc[kTile];
  [[unroll]] for (uint t = 0; t < kTile; ++t) acc[t] = 0.0;
  for (uint b0 = 0; b0 < blocks; b0 += ClusterBlocks()) {
    const uint b = b0 + gl_SubgroupInvocationID / kCluster;  // this lane's block
    const bool valid = b < blocks;
    uint qw[8];
    uint sc_lo = 0, m_lo = 0, sc_hi = 0, m_hi = 0;
    float d = 0.0, dmin = 0.0;
    if (valid) {
      const uint base = (wrow * blocks + b) * 35;
      const uint db = p.w_d_off + 2 * (wrow * blocks + b);
      d = uintBitsToFloat(w[db]);
      dmin = uintBitsToFloat(w[db + 1]);
      Q4ScaleMinU(base, 2 * q, sc_lo, m_lo);
      Q4ScaleMinU(base, 2 * q + 1, sc_hi, m_hi);
      [[unroll]] for (uint k = 0; k < 8; ++k) qw[k] = w[base + 8 * q + k];
    }
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (InBatch(t0 + t)) {  // uniform: every lane has the same t0
        ivec2 part = ivec2(0);  // this lane's share of (sum_scaled, sum_mins)
        float xd = 0.0;
        if (valid) {
          const uint xt = XTok(t0 + t) * p.x_stride + b * 72;
          int lo = 0, hi = 0;
          [[unroll]] for (uint k = 0; k < 8; ++k) {
            lo += SDot4(qw[k] & 0x0F0F0F0Fu, xq[xt + 16 * q + k]);
            hi += SDot4((qw[k] >> 4) & 0x0F0F0F0Fu, xq[xt + 16 * q + 8 + k]);
          }
          part.x = int(sc_lo) * lo + int(sc_hi) * hi;
          part.y = int(m_lo) * int(xq[xt + 64 + 2 * q]) + int(m_hi) * int(xq[xt + 65 + 2 * q]);
          xd = uintBitsToFloat(xq[p.x_d_off + XTok(t0 + t) * blocks + b]);
        }
        const ivec2 s = ClusterAdd(part);
        // Lane 0 of a block's cluster forms (d * xd) * sum_scaled, lane 1 (dmin * xd) * sum_mins;
        // their difference is taken from shuffles, so neither product can be fused into it.
        const float prod = q == 0 ? (d * xd) * float(s.x) : (dmin * xd) * float(s.y);
        const uint first = gl_SubgroupInvocationID - q;
        const float term = subgroupShuffle(prod, first) - subgroupShuffle(prod, first + 1);
        AddBlocksInOrder(acc[t], term, b0, blocks);
      }
    }
  }
  StoreTileUniform(acc, t0, row);
}
