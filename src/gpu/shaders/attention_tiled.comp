// attention.comp for batches whose tokens come in runs of one sequence (a prefill chunk, a verify
// batch): one workgroup of 256 per (KV head, tile of p.tile batch tokens) (and, split, per chunk
// of positions) stages each block of 64 K or V rows in shared memory once for all the rows it
// computes, the tile's tokens times the KV head's n_head / n_head_kv query heads (at most kRows
// = 32), where attention.comp reads every position's K and V once per (query head, token). At a
// Llama-3.2-1B shape (32 query heads over 8 KV heads: tiles of 8 tokens) a workgroup reads each
// position's K twice and V once for 32 rows where attention.comp reads K and V once a row: ~20x
// less read from the cache.
//
// Every output is attention.comp's bits, so a row does not depend on which kernel a batch took
// (decode rows stay verify rows' bits): each (row, position) score is the same expression
// (attention_pair.glsl), lane l of a row's 64 takes positions t0 + l + 64 k in order as
// attention.comp's invocation l does, the row's max and exp-sum go through attention.comp's
// tree (WorkgroupMax / WorkgroupSum: halves added in the same order), and each value pair sums
// its positions in order. The scores are not kept: pass 1 computes them for the max, pass 2
// again for the exponentials (the same bits), a block at a time in shared memory with its V rows.
// Split (chunk > 0) it writes attention.comp's partial sums for attention_combine.comp; unsplit,
// o and (quant) its Q8_0 blocks (through shared memory to quant_q8.glsl, a token's heads at a
// time) or f16 / bf16 pairs, the bits quantize_q8_0 / quantize_pairs give. Not here: sliding
// windows (each token's first position differs, so lanes would not line up across a tile's
// rows), head_dim > 128.
#version 450
#extension GL_GOOGLE_include_directive : require
#define kGroupSize 256
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Qry { float qry[]; };
layout(std430, binding = 1) readonly buffer C { uint cache[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(std430, binding = 4) readonly buffer Tok { uint tok[]; };
layout(std430, binding = 5) readonly buffer BT { int bt[]; };
layout(std430, binding = 6) writeonly buffer Part { float part[]; };
layout(std430, binding = 7) readonly buffer Sinks { float sinks[]; };
layout(std430, binding = 6) writeonly buffer QOut { uint q[]; };
// attention.comp's push constants (window 0), then the batch's
// token count and the tokens a workgroup takes (tile * n_head / n_head_kv <= kRows).
layout(push_constant) uniform P {
  uint n_head, n_head_kv, head_dim, n_rows, k_off, v_off;
  float scale;
  uint block_size, max_blocks, max_len, row_words, q8;
  uint chunk, n_chunks;
  uint window, has_sinks;
  uint quant, q_d_off;
  uint n, tile;
} p;

const uint kRows = 32;        // rows (query head, token) a workgroup computes
const uint kBlock = 64;       // positions a block: attention.comp's invocations
const uint kRowGroups = kGroupSize / kBlock;  // 4: invocation (g, l) takes rows g, g + 4, ...
const uint kPer = kRows / kRowGroups;         // 8 rows an invocation scores
const uint kMaxWords = 65;    // a staged row: head_dim 128 as f16 pairs, + 1 against bank conflicts
const uint kAcc = kRows * 64 / kGroupSize;    // 8 value pairs an invocation sums (head_dim 128)

shared uint s_kv[kBlock * kMaxWords];  // a block's K or V rows, stride p.row_words | 1
shared float s_e[kRows * kBlock];      // [row][lane]: a block's exponentials, the trees
shared float s_mx[kRows];

#include "attention_pair.glsl"
DEFINE_KV_PAIR(StagedPair, s_kv)
DEFINE_KV_SCORE(StagedScore, StagedPair)

// Q8_0 output: the run's rows, done, in s_kv as f32 bits ([row][head_dim]); value i of o (its
// index in o) is s_kv[i - g_qfirst] for the token being quantized.
uint g_qfirst = 0;
float QIn(uint i) { return uintBitsToFloat(s_kv[i - g_qfirst]); }

#include "quant_q8.glsl"

uint g_hb = 0;      // the KV head's first cache row
uint g_stride = 0;  // words between staged rows

// K or V rows of positions b .. min(b + 64, end) - 1 of sequence seq, words from `off`, into s_kv.
void Stage(uint off, uint seq, uint b, uint end) {
  const uint rows = min(kBlock, end - b), lid = gl_LocalInvocationID.x;
  for (uint w = lid; w < rows * p.row_words; w += kGroupSize) {
    const uint r = w / p.row_words, c = w % p.row_words, pos = b + r;
    const uint row = uint(bt[seq * p.max_blocks + pos / p.block_size]) * p.block_size +
                     pos % p.block_size;
    s_kv[r * g_stride + c] = cache[off + (g_hb + row) * p.row_words + c];
  }
}

// WorkgroupSum's / WorkgroupMax's tree over each row's 64 lanes in s_e (the same additions in
// the same order), the result at s_e[r * 64]. Workgroup-uniform.
void RowTree(uint rows, bool is_max) {
  const uint lid = gl_LocalInvocationID.x, l = lid % kBlock, g = lid / kBlock;
  barrier();
  for (uint s = kBlock / 2; s > 0; s >>= 1) {
    if (l < s) {
      for (uint r = g; r < rows; r += kRowGroups) {
        const uint i = r * kBlock + l;
        s_e[i] = is_max ? max(s_e[i], s_e[i + s]) : s_e[i] + s_e[i + s];
      }
    }
    barrier();
  }
}

// Tokens a .. e - 1 of the batch, all of sequence seq: their rows over this workgroup's positions.
void Run(uint a, uint e, uint seq, uint kvh, uint c, uint nc) {
  const uint lid = gl_LocalInvocationID.x, l = lid % kBlock, g = lid / kBlock;
  const uint group = p.n_head / p.n_head_kv, rows = (e - a) * group, hp = p.head_dim / 2;
  const uint t0 = c * p.chunk;
  uint end = t0;  // past the last position any row takes
  for (uint t = a; t < e; ++t) {
    const uint n_keys = tok[4 * t + 1] + 1;
    end = max(end, p.chunk == 0 ? n_keys : min(t0 + p.chunk, n_keys));
  }
  if (end <= t0) return;  // workgroup-uniform
  // Row r: token a + r / group, query head kvh * group + r % group. Its positions t0 .. T1(r) - 1.
  uint t1[kPer], qb[kPer];
  float mx[kPer], sum[kPer];
  for (uint j = 0; j < kPer; ++j) {
    const uint r = g + kRowGroups * j, t = a + r / group;
    const uint n_keys = r < rows ? tok[4 * t + 1] + 1 : 0;
    t1[j] = p.chunk == 0 ? n_keys : min(t0 + p.chunk, n_keys);
    qb[j] = (t * p.n_head + kvh * group + r % group) * p.head_dim;
    mx[j] = -1.0 / 0.0;
    sum[j] = 0.0;
  }
  // Pass 1: the rows' maxima.
  for (uint b = t0; b < end; b += kBlock) {
    barrier();
    Stage(p.k_off, seq, b, end);
    barrier();
    for (uint j = 0; j < kPer; ++j) {
      if (b + l < t1[j]) mx[j] = max(mx[j], StagedScore(qb[j], l * g_stride));
    }
  }
  barrier();
  for (uint j = 0; j < kPer; ++j) {
    const uint r = g + kRowGroups * j;
    if (r < rows) s_e[r * kBlock + l] = mx[j];
  }
  RowTree(rows, true);
  if (lid < rows) s_mx[lid] = s_e[lid * kBlock];
  // Pass 2: the exponentials (into s_e a block at a time, and each lane's running sum), then
  // each value pair (row r, pair i of invocation k = lid + 256 m) over the block's positions.
  vec2 acc[kAcc];
  for (uint m = 0; m < kAcc; ++m) acc[m] = vec2(0.0);
  for (uint b = t0; b < end; b += kBlock) {
    barrier();
    Stage(p.k_off, seq, b, end);
    barrier();
    for (uint j = 0; j < kPer; ++j) {
      const uint r = g + kRowGroups * j;
      if (r >= rows) break;
      float ev = 0.0;
      if (b + l < t1[j]) {
        ev = exp(StagedScore(qb[j], l * g_stride) - s_mx[r]);
        sum[j] += ev;
      }
      s_e[r * kBlock + l] = ev;
    }
    barrier();
    Stage(p.v_off, seq, b, end);
    barrier();
    for (uint m = 0; m < kAcc; ++m) {
      const uint k = lid + kGroupSize * m, r = k / hp, i = k % hp;
      if (r >= rows) break;
      const uint n_keys = tok[4 * (a + r / group) + 1] + 1;
      const uint stop = min(b + kBlock, p.chunk == 0 ? n_keys : min(t0 + p.chunk, n_keys));
      for (uint t = b; t < stop; ++t) {
        acc[m] += s_e[r * kBlock + t - b] * StagedPair((t - b) * g_stride, i);
      }
    }
  }
  barrier();
  for (uint j = 0; j < kPer; ++j) {
    const uint r = g + kRowGroups * j;
    if (r < rows) s_e[r * kBlock + l] = sum[j];
  }
  RowTree(rows, false);
  for (uint m = 0; m < kAcc; ++m) {
    const uint k = lid + kGroupSize * m, r = k / hp, i = k % hp;
    if (r >= rows) break;
    const uint t = a + r / group, h = kvh * group + r % group, n_keys = tok[4 * t + 1] + 1;
    if ((p.chunk == 0 ? n_keys : min(t0 + p.chunk, n_keys)) <= t0) continue;  // no positions
    const float s = s_e[r * kBlock], rmx = s_mx[r];
    const uint ob = (t * p.n_head + h) * p.head_dim;
    if (p.chunk == 0) {
      const float denom = p.has_sinks != 0 ? s + exp(sinks[h] - rmx) : s;
      const float inv = 1.0 / denom;
      const float o0 = acc[m].x * inv, o1 = acc[m].y * inv;
      o[ob + 2 * i] = o0;
      o[ob + 2 * i + 1] = o1;
      if (p.quant == kActQ8_0) {
        s_kv[r * p.head_dim + 2 * i] = floatBitsToUint(o0);
        s_kv[r * p.head_dim + 2 * i + 1] = floatBitsToUint(o1);
      } else if (p.quant != 0) {
        q[ob / 2 + i] = PackPair(o0, o1, p.quant == kActBF16);
      }
    } else {
      const uint pb = ((t * p.n_head + h) * nc + c) * (p.head_dim + 2);
      part[pb + 2 * i] = acc[m].x;
      part[pb + 2 * i + 1] = acc[m].y;
      if (i == 0) {
        part[pb + p.head_dim] = rmx;
        part[pb + p.head_dim + 1] = s;
      }
    }
  }
  if (p.chunk == 0 && p.quant == kActQ8_0) {  // workgroup-uniform
    barrier();
    // A token's rows are its group of heads, consecutive in o as in s_kv: one range of blocks.
    for (uint t = a; t < e; ++t) {
      const uint first = (t * p.n_head + kvh * group) * p.head_dim;
      g_qfirst = first - (t - a) * group * p.head_dim;
      QuantizeRangeQ8_0(first / 32, (first + group * p.head_dim) / 32, p.q_d_off);
    }
    barrier();  // s_kv is staged again by the next run
  }
}

void main() {
  const uint nc = p.chunk == 0 ? 1 : p.n_chunks;
  const uint kvh = gl_WorkGroupID.x / nc, c = gl_WorkGroupID.x % nc;
  g_hb = kvh * p.n_rows;
  g_stride = p.row_words | 1u;
  QuantLanes();
  const uint first = gl_WorkGroupID.y * p.tile, last = min(first + p.tile, p.n);
  // The tile's runs of one sequence, one after another (workgroup-uniform).
  for (uint a = first; a < last;) {
    const uint seq = tok[4 * a + 3];
    uint e = a + 1;
    while (e < last && tok[4 * e + 3] == seq) ++e;
    Run(a, e, seq, kvh, c, nc);
    a = e;
  }
}
