#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/blocks.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

namespace uf::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float KeyAt(const AttentionKv& kv, const void* slice, int64_t j, int64_t i) {
  const int64_t d = kv.head_dim, bs = kv.block_size;
  const int64_t at = kv.k_transposed ? i * bs + j : j * d + i;
  switch (kv.type) {
    case GgmlType::kF16:
      return Fp16ToFp32(static_cast<const uint16_t*>(slice)[at]);
    case GgmlType::kQ8_0: {
      const BlockQ8_0& b = static_cast<const BlockQ8_0*>(slice)[at / kQK8_0];
      return Fp16ToFp32(b.d) * b.qs[at % kQK8_0];
    }
    default:
      return static_cast<const float*>(slice)[at];
  }
}

float ValueAt(const AttentionKv& kv, const void* slice, int64_t j, int64_t i) {
  AttentionKv rows = kv;
  rows.k_transposed = false;
  return KeyAt(rows, slice, j, i);
}

}  // namespace

size_t AttentionScratchFloats(int64_t nq, int64_t head_dim, int64_t block_size,
                              int64_t chunk_keys) {
  return static_cast<size_t>(nq * chunk_keys + block_size * head_dim);
}

void AttendChunk(const AttentionKv& kv, const float* q, int64_t nq, const int32_t* visible,
                 float scale, AttentionState out, float* scratch) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      if (internal::AttendChunkAvx512(kv, q, nq, visible, scale, out, scratch)) return;
      [[fallthrough]];
    case Isa::kAvx2:
      if (internal::AttendChunkAvx2(kv, q, nq, visible, scale, out, scratch)) return;
      [[fallthrough]];
    case Isa::kScalar:
      internal::AttendChunkScalar(kv, q, nq, visible, scale, out, scratch);
  }
}

// The reference loop: the same three passes (scores, softmax statistics, values) with std::exp.
void internal::AttendChunkScalar(const AttentionKv& kv, const float* q, int64_t nq,
                                 const int32_t* visible, float scale, AttentionState out,
                                 float* scratch) {
  const int64_t d = kv.head_dim, bs = kv.block_size;
  float* s = scratch;  // [n_keys] one row's scores
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t vis = std::min<int64_t>(kv.n_keys, std::max(0, visible[r]));
    const int64_t lo = kv.first != nullptr ? std::max(0, kv.first[r]) : 0;
    float* acc = out.acc + r * d;
    std::fill(acc, acc + d, 0.0f);
    out.max[r] = kNegInf;
    out.sum[r] = 0.0f;
    if (vis <= lo) continue;
    const float* qr = q + r * d;
    for (int64_t j = lo; j < vis; ++j) {
      float dot = 0.0f;
      for (int64_t i = 0; i < d; ++i) dot += qr[i] * KeyAt(kv, kv.k[j / bs], j % bs, i);
      s[j] = dot * scale;
      out.max[r] = std::max(out.max[r], s[j]);
    }
    for (int64_t j = lo; j < vis; ++j) {
      const float p = std::exp(s[j] - out.max[r]);
      out.sum[r] += p;
      for (int64_t i = 0; i < d; ++i) acc[i] += p * ValueAt(kv, kv.v[j / bs], j % bs, i);
    }
  }
}

void MergeAttention(int64_t nq, int64_t head_dim, AttentionState part, AttentionState into) {
  for (int64_t r = 0; r < nq; ++r) {
    if (part.max[r] == kNegInf) continue;
    float* acc = into.acc + r * head_dim;
    const float* pacc = part.acc + r * head_dim;
    if (into.max[r] == kNegInf) {
      into.max[r] = part.max[r];
      into.sum[r] = part.sum[r];
      std::memcpy(acc, pacc, head_dim * sizeof(float));
      continue;
    }
    const float m = std::max(into.max[r], part.max[r]);
    const float a = std::exp(into.max[r] - m), b = std::exp(part.max[r] - m);
    into.max[r] = m;
    into.sum[r] = into.sum[r] * a + part.sum[r] * b;
    for (int64_t i = 0; i < head_dim; ++i) acc[i] = acc[i] * a + pacc[i] * b;
  }
}

void FinishAttention(int64_t nq, int64_t head_dim, AttentionState state, float* out) {
  for (int64_t r = 0; r < nq; ++r) {
    const float inv = state.sum[r] > 0.0f ? 1.0f / state.sum[r] : 0.0f;
    const float* acc = state.acc + r * head_dim;
    for (int64_t i = 0; i < head_dim; ++i) out[r * head_dim + i] = acc[i] * inv;
  }
}

}  // namespace uf::kernels
