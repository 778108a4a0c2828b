// Attention over a paged K/V cache as tiled kernels with an online softmax (flash-attention
// style). A task is a group of query rows that share one KV head (the query heads of a GQA group,
// for up to a few consecutive tokens of one sequence) against one chunk of that head's cached
// keys: every K and V block is read from memory once for all the rows and widened to f32 once
// (into L1-resident scratch), the scores never leave a block-sized buffer, and each row keeps a
// running (max, sum, unnormalized output).
//
// The keys of a sequence are cut into chunks of kAttentionChunk positions; a row's result is,
// by definition, the chunk partials merged in chunk order (MergeAttention). Whether one thread
// walks all chunks or many threads take one chunk each (flash-decoding), the arithmetic is the
// same, so a row comes out bit-identical whichever rows, threads or batch it ran with
// (speculative verify rows must equal decode steps).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/types.h"

namespace uf::kernels {

// Cached positions per chunk (a multiple of every supported block size: 1..512, powers of two).
inline constexpr int64_t kAttentionChunk = 512;

// One KV head's slices of the blocks of a chunk.
struct AttentionKv {
  GgmlType type = GgmlType::kF16;  // kF32, kF16 or kQ8_0 (head_dim a multiple of 32)
  int64_t head_dim = 0;
  int64_t block_size = 0;  // rows per slice
  // [n_blocks] -> keys in `type`: [head_dim][block_size] when k_transposed (F32 and F16 caches
  // with blocks of a multiple of 16), else [block_size] rows
  const void* const* k;
  bool k_transposed = false;
  const void* const* v;         // [n_blocks] -> [block_size] value rows
  int64_t n_blocks = 0;         // blocks of this chunk
  int64_t n_keys = 0;           // valid positions from the first block's first row (<= n_blocks*bs)
  int64_t prefetch_blocks = 0;  // blocks readable past the chunk (k[n_blocks..]) to prefetch
  // Sliding-window attention: row r sees keys [first[r], visible[r]) of the chunk; null = from 0.
  const int32_t* first = nullptr;
};

// Per-row state of an online softmax over scaled scores s = scale * q.k:
// max[r] = max s, sum[r] = sum e^(s - max), acc[r][:] = sum e^(s - max) v. An empty state has
// max = -inf, sum = 0, acc = 0.
struct AttentionState {
  float* max;  // [nq]
  float* sum;  // [nq]
  float* acc;  // [nq][head_dim]
};

// Floats of AttendChunk's scratch for nq rows over chunks of up to chunk_keys positions.
size_t AttentionScratchFloats(int64_t nq, int64_t head_dim, int64_t block_size, int64_t chunk_keys);

// Sets `out` to the partial of the chunk: rows q[r] (nq x head_dim floats) see keys
// [0, visible[r]) of the chunk (clipped to n_keys; 0 or less = none, leaving an empty state).
// With the best ISA; head dims the SIMD tiers do not cover use the scalar loop.
void AttendChunk(const AttentionKv& kv, const float* q, int64_t nq, const int32_t* visible,
                 float scale, AttentionState out, float* scratch);

// into = merge(into, part), row by row (in place; an empty part leaves `into` unchanged, an
// empty `into` becomes `part` exactly).
void MergeAttention(int64_t nq, int64_t head_dim, AttentionState part, AttentionState into);

// out[r] = acc[r] / sum[r] (0 for a row that saw no key).
void FinishAttention(int64_t nq, int64_t head_dim, AttentionState state, float* out);

namespace internal {
void AttendChunkScalar(const AttentionKv& kv, const float* q, int64_t nq, const int32_t* visible,
                       float scale, AttentionState out, float* scratch);
// Return false (doing nothing) for head dims they do not cover.
bool AttendChunkAvx2(const AttentionKv& kv, const float* q, int64_t nq, const int32_t* visible,
                     float scale, AttentionState out, float* scratch);
bool AttendChunkAvx512(const AttentionKv& kv, const float* q, int64_t nq, const int32_t* visible,
                       float scale, AttentionState out, float* scratch);
}  // namespace internal

}  // namespace uf::kernels
