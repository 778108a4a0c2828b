// Internal to attention_avx2.cc and attention_avx512.cc: the tiled attention kernel written once
// over a vector traits class V (AVX2: 8 lanes, AVX-512: 16 lanes) and compiled in each of those
// files with its ISA's flags. See attention.h for what a chunk is.
//
// Three passes over a chunk, each a register tile over (query rows x keys or columns):
//   1. scores of up to 4 rows at a time: with keys stored transposed ([head_dim][block] per
//      slice), one vector of 8/16 keys per dim is widened once and multiplied into every row
//      (no horizontal sums); Q8_0 keys (row layout) are widened per block and reduced per row;
//   2. softmax statistics per row over the chunk (one max and one exp pass);
//   3. values: each V row widened once per (4 rows x 4 column registers) tile.
// A 4k-position decode step cost ~40M vector operations with one dot product per (row, key)
// and a reduction and rescale per block; this is about 20M, without long dependency chains.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/attention.h"
#include "kernels/blocks.h"

namespace uf::kernels::internal {

// V provides: Reg, kWidth, Zero, Set1, Load, Store, Add, Sub, Mul, Max, Fma, Exp (the Cephes
// polynomial of ops), Keep(x, n, fill) (lanes >= n replaced by fill), ReduceMax, ReduceSum,
// StoreSums(a[kWidth], out) (out[r] = sum of a[r]'s lanes), LoadF16 (kWidth halves widened),
// LoadQ8_0 (kWidth values of a q8_0 block from value `at`), WidenQ8_0 (whole blocks to f32).
template <class V>
class AttentionKernel {
 public:
  using R = typename V::Reg;
  static constexpr int W = V::kWidth;
  static constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Blocks ahead whose K/V slices are prefetched into L2: a slice is 1-4 KB in its own page,
  // which the hardware prefetchers (they stop at page boundaries) do not fetch ahead; at 4k
  // positions this took per-core K/V reads from 8 to 12-16 GB/s.
  static constexpr int64_t kPrefetchBlocks = 4;

  static bool Run(const AttentionKv& kv, const float* q, int64_t nq, const int32_t* visible,
                  float scale, AttentionState out, float* scratch) {
    const int64_t d = kv.head_dim, bs = kv.block_size;
    if (d % W != 0 || bs % 16 != 0) return false;
    if (kv.type == GgmlType::kQ8_0 && (d % kQK8_0 != 0 || kv.k_transposed)) return false;
    if (kv.type != GgmlType::kQ8_0 && !kv.k_transposed) return false;
    const int64_t n_keys = kv.n_keys, stride = kv.n_blocks * bs;
    float* s = scratch;                 // [nq][stride] scores, then weights
    float* kf = scratch + nq * stride;  // [bs][d] widened Q8_0 keys
    const size_t slice = static_cast<size_t>(bs) * GgmlRowBytes(kv.type, d);
    // 1. Scores.
    for (int64_t r0 = 0; r0 < nq; r0 += 4) {
      const int64_t nr = std::min<int64_t>(4, nq - r0);
      const int64_t keys = Visible(visible + r0, nr, n_keys);
      for (int64_t j0 = 0; j0 < keys; j0 += bs) {
        const void* kb = kv.k[j0 / bs];
        if (r0 == 0) {
          // Keys a few blocks ahead (into the next chunk too); this block's values for pass 3.
          const int64_t b = j0 / bs;
          if (b + kPrefetchBlocks < kv.n_blocks + kv.prefetch_blocks) {
            PrefetchL2(kv.k[b + kPrefetchBlocks], slice);
          }
          PrefetchL2(kv.v[b], slice);
        }
        if (kv.type == GgmlType::kQ8_0) {
          const int64_t m = std::min(bs, keys - j0), mp = (m + W - 1) / W * W;
          V::WidenQ8_0(static_cast<const BlockQ8_0*>(kb), kf, m * d / kQK8_0);
          std::fill(kf + m * d, kf + mp * d, 0.0f);
          for (int64_t r = r0; r < r0 + nr; ++r)
            ScoresRows(q + r * d, kf, mp, d, s + r * stride + j0);
        } else {
          for (int64_t k0 = 0; k0 < bs && j0 + k0 < keys; k0 += 16) {
            ScoresTransposed(kv.type, q + r0 * d, nr, kb, k0, bs, d, s + r0 * stride + j0 + k0,
                             stride);
          }
        }
      }
    }
    // 2. Softmax statistics; weights zeroed past each row's visible keys up to the chunk end.
    const R vscale = V::Set1(scale);
    for (int64_t r = 0; r < nq; ++r) {
      int64_t vis = std::min<int64_t>(n_keys, std::max(0, visible[r]));
      const int64_t lo = kv.first != nullptr ? std::max(0, kv.first[r]) : 0;
      if (lo >= vis) vis = 0;  // the whole window is elsewhere: an empty row
      float* sr = s + r * stride;
      out.max[r] = kNegInf;
      out.sum[r] = 0.0f;
      if (vis > 0) {
        std::fill(sr, sr + lo, kNegInf);  // before the window: weight 0
        R vmax = V::Set1(kNegInf);
        for (int64_t j = 0; j < vis; j += W) {
          const R x = V::Keep(V::Mul(V::Load(sr + j), vscale), vis - j, kNegInf);
          V::Store(sr + j, x);
          vmax = V::Max(vmax, x);
        }
        const float mx = V::ReduceMax(vmax);
        const R vm = V::Set1(mx);
        R vsum = V::Zero();
        for (int64_t j = 0; j < vis; j += W) {
          const R p = V::Keep(V::Exp(V::Sub(V::Load(sr + j), vm)), vis - j, 0.0f);
          V::Store(sr + j, p);
          vsum = V::Add(vsum, p);
        }
        out.max[r] = mx;
        out.sum[r] = V::ReduceSum(vsum);
      }
      for (int64_t j = (vis + W - 1) / W * W; j < n_keys; ++j) sr[j] = 0.0f;
    }
    // 3. Values.
    std::fill(out.acc, out.acc + nq * d, 0.0f);
    for (int64_t r0 = 0; r0 < nq; r0 += 4) {
      const int64_t nr = std::min<int64_t>(4, nq - r0);
      const int64_t keys = Visible(visible + r0, nr, n_keys);
      for (int64_t c0 = 0; c0 < d; c0 += 4 * W) {
        const int64_t nc = std::min<int64_t>(4, (d - c0) / W);
        ValuesTile(kv, s + r0 * stride, stride, nr, nc, keys, c0, out.acc + r0 * d);
      }
    }
    return true;
  }

 private:
  static void PrefetchL2(const void* p, size_t bytes) {
    const char* c = static_cast<const char*>(p);
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 1);
  }

  // Keys any of rows [0, nr) sees.
  static int64_t Visible(const int32_t* visible, int64_t nr, int64_t n_keys) {
    int64_t keys = 0;
    for (int64_t r = 0; r < nr; ++r) keys = std::max<int64_t>(keys, visible[r]);
    return std::min(keys, n_keys);
  }

  static R LoadKeys(GgmlType type, const void* p) {
    if (type == GgmlType::kF16) return V::LoadF16(static_cast<const uint16_t*>(p));
    return V::Load(static_cast<const float*>(p));
  }

  // s[r * ld + k] = q[r] . key k for rows [0, nr) and keys [k0, k0 + 16) of a transposed slice
  // ([d][bs]). Two accumulators per (row, key vector) on AVX-512 (even and odd dims) so that
  // even one row keeps 8 FMA chains in flight.
  template <int NR>
  static void ScoresT(GgmlType type, const float* q, const void* kt, int64_t k0, int64_t bs,
                      int64_t d, float* s, int64_t ld) {
    constexpr int KV = 16 / W;           // key vectors per 16 keys
    constexpr int SP = W == 16 ? 2 : 1;  // dim phases
    const size_t esize = type == GgmlType::kF16 ? 2 : 4;
    const auto* base = static_cast<const uint8_t*>(kt);
    R a[NR][KV][SP];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r)
      for (int k = 0; k < KV; ++k)
        for (int p = 0; p < SP; ++p) a[r][k][p] = V::Zero();
    for (int64_t i = 0; i < d; i += SP) {
#pragma GCC unroll 2
      for (int p = 0; p < SP; ++p) {
        R kvec[KV];
#pragma GCC unroll 2
        for (int k = 0; k < KV; ++k) {
          kvec[k] = LoadKeys(type, base + ((i + p) * bs + k0 + k * W) * esize);
        }
#pragma GCC unroll 4
        for (int r = 0; r < NR; ++r) {
          const R qv = V::Set1(q[r * d + i + p]);
#pragma GCC unroll 2
          for (int k = 0; k < KV; ++k) a[r][k][p] = V::Fma(qv, kvec[k], a[r][k][p]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 2
      for (int k = 0; k < KV; ++k) {
        R sum = a[r][k][0];
        if constexpr (SP == 2) sum = V::Add(sum, a[r][k][1]);
        V::Store(s + r * ld + k * W, sum);
      }
    }
  }

  static void ScoresTransposed(GgmlType type, const float* q, int64_t nr, const void* kt,
                               int64_t k0, int64_t bs, int64_t d, float* s, int64_t ld) {
    switch (nr) {
      case 1:
        return ScoresT<1>(type, q, kt, k0, bs, d, s, ld);
      case 2:
        return ScoresT<2>(type, q, kt, k0, bs, d, s, ld);
      case 3:
        return ScoresT<3>(type, q, kt, k0, bs, d, s, ld);
      default:
        return ScoresT<4>(type, q, kt, k0, bs, d, s, ld);
    }
  }

  // out[j] = q . k[j] for j in [0, n), n a multiple of W, k row-major: one accumulator per key
  // row, then a transposing reduction gives W sums in one register.
  static void ScoresRows(const float* q, const float* k, int64_t n, int64_t d, float* out) {
    for (int64_t j = 0; j < n; j += W) {
      R a[W];
#pragma GCC unroll 16
      for (int r = 0; r < W; ++r) a[r] = V::Zero();
      for (int64_t i = 0; i < d; i += W) {
        const R qv = V::Load(q + i);
#pragma GCC unroll 16
        for (int r = 0; r < W; ++r) a[r] = V::Fma(qv, V::Load(k + (j + r) * d + i), a[r]);
      }
      V::StoreSums(a, out + j);
    }
  }

  // Columns [c0, c0 + NC * W) of value row `row` of a slice, widened.
  static R LoadValues(GgmlType type, const void* slice, int64_t row, int64_t d, int64_t col) {
    switch (type) {
      case GgmlType::kF16:
        return V::LoadF16(static_cast<const uint16_t*>(slice) + row * d + col);
      case GgmlType::kQ8_0: {
        const auto* blocks = static_cast<const BlockQ8_0*>(slice) + row * (d / kQK8_0);
        return V::LoadQ8_0(blocks[col / kQK8_0], col % kQK8_0);
      }
      default:
        return V::Load(static_cast<const float*>(slice) + row * d + col);
    }
  }

  // acc[r][c0 + ...] += sum_j w[r][j] v[j][c0 + ...] over keys [0, keys) for NR rows and NC
  // column registers: each value vector widened once for all rows.
  template <int NR, int NC>
  static void ValuesT(const AttentionKv& kv, const float* w, int64_t ld, int64_t keys, int64_t c0,
                      float* acc) {
    const int64_t d = kv.head_dim, bs = kv.block_size;
    R a[NR][NC];
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < NC; ++c) a[r][c] = V::Zero();
    for (int64_t j0 = 0; j0 < keys; j0 += bs) {
      const void* slice = kv.v[j0 / bs];
      const int64_t m = std::min(bs, keys - j0);
      for (int64_t j = 0; j < m; ++j) {
        R vv[NC];
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) vv[c] = LoadValues(kv.type, slice, j, d, c0 + c * W);
#pragma GCC unroll 4
        for (int r = 0; r < NR; ++r) {
          const R p = V::Set1(w[r * ld + j0 + j]);
#pragma GCC unroll 4
          for (int c = 0; c < NC; ++c) a[r][c] = V::Fma(p, vv[c], a[r][c]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < NC; ++c) V::Store(acc + r * d + c0 + c * W, a[r][c]);
  }

  template <int NR>
  static void ValuesRows(const AttentionKv& kv, const float* w, int64_t ld, int64_t nc,
                         int64_t keys, int64_t c0, float* acc) {
    switch (nc) {
      case 1:
        return ValuesT<NR, 1>(kv, w, ld, keys, c0, acc);
      case 2:
        return ValuesT<NR, 2>(kv, w, ld, keys, c0, acc);
      case 3:
        return ValuesT<NR, 3>(kv, w, ld, keys, c0, acc);
      default:
        return ValuesT<NR, 4>(kv, w, ld, keys, c0, acc);
    }
  }

  static void ValuesTile(const AttentionKv& kv, const float* w, int64_t ld, int64_t nr, int64_t nc,
                         int64_t keys, int64_t c0, float* acc) {
    switch (nr) {
      case 1:
        return ValuesRows<1>(kv, w, ld, nc, keys, c0, acc);
      case 2:
        return ValuesRows<2>(kv, w, ld, nc, keys, c0, acc);
      case 3:
        return ValuesRows<3>(kv, w, ld, nc, keys, c0, acc);
      default:
        return ValuesRows<4>(kv, w, ld, nc, keys, c0, acc);
    }
  }
};

}  // namespace uf::kernels::internal
