// GEMM (gemm.glsl) for Q4_K weights against Q8_K activations (quantize_q8_k.comp), with the
// arithmetic of the CPU's scalar kernel (kernels::DotQ4_K) per (row, token): per block of 256
// the integer sums sum_j scale_j <q4_j, q8_j> and sum_j min_j * (sum of sub-block j's q8), split
// over the lanes and added with an integer subgroupAdd (exact, so in any order), then
// (d * xd) * sum_scaled - (dmin * xd) * sum_mins in f32 without fused multiply-adds (Unfused), added to the
// token's sum block by block in order. Every lane holds that sum, so a row is the scalar tier's
// bits whatever the subgroup size, and the same for every batch size.
// A lane takes words of the block's 32 words of nibbles: word i holds values 4 (i % 8) + 0..3 of
// group i / 8 (low nibbles: sub-block 2 g; high: 2 g + 1, the values 32 later).
// Activations as quantize_q8_k writes them: x_stride words per token (72 a block: 64 of int8
// values, 8 of sub-block sums), the f32 d of each block at word x_d_off, token-major.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"
#include "dot4.glsl"

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { uint xq[]; };

uint W4(uint i) { return w[i]; }
#include "q4_k.glsl"

// The integer dot of 4 unsigned nibbles (at bit `shift` of each byte of qw: 0-15, so the same
// as int8 lanes) with 4 int8 values.
int Dot4(uint qw, uint shift, uint xv) { return SDot4((qw >> shift) & 0x0F0F0F0Fu, xv); }

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
    const uint base = (wrow * blocks + b) * 35;
    const uint db = p.w_d_off + 2 * (wrow * blocks + b);
    const float d = uintBitsToFloat(w[db]), dmin = uintBitsToFloat(w[db + 1]);
    ivec2 part[kTile];  // this lane's share of (sum_scaled, sum_mins) per token
    [[unroll]] for (uint t = 0; t < kTile; ++t) part[t] = ivec2(0);
    for (uint i = lane; i < 32; i += gl_SubgroupSize) {
      const uint g = i / 8, qw = w[base + i];
      uint sc_lo, m_lo, sc_hi, m_hi;
      Q4ScaleMinU(base, 2 * g, sc_lo, m_lo);
      Q4ScaleMinU(base, 2 * g + 1, sc_hi, m_hi);
      [[unroll]] for (uint t = 0; t < kTile; ++t) {
        if (InBatch(t0 + t)) {
          const uint xb = XTok(t0 + t) * p.x_stride + b * 72 + 16 * g + i % 8;
          part[t].x += int(sc_lo) * Dot4(qw, 0, xq[xb]) + int(sc_hi) * Dot4(qw, 4, xq[xb + 8]);
        }
      }
    }
    for (uint j = lane; j < 8; j += gl_SubgroupSize) {
      uint sc, m;
      Q4ScaleMinU(base, j, sc, m);
      [[unroll]] for (uint t = 0; t < kTile; ++t) {
        if (InBatch(t0 + t)) {
          part[t].y += int(m) * int(xq[XTok(t0 + t) * p.x_stride + b * 72 + 64 + j]);
        }
      }
    }
    [[unroll]] for (uint t = 0; t < kTile; ++t) {
      if (InBatch(t0 + t)) {  // uniform: every lane has the same t0
        const ivec2 s = subgroupAdd(part[t]);
        const float xd = uintBitsToFloat(xq[p.x_d_off + XTok(t0 + t) * blocks + b]);
        precise const float dd = d * xd, dm = dmin * xd;
        // (d * xd) * sum_scaled - (dmin * xd) * sum_mins, each product rounded on its own
        acc[t] += Unfused(Unfused(dd * float(s.x)) - Unfused(dm * float(s.y)));
      }
    }
  }
  StoreTileUniform(acc, t0, row);
}
